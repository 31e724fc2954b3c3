"""Encoder + attnpool pooler (+ task head) as native Hugging Face models.

``AttnPoolModel`` returns the pooled embedding; ``AttnPoolForSequenceClassification`` adds a regression or
classification head with the call conventions of transformers' ``*ForSequenceClassification``. Both save with
``save_pretrained`` into one folder (``config.json`` + ``model.safetensors``) and load with ``from_pretrained`` or
the Auto classes once ``attnpool`` is imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoModel, PreTrainedModel

from attnpool.model.configuration import AttnPoolConfig
from attnpool.model.encoders import as_initialised, check_encoder_only, check_pooling_layers, is_decoder_only
from attnpool.model.heads import PredictionHead
from attnpool.model.losses import compute_loss, remember_problem_type, resolve_problem_type
from attnpool.model.outputs import AttnPoolModelOutput, AttnPoolSequenceClassifierOutput
from attnpool.model.pretrained import AttnPoolPreTrainedModel
from attnpool.model.recurrent import RecurrentLayer
from attnpool.pooling import Pooler, build_pooler


class AttnPoolModel(AttnPoolPreTrainedModel):
    """A Hugging Face encoder followed by an attnpool pooler: text in, one embedding per sequence out.

    What the pooler declares decides what the encoder is asked for: ``needs_all_layers`` -> the hidden states of
    every layer (the top ``pooler.num_layers`` are stacked as ``(B, L, T, H)``), ``needs_attentions`` -> the
    attention maps, with the encoder switched to ``attn_implementation="eager"`` (the only implementation for
    which transformers returns them). With ``config.recurrent`` a bidirectional LSTM/GRU
    (:class:`~attnpool.model.recurrent.RecurrentLayer`) runs over the pooler's input first. The encoder's own
    pooler (BERT's, RoBERTa's, ALBERT's...), which attnpool's replaces, is dropped (see :func:`_drop_encoder_pooler`).

    Args:
        config: The :class:`AttnPoolConfig`.
        encoder: A ready encoder (e.g. with pre-trained weights); built from ``config.encoder`` when ``None``.
    """

    def __init__(self, config: AttnPoolConfig, encoder: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        if config.encoder is None:
            raise ValueError("AttnPoolConfig has no encoder config; build the model with from_encoder(...)")
        check_encoder_only(config.encoder, f"{type(self).__name__}: the encoder config")
        # a given encoder is used as it is: post_init below must not draw its weights anew
        self.encoder = as_initialised(encoder) if encoder is not None else AutoModel.from_config(config.encoder)
        _drop_encoder_pooler(self.encoder)
        self.pooler = self._build_pooler(config)
        config.pooling = self.pooler.get_config()  # the complete spec, defaults filled in, is what gets saved
        self.recurrent = self._build_recurrent(config, self.pooler)
        if self.pooler.needs_attentions:
            self._use_eager_attention()
        accepted = inspect.signature(self.encoder.forward).parameters
        self._accepts_token_type_ids = "token_type_ids" in accepted
        self._accepts_position_ids = "position_ids" in accepted
        use_positions = config.position_ids_from_mask
        self._positions_from_mask = (is_decoder_only(config.encoder) if use_positions is None else use_positions)
        self.post_init()

    @property
    def positions_from_mask(self) -> bool:
        """Whether :meth:`forward` gives the encoder ``position_ids`` counted over the mask (decoder-only encoders).

        Then a token masked out in the middle of a row (the erasure test) moves the later ones back one position,
        unless the caller passes the row's own positions.
        """
        return self._positions_from_mask and self._accepts_position_ids

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
        depth = getattr(config.encoder, "num_hidden_layers", None)
        layers = config.pooling_layers
        check_pooling_layers(layers, depth)
        pooler = build_pooler(config.pooling, config.hidden_size)
        if not pooler.needs_all_layers:
            return pooler
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

    @staticmethod
    def _build_recurrent(config: AttnPoolConfig, pooler: Pooler) -> RecurrentLayer | None:
        """The recurrent layer of ``config.recurrent``; refused before a pooler that reads several layers."""
        cell = config.recurrent
        if cell is None:
            return None
        if pooler.needs_all_layers:
            raise ValueError(
                f"recurrent={cell!r} runs over one (B, T, H) sequence, but pooler {pooler.name!r} reads several "
                "encoder layers stacked (needs_all_layers); use a token pooler (e.g. attention; pooling_layers then "
                "picks the layers averaged into the recurrent layer's input), or drop recurrent"
            )
        return RecurrentLayer(cell, config.hidden_size, num_layers=config.recurrent_layers)

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
            output_hidden_states: Return all layers' hidden states; ``None``: ``config.output_hidden_states``. (They
                are computed anyway for a multi-layer pooler, ``needs_all_layers``, or ``pooling_layers`` other than
                ``"last"``; returned only when set.)
            output_attentions: Return the encoder's attention maps; ``None``: ``config.output_attentions``. (They are
                computed anyway for a pooler that ``needs_attentions``, and passed to it; returned only when set.)
            return_pooling_weights: Return the pooler's token weights.
            return_dict: ``False`` (or ``config.return_dict`` false): the output's tuple of set fields, as
                transformers models give it (``loss, logits, ...``); default the ``ModelOutput``.
            **kwargs: Further encoder arguments (not ``labels``: a TypeError, this model computes no loss).

        Returns:
            :class:`AttnPoolModelOutput`.
        """
        if "labels" in kwargs:  # the encoder would drop them: no loss, silently
            raise TypeError("AttnPoolModel.forward got labels, but it computes no loss (it returns the pooled "
                            "embedding): use AttnPoolForSequenceClassification for a loss, or leave labels out")
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None:
            raise ValueError("AttnPoolModel needs input_ids or inputs_embeds")
        # unset: the config's (from_pretrained(path, output_hidden_states=True)), as transformers models do
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        if attention_mask is None:
            attention_mask = torch.ones(reference.shape[:2], dtype=torch.long, device=reference.device)
        elif tuple(attention_mask.shape) != tuple(reference.shape[:2]):  # a 4-D mask broke decoders' positions
            raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)}: expected (B, T) = "
                             f"{tuple(reference.shape[:2])}, the input's, with 1 for real tokens and 0 for padding")
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
        if self.recurrent is not None:
            hidden = self.recurrent(hidden, attention_mask)  # (B, T, H), zeros on padding
        pooler_kwargs: dict[str, Any] = {"attentions": outputs.attentions} if need_attentions else {}
        pooling_mask = self.pooling_mask(input_ids, attention_mask)
        pooled, weights = self.pooler(hidden, pooling_mask, return_weights=True, **pooler_kwargs)
        output = AttnPoolModelOutput(
            pooler_output=pooled,
            pooling_weights=weights if return_pooling_weights else None,
            last_hidden_state=outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0],
            hidden_states=outputs.hidden_states if output_hidden_states else None,
            attentions=outputs.attentions if output_attentions else None,
            auxiliary_loss=self.pooler.auxiliary_loss(weights) if self.training else None,
        )
        return output if _as_dict(return_dict, self.config) else output.to_tuple()

    def pooling_mask(self, input_ids: Tensor | None, attention_mask: Tensor) -> Tensor:
        """The tokens the pooler weighs: ``attention_mask``, less what follows the first ``config.pool_segments``.

        A token is kept when fewer than ``pool_segments`` segment ends (``config.segment_token_id``, real tokens
        only) come before it, so each kept segment keeps its closing separator.
        """
        segments = getattr(self.config, "pool_segments", None)
        if segments is None:
            return attention_mask
        if input_ids is None:
            raise ValueError(f"this model pools only the first {segments} segment(s) of its input (pool_segments), "
                             "which it finds in input_ids: give input_ids, not inputs_embeds")
        ends = ((input_ids == self.config.segment_token_id) & attention_mask.bool()).long()
        before = ends.cumsum(-1) - ends
        return attention_mask * (before < segments).to(attention_mask.dtype)


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
        self.head = self._build_head(config, self.attnpool.pooler.output_dim)
        self.post_init()

    @staticmethod
    def _build_head(config: AttnPoolConfig, in_features: int) -> PredictionHead:
        """The task head over the pooled features."""
        return PredictionHead(in_features, config.num_labels, dropout=config.head_dropout,
                              multi_sample_dropout=config.multi_sample_dropout, hidden_size=config.head_hidden_size,
                              init_std=getattr(config.encoder, "initializer_range", 0.02))

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
            output_hidden_states: Return all layers' hidden states; ``None``: ``config.output_hidden_states``.
            output_attentions: Return the encoder's attention maps; ``None``: ``config.output_attentions``.
            return_pooling_weights: Return the pooler's token weights and the pooled vectors.
            return_dict: ``False`` (or ``config.return_dict`` false): the output's tuple of set fields, as
                transformers models give it (``loss, logits, ...``); default the ``ModelOutput``.
            **kwargs: Further encoder arguments (``num_items_in_batch`` from the Trainer is dropped).

        Returns:
            :class:`AttnPoolSequenceClassifierOutput`.
        """
        kwargs.pop("num_items_in_batch", None)
        base = self.attnpool(
            return_dict=True,
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
            remember_problem_type(self.config, problem_type)  # once a loss was computed with it
            loss = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
            if base.auxiliary_loss is not None:
                loss = loss + base.auxiliary_loss.to(loss.dtype)
        logits = torch.sigmoid(raw) if self.config.output_activation == "sigmoid" else raw
        output = AttnPoolSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            pooling_weights=base.pooling_weights,
            pooler_output=base.pooler_output if return_pooling_weights else None,
            hidden_states=base.hidden_states,
            attentions=base.attentions,
        )
        return output if _as_dict(return_dict, self.config) else output.to_tuple()


_KEEP_ENCODER_POOLER: ContextVar[bool] = ContextVar("keep_encoder_pooler", default=False)


@contextmanager
def keeping_encoder_pooler() -> Iterator[None]:
    """Models built inside keep their encoder's own pooler, as attnpool before 2026-12-06 did.

    For resuming a checkpoint saved then: its optimizer state and weight average hold the pooler's parameters, and
    the Trainer refuses an optimizer state whose groups differ from the model's.
    """
    token = _KEEP_ENCODER_POOLER.set(True)
    try:
        yield
    finally:
        _KEEP_ENCODER_POOLER.reset(token)


def _drop_encoder_pooler(encoder: nn.Module) -> None:
    """Drop the encoder's own pooler (BERT's ``pooler.dense``, ALBERT's ``pooler`` + ``pooler_activation``...).

    attnpool's pooler replaces it, so its weights never got a gradient, and DDP without ``find_unused_parameters``
    (the Trainer's default under activation checkpointing) stopped at the second step. Only from encoders built to
    go without one (their class takes ``add_pooling_layer``, and their ``forward`` then skips it): an old checkpoint's
    ``encoder.pooler.*`` weights are ignored on load
    (:attr:`~attnpool.model.pretrained.AttnPoolPreTrainedModel._keys_to_ignore_on_load_unexpected`).
    """
    if getattr(encoder, "pooler", None) is None or _KEEP_ENCODER_POOLER.get():
        return
    if "add_pooling_layer" not in inspect.signature(type(encoder).__init__).parameters:
        return
    encoder.pooler = None
    if getattr(encoder, "pooler_activation", None) is not None:  # ALBERT's tanh: None without a pooler too
        encoder.pooler_activation = None


def _as_dict(return_dict: bool | None, config: AttnPoolConfig) -> bool:
    """Whether to return the ``ModelOutput`` (default) or, as transformers models do, its tuple of set fields."""
    return return_dict if return_dict is not None else getattr(config, "return_dict", True)

