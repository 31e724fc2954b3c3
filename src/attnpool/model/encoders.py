"""Facts about the wrapped encoder (decoder-only or not, local or hub, its layers) and the pooling defaults they set."""

from __future__ import annotations

import os
from typing import Any

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from attnpool.pooling import get_pooler_class


def is_decoder_only(config: PretrainedConfig) -> bool:
    """Whether an encoder config describes a causal (decoder-only) architecture rather than a bidirectional one."""
    model_type = getattr(config, "model_type", "")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def looks_like_local_path(name: str) -> bool:
    """Hub names are ``name`` or ``org/name``; anything else with a path separator is meant as a local path."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or os.path.isabs(name)


def check_encoder_source(name: str) -> None:
    """Refuse a path that does not exist (a hub name is left to the hub), saying what a valid source is."""
    if not os.path.exists(name) and looks_like_local_path(name):
        raise FileNotFoundError(
            f"encoder path {name!r} does not exist; give a folder holding the encoder's config.json and "
            "model.safetensors, or a Hugging Face hub name such as 'microsoft/deberta-v3-large'"
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
