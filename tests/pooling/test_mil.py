"""ACMIL: multiple attention branches and stochastic top-k instance masking (training only)."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, perturb_parameters, ragged_batch

from attnpool.pooling import ACMILPooling


def _scores(pooler, hidden):
    tanh_branch, gate = pooler.proj(hidden).chunk(2, dim=-1)
    return pooler.score(tanh_branch.tanh() * gate.sigmoid()).transpose(1, 2)  # (B, K, T)


def test_eval_is_the_mean_of_gated_attention_branches():
    pooler = perturb_parameters(ACMILPooling(HIDDEN, num_branches=3, attn_size=8)).eval()
    hidden, mask, tokens = ragged_batch([6, 2])
    pooled, weights = pooler(hidden, mask, return_weights=True)
    assert weights.shape == (2, 3, 6)
    for i, t in enumerate(tokens):
        w = torch.softmax(_scores(pooler, t.unsqueeze(0))[0], dim=-1)  # (K, n)
        torch.testing.assert_close(weights[i, :, : t.shape[0]], w, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(pooled[i], (w @ t).mean(0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("n", "top_k", "rate", "dropped"), [(20, 10, 0.6, 6), (4, 10, 0.6, 2), (2, 10, 0.6, 1),
                                                             (1, 10, 0.9, 0), (8, 3, 0.5, 1)])
def test_training_hides_a_share_of_each_branch_top_k_and_never_every_token(n, top_k, rate, dropped):
    torch.manual_seed(0)
    pooler = perturb_parameters(ACMILPooling(HIDDEN, num_branches=4, attn_size=8, top_k=top_k, mask_rate=rate))
    hidden, mask, _ = ragged_batch([n, 0], seq_len=n + 2, pad_value=50.0)
    _, weights = pooler.train()(hidden, mask, return_weights=True)
    scores = _scores(pooler, hidden)[0, :, :n]  # (K, n)
    for k in range(4):
        hidden_tokens = (weights[0, k, :n] == 0).nonzero().flatten()
        assert len(hidden_tokens) == dropped
        top = scores[k].topk(min(top_k, n)).indices
        assert set(hidden_tokens.tolist()) <= set(top.tolist()), "only the branch's top-k tokens are hidden"
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(4))
    assert (weights[0, :, n:] == 0).all() and (weights[1] == 0).all()


def test_masking_is_random_in_training_and_off_in_eval():
    pooler = perturb_parameters(ACMILPooling(HIDDEN, top_k=10, mask_rate=0.6))
    hidden, mask, _ = ragged_batch([30])
    pooler.train()
    draws = {tuple((pooler(hidden, mask, return_weights=True)[1] == 0).flatten().tolist()) for _ in range(5)}
    assert len(draws) > 1
    pooler.eval()
    _, weights = pooler(hidden, mask, return_weights=True)
    assert (weights > 0).all()


def test_concat_keeps_the_branches_apart():
    pooler = ACMILPooling(HIDDEN, num_branches=3, combine="concat").eval()
    hidden, mask, _ = ragged_batch([4, 5])
    assert pooler(hidden, mask).shape == (2, 3 * HIDDEN) and pooler.output_dim == 3 * HIDDEN


def test_bad_options():
    with pytest.raises(ValueError, match=r"mask_rate must be in \[0, 1\), got 1\.0"):
        ACMILPooling(HIDDEN, mask_rate=1.0)
    with pytest.raises(ValueError, match="combine must be 'mean' or 'concat'"):
        ACMILPooling(HIDDEN, combine="max")


def test_mean_init_starts_every_branch_uniform_and_xavier_keeps_them_apart():
    hidden, mask, _ = ragged_batch([5, 3])
    _, weights = ACMILPooling(HIDDEN, num_branches=3, init="mean").eval()(hidden, mask, return_weights=True)
    uniform = (mask.float() / mask.float().sum(1, keepdim=True)).unsqueeze(1).expand_as(weights)
    torch.testing.assert_close(weights, uniform)
    default = ACMILPooling(HIDDEN, num_branches=3).eval()
    assert default.init == "xavier" and default.score.bias is None
    _, weights = default(hidden, mask, return_weights=True)
    assert not torch.allclose(weights[:, 0], weights[:, 1], atol=1e-3)  # the branches start apart


def test_one_softmax_per_branch_the_weights_used_are_those_returned():
    pooler = perturb_parameters(ACMILPooling(HIDDEN, num_branches=2, attn_size=8), scale=1.0).eval()
    hidden = torch.randn(1, 40, HIDDEN) * 3
    pooled, weights = pooler(hidden, return_weights=True)
    once = torch.softmax(_scores(pooler, hidden)[0], dim=-1)
    torch.testing.assert_close(weights[0], once, atol=1e-6, rtol=1e-5)  # as ACMIL_GA: one softmax of raw scores
    assert once.max() / once.min() > 10  # the scores' own spread, not flattened by a second softmax
