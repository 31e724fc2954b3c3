"""Attention pooling whose query is computed from the input itself: SimPool and AdaPool."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import Init, check_heads, check_number, uniform_start_, xavier_
from attnpool.pooling.registry import register_pooler


@register_pooler
class SimPooling(Pooler):
    r"""SimPool: the masked mean is the query of one attention over the (layer-normalised) tokens.

    From "Keep It SimPool: Who Said Supervised Transformers Suffer from Attention Deficit?" (Psomas et al., 2023,
    arXiv:2309.06891). With :math:`\bar h` the masked mean of the tokens and :math:`X = \mathrm{LN}(H)`:

    .. math::
        a = \mathrm{softmax}_{t: m_t = 1}\Big(\frac{(W_q \bar h)^\top W_k x_t}{\sqrt{d}}\Big), \qquad
        \mathrm{pooled} = \Big(\sum_t a_t\, (x_t - \min X + \epsilon)^{\gamma}\Big)^{1/\gamma}

    Without ``gamma`` the output is the plain weighted sum :math:`\sum_t a_t x_t`. As in the official code the
    query comes from the raw tokens, keys and values from the layer-normalised ones, and ``W_q``, ``W_k`` have no
    bias. The power normalisation's shift :math:`\min X` is taken over the real tokens of each row (the official
    code takes it over the whole batch, which makes a sample's output depend on the other samples). The power
    runs in float32; a row without real tokens gives zeros.

    Args:
        hidden_size: ``H``.
        num_heads: Attention heads (1 in the paper); must divide ``H``.
        gamma: Exponent of the power normalisation (e.g. 1.25 to 2); ``None`` for none.
        eps: The shift's margin, keeping the powered values positive.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``, ``(B, heads, T)`` with several heads.
    """

    name = "simpool"
    has_weights = True
    config_keys = ("num_heads", "gamma", "eps")

    def __init__(self, hidden_size: int, num_heads: int = 1, gamma: float | None = None, eps: float = 1e-6) -> None:
        super().__init__(hidden_size)
        self.num_heads = check_heads("SimPooling", hidden_size, num_heads)
        self.gamma = None if gamma is None else check_number(
            "SimPooling", "gamma", gamma, "gamma=2.0, or gamma=None for no powers", low_open=True)
        # eps > 0, the floor of the powered values: 0 ** (1 / gamma) has an infinite derivative
        self.eps = check_number("SimPooling", "eps", eps, "eps=1e-6", low_open=True)
        self.norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.wq = nn.Linear(hidden_size, hidden_size, bias=False)
        self.wk = nn.Linear(hidden_size, hidden_size, bias=False)
        xavier_(self.wq, self.wk)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # The query in float32: in fp16 W_q of the mean of a row holding a token of ~3e4 (one-token rows: the token)
        # overflows, and its inf scores gave NaN weights and output.
        query = F.float_linear(self.wq, F.masked_mean(hidden_states, mask)).unsqueeze(1)  # (B, 1, H)
        tokens = self.norm(hidden_states)  # (B, T, H)
        if self.gamma is None:
            out, weights = F.masked_attention(query, self.wk(tokens), tokens, mask, self.num_heads)  # (B, 1, H)
            return out.squeeze(1), F.merge_heads(weights, hidden_states.dtype)
        dtype = F.compute_dtype(hidden_states.dtype)
        x = tokens.to(dtype)
        pad = ~mask.unsqueeze(-1)
        row_min = x.masked_fill(pad, torch.finfo(dtype).max).amin(dim=(1, 2), keepdim=True)  # (B, 1, 1)
        row_min = torch.where(F.has_token(mask).unsqueeze(-1), row_min, torch.zeros_like(row_min))
        powered = (x - row_min + self.eps).clamp(min=self.eps).pow(self.gamma)  # (B, T, H), positive
        out, weights = F.masked_attention(query.to(dtype), self.wk(tokens).to(dtype), powered, mask, self.num_heads)
        pooled = out.squeeze(1).clamp(min=torch.finfo(dtype).tiny).pow(1.0 / self.gamma)  # (B, H)
        return F.zero_empty_rows(pooled, mask).to(hidden_states.dtype), F.merge_heads(weights, hidden_states.dtype)


@register_pooler
class AdaptivePooling(Pooler):
    r"""AdaPool: one cross-attention query, derived from the input, weighting the tokens themselves.

    From "Robust Noise Attenuation via Adaptive Pooling of Transformer Outputs" (Brothers, 2025, ICML,
    arXiv:2506.09215). Pooling is framed there as vector quantisation: the output is a convex combination of the
    input vectors, :math:`\sum_t w_t h_t`, and the signal-optimal one is the centroid of the signal tokens; plain
    mean, max and CLS pooling collapse when the share of signal tokens changes, while attention with a query
    derived from the input adapts to it:

    .. math::
        q = W_q\, g(H), \qquad
        w = \mathrm{softmax}_{t: m_t = 1}\Big(\frac{q^\top W_k h_t}{\sqrt{d}}\Big), \qquad
        \mathrm{pooled} = \sum_t w_t h_t

    The values are the tokens themselves (no value projection), keeping the output in the convex hull of the
    tokens as in the paper's analysis. The paper chooses the query vector per task (e.g. the acting agent's own
    token); here ``query`` selects :math:`g`: the masked ``"mean"`` (default), the per-channel ``"max"``, the
    ``"first"`` real token (a CLS-like anchor; not permutation invariant) or a ``"learned"`` vector.

    ``W_k`` has no bias (it would shift every score of a head alike, which the softmax ignores). With
    ``init="mean"`` (default) ``W_k`` starts at zero: every token gets the same weight and the pooler starts as
    mean pooling, the convex combination the paper's analysis starts from, then learns which tokens carry the
    signal; ``init="xavier"`` initialises ``W_k`` Xavier-uniform like ``W_q``.

    Args:
        hidden_size: ``H``.
        num_heads: Attention heads; must divide ``H`` (each head weights its own slice of channels).
        query: ``"mean"``, ``"max"``, ``"first"`` or ``"learned"``.
        init: ``"mean"`` (zero keys: uniform weights at the start) or ``"xavier"``.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``, ``(B, heads, T)`` with several heads.
    """

    name = "adaptive"
    has_weights = True
    config_keys = ("num_heads", "query", "init")
    removed_parameters = ("wk.bias",)
    QUERIES = ("mean", "max", "first", "learned")

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        query: Literal["mean", "max", "first", "learned"] = "mean",
        init: Init = "mean",
    ) -> None:
        super().__init__(hidden_size)
        self.num_heads = check_heads("AdaptivePooling", hidden_size, num_heads)
        if query not in self.QUERIES:
            choices = ", ".join(map(repr, self.QUERIES))
            raise ValueError(f"AdaptivePooling: query must be one of {choices}, got {query!r}")
        self.query = query
        self.permutation_invariant = query != "first"
        self.wq = nn.Linear(hidden_size, hidden_size)
        self.wk = nn.Linear(hidden_size, hidden_size, bias=False)  # a key bias only shifts a head's scores
        xavier_(self.wq, self.wk)
        self.init = init
        uniform_start_(init, "AdaptivePooling", self.wk)
        if query == "learned":
            self.query_vector = nn.Parameter(torch.empty(1, hidden_size))
            nn.init.xavier_uniform_(self.query_vector)

    def _query_source(self, hidden_states: Tensor, mask: Tensor) -> Tensor:
        """``g(H)``, ``(B, H)`` or ``(1, H)`` for the learned query, in the hidden states' dtype."""
        if self.query == "mean":
            return F.masked_mean(hidden_states, mask)
        if self.query == "max":
            return F.masked_max(hidden_states, mask)
        if self.query == "first":
            first = F.one_hot_weights(F.first_token_index(mask), mask, hidden_states.dtype)  # (B, T)
            return F.weighted_sum(first, hidden_states)
        return self.query_vector.to(hidden_states.dtype)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # The query and the scores are computed in float32 (float64 for float64): in half precision W_q g(H) and
        # W_k h_t overflow for tokens of ~3e4 (LLM outliers) while the weighted tokens, the output, do not, and the
        # zero keys of init="mean" then gave inf * 0 = NaN. W_k is folded into the query, the score of token t
        # being (W_k^T q)_head . h_t: one (heads, H) row per sequence instead of the (B, T, H) keys.
        query = F.float_linear(self.wq, self._query_source(hidden_states, mask)).unsqueeze(1)  # (B|1, 1, H)
        scores = F.folded_key_scores(query, self.wk.weight, hidden_states, self.num_heads)  # (B, heads, 1, T)
        out, weights = F.attend(scores, hidden_states, mask, self.num_heads)  # (B, 1, H), (B, heads, 1, T)
        return out.squeeze(1), F.merge_heads(weights, hidden_states.dtype)
