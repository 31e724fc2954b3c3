"""Pooling-weight entropy and special-token share: the closed forms, the hooks, and what a run records."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnpool.cli import main
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.training.optim import parameter_groups
from attnpool.training.pooling_stats import PoolingMonitor, normalized_entropy
from model_helpers import save_tiny_encoder, tiny_config, write_toy_csv


def test_entropy_is_one_for_uniform_weights_and_zero_for_one_token():
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    uniform = mask.float() / mask.float().sum(dim=1, keepdim=True)
    entropy, counted = normalized_entropy(uniform, mask)
    assert counted.tolist() == [True, True, False]  # a single token says nothing about spread
    torch.testing.assert_close(entropy, torch.tensor([1.0, 1.0, 0.0]))
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0, 0, 0, 0]])
    torch.testing.assert_close(normalized_entropy(one_hot, mask)[0], torch.zeros(3))


def test_entropy_matches_the_definition_and_averages_heads():
    w = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)) / math.log(3)
    assert normalized_entropy(w, mask)[0].item() == pytest.approx(expected, rel=1e-6)
    heads = torch.stack([w[0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0])]).unsqueeze(0)  # (1, 2, 4)
    assert normalized_entropy(heads, mask)[0].item() == pytest.approx((expected + 1.0) / 2, rel=1e-6)


def _model(pooling="attention", **options):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooling,
                                                          pooling_options=options, num_labels=1)


def test_monitor_reports_mean_pooling_and_the_special_share_exactly():
    model = _model().eval()  # init="mean": uniform weights
    monitor = PoolingMonitor(model, special_ids=[2, 3])
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 10, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    stats = monitor.summary(training=False)
    assert stats["pool_entropy"] == pytest.approx(1.0)
    assert stats["pool_special_share"] == pytest.approx((2 / 5 + 2 / 3) / 2, abs=1e-4)
    assert monitor.summary(training=False) == {}  # reset by the read
    assert monitor.summary(training=True) == {}  # training forwards are kept apart
    monitor.remove()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert monitor.summary(training=False) == {}


def test_monitor_sees_a_collapsed_pooler():
    model = _model(init="xavier").eval()
    with torch.no_grad():
        model.attnpool.pooler.score.weight.mul_(1e4)  # scores so far apart that one token takes all
    monitor = PoolingMonitor(model)
    ids = torch.randint(4, 90, (4, 12))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert monitor.summary(training=False)["pool_entropy"] < 0.05


def test_monitor_records_nothing_for_poolers_without_weights():
    model = _model("max")
    monitor = PoolingMonitor(model, [2])
    model(input_ids=torch.randint(4, 90, (2, 6)))
    assert not monitor.active and monitor.summary(training=True) == {}


def test_monitor_refuses_other_models():
    with pytest.raises(ValueError, match="PoolingMonitor needs an attnpool model, got Linear"):
        PoolingMonitor(torch.nn.Linear(2, 2))


def test_pooler_gets_its_own_learning_rate():
    model = _model()
    groups = parameter_groups(model, lr=2e-5, head_lr=1e-3, weight_decay=0.01, pooler_lr=1e-4)
    rate_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert rate_of[id(named["attnpool.pooler.proj.weight"])] == 1e-4
    assert rate_of[id(named["head.out.weight"])] == 1e-3
    assert rate_of[id(named["attnpool.encoder.embeddings.word_embeddings.weight"])] == 2e-5
    legacy = parameter_groups(model, lr=2e-5, head_lr=1e-3, weight_decay=0.01)  # None: the head's rate
    assert {g["lr"] for g in legacy} == {2e-5, 1e-3}


def test_a_run_logs_entropy_while_training_and_records_it_per_fold(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=32, seed=0)
    out = tmp_path / "run"
    code = main(["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second",
                 "--folds", "2", "--only-folds", "0", "--model", encoder, "--output-dir", str(out), "--epochs", "1",
                 "--batch-size", "4", "--max-length", "16", "--pooler-lr", "1e-4",
                 "--pooling-opt", "cls_share=0"])
    assert code in (0, 3)
    history = json.loads((out / "fold_0" / "log_history.json").read_text())
    train_logs = [h for h in history if "loss" in h]
    eval_logs = [h for h in history if "eval_loss" in h]
    assert train_logs and all(0.0 <= h["pool_entropy"] <= 1.0 for h in train_logs)
    assert all(0.0 < h["pool_special_share"] < 1.0 for h in train_logs)
    assert eval_logs and all(0.0 <= h["eval_pool_entropy"] <= 1.0 for h in eval_logs)
    metrics = json.loads((out / "fold_0" / "metrics.json").read_text())
    assert 0.9 < metrics["pooling_entropy"] <= 1.0  # one short epoch at 1e-4 from a uniform start
    assert 0.0 < metrics["pooling_special_share"] < 1.0
    assert "pooling weights on validation: normalised entropy" in (out / "train.log").read_text()
    config = (out / "config.yaml").read_text()
    assert "pooler_lr: 0.0001" in config
