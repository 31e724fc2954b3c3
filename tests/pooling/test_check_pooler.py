"""``attnpool.pooling.check_pooler``: the public contract check passes attnpool's poolers and names what breaks."""

from __future__ import annotations

import pytest
import torch

import attnpool
from attnpool.pooling import Pooler, available_poolers, check_pooler, registry


@pytest.mark.parametrize("name", available_poolers())
def test_every_built_in_pooler_passes(name):
    check_pooler(name)


def test_a_class_is_built_with_the_hidden_size_and_options():
    check_pooler(attnpool.AttentionPooling, hidden_size=8, attn_size=4)
    check_pooler(attnpool.build_pooler("multihead_attention", 8, num_heads=2))


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_a_pooler_that_averages_padding_too_fails_on_padding_invariance(scratch_registry):
    @attnpool.register_pooler
    class LeakyMean(Pooler):
        name = "check_leaky_mean"

        def pool(self, hidden_states, mask):
            return hidden_states.mean(1), None

    with pytest.raises(AssertionError, match="^padding invariance: "):
        check_pooler(LeakyMean)


def test_weights_that_do_not_sum_to_one_fail_naming_it(scratch_registry):
    @attnpool.register_pooler
    class HalfWeights(Pooler):
        name = "check_half_weights"
        has_weights = True

        def pool(self, hidden_states, mask):
            weights = 0.5 * mask.to(hidden_states.dtype)
            return torch.einsum("bt,bth->bh", weights, hidden_states), weights

    with pytest.raises(AssertionError, match="^weights sum to 1: "):
        check_pooler(HalfWeights)



@pytest.mark.parametrize("training", [True, False])
def test_a_pooler_given_comes_back_in_the_mode_it_was_in(training):
    """check_pooler left a caller's pooler in eval mode: a model checked mid-training then trained without dropout."""
    pooler = attnpool.build_pooler("multihead_attention", 16, num_heads=2, dropout=0.1).train(training)
    check_pooler(pooler)
    assert pooler.training is training and all(m.training is training for m in pooler.modules())
