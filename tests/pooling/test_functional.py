"""The masked reductions every pooler is built from: closed forms, padding, empty rows and dtypes."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, ragged_batch

from attnpool.pooling import functional as F


def test_masked_softmax_is_the_softmax_over_the_real_positions():
    scores = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1], [0] * 6], dtype=torch.bool)
    before = scores.clone()
    weights = F.masked_softmax(scores, mask)
    assert torch.equal(scores, before)  # the input is left as it was
    torch.testing.assert_close(weights[0, :3], scores[0, :3].softmax(-1))
    torch.testing.assert_close(weights[1, 2:], scores[1, 2:].softmax(-1))
    assert (weights[~mask] == 0).all()
    assert torch.equal(weights[2], torch.zeros(6))  # a row without real positions: zeros, not NaN


def test_masked_softmax_keeps_half_precision_without_overflow():
    scores = torch.tensor([[6e4, 6e4, -6e4, 0.0]], dtype=torch.float16)
    weights = F.masked_softmax(scores, torch.tensor([[True, True, True, False]]))
    assert weights.dtype == torch.float16
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_reductions_run_in_float32_or_wider(dtype):
    assert F.compute_dtype(dtype) == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_masked_softmax_and_attention_keep_float64():
    """Float64 scores went through float32: weights off by ~1e-8, enough to fail gradcheck."""
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 5, dtype=torch.float64, generator=gen) * 10
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    weights = F.masked_softmax(scores, mask)
    assert weights.dtype == torch.float64
    torch.testing.assert_close(weights[0, :4], scores[0, :4].softmax(-1), atol=1e-15, rtol=0)
    query, key, value = (torch.randn(2, n, HIDDEN, dtype=torch.float64, generator=gen) for n in (1, 5, 5))
    out, attn = F.masked_attention(query, key, value, mask, num_heads=1)
    assert attn.dtype == torch.float64
    expected = (query[0] @ key[0, :4].T * HIDDEN**-0.5).softmax(-1) @ value[0, :4]
    torch.testing.assert_close(out[0], expected, atol=1e-14, rtol=0)


@pytest.mark.parametrize("heads", [None, 3])
def test_long_fp16_sums_are_accumulated_in_float32_a_block_at_a_time(heads, monkeypatch):
    """Above HALF_NORMAL_TOKENS fp16 tokens, float32 weights are not rounded to fp16 (their 1/T is subnormal): the
    sum runs in float32, a block of tokens at a time. Both limits are made small here."""
    monkeypatch.setattr(F, "HALF_NORMAL_TOKENS", 4)
    monkeypatch.setattr(F, "SUM_ELEMENTS", 192)  # blocks of 6 tokens (3 heads: 2), the last one shorter
    gen = torch.Generator().manual_seed(4)
    hidden = torch.randn(2, 9, HIDDEN, generator=gen).half().requires_grad_(True)
    weights = torch.rand(2, *([heads] if heads else []), 9, generator=gen).div(3e4).requires_grad_(True)  # subnormal
    out = F.weighted_sum(weights, hidden)
    expected = torch.einsum("b...t,bth->b...h", weights.double(), hidden.double())
    assert out.dtype == torch.float16 and out.shape == expected.shape
    torch.testing.assert_close(out, expected.half(), atol=0, rtol=0)  # exact up to the final rounding
    rounded = F.weighted_sum(weights.detach().half(), hidden.detach())  # the fp16 product: weights rounded first
    assert not torch.equal(rounded, out)
    out.float().sum().backward()
    w = weights.detach().view(2, -1, 9)  # (B, K, T)
    torch.testing.assert_close(hidden.grad, w.sum(1).unsqueeze(-1).expand_as(hidden).half())  # sum of its weights
    torch.testing.assert_close(weights.grad.view(2, -1, 9), hidden.detach().float().sum(-1, keepdim=True).mT
                               .expand_as(w))  # the sum of the token's channels


def test_weighted_sum_of_one_or_several_distributions():
    gen = torch.Generator().manual_seed(1)
    hidden, weights = torch.randn(2, 5, HIDDEN, generator=gen), torch.rand(2, 3, 5, generator=gen)
    torch.testing.assert_close(F.weighted_sum(weights, hidden), torch.einsum("bkt,bth->bkh", weights, hidden))
    torch.testing.assert_close(F.weighted_sum(weights[:, 0], hidden), torch.einsum("bt,bth->bh", weights[:, 0], hidden))


def test_masked_mean_and_max_ignore_padding_and_give_zeros_on_empty_rows():
    hidden, mask, tokens = ragged_batch([4, 2, 0], seq_len=5, pad_value=1e6)
    mask = mask.bool()
    mean, maximum = F.masked_mean(hidden, mask), F.masked_max(-hidden.abs(), mask)  # all-negative real values
    for row, t in enumerate(tokens[:2]):
        torch.testing.assert_close(mean[row], t.mean(0))
        torch.testing.assert_close(maximum[row], (-t.abs()).amax(0))
    assert torch.equal(mean[2], torch.zeros(HIDDEN)) and torch.equal(maximum[2], torch.zeros(HIDDEN))
    torch.testing.assert_close(F.mean_weights(mask), torch.tensor([[0.25] * 4 + [0.0], [0.5] * 2 + [0.0] * 3,
                                                                   [0.0] * 5]))


def test_first_and_last_real_token_under_left_and_right_padding():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert F.first_token_index(mask).tolist() == [0, 2, 0]
    assert F.last_token_index(mask).tolist() == [2, 3, 0]
    one_hot = F.one_hot_weights(F.last_token_index(mask), mask)
    assert one_hot.tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0]]  # no token: no weight
    assert F.has_token(mask).flatten().tolist() == [True, True, False]


@pytest.mark.parametrize("layers", [None, 3])
def test_zero_padding_replaces_nan_and_inf_in_a_copy(layers):
    hidden, mask, _ = ragged_batch([3, 1], seq_len=4, layers=layers)
    hidden[..., 3:, :] = float("nan")
    hidden[1, ..., 2, :] = float("inf")
    cleared = F.zero_padding(hidden, mask.bool())
    assert torch.isfinite(cleared).all() and hidden.isnan().any()  # the input keeps its values
    assert torch.equal(cleared[0, ..., :3, :], hidden[0, ..., :3, :])
    assert torch.equal(cleared[1, ..., 1:, :], torch.zeros_like(cleared[1, ..., 1:, :]))


def test_masked_attention_equals_scaled_dot_product_attention_on_the_real_tokens():
    gen = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(2, n, HIDDEN, generator=gen) for n in (3, 6, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out, weights = F.masked_attention(query, key, value, mask, num_heads=2)
    assert out.shape == (2, 3, HIDDEN) and weights.shape == (2, 2, 3, 6)

    def heads(t):  # (B, n, H) -> (B, 2, n, H / 2)
        return t.view(t.shape[0], t.shape[1], 2, -1).transpose(1, 2)

    expected = torch.nn.functional.scaled_dot_product_attention(heads(query[:1]), heads(key[:1, :4]),
                                                                heads(value[:1, :4]))
    torch.testing.assert_close(out[:1], expected.transpose(1, 2).reshape(1, 3, HIDDEN))
    assert torch.equal(out[1], torch.zeros(3, HIDDEN)) and torch.equal(weights[1], torch.zeros(2, 3, 6))


@pytest.mark.parametrize("poison", [float("inf"), float("nan")], ids=["inf", "nan"])
@pytest.mark.parametrize("name", ["mean_max", "adaptive", "latent_attention", "pma"])
def test_poolers_built_on_masked_mean_and_attention_ignore_non_finite_padding(name, poison):
    """masked_mean and masked_attention take finite padding (0 * inf is NaN; zeroing it there would copy every
    input): the poolers built on them get theirs cleared by Pooler.forward, so inf or NaN in padding reach no output
    and no gradient."""
    from attnpool.pooling import build_pooler

    hidden, mask, _ = ragged_batch([3, 1, 0], seq_len=4, pad_value=1.0)
    torch.manual_seed(0)
    pooler = build_pooler(name, HIDDEN)
    results = []
    for h in (hidden, hidden.masked_fill(~mask.bool().unsqueeze(-1), poison)):
        h = h.clone().requires_grad_(True)
        pooler.zero_grad(set_to_none=True)
        pooled = pooler(h, mask)
        pooled.pow(2).sum().backward()
        results.append([pooled, h.grad, *(p.grad for p in pooler.parameters() if p.grad is not None)])
    for dirty, clean in zip(results[1], results[0], strict=True):
        assert torch.isfinite(dirty).all()
        torch.testing.assert_close(dirty, clean)


def test_generalized_mean_closed_forms_and_extremes():
    hidden, mask, tokens = ragged_batch([4, 2, 0], seq_len=5)
    mask, x = mask.bool(), hidden.abs() + 0.1
    one = F.masked_generalized_mean(x, mask, torch.tensor(1.0), eps=1e-6)
    torch.testing.assert_close(one[:2], F.masked_mean(x, mask)[:2])  # p = 1: the mean
    assert torch.equal(one[2], torch.zeros(HIDDEN))
    huge = F.masked_generalized_mean(x * 1e4, mask, torch.tensor(30.0), eps=1e-6)  # x ** p overflows float32
    real = (x * 1e4)[0, :4]
    assert torch.isfinite(huge).all()
    assert (huge[0] <= real.amax(0) * (1 + 1e-5)).all() and (huge[0] >= real.amin(0)).all()


def test_merge_heads_flattens_heads_and_queries():
    weights = torch.rand(2, 3, 4, 5)  # (B, h, Q, T)
    merged = F.merge_heads(weights, torch.float16)
    assert merged.shape == (2, 12, 5) and merged.dtype == torch.float16
    assert torch.equal(merged[:, 4 * 1 + 2], weights[:, 1, 2].half())  # head-major: head 1, query 2
    assert F.merge_heads(weights[:, :1, :1], torch.float32).shape == (2, 5)  # one distribution: (B, T)


def test_zero_empty_rows():
    pooled = torch.ones(2, 3)
    mask = torch.tensor([[True, False], [False, False]])
    assert F.zero_empty_rows(pooled, mask).tolist() == [[1, 1, 1], [0, 0, 0]]


@pytest.mark.parametrize("share", [0.5, 0.1])
def test_first_token_prior_gives_the_first_real_token_its_share_of_equal_scores(share):
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1], [0] * 5], dtype=torch.bool)
    prior = F.first_token_prior(mask, share)
    assert prior.dtype == torch.float32 and not prior.requires_grad
    weights = F.masked_softmax(torch.zeros(mask.shape) + prior, mask)
    torch.testing.assert_close(weights[0], torch.tensor([share] + [(1 - share) / 3] * 3 + [0.0]))
    torch.testing.assert_close(weights[1], torch.tensor([0.0, 0.0, share, (1 - share) / 2, (1 - share) / 2]))
    torch.testing.assert_close(weights[2], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))  # one token: all of it
    assert (weights[3] == 0).all() and (prior[2:] == 0).all()  # no offset for rows of one token or none


def test_first_token_prior_refuses_a_share_outside_0_1():
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\), got 1.0"):
        F.first_token_prior(torch.ones(1, 3, dtype=torch.bool), 1.0)


@pytest.mark.parametrize("heads", [1, 3])
def test_attend_projected_equals_attend_over_the_projected_values(heads):
    """The value projection after each head's weighted sum is exact: the weights sum to 1 over the real tokens;
    a row without real tokens gets zeros (no bias), as attend's zeroed values give."""
    torch.manual_seed(0)
    value = torch.nn.Linear(5, 6)
    tokens = F.zero_padding(torch.randn(3, 4, 5), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]).bool())
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    scores = torch.randn(3, heads, 2, 4)
    out, weights = F.attend_projected(scores, tokens, value, mask, heads)
    expected, expected_weights = F.attend(scores, value(tokens), mask, heads)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert (out[2] == 0).all()
