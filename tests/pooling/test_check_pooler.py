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


def _uniform_weights(mask, dtype):
    return mask.to(dtype) / mask.sum(1, keepdim=True).clamp(min=1)


def test_weights_returned_without_has_weights_fail_naming_the_flag(scratch_registry):
    """check_pooler passed a pooler returning weights with has_weights False: the monitor and card ignored them."""
    @attnpool.register_pooler
    class UndeclaredWeights(Pooler):
        name = "check_undeclared_weights"

        def pool(self, hidden_states, mask):
            weights = _uniform_weights(mask, hidden_states.dtype)
            return torch.einsum("bt,bth->bh", weights, hidden_states), weights

    with pytest.raises(AssertionError, match=r"^has_weights: UndeclaredWeights\.has_weights is False .*"
                       r"`has_weights = True`"):
        check_pooler(UndeclaredWeights)


def test_has_weights_without_weights_returned_fails_naming_the_flag(scratch_registry):
    @attnpool.register_pooler
    class MissingWeights(Pooler):
        name = "check_missing_weights"
        has_weights = True

        def pool(self, hidden_states, mask):
            weights = _uniform_weights(mask, hidden_states.dtype)
            return torch.einsum("bt,bth->bh", weights, hidden_states), None

    with pytest.raises(AssertionError, match=r"^has_weights: MissingWeights\.has_weights is True .*"
                       r"`has_weights = False`"):
        check_pooler(MissingWeights)


def test_the_callers_accumulated_gradients_survive_the_check():
    """check_pooler called zero_grad(), setting every .grad of the caller's pooler to None mid-training."""
    pooler = attnpool.build_pooler("attention", 16)
    pooler(torch.randn(2, 5, 16)).pow(2).sum().backward()
    before = {name: param.grad.clone() for name, param in pooler.named_parameters()}
    check_pooler(pooler)
    for name, param in pooler.named_parameters():
        assert param.grad is not None and torch.equal(param.grad, before[name]), name


def test_a_pooler_without_gradients_keeps_none():
    pooler = attnpool.build_pooler("attention", 16)
    check_pooler(pooler)
    assert all(param.grad is None for param in pooler.parameters())
