"""Ditto: no parameters, weights from the diagonal of an encoder attention map."""

from __future__ import annotations

import pytest
import torch
from pool_helpers import HIDDEN, attention_maps, ragged_batch

from attnpool.pooling import DittoPooling, build_pooler


def test_ditto_has_no_trainable_parameters():
    pooler = DittoPooling(HIDDEN)
    assert list(pooler.parameters()) == [] and pooler.needs_attentions


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (1, 1), (-1, None)])
def test_ditto_weights_follow_the_attention_diagonal(layer, head):
    pooler = DittoPooling(HIDDEN, layer=layer, head=head)
    hidden, mask, tokens = ragged_batch([5, 3], pad_value=1e3)
    attentions = attention_maps(hidden, mask, layers=2, heads=2)  # (L, B, heads, T, T)
    pooled, weights = pooler(hidden, mask, return_weights=True, attentions=attentions)
    for i, t in enumerate(tokens):
        n = t.shape[0]
        diag = attentions[layer, i].diagonal(dim1=-2, dim2=-1)[:, :n]  # (heads, n)
        diag = diag.mean(0) if head is None else diag[head]
        torch.testing.assert_close(weights[i, :n], diag / diag.sum())
        torch.testing.assert_close(pooled[i], (diag / diag.sum()) @ t, atol=1e-5, rtol=1e-5)
        assert (weights[i, n:] == 0).all()
        assert weights[i].argmax() == diag.argmax()  # the token attending most to itself weighs most
    # A tuple of per-layer maps, as transformers returns them, works the same.
    torch.testing.assert_close(pooler(hidden, mask, attentions=tuple(attentions)), pooled)


def test_a_row_whose_diagonal_is_all_zero_pools_to_the_mean_of_its_real_tokens():
    """Valid maps whose real tokens all attend elsewhere pooled to zeros with weights summing to 0, as an empty row."""
    hidden, mask, tokens = ragged_batch([4, 3, 0], seq_len=4, pad_value=1e3)
    shift = torch.roll(torch.eye(4), 1, dims=1)  # each token attends to the next only: rows sum to 1, diagonal 0
    attentions = shift.expand(1, 3, 2, 4, 4).clone()  # (L, B, heads, T, T)
    for head in (0, None):
        pooled, weights = DittoPooling(HIDDEN, head=head)(hidden, mask, return_weights=True, attentions=attentions)
        for i, t in enumerate(tokens[:2]):
            n = t.shape[0]
            torch.testing.assert_close(weights[i, :n], torch.full((n,), 1 / n))
            torch.testing.assert_close(pooled[i], t.mean(dim=0))
            assert (weights[i, n:] == 0).all()
        assert (weights[2] == 0).all() and (pooled[2] == 0).all()  # no real token: zeros still


def test_a_diagonal_that_underflowed_in_fp16_gives_uniform_weights_not_zeros():
    hidden, mask, tokens = ragged_batch([3], seq_len=3)
    scores = torch.full((3, 3), -20.0) + 20.0 * torch.roll(torch.eye(3), 1, dims=1)
    maps = torch.softmax(scores.half(), dim=-1).view(1, 1, 1, 3, 3)  # exp(-20) underflows: the diagonal is 0
    assert (maps.diagonal(dim1=-2, dim2=-1) == 0).all()
    pooled, weights = DittoPooling(HIDDEN)(hidden.half(), mask, return_weights=True, attentions=maps)
    torch.testing.assert_close(weights.float(), torch.full((1, 3), 1 / 3), atol=1e-3, rtol=0)
    torch.testing.assert_close(pooled.float(), tokens[0].mean(dim=0, keepdim=True), atol=2e-3, rtol=0)


@pytest.mark.parametrize("attentions", [None, ()])
def test_ditto_without_attention_maps_explains_eager_attention(attentions):
    pooler = build_pooler("ditto", HIDDEN)
    with pytest.raises(ValueError, match="needs the encoder's attention maps.*attn_implementation='eager'"):
        pooler(torch.randn(2, 3, HIDDEN), attentions=attentions)


def test_ditto_attention_shape_errors():
    pooler = DittoPooling(HIDDEN)
    hidden = torch.randn(2, 3, HIDDEN)
    with pytest.raises(ValueError, match=r"attentions\[0\] of shape \(2, 2, 4, 4\) does not fit hidden_states"):
        pooler(hidden, attentions=(torch.rand(2, 2, 4, 4),))
    with pytest.raises(ValueError, match=r"expected \(num_layers, 2, heads, 3, 3\)"):
        pooler(hidden, attentions=torch.rand(1, 3, 2, 3, 3))
    with pytest.raises(ValueError, match="layer=5 but the encoder gave 1 attention maps"):
        DittoPooling(HIDDEN, layer=5)(hidden, attentions=torch.rand(1, 2, 2, 3, 3))


def _reference_att_first_last(hidden_states, attentions, mask, layer=0, head=0):
    """``att_first_last`` of the Ditto evaluation code (alibaba-damo-academy/SpokenNLP, ditto/evaluation_ditto.py)."""
    diag = torch.diagonal(attentions[layer][:, head, :, :], 0, dim1=1, dim2=2)
    first, last = hidden_states[0], hidden_states[-1]
    return ((first + last) / 2.0 * mask.unsqueeze(-1) * diag.unsqueeze(-1)).sum(1), (diag * mask).sum(-1)


def test_first_last_recipe_is_pooling_layers_0_and_minus_1_as_in_the_reference_code():
    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import batch, tiny_config

    torch.manual_seed(0)
    recipe = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="ditto",
                                                            pooling_layers=[0, -1]).eval()
    wrong = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="ditto",
                                                           pooling_layers=[1, -1]).eval()
    wrong.load_state_dict(recipe.state_dict())
    ids, mask = batch([7, 4, 6], seed=1)
    base = recipe.attnpool
    with torch.no_grad():
        encoded = base.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        ours = base(input_ids=ids, attention_mask=mask).pooler_output
        other = wrong.attnpool(input_ids=ids, attention_mask=mask).pooler_output
    reference, total = _reference_att_first_last(encoded.hidden_states, encoded.attentions, mask.float())
    # The reference sums with the raw diagonal; ours is normalised: the same vector divided by its total weight.
    torch.testing.assert_close(ours * total.unsqueeze(-1), reference, atol=1e-6, rtol=1e-5)
    cosine = torch.nn.functional.cosine_similarity(ours, reference, dim=-1)
    torch.testing.assert_close(cosine, torch.ones(3), atol=1e-6, rtol=0)
    assert (other * total.unsqueeze(-1) - reference).abs().max() > 1e-3  # [1, -1] is another recipe


def test_ditto_defaults_to_one_head_as_the_reference():
    pooler = DittoPooling(HIDDEN)
    assert (pooler.layer, pooler.head) == (0, 0)
