"""Sparsemax and 1.5-entmax: exact zeros, distributions over real tokens, masks, gradients, attention option."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, perturb_parameters, ragged_batch

from attnpool.pooling import build_pooler, masked_entmax15, masked_sparsemax
from attnpool.pooling.sparse import normalize

SPARSE = [masked_sparsemax, masked_entmax15]


def _entmax15_by_bisection(z):
    """1.5-entmax of a 1-D tensor from its definition: p = relu(z/2 - tau)^2 with sum(p) = 1."""
    x = z.double() / 2
    lo, hi = x.max() - 1, x.max()
    for _ in range(200):
        tau = (lo + hi) / 2
        if (x - tau).clamp(min=0).square().sum() > 1:
            lo = tau
        else:
            hi = tau
    return (x - (lo + hi) / 2).clamp(min=0).square().float()


def _sparsemax_by_projection(z):
    """Sparsemax of a 1-D tensor as the Euclidean projection onto the simplex (bisection on the threshold)."""
    x = z.double()
    lo, hi = x.min() - 1, x.max()
    for _ in range(200):
        tau = (lo + hi) / 2
        if (x - tau).clamp(min=0).sum() > 1:
            lo = tau
        else:
            hi = tau
    return (x - (lo + hi) / 2).clamp(min=0).float()


@pytest.mark.parametrize("fn", SPARSE)
def test_weights_have_exact_zeros_and_sum_to_one_over_real_tokens(fn):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 3, 12, generator=gen) * 3
    mask = torch.ones(4, 1, 12, dtype=torch.bool)
    mask[1, :, 7:] = False
    mask[2, :, :3] = False
    weights = fn(scores, mask)
    assert (weights >= 0).all()
    assert (weights[~mask.expand_as(weights)] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3), atol=1e-5, rtol=0)
    real_zeros = (weights == 0) & mask
    assert real_zeros.any(), "sparse maps must give exact zeros to some real tokens"


@pytest.mark.parametrize(("fn", "reference"), [(masked_sparsemax, _sparsemax_by_projection),
                                               (masked_entmax15, _entmax15_by_bisection)])
def test_matches_the_definition_on_the_real_positions(fn, reference):
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 9, generator=gen) * 2
    lengths = [9, 4, 1]
    mask = torch.arange(9) < torch.tensor(lengths).unsqueeze(1)
    weights = fn(scores, mask)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(weights[i, :n], reference(scores[i, :n]), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fn", SPARSE)
def test_padding_values_and_position_do_not_matter(fn):
    scores = torch.tensor([[0.3, 1.2, -0.5, 0.9]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    ref = fn(scores, mask)
    padded = torch.cat([torch.full((1, 3), 1e30), scores], dim=1)  # huge padded scores on the left
    out = fn(padded, torch.cat([torch.zeros(1, 3, dtype=torch.bool), mask], dim=1))
    torch.testing.assert_close(out[:, 3:], ref)
    assert (out[:, :3] == 0).all()


@pytest.mark.parametrize("fn", SPARSE)
@pytest.mark.parametrize("poison", [-float("inf"), float("inf"), float("nan")], ids=["-inf", "inf", "nan"])
def test_sparse_maps_ignore_non_finite_padded_scores(poison, fn):
    """Padded scores pre-filled with -inf (or holding inf/NaN) gave entmax15 NaN weights: x - x.detach() at -inf."""
    clean = torch.tensor([[0.5, 0.2, -0.1, 0.0], [0.0, 1.0, 0.3, 0.0]])
    mask = torch.tensor([[True, True, True, False], [False, True, True, False]])
    scores = clean.clone().requires_grad_(True)
    poisoned = clean.masked_fill(~mask, poison).requires_grad_(True)
    outputs = []
    for s in (scores, poisoned):
        out = fn(s, mask)
        (out * torch.arange(1.0, 5.0)).sum().backward()
        outputs.append(out)
    torch.testing.assert_close(outputs[1], outputs[0])
    torch.testing.assert_close(poisoned.grad, scores.grad)
    assert torch.isfinite(poisoned.grad).all() and (poisoned.grad[~mask] == 0).all()


@pytest.mark.parametrize("fn", SPARSE)
def test_fully_masked_rows_give_zeros_and_finite_gradients(fn):
    scores = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[False] * 5, [True, True, False, True, False]])
    weights = fn(scores, mask)
    assert (weights[0] == 0).all() and torch.isfinite(weights).all()
    (weights * torch.randn(2, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all() and (scores.grad[0] == 0).all()


@pytest.mark.parametrize("fn", SPARSE)
def test_gradient_is_the_known_jacobian(fn):
    # sparsemax: diag(s) - s s^T / |S|; entmax-1.5: diag(g) - g g^T / sum(g) with g = sqrt(p).
    z = torch.tensor([0.8, 1.9, -0.4, 1.1, 0.2, 1.5])
    full = torch.ones(6, dtype=torch.bool)
    jac = torch.autograd.functional.jacobian(lambda v: fn(v, full), z)
    p = fn(z, full)
    g = (p > 0).float() if fn is masked_sparsemax else p.sqrt()
    torch.testing.assert_close(jac, torch.diag(g) - torch.outer(g, g) / g.sum(), atol=1e-5, rtol=1e-4)


def test_half_precision_scores_keep_their_dtype_and_stay_finite():
    scores = (torch.randn(2, 7) * 300).half()
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1] = False
    for fn in SPARSE:
        weights = fn(scores, mask)
        assert weights.dtype == torch.float16 and torch.isfinite(weights).all()
        assert (weights[1] == 0).all()


@pytest.mark.parametrize("name", ["attention", "multihead_attention", "gated_attention"])
@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15"])
def test_attention_poolers_take_the_normalizer_option(name, normalizer):
    pooler = perturb_parameters(build_pooler(name, HIDDEN, normalizer=normalizer, temperature=0.1)).eval()
    hidden, mask, _ = ragged_batch([9, 4], pad_value=100.0)
    _, weights = pooler(hidden, mask, return_weights=True)
    real = mask.bool() if weights.dim() == 2 else mask.bool().unsqueeze(1).expand_as(weights)
    assert ((weights == 0) & real).any(), "a sharp sparse map leaves some real tokens out"
    assert (weights[~real] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5, rtol=0)
    assert pooler.get_config()["normalizer"] == normalizer


def test_sparse_attention_trains_without_the_fused_path():
    pooler = build_pooler("attention", HIDDEN, normalizer="sparsemax").train()
    hidden, mask, _ = ragged_batch([5, 3])
    hidden.requires_grad_(True)
    assert not pooler._use_fused(hidden)
    pooler(hidden, mask).sum().backward()
    assert torch.isfinite(hidden.grad).all()


def test_unknown_normalizer_lists_the_choices():
    with pytest.raises(ValueError, match="normalizer must be one of 'softmax', 'sparsemax', 'entmax15', got 'relu'"):
        build_pooler("attention", HIDDEN, normalizer="relu")
    with pytest.raises(ValueError, match="got 'relu'"):
        normalize(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), "relu")
