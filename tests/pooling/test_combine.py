"""Combinations such as "attention+mean": concatenation, projection, specs and requirements."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, attention_maps, perturb_parameters, ragged_batch

from attnpool.pooling import CombinedPooling, build_pooler, get_pooler_class


def test_plus_spec_concatenates_the_parts():
    torch.manual_seed(0)
    pooler = perturb_parameters(build_pooler("attention+mean", HIDDEN)).eval()
    assert type(pooler) is CombinedPooling and pooler.output_dim == 2 * HIDDEN
    hidden, mask, _ = ragged_batch([4, 6])
    attention, mean = pooler.parts
    expected = torch.cat([attention(hidden, mask), mean(hidden, mask)], dim=-1)
    torch.testing.assert_close(pooler(hidden, mask), expected, atol=0, rtol=0)


def test_project_maps_back_to_the_hidden_size():
    pooler = build_pooler("mean + max + stats", HIDDEN, combine="project").eval()
    hidden, mask, _ = ragged_batch([3, 0], seq_len=4)
    pooled = pooler(hidden, mask)
    assert pooled.shape == (2, HIDDEN) and pooler.out_proj.in_features == 4 * HIDDEN
    assert (pooled[1] == 0).all(), "the projection's bias must not turn an empty row into a vector"


def test_spec_forms_agree_and_round_trip():
    a = build_pooler("attention+mean", HIDDEN)
    b = build_pooler({"type": "attention+mean"}, HIDDEN)
    c = build_pooler("combined", HIDDEN, poolers=["attention", {"type": "mean"}])
    assert a.get_config() == b.get_config() == c.get_config()
    assert a.get_config()["type"] == "combined"
    assert a.get_config()["poolers"][0]["type"] == "attention"
    assert get_pooler_class("attention+mean") is CombinedPooling
    nested = build_pooler("combined", HIDDEN, poolers=[{"type": "attention", "attn_size": 4}, "cls"])
    assert nested.parts[0].attn_size == 4 and not nested.permutation_invariant


def test_requirements_of_the_parts_combine():
    pooler = build_pooler("combined", HIDDEN, poolers=["mean", "weighted_layer", "ditto"], num_layers=3).eval()
    assert pooler.needs_all_layers and pooler.needs_attentions and pooler.num_layers == 3
    hidden, mask, _ = ragged_batch([5, 2], layers=3)
    attentions = attention_maps(hidden, mask)
    mean, weighted, ditto = pooler.parts
    expected = torch.cat([mean(hidden[:, -1], mask), weighted(hidden, mask),
                          ditto(hidden[:, -1], mask, attentions=attentions)], dim=-1)
    torch.testing.assert_close(pooler(hidden, mask, attentions=attentions), expected)


def test_combination_errors():
    with pytest.raises(ValueError, match="has an empty part"):
        build_pooler("attention+", HIDDEN)
    with pytest.raises(ValueError, match="Unknown pooler 'atention'"):
        build_pooler("atention+mean", HIDDEN)
    with pytest.raises(ValueError, match="different numbers of layers"):
        build_pooler("combined", HIDDEN, poolers=[{"type": "weighted_layer", "num_layers": 2}, "maxpoolbert"])
    with pytest.raises(ValueError, match="non-empty list"):
        build_pooler("combined", HIDDEN, poolers="mean")
    with pytest.raises(ValueError, match="names its poolers already"):
        build_pooler("mean+max", HIDDEN, poolers=["cls"])


def test_a_part_s_own_num_layers_is_not_silently_replaced():
    from attnpool.pooling import build_pooler

    with pytest.raises(ValueError, match="part 'weighted_layer' takes num_layers=3, but the combination reads 2"):
        build_pooler("combined", 16, poolers=[{"type": "weighted_layer", "num_layers": 3}, "mean"], num_layers=2)
    same = build_pooler("combined", 16, poolers=[{"type": "weighted_layer", "num_layers": 2}, "mean"], num_layers=2)
    assert same.parts[0].num_layers == 2
