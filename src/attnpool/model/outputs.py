"""What the models return: ``ModelOutput`` dataclasses with the pooled vector, the token weights and the loss."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from transformers.utils import ModelOutput


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
