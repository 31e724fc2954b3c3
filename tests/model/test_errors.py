"""Bad input to the model raises errors that say what is wrong and how to fix it."""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.pooling import AttentionPooling
from model_helpers import batch, tiny_config


def build(**kwargs):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), **kwargs)


def test_missing_encoder_path(tmp_path):
    missing = str(tmp_path / "no-such-encoder")
    with pytest.raises(FileNotFoundError, match="encoder path .*no-such-encoder' does not exist; give a folder"):
        AttnPoolForSequenceClassification.from_encoder(missing)


def test_unreachable_hub_name_says_how_to_fix():  # tests/conftest.py sets HF_HUB_OFFLINE=1
    with pytest.raises(OSError, match="could not load the encoder 'attnpool-test/does-not-exist'"):
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
                       r"config\.json"):
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


@pytest.mark.parametrize(
    ("kwargs", "labels", "message"),
    [
        ({}, torch.rand(3, 2), r"labels of shape \(3, 2\) .* problem_type='regression', num_labels=1: expected "
                               r"shape \(3,\) or \(3, 1\)"),
        ({"num_labels": 3}, torch.tensor([0.5, 1.0, 2.0]), "problem_type='multi_label_classification', "
                                                          r"num_labels=3: expected shape \(3, 3\); class indices"),
        ({"num_labels": 3, "problem_type": "single_label_classification"}, torch.tensor([0, 3, 1]),
         r"class indices \[3\] are outside \[0, 2\]"),
        ({"num_labels": 3, "problem_type": "single_label_classification"}, torch.rand(3, 3),
         "expected integer class indices of shape"),
        ({}, torch.tensor([0.5, float("nan"), 1.0]), r"non-finite labels in batch rows \[1\]"),
        ({"output_activation": "sigmoid"}, torch.tensor([0.5, 2.0, 1.0]), r"BCE needs targets in \[0, 1\]"),
    ],
)
def test_labels_that_do_not_fit_the_problem_type(kwargs, labels, message):
    model = build(**kwargs)
    ids, mask = batch([3, 4, 5])
    with pytest.raises(ValueError, match=message):
        model(ids, mask, labels=labels)


def test_config_validation():
    with pytest.raises(ValueError, match="pooling_layers must be 'last', 'all' or a list of layer indices, got 'top'"):
        AttnPoolConfig(encoder=tiny_config("bert"), pooling_layers="top")
    with pytest.raises(ValueError, match="output_activation must be one of"):
        AttnPoolConfig(encoder=tiny_config("bert"), output_activation="tanh")
    with pytest.raises(ValueError, match="an encoder config dict needs its 'model_type'"):
        AttnPoolConfig(encoder={"hidden_size": 8})
    with pytest.raises(ValueError, match="AttnPoolConfig has no encoder config"):
        AttnPoolForSequenceClassification(AttnPoolConfig())
