"""Lookup by name, config or instance, and the errors a user sees."""

from __future__ import annotations

import inspect

import pytest
import torch
from pool_helpers import HIDDEN

import attnpool
from attnpool.pooling import (
    AttentionPooling,
    MultiHeadAttentionPooling,
    Pooler,
    available_poolers,
    build_pooler,
    get_pooler_class,
    registry,
)


def _options_annotated(*annotations: str) -> list[tuple[str, str]]:
    """``(pooler, option)`` for every constructor option of a registered pooler annotated as one of ``annotations``."""
    found = []
    for name in available_poolers():
        params = inspect.signature(get_pooler_class(name).__init__).parameters
        found += [(name, option) for option, p in params.items() if option != "hidden_size" and p.annotation in
                  annotations]
    return found


COUNTS = _options_annotated("int", "int | None")
SWITCHES = _options_annotated("bool")


def test_available_poolers_lists_the_core_set():
    names = attnpool.available_poolers()
    for name in ("attention", "multihead_attention", "gated_attention", "cls", "mean", "max", "mean_max",
                 "last_token", "gem"):
        assert name in names
    assert names == sorted(names)


@pytest.mark.parametrize(
    "spelling", ["attention", "Attention", "ATTENTION", "attention_pooling", "AttentionPooling", "attention-pool"]
)
def test_names_are_normalised(spelling):
    assert type(build_pooler(spelling, 8)) is AttentionPooling


@pytest.mark.parametrize("spelling", ["multihead_attention", "Multi-Head-Attention", "multi_head attention"])
def test_multihead_spellings(spelling):
    assert type(build_pooler(spelling, 8)) is MultiHeadAttentionPooling


def test_unknown_name_suggests_the_closest_and_lists_all():
    with pytest.raises(ValueError) as err:
        build_pooler("atention", 8)
    text = str(err.value)
    assert "Unknown pooler 'atention'" in text
    assert "Did you mean 'attention'?" in text
    assert "Available poolers: " + ", ".join(attnpool.available_poolers()) in text


def test_options_are_passed_and_override_the_config():
    pooler = build_pooler("attention", 8, attn_size=4)
    assert pooler.attn_size == 4
    rebuilt = build_pooler(pooler.get_config(), attn_size=6)
    assert rebuilt.attn_size == 6 and rebuilt.hidden_size == 8


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match="pooler 'attention' got unknown option\\(s\\) heads; valid options: "
                       "attn_size, init, temperature, dropout"):
        build_pooler("attention", 8, heads=2)


def test_check_pooler_options_refuses_what_build_pooler_refuses_without_a_hidden_size():
    registry.check_pooler_options("attention", {"attn_size": 4})
    registry.check_pooler_options("attention+mean", {"combine": "project"})
    for name, options, message in [("atention", {}, "Unknown pooler 'atention'. Did you mean 'attention'?"),
                                   ("attention", {"heads": 2}, "got unknown option(s) heads; valid options: attn_size"),
                                   ("mean+", {}, "has an empty part"),
                                   ("cls+mean", {"poolers": ["max"]}, "names its poolers already")]:
        with pytest.raises(ValueError) as checked:
            registry.check_pooler_options(name, options)
        with pytest.raises(ValueError) as built:
            build_pooler(name, 8, **options)
        assert message in str(checked.value) and str(checked.value) == str(built.value), (name, options)


@pytest.mark.parametrize("spec", ["attention+meen", "meen+attention", "cls+mean+atention"])
def test_check_pooler_options_checks_each_part_of_a_combination(spec):
    """check_pooler_options accepted 'attention+meen': only the combined class was looked up, not its parts."""
    typo, fixed = ("atention", "attention") if "atention" in spec else ("meen", "mean")
    message = f"Unknown pooler {typo!r}. Did you mean {fixed!r}?"
    with pytest.raises(registry.UnknownPoolerError) as checked:
        registry.check_pooler_options(spec)
    with pytest.raises(ValueError) as built:
        build_pooler(spec, 8)
    assert message in str(checked.value) and str(checked.value) == str(built.value)


def test_instance_passes_through_and_its_hidden_size_is_checked():
    pooler = AttentionPooling(8)
    assert build_pooler(pooler) is pooler
    assert build_pooler(pooler, 8) is pooler
    with pytest.raises(ValueError, match="built for hidden_size=8, but the encoder's hidden size is 16"):
        build_pooler(pooler, 16)


def test_config_errors():
    with pytest.raises(ValueError, match="has no 'type' key"):
        build_pooler({"attn_size": 3}, 8)
    with pytest.raises(ValueError, match="pooler config has hidden_size=8 but hidden_size=16 was requested"):
        build_pooler({"type": "mean", "hidden_size": 8}, 16)
    with pytest.raises(ValueError, match="needs hidden_size"):
        build_pooler("mean")
    with pytest.raises(ValueError, match="hidden_size must be a positive integer, got 0"):
        build_pooler("mean", 0)


def test_shape_errors_name_the_shapes_received():
    pooler = build_pooler("attention", 8)
    with pytest.raises(ValueError, match=r"expected hidden_states of shape \(batch, seq_len, hidden_size\), "
                       r"got \(2, 8\)"):
        pooler(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"hidden size 6 \(shape \(2, 3, 6\)\) but the pooler was built for "
                       r"hidden_size=8"):
        pooler(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"attention_mask of shape \(2, 4\) does not match hidden_states of "
                       r"shape \(2, 3, 8\); expected \(2, 3\)"):
        pooler(torch.randn(2, 3, 8), torch.ones(2, 4))


def test_register_a_custom_pooler_and_build_it_by_name():
    @attnpool.register_pooler
    class FirstHalfMean(Pooler):
        name = "test_first_half_mean"

        def pool(self, hidden_states, mask):
            return hidden_states[:, : hidden_states.shape[1] // 2].mean(1), None

    try:
        assert type(build_pooler("Test-First-Half-Mean", 4)) is FirstHalfMean
        with pytest.raises(ValueError, match="already registered"):
            @attnpool.register_pooler
            class Other(Pooler):
                name = "test_first_half_mean"
    finally:
        registry._REGISTRY.pop("testfirsthalfmean")


def test_the_option_lists_find_the_counts_and_switches():
    assert {("multihead_attention", "num_heads"), ("pma", "num_seeds"), ("latent_attention", "num_latents"),
            ("acmil", "top_k"), ("ggem", "num_groups"), ("attention", "attn_size"), ("ditto", "head")} <= set(COUNTS)
    assert {("attention", "fused"), ("gem", "learnable_p"), ("pma", "layer_norm")} <= set(SWITCHES)


@pytest.mark.parametrize(("name", "option"), COUNTS)
def test_a_count_option_refuses_a_fraction_instead_of_cutting_it(name, option):
    """num_heads=2.5 built 2 heads, num_seeds=1.9 one seed, attn_size=7.9 a width of 7: int() cut them silently."""
    owner = get_pooler_class(name).__name__
    with pytest.raises(ValueError, match=rf"^{owner}: {option} must be a whole number.*, got 2\.5; it is not "
                                         rf"rounded: give {option}=2 or {option}=3$"):
        build_pooler(name, HIDDEN, **{option: 2.5})
    with pytest.raises(ValueError, match=rf"^{owner}: {option} must be a whole number.*, got '2'"):
        build_pooler(name, HIDDEN, **{option: "2"})
    pooler = build_pooler(name, HIDDEN, **{option: 2.0})  # a whole float is the count
    value = getattr(pooler, option)
    assert value is None or (value == 2 and type(value) is int), (name, option, value)  # combined: no layered part


@pytest.mark.parametrize(("name", "option"), SWITCHES)
def test_a_switch_option_reads_the_words_and_refuses_anything_else(name, option):
    """fused=False, learnable_p=no, layer_norm=off came through --pooling-opt as text and bool() made them True."""
    for given, expected in [(False, False), (True, True), ("False", False), ("no", False), ("OFF", False),
                            ("true", True), ("Yes", True), ("on", True)]:
        assert getattr(build_pooler(name, HIDDEN, **{option: given}), option) is expected, (name, option, given)
    owner = get_pooler_class(name).__name__
    for bad in ("maybe", 0, 1, None):
        with pytest.raises(ValueError, match=rf"^{owner}: {option} must be true or false, got {bad!r}; give a bool "
                                             rf"or one of true, yes, on, false, no, off \(e\.g\. {option}=false\)$"):
            build_pooler(name, HIDDEN, **{option: bad})


def test_learnable_p_false_as_a_word_keeps_p_fixed():
    assert not build_pooler("gem", HIDDEN, learnable_p="False").p_param.requires_grad
    assert build_pooler("pma", HIDDEN, layer_norm="no").ln0.__class__ is torch.nn.Identity
