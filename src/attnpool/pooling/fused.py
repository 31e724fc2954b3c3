"""A fused forward/backward for single-head attention pooling that keeps one ``(B*T, A)`` activation.

Plain autograd over ``Linear -> tanh -> Linear -> softmax -> weighted sum`` keeps the tanh output, makes a
``(B*T, A)`` gradient for it, another for the pre-activation, and two ``(B, T, H)`` gradients for the hidden
states that it then adds. This backward reuses the saved tanh output for the pre-activation gradient (in place)
and accumulates both hidden-state gradients into one buffer, so the pooler needs barely more memory than the
bare ``Linear(H, A)`` forward+backward (measured by ``benchmarks/pooling_speed.py``).

Padding is cleared inside: the forward pools a copy of the hidden states with padded positions set to 0 (a NaN
there would survive a zero weight, ``0 * nan = nan``), and the backward writes the input's gradient into that
copy once it is no longer read, so clearing costs no memory beyond what the bare matmul's backward allocates.

Because the saved tanh output is overwritten, the backward can run once per forward: a second backward through
the same graph (``retain_graph=True``) raises. Use ``AttentionPooling(fused=False)`` for that, or for
double backward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnpool.pooling.functional import masked_softmax, zero_padding


class FusedAttentionPool(torch.autograd.Function):
    """``pooled, weights = FusedAttentionPool.apply(hidden, mask, W1, b1, w2, temperature)``."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, mask: Tensor, w1: Tensor, b1: Tensor, w2: Tensor,
                temperature: float) -> tuple[Tensor, Tensor]:
        """Pool as :class:`~attnpool.pooling.AttentionPooling` does; save what the backward needs."""
        batch, seq_len, size = hidden.shape
        clean = zero_padding(hidden, mask).contiguous()  # (B, T, H), our own buffer: the backward reuses it
        flat = clean.view(batch * seq_len, size)
        tanh_out = torch.addmm(b1, flat, w1.t()).tanh_()  # (B*T, A), a real tensor: tanh_ is free
        scores = torch.mv(tanh_out, w2.view(-1)).view(batch, seq_len)  # (B, T)
        if temperature != 1.0:
            scores = scores / temperature
        weights = masked_softmax(scores, mask)  # (B, T), exactly 0 on padding
        pooled = torch.bmm(weights.unsqueeze(1).to(hidden.dtype), clean).squeeze(1)  # (B, H)
        ctx.save_for_backward(clean, tanh_out, weights, w1, w2)
        ctx.temperature = temperature
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
        hidden, tanh_out, weights, w1, w2 = ctx.saved_tensors
        batch, seq_len, size = hidden.shape
        dtype = hidden.dtype
        if grad_pooled is None:
            grad_pooled = torch.zeros(batch, size, dtype=dtype, device=hidden.device)
        # d weights: <h_t, g> per token, plus any gradient flowing into the returned weights.
        grad_a = torch.bmm(hidden, grad_pooled.unsqueeze(-1)).squeeze(-1).float()  # (B, T)
        if grad_weights is not None:
            grad_a = grad_a + grad_weights.float()
        a32 = weights.float()
        grad_scores = a32 * (grad_a - (a32 * grad_a).sum(dim=-1, keepdim=True))  # softmax backward; 0 on padding
        if ctx.temperature != 1.0:
            grad_scores = grad_scores / ctx.temperature
        grad_s = grad_scores.to(dtype).view(-1)  # (B*T,)
        grad_w2 = (grad_s @ tanh_out).view_as(w2) if ctx.needs_input_grad[4] else None
        # d pre-activation = (1 - tanh^2) * grad_s * w2, written over the saved tanh output.
        grad_pre = tanh_out.mul_(tanh_out).neg_().add_(1.0).mul_(grad_s.unsqueeze(1)).mul_(w2.view(1, -1))
        grad_w1 = grad_pre.t() @ hidden.reshape(-1, size) if ctx.needs_input_grad[2] else None
        grad_b1 = grad_pre.sum(dim=0) if ctx.needs_input_grad[3] else None
        grad_hidden = None
        if ctx.needs_input_grad[0]:
            # The cleared copy of the input is read no more: the gradient is written into it. Padded rows get
            # weight 0 and grad_pre 0 (their scores' gradient is 0, their tanh output finite), so exactly 0.
            grad_hidden = torch.mul(weights.to(dtype).unsqueeze(-1), grad_pooled.unsqueeze(1), out=hidden)
            grad_hidden.view(-1, size).addmm_(grad_pre, w1)  # (B*T, H)
        return grad_hidden, None, grad_w1, grad_b1, grad_w2, None
