"""Masked reductions over the token axis, shared by every pooler.

All functions take ``mask`` as a boolean tensor of shape ``(B, T)`` with ``True`` for real tokens, never write
into their inputs, and give finite zeros for a row without any real token.
"""

from __future__ import annotations

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


def last_token_index(mask: Tensor) -> Tensor:
    """Index of the last real token of each row (0 for an empty row), correct under left or right padding."""
    positions = torch.arange(1, mask.shape[-1] + 1, device=mask.device, dtype=torch.int32)
    return (positions * mask.to(torch.int32)).argmax(dim=-1)


def one_hot_weights(index: Tensor, mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """One-hot ``(B, T)`` weights at ``index``, all zeros on rows without a real token."""
    weights = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    weights = weights.scatter(1, index.long().unsqueeze(1), 1.0)
    return weights * mask.any(dim=1, keepdim=True).to(dtype)
