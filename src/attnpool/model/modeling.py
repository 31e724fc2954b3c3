"""Encoder + attnpool pooler (+ task head) as native Hugging Face models.

``AttnPoolModel`` returns the pooled embedding; ``AttnPoolForSequenceClassification`` adds a regression or
classification head with the call conventions of transformers' ``*ForSequenceClassification``. Both save with
``save_pretrained`` into one folder (``config.json`` + ``model.safetensors``) and load with ``from_pretrained`` or
the Auto classes once ``attnpool`` is imported.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
from transformers.utils import ModelOutput

from attnpool.model.configuration import AttnPoolConfig, encoder_hidden_size
from attnpool.model.heads import PredictionHead
from attnpool.model.losses import compute_loss, resolve_problem_type
from attnpool.pooling import Pooler, build_pooler


@dataclass
class AttnPoolModelOutput(ModelOutput):
    """Output of :class:`AttnPoolModel`.

    Attributes:
        pooler_output: ``(B, output_dim)`` pooled embeddings.
        pooling_weights: ``(B, T)`` or ``(B, heads, T)`` token weights, when asked for and the pooler has them.
        last_hidden_state: ``(B, T, H)`` the encoder's last layer.
        hidden_states: All layers' hidden states, when ``output_hidden_states`` is set.
        attentions: The encoder's attention maps, when ``output_attentions`` is set.
        auxiliary_loss: The pooler's regulariser (:meth:`~attnpool.pooling.Pooler.auxiliary_loss`, e.g. the
            multi-head penalty) in training mode, ``None`` otherwise or when it has none; the task model adds it
            to its loss.
    """

    pooler_output: Tensor | None = None
    pooling_weights: Tensor | None = None
    last_hidden_state: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    auxiliary_loss: Tensor | None = None


@dataclass
class AttnPoolSequenceClassifierOutput(ModelOutput):
    """Output of :class:`AttnPoolForSequenceClassification`, a ``SequenceClassifierOutput`` plus pooling weights.

    Attributes:
        loss: The task loss, when ``labels`` are given.
        logits: ``(B, num_labels)``; after the sigmoid when ``config.output_activation == "sigmoid"``.
        pooling_weights: Token weights, when ``return_pooling_weights=True``.
        pooler_output: ``(B, output_dim)`` pooled embeddings, when ``return_pooling_weights=True``.
        hidden_states: As in transformers, when ``output_hidden_states`` is set.
        attentions: As in transformers, when ``output_attentions`` is set.
    """

    loss: Tensor | None = None
    logits: Tensor | None = None
    pooling_weights: Tensor | None = None
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


def is_decoder_only(config: PretrainedConfig) -> bool:
    """Whether an encoder config describes a causal (decoder-only) architecture rather than a bidirectional one."""
    model_type = getattr(config, "model_type", "")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _looks_like_local_path(name: str) -> bool:
    """Hub names are ``name`` or ``org/name``; anything else with a path separator is meant as a local path."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or os.path.isabs(name)


def _check_encoder_source(name: str) -> None:
    if not os.path.exists(name) and _looks_like_local_path(name):
        raise FileNotFoundError(
            f"encoder path {name!r} does not exist; give a folder holding the encoder's config.json and "
            "model.safetensors, or a Hugging Face hub name such as 'microsoft/deberta-v3-large'"
        )


def _encoder_layers(encoder: PreTrainedModel) -> nn.ModuleList:
    """The encoder's list of transformer blocks (``encoder.layer``, ``layers``, ``h``... found by its length)."""
    num_layers = getattr(encoder.config, "num_hidden_layers", None)
    for _, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(
        f"cannot find the list of {num_layers} transformer layers in {type(encoder).__name__}; freezing or "
        "re-initialising layers is not supported for this encoder"
    )


class AttnPoolPreTrainedModel(PreTrainedModel):
    """Base class: config class, weight initialisation, safetensors-only loading, gradient checkpointing."""

    config_class = AttnPoolConfig
    base_model_prefix = "attnpool"
    supports_gradient_checkpointing = True
    # The loss is a per-batch mean that ignores ``num_items_in_batch``. Without this the Trainer, seeing the forward's
    # ``**kwargs``, would scale the loss by the number of processes and skip the division by the gradient
    # accumulation steps: gradients 2x too large on 2 GPUs.
    accepts_loss_kwargs = False
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def _init_weights(self, module: nn.Module) -> None:
        # The encoder initialises itself (it is a PreTrainedModel of its own); ours are pooler and head.
        if isinstance(module, Pooler | PredictionHead) and hasattr(module, "reset_parameters"):
            module.reset_parameters()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any):
        """Load a saved attnpool model; safetensors weights only, never a pickle.

        Raises:
            FileNotFoundError: The folder does not exist or holds no ``*.safetensors`` weights.
        """
        if kwargs.get("use_safetensors") is False:
            raise ValueError("attnpool loads weights from safetensors only; use_safetensors=False is not supported")
        path = Path(os.fspath(pretrained_model_name_or_path)).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise FileNotFoundError(f"{path} has no config.json: it is not a saved attnpool model folder")
            if not any(path.glob("*.safetensors")):
                present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
                raise FileNotFoundError(
                    f"{path} holds no model weights (*.safetensors); it contains: {present}. Save the model with "
                    "model.save_pretrained(folder) (safetensors), or point to the folder that has them"
                )
        elif not os.path.exists(path) and _looks_like_local_path(str(pretrained_model_name_or_path)):
            raise FileNotFoundError(f"model folder {str(pretrained_model_name_or_path)!r} does not exist")
        kwargs["use_safetensors"] = True
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, tokenizer: Any = None, **kwargs: Any):
        """Save config, weights (``model.safetensors``) and, when given, the tokenizer into one folder."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)

    def _base(self) -> AttnPoolModel:
        return self if isinstance(self, AttnPoolModel) else getattr(self, self.base_model_prefix)

    def freeze_embeddings(self) -> None:
        """Stop training the encoder's embedding layer (a common trick to regularise small data sets)."""
        encoder = self._base().encoder
        embeddings = getattr(encoder, "embeddings", None) or encoder.get_input_embeddings()
        embeddings.requires_grad_(False)

    def freeze_layers(self, num_layers: int) -> None:
        """Freeze the embeddings and the first ``num_layers`` encoder layers."""
        layers = _encoder_layers(self._base().encoder)
        if not 0 <= num_layers <= len(layers):
            raise ValueError(f"freeze_layers: num_layers must be in [0, {len(layers)}], got {num_layers}")
        self.freeze_embeddings()
        for layer in layers[:num_layers]:
            layer.requires_grad_(False)

    def reinit_top_layers(self, num_layers: int) -> None:
        """Re-initialise the top ``num_layers`` encoder layers with the encoder's own initialisation.

        A trick from the PPPM and CommonLit winning solutions: the top layers of a pre-trained encoder are
        specialised to its pre-training task, and starting them afresh can help fine-tuning.
        """
        encoder = self._base().encoder
        layers = _encoder_layers(encoder)
        if not 0 <= num_layers <= len(layers):
            raise ValueError(f"reinit_top_layers: num_layers must be in [0, {len(layers)}], got {num_layers}")
        for layer in list(layers)[len(layers) - num_layers :]:
            for module in layer.modules():
                # Loaded weights are flagged as initialised, and transformers' init functions skip them.
                for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
                    if hasattr(tensor, "_is_hf_initialized"):
                        tensor._is_hf_initialized = False
                with torch.no_grad():
                    encoder._init_weights(module)

    @classmethod
    def from_encoder(
        cls,
        encoder: str | os.PathLike | PretrainedConfig | PreTrainedModel,
        pooling: str | dict[str, Any] | Pooler = "attention",
        pooling_options: dict[str, Any] | None = None,
        *,
        encoder_kwargs: dict[str, Any] | None = None,
        reinit_layers: int = 0,
        freeze_layers: int | None = None,
        **config_kwargs: Any,
    ):
        """Build the model around an encoder: pre-trained weights from a name or path, random from a config.

        Args:
            encoder: A hub name (``"microsoft/deberta-v3-large"``) or local folder: pre-trained weights (safetensors)
                are loaded. A ``PretrainedConfig``: a randomly initialised encoder (tests, benchmarks). A
                ``PreTrainedModel``: used as it is.
            pooling: A registered pooler name, a pooler config dict, or a :class:`~attnpool.Pooler` instance
                (whose weights are kept).
            pooling_options: Options of the pooler, e.g. ``{"attn_size": 128}``.
            encoder_kwargs: Passed to ``AutoModel.from_pretrained`` (e.g. ``attn_implementation``, ``revision``).
            reinit_layers: Re-initialise this many top encoder layers.
            freeze_layers: Freeze the embeddings and this many bottom layers (``0``: the embeddings only).
            **config_kwargs: :class:`AttnPoolConfig` options: ``num_labels`` (default 1), ``problem_type``
                (default: regression for one label), ``head_dropout``, ``pooling_layers``...

        Returns:
            The model, with the pooler and head initialised as the recipe says (Xavier for the pooler).

        Raises:
            FileNotFoundError: A local encoder path that does not exist.
            OSError: An encoder that cannot be loaded (e.g. a hub name without network access).
            ValueError: A pooler instance whose hidden size does not match the encoder.
        """
        pooler_instance = pooling if isinstance(pooling, Pooler) else None
        if isinstance(encoder, PreTrainedModel):
            encoder_model, encoder_config = encoder, encoder.config
        elif isinstance(encoder, PretrainedConfig):
            encoder_config = encoder
            encoder_model = AutoModel.from_config(encoder_config, **(encoder_kwargs or {}))
        else:
            name = os.fspath(encoder)
            _check_encoder_source(name)
            kwargs = {"use_safetensors": True, **(encoder_kwargs or {})}
            try:
                encoder_model = AutoModel.from_pretrained(name, **kwargs)
            except OSError as err:
                raise OSError(
                    f"could not load the encoder {name!r}: {err}\nGive a local folder with config.json and "
                    "model.safetensors, or a hub name reachable from this machine (set HF_HUB_OFFLINE=0)."
                ) from err
            encoder_config = encoder_model.config
        if pooler_instance is not None:
            build_pooler(pooler_instance, encoder_hidden_size(encoder_config))  # raises on a hidden size mismatch
            pooling_spec: dict[str, Any] = pooler_instance.get_config()
        elif isinstance(pooling, str):
            pooling_spec = {"type": pooling, **(pooling_options or {})}
        else:
            pooling_spec = {**dict(pooling), **(pooling_options or {})}
        config_kwargs.setdefault("num_labels", 1)
        if config_kwargs.get("problem_type") is None and config_kwargs["num_labels"] == 1:
            # Set now rather than at the first loss, so that pipelines know not to add a sigmoid or softmax.
            config_kwargs["problem_type"] = "regression"
        config = AttnPoolConfig(encoder=encoder_config, pooling=pooling_spec, **config_kwargs)
        model = cls(config, encoder=encoder_model)
        if pooler_instance is not None:
            model._base().pooler.load_state_dict(pooler_instance.state_dict())
        if reinit_layers:
            model.reinit_top_layers(reinit_layers)
        if freeze_layers is not None:
            model.freeze_layers(freeze_layers)
        return model


class AttnPoolModel(AttnPoolPreTrainedModel):
    """A Hugging Face encoder followed by an attnpool pooler: text in, one embedding per sequence out.

    What the pooler declares decides what the encoder is asked for: ``needs_all_layers`` -> the hidden states of
    every layer (the top ``pooler.num_layers`` are stacked as ``(B, L, T, H)``), ``needs_attentions`` -> the
    attention maps, with the encoder switched to ``attn_implementation="eager"`` (the only implementation for
    which transformers returns them).

    Args:
        config: The :class:`AttnPoolConfig`.
        encoder: A ready encoder (e.g. with pre-trained weights); built from ``config.encoder`` when ``None``.
    """

    def __init__(self, config: AttnPoolConfig, encoder: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        if config.encoder is None:
            raise ValueError("AttnPoolConfig has no encoder config; build the model with from_encoder(...)")
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config.encoder)
        self.pooler = self._build_pooler(config)
        config.pooling = self.pooler.get_config()  # the complete spec, defaults filled in, is what gets saved
        if self.pooler.needs_attentions:
            self._use_eager_attention()
        accepted = inspect.signature(self.encoder.forward).parameters
        self._accepts_token_type_ids = "token_type_ids" in accepted
        self._accepts_position_ids = "position_ids" in accepted
        use_positions = config.position_ids_from_mask
        self._positions_from_mask = (is_decoder_only(config.encoder) if use_positions is None else use_positions)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        """The encoder's token embeddings."""
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the encoder's token embeddings."""
        self.encoder.set_input_embeddings(value)

    @staticmethod
    def _build_pooler(config: AttnPoolConfig) -> Pooler:
        """Build the pooler; a multi-layer one is sized to the layers it will be fed, unless its spec says.

        The layers fed to a ``needs_all_layers`` pooler: with ``pooling_layers="last"`` the top ``num_layers``
        transformer layers (its default, capped at the encoder's depth); with ``"all"`` every transformer layer;
        with a list, those layers. A ``num_layers`` given in the pooling spec must match.
        """
        pooler = build_pooler(config.pooling, config.hidden_size)
        if not pooler.needs_all_layers:
            return pooler
        depth = getattr(config.encoder, "num_hidden_layers", None)
        layers = config.pooling_layers
        if layers == "last":
            wanted = pooler.num_layers if depth is None else min(pooler.num_layers, depth)
        else:
            wanted = depth if layers == "all" else len(layers)
        if wanted is None or wanted == pooler.num_layers:
            return pooler
        if "num_layers" in config.pooling:
            raise ValueError(
                f"pooler {pooler.name!r} takes num_layers={pooler.num_layers} layers, but pooling_layers={layers!r} "
                f"selects {wanted} of the encoder's {depth}; drop num_layers from the pooling spec or make them agree"
            )
        return build_pooler(config.pooling, config.hidden_size, num_layers=wanted)

    def _use_eager_attention(self) -> None:
        """Switch the encoder to eager attention: transformers returns attention maps for no other implementation."""
        if getattr(self.encoder.config, "_attn_implementation", None) == "eager":
            return
        try:
            self.encoder.set_attn_implementation("eager")
        except (ValueError, AttributeError, NotImplementedError):
            pass  # the pooler's ValueError at the first forward then says what is missing and why

    def _selected_hidden_states(self, outputs: Any) -> Tensor:
        layers = self.config.pooling_layers
        multi_layer = self.pooler.needs_all_layers
        if layers == "last" and not multi_layer:
            return outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0]
        all_states = outputs.hidden_states
        if layers == "last":  # a multi-layer pooler: the top num_layers transformer layers
            chosen = list(all_states[len(all_states) - self.pooler.num_layers :])
        else:
            chosen = list(all_states[1:]) if layers == "all" else [all_states[i] for i in layers]
        if multi_layer:
            return torch.stack(chosen, dim=1)  # (B, L, T, H)
        return torch.stack(chosen, dim=0).mean(dim=0) if len(chosen) > 1 else chosen[0]  # (B, T, H)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_pooling_weights: bool = False,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> AttnPoolModelOutput:
        """Encode and pool.

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)``, 1 for real tokens; all ones when ``None``.
            token_type_ids: Passed on only to encoders that accept them.
            position_ids: Passed on as given; computed from the mask for decoder-only encoders otherwise.
            inputs_embeds: Instead of ``input_ids``.
            output_hidden_states: Return all layers' hidden states. (They are computed anyway for a multi-layer
                pooler, ``needs_all_layers``, or ``pooling_layers`` other than ``"last"``; returned only when set.)
            output_attentions: Return the encoder's attention maps. (They are computed anyway for a pooler that
                ``needs_attentions``, and passed to it; returned only when set.)
            return_pooling_weights: Return the pooler's token weights.
            return_dict: Ignored (outputs are always a ``ModelOutput``); kept for transformers compatibility.
            **kwargs: Further encoder arguments.

        Returns:
            :class:`AttnPoolModelOutput`.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None:
            raise ValueError("AttnPoolModel needs input_ids or inputs_embeds")
        if attention_mask is None:
            attention_mask = torch.ones(reference.shape[:2], dtype=torch.long, device=reference.device)
        encoder_kwargs: dict[str, Any] = dict(kwargs)
        if token_type_ids is not None and self._accepts_token_type_ids:
            encoder_kwargs["token_type_ids"] = token_type_ids
        if position_ids is None and self._positions_from_mask and self._accepts_position_ids:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        if position_ids is not None:
            encoder_kwargs["position_ids"] = position_ids
        # What the pooler declares it needs decides what the encoder is asked for.
        need_layers = self.config.pooling_layers != "last" or self.pooler.needs_all_layers
        need_attentions = self.pooler.needs_attentions
        outputs = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_hidden_states=bool(output_hidden_states) or need_layers,
            output_attentions=bool(output_attentions) or need_attentions,
            return_dict=True,
            **encoder_kwargs,
        )
        hidden = self._selected_hidden_states(outputs)
        pooler_kwargs: dict[str, Any] = {"attentions": outputs.attentions} if need_attentions else {}
        pooled, weights = self.pooler(hidden, attention_mask, return_weights=True, **pooler_kwargs)
        return AttnPoolModelOutput(
            pooler_output=pooled,
            pooling_weights=weights if return_pooling_weights else None,
            last_hidden_state=outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0],
            hidden_states=outputs.hidden_states if output_hidden_states else None,
            attentions=outputs.attentions if output_attentions else None,
            auxiliary_loss=self.pooler.auxiliary_loss(weights) if self.training else None,
        )


class AttnPoolForSequenceClassification(AttnPoolPreTrainedModel):
    """Encoder + attnpool pooler + head for regression and classification, like ``*ForSequenceClassification``.

    ``forward(input_ids, attention_mask, token_type_ids=None, labels=None, ..., return_pooling_weights=False)``
    returns ``loss`` (when labels are given), ``logits`` and, when asked, ``pooling_weights``. Works unchanged with
    ``transformers.Trainer`` and the ``text-classification`` pipeline.

    Args:
        config: The :class:`AttnPoolConfig`.
        encoder: A ready encoder; built from ``config.encoder`` when ``None``.
    """

    def __init__(self, config: AttnPoolConfig, encoder: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.attnpool = AttnPoolModel(config, encoder=encoder)
        self.head = PredictionHead(
            self.attnpool.pooler.output_dim,
            config.num_labels,
            dropout=config.head_dropout,
            multi_sample_dropout=config.multi_sample_dropout,
            hidden_size=config.head_hidden_size,
            init_std=getattr(config.encoder, "initializer_range", 0.02),
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        """The encoder's token embeddings."""
        return self.attnpool.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the encoder's token embeddings."""
        self.attnpool.set_input_embeddings(value)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_pooling_weights: bool = False,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> AttnPoolSequenceClassifierOutput:
        """Predict, and compute the loss when ``labels`` are given.

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)``, 1 for real tokens.
            token_type_ids: Passed on only to encoders that accept them.
            position_ids: See :meth:`AttnPoolModel.forward`.
            inputs_embeds: Instead of ``input_ids``.
            labels: Regression: ``(B,)`` or ``(B, num_labels)`` floats. Single-label classification: ``(B,)``
                class indices. Multi-label: ``(B, num_labels)`` of 0/1. In training mode the pooler's
                regulariser, if any (e.g. ``multihead_attention`` with ``penalty > 0``), is added to the loss.
            output_hidden_states: Return all layers' hidden states.
            output_attentions: Return the encoder's attention maps.
            return_pooling_weights: Return the pooler's token weights and the pooled vectors.
            return_dict: Ignored (outputs are always a ``ModelOutput``); kept for transformers compatibility.
            **kwargs: Further encoder arguments (``num_items_in_batch`` from the Trainer is dropped).

        Returns:
            :class:`AttnPoolSequenceClassifierOutput`.
        """
        kwargs.pop("num_items_in_batch", None)
        base = self.attnpool(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_pooling_weights=return_pooling_weights,
            **kwargs,
        )
        samples = self.head(base.pooler_output)  # one raw output per dropout sample, (B, num_labels) each
        raw = samples[0] if len(samples) == 1 else torch.stack(samples).mean(dim=0)
        loss = None
        if labels is not None:
            problem_type = resolve_problem_type(self.config, labels)
            losses = [compute_loss(s, labels, self.config, problem_type) for s in samples]
            loss = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
            if base.auxiliary_loss is not None:
                loss = loss + base.auxiliary_loss.to(loss.dtype)
        logits = torch.sigmoid(raw) if self.config.output_activation == "sigmoid" else raw
        return AttnPoolSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            pooling_weights=base.pooling_weights,
            pooler_output=base.pooler_output if return_pooling_weights else None,
            hidden_states=base.hidden_states,
            attentions=base.attentions,
        )

