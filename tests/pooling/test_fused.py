"""The fused backward of attention pooling gives autograd's gradients with less memory."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, perturb_parameters, ragged_batch

from attnpool.pooling import AttentionPooling


def grads(pooler, hidden, mask, fused):
    pooler.fused = fused
    pooler.zero_grad()
    hidden = hidden.detach().clone().requires_grad_(True)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    # Use both outputs, so the gradient flowing into the weights is checked too.
    (pooled.pow(2).sum() + (weights * torch.linspace(0, 1, weights.shape[1])).sum()).backward()
    return [pooled.detach(), weights.detach(), hidden.grad] + [p.grad.clone() for p in pooler.parameters()]


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_fused_gradients_equal_autograd(temperature):
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12, temperature=temperature), scale=0.3)
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=1e3)
    fused, plain = grads(pooler, hidden, mask, True), grads(pooler, hidden, mask, False)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_fused_path_is_taken_in_training():
    pooler = AttentionPooling(HIDDEN, attn_size=8)
    hidden, mask, _ = ragged_batch([3, 4])
    pooled = pooler(hidden.requires_grad_(True), mask)
    assert "FusedAttentionPool" in type(pooled.grad_fn).__name__
    with torch.no_grad():
        assert pooler(hidden, mask).grad_fn is None


def test_second_backward_through_the_fused_graph_raises_a_clear_error():
    pooler = AttentionPooling(HIDDEN, attn_size=8)
    hidden, mask, _ = ragged_batch([3, 4])
    loss = pooler(hidden, mask).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="can run once per forward; build the pooler with fused=False"):
        loss.backward()
    unfused = AttentionPooling(HIDDEN, attn_size=8, fused=False)
    loss = unfused(hidden, mask).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # fine without fusion


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), -float("inf")])
def test_fused_path_keeps_nan_and_inf_padding_out_of_every_gradient(poison):
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12), scale=0.3)
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=1.0)
    poisoned = hidden.masked_fill(~mask.bool().unsqueeze(-1), poison)
    clean, dirty = grads(pooler, hidden, mask, True), grads(pooler, poisoned, mask, True)
    for a, b in zip(dirty, clean, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert (dirty[2][~mask.bool()] == 0).all()  # the input's gradient is exactly 0 on padding
