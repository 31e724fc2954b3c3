"""A fused forward/backward for single-head attention pooling that keeps one ``(B*T, A)`` activation.

Plain autograd over ``Linear -> tanh -> Linear -> softmax -> weighted sum`` keeps the tanh output, makes a
``(B*T, A)`` gradient for it, another for the pre-activation, and two ``(B, T, H)`` gradients for the hidden
states that it then adds. This backward reuses the saved tanh output for the pre-activation gradient (in place)
and accumulates both hidden-state gradients into one buffer, so the pooler needs no more memory than the bare
``Linear(H, A)`` forward+backward (measured by ``benchmarks/pooling_speed.py``).

Padding takes part in no product except as zeros: a NaN there would survive a zero weight (``0 * nan = nan``).
On CPU, where finding the padded positions costs no device sync, a batch with padding is *packed*: its real
tokens are copied into the first rows of a ``(B*T, H)`` buffer of ours, and the three ``B*T x H x A`` matrix
products, nearly all of the cost, run over those rows only; the weighted sum is a segment sum
(``embedding_bag``). The backward writes the real tokens' gradients into the same rows, then moves each row to
its position and zeroes the padded ones: the buffer becomes the input's gradient. Otherwise (no padding, a layout
that would take many moves to unpack, or another device) it runs over all ``B*T`` rows of a copy whose padded
rows are 0, which again becomes the input's gradient; without any padding on CPU the input itself is read and
nothing is copied.

Because the saved tanh output is overwritten, the backward can run once per forward: a second backward through
the same graph (``retain_graph=True``) raises. Use ``AttentionPooling(fused=False)`` for that, or for
double backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F_nn
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnpool.pooling.functional import HALF_NORMAL_TOKENS, compute_dtype, masked_softmax, weighted_sum

# Packing is given up for a layout that needs more row moves than this to unpack in place (e.g. one padded token
# at the start of a long batch: every later row moves by one). Right or left padding of a ragged batch needs about
# a dozen at B = 32; each move is one ``index_copy_`` call.
MAX_UNPACK_MOVES = 32
# Sequences per block when the backward forms <h_t, g_b> for packed rows: (their rows) @ (their 16 gradients).
DOT_BLOCK = 16


@dataclass
class _Packing:
    """Where the real tokens of a batch go when they are packed, and how to move them back.

    ``real`` are the real positions in ``B*T`` order (so each sequence's tokens are one contiguous run of packed
    rows, starting at ``offsets[b]``), ``pad`` the padded ones, ``row_seq`` each packed row's sequence. ``moves``
    are ``(start, end)`` runs of packed rows, last first, whose targets ``real[start:end]`` all lie at or after
    ``end``: copying each run in this order never overwrites a row still to be moved.
    """

    real: Tensor  # (N,)
    pad: Tensor  # (B*T - N,)
    offsets: Tensor  # (B,)
    row_seq: Tensor  # (N,)
    bounds: list[int]  # B + 1 packed-row offsets, as Python ints
    moves: list[tuple[int, int]]


def _plan_packing(mask: Tensor) -> _Packing | None:
    """How to pack a CPU batch; ``None`` where the dense path is better.

    That is: no padding, no real token, or a layout that takes more than :data:`MAX_UNPACK_MOVES` moves to unpack.
    """
    flat = mask.reshape(-1)  # (B*T,)
    real = flat.nonzero().squeeze(1)
    n_real = real.numel()
    if n_real == 0 or n_real == flat.numel():
        return None
    # Row i of the packed rows belongs at real[i] >= i. The last run that can move at once is the one whose
    # targets start at or after its end: [first i with real[i] >= end, end). Rows already in place end it.
    targets = real.numpy()
    moves = []
    end = n_real
    while end > 0:
        start = int(np.searchsorted(targets, end))
        if start == end:
            break
        moves.append((start, end))
        if len(moves) > MAX_UNPACK_MOVES:
            return None
        end = start
    lengths = mask.sum(dim=1)  # (B,)
    bounds = [0, *lengths.cumsum(0).tolist()]
    return _Packing(
        real=real,
        pad=(~flat).nonzero().squeeze(1),
        offsets=torch.tensor(bounds[:-1]),
        row_seq=torch.repeat_interleave(torch.arange(mask.shape[0]), lengths),
        bounds=bounds,
        moves=moves,
    )


def _clear_padding(hidden: Tensor, mask: Tensor) -> tuple[Tensor, bool]:
    """The dense path's input: the hidden states, padded positions 0, contiguous; and whether it is our own copy.

    Only our own copy may be overwritten by the backward. On CPU the padded rows are found first (a sync, free
    there): without any, the input itself is used (no copy); otherwise it is copied and only its padded rows are
    zeroed, plain memory copies about 4x faster than ``masked_fill``/``where``, whose CPU kernels are not
    vectorised over a mask broadcast along ``H``. Elsewhere ``where`` runs without a sync.

    Shapes:
        ``hidden (B, T, H)``, ``mask (B, T)`` boolean -> ``(B, T, H)``.
    """
    size = hidden.shape[-1]
    if hidden.device.type != "cpu":
        return torch.where(mask.unsqueeze(-1), hidden, 0.0).contiguous(), True
    pad_rows = (~mask).reshape(-1).nonzero().squeeze(1)  # (P,) indices into B*T (a mask may be a strided view)
    if pad_rows.numel() == 0:
        return (hidden, False) if hidden.is_contiguous() else (hidden.contiguous(), True)
    clean = hidden.clone(memory_format=torch.contiguous_format)
    clean.view(-1, size).index_fill_(0, pad_rows, 0.0)
    return clean, True


def _packed_row_dots(rows: Tensor, grad_pooled: Tensor, packing: _Packing) -> Tensor:
    """``<rows[n], grad_pooled[sequence of n]>`` for every packed row, in blocks of :data:`DOT_BLOCK` sequences.

    One small matrix product per block (``DOT_BLOCK`` multiply-adds per element, all in cache) instead of a
    gathered copy of ``grad_pooled`` as large as the rows.

    Shapes:
        ``rows (N, H)``, ``grad_pooled (B, H)`` -> ``(N,)``.
    """
    dots = rows.new_empty(rows.shape[0])
    bounds, batch = packing.bounds, grad_pooled.shape[0]
    for first in range(0, batch, DOT_BLOCK):
        last = min(first + DOT_BLOCK, batch)
        lo, hi = bounds[first], bounds[last]
        if lo == hi:
            continue
        block = rows[lo:hi] @ grad_pooled[first:last].t()  # (n, k): every row against the block's sequences
        column = (packing.row_seq[lo:hi] - first).unsqueeze(1)  # (n, 1): the row's own sequence
        dots[lo:hi] = block.gather(1, column).squeeze(1)
    return dots


class FusedAttentionPool(torch.autograd.Function):
    """``pooled, weights = FusedAttentionPool.apply(hidden, mask, W1, b1, w2, temperature, prior)``.

    ``prior``: ``None``, or fixed ``(B, T)`` score offsets added after the temperature (no gradient).
    """

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, mask: Tensor, w1: Tensor, b1: Tensor, w2: Tensor,
                temperature: float, prior: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Pool as :class:`~attnpool.pooling.AttentionPooling` does; save what the backward needs."""
        batch, seq_len, size = hidden.shape
        dtype = hidden.dtype
        # Long fp16 rows are summed densely with float32 weights, as weighted_sum does: rounded to fp16, weights near
        # 1/T would be subnormal (a uniform start over 1e5 tokens gave weights summing to 1.0014).
        long_half = dtype == torch.float16 and seq_len > HALF_NORMAL_TOKENS
        packing = _plan_packing(mask) if hidden.device.type == "cpu" and not long_half else None
        if packing is not None:
            buffer = hidden.new_empty(batch * seq_len, size)  # (B*T, H): packed rows now, the gradient later
            rows = torch.index_select(hidden.reshape(-1, size), 0, packing.real, out=buffer[: packing.real.numel()])
            owned = True
        else:
            buffer, owned = _clear_padding(hidden, mask)  # (B, T, H)
            rows = buffer.view(batch * seq_len, size)
        tanh_out = torch.addmm(b1, rows, w1.t()).tanh_()  # (N, A), a real tensor: tanh_ is free
        row_scores = torch.mv(tanh_out, w2.view(-1))  # (N,)
        if packing is not None:
            scores = row_scores.new_zeros(batch * seq_len).index_copy_(0, packing.real, row_scores)
        else:
            scores = row_scores
        # (B, T), padded scores masked below; in float32 (float64: float64) before the temperature: divided by a small
        # one in fp16 they overflowed to inf, and the softmax gave NaN
        scores = scores.view(batch, seq_len).to(compute_dtype(dtype))
        if temperature != 1.0:
            scores = scores / temperature
        if prior is not None:
            scores = scores + prior
        # The softmax in float32 (float64: float64), as in the plain path. Its backward needs these exact weights:
        # rounded to half precision they no longer sum to 1, and the softmax gradient loses its cancellation. The
        # returned weights and the weighted sum use them rounded to dtype, as the plain path's do.
        exact = masked_softmax(scores, mask)  # (B, T), exactly 0 on padding
        weights = exact.to(dtype)
        if long_half:
            pooled = weighted_sum(exact, buffer)  # (B, H)
        elif packing is not None:
            row_weights = weights.view(-1).index_select(0, packing.real).to(dtype)  # (N,)
            indices = torch.arange(rows.shape[0])
            pooled = F_nn.embedding_bag(indices, rows, packing.offsets, mode="sum", per_sample_weights=row_weights)
        else:
            pooled = torch.bmm(weights.unsqueeze(1).to(dtype), buffer).squeeze(1)  # (B, H)
        ctx.save_for_backward(buffer, tanh_out, exact, w1, w2)  # exact: float32 for half precision, (B, T) only
        ctx.packing = packing
        ctx.hidden_shape = (batch, seq_len, size)
        ctx.temperature = temperature
        ctx.owned = owned
        ctx.consumed = False
        ctx.mark_non_differentiable(mask)
        return pooled, weights

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_pooled: Tensor | None, grad_weights: Tensor | None):
        """Gradients for hidden states and the three parameters; the saved buffers are reused for them."""
        if ctx.consumed:
            raise RuntimeError(
                "AttentionPooling's fused backward overwrites its saved activation and can run once per forward; "
                "build the pooler with fused=False to backward through it twice (retain_graph=True)"
            )
        ctx.consumed = True
        buffer, tanh_out, exact, w1, w2 = ctx.saved_tensors  # exact: the unrounded weights
        packing: _Packing | None = ctx.packing
        batch, seq_len, size = ctx.hidden_shape
        dtype = buffer.dtype
        acc = compute_dtype(dtype)  # the softmax backward in float32, float64 for float64
        rows = buffer.view(-1, size)[: tanh_out.shape[0]]  # (N, H): the rows the forward multiplied
        if grad_pooled is None:
            grad_pooled = torch.zeros(batch, size, dtype=dtype, device=buffer.device)
        # d weights: <h_t, g> per token, plus any gradient flowing into the returned weights.
        if packing is not None:
            row_dots = _packed_row_dots(rows, grad_pooled, packing).to(acc)
            grad_a = row_dots.new_zeros(batch * seq_len).index_copy_(0, packing.real, row_dots).view(batch, seq_len)
        else:
            # (B, 1, H) @ (B, H, T): about twice as fast on CPU as (B, T, H) @ (B, H, 1).
            grad_a = torch.bmm(grad_pooled.unsqueeze(1), buffer.transpose(1, 2)).squeeze(1).to(acc)  # (B, T)
        if grad_weights is not None:
            grad_a = grad_a + grad_weights.to(acc)
        a32 = exact.to(acc)
        grad_scores = a32 * (grad_a - (a32 * grad_a).sum(dim=-1, keepdim=True))  # softmax backward; 0 on padding
        if ctx.temperature != 1.0:
            grad_scores = grad_scores / ctx.temperature
        grad_s = grad_scores.to(dtype).view(-1)  # (B*T,)
        if packing is not None:
            grad_s = grad_s.index_select(0, packing.real)  # (N,)
        grad_w2 = (grad_s @ tanh_out).view_as(w2) if ctx.needs_input_grad[4] else None
        # The pre-activation's gradient is (1 - tanh^2) * grad_s * w2. Only G = (1 - tanh^2) * grad_s is formed, in
        # one pass over the saved tanh output (tanh_backward, written in place); the factor w2 goes into the small
        # results instead: G*w2 summed is w2 * sum(G), (G*w2)^T h is diag(w2) G^T h, (G*w2) W1 is G (w2 * W1).
        w2_col = w2.view(-1, 1)  # (A, 1)
        grad_pre = torch.ops.aten.tanh_backward.grad_input(
            grad_s.unsqueeze(1).expand_as(tanh_out), tanh_out, grad_input=tanh_out
        )  # (N, A), without the factor w2
        grad_w1 = (grad_pre.t() @ rows).mul_(w2_col) if ctx.needs_input_grad[2] else None
        grad_b1 = grad_pre.sum(dim=0).mul_(w2_col.view(-1)) if ctx.needs_input_grad[3] else None
        grad_hidden = None
        if ctx.needs_input_grad[0]:
            # The rows are read no more: the gradient is written into our buffer. In the dense path padded rows
            # get weight 0 and grad_pre 0 (their scores' gradient is 0, their tanh output finite), so exactly 0.
            w1_scaled = w1 * w2_col  # (A, H)
            if packing is not None:
                row_weights = exact.view(-1).index_select(0, packing.real).to(dtype)  # rounded, as in the forward
                torch.index_select(grad_pooled, 0, packing.row_seq, out=rows).mul_(row_weights.unsqueeze(1))
                rows.addmm_(grad_pre, w1_scaled)  # (N, H)
                flat = buffer.view(-1, size)  # (B*T, H)
                for start, end in packing.moves:  # targets at or after `end`: disjoint from the rows read
                    flat[end:].index_copy_(0, packing.real[start:end] - end, flat[start:end])
                flat.index_fill_(0, packing.pad, 0.0)
                grad_hidden = flat.view(batch, seq_len, size)
            else:
                rank_one = (exact.to(dtype).unsqueeze(-1), grad_pooled.unsqueeze(1))  # (B, T, 1), (B, 1, H)
                grad_hidden = torch.mul(*rank_one, out=buffer) if ctx.owned else torch.mul(*rank_one)
                grad_hidden.view(-1, size).addmm_(grad_pre, w1_scaled)  # (B*T, H)
        return grad_hidden, None, grad_w1, grad_b1, grad_w2, None, None
