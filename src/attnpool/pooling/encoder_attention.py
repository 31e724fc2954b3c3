"""Poolers that read the encoder's own self-attention maps (``needs_attentions``): Ditto."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import check_count
from attnpool.pooling.registry import register_pooler


@register_pooler
class DittoPooling(Pooler):
    r"""Diagonal Attention Pooling (Ditto): tokens weighted by the diagonal of an encoder self-attention map.

    From "Ditto: A Simple and Efficient Approach to Improve Sentence Embeddings" (Chen et al., 2023,
    arXiv:2305.10786). With :math:`A^{(l,k)}` the attention map of layer ``l``, head ``k`` (each row a softmax
    over the keys), a token's weight is how much it attends to itself:

    .. math::
        w_t = \frac{A^{(l,k)}_{tt}}{\sum_{s: m_s = 1} A^{(l,k)}_{ss}}, \qquad \mathrm{pooled} = \sum_t w_t h_t

    No parameters and no training: the paper applies it to frozen pre-trained models (it weights informative
    words up) and picks layer and head on validation data. As in the original evaluation code
    (``evaluation_ditto.py`` of alibaba-damo-academy/SpokenNLP), ``layer=0, head=0`` by default: one head of one
    layer; ``head=None`` averages the layer's heads instead.

    The paper's best recipe ("first-last", ``att_first_last`` in that code) weights the average of the
    *embedding output* and the last layer: set ``pooling_layers=[0, -1]`` in the model, whose index 0 is the
    embedding output (``[1, -1]`` would average the first transformer layer instead, which is not the recipe).
    One difference, by design: the reference sums the tokens with the raw diagonal values,
    :math:`\sum_t A_{tt} h_t`, whose total weight :math:`\sum_t A_{tt}` varies from sentence to sentence; here the
    weights are normalised to sum to 1 (the pooling contract), so the pooled vector is the reference's divided by
    that total. The direction is the same, and the paper's evaluation (cosine similarity) gives the same scores;
    a test checks both against a transcription of the reference on a tiny random BERT. A row whose real tokens
    all have a zero diagonal (valid maps that attend elsewhere, or fp16 maps whose diagonal underflowed to 0),
    where the reference pools to zeros, gets the mean of its real tokens (uniform weights) instead.

    The maps come through the ``attentions=`` argument: ``AttnPoolModel`` requests them from the encoder
    (``output_attentions=True``) and switches the encoder to ``attn_implementation="eager"``, the only
    implementation for which transformers returns them (under ``"sdpa"`` it returns an empty tuple, and this
    pooler raises a ``ValueError`` saying so). Eager attention is slower and uses more memory than sdpa.

    Args:
        hidden_size: ``H``.
        layer: Index into the attention maps (0 = first transformer layer, -1 = last).
        head: Index of the head (0 by default, as in the reference), or ``None`` for the mean over heads.

    Shapes:
        ``(B, T, H)`` and attentions ``L x (B, heads, T, T)`` -> ``(B, H)``; weights ``(B, T)``.
    """

    name = "ditto"
    needs_attentions = True
    has_weights = True
    config_keys = ("layer", "head")

    def __init__(self, hidden_size: int, layer: int = 0, head: int | None = 0) -> None:
        super().__init__(hidden_size)
        self.layer = check_count("DittoPooling", "layer", layer, minimum=None)
        self.head = None if head is None else check_count("DittoPooling", "head", head, minimum=None)

    @override
    def pool(
        self, hidden_states: Tensor, mask: Tensor, attentions: Sequence[Tensor] | Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        if attentions is None:  # Pooler.forward checks this; pool() may also be called directly
            raise ValueError("DittoPooling needs the encoder's attention maps (attentions=...)")
        if not -len(attentions) <= self.layer < len(attentions):
            raise ValueError(f"DittoPooling: layer={self.layer} but the encoder gave {len(attentions)} attention maps")
        attention = attentions[self.layer]  # (B, heads, T, T)
        if self.head is not None and not -attention.shape[1] <= self.head < attention.shape[1]:
            raise ValueError(f"DittoPooling: head={self.head} but layer {self.layer} has {attention.shape[1]} heads")
        diagonal = attention.diagonal(dim1=-2, dim2=-1).to(F.compute_dtype(attention.dtype))  # (B, heads, T)
        diagonal = diagonal.mean(dim=1) if self.head is None else diagonal[:, self.head]  # (B, T)
        diagonal = diagonal.clamp(min=0.0).masked_fill(~mask, 0.0)
        total = diagonal.sum(dim=-1, keepdim=True)  # (B, 1)
        # A row whose real tokens all have a zero diagonal (a map attending elsewhere, or fp16 underflow) falls back
        # to uniform weights over them; a row without real tokens gets zeros from both.
        uniform = F.mean_weights(mask, diagonal.dtype)
        weights = torch.where(total > 0, diagonal / total.clamp(min=torch.finfo(diagonal.dtype).tiny), uniform)
        pooled = F.weighted_sum(weights, F.zero_padding(hidden_states, mask))  # (B, H)
        return pooled, weights.to(hidden_states.dtype)
