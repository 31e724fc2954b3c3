"""Every pooler of the literature set inside the model: what it declares decides what the encoder returns."""

from __future__ import annotations

import pytest
import torch

import attnpool  # (importing it registers the Auto classes)
from attnpool.model import AttnPoolForSequenceClassification
from model_helpers import batch, tiny_config

NEW_POOLERS = ["simpool", "ggem", "pma", "latent_attention", "class_attention", "weighted_layer",
               "multilayer_attention", "maxpoolbert", "acmil", "stats", "ditto", "adaptive", "softpool",
               "attention+mean"]
SMALL = {"latent_attention": {"num_latents": 8}, "pma": {"num_heads": 2}}


def build(pooling, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("pooling_options", SMALL.get(pooling))
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooling, **kwargs)


@pytest.mark.parametrize("pooling", NEW_POOLERS)
def test_forward_and_backward_inside_the_model(pooling):
    model = build(pooling).train()
    ids, mask = batch([6, 3, 5], side="left")
    out = model(input_ids=ids, attention_mask=mask, labels=torch.randn(3), return_pooling_weights=True)
    assert out.logits.shape == (3, 1) and torch.isfinite(out.loss)
    out.loss.backward()
    pooler = model.attnpool.pooler
    for name, p in model.named_parameters():
        if name.startswith("attnpool.pooler."):
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    encoder_grads = [p.grad for p in model.attnpool.encoder.parameters() if p.grad is not None]
    assert encoder_grads and all(torch.isfinite(g).all() for g in encoder_grads)
    if pooler.has_weights:
        assert out.pooling_weights.shape[0] == 3 and out.pooling_weights.shape[-1] == 6


def test_multi_layer_pooler_gets_the_top_layers_stacked():
    model = build("weighted_layer", pooling_options={"pooler": "cls"}).eval()
    pooler = model.attnpool.pooler
    assert pooler.num_layers == 2  # the default 4 capped at the tiny encoder's 2 layers
    seen = {}

    def record(module, args):
        seen["shape"] = tuple(args[0].shape)

    pooler.register_forward_pre_hook(record)
    ids, mask = batch([5, 4])
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert seen["shape"] == (2, 2, 5, 32)  # (B, L, T, H)
    # With one-hot layer weights on the top layer the result is CLS pooling of the last hidden state.
    with torch.no_grad():
        pooler.layer_logits.copy_(torch.tensor([-1e4, 0.0]))
    base = model.attnpool(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(base.pooler_output, base.last_hidden_state[:, 0])
    assert len(out.hidden_states) == 3


def test_pooling_layers_all_and_lists_size_the_multi_layer_pooler():
    assert build("multilayer_attention", pooling_layers="all").attnpool.pooler.num_layers == 2
    assert build("maxpoolbert", pooling_layers=[0, 1, 2]).attnpool.pooler.num_layers == 3
    with pytest.raises(ValueError, match="takes num_layers=1 layers, but pooling_layers='all' selects 2"):
        build("maxpoolbert", pooling_layers="all", pooling_options={"num_layers": 1})


def test_ditto_gets_the_eager_attention_maps_of_the_encoder():
    model = build("ditto", pooling_options={"layer": 1, "head": 0}).eval()
    encoder = model.attnpool.encoder
    assert encoder.config._attn_implementation == "eager"
    ids, mask = batch([6, 2])
    out = model(input_ids=ids, attention_mask=mask, return_pooling_weights=True, output_attentions=True)
    diagonal = out.attentions[1][:, 0].diagonal(dim1=-2, dim2=-1) * mask  # (B, T)
    torch.testing.assert_close(out.pooling_weights, diagonal / diagonal.sum(-1, keepdim=True))
    plain = model(input_ids=ids, attention_mask=mask)
    assert plain.attentions is None  # requested for the pooler, returned only when asked for


def test_ditto_under_sdpa_raises_a_clear_error():
    model = build("ditto").eval()
    model.attnpool.encoder.set_attn_implementation("sdpa")
    ids, mask = batch([4, 3])
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        model(input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize("pooling", [*attnpool.available_poolers(), "attention+mean", "gem+mean"])
def test_save_and_load_keep_the_pooler(pooling, tmp_path):
    """Trained pooler weights come back: a fresh pooler (zeroed scoring layer, default p) would hide a reset."""
    model = build(pooling).eval()
    with torch.no_grad():  # as training leaves them: away from their starting values
        for parameter in model.attnpool.pooler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.pooling == model.config.pooling
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys() and all(torch.equal(saved[k], restored[k]) for k in saved)
    ids, mask = batch([5, 2])
    torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).logits,
                               model(input_ids=ids, attention_mask=mask).logits)


def test_the_pooler_regulariser_is_added_to_the_training_loss_only():
    torch.manual_seed(0)
    options = {"num_heads": 3, "attn_size": 8, "init": "xavier"}
    plain = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="multihead_attention",
                                                           pooling_options=options, num_labels=1)
    penalised = AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="multihead_attention", pooling_options={**options, "penalty": 0.5},
        num_labels=1)
    penalised.load_state_dict(plain.state_dict())
    ids, mask = batch([5, 3, 6])
    labels = torch.tensor([0.1, 0.5, 0.9])
    for model in (plain, penalised):
        model.train()
        model.attnpool.encoder.eval()  # no dropout: the two forwards see the same numbers
        model.head.eval()
    out = penalised(input_ids=ids, attention_mask=mask, labels=labels, return_pooling_weights=True)
    expected = penalised.attnpool.pooler.auxiliary_loss(out.pooling_weights)
    assert expected.item() > 0
    base = plain(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(out.loss, base + expected)
    penalised.eval()  # evaluation losses stay the task's own, comparable across poolers
    torch.testing.assert_close(penalised(input_ids=ids, attention_mask=mask, labels=labels).loss,
                               plain.eval()(input_ids=ids, attention_mask=mask, labels=labels).loss)


def test_the_regulariser_of_a_pooler_inside_weighted_layer_is_kept_and_a_combination_refuses_it():
    """weighted_layer returns its inner pooler's token weights and passes the regulariser on; a combination cannot."""
    inner = {"type": "multihead_attention", "num_heads": 2, "attn_size": 8, "init": "xavier", "penalty": 0.5}
    models = []
    for penalty in (0.5, 0.0):
        torch.manual_seed(0)
        model = AttnPoolForSequenceClassification.from_encoder(
            tiny_config("bert"), pooling="weighted_layer",
            pooling_options={"num_layers": 2, "pooler": {**inner, "penalty": penalty}}, num_labels=1).train()
        model.attnpool.encoder.eval()  # no dropout: the two forwards see the same numbers
        model.head.eval()
        models.append(model)
    penalised, plain = models
    ids, mask = batch([5, 3])
    labels = torch.tensor([0.2, 0.7])
    out = penalised(input_ids=ids, attention_mask=mask, labels=labels, return_pooling_weights=True)
    expected = penalised.attnpool.pooler.token_pooler.auxiliary_loss(out.pooling_weights)
    assert penalised.attnpool.pooler.has_auxiliary_loss and expected.item() > 0
    torch.testing.assert_close(out.loss, plain(input_ids=ids, attention_mask=mask, labels=labels).loss + expected)
    with pytest.raises(ValueError, match=r"^CombinedPooling: the regulariser of multihead_attention \(penalty > 0\) "
                                         "needs its token weights, which a combination does not return"):
        attnpool.build_pooler({"type": "combined", "poolers": [inner, "mean"]}, hidden_size=32)
    assert not attnpool.build_pooler({"type": "combined", "poolers": [{**inner, "penalty": 0}, "mean"]},
                                     hidden_size=32).has_auxiliary_loss


@pytest.mark.parametrize("family", ["bert", "deberta-v3", "roberta"])
def test_attention_on_paired_inputs_starts_with_most_weight_on_the_first_token(family, tmp_path):
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config(family), pooling="attention",
                                                           paired=True).eval()
    assert model.attnpool.pooler.cls_share == 0.9 and model.config.pooling["cls_share"] == 0.9
    ids, mask = batch([6, 3, 5], side="left")
    weights = model(input_ids=ids, attention_mask=mask, return_pooling_weights=True).pooling_weights
    first = mask.long().argmax(dim=1)
    torch.testing.assert_close(weights[torch.arange(3), first], torch.full((3,), 0.9))
    model.save_pretrained(tmp_path)
    assert AttnPoolForSequenceClassification.from_pretrained(tmp_path).attnpool.pooler.cls_share == 0.9


@pytest.mark.parametrize("spelling", ["Attention", "attention_pooling", "attention-pooling"])
def test_the_paired_start_follows_the_registered_name_not_the_spelling(spelling):
    """The registry takes these spellings for the attention pooler; the paired default must follow it."""
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=spelling, paired=True)
    assert model.attnpool.pooler.cls_share == 0.9


@pytest.mark.parametrize(
    ("family", "pooling", "options", "paired"),
    [("bert", "attention", None, False), ("bert", "attention", {"cls_share": 0.0}, True),
     ("bert", "attention", {"cls_share": 0.3}, True), ("gpt2", "attention", None, True),
     ("bert", "multihead_attention", None, True), ("bert", "gated_attention", None, True)],
)
def test_the_first_token_default_leaves_single_texts_explicit_options_decoders_and_other_poolers_alone(
        family, pooling, options, paired):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config(family), pooling=pooling,
                                                           pooling_options=options, paired=paired)
    assert model.attnpool.pooler.cls_share == (options or {}).get("cls_share", 0.0)


def test_a_saved_attention_config_without_cls_share_loads_without_the_prior(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention",
                                                           pooling_options={"cls_share": 0.0})
    model.config.pooling.pop("cls_share")  # as saved before the option existed
    model.save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.attnpool.pooler.cls_share == 0.0
