"""Statistics pooling, SoftPool and grouped generalised mean: hand-computed closed forms."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, ragged_batch

from attnpool.pooling import GroupGeMPooling, SoftPooling, StatisticsPooling, build_pooler


def test_stats_is_the_masked_mean_and_population_std():
    pooler = StatisticsPooling(HIDDEN)
    hidden, mask, tokens = ragged_batch([5, 2, 8], pad_value=1e4)
    pooled = pooler(hidden, mask)
    assert pooled.shape == (3, 2 * HIDDEN)
    for i, t in enumerate(tokens):
        mean = t.sum(0) / t.shape[0]
        std = ((t - mean) ** 2).sum(0).div(t.shape[0]).sqrt()  # population: divide by n, not n - 1
        torch.testing.assert_close(pooled[i, :HIDDEN], mean, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pooled[i, HIDDEN:], std, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pooled[i, HIDDEN:], t.std(0, correction=0), atol=1e-5, rtol=1e-5)


def test_stats_softpool_and_ggem_compute_float64_in_float64():
    """Float64 input went through float32: stats of values near 1000 were off by 9e-5."""
    hidden, mask, tokens = ragged_batch([5, 3])
    hidden = hidden.double() + 1000.0
    stats = StatisticsPooling(HIDDEN)(hidden, mask)
    soft = SoftPooling(HIDDEN)(hidden - 1000.0, mask)
    ggem = GroupGeMPooling(HIDDEN, num_groups=2).double()(hidden, mask)
    for i, t in enumerate(tokens):
        t = t.double() + 1000.0
        torch.testing.assert_close(stats[i], torch.cat([t.mean(0), t.std(0, correction=0)]), atol=1e-11, rtol=0)
        torch.testing.assert_close(soft[i], ((t - 1000.0).softmax(0) * (t - 1000.0)).sum(0), atol=1e-14, rtol=0)
        torch.testing.assert_close(ggem[i], t.pow(3).mean(0).pow(1 / 3), atol=1e-11, rtol=0)


def test_stats_single_token_gives_sqrt_eps_and_finite_gradients():
    pooler = StatisticsPooling(HIDDEN, eps=1e-4)
    hidden = torch.randn(1, 1, HIDDEN, requires_grad=True)
    pooled = pooler(hidden)
    torch.testing.assert_close(pooled[0, HIDDEN:], torch.full((HIDDEN,), 1e-2))
    pooled.sum().backward()
    assert torch.isfinite(hidden.grad).all()


def test_softpool_weights_are_a_softmax_per_channel():
    pooler = SoftPooling(HIDDEN)
    hidden, mask, tokens = ragged_batch([6, 3], pad_value=1e4)
    weights = pooler.channel_weights(hidden, mask.bool())
    assert weights.shape == hidden.shape
    pooled = pooler(hidden, mask)
    for i, t in enumerate(tokens):
        expected_w = torch.softmax(t, dim=0)  # over the tokens, separately for each channel
        torch.testing.assert_close(weights[i, : t.shape[0]], expected_w)
        assert (weights[i, t.shape[0] :] == 0).all()
        torch.testing.assert_close(pooled[i], (expected_w * t).sum(0))


def test_softpool_lies_between_mean_and_max():
    hidden, mask, _ = ragged_batch([7, 4])
    pooled = SoftPooling(HIDDEN)(hidden, mask)
    assert (pooled >= build_pooler("mean", HIDDEN)(hidden, mask) - 1e-6).all()
    assert (pooled <= build_pooler("max", HIDDEN)(hidden, mask) + 1e-6).all()


def test_ggem_with_p_one_in_a_group_is_the_mean_of_positive_inputs_there():
    pooler = GroupGeMPooling(HIDDEN, num_groups=4, p=3.0)
    with torch.no_grad():
        pooler.p_param.copy_(torch.tensor([1.0, 3.0, 1.0, 6.0]))
    hidden, mask, tokens = ragged_batch([5, 3, 1], pad_value=1e4)
    hidden, tokens = hidden.abs() + 0.1, [t.abs() + 0.1 for t in tokens]  # positive inputs
    pooled = pooler(hidden, mask)
    group = torch.arange(HIDDEN) * 4 // HIDDEN
    for i, t in enumerate(tokens):
        for g, p in enumerate([1.0, 3.0, 1.0, 6.0]):
            channels = group == g
            expected = t[:, channels].pow(p).mean(0).pow(1 / p)  # p = 1: the plain mean
            torch.testing.assert_close(pooled[i, channels], expected, atol=1e-5, rtol=1e-5)


def test_ggem_groups_are_contiguous_and_cover_every_channel():
    pooler = GroupGeMPooling(10, num_groups=3)
    assert pooler.channel_groups().tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert sum(p.numel() for p in pooler.parameters()) == 3
    assert list(pooler.state_dict()) == ["p_param"]


def test_ggem_one_group_equals_gem():
    hidden, mask, _ = ragged_batch([4, 6])
    gem = build_pooler("gem", HIDDEN, p=2.5)
    ggem = GroupGeMPooling(HIDDEN, num_groups=1, p=2.5)
    torch.testing.assert_close(ggem(hidden, mask), gem(hidden, mask))


@pytest.mark.parametrize(("kwargs", "message"), [({"num_groups": 0}, "num_groups must be >= 1, got 0"),
                                                 ({"num_groups": HIDDEN + 1}, "num_groups must be in"),
                                                 ({"p": 0.0}, "p must be positive"),
                                                 ({"eps": 0.0}, "eps must be positive, got 0.0")])
def test_ggem_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupGeMPooling(HIDDEN, **kwargs)


def test_ggem_is_finite_where_a_direct_power_overflows():
    pooler = GroupGeMPooling(HIDDEN, num_groups=2, p=3.0)
    with torch.no_grad():
        pooler.p_param.copy_(torch.tensor([20.0, 10.0]))  # 100 ** 20 and (1e4) ** 10 overflow float32
    hidden, mask, _ = ragged_batch([3, 5])
    scale = torch.cat([torch.full((HIDDEN // 2,), 100.0), torch.full((HIDDEN // 2,), 1e4)])  # one per group
    hidden = hidden.abs().clamp(0.5, 2.0) * scale
    pooled = pooler(hidden, mask)
    assert torch.isfinite(pooled).all()
    maximum = build_pooler("max", HIDDEN)(hidden, mask)
    assert (pooled <= maximum * (1 + 1e-5)).all() and (pooled >= 0.5 * maximum).all()
    pooled.sum().backward()
    assert torch.isfinite(pooler.p_param.grad).all()
