"""Facts about the wrapped encoder (decoder-only or not, local or hub, its layers) and the pooling defaults they set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as hf_init
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    MODEL_MAPPING,
)

from attnpool.model.sources import DEFAULT_HINT, check_hub_source, missing_subfolder
from attnpool.pooling import get_pooler_class


def is_decoder_only(config: PretrainedConfig) -> bool:
    """Whether an encoder config describes a causal (decoder-only) architecture rather than a bidirectional one."""
    model_type = getattr(config, "model_type", "")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def check_encoder_only(config: PretrainedConfig, given: str) -> None:
    """Refuse an encoder-decoder architecture (T5, BART...): attnpool pools an encoder's token vectors.

    ``AutoModel`` builds the whole encoder-decoder from its config: T5's failed at the first forward ("You must
    specify exactly one of input_ids or inputs_embeds"), BART's ran and pooled its decoder's output. Told by
    ``config.is_encoder_decoder`` or a sequence-to-sequence model type (a ``T5EncoderModel`` saves its config with
    ``is_encoder_decoder`` false, and ``AutoModel`` still builds a ``T5Model`` from it).

    Raises:
        ValueError: An encoder-decoder, with the model type and what to use instead.
    """
    model_type = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False) or model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(
            f"{given} is an encoder-decoder model (model_type {model_type!r}), which attnpool "
            "does not support: it builds the whole encoder-decoder, whose output is the decoder's. Use an "
            "encoder-only model, e.g. bert, roberta, deberta-v2, electra or modernbert"
        )


def check_reloadable(encoder: PreTrainedModel) -> None:
    """Refuse a built encoder of a class that ``AutoModel`` does not build from its config.

    Only the encoder's config is saved, and loading rebuilds the encoder with ``AutoModel.from_config``: a
    ``BertForMaskedLM`` came back as a ``BertModel``, and the folder did not load. (An encoder-decoder's
    ``T5EncoderModel`` is refused before, by :func:`check_encoder_only`.)
    """
    try:
        expected = MODEL_MAPPING[type(encoder.config)]
    except KeyError:  # a config AutoModel does not know: from_pretrained will say so
        return
    if not isinstance(encoder, expected):
        raise ValueError(f"from_encoder: a {type(encoder).__name__} is saved as its config, which AutoModel builds "
                         f"back as a {expected.__name__}: the saved model would not load. Pass a {expected.__name__} "
                         f"(e.g. the model's .base_model), or the encoder's name, folder or config, from which "
                         f"from_encoder builds a {expected.__name__}")


def check_gradient_checkpointing(encoder: PreTrainedModel) -> None:
    """Refuse gradient (activation) checkpointing on an encoder that does not support it (ALBERT, MPNet, XLNet).

    transformers' own error named the attnpool model and asked its developers to add the support.
    """
    if not getattr(encoder, "supports_gradient_checkpointing", False):
        raise ValueError(f"the encoder {type(encoder).__name__} does not support gradient checkpointing: turn it off "
                         "(gradient_checkpointing=False, or leave out --gradient-checkpointing in attnpool train), or "
                         "use an encoder that supports it (e.g. bert, roberta, deberta-v2)")


def looks_like_local_path(name: str) -> bool:
    """Hub names are ``name`` or ``org/name``; anything else with a path separator is meant as a local path."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or os.path.isabs(name)


def check_encoder_reachable(name: str, options: dict[str, Any] | None = None) -> None:
    """:func:`check_encoder_source`, then one quick look at the Hub for a hub name not in the local cache.

    What ``from_encoder`` and, before it, ``attnpool train`` and ``demo`` check first: a mistyped folder read as a hub
    name, or a name the Hub cannot be reached for, failed in the tokenizer with the hub's message (after a minute and
    a half of retries). ``options``: the ``from_pretrained`` options that say where the files are (``revision``...).
    A ``subfolder`` that a local folder lacks is named with what the folder holds (transformers said "Unrecognized
    model ... Should have a `model_type` key").
    """
    check_encoder_source(name)
    folder, subfolder = Path(os.path.expanduser(name)), (options or {}).get("subfolder")
    if subfolder and folder.is_dir() and not (folder / subfolder).is_dir():
        raise missing_subfolder(folder, subfolder)
    check_hub_source(name, options or {})


def check_encoder_source(name: str) -> None:
    """Refuse a path that does not exist (a hub name is left to the hub), saying what a valid source is."""
    if not os.path.exists(name) and looks_like_local_path(name):
        raise FileNotFoundError(
            f"encoder {name!r}: no such folder (resolved to {os.path.abspath(os.path.expanduser(name))}); give a "
            "folder holding the encoder's config.json and model.safetensors, a Hugging Face hub name (org/model, "
            f"such as 'microsoft/deberta-v3-large'), {DEFAULT_HINT}"
        )


def encoder_layers(encoder: PreTrainedModel) -> nn.ModuleList:
    """The encoder's list of transformer blocks (``encoder.layer``, ``layers``, ``h``... found by its length)."""
    num_layers = getattr(encoder.config, "num_hidden_layers", None)
    for _, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(
        f"cannot find the list of {num_layers} transformer layers in {type(encoder).__name__}; what works per "
        "layer (freeze_layers, reinit_layers, llrd below 1) is not supported for this encoder: leave it out"
    )


def parameter_depths(encoder: nn.Module, layers: nn.ModuleList) -> dict[int, int]:
    """Each encoder parameter's depth below the top, by ``id``: ``L - 1 - i`` in layer ``i`` of ``L`` layers.

    What lies outside the layer list gets the embeddings' depth ``L`` when it comes before the last layer (GPT-2's
    ``wpe``, ELECTRA's ``embeddings_project``), 0 after it (ModernBERT's ``final_norm``, GPT-2's ``ln_f``, Llama's
    ``norm``: they read the top layer's output). DeBERTa's relative position embeddings and their norm come after
    the layers in the module but feed every layer: the embeddings' depth. DeBERTa-v2's convolution
    (``encoder.conv``, with ``conv_kernel_size > 0``) runs on the first layer's output: the first layer's depth.
    The rule of layer-wise learning-rate decay (:func:`attnpool.training.optim.parameter_groups`).
    """
    num = len(layers)
    depths = {id(p): num - 1 - i for i, layer in enumerate(layers) for p in layer.parameters()}
    named = list(encoder.named_parameters())
    last = max((i for i, (_, p) in enumerate(named) if id(p) in depths), default=len(named))
    # relative position tables (DeBERTa's rel_embeddings, MPNet's relative_attention_bias) feed every layer
    relative = {n.rsplit(".", 2)[0] for n, _ in named if "rel_embeddings." in n or "relative_attention_bias." in n}
    for i, (name, p) in enumerate(named):
        if id(p) in depths:
            continue
        if name.startswith("encoder.conv."):
            depths[id(p)] = num - 1
        else:
            depths[id(p)] = 0 if i > last and name.rsplit(".", 2)[0] not in relative else num
    return depths


def freeze_bottom(encoder: PreTrainedModel, num_layers: int | None) -> None:
    """Freeze what feeds the first ``num_layers`` layers: the embeddings (:func:`parameter_depths`), those layers.

    ``None``: the embeddings alone; where no layer list is found, the ``embeddings`` module (or the input embeddings).
    What reads the top layer's output (a final norm) keeps training, all layers frozen too.
    """
    try:
        layers = encoder_layers(encoder)
    except ValueError:
        if num_layers is not None:
            raise
        (getattr(encoder, "embeddings", None) or encoder.get_input_embeddings()).requires_grad_(False)
        return
    num_layers = num_layers or 0
    if not 0 <= num_layers <= len(layers):
        raise ValueError(f"freeze_layers: num_layers must be in [0, {len(layers)}], got {num_layers}")
    depths, inside = parameter_depths(encoder, layers), {id(p) for p in layers.parameters()}
    for p in encoder.parameters():
        if depths[id(p)] >= len(layers) - num_layers and (id(p) in inside or depths[id(p)] > 0):
            p.requires_grad_(False)


def reinit_top(encoder: PreTrainedModel, num_layers: int) -> None:
    """Re-initialise the top ``num_layers`` layers with the encoder's own ``_init_weights``, as transformers does.

    Children before parents (``initialize_weights``' order): GPT-2 and ModernBERT set the scaled output projections
    at the parent module, which a child's plain init visited after it would overwrite.
    """
    layers = encoder_layers(encoder)
    if not 0 <= num_layers <= len(layers):
        raise ValueError(f"reinit_top_layers: num_layers must be in [0, {len(layers)}], got {num_layers}")
    with torch.no_grad(), hf_init.guard_torch_init_functions():
        for layer in list(layers)[len(layers) - num_layers :]:
            # Loaded weights are flagged as initialised, and transformers' init functions skip them.
            for tensor in [*layer.parameters(), *layer.buffers()]:
                if hasattr(tensor, "_is_hf_initialized"):
                    tensor._is_hf_initialized = False
            layer.apply(encoder._init_weights)



def as_initialised(encoder: PreTrainedModel) -> PreTrainedModel:
    """Flag every module of a built encoder initialised, so that the model wrapping it keeps its weights.

    The wrapper's ``post_init`` runs transformers' ``initialize_weights`` over the whole tree, which skips only
    the modules flagged ``_is_hf_initialized``: a module set after the encoder was built (an
    ``nn.Embedding.from_pretrained(vectors)`` swapped in) was drawn anew. Flags, not a copy of the weights:
    a large encoder's memory is not doubled.
    """
    for module in encoder.modules():
        module._is_hf_initialized = True
    return encoder

# The attention pooler's start for inputs that join two or more texts (a pair, a template) on a bidirectional
# encoder: 90% of the weight on the first token ([CLS], <s>), the rest spread evenly. Measured by
# benchmarks/quality.py (docs/quality.md): on PPPM pairs it beats both the mean-pooling start and cls pooling; on
# single sentences the mean-pooling start stays ahead, so those keep it. Poolers not listed here, decoder-only
# encoders and an explicit ``cls_share`` keep the pooler's own default (no prior).
PAIR_CLS_SHARE = 0.9
CLS_PRIOR_POOLERS = ("attention",)


def encoder_pooling_defaults(spec: dict[str, Any], config: PretrainedConfig, *, paired: bool) -> dict[str, Any]:
    """``spec`` with the recipe's defaults for this encoder and input filled in where the caller gave none.

    With ``paired`` inputs (two or more texts joined, as a cross-encoder reads them) the ``attention`` pooler gets
    ``cls_share=PAIR_CLS_SHARE`` on a bidirectional encoder: the relation between the texts is computed by the
    encoder's own attention and gathered at its first token, so the pooler starts near ``cls`` pooling and moves
    weight to other tokens as far as the loss pays for it. Single texts keep the mean-pooling start.
    ``cls_share`` in the options (``0``: the mean-pooling start) always wins.
    """
    try:  # by the registered name: "Attention" and "attention_pooling" are the attention pooler too
        name = get_pooler_class(str(spec.get("type", ""))).name
    except ValueError:
        return spec  # an unknown name: refused, with the valid ones, when the pooler is built
    if paired and name in CLS_PRIOR_POOLERS and "cls_share" not in spec and not is_decoder_only(config):
        return {**spec, "cls_share": PAIR_CLS_SHARE}
    return spec


# Config fields of the encoder body's dropout across architectures (BERT, DeBERTa, RoBERTa: the first two; DistilBERT
# and BART: dropout and attention_dropout; ModernBERT: embedding, attention and mlp; T5: dropout_rate; GPT-2: the
# *_pdrop). Heads' fields (classifier_dropout, pooler_dropout...) are not here: attnpool's head has its own.
ENCODER_DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "hidden_dropout", "dropout",
                          "attention_dropout", "activation_dropout", "embedding_dropout", "mlp_dropout", "dropout_rate",
                          "resid_pdrop", "embd_pdrop", "attn_pdrop")


def set_encoder_dropout(config: PretrainedConfig, p: float) -> list[str]:
    """Set every dropout probability of the encoder's body in ``config`` to ``p``; returns the fields set.

    Done on the config before the encoder is built, since its modules read the probabilities when they are made.

    Raises:
        ValueError: ``p`` outside [0, 1), or a config with none of :data:`ENCODER_DROPOUT_FIELDS`.
    """
    if not 0 <= p < 1:
        raise ValueError(f"encoder_dropout must be in [0, 1), got {p}")
    fields = [name for name in ENCODER_DROPOUT_FIELDS  # numbers only: a boolean field named dropout is a switch
              if isinstance(value := getattr(config, name, None), (int, float)) and not isinstance(value, bool)]
    if not fields:
        model_type = getattr(config, "model_type", "") or type(config).__name__
        raise ValueError(f"encoder_dropout: the {model_type} config has none of the dropout fields attnpool knows "
                         f"({', '.join(ENCODER_DROPOUT_FIELDS)}); leave encoder_dropout unset and set the encoder's "
                         "own dropout fields in its config.json")
    for name in fields:
        setattr(config, name, float(p))
    return fields


def match_encoder(model: nn.Module, encoder: PreTrainedModel) -> None:
    """Move what surrounds ``encoder`` in ``model``, pooler and head, to its device and half (or float64) dtype.

    ``from_pretrained(dtype=torch.bfloat16)`` loads them so (their logits are float32 all the same); left float32
    around a bf16 encoder they failed at the first forward (``mat1 and mat2 must have the same dtype``), and left on
    the CPU around an encoder already on a GPU (``from_encoder(encoder.cuda())``), at the pooler's first matrix
    product. The encoder itself is left as it is (modules it keeps in float32 stay so). One placed by accelerate
    (``device_map``: spread over devices, or offloaded, its parameters partly on ``meta``) leaves the pooler and head
    where they are: its hook hands the hidden states back on the inputs' device, which is the caller's to choose.
    """
    dtype = encoder.dtype
    dtype = dtype if dtype.is_floating_point and dtype != torch.float32 else None
    device = None if getattr(encoder, "hf_device_map", None) else encoder.device
    if device is None and dtype is None:
        return

    def place(module: nn.Module) -> None:
        for child in module.children():
            if child is encoder:
                continue
            if any(m is encoder for m in child.modules()):
                place(child)
            else:
                child.to(device=device, dtype=dtype)

    place(model)


def position_limit(model: nn.Module) -> int | None:
    """The most tokens ``model``'s encoder takes in one row; ``None`` when its position embeddings set no limit.

    An encoder with absolute position embeddings (BERT, RoBERTa, ELECTRA, GPT-2...) fails on a sequence longer than
    its table. RoBERTa-style embeddings count positions from ``pad_token_id + 1``, so they read
    ``max_position_embeddings - pad_token_id - 1`` tokens (514 - 2 = 512). Encoders whose positions are relative or
    rotary (DeBERTa-v3, ModernBERT, Llama) have no such limit. ``model``: an attnpool model or a bare encoder's owner.
    """
    base = getattr(model, "attnpool", model)
    return encoder_position_limit(getattr(base, "encoder", None), getattr(base, "positions_from_mask", False))


def encoder_position_limit(encoder: nn.Module | None, positions_from_mask: bool = False) -> int | None:
    """:func:`position_limit` of a bare encoder; ``positions_from_mask``: attnpool computes a decoder's positions."""
    embeddings = getattr(encoder, "embeddings", None)
    table = getattr(embeddings, "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        table = getattr(encoder, "wpe", None)  # GPT-2
        if not isinstance(table, nn.Embedding):
            return None
        return table.num_embeddings
    offset = getattr(embeddings, "padding_idx", None)  # RoBERTa-style: positions from pad_token_id + 1
    if isinstance(offset, int) and offset >= 0 and not positions_from_mask:
        return table.num_embeddings - offset - 1
    return table.num_embeddings


def check_pooling_layers(layers: str | list[int], depth: int | None) -> None:
    """Refuse indices of ``pooling_layers`` outside ``hidden_states`` (``depth + 1`` entries, 0 the embeddings)."""
    if isinstance(layers, str):
        return
    if not layers:
        raise ValueError("pooling_layers is empty: give 'last', 'all' or at least one index into hidden_states")
    if depth is not None and (outside := [i for i in layers if not -(depth + 1) <= i <= depth]):
        raise ValueError(f"pooling_layers {layers}: {outside} outside [{-(depth + 1)}, {depth}], the indices into the "
                         f"{depth + 1} hidden states of this {depth}-layer encoder (0 the embedding output, {depth} "
                         "or -1 the last layer)")
