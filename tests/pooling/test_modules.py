"""The building blocks of the learned poolers: initialisation, argument checks and the feed-forward blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_nn
from pool_helpers import HIDDEN, assert_xavier
from torch import nn

from attnpool.pooling.modules import (
    FeedForward,
    GEGLUFeedForward,
    check_heads,
    check_init,
    check_num_layers,
    resolve_heads,
    uniform_start_,
    xavier_,
    xavier_parts_,
)


def test_xavier_gives_the_whole_range_and_zero_biases():
    torch.manual_seed(0)
    with_bias, without_bias = nn.Linear(64, 32), nn.Linear(32, 48, bias=False)
    nn.init.ones_(with_bias.bias)
    xavier_(with_bias, without_bias)
    assert_xavier(with_bias)
    assert_xavier(without_bias)


def test_xavier_parts_gives_each_block_its_own_range():
    torch.manual_seed(0)
    fused = nn.Linear(16, 2 * 64)  # two (16 -> 64) branches in one product
    nn.init.ones_(fused.bias)
    xavier_parts_(fused.weight, 2)
    for part in fused.weight.chunk(2, dim=0):
        assert_xavier(part)  # the range of a (16 -> 64) layer, sqrt(6 / 80)
    assert fused.weight.abs().max() > (6.0 / (16 + 128)) ** 0.5  # wider than the fused layer's own range
    assert torch.equal(fused.bias, torch.ones(128))  # biases are the caller's


def test_check_init():
    assert check_init("mean", "X") == "mean" and check_init("xavier", "X") == "xavier"
    with pytest.raises(ValueError, match="Owner: init must be one of 'mean', 'xavier', got 'zeros'"):
        check_init("zeros", "Owner")


def test_uniform_start_zeros_the_key_weight_only_for_mean():
    torch.manual_seed(0)
    key = nn.Linear(HIDDEN, HIDDEN)
    weight, bias = key.weight.detach().clone(), key.bias.detach().clone()
    uniform_start_("xavier", "Owner", key)
    assert torch.equal(key.weight, weight)
    uniform_start_("mean", "Owner", key)
    assert torch.equal(key.weight, torch.zeros_like(weight)) and torch.equal(key.bias, bias)
    fused = torch.randn(2 * HIDDEN, HIDDEN)
    values = fused[HIDDEN:].clone()
    uniform_start_("mean", "Owner", fused[:HIDDEN])  # a block of a fused weight, zeroed in place
    assert torch.equal(fused[:HIDDEN], torch.zeros(HIDDEN, HIDDEN)) and torch.equal(fused[HIDDEN:], values)
    with pytest.raises(ValueError, match="Owner: init must be one of 'mean', 'xavier', got 'zero'"):
        uniform_start_("zero", "Owner", key)


def test_check_heads():
    assert check_heads("Owner", 16, 4.0) == 4 and isinstance(check_heads("Owner", 16, 4.0), int)
    with pytest.raises(ValueError, match="Owner: num_heads must be >= 1, got 0"):
        check_heads("Owner", 16, 0)
    with pytest.raises(ValueError, match="Owner: hidden_size 16 is not divisible by num_heads=3"):
        check_heads("Owner", 16, 3)


def test_resolve_heads_splits_the_width_unless_a_head_width_is_given():
    assert resolve_heads("Owner", 16, 4, None) == (4, 4)
    assert resolve_heads("Owner", 16, 3, 5) == (3, 5)  # heads of a given width need not split it
    with pytest.raises(ValueError, match="Owner: hidden_size 16 is not divisible by num_heads=3"):
        resolve_heads("Owner", 16, 3, None)
    for heads, width in ((0, 4), (2, 0)):
        with pytest.raises(ValueError, match=f"Owner: need num_heads >= 1 and head_dim >= 1, got {heads} and {width}"):
            resolve_heads("Owner", 16, heads, width)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_check_num_layers_refuses_what_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match=f"Owner: num_layers must be a positive integer, got {bad!r}"):
        check_num_layers("Owner", bad)


def test_check_num_layers_returns_an_int():
    assert check_num_layers("Owner", 3) == 3 and type(check_num_layers("Owner", 3.0)) is int


def test_feed_forward_is_a_xavier_initialised_transformer_mlp():
    torch.manual_seed(0)
    mlp = FeedForward(HIDDEN, 2.5)
    assert (mlp[0].in_features, mlp[0].out_features, mlp[2].out_features) == (HIDDEN, 40, HIDDEN)
    assert isinstance(mlp[1], nn.GELU)
    assert_xavier(mlp[0])
    assert_xavier(mlp[2])
    x = torch.randn(2, 3, HIDDEN)
    torch.testing.assert_close(mlp(x), mlp[2](F_nn.gelu(mlp[0](x))))
    assert FeedForward(HIDDEN, 0.01)[0].out_features == 1  # never narrower than one unit


def test_geglu_feed_forward_is_value_times_gelu_of_the_gate():
    torch.manual_seed(0)
    mlp = GEGLUFeedForward(HIDDEN, 2.0)
    assert (mlp.proj_in.out_features, mlp.proj_out.in_features) == (2 * 32, 32)
    assert_xavier(mlp.proj_in)
    assert_xavier(mlp.proj_out)
    x = torch.randn(2, 3, HIDDEN)
    inner = mlp.proj_in(x)
    expected = mlp.proj_out(inner[..., :32] * F_nn.gelu(inner[..., 32:]))
    torch.testing.assert_close(mlp(x), expected)
