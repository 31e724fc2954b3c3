"""parameter_groups: layer-wise learning-rate decay, the pooler's and the head's rates, weight decay, frozen params."""

from __future__ import annotations

import pytest
import torch

from attnpool.model import AttnPoolForSequenceClassification
from attnpool.training.optim import build_optimizer, parameter_groups
from model_helpers import tiny_config


@pytest.fixture
def model():
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=1)


def rates(model, groups):
    """Parameter name -> (learning rate, weight decay) as the groups assign them."""
    by_id = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters() if id(p) in by_id}


def test_llrd_gives_each_layer_lr_times_llrd_to_its_depth(model):
    groups = parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, llrd=0.5, pooler_lr=5e-3)
    got = rates(model, groups)
    layers = model.config.encoder.num_hidden_layers
    for name, (rate, _) in got.items():
        if ".encoder.layer." in name:
            index = int(name.split(".encoder.layer.")[1].split(".")[0])
            assert rate == pytest.approx(1e-4 * 0.5 ** (layers - 1 - index)), name  # the top layer gets lr
        elif ".embeddings." in name:
            assert rate == pytest.approx(1e-4 * 0.5**layers), name  # below the first layer
        elif name.startswith("attnpool.pooler."):
            assert rate == 5e-3, name
        elif name.startswith("head."):
            assert rate == 1e-3, name
    assert any(name.startswith("attnpool.pooler.") for name in got) and any(name.startswith("head.") for name in got)


def test_no_weight_decay_for_biases_and_norms(model):
    got = rates(model, parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01))
    for name, (_, decay) in got.items():
        expected = 0.0 if name.endswith("bias") or "LayerNorm" in name or name.endswith("norm.weight") else 0.01
        assert decay == expected, name


def test_without_llrd_every_encoder_parameter_gets_lr_and_the_pooler_the_head_rate(model):
    got = rates(model, parameter_groups(model, lr=2e-5, head_lr=1e-3, weight_decay=0.0))
    assert {r for n, (r, _) in got.items() if n.startswith("attnpool.encoder.")} == {2e-5}
    assert {r for n, (r, _) in got.items() if not n.startswith("attnpool.encoder.")} == {1e-3}


def test_frozen_parameters_are_left_out_and_every_trainable_one_is_in_exactly_one_group(model):
    model.freeze_embeddings()
    groups = parameter_groups(model, lr=1e-4, head_lr=1e-3, weight_decay=0.01, llrd=0.8)
    ids = [id(p) for g in groups for p in g["params"]]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    assert sorted(ids) == sorted(trainable) and len(ids) == len(set(ids))
    assert not any(id(p) in ids for p in model.attnpool.encoder.embeddings.parameters())
    optimizer = build_optimizer(groups)
    assert isinstance(optimizer, torch.optim.AdamW) and len(optimizer.param_groups) == len(groups)
