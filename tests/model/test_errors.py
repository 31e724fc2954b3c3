"""Bad input to the model raises errors that say what is wrong and how to fix it."""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.pooling import AttentionPooling
from model_helpers import tiny_config


def build(**kwargs):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), **kwargs)


def test_missing_encoder_path(tmp_path):
    missing = str(tmp_path / "no-such-encoder")
    with pytest.raises(FileNotFoundError, match=r"encoder .*no-such-encoder': no such folder \(resolved to .*\); give"):
        AttnPoolForSequenceClassification.from_encoder(missing)


def test_unreachable_hub_name_says_how_to_fix():  # tests/conftest.py sets HF_HUB_OFFLINE=1
    with pytest.raises(OSError, match="the encoder 'attnpool-test/does-not-exist' is not a local folder, and the "
                       "Hugging Face Hub cannot be reached"):
        AttnPoolForSequenceClassification.from_encoder("attnpool-test/does-not-exist")


def test_pooler_hidden_size_mismatch():
    with pytest.raises(ValueError, match="built for hidden_size=64, but the encoder's hidden size is 32"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=AttentionPooling(64))
    with pytest.raises(ValueError, match="pooler config has hidden_size=64 but hidden_size=32 was requested"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling={"type": "mean", "hidden_size": 64})


def test_unknown_pooler_name():
    with pytest.raises(ValueError, match="Unknown pooler 'attn'"):
        build(pooling="attn")


def test_checkpoint_folder_without_weights(tmp_path):
    model = build()
    model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"holds no model weights \(\*\.safetensors\); it contains: "
                       r"README\.md, config\.json"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)


def test_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.json: it is not a saved attnpool model folder"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)


def test_pickle_weights_are_never_loaded(tmp_path):
    model = build()
    model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "elsewhere.bin")
    torch.save({}, tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="holds no model weights"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="safetensors only"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path, use_safetensors=False)


def test_model_without_encoder_config():
    with pytest.raises(ValueError, match="AttnPoolConfig has no encoder config; build the model with from_encoder"):
        AttnPoolForSequenceClassification(AttnPoolConfig())


def test_an_encoder_without_a_findable_layer_list_names_every_option_that_needs_one():
    """llrd below 1 needs the layer list too: the message must not speak of freezing alone."""
    from transformers import AutoModel

    from attnpool.model.encoders import encoder_layers

    encoder = AutoModel.from_config(tiny_config("bert"))
    assert len(encoder_layers(encoder)) == encoder.config.num_hidden_layers
    encoder.config.num_hidden_layers += 1  # as an architecture whose blocks are not one list of that length
    with pytest.raises(ValueError, match=r"^cannot find the list of 3 transformer layers in BertModel; what works per "
                                         r"layer \(freeze_layers, reinit_layers, llrd below 1\) is not supported"):
        encoder_layers(encoder)


def test_a_built_encoder_that_would_not_reload_is_refused():
    """Only the encoder's config is saved and AutoModel rebuilds it: a BertForMaskedLM came back as a BertModel.

    (A T5EncoderModel, the first case found, is now refused as an encoder-decoder: test_encoder_decoder_and_labels.)
    """
    from transformers import BertForMaskedLM

    from attnpool.model import AttnPoolForSequenceClassification

    encoder = BertForMaskedLM(tiny_config("bert"))
    with pytest.raises(ValueError, match=r"^from_encoder: a BertForMaskedLM is saved as its config, which AutoModel "
                                         r"builds back as a BertModel: the saved model would not load"):
        AttnPoolForSequenceClassification.from_encoder(encoder)
