"""The fused backward of attention pooling gives autograd's gradients with less memory."""

from __future__ import annotations

import linecache
import warnings

import pytest
import torch
from pool_helpers import HIDDEN, perturb_parameters, ragged_batch

import attnpool.pooling.fused as fused_impl
from attnpool.pooling import AttentionPooling, build_pooler


def grads(pooler, hidden, mask, fused):
    pooler.fused = fused
    pooler.zero_grad()
    hidden = hidden.detach().clone().requires_grad_(True)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    # Use both outputs, so the gradient flowing into the weights is checked too.
    (pooled.pow(2).sum() + (weights * torch.linspace(0, 1, weights.shape[1])).sum()).backward()
    return [pooled.detach(), weights.detach(), hidden.grad] + [p.grad.clone() for p in pooler.parameters()]


@pytest.mark.parametrize(("temperature", "cls_share"), [(1.0, 0.0), (0.3, 0.0), (0.7, 0.5)])
def test_fused_gradients_equal_autograd(temperature, cls_share):
    pooler = AttentionPooling(HIDDEN, attn_size=12, temperature=temperature, cls_share=cls_share)
    pooler = perturb_parameters(pooler, scale=0.3)
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=1e3)
    fused, plain = grads(pooler, hidden, mask, True), grads(pooler, hidden, mask, False)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_fused_gradients_equal_autograd_in_float64():
    """The fused softmax and its backward ran in float32 whatever the input: float64 gradients were off by ~1e-8."""
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12, temperature=0.7), scale=0.3).double()
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=1e3)
    fused, plain = grads(pooler, hidden.double(), mask, True), grads(pooler, hidden.double(), mask, False)
    for a, b in zip(fused, plain, strict=True):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "dense"])
@pytest.mark.parametrize("cls_share", [0.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fused_half_precision_gradients_equal_autograd(dtype, cls_share, packed, monkeypatch):
    """The fused backward used the weights rounded to bf16/fp16, which no longer sum to 1: the softmax gradient lost
    its cancellation (score gradients off by 2-30% of the plain path's on states with a common offset)."""
    if not packed:
        monkeypatch.setattr(fused_impl, "MAX_UNPACK_MOVES", 0)
    torch.manual_seed(0)
    pooler = AttentionPooling(64, init="xavier", cls_share=cls_share).to(dtype)
    hidden = (torch.randn(8, 64, 64) + 5).to(dtype)  # encoder states share a large common component
    mask = torch.arange(64) < torch.randint(1, 65, (8, 1))
    assert (fused_impl._plan_packing(mask) is not None) == packed
    fused, plain = grads(pooler, hidden, mask, True), grads(pooler, hidden, mask, False)
    assert torch.equal(fused[1], plain[1])  # the same weights, rounded as the plain path rounds them
    torch.testing.assert_close(fused[0], plain[0], atol=0, rtol=2e-3)  # the packed sum may round differently
    for a, b in zip(fused[2:], plain[2:], strict=True):
        assert a.dtype == dtype
        assert ((a.double() - b.double()).norm() / b.double().norm()).item() < 1e-2


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


def _masks():
    """Right, left and scattered padding, rows without any real token, and more sequences than one dot block."""
    gen = torch.Generator().manual_seed(1)
    right = torch.arange(9) < torch.tensor([5, 0, 9, 2, 7, 1]).unsqueeze(1)
    many = torch.rand(fused_impl.DOT_BLOCK + 5, 6, generator=gen) < 0.6
    many[3] = False
    return {
        "right": right,
        "left": right.flip(1),
        "scattered": torch.rand(6, 9, generator=gen) < 0.5,
        "more_sequences_than_a_block": many,
    }


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "dense"])
@pytest.mark.parametrize("name", list(_masks()))
def test_packed_and_dense_paths_give_autograd_gradients(name, packed, monkeypatch):
    mask = _masks()[name]
    if not packed:
        monkeypatch.setattr(fused_impl, "MAX_UNPACK_MOVES", 0)  # every one of these masks needs a move: dense path
    assert (fused_impl._plan_packing(mask) is not None) == packed
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12, temperature=0.7), scale=0.3)
    hidden = torch.randn(*mask.shape, HIDDEN, generator=torch.Generator().manual_seed(2))
    poisoned = hidden.masked_fill(~mask.unsqueeze(-1), float("nan"))
    fast, plain = grads(pooler, poisoned, mask, True), grads(pooler, hidden, mask, False)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert (fast[2][~mask] == 0).all()


@pytest.mark.parametrize("name", list(_masks()))
def test_unpacking_moves_every_packed_row_to_its_position(name):
    mask = _masks()[name]
    packing = fused_impl._plan_packing(mask)
    real = packing.real
    buffer = torch.full((mask.numel(), 1), -1.0)
    buffer[: real.numel(), 0] = torch.arange(real.numel(), dtype=torch.float32)  # packed row i holds i
    for start, end in packing.moves:
        assert real[start] >= end  # targets at or after the run: nothing still to move is overwritten
        buffer[end:].index_copy_(0, real[start:end] - end, buffer[start:end])
    assert torch.equal(buffer[real, 0], torch.arange(real.numel(), dtype=torch.float32))


def test_layouts_that_take_many_moves_and_batches_without_padding_are_not_packed():
    shifted = torch.ones(4, 16, dtype=torch.bool)
    shifted[0, 0] = False  # every later row moves by one: one move per row
    assert fused_impl._plan_packing(shifted) is None
    assert fused_impl._plan_packing(torch.ones(4, 16, dtype=torch.bool)) is None
    assert fused_impl._plan_packing(torch.zeros(4, 16, dtype=torch.bool)) is None


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_batch_without_padding_is_read_in_place_and_left_unchanged(contiguous):
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12), scale=0.3)
    hidden = torch.randn(3, 7, HIDDEN) if contiguous else torch.randn(7, 3, HIDDEN).transpose(0, 1)
    mask = torch.ones(3, 7, dtype=torch.bool)
    before = hidden.clone()
    pooler(hidden.requires_grad_(True), mask).pow(2).sum().backward()
    assert torch.equal(hidden.detach(), before)  # the backward writes only into buffers of its own
    fast, plain = grads(pooler, before, mask, True), grads(pooler, before, mask, False)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_mask_that_is_a_strided_view_goes_through_the_fused_path():
    """A transposed (non-contiguous) mask without padding failed in the fused pass's .view; the plain one took it."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, HIDDEN, requires_grad=True)
    mask = torch.ones(5, 2, dtype=torch.bool).t()
    assert not mask.is_contiguous()
    fused, plain = AttentionPooling(HIDDEN, fused=True), AttentionPooling(HIDDEN, fused=False)
    plain.load_state_dict(fused.state_dict())
    torch.testing.assert_close(fused(x, mask), plain(x, mask.contiguous()))


def test_hidden_states_made_under_inference_mode_train_the_pooler_with_or_without_padding():
    # Encoder outputs cached under inference_mode, then only the pooler trained: the fused path would save the
    # caller's inference tensor itself for the backward (no padding: no copy), which autograd refuses.
    with torch.inference_mode():
        hidden = torch.randn(2, 5, HIDDEN)
    for mask in (torch.ones(2, 5, dtype=torch.bool), torch.tensor([[1, 1, 1, 0, 0], [1] * 5]).bool()):
        grads = []
        for fused in (True, False):
            pooler = AttentionPooling(HIDDEN, attn_size=8, fused=fused)
            torch.manual_seed(0)
            pooler.reset_parameters()
            pooler(hidden, mask).sum().backward()
            grads.append([p.grad for p in pooler.parameters()])
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the shape checks become constants of the trace
def test_tracing_and_functorch_transforms_take_the_plain_path():
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=8), scale=0.3).eval()
    hidden, mask, _ = ragged_batch([3, 5])
    traced = torch.jit.trace(pooler, (hidden, mask))  # the fused Function differed between the trace's two runs
    torch.testing.assert_close(traced(hidden, mask), pooler(hidden, mask))
    params = {k: v.detach() for k, v in pooler.named_parameters()}

    def loss(p, h, m):
        return torch.func.functional_call(pooler, p, (h[None], m[None])).pow(2).sum()

    per_row = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, hidden, mask)
    for name, grad in per_row.items():
        pooler.zero_grad()
        loss(dict(pooler.named_parameters()), hidden[1], mask[1]).backward()
        torch.testing.assert_close(grad[1], dict(pooler.named_parameters())[name].grad)


def test_tracing_a_pooler_does_not_branch_on_an_empty_batch():
    """The empty-batch check (B or T = 0) read the traced sizes as Python booleans: a TracerWarning per trace."""
    pooler = build_pooler("mean", hidden_size=8).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(pooler, (torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)))
    lines = [linecache.getline(w.filename, w.lineno) for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert not [line for line in lines if "0 in mask.shape" in line]
