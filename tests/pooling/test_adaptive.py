"""SimPool and AdaPool: attention whose query comes from the input; closed forms and transcriptions."""

from __future__ import annotations

import copy

import pytest
import torch
from pool_helpers import HIDDEN, perturb_parameters, ragged_batch

from attnpool.pooling import AdaptivePooling, SimPooling, build_pooler


def _simpool_reference(pooler, x, gamma=None):
    """The official SimPool forward for one unpadded sample (one head), the shift taken over the sample."""
    q = pooler.wq(x.mean(0, keepdim=True))  # GAP of the raw tokens as the query
    k = v = pooler.norm(x)
    attn = torch.softmax(q @ pooler.wk(k).T * HIDDEN**-0.5, dim=-1)  # (1, T)
    if gamma is None:
        return (attn @ v)[0]
    return (attn @ (v - v.min() + pooler.eps).pow(gamma)).pow(1 / gamma)[0]


@pytest.mark.parametrize("gamma", [None, 1.25, 2.0])
def test_simpool_matches_the_official_formula_per_sample(gamma):
    pooler = perturb_parameters(SimPooling(HIDDEN, gamma=gamma)).eval()
    hidden, mask, tokens = ragged_batch([6, 3, 9], pad_value=1e3)
    pooled = pooler(hidden, mask)
    for i, t in enumerate(tokens):
        torch.testing.assert_close(pooled[i], _simpool_reference(pooler, t, gamma), atol=1e-5, rtol=1e-5)


def test_simpool_with_a_zero_query_is_the_mean_of_the_normalised_tokens():
    pooler = perturb_parameters(SimPooling(HIDDEN)).eval()
    with torch.no_grad():
        pooler.wq.weight.zero_()
    hidden, mask, tokens = ragged_batch([5, 2])
    pooled, weights = pooler(hidden, mask, return_weights=True)
    for i, t in enumerate(tokens):
        torch.testing.assert_close(pooled[i], pooler.norm(t).mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights[i, : t.shape[0]], torch.full((t.shape[0],), 1 / t.shape[0]))


def test_simpool_has_no_query_or_key_bias():
    pooler = SimPooling(8)
    assert pooler.wq.bias is None and pooler.wk.bias is None
    assert sum(p.numel() for p in pooler.parameters()) == 2 * 8 * 8 + 2 * 8


def test_adaptive_is_single_query_attention_over_the_raw_tokens():
    pooler = perturb_parameters(AdaptivePooling(HIDDEN)).eval()
    hidden, mask, tokens = ragged_batch([7, 4], pad_value=1e3)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    for i, t in enumerate(tokens):
        q = pooler.wq(t.mean(0))
        w = torch.softmax(pooler.wk(t) @ q * HIDDEN**-0.5, dim=0)
        torch.testing.assert_close(weights[i, : t.shape[0]], w, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(pooled[i], w @ t, atol=1e-5, rtol=1e-5)  # a convex combination of the tokens


@pytest.mark.parametrize("query", ["mean", "max", "first", "learned"])
def test_adaptive_query_sources(query):
    pooler = perturb_parameters(AdaptivePooling(HIDDEN, query=query)).eval()
    assert pooler.permutation_invariant == (query != "first")
    hidden, mask, tokens = ragged_batch([5, 3], pad_value=1e3)
    pooled = pooler(hidden, mask)
    for i, t in enumerate(tokens):  # the query from the chosen source of the real tokens, by hand
        source = {"mean": t.mean(0), "max": t.max(0).values, "first": t[0]}.get(query)
        q = pooler.wq(pooler.query_vector[0] if source is None else source)
        w = torch.softmax(pooler.wk(t) @ q * HIDDEN**-0.5, dim=0)
        torch.testing.assert_close(pooled[i], w @ t, atol=1e-5, rtol=1e-5)
    assert ("query_vector" in dict(pooler.named_parameters())) == (query == "learned")


def test_adaptive_attenuates_noise_tokens_once_trained_on_them():
    # The property the paper proves: with a query that separates signal from noise, the pooled vector tends to
    # the signal centroid however many noise tokens there are, where the mean drifts towards the noise.
    torch.manual_seed(0)
    pooler = AdaptivePooling(4, query="learned")
    signal, noise = torch.tensor([1.0, 0, 0, 0]), torch.tensor([0, 1.0, 0, 0])
    with torch.no_grad():
        pooler.wq.weight.copy_(torch.eye(4) * 8)
        pooler.wq.bias.zero_()
        pooler.wk.weight.copy_(torch.eye(4) * 8)
        pooler.query_vector.copy_(signal.unsqueeze(0))
    for n_noise in (1, 10, 100):
        x = torch.stack([signal] * 2 + [noise] * n_noise).unsqueeze(0)
        assert (pooler(x)[0] - signal).abs().max() < 0.05


def test_adaptive_bad_query():
    with pytest.raises(ValueError, match="query must be one of 'mean', 'max', 'first', 'learned', got 'cls'"):
        AdaptivePooling(HIDDEN, query="cls")


@pytest.mark.parametrize("query", ["mean", "max", "first", "learned"])
def test_adaptive_starts_as_mean_pooling_by_default(query):
    pooler = AdaptivePooling(HIDDEN, query=query)
    assert pooler.init == "mean" and pooler.wk.bias is None
    hidden, mask, _ = ragged_batch([5, 2, 7])
    pooled, weights = pooler(hidden, mask, return_weights=True)
    torch.testing.assert_close(pooled, build_pooler("mean", HIDDEN)(hidden, mask), atol=1e-6, rtol=1e-5)
    xavier = AdaptivePooling(HIDDEN, query=query, init="xavier")
    assert xavier.wk.weight.abs().max() > 0


@pytest.mark.parametrize("options", [{"eps": 0.0}, {"eps": -1.0, "gamma": 2.0}])
def test_simpool_refuses_a_floor_that_is_not_positive(options):
    with pytest.raises(ValueError, match=f"SimPooling: eps must be positive, got {options['eps']}"):
        SimPooling(HIDDEN, **options)


@pytest.mark.parametrize("options", [{"query": "first"}, {"init": "xavier"}, {"query": "first", "num_heads": 4}])
def test_adaptive_in_fp16_is_finite_where_its_output_is(options):
    """In fp16, W_q g(H) and W_k h_t overflowed for a token of 3e4 (the zero keys of init="mean" then gave
    inf * 0 = NaN), although the output, a convex combination of the tokens, is representable."""
    torch.manual_seed(0)
    pooler = AdaptivePooling(32, **options).eval()
    hidden = torch.randn(2, 5, 32)
    hidden[:, 0] = 3e4 * torch.randn(32).sign()  # an outlier token, as LLM hidden states have
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    expected, weights32 = pooler(hidden, mask, return_weights=True)
    low, weights = pooler.half()(hidden.half(), mask, return_weights=True)
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), expected, atol=1e-3 * expected.abs().max().item(), rtol=0)
    torch.testing.assert_close(weights.float(), weights32, atol=1e-3, rtol=0)


@pytest.mark.parametrize("precision", ["fp16", "autocast"])
@pytest.mark.parametrize("gamma", [None, 2.0])
def test_simpool_in_fp16_is_finite_where_float32_fits_although_the_query_of_an_outlier_overflows(gamma, precision):
    """At H = 768, W_q of the mean of a row holding only a token of 3e4 exceeds fp16 (about 9.6e4): the query gave
    inf scores, NaN weights and a NaN output; it is now computed in float32, as the other poolers' queries."""
    torch.manual_seed(0)
    hidden = torch.randn(2, 4, 768)
    hidden[:, 0] = 3e4 * hidden[:, 0].sign()  # an outlier token, as LLM hidden states have
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])  # row 0: the outlier alone
    pooler = SimPooling(768, gamma=gamma).eval()
    with torch.no_grad():
        assert pooler.wq(hidden[0, 0]).abs().max() > torch.finfo(torch.float16).max  # the case: the query overflows
        expected, expected_weights = pooler(hidden, mask, return_weights=True)
        if precision == "fp16":
            low, weights = copy.deepcopy(pooler).half()(hidden.half(), mask, return_weights=True)
        else:
            with torch.autocast("cpu", dtype=torch.float16):
                low, weights = pooler(hidden.half(), mask, return_weights=True)
    assert expected.abs().max() < torch.finfo(torch.float16).max / 2
    assert torch.isfinite(low).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(low.float(), expected, atol=3e-3 * expected.abs().max().item(), rtol=0)
    torch.testing.assert_close(weights.float(), expected_weights, atol=1e-3, rtol=0)
