"""The building blocks of the learned poolers: initialisation, argument checks and the feed-forward blocks."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F_nn
from pool_helpers import HIDDEN, assert_xavier
from torch import nn

from attnpool.pooling import build_pooler
from attnpool.pooling.modules import (
    FeedForward,
    GEGLUFeedForward,
    check_count,
    check_heads,
    check_init,
    check_num_layers,
    check_switch,
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
    for heads, width, message in ((0, 4, "num_heads must be >= 1, got 0"), (2, 0, "head_dim must be >= 1, got 0"),
                                  (2, 4.5, "head_dim must be a whole number >= 1, got 4.5")):
        with pytest.raises(ValueError, match=f"Owner: {message}"):
            resolve_heads("Owner", 16, heads, width)


@pytest.mark.parametrize(("bad", "message"), [(0, "must be >= 1"), (-1, "must be >= 1"),
                                              (2.5, "must be a whole number >= 1"),
                                              (True, "must be a whole number >= 1")])
def test_check_num_layers_refuses_what_is_not_a_positive_integer(bad, message):
    with pytest.raises(ValueError, match=f"Owner: num_layers {message}, got {bad!r}"):
        check_num_layers("Owner", bad)


def test_check_num_layers_returns_an_int():
    assert check_num_layers("Owner", 3) == 3 and type(check_num_layers("Owner", 3.0)) is int


@pytest.mark.parametrize(("value", "expected"), [(4, 4), (4.0, 4), (1, 1), (10**30, 10**30)])
def test_check_count_takes_whole_numbers_as_ints(value, expected):
    count = check_count("Owner", "num_seeds", value)
    assert count == expected and type(count) is int


@pytest.mark.parametrize(("value", "minimum", "message"), [
    (2.5, 1, "num_seeds must be a whole number >= 1, got 2.5; it is not rounded: give num_seeds=2 or num_seeds=3"),
    (0.5, 1, "num_seeds must be a whole number >= 1, got 0.5; it is not rounded: give num_seeds=1"),
    (0.5, 0, "num_seeds must be a whole number >= 0, got 0.5; it is not rounded: give num_seeds=0 or num_seeds=1"),
    (-1.5, None, "num_seeds must be a whole number, got -1.5; it is not rounded: give num_seeds=-2 or num_seeds=-1"),
    (True, 1, "num_seeds must be a whole number >= 1, got True; give e.g. num_seeds=1"),
    ("3", 1, "num_seeds must be a whole number >= 1, got '3'; give e.g. num_seeds=1"),
    (float("inf"), 1, "num_seeds must be a whole number >= 1, got inf; give e.g. num_seeds=1"),
    (float("nan"), None, "num_seeds must be a whole number, got nan; give e.g. num_seeds=0"),
    (0, 1, "num_seeds must be >= 1, got 0"),
    (-1, 0, "num_seeds must be >= 0, got -1"),
])
def test_check_count_refuses_fractions_and_what_is_not_a_number_naming_the_option(value, minimum, message):
    with pytest.raises(ValueError, match=f"^Owner: {re.escape(message)}$"):
        check_count("Owner", "num_seeds", value, minimum=minimum)


def test_check_count_without_a_minimum_takes_negative_indices():
    assert check_count("Owner", "layer", -2, minimum=None) == -2


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False), ("true", True), ("YES", True),
                                                 (" on ", True), ("False", False), ("no", False), ("Off", False)])
def test_check_switch_takes_bools_and_the_words_of_pooling_opt(value, expected):
    assert check_switch("Owner", "layer_norm", value) is expected


@pytest.mark.parametrize("value", ["maybe", "", 0, 1, 1.0, None, [False]])
def test_check_switch_refuses_anything_else_naming_the_accepted_values(value):
    with pytest.raises(ValueError, match=f"^Owner: layer_norm must be true or false, got {re.escape(repr(value))}; "
                                         r"give a bool or one of true, yes, on, false, no, off \(e\.g\. "
                                         r"layer_norm=false\)$"):
        check_switch("Owner", "layer_norm", value)


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


@pytest.mark.parametrize(("name", "option", "example"), [
    ("latent_attention", "mlp_ratio", "mlp_ratio=4.0"),
    ("class_attention", "mlp_ratio", "mlp_ratio=4.0"),
    ("multilayer_attention", "mlp_ratio", "mlp_ratio=4.0"),
    ("attention", "temperature", "temperature=1.0"),
    ("multihead_attention", "temperature", "temperature=1.0"),
    ("gated_attention", "temperature", "temperature=1.0"),
    ("gem", "p", "p=3.0"),
    ("ggem", "p", "p=3.0"),
])
@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_nonsensical_positive_options_are_refused(name, option, example, value):
    """mlp_ratio=0 built a 1-wide MLP, temperature=nan gave NaN weights, p=inf NaN output: all built silently."""
    what = "finite" if value == float("inf") else "a number" if isinstance(value, bool | str) else "positive"
    with pytest.raises(ValueError, match=rf": {option} must be {what}, got {re.escape(repr(value))}; give a finite "
                       rf"number > 0 \(e\.g\. {re.escape(example)}"):
        build_pooler(name, 16, **{option: value})


@pytest.mark.parametrize(("name", "option", "value"), [
    ("latent_attention", "mlp_ratio", 0.5), ("class_attention", "mlp_ratio", 1),
    ("multilayer_attention", "mlp_ratio", 2.0), ("attention", "temperature", 0.05),
    ("multihead_attention", "temperature", 10), ("gem", "p", 0.02), ("ggem", "p", 64.0),
])
def test_positive_options_in_range_are_kept(name, option, value):
    pooler = build_pooler(name, 16, **{option: value})
    assert getattr(pooler, option) == value and isinstance(getattr(pooler, option), float)
