"""Latent attention (NV-Embed), PMA (Set Transformer) and class attention: transcriptions and closed forms."""

from __future__ import annotations

import math

import pytest
import torch
from pool_helpers import HIDDEN, overflowing_value_outputs, perturb_parameters, ragged_batch

from attnpool.pooling import ClassAttentionPooling, LatentAttentionPooling, MeanPooling, PMAPooling


def _zero_(*layers):
    with torch.no_grad():
        for layer in layers:
            for p in layer.parameters():
                p.zero_()


def test_latent_attention_with_zero_residual_branches_is_mean_pooling():
    pooler = perturb_parameters(LatentAttentionPooling(HIDDEN, num_latents=6, num_heads=2)).eval()
    _zero_(pooler.to_out, pooler.mlp[2])
    hidden, mask, _ = ragged_batch([4, 7, 1], pad_value=1e3)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    torch.testing.assert_close(pooled, MeanPooling(HIDDEN)(hidden, mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, MeanPooling(HIDDEN)(hidden, mask, return_weights=True)[1])


def test_latent_attention_with_one_latent_adds_its_value_to_every_token():
    # One latent: every token's attention is 1 on it, so each token gets W_o v + b_o added.
    pooler = perturb_parameters(LatentAttentionPooling(HIDDEN, num_latents=1, num_heads=4)).eval()
    _zero_(pooler.mlp[2])
    hidden, mask, _ = ragged_batch([5, 2])
    value = pooler.to_kv(pooler.norm_latents(pooler.latents))[:, HIDDEN:]  # (1, H)
    expected = MeanPooling(HIDDEN)(hidden, mask) + pooler.to_out(value)
    torch.testing.assert_close(pooler(hidden, mask), expected, atol=1e-5, rtol=1e-5)


def test_latent_attention_parameter_count():
    h, r = 64, 32
    pooler = LatentAttentionPooling(h, num_latents=r, num_heads=8, mlp_ratio=4.0)
    # latents, 3 layer norms, W_q, W_k and W_v, W_o without bias (as released), the MLP
    expected = r * h + 3 * 2 * h + h * h + 2 * h * h + h * h + (h * 4 * h + 4 * h) + (4 * h * h + h)
    assert sum(p.numel() for p in pooler.parameters()) == expected


def _set_transformer_pma(pooler, x):
    """PMA as in the Set Transformer reference code (MAB with ln), but with the 1/sqrt(head_dim) scale."""
    batch, heads = x.shape[0], pooler.num_heads
    q = pooler.fc_q(pooler.seeds.repeat(batch, 1, 1))
    k, v = pooler.fc_k(x), pooler.fc_v(x)
    split = HIDDEN // heads
    q_, k_, v_ = (torch.cat(t.split(split, 2), 0) for t in (q, k, v))
    a = torch.softmax(q_.bmm(k_.transpose(1, 2)) / math.sqrt(split), 2)
    o = torch.cat((q_ + a.bmm(v_)).split(batch, 0), 2)
    o = pooler.ln0(o)
    o = o + torch.relu(pooler.fc_o(o))
    return pooler.ln1(o).flatten(1)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_pma_matches_the_set_transformer_reference_on_unpadded_input(layer_norm):
    pooler = perturb_parameters(PMAPooling(HIDDEN, num_seeds=3, num_heads=4, layer_norm=layer_norm)).eval()
    x = torch.randn(2, 6, HIDDEN)
    torch.testing.assert_close(pooler(x), _set_transformer_pma(pooler, x), atol=1e-5, rtol=1e-5)


def test_pma_with_one_seed_is_permutation_invariant_and_ignores_padding():
    pooler = perturb_parameters(PMAPooling(HIDDEN, num_seeds=1, num_heads=2)).eval()
    hidden, mask, tokens = ragged_batch([6], seq_len=9, pad_value=1e4)
    ref = pooler(hidden, mask)
    for seed in range(3):
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(pooler(tokens[0][perm].unsqueeze(0)), ref, atol=1e-5, rtol=1e-5)


def test_pma_weights_per_head_and_seed():
    pooler = PMAPooling(HIDDEN, num_seeds=2, num_heads=4)
    hidden, mask, _ = ragged_batch([3, 5])
    pooled, weights = pooler(hidden, mask, return_weights=True)
    assert pooled.shape == (2, 2 * HIDDEN) and weights.shape == (2, 8, 5)


def test_class_attention_with_a_zero_query_attends_uniformly():
    pooler = perturb_parameters(ClassAttentionPooling(HIDDEN, num_heads=1)).eval()
    _zero_(pooler.q)
    hidden, mask, tokens = ragged_batch([4, 2], pad_value=1e3)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    for i, t in enumerate(tokens):
        cls = pooler.cls_token[0] + pooler.proj(pooler.v(pooler.norm1(t)).mean(0, keepdim=True))
        cls = cls + pooler.mlp(pooler.norm2(cls))
        torch.testing.assert_close(pooled[i], pooler.norm(cls)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights[i, : t.shape[0]], torch.full((t.shape[0],), 1 / t.shape[0]))


def test_class_attention_only_the_class_token_queries():
    # Same tokens, different class token -> different output; the tokens themselves are not updated (cost O(T)).
    pooler = ClassAttentionPooling(HIDDEN, num_heads=2).eval()
    hidden, mask, _ = ragged_batch([5])
    before = pooler(hidden, mask)
    with torch.no_grad():
        pooler.cls_token.add_(torch.randn(HIDDEN))  # not a constant shift, which the layer norms remove
    assert not torch.allclose(pooler(hidden, mask), before, atol=1e-4)


@pytest.mark.parametrize("cls", [LatentAttentionPooling, PMAPooling, ClassAttentionPooling])
def test_heads_must_divide_the_hidden_size(cls):
    with pytest.raises(ValueError, match="hidden_size 16 is not divisible by num_heads=3"):
        cls(HIDDEN, num_heads=3)


def _nv_embed_latent_attention(pooler, hiddens, mask):
    """The released NV-Embed LatentAttentionModel.forward, with this pooler's weights (its MLP: see the docstring)."""
    heads = pooler.num_heads
    batch, seq_len, _ = hiddens.shape
    q = pooler.to_q(pooler.norm(hiddens))
    k, v = pooler.to_kv(pooler.norm_latents(pooler.latents)).expand(batch, -1, -1).chunk(2, dim=-1)

    def split(t):  # 'b n (h d) -> (b h) n d'
        return t.view(batch, -1, heads, t.shape[-1] // heads).permute(0, 2, 1, 3).reshape(batch * heads, -1,
                                                                                          t.shape[-1] // heads)

    out = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v))
    out = out.view(batch, heads, seq_len, -1).permute(0, 2, 1, 3).reshape(batch, seq_len, -1)
    hiddens = pooler.to_out(out) + hiddens
    hiddens = pooler.mlp(pooler.norm_mlp(hiddens)) + hiddens
    m = mask.float().unsqueeze(-1)
    return (hiddens * m).sum(1) / m.sum(1)


def test_latent_attention_with_full_width_heads_matches_the_released_code():
    # The released code: every head H wide (heads * H inside), no output bias.
    pooler = perturb_parameters(LatentAttentionPooling(HIDDEN, num_latents=6, num_heads=2, head_dim=HIDDEN)).eval()
    assert pooler.to_q.out_features == 2 * HIDDEN and pooler.to_out.bias is None
    hidden, mask, _ = ragged_batch([5, 3])
    torch.testing.assert_close(pooler(hidden, mask), _nv_embed_latent_attention(pooler, hidden, mask),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("cls", "options"), [(PMAPooling, {"num_seeds": 2, "num_heads": 2}),
                                              (ClassAttentionPooling, {"num_heads": 2})])
def test_mean_init_starts_with_uniform_weights(cls, options):
    hidden, mask, _ = ragged_batch([4, 7, 1])
    _, weights = cls(HIDDEN, init="mean", **options)(hidden, mask, return_weights=True)  # (B, heads*seeds, T)
    uniform = (mask.float() / mask.float().sum(1, keepdim=True)).unsqueeze(1).expand_as(weights)
    torch.testing.assert_close(weights, uniform)
    _, weights = cls(HIDDEN, **options)(hidden, mask, return_weights=True)
    assert cls(HIDDEN, **options).init == "xavier" and not torch.allclose(weights, uniform, atol=1e-3)
    with pytest.raises(ValueError, match="init must be one of 'mean', 'xavier', got 'zero'"):
        cls(HIDDEN, init="zero", **options)


@pytest.mark.parametrize("precision", ["fp16", "autocast"])
def test_pma_in_fp16_is_finite_where_float32_fits_although_the_values_of_an_outlier_overflow(precision):
    """At H = 768 the fp16 value projection of a token of 2.5e4 is inf, and even its weight of exactly 0 gave
    0 * inf = NaN in the output (fp16 parameters, or float32 ones under fp16 autocast): W_v is now applied after
    each head's weighted sum, in float32."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 8, 768)
    hidden[:, 3] = 2.5e4 * hidden[:, 3].sign()  # an outlier token, as LLM hidden states have
    mask = torch.tensor([[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]])
    pooler = PMAPooling(768, num_heads=1).eval()
    expected, low = overflowing_value_outputs(pooler, pooler.fc_v, hidden[0, 3], hidden, mask, precision)
    fits = expected.abs().amax(dim=-1) < torch.finfo(torch.float16).max / 2  # rows 0 and 1 (the outlier: weight 0)
    assert fits.sum() == 2
    assert torch.isfinite(low[fits]).all()
    scale = expected[fits].abs().max().item()
    torch.testing.assert_close(low[fits].float(), expected[fits], atol=3e-3 * scale, rtol=0)
