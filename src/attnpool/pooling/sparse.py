r"""Sparse alternatives to the softmax for attention weights: sparsemax and 1.5-entmax, both mask-aware.

Both map scores to a probability distribution that can put *exactly* zero weight on low-scoring tokens:

* sparsemax, from "From Softmax to Sparsemax: A Sparse Model of Attention and Multi-Label Classification"
  (Martins and Astudillo, 2016, arXiv:1602.02068): the Euclidean projection onto the simplex,
  :math:`p = \max(z - \tau, 0)` with :math:`\tau` such that :math:`\sum_t p_t = 1`.
* 1.5-entmax, from "Sparse Sequence-to-Sequence Models" (Peters, Niculae and Martins, 2019, arXiv:1905.05702):
  :math:`p = \max(z / 2 - \tau, 0)^2` with :math:`\sum_t p_t = 1`, between softmax and sparsemax.

Both use the exact sort-based algorithms, restricted to the real positions: padding is excluded from the support
and gets exactly 0, and a row without any real position gives all zeros with zero gradients (the public ``entmax``
package returns NaN for a row of ``-inf``). Everything runs in float32 (float64 scores: float64) and is cast back.
The gradients are plain autograd (no custom ``autograd.Function``), so the functions work under ``torch.compile``
and ONNX export: sparsemax differentiates through the closed form of :math:`\tau`; for entmax the threshold is found
on detached values and given the gradient of the implicit equation,
:math:`\partial\tau / \partial x_t = \sqrt{p_t} / \sum_s \sqrt{p_s}`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from attnpool.pooling.functional import compute_dtype, masked_softmax

Normalizer = Literal["softmax", "sparsemax", "entmax15"]
NORMALIZERS: tuple[str, ...] = ("softmax", "sparsemax", "entmax15")


def _prepare(scores: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Float32 scores shifted by the row maximum (0 on padding), the expanded mask, the sort ranks and the real counts.

    Float64 scores stay float64 (:func:`~attnpool.pooling.functional.compute_dtype`), and so do the ranks and counts.
    """
    mask = mask.expand_as(scores)
    z = scores.to(compute_dtype(scores.dtype))
    lowest = torch.finfo(z.dtype).min
    row_max = z.masked_fill(~mask, lowest).amax(dim=-1, keepdim=True)
    # Both maps are invariant to a shift of the scores; shifting by the detached maximum only helps precision.
    shift = torch.where(mask.any(dim=-1, keepdim=True), row_max, torch.zeros_like(row_max)).detach()
    ranks = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)  # (T,)
    counts = mask.sum(dim=-1, keepdim=True).to(z.dtype)  # (..., 1)
    # Padding is replaced by 0, not just kept out of the sort: an inf or NaN there would make NaN of `x - x.detach()`
    # and of `0 * nan` in the gradients (masked_fill's backward gives it exactly 0).
    return (z - shift).masked_fill(~mask, 0.0), mask, ranks, counts


def _sorted_real(z: Tensor, mask: Tensor, ranks: Tensor, counts: Tensor) -> tuple[Tensor, Tensor]:
    """Real scores sorted in descending order, zeros after them, and the boolean ``rank <= count``."""
    lowest = torch.finfo(z.dtype).min
    z_sorted = z.masked_fill(~mask, lowest).sort(dim=-1, descending=True).values  # padding sorts last
    valid = ranks <= counts
    return torch.where(valid, z_sorted, torch.zeros_like(z_sorted)), valid


def masked_sparsemax(scores: Tensor, mask: Tensor) -> Tensor:
    """Sparsemax over the last axis, restricted to the real positions; the scores' dtype is kept.

    Args:
        scores: Unnormalised scores, e.g. ``(B, T)`` or ``(B, heads, T)``.
        mask: Boolean mask broadcastable to ``scores``, ``True`` for real positions.

    Returns:
        Weights summing to 1 over the real positions of each row (0 on a row without any), exactly 0 on padding
        and on real positions outside the support.
    """
    z, mask, ranks, counts = _prepare(scores, mask)
    z_sorted, valid = _sorted_real(z, mask, ranks, counts)
    cumsum = z_sorted.cumsum(dim=-1)
    support = valid & (1.0 + ranks * z_sorted > cumsum)
    k = support.sum(dim=-1, keepdim=True).clamp(min=1)  # support size, >= 1 so that the gather is defined
    tau = (cumsum.gather(-1, k - 1) - 1.0) / k  # (..., 1)
    weights = (z - tau).clamp(min=0.0).masked_fill(~mask, 0.0)
    return weights.to(scores.dtype)


def masked_entmax15(scores: Tensor, mask: Tensor) -> Tensor:
    """1.5-entmax over the last axis, restricted to the real positions; the scores' dtype is kept.

    Args:
        scores: Unnormalised scores, e.g. ``(B, T)`` or ``(B, heads, T)``.
        mask: Boolean mask broadcastable to ``scores``, ``True`` for real positions.

    Returns:
        Weights summing to 1 over the real positions of each row (0 on a row without any), exactly 0 on padding
        and on real positions outside the support.
    """
    z, mask, ranks, counts = _prepare(scores, mask)
    x = z / 2  # (alpha - 1) * z with alpha = 1.5
    # The threshold, by the exact sort-based algorithm of Peters et al. on detached values.
    xs, valid = _sorted_real(x.detach(), mask, ranks, counts)
    mean = xs.cumsum(dim=-1) / ranks
    mean_sq = xs.square().cumsum(dim=-1) / ranks
    delta = (1.0 - ranks * (mean_sq - mean.square())) / ranks
    tau_all = mean - delta.clamp(min=0.0).sqrt()
    support = valid & (tau_all <= xs)
    k = support.sum(dim=-1, keepdim=True).clamp(min=1)
    tau = tau_all.gather(-1, k - 1)  # (..., 1), no gradient yet
    # Implicit gradient of sum_t relu(x_t - tau)^2 = 1: dtau/dx_t = relu(x_t - tau) / sum_s relu(x_s - tau).
    root = (x.detach() - tau).clamp(min=0.0).masked_fill(~mask, 0.0)
    share = root / root.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(root.dtype).tiny)
    tau = tau + (share * (x - x.detach())).sum(dim=-1, keepdim=True)  # same value, the right gradient
    weights = (x - tau).clamp(min=0.0).square().masked_fill(~mask, 0.0)
    return weights.to(scores.dtype)


def normalize(scores: Tensor, mask: Tensor, normalizer: str = "softmax") -> Tensor:
    """Masked ``softmax``, ``sparsemax`` or ``entmax15`` over the last axis (see the module docstring)."""
    if normalizer == "softmax":
        return masked_softmax(scores, mask)
    if normalizer == "sparsemax":
        return masked_sparsemax(scores, mask)
    if normalizer == "entmax15":
        return masked_entmax15(scores, mask)
    raise ValueError(f"normalizer must be one of {', '.join(map(repr, NORMALIZERS))}, got {normalizer!r}")
