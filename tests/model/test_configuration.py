"""``AttnPoolConfig``: validation of its options, the encoder's hidden size, and the encoder given as a dict."""

from __future__ import annotations

import re

import pytest
from transformers import BertConfig, GPT2Config, PretrainedConfig

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.model.configuration import encoder_hidden_size
from attnpool.tasks import LOSSES
from model_helpers import tiny_config


class NoWidthConfig(PretrainedConfig):
    model_type = "no_width"


def test_config_validation():
    with pytest.raises(ValueError, match="pooling_layers must be 'last', 'all' or a list of layer indices, got 'top'"):
        AttnPoolConfig(encoder=tiny_config("bert"), pooling_layers="top")
    with pytest.raises(ValueError, match="output_activation must be one of"):
        AttnPoolConfig(encoder=tiny_config("bert"), output_activation="tanh")
    with pytest.raises(ValueError, match="^output_activation 'sigmoid' is for regression targets in .*, got "
                                         "problem_type 'multi_label_classification'"):
        AttnPoolConfig(encoder=tiny_config("bert"), output_activation="sigmoid", num_labels=3,
                       problem_type="multi_label_classification")
    # several outputs and no problem_type: classes at the first batch, whose softmax would squash the sigmoids
    with pytest.raises(ValueError, match="with num_labels=3 .*pass problem_type='regression' for several regression"):
        AttnPoolConfig(encoder=tiny_config("bert"), output_activation="sigmoid", num_labels=3)
    AttnPoolConfig(encoder=tiny_config("bert"), output_activation="sigmoid", num_labels=3, problem_type="regression")
    with pytest.raises(ValueError, match="an encoder config dict needs its 'model_type'"):
        AttnPoolConfig(encoder={"hidden_size": 8})
    with pytest.raises(ValueError, match=r"head_dropout must be in \[0, 1\), got 1.0"):
        AttnPoolConfig(encoder=tiny_config("bert"), head_dropout=1.0)
    with pytest.raises(ValueError, match="multi_sample_dropout must be >= 1, got 0"):
        AttnPoolConfig(encoder=tiny_config("bert"), multi_sample_dropout=0)


@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_of_the_tasks_module_is_accepted(loss):
    assert AttnPoolConfig(encoder=tiny_config("bert"), loss=loss).loss == loss


def test_unknown_loss():
    with pytest.raises(ValueError, match=r"loss must be one of \('mse', 'bce', 'cross_entropy', 'pearson'\) or None, "
                                         "got 'hinge'"):
        AttnPoolConfig(encoder=tiny_config("bert"), loss="hinge")


def test_hidden_size_whatever_the_encoder_config_calls_it():
    assert encoder_hidden_size(BertConfig(hidden_size=24)) == 24
    assert encoder_hidden_size(GPT2Config(n_embd=40)) == 40
    assert AttnPoolConfig(encoder=GPT2Config(n_embd=40)).hidden_size == 40
    with pytest.raises(ValueError, match="cannot find the hidden size of encoder config NoWidthConfig: it has none "
                                         "of hidden_size, d_model, n_embd, dim"):
        encoder_hidden_size(NoWidthConfig())
    with pytest.raises(ValueError, match="AttnPoolConfig has no encoder config; pass encoder="):
        _ = AttnPoolConfig().hidden_size


def test_encoder_given_as_a_dict_or_a_string_pooling():
    config = AttnPoolConfig(encoder=tiny_config("bert").to_dict(), pooling="mean", pooling_layers=(-1, -2))
    assert isinstance(config.encoder, BertConfig) and config.hidden_size == 32
    assert config.pooling == {"type": "mean"}
    assert config.pooling_layers == [-1, -2]


def test_from_encoder_names_its_labels_with_label2id_alone():
    """``label2id`` alone gave a 1-output regression model: the names dropped, class labels trained with MSE."""
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), label2id={"a": 0, "b": 1, "c": 2})
    assert model.config.num_labels == 3 and model.config.problem_type is None
    assert model.config.id2label == {0: "a", 1: "b", 2: "c"} and model.config.label2id == {"a": 0, "b": 1, "c": 2}
    assert model.head.out.out_features == 3


@pytest.mark.parametrize(("given", "refused"), [
    ({"num_labels": 2, "label2id": {"a": 0, "b": 1, "c": 2}}, "num_labels=2 but 3 labels are named"),
    ({"num_labels": 3, "id2label": {0: "a", 1: "b"}}, "num_labels=3 but 2 labels are named"),
    ({"id2label": {0: "a", 1: "b"}, "label2id": {"a": 1, "b": 0}}, "is not the inverse of id2label"),
    ({"label2id": {"a": 0, "b": 2}}, "must give each label its own id, 0 to 1"),
    ({"label2id": {"a": 0, "b": 0}}, "must give each label its own id, 0 to 1"),
])
def test_from_encoder_refuses_labels_that_disagree(given, refused):
    with pytest.raises(ValueError, match=f"from_encoder: .*{re.escape(refused)}"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), **given)
