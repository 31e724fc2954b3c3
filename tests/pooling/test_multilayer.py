"""Multi-layer poolers: weighted layers, multi-layer attention and MaxPoolBERT, on (B, L, T, H) inputs."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, overflowing_value_outputs, perturb_parameters, ragged_batch

from attnpool.pooling import (
    MaxPoolBERTPooling,
    MultiLayerAttentionPooling,
    WeightedLayerPooling,
    build_pooler,
)


@pytest.mark.parametrize("inner", ["mean", "attention", "cls"])
@pytest.mark.parametrize("layer", [0, 2])
def test_weighted_layer_with_one_hot_weights_equals_pooling_that_layer(inner, layer):
    pooler = perturb_parameters(WeightedLayerPooling(HIDDEN, num_layers=3, pooler=inner)).eval()
    with torch.no_grad():
        pooler.layer_logits.fill_(-1e4)
        pooler.layer_logits[layer] = 0.0  # softmax -> exactly one-hot in float32
    hidden, mask, _ = ragged_batch([5, 2, 7], layers=3, pad_value=10.0)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    ref, ref_weights = pooler.token_pooler(hidden[:, layer], mask, return_weights=True)
    torch.testing.assert_close(pooled, ref, atol=0, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=0, rtol=0)


def test_weighted_layer_starts_as_the_layer_average_and_stays_convex():
    pooler = WeightedLayerPooling(HIDDEN, num_layers=4)
    torch.testing.assert_close(pooler.layer_weights(), torch.full((4,), 0.25))
    hidden, mask, _ = ragged_batch([3, 6], layers=4)
    mean = build_pooler("mean", HIDDEN)
    torch.testing.assert_close(pooler(hidden, mask), mean(hidden.mean(1), mask), atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        pooler.layer_logits.copy_(torch.tensor([3.0, -2.0, 0.5, 10.0]))
    assert pooler.layer_weights().min() > 0 and abs(pooler.layer_weights().sum().item() - 1) < 1e-6


def test_weighted_layer_takes_its_flags_and_config_from_the_inner_pooler():
    pooler = WeightedLayerPooling(HIDDEN, num_layers=2, pooler={"type": "attention", "attn_size": 8})
    assert pooler.has_weights and pooler.permutation_invariant and pooler.needs_all_layers
    assert pooler.get_config()["pooler"]["attn_size"] == 8
    assert not WeightedLayerPooling(HIDDEN, pooler="cls").permutation_invariant
    assert not WeightedLayerPooling(HIDDEN, pooler="max").has_weights
    with pytest.raises(ValueError, match="the inner pooler must pool one layer"):
        WeightedLayerPooling(HIDDEN, pooler="maxpoolbert")


@pytest.mark.parametrize("side", ["right", "left"])
def test_maxpoolbert_is_the_elementwise_max_of_the_selected_cls_vectors(side):
    pooler = MaxPoolBERTPooling(HIDDEN, num_layers=3)
    assert sum(p.numel() for p in pooler.parameters()) == 0
    hidden, mask, tokens = ragged_batch([4, 1, 6], layers=3, seq_len=8, side=side, pad_value=1e4)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    for i, t in enumerate(tokens):
        cls_vectors = t[:, 0]  # (k, H): the first real token of each selected layer
        torch.testing.assert_close(pooled[i], cls_vectors.max(dim=0).values, atol=0, rtol=0)
        first = 0 if side == "right" else 8 - t.shape[1]
        assert weights[i, first] == 1 and weights[i].sum() == 1


@pytest.mark.parametrize("mode", ["attention", "max_attention"])
def test_maxpoolbert_attention_modes_with_a_zero_query_average_the_values(mode):
    pooler = perturb_parameters(MaxPoolBERTPooling(HIDDEN, num_layers=2, mode=mode, num_heads=2)).eval()
    with torch.no_grad():
        pooler.q.weight.zero_()
        pooler.q.bias.zero_()
    hidden, mask, tokens = ragged_batch([5, 3], layers=2, pad_value=1e3)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    assert weights.shape == (2, 2, 5)
    for i, t in enumerate(tokens):
        seq = t[-1] if mode == "attention" else t.max(dim=0).values  # (n, H)
        expected = seq[0] + pooler.o(pooler.v(seq).mean(0))
        torch.testing.assert_close(pooled[i], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["max", "attention", "max_attention"])
def test_maxpoolbert_weights_have_a_head_axis_only_with_several_heads_as_its_docstring_says(mode):
    """The docstring said (B, heads, T) for the attention modes: with one head they are (B, T)."""
    hidden, mask, _ = ragged_batch([5, 3], layers=2)
    shapes = {heads: MaxPoolBERTPooling(HIDDEN, num_layers=2, mode=mode, num_heads=heads)(
        hidden, mask, return_weights=True)[1].shape for heads in (1, 2)}
    assert shapes == {1: (2, 5), 2: (2, 5) if mode == "max" else (2, 2, 5)}
    shapes_doc = " ".join(MaxPoolBERTPooling.__doc__.split("Shapes:")[1].split())
    assert shapes_doc == ("``(B, k, T, H) -> (B, H)``; weights ``(B, T)``, ``(B, heads, T)`` for the attention modes "
                          "with several heads.")


def test_multilayer_attention_uses_every_layer_and_ignores_padding():
    pooler = perturb_parameters(MultiLayerAttentionPooling(HIDDEN, num_layers=3)).eval()
    hidden, mask, _ = ragged_batch([4, 6], layers=3, pad_value=1e3)
    ref = pooler(hidden, mask)
    for layer in range(3):
        changed = hidden.clone()
        changed[:, layer, :4] += torch.randn(HIDDEN)  # not a constant shift: LayerNorm removes those
        assert not torch.allclose(pooler(changed, mask)[0], ref[0]), f"layer {layer} has no influence"


@pytest.mark.parametrize("token", ["mean", "last", "first"])
def test_multilayer_attention_summarises_each_layer_by_its_token(token):
    pooler = perturb_parameters(MultiLayerAttentionPooling(HIDDEN, num_layers=2, token=token)).eval()
    hidden, mask, tokens = ragged_batch([5, 3], layers=2, seq_len=6, pad_value=1e3)
    pooled = pooler(hidden, mask)
    torch.manual_seed(0)
    for i, t in enumerate(tokens):
        # Only each layer's summary matters: the other tokens (last/first), or moves that keep the mean (mean).
        changed = t.clone()
        keep = {"mean": 0, "last": t.shape[1] - 1, "first": 0}[token]
        if token == "mean":
            shift = torch.randn(HIDDEN)
            changed[:, 0] += shift
            changed[:, 1] -= shift
        else:
            changed[:, [j for j in range(t.shape[1]) if j != keep]] += 5.0
        torch.testing.assert_close(pooler(changed.unsqueeze(0))[0], pooled[i], atol=1e-5, rtol=1e-5)
        moved = t.clone()
        moved[:, keep] += torch.randn(HIDDEN)  # the summarised token itself (for mean: the mean moves)
        assert not torch.allclose(pooler(moved.unsqueeze(0))[0], pooled[i], atol=1e-3), "the summary is ignored"
    assert pooler.permutation_invariant == (token == "mean")


def test_multi_layer_shape_errors_name_the_shapes():
    pooler = WeightedLayerPooling(HIDDEN, num_layers=3)
    with pytest.raises(ValueError, match=r"expected hidden_states of shape \(batch, num_layers, seq_len, "
                       r"hidden_size\), got \(2, 5, 16\); this pooler combines 3 encoder layers"):
        pooler(torch.randn(2, 5, HIDDEN))
    with pytest.raises(ValueError, match=r"shape \(2, 4, 5, 16\) stacks 4 layers, but the pooler was built for "
                       r"num_layers=3"):
        pooler(torch.randn(2, 4, 5, HIDDEN))
    with pytest.raises(ValueError, match=r"attention_mask of shape \(2, 4\) does not match hidden_states of shape "
                       r"\(2, 3, 5, 16\); expected \(2, 5\)"):
        pooler(torch.randn(2, 3, 5, HIDDEN), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"stacked layers are for multi-layer poolers"):
        build_pooler("mean", HIDDEN)(torch.randn(2, 3, 5, HIDDEN))
    with pytest.raises(ValueError, match="num_layers must be >= 1, got 0"):
        WeightedLayerPooling(HIDDEN, num_layers=0)


def _split_heads(t, heads):
    """``'b n (h d) -> (b h) n d'``."""
    b, n, inner = t.shape
    return t.view(b, n, heads, inner // heads).permute(0, 2, 1, 3).reshape(b * heads, n, inner // heads)


def _merge_heads(t, heads):
    """``'(b h) n d -> b n (h d)'``."""
    bh, n, d = t.shape
    return t.view(bh // heads, heads, n, d).permute(0, 2, 1, 3).reshape(bh // heads, n, heads * d)


def _perceiver_resampler(pooler, layer_summaries):
    """The released code's PerceiverResampler.forward (yixuantt/PoolingAndAttn), without its final L2 norm."""
    heads = pooler.num_heads
    hiddens = layer_summaries + pooler.layer_embedding  # + pos_emb
    x = pooler.latents.expand(hiddens.shape[0], -1, -1)
    q = pooler.q(pooler.norm_latents(x))  # PreNorm: the context (the latents) normalised, queries from it
    k, v = pooler.kv(pooler.norm(hiddens)).chunk(2, dim=-1)
    out = torch.nn.functional.scaled_dot_product_attention(*(_split_heads(t, heads) for t in (q, k, v)))
    x = pooler.o(_merge_heads(out, heads)) + x
    x = pooler.mlp(pooler.norm_mlp(x)) + x
    return x.mean(dim=1)


@pytest.mark.parametrize(("num_heads", "head_dim"), [(4, None), (2, 24)])
def test_multilayer_attention_matches_the_released_perceiver_resampler(num_heads, head_dim):
    pooler = perturb_parameters(MultiLayerAttentionPooling(HIDDEN, num_layers=3, num_queries=5, num_heads=num_heads,
                                                           head_dim=head_dim)).eval()
    hidden, mask, tokens = ragged_batch([6, 3], layers=3, pad_value=1e3)
    pooled = pooler(hidden, mask)
    for i, t in enumerate(tokens):
        summaries = t.mean(dim=1).unsqueeze(0)  # (1, L, H): the released code's per-layer masked mean
        torch.testing.assert_close(pooled[i], _perceiver_resampler(pooler, summaries)[0], atol=1e-5, rtol=1e-5)


def test_multilayer_attention_defaults_follow_the_released_code_where_documented():
    pooler = MultiLayerAttentionPooling(HIDDEN)
    assert pooler.token == "mean" and pooler.mlp_ratio == 4.0 and pooler.num_queries > 1
    assert all(m.bias is None for m in (pooler.q, pooler.kv, pooler.o))  # no biases in its attention
    assert pooler.mlp.proj_in.out_features == 2 * 4 * HIDDEN  # GEGLU of width 4H


def test_multilayer_attention_mean_init_weights_the_layers_uniformly():
    pooler = MultiLayerAttentionPooling(HIDDEN, num_layers=3, num_queries=2, init="mean")
    hidden, mask, _ = ragged_batch([4, 6], layers=3)
    _, weights = pooler.attend(hidden, mask.bool())  # (B, heads, r, L)
    torch.testing.assert_close(weights, torch.full_like(weights, 1 / 3))
    _, weights = MultiLayerAttentionPooling(HIDDEN, num_layers=3).attend(hidden, mask.bool())
    assert weights.std() > 1e-3  # xavier keys: not uniform


@pytest.mark.parametrize(("name", "stuck"), [("weighted_layer", "its layer_logits"),
                                             ("multilayer_attention", "its queries and keys")])
def test_poolers_weighing_layers_by_a_softmax_warn_over_one_layer(name, stuck, caplog):
    # over one layer the softmax is constantly 1: layer_logits (or the queries) never get a gradient; a warning,
    # not an error, so that models saved so still load
    with caplog.at_level("WARNING", logger="attnpool.pooling"):
        assert build_pooler(name, 8, num_layers=1).num_layers == 1
        assert f"over one layer (the encoder's depth or the pooling_layers chosen): it weighs the layers by a " \
               f"softmax, constantly 1 here, so {stuck}" in caplog.text
        caplog.clear()
        build_pooler(name, 8, num_layers=2)
        build_pooler("maxpoolbert", 8, num_layers=1)  # a max over one layer is that layer: nothing stuck
    assert caplog.text == ""


@pytest.mark.parametrize("precision", ["fp16", "autocast"])
@pytest.mark.parametrize("mode", ["attention", "max_attention"])
def test_maxpoolbert_attention_in_fp16_is_finite_where_float32_fits_although_an_outliers_values_overflow(
    mode, precision
):
    """At H = 768 the fp16 value projection of a token of 2.5e4 is inf, which gave NaN (0 * inf where its weight
    was 0); W_v is now applied after the weighted sum and W_o after it, in float32: here the attended values
    themselves exceed fp16 on row 1 while the pooled vector does not."""
    torch.manual_seed(3)
    hidden = torch.randn(3, 8, 768)
    hidden[:, 3] = 2.5e4 * hidden[:, 3].sign()  # an outlier token, as LLM hidden states have
    hidden = hidden.unsqueeze(1).expand(-1, 3, -1, -1).contiguous()  # (B, L, T, H): the same in every layer
    mask = torch.tensor([[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]])
    pooler = MaxPoolBERTPooling(768, num_layers=3, mode=mode, num_heads=1).eval()
    expected, low = overflowing_value_outputs(pooler, pooler.v, hidden[0, -1, 3], hidden, mask, precision)
    fits = expected.abs().amax(dim=-1) < torch.finfo(torch.float16).max / 2
    assert fits.tolist() == [False, True, False]  # rows 0 and 2 exceed fp16 in float32 too
    assert torch.isfinite(low[1]).all()
    torch.testing.assert_close(low[1].float(), expected[1], atol=3e-3 * expected[1].abs().max().item(), rtol=0)
