"""Review fixes of the pooling inputs: nested poolers checked for a rebuild, decimal options, additive masks, fp16."""

from __future__ import annotations

import re

import pytest
import torch
from pool_helpers import HIDDEN, ragged_batch

import attnpool
from attnpool.pooling import AttentionPooling, Pooler, build_pooler, check_pooler, registry
from attnpool.pooling.combine import CombinedPooling
from attnpool.pooling.multilayer import WeightedLayerPooling
from attnpool.pooling.registry import check_rebuildable


class DoubledAttention(AttentionPooling):  # keeps the parent's name: it would reload as AttentionPooling
    def pool(self, hidden_states, mask):
        pooled, weights = super().pool(hidden_states, mask)
        return 2.0 * pooled, weights


class UnregisteredMean(Pooler):
    name = "test_inputs_unregistered_mean"

    def pool(self, hidden_states, mask):
        weights = mask.to(hidden_states.dtype) / mask.sum(1, keepdim=True).clamp(min=1)
        return torch.einsum("bt,bth->bh", weights, hidden_states), None


SUBCLASS_REFUSED = ("is not the pooler registered as 'attention': a model saves its pooler by name, and it would "
                    "reload as AttentionPooling, registered under that name, without DoubledAttention's changes. "
                    "Give DoubledAttention its own `name` and decorate it with @attnpool.register_pooler")


def test_a_subclass_keeping_its_parents_name_is_refused_inside_a_combination():
    combined = CombinedPooling(HIDDEN, poolers=[DoubledAttention(HIDDEN), "mean"])
    with pytest.raises(ValueError, match="^" + re.escape(
            f"pooling=CombinedPooling(...) holds parts.0=DoubledAttention(...), which {SUBCLASS_REFUSED}")):
        check_rebuildable(combined)


def test_a_subclass_keeping_its_parents_name_is_refused_inside_weighted_layer():
    layered = WeightedLayerPooling(HIDDEN, num_layers=2, pooler=DoubledAttention(HIDDEN))
    with pytest.raises(ValueError, match="^" + re.escape(
            f"pooling=WeightedLayerPooling(...) holds token_pooler=DoubledAttention(...), which {SUBCLASS_REFUSED}")):
        check_rebuildable(layered)


def test_an_unregistered_part_is_told_to_register_not_to_import():
    combined = CombinedPooling(HIDDEN, poolers=["attention", UnregisteredMean(HIDDEN)])
    with pytest.raises(ValueError, match=re.escape(
            "holds parts.1=UnregisteredMean(...), which is not the pooler registered as "
            "'test_inputs_unregistered_mean': a model saves its pooler by name, and a class not in the registry "
            "cannot be rebuilt when the model is loaded. Give UnregisteredMean its own `name` and decorate it with "
            "@attnpool.register_pooler")):
        check_rebuildable(combined, "AttnPooling: pooling")


def test_registered_parts_pass():
    check_rebuildable(CombinedPooling(HIDDEN, poolers=[AttentionPooling(HIDDEN), "mean"]))
    check_rebuildable(WeightedLayerPooling(HIDDEN, num_layers=2, pooler="attention+mean"))


@pytest.fixture
def scratch_registry(monkeypatch):
    """The poolers a test registers are gone after it (the docs' tests list every registered pooler)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


class WithHelper(Pooler):  # registered by its test; builds an unregistered helper pooler that its config rebuilds
    name = "test_inputs_with_helper"

    def __init__(self, hidden_size: int) -> None:
        super().__init__(hidden_size)
        self.helper = UnregisteredMean(hidden_size)

    def pool(self, hidden_states, mask):
        return self.helper.pool(hidden_states, mask)


def test_a_helper_pooler_built_by_its_constructor_is_not_checked(scratch_registry):
    """Every Pooler submodule was checked: a registered pooler holding a private helper pooler was refused."""
    attnpool.register_pooler(WithHelper)
    check_rebuildable(WithHelper(HIDDEN))
    check_rebuildable(CombinedPooling(HIDDEN, poolers=[WithHelper(HIDDEN), "mean"]))
    layered = WeightedLayerPooling(HIDDEN, num_layers=2, pooler=DoubledAttention(HIDDEN))
    nested = CombinedPooling(HIDDEN, poolers=[layered, "mean"])
    with pytest.raises(ValueError, match=re.escape("holds parts.0.token_pooler=DoubledAttention(...), which")):
        check_rebuildable(nested)  # a held pooler's own held poolers are checked, at any depth


def test_check_pooler_on_an_unregistered_class_says_to_register_it():
    with pytest.raises(ValueError, match="^" + re.escape(
            "config round trip: pooler=UnregisteredMean(...) is not the pooler registered as "
            "'test_inputs_unregistered_mean': a model saves its pooler by name, and a class not in the registry "
            "cannot be rebuilt when the model is loaded. Give UnregisteredMean its own `name` and decorate it with "
            "@attnpool.register_pooler, so that it saves and reloads")):
        check_pooler(UnregisteredMean)


def test_check_pooler_on_a_registered_copy_passes(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    attnpool.register_pooler(UnregisteredMean)
    check_pooler(UnregisteredMean)


NAN = float("nan")


@pytest.mark.parametrize(("name", "options", "message"), [
    ("stats", {"eps": NAN}, "StatisticsPooling: eps must be a finite number > 0, got nan"),
    ("simpool", {"gamma": NAN}, "SimPooling: gamma must be a finite number > 0, got nan"),
    ("simpool", {"gamma": "2"}, "SimPooling: gamma must be a number > 0, got '2' (str)"),
    ("simpool", {"eps": "1e-6"}, "SimPooling: eps must be a number > 0, got '1e-6' (str)"),
    ("gem", {"eps": "x"}, "GeMPooling: eps must be a number > 0, got 'x' (str)"),
    ("ggem", {"num_groups": 4, "eps": NAN}, "GroupGeMPooling: eps must be a finite number > 0, got nan"),
    ("stats", {"eps": "1e-6"}, "StatisticsPooling: eps must be a number > 0, got '1e-6' (str)"),
    ("attention", {"dropout": ".1"}, "AttentionPooling: dropout must be a number in [0, 1), got '.1' (str); "
     "give a finite number in [0, 1) (e.g. dropout=0.1; --pooling-opt reads values as JSON, where '.1' is text: "
     "write dropout=0.1)"),
    ("attention", {"dropout": NAN}, "AttentionPooling: dropout must be a finite number in [0, 1), got nan"),
    ("attention", {"cls_share": "0.5"}, "AttentionPooling: cls_share must be a number in [0, 1), got '0.5' (str)"),
    ("gated_attention", {"dropout": True}, "GatedAttentionPooling: dropout must be a number in [0, 1), got True "
     "(bool)"),
    ("multihead_attention", {"penalty": "1"}, "MultiHeadAttentionPooling: penalty must be a number >= 0, got '1' "
     "(str)"),
    ("multihead_attention", {"penalty": NAN}, "MultiHeadAttentionPooling: penalty must be a finite number >= 0, "
     "got nan"),
    ("acmil", {"mask_rate": "0.6"}, "ACMILPooling: mask_rate must be a number in [0, 1), got '0.6' (str)"),
    ("acmil", {"mask_rate": NAN}, "ACMILPooling: mask_rate must be a finite number in [0, 1), got nan"),
])
def test_decimal_options_refuse_text_nan_and_bools_naming_the_option(name, options, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        build_pooler(name, HIDDEN, **options)


@pytest.mark.parametrize(("name", "options", "attribute", "value"), [
    ("attention", {"dropout": 0, "cls_share": 0.25}, "cls_share", 0.25),
    ("multihead_attention", {"penalty": 1}, "penalty", 1.0),
    ("acmil", {"mask_rate": 0}, "mask_rate", 0.0),
    ("simpool", {"gamma": 2}, "gamma", 2.0),
    ("stats", {"eps": 1e-5}, "eps", 1e-5),
])
def test_decimal_options_in_range_are_kept_as_floats(name, options, attribute, value):
    pooler = build_pooler(name, HIDDEN, **options)
    assert getattr(pooler, attribute) == value and type(getattr(pooler, attribute)) is float


@pytest.mark.parametrize("padding", [float("-inf"), -1e4, torch.finfo(torch.float32).min])
def test_an_additive_float_mask_is_refused(padding):
    hidden, mask, _ = ragged_batch([3, 5])
    additive = torch.where(mask.bool(), 0.0, padding)  # 0 for real tokens: read as != 0 it picked the padding
    with pytest.raises(ValueError, match="^" + re.escape(
            f"MeanPooling: attention_mask holds {padding} (dtype torch.float32); it must be 1 (or True) for real "
            "tokens and 0 (or False) for padding, not an additive mask")):
        build_pooler("mean", HIDDEN)(hidden, additive)


def test_a_float_mask_with_nan_is_refused():
    hidden, mask, _ = ragged_batch([3, 5])
    with pytest.raises(ValueError, match=r"^AttentionPooling: attention_mask holds nan \(dtype torch.float16\)"):
        build_pooler("attention", HIDDEN)(hidden, mask.half().masked_fill(~mask.bool(), NAN))


@pytest.mark.parametrize("scale", [0.5, 2.0, 1.0])
def test_positive_float_masks_still_mark_real_tokens(scale):
    hidden, mask, _ = ragged_batch([3, 5])
    pooler = build_pooler("mean", HIDDEN)
    torch.testing.assert_close(pooler(hidden, mask.float() * scale), pooler(hidden, mask.bool()), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "fused"), [("attention", False), ("attention", True),
                                             ("multihead_attention", False), ("gated_attention", False)])
def test_a_small_temperature_stays_finite_in_fp16(name, fused):
    """Scores of about 10 divided by 1e-4 in fp16 were inf (fp16 ends at 65504): NaN weights and output."""
    torch.manual_seed(0)
    pooler = build_pooler(name, HIDDEN, init="xavier", temperature=1e-4)
    with torch.no_grad():
        pooler.score.weight.mul_(20.0)  # scores of up to about 100, of both signs
    hidden, mask, _ = ragged_batch([6, 3], seed=1)
    half = build_pooler(pooler.get_config()).half().train(fused)  # the fused path: training, with a gradient
    half.load_state_dict(pooler.state_dict())
    half_hidden = hidden.half().requires_grad_(fused)
    if name == "attention":
        with torch.set_grad_enabled(fused):
            assert half._use_fused(half_hidden) is fused
    with torch.set_grad_enabled(fused):  # the plain path: no gradient to compute
        pooled = half(half_hidden, mask)
    assert torch.isfinite(pooled).all()
    expected = pooler.eval()(hidden.half().float(), mask)
    torch.testing.assert_close(pooled.float(), expected, rtol=2e-3, atol=2e-3)


def test_the_json_hint_never_suggests_a_value_that_is_refused_too():
    with pytest.raises(ValueError) as caught:
        build_pooler("attention", HIDDEN, dropout="1.")
    assert "reads values as JSON" not in str(caught.value)  # it said: write dropout=1.0, out of [0, 1) as well
    with pytest.raises(ValueError, match=re.escape("where '.1' is text: write dropout=0.1")):
        build_pooler("attention", HIDDEN, dropout=".1")


class UndeclaredWrapper(Pooler):  # registered by its test; holds a pooler, not declared in held_poolers
    name = "test_inputs_undeclared_wrapper"

    def __init__(self, hidden_size: int) -> None:
        super().__init__(hidden_size)
        self.inner = AttentionPooling(hidden_size)

    def pool(self, hidden_states, mask):
        return self.inner.pool(hidden_states, mask)


def test_a_subclass_under_its_parents_name_is_refused_anywhere_inside(scratch_registry):
    """Only held_poolers were checked: a wrapper of the user's holding DoubledAttention was accepted again."""
    attnpool.register_pooler(UndeclaredWrapper)
    wrapper = UndeclaredWrapper(HIDDEN)
    check_rebuildable(wrapper)
    wrapper.inner = DoubledAttention(HIDDEN)
    with pytest.raises(ValueError, match=re.escape(
            f"pooling=UndeclaredWrapper(...) holds inner=DoubledAttention(...), which {SUBCLASS_REFUSED}")):
        check_rebuildable(wrapper)
