"""Closed forms of the baseline poolers."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, ragged_batch

from attnpool.pooling import (
    ClsPooling,
    GeMPooling,
    LastTokenPooling,
    MaxPooling,
    MeanMaxPooling,
    MeanPooling,
    build_pooler,
)


def test_cls_takes_the_first_real_token_under_left_padding():
    hidden, mask, tokens = ragged_batch([2, 5], side="left", pad_value=9.0)
    out = ClsPooling(HIDDEN)(hidden, mask)
    torch.testing.assert_close(out, torch.stack([tokens[0][0], tokens[1][0]]))


@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_takes_the_last_real_token(side):
    hidden, mask, tokens = ragged_batch([2, 5, 1], seq_len=6, side=side, pad_value=9.0)
    out = LastTokenPooling(HIDDEN)(hidden, mask)
    torch.testing.assert_close(out, torch.stack([t[-1] for t in tokens]))


def test_mean_equals_the_hand_computed_mean():
    hidden, mask, tokens = ragged_batch([3, 1, 6], pad_value=9.0)
    out, weights = MeanPooling(HIDDEN)(hidden, mask, return_weights=True)
    torch.testing.assert_close(out, torch.stack([t.mean(0) for t in tokens]))
    assert weights[0, :3].eq(1 / 3).all()


def test_max_padding_never_wins_on_all_negative_tokens():
    hidden, mask, tokens = ragged_batch([3, 4], pad_value=0.0)
    hidden = -hidden.abs() - 1.0  # every real value < padding's 0
    out = MaxPooling(HIDDEN)(hidden, mask)
    expected = torch.stack([hidden[0, :3].amax(0), hidden[1, :4].amax(0)])
    torch.testing.assert_close(out, expected)
    assert (out < 0).all()


def test_max_in_fp16_does_not_overflow():
    hidden, mask, _ = ragged_batch([0, 2], seq_len=3)
    out = MaxPooling(HIDDEN)(hidden.half(), mask)
    assert torch.isfinite(out).all() and out[0].eq(0).all()


def test_mean_max_is_the_concatenation():
    hidden, mask, _ = ragged_batch([3, 5], pad_value=9.0)
    expected = torch.cat([MeanPooling(HIDDEN)(hidden, mask), MaxPooling(HIDDEN)(hidden, mask)], dim=-1)
    torch.testing.assert_close(MeanMaxPooling(HIDDEN)(hidden, mask), expected)


def test_gem_with_p_1_is_the_mean_of_positive_inputs():
    hidden, mask, tokens = ragged_batch([3, 5], pad_value=9.0)
    hidden = hidden.abs() + 0.1
    expected = torch.stack([hidden[0, :3].mean(0), hidden[1, :5].mean(0)])
    torch.testing.assert_close(GeMPooling(HIDDEN, p=1.0)(hidden, mask), expected, atol=1e-6, rtol=1e-5)


def test_gem_tends_to_the_max_as_p_grows():
    hidden, mask, _ = ragged_batch([6, 4])
    hidden = hidden.abs() + 0.5
    maximum = MaxPooling(HIDDEN)(hidden, mask)
    gap_small = (GeMPooling(HIDDEN, p=2.0)(hidden, mask) - maximum).abs().max()
    gap_large = (GeMPooling(HIDDEN, p=64.0)(hidden, mask) - maximum).abs().max()
    # (1/n)^(1/p) bounds the gap: about 3% of the max at n = 6, p = 64.
    assert gap_large < gap_small / 10 and gap_large < 0.04 * maximum.max()


def test_gem_p_is_learnable_or_fixed():
    assert [n for n, _ in GeMPooling(HIDDEN).named_parameters()] == ["p_param"]
    fixed = GeMPooling(HIDDEN, p=2.5, learnable_p=False)
    assert list(fixed.parameters()) == [] and fixed.p == 2.5 == fixed.learned_p
    learned = GeMPooling(HIDDEN, p=3.0)
    with torch.no_grad():
        learned.p_param.fill_(4.0)
    assert learned.learned_p == 4.0 and learned.get_config()["p"] == 3.0  # the config keeps the initial value
    with pytest.raises(ValueError, match="p must be positive, got -1"):
        GeMPooling(HIDDEN, p=-1)
    for eps in (0.0, -1.0):  # log(0): p's gradient was NaN wherever a channel's real values were all <= 0
        with pytest.raises(ValueError, match=f"GeMPooling: eps must be positive, got {eps}"):
            GeMPooling(HIDDEN, eps=eps)


@pytest.mark.parametrize(("scale", "p"), [(100.0, 20.0), (1e4, 10.0), (1e4, 64.0), (1e30, 3.0)])
def test_gem_is_finite_on_large_inputs_and_large_p(scale, p):
    # A float32 x ** p overflows in all of these (100 ** 20 = 1e40); the true generalised mean is finite.
    hidden, mask, tokens = ragged_batch([5, 2], pad_value=1e30)
    hidden = (hidden.abs() + 0.5).clamp(max=3.0) * (scale / 3.0)
    pooler = GeMPooling(HIDDEN, p=p)
    pooled = pooler(hidden, mask)
    assert torch.isfinite(pooled).all()
    for i, n in enumerate([5, 2]):
        x = hidden[i, :n].double()
        top = x.amax(0)
        expected = top * ((x / top) ** p).mean(0) ** (1 / p)  # float64, max factored out
        torch.testing.assert_close(pooled[i].double(), expected, rtol=3e-5, atol=0)  # log-exp rounding at 1e30
    pooled.sum().backward()
    assert torch.isfinite(pooler.p_param.grad) and pooler.p_param.grad != 0


@pytest.mark.parametrize(("name", "options"), [("gem", {}), ("ggem", {"num_groups": 4})])
@pytest.mark.parametrize(("p", "length"), [(0.05, 4096), (0.02, 8)])
def test_a_small_p_keeps_empty_rows_zero_and_the_gradient_of_p_finite(name, options, p, length):
    """An empty row's log-mean, log(T), divided by a small p overflowed: NaN pooled, NaN gradient to p for all."""
    pooler = build_pooler(name, 16, p=p, **options)
    hidden = torch.rand(2, length, 16, requires_grad=True)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1] = 0
    pooled = pooler(hidden, mask)
    assert torch.isfinite(pooled).all() and torch.equal(pooled[1], torch.zeros(16))
    pooled.sum().backward()
    assert torch.isfinite(pooler.p_param.grad).all() and torch.isfinite(hidden.grad).all()


def test_gem_gradients_match_float64_autograd_of_the_direct_formula():
    hidden, mask, _ = ragged_batch([4, 6])
    hidden = hidden.abs() + 0.2
    pooler = GeMPooling(HIDDEN, p=2.5)
    hidden32 = hidden.clone().requires_grad_(True)
    pooler(hidden32, mask).pow(2).sum().backward()
    hidden64 = hidden.double().requires_grad_(True)
    p64 = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    m = mask.double().unsqueeze(-1)
    direct = ((hidden64**p64 * m).sum(1) / m.sum(1)) ** (1 / p64)
    direct.pow(2).sum().backward()
    torch.testing.assert_close(hidden32.grad.double(), hidden64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(pooler.p_param.grad.double(), p64.grad, rtol=1e-4, atol=1e-6)


def test_gem_and_mean_compute_float64_in_float64():
    """Float64 input went through float32: GeM of values near 1000 was off by 3e-4."""
    hidden, mask, tokens = ragged_batch([5, 3])
    hidden = hidden.double() + 1000.0
    gem = GeMPooling(HIDDEN, learnable_p=False).double()(hidden, mask)
    mean = MeanPooling(HIDDEN)(hidden, mask)
    for i, t in enumerate(tokens):
        t = t.double() + 1000.0
        torch.testing.assert_close(gem[i], t.pow(3).mean(0).pow(1 / 3), atol=1e-11, rtol=0)
        torch.testing.assert_close(mean[i], t.mean(0), atol=1e-12, rtol=0)
