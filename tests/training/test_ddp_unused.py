"""DDP looks for parameters without a gradient only where the model has some (ddp_find_unused_parameters).

Checked against a real backward of a tiny model: the parameters that get no gradient are those named, and a default
model (its encoder's own pooler dropped) has none.
"""

from __future__ import annotations

import pytest
import torch

from attnpool.config import TrainConfig
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.model.modeling import keeping_encoder_pooler
from attnpool.pooling.registry import available_poolers
from attnpool.training.adversarial import make_adversary, perturbed
from attnpool.training.arguments import training_arguments, unused_parameters
from model_helpers import tiny_config


def _model(family: str = "bert", pooling: str = "attention", **options) -> AttnPoolForSequenceClassification:
    torch.manual_seed(0)
    config = AttnPoolConfig(encoder=tiny_config(family), pooling={"type": pooling}, num_labels=1,
                            problem_type="regression", **options)
    return AttnPoolForSequenceClassification(config)


def _without_gradient(model, adversarial: str | None = None) -> list[str]:
    """A training step's backward (and, with ``adversarial``, the perturbed one): trainable parameters without grad."""
    ids = torch.randint(4, 99, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    model.train()
    model(input_ids=ids, attention_mask=mask, labels=torch.rand(3)).loss.backward()
    if adversarial is not None:  # the perturbed pass on its own: its direction is the plain pass's gradient
        with perturbed(make_adversary(adversarial, model, 1e-2, 1.0)):
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, attention_mask=mask, labels=torch.rand(3)).loss.backward()
    return sorted(n for n, p in model.named_parameters() if p.requires_grad and p.grad is None)


def _find_unused(cfg_options: dict, model) -> bool:
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], precision="fp32", **cfg_options).validate()
    return training_arguments(cfg, "unused_out", 4, model=model).ddp_find_unused_parameters


def test_a_default_model_has_every_parameter_trained_and_ddp_does_not_look_for_unused_ones(tmp_path,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _model()
    assert unused_parameters(model) == []
    assert _find_unused({}, model) is False
    assert _without_gradient(model) == []
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], precision="fp32").validate()
    assert training_arguments(cfg, tmp_path, 4).ddp_find_unused_parameters is False  # no model: from the config


@pytest.mark.parametrize("options", [{"recurrent": "lstm", "recurrent_layers": 2}, {"pooling_layers": "all"},
                                     {"pooling_layers": [0, -1]}, {"multi_sample_dropout": 3, "head_hidden_size": 8}])
def test_other_options_train_every_parameter(options):
    model = _model(**options)
    assert unused_parameters(model) == [] and _without_gradient(model) == []


@pytest.mark.parametrize("adversarial", ["awp", "fgm"])
def test_adversarial_training_trains_every_parameter(adversarial):
    model = _model()
    assert unused_parameters(model) == [] and _without_gradient(model, adversarial) == []


def test_every_pooler_trains_every_parameter():
    for name in available_poolers():
        model = _model(pooling=name)
        assert (name, unused_parameters(model), _without_gradient(model)) == (name, [], [])


@pytest.mark.parametrize("family", ["bert", "modernbert", "gpt2"])
def test_pooling_layers_below_the_top_leave_the_layers_above_unused_and_ddp_looks_for_them(family, tmp_path,
                                                                                          monkeypatch):
    """A 2-layer encoder pooled at hidden state 1: layer 2 (and a final norm, which reads it) get no gradient."""
    monkeypatch.chdir(tmp_path)
    model = _model(family, pooling_layers=[0, 1])
    unused = _without_gradient(model)
    assert unused and sorted(unused_parameters(model)) == unused
    assert _find_unused({"pooling_layers": [0, 1]}, model) is True
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], precision="fp32", pooling_layers=[0, 1]).validate()
    assert training_arguments(cfg, tmp_path, 4).ddp_find_unused_parameters is True  # no model: from the config


def test_the_encoder_pooler_kept_to_resume_an_old_checkpoint_gets_no_gradient_and_ddp_looks_for_it(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    with keeping_encoder_pooler():
        model = _model()
    unused = _without_gradient(model)
    assert unused == ["attnpool.encoder.pooler.dense.bias", "attnpool.encoder.pooler.dense.weight"]
    assert sorted(unused_parameters(model)) == unused
    assert _find_unused({}, model) is True


def test_frozen_layers_left_out_are_not_unused(tmp_path, monkeypatch):
    """DDP skips parameters that do not train: pooled below frozen layers, nothing is unused."""
    monkeypatch.chdir(tmp_path)
    model = _model(pooling_layers=[1])
    for parameter in model.base_model.encoder.parameters():
        parameter.requires_grad_(False)
    assert unused_parameters(model) == [] and _without_gradient(model) == []
