"""Masked reductions over the token axis, shared by every pooler.

All functions take ``mask`` as a boolean tensor of shape ``(B, T)`` with ``True`` for real tokens, never write
into their inputs, and give finite zeros for a row without any real token.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` in float32 with masked positions excluded, cast back to the scores' dtype.

    Masked scores are filled with the float32 minimum *before* the softmax (a literal such as ``-1e9`` would
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
    scores32 = scores.float().masked_fill(~mask, torch.finfo(torch.float32).min)
    weights = torch.softmax(scores32, dim=dim)
    # A fully masked row is uniform after the softmax; zeroing masked positions makes it all zeros.
    return weights.masked_fill(~mask, 0.0).to(scores.dtype)


def weighted_sum(weights: Tensor, hidden_states: Tensor) -> Tensor:
    """Sum of hidden states weighted over the token axis, as one batched matrix product.

    Args:
        weights: ``(B, T)`` or ``(B, K, T)`` token weights.
        hidden_states: ``(B, T, H)``.

    Returns:
        ``(B, H)`` for 2-D weights, ``(B, K, H)`` for 3-D weights, in the hidden states' dtype.
    """
    w = weights.to(hidden_states.dtype)
    if w.dim() == 2:
        return torch.bmm(w.unsqueeze(1), hidden_states).squeeze(1)  # (B, H)
    return torch.bmm(w, hidden_states)  # (B, K, H)


def mean_weights(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Uniform weights over the real tokens of each row: ``mask / max(count, 1)``, shape ``(B, T)``."""
    m = mask.to(dtype)
    return m / m.sum(dim=-1, keepdim=True).clamp(min=1.0)


def masked_mean(hidden_states: Tensor, mask: Tensor) -> Tensor:
    """Mean of the real tokens' hidden states, ``(B, T, H) -> (B, H)``; zeros for an empty row."""
    return weighted_sum(mean_weights(mask, torch.float32), hidden_states)


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

    Scores and softmax are computed in float32 (fp16 scores of large hidden states overflow), padded keys get
    exactly zero weight, padded values are replaced by 0 before the product (so not even ``inf`` in padding can
    leak in), and a row without real tokens gives zero weights and a zero output.

    Args:
        query: ``(B, Q, E)`` or ``(1, Q, E)`` for queries shared by the batch (learned seeds).
        key: ``(B, T, E)``.
        value: ``(B, T, D)``.
        mask: ``(B, T)`` boolean, ``True`` for real tokens.
        num_heads: Number of heads; must divide ``E`` and ``D``.

    Returns:
        ``out (B, Q, D)`` in the value's dtype and ``weights (B, heads, Q, T)`` in float32.
    """
    batch, seq_len, embed = key.shape
    n_query, size = query.shape[1], value.shape[-1]
    head_dim, value_dim = embed // num_heads, size // num_heads
    q = query.reshape(query.shape[0], n_query, num_heads, head_dim).transpose(1, 2).float()  # (B|1, h, Q, d)
    k = key.reshape(batch, seq_len, num_heads, head_dim).transpose(1, 2).float()  # (B, h, T, d)
    with torch.autocast(key.device.type, enabled=False):  # fp16 autocast would run both products in fp16 again
        scores = torch.matmul(q * head_dim**-0.5, k.transpose(-1, -2))  # (B, h, Q, T)
        weights = masked_softmax(scores, mask[:, None, None, :])  # (B, h, Q, T) float32
        v = zero_padding(value, mask).reshape(batch, seq_len, num_heads, value_dim).transpose(1, 2)  # (B, h, T, dv)
        out = torch.matmul(weights.to(v.dtype), v)  # (B, h, Q, dv)
    return out.transpose(1, 2).reshape(batch, n_query, size), weights


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
    ``x = 1e4, p = 10`` and gives ``p`` a NaN gradient. Runs in float32; padding is excluded before the logarithm;
    a row without real tokens gives zeros with finite (zero) gradients.

    Args:
        hidden_states: ``(B, T, H)``.
        mask: ``(B, T)`` boolean.
        p: The exponent, a scalar or one per channel ``(H,)``; positive.
        eps: Lower clamp of the hidden states (the generalised mean is defined on positive values).

    Returns:
        ``(B, H)`` in float32.
    """
    pad = ~mask.unsqueeze(-1)  # (B, T, 1)
    x = hidden_states.float().masked_fill(pad, 1.0).clamp(min=eps)
    scaled = p * x.log()  # (B, T, H), log of x ** p
    # Padding is excluded with the float32 minimum, except on empty rows: there every position stays (at log 1 = 0),
    # so that the logsumexp and its gradient are finite; those rows are zeroed at the end.
    exclude = pad & has_token(mask).unsqueeze(-1)
    scaled = scaled.masked_fill(exclude, torch.finfo(torch.float32).min)
    counts = mask.sum(dim=1, keepdim=True).clamp(min=1).float()  # (B, 1)
    log_mean = torch.logsumexp(scaled, dim=1) - counts.log()  # (B, H), log of the mean of x ** p
    return torch.exp(log_mean / p) * has_token(mask)


def zero_empty_rows(pooled: Tensor, mask: Tensor) -> Tensor:
    """``(B, D)`` pooled vectors with rows that have no real token set to 0 (biases would make them non-zero)."""
    return torch.where(has_token(mask), pooled, torch.zeros_like(pooled))
