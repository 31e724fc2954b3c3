"""`attnpool train` under `torchrun`: 2 CPU processes (gloo) against 1 process with the same global batch.

The two runs are built to take every optimizer step on the same rows: 63 rows in 3 folds of 21 (an odd number of
validation rows: 11 + 10 per process, and the Trainer's evaluation batches of 8 do not divide it either), 42 training
rows = 7 global batches of 6 (3 per process x 2 processes vs 6 in one process), a sampler whose order depends on the
global batch only, and no dropout (the two world sizes draw different random streams). They then differ only by
floating-point summation order, so their predictions are compared to 1e-4 (measured: 9e-8). The bugs this guards
against moved them by far more: a loss scaled by the number of processes by 0.014, a data order that depends on the
per-process batch (transformers' own length-grouped sampler) by 0.06.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from attnpool.cli import main
from attnpool.training.distributed import shard, unshard
from model_helpers import tiny_config, tiny_tokenizer, write_toy_csv

ROWS, FOLDS, PER_DEVICE_BATCH, PROCESSES = 63, 3, 3, 2
RECIPE = ["--text-cols", "first", "second", "--label", "label", "--folds", str(FOLDS), "--epochs", "2",
          "--eval-batch-size", "8", "--lr", "1e-3", "--head-lr", "3e-3", "--max-length", "16", "--head-dropout", "0",
          "--pooling-opt", "attn_size=8", "--precision", "fp32"]
TOLERANCE = 1e-4  # see the module docstring

gloo = pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                          reason="needs torch.distributed with the gloo backend")


@pytest.mark.parametrize(("rows", "count"), [(7, 2), (21, 2), (1, 3), (0, 2), (10, 4)])
def test_shards_hold_each_row_once_and_unshard_restores_the_order(rows, count):
    values = np.arange(rows, dtype=np.float32)[:, None] * np.array([[1.0, -1.0]], dtype=np.float32)
    parts = [values[shard(np.arange(rows), i, count)] for i in range(count)]
    sizes = [len(p) for p in parts]
    assert sum(sizes) == rows and max(sizes) - min(sizes) <= 1
    np.testing.assert_array_equal(unshard(parts), values)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from transformers import AutoModel

    folder = tmp_path_factory.mktemp("distributed")
    config = tiny_config("bert")
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder / "encoder")
    tiny_tokenizer().save_pretrained(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=ROWS, seed=0)
    common = ["train", "--train-file", str(folder / "train.csv"), "--model", str(folder / "encoder"), *RECIPE]
    # CPU for both, also on a GPU machine: the comparison is about the number of processes, not the device.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(PROCESSES),
               "-m", "attnpool.cli", *common, "--batch-size", str(PER_DEVICE_BATCH),
               "--output-dir", str(folder / "two")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=folder)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}\n{proc.stderr[-4000:]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACCELERATE_USE_CPU", "true")
        code = main([*common, "--batch-size", str(PER_DEVICE_BATCH * PROCESSES), "--output-dir",
                     str(folder / "one")])
    assert code == 0
    return folder / "one", folder / "two"


def _files(run_dir):
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())


@gloo
def test_two_processes_write_one_set_of_outputs(runs):
    one, two = runs
    assert _files(two) == _files(one), "the same files as one process: no duplicate, no leftover temporary"
    assert not [f for f in _files(two) if "checkpoint" in f or f.split("/")[-1].startswith(".")]
    log = (two / "train.log").read_text()

    def own(text):  # attnpool's lines: a library's timing-dependent warning (e.g. checkpoint mtimes) may differ
        return [line for line in text.splitlines() if " attnpool." in line]

    assert len(own(log)) == len(own((one / "train.log").read_text())) > 0
    assert all(log.count(f"fold {k} ({k + 1} of {FOLDS})") == 1 for k in range(FOLDS)), "logged by one process"
    metrics = json.loads((two / "metrics.json").read_text())
    assert metrics["complete"] and [f["processes"] for f in metrics["folds"]] == [PROCESSES] * FOLDS
    for fold in metrics["folds"]:
        assert fold["train_seconds"] > 0 and fold["peak_memory_bytes"] > 0 and fold["device"] == "cpu"


@gloo
def test_every_row_is_predicted_once_at_uneven_splits(runs):
    _, two = runs
    oof = pd.read_csv(two / "oof.csv")
    assert sorted(oof["row"]) == list(range(ROWS))
    assert oof.groupby("fold").size().tolist() == [ROWS // FOLDS] * FOLDS  # 21 each: 11 + 10 per process


@gloo
def test_trainer_evaluation_saw_exactly_the_validation_rows(runs):
    # The best checkpoint's evaluation (Trainer, gather_for_metrics over padded batches) and the fold's metrics
    # (our sharded prediction, gathered) score the same weights on the same rows: a repeated or missing row in either
    # gather would move the Pearson correlation far more than 1e-5.
    _, two = runs
    for fold in range(FOLDS):
        metrics = json.loads((two / f"fold_{fold}" / "metrics.json").read_text())
        history = json.loads((two / f"fold_{fold}" / "log_history.json").read_text())
        step = int(metrics["best_checkpoint"].split("-")[1])
        evaluation = next(h for h in history if h.get("step") == step and "eval_pearson" in h)
        assert evaluation["eval_pearson"] == pytest.approx(metrics["pearson"], abs=1e-5)


@gloo
def test_two_processes_match_one_process_with_the_same_global_batch(runs):
    one, two = runs
    oof_one, oof_two = pd.read_csv(one / "oof.csv"), pd.read_csv(two / "oof.csv")
    np.testing.assert_allclose(oof_two["prediction"], oof_one["prediction"], atol=TOLERANCE)
    metrics_one = json.loads((one / "metrics.json").read_text())
    metrics_two = json.loads((two / "metrics.json").read_text())
    for a, b in zip(metrics_one["folds"], metrics_two["folds"], strict=True):
        assert a["best_checkpoint"] == b["best_checkpoint"]
        assert b["pearson"] == pytest.approx(a["pearson"], abs=TOLERANCE)
    for fold in range(FOLDS):  # the training loss logged at every step: averaged over processes, not summed
        losses = [[h["loss"] for h in json.loads((run / f"fold_{fold}" / "log_history.json").read_text())
                   if "loss" in h] for run in runs]
        np.testing.assert_allclose(losses[1], losses[0], atol=TOLERANCE)


class ShardedTrainer:
    """Stands in for a Trainer under FSDP (no FSDP on CPUs): save_model writes what the real one writes."""

    is_fsdp_enabled, is_deepspeed_enabled = True, False

    def __init__(self, model, state_dict_type="StateDictType.FULL_STATE_DICT"):
        from types import SimpleNamespace

        self.model = model
        plugin = SimpleNamespace(state_dict_type=state_dict_type)
        self.accelerator = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin))

    def save_model(self, output_dir):
        self.model.save_pretrained(output_dir)
        torch.save({"args": 1}, os.path.join(output_dir, "training_args.bin"))


def test_sharded_weights_are_saved_as_one_loadable_folder_without_pickles(tmp_path):
    from attnpool.model import AttnPoolForSequenceClassification
    from attnpool.training.fold import _save_fold_model

    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="mean")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stale.txt").write_text("from an earlier attempt")
    _save_fold_model(ShardedTrainer(model), tiny_tokenizer(), tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "the staging folder was moved into place"
    files = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert "model.safetensors" in files and "tokenizer.json" in files
    assert "training_args.bin" not in files and "stale.txt" not in files
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "model")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value)


def test_fsdp_without_a_full_state_dict_is_refused_before_training():
    from attnpool.training.fold import _check_engine

    _check_engine(ShardedTrainer(None))
    with pytest.raises(ValueError, match="FULL_STATE_DICT"):
        _check_engine(ShardedTrainer(None, state_dict_type="StateDictType.SHARDED_STATE_DICT"))
