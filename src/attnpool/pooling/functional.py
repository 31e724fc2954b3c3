"""Masked reductions over the token axis, shared by every pooler.

All functions take ``mask`` as a boolean tensor of shape ``(B, T)`` with ``True`` for real tokens, never write
into their inputs, and give finite zeros for a row without any real token.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Longer rows than this get a float32 weighted sum in fp16: their mean weight 1/T is below fp16's smallest normal
# number, 2**-14, where subnormal spacing (2**-24) rounds it by up to T * 2**-25 of itself (0.3% at T = 1e5, 3% at
# 1e6, all weights alike). Up to this length a weight is rounded by at most 2**-11 of itself or 2**-25, together at
# most about one fp16 ulp of the output; bf16 has float32's exponent range and rounds by 2**-9, within its own ulp.
HALF_NORMAL_TOKENS = 2**14
# Elements of the float32 temporary that the float32 weighted sum forms a block of tokens at a time (64 MiB).
SUM_ELEMENTS = 2**24


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype reductions run in: float32 for half precision and float32, float64 for float64.

    Half precision is upcast (its range and 11 or 8 significant bits do not hold sums and softmax logits); float64
    is kept, so that float64 inputs are computed in float64 (and ``torch.autograd.gradcheck`` holds).
    """
    return torch.promote_types(dtype, torch.float32)


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` in float32 (float64 scores: float64) with masked positions excluded, in the scores' dtype.

    Masked scores are filled with the minimum of that dtype *before* the softmax (a literal such as ``-1e9`` would
    overflow half precision), so padding receives exactly zero weight. A row without any real position gives
    all-zero weights and finite gradients, instead of the NaN of a softmax over ``-inf`` only.

    Args:
        scores: Unnormalised scores, e.g. ``(B, T)`` or ``(B, heads, T)``.
        mask: Boolean mask broadcastable to ``scores``, ``True`` for positions that take part.
        dim: The axis to normalise over.

    Returns:
        Weights of the same shape and dtype as ``scores``, summing to 1 over the real positions of each row
        (or to 0 on a row without any).
    """
    dtype = compute_dtype(scores.dtype)
    weights = torch.softmax(scores.to(dtype).masked_fill(~mask, torch.finfo(dtype).min), dim=dim)
    # A fully masked row is uniform after the softmax; zeroing masked positions makes it all zeros.
    return weights.masked_fill(~mask, 0.0).to(scores.dtype)


def weighted_sum(weights: Tensor, hidden_states: Tensor) -> Tensor:
    """Sum of hidden states weighted over the token axis, as one batched matrix product.

    Args:
        weights: ``(B, T)`` or ``(B, K, T)`` token weights; for half-precision states best unrounded (float32),
            see :func:`weighted_matmul`.
        hidden_states: ``(B, T, H)``.

    Returns:
        ``(B, H)`` for 2-D weights, ``(B, K, H)`` for 3-D weights, in the hidden states' dtype.
    """
    w = weights.unsqueeze(1) if weights.dim() == 2 else weights  # (B, K, T)
    if _needs_float32_sum(w, hidden_states):
        out = _float32_matmul(w, hidden_states)
    else:
        out = torch.bmm(w.to(hidden_states.dtype), hidden_states)  # (B, K, H)
    return out.squeeze(1) if weights.dim() == 2 else out


def weighted_matmul(weights: Tensor, values: Tensor) -> Tensor:
    """``weights @ values`` over the token axis, in the values' dtype.

    The weights are rounded to the values' dtype for the product, except for fp16 values over more than
    :data:`HALF_NORMAL_TOKENS` tokens with weights in a wider dtype: there weights of about ``1/T`` are subnormal
    in fp16 and lose up to a few percent (a mean of 5.0 over a million fp16 tokens gave 5.05), so the sum is
    accumulated in float32 and only the result rounded (an fp16 matrix product cannot return float32 on the CPU).
    It forms the float32 products a block of tokens at a time (at most :data:`SUM_ELEMENTS` of them, or one token)
    and keeps nothing larger than the fp16 values for the backward.

    Shapes:
        ``weights (..., Q, T)``, ``values (..., T, D)`` (batch axes broadcast) -> ``(..., Q, D)``.
    """
    if _needs_float32_sum(weights, values):
        return _float32_matmul(weights, values)
    return torch.matmul(weights.to(values.dtype), values)


def _needs_float32_sum(weights: Tensor, values: Tensor) -> bool:
    """Whether rounding the weights to fp16 would cost more than fp16's own rounding (see HALF_NORMAL_TOKENS)."""
    return values.dtype == torch.float16 and weights.dtype != torch.float16 and values.shape[-2] > HALF_NORMAL_TOKENS


def _float32_matmul(weights: Tensor, values: Tensor) -> Tensor:
    """``weights @ values`` summed in float32 a block of tokens at a time, rounded to the values' dtype at the end."""
    total = None
    weights = weights.float()
    per_token = math.prod(torch.broadcast_shapes(weights.shape[:-2], values.shape[:-2])) * weights.shape[-2]
    block = max(1, SUM_ELEMENTS // (per_token * values.shape[-1]))  # tokens in a (..., Q, block, D) product
    for w, v in zip(weights.split(block, dim=-1), values.split(block, dim=-2), strict=True):
        part = (w.unsqueeze(-1) * v.unsqueeze(-3)).sum(dim=-2)  # (..., Q, D) float32, from a float32 temporary
        total = part if total is None else total + part
    return total.to(values.dtype)


def mean_weights(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Uniform weights over the real tokens of each row: ``mask / max(count, 1)``, shape ``(B, T)``."""
    m = mask.to(dtype)
    return m / m.sum(dim=-1, keepdim=True).clamp(min=1.0)


def masked_mean(hidden_states: Tensor, mask: Tensor) -> Tensor:
    """Mean of the real tokens' hidden states, ``(B, T, H) -> (B, H)``; zeros for an empty row.

    Padded positions must hold finite values (weight 0 times inf is NaN): every pooler's input is cleared by
    :meth:`Pooler.forward`; a direct caller with inf or NaN in padding zeroes it first (:func:`zero_padding`). Not
    done here: a copy of the whole input costs 15 times the mean itself on a CPU.
    """
    return weighted_sum(mean_weights(mask, compute_dtype(hidden_states.dtype)), hidden_states)


def masked_max(hidden_states: Tensor, mask: Tensor) -> Tensor:
    """Per-channel maximum over real tokens, ``(B, T, H) -> (B, H)``; padding never wins, empty rows give 0."""
    fill = torch.finfo(hidden_states.dtype).min
    filled = hidden_states.masked_fill(~mask.unsqueeze(-1), fill)  # a new tensor: the input is left as is
    pooled = filled.amax(dim=1)  # (B, H)
    has_token = mask.any(dim=1, keepdim=True)  # (B, 1)
    return torch.where(has_token, pooled, torch.zeros_like(pooled))


def first_token_index(mask: Tensor) -> Tensor:
    """Index of the first real token of each row (0 for an empty row), correct under left padding."""
    return mask.to(torch.int32).argmax(dim=-1)  # argmax returns the first maximal position


def first_token_prior(mask: Tensor, share: float, normalizer: str = "softmax") -> Tensor:
    r"""Score offsets ``(B, T)`` that give the first real token ``share`` of ``normalizer`` over equal scores.

    The first real token (``[CLS]`` in BERT-style inputs, found under left padding too) gets an offset :math:`\delta`,
    every other position 0, so that added to equal scores the normaliser puts ``share`` :math:`s` on that token and
    spreads :math:`1 - s` evenly over the other :math:`n - 1`, whatever the row's length :math:`n`:

    * softmax: :math:`\delta = \log\frac{s}{1 - s} + \log(n - 1)`;
    * sparsemax: :math:`\delta = s - \frac{1 - s}{n - 1}` (the softmax offset exceeds 1 from a few tokens on, and
      sparsemax then gave the first token everything: the other tokens, and the scorer's gradient, were 0);
    * entmax15: :math:`\delta = 2\big(\sqrt{s} - \sqrt{(1 - s) / (n - 1)}\big)`.

    Rows of 0 or 1 real tokens get no offset. Float32, without a gradient: a fixed prior that learned scores add to.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    n = mask.sum(dim=-1, dtype=torch.float32)  # (B,)
    others = (n - 1).clamp(min=1)
    if normalizer == "sparsemax":
        delta = share - (1.0 - share) / others
    elif normalizer == "entmax15":
        delta = 2.0 * (math.sqrt(share) - ((1.0 - share) / others).sqrt())
    else:
        delta = others.log() + math.log(share / (1.0 - share))
    offset = torch.where(n > 1, delta, 0.0)
    prior = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return prior.scatter_(1, first_token_index(mask).long().unsqueeze(1), offset.unsqueeze(1))


def last_token_index(mask: Tensor) -> Tensor:
    """Index of the last real token of each row (0 for an empty row), correct under left or right padding."""
    positions = torch.arange(1, mask.shape[-1] + 1, device=mask.device, dtype=torch.int32)
    return (positions * mask.to(torch.int32)).argmax(dim=-1)


def one_hot_weights(index: Tensor, mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """One-hot ``(B, T)`` weights at ``index``, all zeros on rows without a real token."""
    weights = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    weights = weights.scatter(1, index.long().unsqueeze(1), 1.0)
    return weights * mask.any(dim=1, keepdim=True).to(dtype)


def has_token(mask: Tensor) -> Tensor:
    """``(B, 1)`` boolean: whether each row has at least one real token."""
    return mask.any(dim=-1, keepdim=True)


def zero_padding(hidden_states: Tensor, mask: Tensor) -> Tensor:
    """A copy of the hidden states with padded positions set to 0, whatever they held (NaN and inf included).

    ``masked_fill`` replaces the values instead of multiplying them by 0 (``0 * nan`` is NaN), and its backward
    gives padded positions an exactly zero gradient.

    Args:
        hidden_states: ``(B, T, H)``, or ``(B, L, T, H)`` stacked layers.
        mask: ``(B, T)`` boolean, ``True`` for real tokens.

    Returns:
        A new tensor of the same shape and dtype.
    """
    pad = ~mask.view(mask.shape[0], *([1] * (hidden_states.dim() - 3)), mask.shape[1], 1)  # (B, [1,] T, 1)
    return hidden_states.masked_fill(pad, 0.0)


def masked_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor, num_heads: int
) -> tuple[Tensor, Tensor]:
    r"""Multi-head scaled dot-product attention of a few queries over the real tokens.

    .. math::
        A_h = \mathrm{softmax}_{t: m_t = 1}\Big(\frac{Q_h K_h^\top}{\sqrt{d_h}}\Big), \qquad O_h = A_h V_h

    Scores and softmax are computed in float32 (fp16 scores of large hidden states overflow; float64 inputs in
    float64), padded keys get exactly zero weight, padded values are replaced by 0 before the product (so not even
    ``inf`` in padding can leak into the output), and a row without real tokens gives zero weights and a zero output.
    Padded keys must be finite for the query's gradient (their masked scores pass it 0 times the key): poolers'
    keys are projections of inputs :meth:`Pooler.forward` cleared.

    Args:
        query: ``(B, Q, E)`` or ``(1, Q, E)`` for queries shared by the batch (learned seeds).
        key: ``(B, T, E)``.
        value: ``(B, T, D)``.
        mask: ``(B, T)`` boolean, ``True`` for real tokens.
        num_heads: Number of heads; must divide ``E`` and ``D``.

    Returns:
        ``out (B, Q, D)`` in the value's dtype and ``weights (B, heads, Q, T)`` in float32 (float64 inputs: float64).
    """
    batch, seq_len, embed = key.shape
    head_dim = embed // num_heads
    dtype = compute_dtype(torch.promote_types(query.dtype, key.dtype))
    q = query.reshape(query.shape[0], query.shape[1], num_heads, head_dim).transpose(1, 2).to(dtype)  # (B|1, h, Q, d)
    k = key.reshape(batch, seq_len, num_heads, head_dim).transpose(1, 2).to(dtype)  # (B, h, T, d)
    with torch.autocast(key.device.type, enabled=False):  # fp16 autocast would run both products in fp16 again
        scores = torch.matmul(q * head_dim**-0.5, k.transpose(-1, -2))  # (B, h, Q, T)
    return attend(scores, value, mask, num_heads)


def float_linear(layer: torch.nn.Linear, x: Tensor) -> Tensor:
    """``layer(x)`` computed in float32 (float64 for float64 inputs), autocast off, for queries of large tokens.

    In half precision a projection of a token of ~3e4 (LLM outliers) overflows although the pooled output, a convex
    combination of the tokens, does not.
    """
    dtype = compute_dtype(x.dtype)
    bias = None if layer.bias is None else layer.bias.to(dtype)
    with torch.autocast(x.device.type, enabled=False):
        return torch.nn.functional.linear(x.to(dtype), layer.weight.to(dtype), bias)


def folded_key_scores(query: Tensor, key_weight: Tensor, tokens: Tensor, num_heads: int) -> Tensor:
    r"""The scores of :func:`masked_attention` for the keys ``tokens @ key_weight.T``, without forming the keys.

    With :math:`W_{k,h}` head ``h``'s rows of a bias-free key projection,
    :math:`q_h \cdot W_{k,h} x_t = (W_{k,h}^\top q_h) \cdot x_t`: the key projection is folded into each query,
    one ``(heads, H_in)`` row per query instead of ``(B, T, E)`` keys. Everything runs in float32 (float64 for
    float64), autocast off, so that in half precision the keys of large tokens, which overflow where the pooled
    output does not, are never formed.

    Args:
        query: ``(B, Q, E)`` or ``(1, Q, E)`` for queries shared by the batch.
        key_weight: ``(E, H_in)``, the key projection's weight.
        tokens: ``(B, T, H_in)``, padding already cleared.
        num_heads: Number of heads; must divide ``E``.

    Returns:
        Scores ``(B, heads, Q, T)`` for :func:`attend`.
    """
    dtype = compute_dtype(torch.promote_types(query.dtype, tokens.dtype))
    rows, num_queries, embed = query.shape
    head_dim = embed // num_heads
    with torch.autocast(tokens.device.type, enabled=False):
        q = query.to(dtype).reshape(rows, num_queries, num_heads, head_dim) * head_dim**-0.5
        w_k = key_weight.to(dtype).view(num_heads, head_dim, key_weight.shape[-1])  # (h, d, H_in)
        folded = torch.einsum("bqhd,hdi->bhqi", q, w_k).reshape(rows, num_heads * num_queries, -1)  # (B|1, h*Q, H_in)
        x = tokens.to(dtype)
        # one (h*Q, H_in) x (H_in, T) product per row: broadcasting the tokens over the heads would copy them h times
        scores = torch.matmul(folded.expand(x.shape[0], -1, -1), x.transpose(1, 2))  # (B, h*Q, T)
        return scores.view(x.shape[0], num_heads, num_queries, x.shape[1])


def attend(scores: Tensor, value: Tensor, mask: Tensor, num_heads: int) -> tuple[Tensor, Tensor]:
    """The second half of :func:`masked_attention`: masked softmax of the scores, then each head's share of values.

    Args:
        scores: ``(B, heads, Q, T)``, float32 (or float64).
        value: ``(B, T, D)``; head ``h`` reads channels ``h * D / heads`` to ``(h + 1) * D / heads``.
        mask: ``(B, T)`` boolean, ``True`` for real tokens.
        num_heads: Number of heads; must divide ``D``.

    Returns:
        ``out (B, Q, D)`` in the value's dtype and ``weights (B, heads, Q, T)`` in the scores' dtype.
    """
    batch, seq_len, size = value.shape
    with torch.autocast(value.device.type, enabled=False):
        weights = masked_softmax(scores, mask[:, None, None, :])  # (B, h, Q, T)
        v = zero_padding(value, mask).reshape(batch, seq_len, num_heads, size // num_heads).transpose(1, 2)
        out = weighted_matmul(weights, v)  # (B, h, Q, dv)
    return out.transpose(1, 2).reshape(batch, scores.shape[-2], size), weights


def attend_projected(
    scores: Tensor, tokens: Tensor, value: torch.nn.Linear, mask: Tensor, num_heads: int
) -> tuple[Tensor, Tensor]:
    r""":func:`attend` with the values ``value(tokens)``, the value projection applied after the weighted sum.

    With :math:`W_{v,h}, b_{v,h}` head ``h``'s rows of the projection and :math:`a_{h,t}` its weights, summing to 1
    over the real tokens, :math:`\sum_t a_{h,t} (W_{v,h} x_t + b_{v,h}) = W_{v,h} \sum_t a_{h,t} x_t + b_{v,h}`:
    each head sums the tokens, then projects. In half precision the values of a token of ~3e4 overflow (inf) and
    even its weight of exactly 0 gave ``0 * inf = NaN``; a convex combination of the tokens does not. Runs in float32
    (float64 for float64), autocast off; ``heads`` sums of width ``H_in`` instead of ``(B, T, D)`` values.

    Args:
        scores: ``(B, heads, Q, T)``, float32 (or float64).
        tokens: ``(B, T, H_in)``, padding already cleared (a weight of 0 times inf or NaN is NaN).
        value: The value projection, ``H_in -> D``.
        mask: ``(B, T)`` boolean, ``True`` for real tokens.
        num_heads: Number of heads; must divide ``D``.

    Returns:
        ``out (B, Q, D)`` in float32 (float64 for float64: the caller rounds it, after a further projection where
        ``out`` itself may exceed fp16), zeros on a row without real tokens (no bias, as :func:`attend`'s zero
        values give), and ``weights (B, heads, Q, T)`` in the scores' dtype.
    """
    batch, num_queries = scores.shape[0], scores.shape[2]
    dtype = compute_dtype(torch.promote_types(scores.dtype, tokens.dtype))
    with torch.autocast(tokens.device.type, enabled=False):
        weights = masked_softmax(scores, mask[:, None, None, :])  # (B, h, Q, T)
        x = tokens.to(dtype)
        # (B, h, Q, H_in): one (h*Q, T) x (T, H_in) product per row, not the tokens broadcast (copied) over the heads
        sums = torch.bmm(weights.to(dtype).flatten(1, 2), x).view(batch, num_heads, num_queries, x.shape[-1])
        w_v = value.weight.to(dtype).view(num_heads, -1, value.weight.shape[-1])  # (h, d, H_in)
        out = torch.einsum("bhqi,hdi->bqhd", sums, w_v).reshape(batch, num_queries, -1)  # (B, Q, D)
        if value.bias is not None:  # the weights sum to 1 on a row with real tokens, to 0 on an empty one
            out = out + value.bias.to(dtype) * has_token(mask).unsqueeze(-1)
    return out, weights


def merge_heads(weights: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`masked_attention`'s ``(B, h, Q, T)`` weights as ``(B, h*Q, T)``, or ``(B, T)`` for a single one.

    What the attention poolers return as token weights: one distribution over the tokens per head and query.
    """
    flat = weights.flatten(1, 2)  # (B, h*Q, T)
    return (flat.squeeze(1) if flat.shape[1] == 1 else flat).to(dtype)


def masked_generalized_mean(hidden_states: Tensor, mask: Tensor, p: Tensor, eps: float) -> Tensor:
    r"""Per-channel generalised mean :math:`(\frac{1}{n}\sum_t \max(h_t, \epsilon)^p)^{1/p}` over real tokens.

    Computed in log space with the maximum shifted out, as
    :math:`\exp\big((\mathrm{logsumexp}_t(p \log x_t) - \log n) / p\big)`: ``x ** p`` itself is never formed, so the
    result is finite wherever the true value is (it lies between the smallest and the largest real value),
    however large ``x`` and ``p`` are. A direct ``x.pow(p)`` in float32 overflows for ``x = 100, p = 20`` or
    ``x = 1e4, p = 10`` and gives ``p`` a NaN gradient. Runs in float32 (float64 inputs: float64); padding is
    excluded before the logarithm; a row without real tokens gives zeros with finite (zero) gradients.

    Args:
        hidden_states: ``(B, T, H)``.
        mask: ``(B, T)`` boolean.
        p: The exponent, a scalar or one per channel ``(H,)``; positive.
        eps: Lower clamp of the hidden states (the generalised mean is defined on positive values).

    Returns:
        ``(B, H)`` in float32 (float64 inputs: float64).
    """
    pad = ~mask.unsqueeze(-1)  # (B, T, 1)
    dtype = compute_dtype(hidden_states.dtype)
    p = p.to(dtype)
    x = hidden_states.to(dtype).masked_fill(pad, 1.0).clamp(min=eps)
    scaled = p * x.log()  # (B, T, H), log of x ** p
    # Padding is excluded with the dtype's minimum, except on empty rows: there every position stays (at log 1 = 0),
    # so that the logsumexp and its gradient are finite; those rows are zeroed at the end.
    exclude = pad & has_token(mask).unsqueeze(-1)
    scaled = scaled.masked_fill(exclude, torch.finfo(dtype).min)
    counts = mask.sum(dim=1, keepdim=True).clamp(min=1).to(dtype)  # (B, 1)
    log_mean = torch.logsumexp(scaled, dim=1) - counts.log()  # (B, H), log of the mean of x ** p
    # An empty row's is log(T): divided by a small p (0.05 at T = 4096), its exp overflowed, and inf * 0 gave NaN
    # forward and a NaN gradient to p for the whole batch. Set to 0 (exp: 1) before the division.
    log_mean = torch.where(has_token(mask), log_mean, torch.zeros_like(log_mean))
    return torch.exp(log_mean / p) * has_token(mask)


def zero_empty_rows(pooled: Tensor, mask: Tensor) -> Tensor:
    """``(B, D)`` pooled vectors with rows that have no real token set to 0 (biases would make them non-zero)."""
    return torch.where(has_token(mask), pooled, torch.zeros_like(pooled))
