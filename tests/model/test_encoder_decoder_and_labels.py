"""Review fixes: encoder-decoders refused, load-time label options checked, clearer errors (model layer)."""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers
from transformers import AlbertConfig, BartConfig, BertForMaskedLM, BertModel, T5Config, T5EncoderModel

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification, AttnPoolModel
from model_helpers import batch, save_tiny_encoder, tiny_config

T5 = dict(vocab_size=99, d_model=32, d_kv=16, d_ff=37, num_layers=2, num_heads=2)
BART = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37)
ENCODER_ONLY = "which attnpool does not support: .*Use an encoder-only model, e.g. bert, roberta, deberta-v2"


@pytest.mark.parametrize(("config", "model_type"), [(T5Config(**T5), "t5"), (BartConfig(**BART), "bart")])
def test_an_encoder_decoder_config_is_refused(config, model_type):
    """T5 failed at the first forward ("exactly one of input_ids"), BART pooled its decoder's output."""
    with pytest.raises(ValueError, match=f"from_encoder: the {type(config).__name__} given is an encoder-decoder model "
                                         f"\\(model_type '{model_type}'\\).*{ENCODER_ONLY}"):
        AttnPoolForSequenceClassification.from_encoder(config)
    with pytest.raises(ValueError, match=f"AttnPoolModel: the encoder config is an encoder-decoder.*{ENCODER_ONLY}"):
        AttnPoolModel(AttnPoolConfig(encoder=config))


def test_a_t5_encoder_folder_or_model_is_refused(tmp_path):
    """A T5EncoderModel's folder (is_encoder_decoder false in its config.json) loaded as a T5Model with a decoder."""
    torch.manual_seed(0)
    encoder = T5EncoderModel(T5Config(**T5))
    encoder.save_pretrained(tmp_path / "t5")
    assert json.loads((tmp_path / "t5" / "config.json").read_text())["is_encoder_decoder"] is False
    with pytest.raises(ValueError, match=f"from_encoder: '{re.escape(str(tmp_path / 't5'))}' is an encoder-decoder "
                                         f"model \\(model_type 't5'\\).*{ENCODER_ONLY}"):
        AttnPoolForSequenceClassification.from_encoder(tmp_path / "t5")
    with pytest.raises(ValueError, match=f"the T5EncoderModel given is an encoder-decoder.*{ENCODER_ONLY}"):
        AttnPoolForSequenceClassification.from_encoder(encoder)


def test_a_built_encoder_of_another_class_is_told_the_class_to_pass():
    """The advice was "its name, folder or config", which for a T5EncoderModel built a T5Model that failed."""
    with pytest.raises(ValueError, match="a BertForMaskedLM is saved as its config.*Pass a BertModel \\(e.g. the "
                                         "model's .base_model\\), or the encoder's name, folder or config"):
        AttnPoolForSequenceClassification.from_encoder(BertForMaskedLM(tiny_config("bert")))
    assert isinstance(AttnPoolModel.from_encoder(BertModel(tiny_config("bert"))).encoder, BertModel)


def test_gradient_checkpointing_on_an_encoder_without_it_names_the_encoder():
    """transformers' error blamed AttnPoolForSequenceClassification and asked its developers to add the support."""
    config = AlbertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=37, embedding_size=16)
    model = AttnPoolForSequenceClassification.from_encoder(config)
    with pytest.raises(ValueError, match="the encoder AlbertModel does not support gradient checkpointing: turn it "
                                         "off \\(gradient_checkpointing=False, or leave out --gradient-checkpointing"):
        model.activation_checkpointing_enable()
    supported = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"))
    supported.activation_checkpointing_enable()
    assert supported.attnpool.encoder.encoder.layer[0].gradient_checkpointing


def test_labels_of_minus_100_are_refused_as_unsupported_ignored_labels():
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3)
    with pytest.raises(ValueError, match="class indices \\[-100\\] are outside \\[0, 2\\]; check label2id; -100 marks "
                                         "ignored labels in transformers, which attnpool does not support: drop "
                                         "those rows"):
        model(*batch([5, 3, 4]), labels=torch.tensor([0, -100, 2]))
    with pytest.raises(ValueError, match="class indices \\[3\\] are outside \\[0, 2\\]; check label2id$"):
        model(*batch([5, 3, 4]), labels=torch.tensor([0, 3, 2]))


def test_labels_given_to_the_bare_model_are_refused():
    """AttnPoolModel passed them to the encoder, which dropped them: no loss, silently."""
    model = AttnPoolModel.from_encoder(tiny_config("bert"))
    with pytest.raises(TypeError, match="AttnPoolModel.forward got labels, but it computes no loss .*use "
                                        "AttnPoolForSequenceClassification for a loss"):
        model(*batch([5, 3]), labels=torch.tensor([0.5, 1.0]))


@pytest.fixture
def one_output(tmp_path):
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path / "one")
    return tmp_path / "one"


def test_id2label_read_from_json_gets_integer_ids_at_load(one_output):
    """String ids stayed strings: the text-classification pipeline raised KeyError 1."""
    model = AttnPoolForSequenceClassification.from_pretrained(
        one_output, id2label=json.loads('{"0": "neg", "1": "pos"}'), ignore_mismatched_sizes=True)
    assert model.config.id2label == {0: "neg", 1: "pos"} and model.config.label2id == {"neg": 0, "pos": 1}
    assert model.config.num_labels == 2 and model.head.out.out_features == 2


def test_label2id_alone_names_the_new_head_at_load(one_output):
    """It was ignored: one output, a regression, as from_encoder does not do."""
    model = AttnPoolForSequenceClassification.from_pretrained(one_output, label2id={"neg": 0, "pos": 1},
                                                              ignore_mismatched_sizes=True)
    assert (model.config.num_labels, model.config.problem_type) == (2, None)
    assert model.config.id2label == {0: "neg", 1: "pos"} and model.head.out.out_features == 2


@pytest.mark.parametrize(("given", "refused"), [
    ({"num_labels": 3, "id2label": {0: "a", 1: "b"}}, "num_labels=3 but 2 labels are named"),
    ({"id2label": {1: "a", 2: "b"}}, "id2label={1: 'a', 2: 'b'} must name each output once, with ids 0 to 1"),
    ({"label2id": {"a": 0, "b": 2}}, "must give each label its own id, 0 to 1"),
    ({"id2label": {"x": "a"}}, "id2label={'x': 'a'} must map integer ids"),
])
def test_label_options_that_disagree_are_refused_at_load(one_output, given, refused):
    """num_labels=3 with 2 names silently gave 2 outputs; ids 1..2 gave a pipeline KeyError 0."""
    with pytest.raises(ValueError, match=f"from_pretrained: .*{re.escape(refused)}"):
        AttnPoolForSequenceClassification.from_pretrained(one_output, **given, ignore_mismatched_sizes=True)


def test_from_encoder_refuses_ids_that_are_not_0_to_n_minus_1():
    """label_options' docstring said so, but id2label={1: 'a', 2: 'b'} was accepted: pipelines then failed."""
    with pytest.raises(ValueError, match=re.escape("from_encoder: id2label={1: 'a', 2: 'b'} must name each output "
                                                   "once, with ids 0 to 1")):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), id2label={1: "a", 2: "b"})
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), id2label={"0": "a", "1": "b"})
    assert model.config.id2label == {0: "a", 1: "b"} and model.config.num_labels == 2


def test_the_encoders_config_is_read_with_the_remote_code_options_given(tmp_path, monkeypatch):
    """The config read first (to refuse an attnpool model or an encoder-decoder before any weight loads) left out
    encoder_kwargs' trust_remote_code: a custom-code encoder (an auto_map in its config) was refused."""
    folder = save_tiny_encoder(tmp_path / "enc")
    seen = []
    read = transformers.AutoConfig.from_pretrained
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda name, **kw: seen.append(kw) or read(name, **kw))
    AttnPoolForSequenceClassification.from_encoder(folder, encoder_kwargs={"trust_remote_code": True})
    assert seen and seen[0].get("trust_remote_code") is True
