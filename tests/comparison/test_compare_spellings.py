"""compare's checks before anything trains: one pooler under two spellings, seeds counted past 2**32 - 1, no wait4."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from attnpool import api
from attnpool.comparison import PoolerSpec, runner
from attnpool.comparison.seeds import seed_list
from attnpool.config import TrainConfig
from attnpool.runs import Run
from attnpool.training.fold import fold_seed
from model_helpers import write_toy_csv


class Trained(Exception):
    """Raised by the stand-in for the training: what would have trained."""


@pytest.fixture
def data(tmp_path):
    """The data options of a recipe that would train (nothing reads the file before training)."""
    write_toy_csv(tmp_path / "train.csv", n=8, seed=0)
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"]}


@pytest.fixture
def would_train(monkeypatch):
    def train_missing(out, cfg, specs, seeds):
        raise Trained([(spec.label, spec.pooling) for spec in specs], seeds)

    monkeypatch.setattr(runner, "_train_missing", train_missing)


def test_a_pooler_equal_to_the_baseline_under_another_spelling_is_the_baseline(tmp_path, data, would_train):
    """--poolings mean_pooling attention with baseline mean trained mean twice, and a row compared it with itself."""
    with pytest.raises(Trained) as trained:
        api.compare(poolings=["mean_pooling", "attention"], baseline="mean", seeds=1, output_dir=tmp_path / "c",
                    **data)
    assert trained.value.args[0] == [("mean_pooling", "mean_pooling"), ("attention", "attention")]
    with pytest.raises(Trained) as trained:  # as the baseline listed by its own name: where it is listed
        api.compare(poolings=["max", "Mean-Pooling"], seeds=1, output_dir=tmp_path / "d", **data)
    assert [label for label, _ in trained.value.args[0]] == ["max", "Mean-Pooling"]
    with pytest.raises(ValueError, match="at least one pooler besides the baseline"):
        api.compare(poolings=["MEAN"], seeds=1, output_dir=tmp_path / "e", **data)


@pytest.mark.parametrize("poolings, first, second", [
    (["Attention", "attention"], "Attention", "attention"),
    (["attention", "attention:"], "attention", "attention:"),
    (["attention:attn_size=8", "attention_pooling: attn_size=8"], "attention:attn_size=8",
     "attention_pooling: attn_size=8"),
])
def test_one_pooler_under_two_spellings_is_refused(tmp_path, data, would_train, poolings, first, second):
    """Attention and attention were both trained (and shared a run folder on a case-insensitive file system)."""
    message = f"--poolings names one pooler twice, as {first} and as {second} (the same pooler and options)"
    with pytest.raises(ValueError, match="^" + re.escape(message) + ": give each pooler once"):
        api.compare(poolings=poolings, seeds=1, output_dir=tmp_path / "c", **data)
    with pytest.raises(ValueError, match=r"^--poolings names max more than once"):
        api.compare(poolings=["max", "max"], seeds=1, output_dir=tmp_path / "c", **data)
    assert not (tmp_path / "c").exists()


def test_combinations_of_other_poolers_are_other_contenders(tmp_path, data, would_train):
    """Every combination was one class (the combined pooler): attention+mean and max+mean were refused as one."""
    with pytest.raises(Trained) as trained:
        api.compare(poolings=["attention+mean", "max+mean"], seeds=1, output_dir=tmp_path / "c", **data)
    assert [label for label, _ in trained.value.args[0]] == ["mean", "attention+mean", "max+mean"]
    with pytest.raises(ValueError, match=r"^--poolings names one pooler twice, as max\+mean and as Max\+Mean_Pooling:"):
        api.compare(poolings=["max+mean", "Max+Mean_Pooling:"], seeds=1, output_dir=tmp_path / "d", **data)


def test_specs_whose_folders_differ_only_in_case_are_refused(tmp_path, data, would_train):
    """Their runs share one folder on macOS and Windows."""
    with pytest.raises(ValueError, match=r"would share the run folder .*differ only in punctuation or case"):
        api.compare(poolings=['combined:poolers=["Mean","max"]', 'combined:poolers=["mean","max"]'], seeds=1,
                    output_dir=tmp_path / "c", **data)


def test_a_count_of_seeds_past_2_32_is_refused_before_anything_trains(tmp_path, data, would_train):
    """--seed 4294967295 --seeds 2 trained seed 4294967295, then failed at seed 4294967296 ("Seed must be between")."""
    with pytest.raises(ValueError, match=re.escape("--seeds must be in [0, 2**32 - 1], the seeds numpy and torch "
                                                   "take, got [4294967294, 4294967295, 4294967296]")):
        seed_list(3, 2**32 - 2)
    assert seed_list(2, 2**32 - 2) == [2**32 - 2, 2**32 - 1]
    with pytest.raises(ValueError, match=re.escape("--seeds must be in [0, 2**32 - 1]")):
        api.compare(poolings=["max"], seeds=2, seed=2**32 - 1, output_dir=tmp_path / "c", **data)
    assert not (tmp_path / "c").exists()


def test_every_valid_seed_seeds_every_fold():
    """Seed 2**32 - 1 with 2 folds failed at fold 1 (seed 2**32) after fold 0 had trained."""
    assert [fold_seed(TrainConfig(seed=2**32 - 1), fold) for fold in range(3)] == [2**32 - 1, 0, 1]
    assert [fold_seed(TrainConfig(seed=42), fold) for fold in range(3)] == [42, 43, 44]  # saved runs: as before


def test_a_run_trains_without_wait4_as_on_windows(tmp_path, monkeypatch):
    """os.wait4 exists on Unix only: on Windows every run failed with AttributeError."""
    monkeypatch.delattr(os, "wait4")
    run_dir = tmp_path / "runs" / "mean" / "seed_42"
    run_dir.mkdir(parents=True)

    real_popen = subprocess.Popen

    def popen(command, **kwargs):  # a worker that finishes the run and leaves no peak file
        Run(run_dir).write_metrics({"complete": True})
        return real_popen([sys.executable, "-c", "pass"], **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    cost = runner._run_one(TrainConfig(train_file="x.csv", text_cols=["a"]), PoolerSpec.parse("mean"), 42, run_dir)
    assert cost["wall_seconds"] > 0 and "peak_rss_bytes" not in cost  # no figure: NaN in the table, not 0
    assert json.loads((run_dir.parent / "seed_42.cost.json").read_text()) == cost
