"""Closed forms and recipe properties of the attention poolers."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, assert_xavier, perturb_parameters, ragged_batch
from torch import nn

from attnpool.pooling import (
    AttentionPooling,
    GatedAttentionPooling,
    MeanPooling,
    MultiHeadAttentionPooling,
    build_pooler,
)


def test_parameter_count_is_the_recipe_s_without_its_dead_score_bias():
    # The recipe's 525,313 include the scoring layer's bias, which a softmax ignores: 525,312 learn.
    assert sum(p.numel() for p in AttentionPooling(1024, attn_size=512).parameters()) == 525_312
    assert sum(p.numel() for p in AttentionPooling(1024).parameters()) == 525_312  # A = H // 2 = 512 by default


@pytest.mark.parametrize("hidden, expected", [(1024, 512), (768, 384), (384, 192), (1, 1)])
def test_default_attn_size_is_half_the_encoder_width(hidden, expected):
    for name in ("attention", "multihead_attention", "gated_attention"):
        pooler = build_pooler(name, hidden)
        assert pooler.attn_size == expected
        assert build_pooler(pooler.get_config()).attn_size == expected  # saved resolved, rebuilt the same


def test_xavier_init_is_the_recipe_s():
    torch.manual_seed(0)
    pooler = AttentionPooling(1024, attn_size=512, init="xavier")
    for layer in (pooler.proj, pooler.score):
        assert_xavier(layer)


@pytest.mark.parametrize("cls", [AttentionPooling, MultiHeadAttentionPooling, GatedAttentionPooling])
def test_mean_init_starts_as_exactly_mean_pooling(cls):
    torch.manual_seed(0)
    pooler = cls(HIDDEN, attn_size=12)
    assert pooler.init == "mean"
    assert torch.equal(pooler.score.weight, torch.zeros_like(pooler.score.weight))
    assert pooler.proj.weight.abs().max() > 0  # the first layer is random: the scorer can learn
    hidden, mask, _ = ragged_batch([5, 2, 7], seed=3)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    batch, seq_len = mask.shape
    mean = MeanPooling(HIDDEN)(hidden, mask)
    heads = pooled.view(batch, -1, HIDDEN)  # one head, or the heads of multi-head concat
    torch.testing.assert_close(heads, mean.unsqueeze(1).expand_as(heads), rtol=1e-6, atol=1e-6)
    weights = weights.view(batch, -1, seq_len)
    uniform = (mask.float() / mask.float().sum(dim=1, keepdim=True)).unsqueeze(1).expand_as(weights)
    torch.testing.assert_close(weights, uniform)


def test_mean_init_learns_away_from_uniform():
    """The zero scoring layer gets a gradient at once, the first layer from the second step on."""
    torch.manual_seed(0)
    pooler = AttentionPooling(HIDDEN, attn_size=12)
    hidden, mask, _ = ragged_batch([5, 2, 7], seed=4)
    target = torch.randn(len(hidden), HIDDEN)
    optimizer = torch.optim.SGD(pooler.parameters(), lr=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        ((pooler(hidden, mask) - target) ** 2).sum().backward()
        optimizer.step()
    _, weights = pooler(hidden, mask, return_weights=True)
    assert pooler.score.weight.abs().max() > 0
    real = weights[mask]
    assert real.max() - real.min() > 1e-3  # no longer uniform


def test_unknown_init_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"AttentionPooling: init must be one of 'mean', 'xavier', got 'zeros'"):
        AttentionPooling(HIDDEN, init="zeros")


def test_matches_a_direct_transcription_of_the_recipe_on_unpadded_input():
    torch.manual_seed(0)
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12)).eval()
    recipe = nn.Sequential(nn.Linear(HIDDEN, 12), nn.Tanh(), nn.Linear(12, 1), nn.Softmax(dim=1))
    recipe[0].load_state_dict(pooler.proj.state_dict())
    with torch.no_grad():
        recipe[2].weight.copy_(pooler.score.weight)
        recipe[2].bias.fill_(0.7)  # the recipe's score bias, whatever its value, changes nothing
    hidden = torch.randn(4, 9, HIDDEN)
    weights = recipe(hidden)  # (B, T, 1)
    expected = (weights * hidden).sum(dim=1)
    pooled, got_weights = pooler(hidden, return_weights=True)
    torch.testing.assert_close(pooled, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_weights, weights.squeeze(-1), atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("name", ["attention", "gated_attention", "multihead_attention"])
def test_zero_scorer_turns_attention_into_mean(name):
    options = {"combine": "mean"} if name == "multihead_attention" else {}
    pooler = perturb_parameters(build_pooler(name, HIDDEN, **options))
    with torch.no_grad():
        pooler.score.weight.zero_()
    hidden, mask, _ = ragged_batch([3, 7, 1], pad_value=50.0)
    torch.testing.assert_close(pooler(hidden, mask), MeanPooling(HIDDEN)(hidden, mask), atol=1e-6, rtol=1e-5)


def test_one_head_equals_single_head_attention():
    single = perturb_parameters(AttentionPooling(HIDDEN, attn_size=10)).eval()
    for combine in ("concat", "mean", "project"):
        multi = MultiHeadAttentionPooling(HIDDEN, num_heads=1, attn_size=10, combine=combine).eval()
        multi.proj.load_state_dict(single.proj.state_dict())
        multi.score.load_state_dict(single.score.state_dict())
        if combine == "project":
            nn.init.eye_(multi.out_proj.weight)
            nn.init.zeros_(multi.out_proj.bias)
        hidden, mask, _ = ragged_batch([4, 2, 6])
        out_s, w_s = single(hidden, mask, return_weights=True)
        out_m, w_m = multi(hidden, mask, return_weights=True)
        torch.testing.assert_close(out_m, out_s, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(w_m.squeeze(1), w_s)


def test_multihead_output_dim_follows_combine():
    assert MultiHeadAttentionPooling(HIDDEN, num_heads=3).output_dim == 3 * HIDDEN
    assert MultiHeadAttentionPooling(HIDDEN, num_heads=3, combine="project").output_dim == HIDDEN
    assert MultiHeadAttentionPooling(HIDDEN, num_heads=3, combine="mean").output_dim == HIDDEN


def test_multihead_heads_differ():
    pooler = perturb_parameters(MultiHeadAttentionPooling(HIDDEN, num_heads=4))  # trained: rows apart
    hidden, mask, _ = ragged_batch([6])
    _, weights = pooler(hidden, mask, return_weights=True)  # (1, 4, 6)
    assert weights.shape == (1, 4, 6)
    assert not torch.allclose(weights[0, 0], weights[0, 1])


def test_gated_attention_is_the_ilse_formula():
    pooler = perturb_parameters(GatedAttentionPooling(HIDDEN, attn_size=6)).eval()
    hidden = torch.randn(2, 5, HIDDEN)
    v_w, u_w = pooler.proj.weight.chunk(2)
    v_b, u_b = pooler.proj.bias.chunk(2)
    gated = torch.tanh(hidden @ v_w.T + v_b) * torch.sigmoid(hidden @ u_w.T + u_b)
    weights = torch.softmax(gated @ pooler.score.weight.T, dim=1)  # (B, T, 1)
    torch.testing.assert_close(pooler(hidden), (weights * hidden).sum(1), atol=1e-6, rtol=1e-5)


def test_temperature_sharpens_or_flattens_the_weights():
    hidden, mask, _ = ragged_batch([8])
    entropies = []
    for temperature in (0.1, 1.0, 10.0):
        torch.manual_seed(0)
        pooler = AttentionPooling(HIDDEN, attn_size=8, init="xavier", temperature=temperature)
        _, w = pooler(hidden * 5, mask, return_weights=True)
        entropies.append(-(w * w.clamp_min(1e-12).log()).sum().item())
    assert entropies[0] < entropies[1] < entropies[2]


@pytest.mark.parametrize("grad", [True, False], ids=["fused", "inference"])
def test_fp16_padding_gets_zero_weight_where_a_minus_1e9_fill_would_overflow(grad):
    # The popular head fills with -1e9, which is -inf in fp16 and gives NaN on a fully padded row.
    pooler = AttentionPooling(HIDDEN).half()
    hidden, mask, _ = ragged_batch([0, 3], seq_len=5, pad_value=100.0)
    with torch.set_grad_enabled(grad):
        pooled, weights = pooler(hidden.half(), mask, return_weights=True)
    assert torch.isfinite(pooled).all() and torch.isfinite(weights).all()
    assert weights[1, 3:].eq(0).all()


@pytest.mark.parametrize("cls", [AttentionPooling, MultiHeadAttentionPooling, GatedAttentionPooling])
def test_dropout_acts_on_the_weighted_sum_in_training_only_and_the_weights_returned_stay_a_distribution(cls):
    """The weights returned were those after dropout: zeros and 1/(1-p) in training, summing to 1 only on average."""
    torch.manual_seed(0)
    pooler = perturb_parameters(cls(HIDDEN, init="xavier", dropout=0.5))
    hidden, mask, _ = ragged_batch([10, 4, 0])
    pooler.eval()
    pooled, weights = pooler(hidden, mask, return_weights=True)
    torch.testing.assert_close(pooler(hidden, mask), pooled)
    pooler.train()
    dropped, train_weights = pooler(hidden, mask, return_weights=True)
    assert (dropped[:2] - pooled[:2]).abs().amax() > 1e-3  # the sum's weights were dropped out
    torch.testing.assert_close(train_weights, weights)  # the weights returned are those before dropout
    totals = train_weights.sum(dim=-1)
    torch.testing.assert_close(totals[:2], torch.ones_like(totals[:2]))
    assert (train_weights[2] == 0).all() and (dropped[2] == 0).all()  # a row without tokens: zeros


def test_the_penalty_of_heads_at_aat_equal_to_i_is_zero_in_training_with_dropout_too():
    """It read the weights after dropout: heads at the optimum A A^T = I were penalised (about 2.1 at p = 0.3)."""
    torch.manual_seed(0)
    pooler = MultiHeadAttentionPooling(HIDDEN, num_heads=2, init="xavier", dropout=0.3, penalty=1.0)
    with torch.no_grad():
        pooler.score.weight.mul_(1e4)  # a saturated softmax: each head one-hot on one token
    hidden, mask, _ = ragged_batch([8] * 32, seq_len=8)
    pooler.eval()
    _, weights = pooler(hidden, mask, return_weights=True)
    apart = (weights[:, 0] * weights[:, 1]).sum(dim=-1) == 0  # the heads on different tokens: A A^T = I
    assert apart.sum() >= 8 and pooler.auxiliary_loss(weights[apart]).item() < 1e-6
    pooler.train()
    for seed in range(10):
        torch.manual_seed(seed)
        _, weights = pooler(hidden[apart], mask[apart], return_weights=True)
        assert pooler.auxiliary_loss(weights).item() < 1e-6, seed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be positive"),
        ({"dropout": 1.0}, "dropout must be in [0, 1)"),
    ],
)
def test_bad_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        AttentionPooling(HIDDEN, **kwargs)


def test_bad_multihead_options_raise():
    with pytest.raises(ValueError, match="combine must be 'concat', 'project' or 'mean', got 'sum'"):
        MultiHeadAttentionPooling(HIDDEN, combine="sum")
    with pytest.raises(ValueError, match="num_heads must be >= 1, got 0"):
        MultiHeadAttentionPooling(HIDDEN, num_heads=0)


def test_lin_penalty_is_the_frobenius_norm_of_aat_minus_i_averaged_over_rows_with_tokens():
    pooler = perturb_parameters(MultiHeadAttentionPooling(HIDDEN, num_heads=3, init="xavier", penalty=0.5))
    hidden, mask, _ = ragged_batch([4, 6, 0, 2], seq_len=6)
    _, weights = pooler(hidden, mask, return_weights=True)  # (4, 3, 6)
    loss = pooler.auxiliary_loss(weights)
    by_hand = []
    for i in (0, 1, 3):  # row 2 has no real token: left out
        a = weights[i].double()
        by_hand.append(sum(((a @ a.T)[r, c] - float(r == c)) ** 2 for r in range(3) for c in range(3)))
    torch.testing.assert_close(loss.double(), 0.5 * sum(by_hand) / 3, rtol=1e-6, atol=0)
    loss.backward()
    assert pooler.score.weight.grad.abs().max() > 0  # the penalty trains the scorer
    # One-hot heads on distinct tokens: A A^T = I, no penalty.
    one_hot = torch.eye(3, 6).unsqueeze(0)
    assert pooler.auxiliary_loss(one_hot).item() == 0


def test_penalty_off_gives_no_auxiliary_loss_and_other_poolers_have_none():
    hidden, mask, _ = ragged_batch([3, 5])
    multi = MultiHeadAttentionPooling(HIDDEN)
    assert multi.penalty == 0 and multi.auxiliary_loss(multi(hidden, mask, return_weights=True)[1]) is None
    assert AttentionPooling(HIDDEN).auxiliary_loss(torch.rand(2, 5)) is None
    assert build_pooler(multi.get_config() | {"penalty": 0.1}).penalty == 0.1  # saved in the config
    with pytest.raises(ValueError, match="penalty must be >= 0, got -1"):
        MultiHeadAttentionPooling(HIDDEN, penalty=-1)
    with pytest.raises(ValueError, match=r"expected weights \(B, 4, T\), got \(2, 5\)"):
        MultiHeadAttentionPooling(HIDDEN, penalty=1.0).auxiliary_loss(torch.rand(2, 5))


@pytest.mark.parametrize("name", ["attention", "gated_attention", "multihead_attention"])
def test_checkpoints_with_the_dead_score_bias_load_and_compute_the_same(name):
    pooler = perturb_parameters(build_pooler(name, HIDDEN)).eval()
    old = pooler.state_dict()
    old["score.bias"] = torch.randn(pooler.score.weight.shape[0])  # what earlier versions saved
    rebuilt = build_pooler(pooler.get_config()).eval()
    rebuilt.load_state_dict(old)  # strict
    hidden, mask, _ = ragged_batch([3, 5])
    torch.testing.assert_close(rebuilt(hidden, mask), pooler(hidden, mask), atol=0, rtol=0)


@pytest.mark.parametrize("normalizer", ["softmax", "sparsemax", "entmax15"])
@pytest.mark.parametrize("cls", [AttentionPooling, MultiHeadAttentionPooling, GatedAttentionPooling])
@pytest.mark.parametrize("side", ["right", "left"])
def test_cls_share_starts_with_that_share_on_the_first_real_token_and_the_rest_even(cls, side, normalizer):
    """sparsemax and entmax15 got softmax's offset: from 5 tokens on the first one took all, the scorer no gradient."""
    torch.manual_seed(0)
    pooler = cls(HIDDEN, attn_size=12, cls_share=0.3, normalizer=normalizer)
    hidden, mask, tokens = ragged_batch([5, 2, 7, 1], seed=3, side=side, seq_len=8)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    batch, seq_len = mask.shape
    weights = weights.view(batch, -1, seq_len)
    for row, real in enumerate(tokens):
        n = len(real)
        row_weights = weights[row][:, mask[row].bool()]  # (heads, n): the real tokens in order
        expected = torch.full((n,), 0.7 / (n - 1)) if n > 1 else torch.ones(1)
        expected[0] = 0.3 if n > 1 else 1.0
        torch.testing.assert_close(row_weights, expected.expand_as(row_weights))
        mix = expected @ real  # (H,)
        heads = pooled[row].view(-1, HIDDEN)
        torch.testing.assert_close(heads, mix.expand_as(heads), rtol=1e-5, atol=1e-5)


def test_cls_share_survives_the_config_and_zero_means_no_prior():
    pooler = build_pooler({"type": "attention", "cls_share": 0.5}, HIDDEN)
    assert pooler.get_config()["cls_share"] == 0.5
    assert build_pooler(pooler.get_config(), HIDDEN).cls_share == 0.5
    assert not pooler.permutation_invariant
    plain = AttentionPooling(HIDDEN)
    assert plain.cls_share == 0.0 and plain.permutation_invariant
    hidden, mask, _ = ragged_batch([3, 6])
    assert plain.score_prior(mask) is None


@pytest.mark.parametrize("share", [1.0, -0.1])
def test_cls_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match=rf"AttentionPooling: cls_share must be in \[0, 1\), got {share}"):
        AttentionPooling(HIDDEN, cls_share=share)


@pytest.mark.parametrize("name", ["attention", "multihead_attention", "latent_attention"])
@pytest.mark.parametrize(("batch", "seq_len"), [(0, 5), (2, 0)], ids=["no-rows", "no-tokens"])
def test_scorers_take_batches_without_tokens_in_pool_itself(name, batch, seq_len):
    """The scorer's output was viewed as (B, T, -1), ambiguous without elements. forward() now gives such a batch one
    padded position (the contract tests), but pool() is also called directly, by combined and weighted_layer."""
    pooler = build_pooler(name, HIDDEN, **({"fused": False} if name == "attention" else {}))
    with torch.no_grad():
        pooled, weights = pooler.pool(torch.randn(batch, seq_len, HIDDEN), torch.ones(batch, seq_len, dtype=torch.bool))
    assert pooled.shape == (batch, pooler.output_dim) and (pooled == 0).all()
    assert weights.shape[0] == batch and weights.shape[-1] == seq_len
