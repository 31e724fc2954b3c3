"""How the models use their config as a library user meets it: output flags, a foreign folder, a shared config."""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification, AttnPoolModel
from model_helpers import batch, save_tiny_encoder, tiny_config


def build(encoder=None, **kwargs):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(encoder or tiny_config("bert"), **kwargs)


@pytest.mark.parametrize("cls", [AttnPoolForSequenceClassification, AttnPoolModel])
def test_output_flags_default_to_the_config(cls, tmp_path):
    """``from_pretrained(path, output_hidden_states=True)`` returns them, as transformers models do."""
    build().save_pretrained(tmp_path)
    model = cls.from_pretrained(tmp_path, output_hidden_states=True, output_attentions=True,
                                attn_implementation="eager").eval()
    assert model.config.output_hidden_states and model.config.output_attentions
    ids, mask = batch([5, 3])
    out = model(ids, mask)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2  # embeddings + 2 layers; 2 layers' maps
    assert out.attentions[0].shape == (2, 2, 5, 5)
    explicit = model(ids, mask, output_hidden_states=False, output_attentions=False)  # an argument wins
    assert explicit.hidden_states is None and explicit.attentions is None
    plain = cls.from_pretrained(tmp_path).eval()(ids, mask)
    assert plain.hidden_states is None and plain.attentions is None


@pytest.mark.parametrize("load", [AttnPoolForSequenceClassification.from_pretrained, AttnPoolModel.from_pretrained,
                                  AttnPoolConfig.from_pretrained], ids=["classifier", "model", "config"])
def test_from_pretrained_on_an_encoder_folder_points_to_from_encoder(load, tmp_path):
    folder = save_tiny_encoder(tmp_path / "encoder")
    with pytest.raises(ValueError, match=r"is not a saved attnpool model \(its config\.json has model_type 'bert'") \
            as err:
        load(folder)
    assert f"AttnPoolForSequenceClassification.from_encoder({folder!r}, ...)" in str(err.value)
    model = AttnPoolForSequenceClassification.from_encoder(folder, num_labels=2)  # what the message says works
    assert model.config.num_labels == 2


def test_from_encoder_leaves_the_callers_config_alone(tmp_path):
    """Models built from one config object do not share it: one's eager switch or resize does not reach another."""
    config = tiny_config("bert")
    before = config.to_dict()
    first = build(config)
    second = build(config, pooling="ditto")  # reads attention maps: switches its encoder to eager attention
    assert first.config.encoder is not config and second.config.encoder is not first.config.encoder
    assert second.attnpool.encoder.config._attn_implementation == "eager"
    assert first.attnpool.encoder.config._attn_implementation != "eager"
    second.resize_token_embeddings(120)
    assert second.config.encoder.vocab_size == 120
    assert first.config.encoder.vocab_size == first.get_input_embeddings().weight.shape[0] == 99
    assert config.to_dict() == before
    first.save_pretrained(tmp_path)
    ids, mask = batch([5, 3])
    with torch.no_grad():
        assert torch.equal(AttnPoolForSequenceClassification.from_pretrained(tmp_path).eval()(ids, mask).logits,
                           first.eval()(ids, mask).logits)
