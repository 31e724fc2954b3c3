"""--resume reads the run's saved config.yaml: a missing one is refused, and what it asks for is named as its."""

from __future__ import annotations

import re

import pytest

import attnpool
from attnpool.cli import main
from attnpool.config import TrainConfig
from attnpool.runs import Run, RunError
from attnpool.training import trackers, tracking
from attnpool.training.recipe import PER_CALL_SAVED
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.fixture
def recipe(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
            "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4, "pooling_options": {"attn_size": 8},
            "precision": "fp32"}


def _started_run(path, values: dict | None) -> Run:
    """A run as a first call leaves it once its data is read: run.json, and config.yaml unless ``values`` is None."""
    run = Run.create(path)
    if values is not None:
        run.write_config({**TrainConfig(**values).to_dict(), **PER_CALL_SAVED})
    run.write_info({"task": "regression", "classes": None, "label": "label", "id_col": "id", "num_folds": 2})
    return run


def test_resuming_a_run_whose_saved_tracker_is_not_installed_names_the_saved_config(recipe, tmp_path, monkeypatch,
                                                                                    capsys):
    """The user gave no --report-to: the error said '--report-to tensorboard: tensorboard is not installed'."""
    run = _started_run(tmp_path / "run", recipe | {"report_to": "tensorboard"})
    monkeypatch.setitem(tracking._INSTALLED, "tensorboard", lambda: False)  # resumed on a machine without it
    assert main(["train", "--output-dir", str(run.path), "--resume"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"attnpool train: error: --resume: the run's saved config {run.config_file} has report_to: "
                     "tensorboard, and tensorboard is not installed; pip install 'attnpool[tensorboard]'; or resume "
                     "without it: --resume --report-to none")
    with pytest.raises(ValueError, match=r"--report-to tensorboard: tensorboard is not installed; pip install"):
        attnpool.train(output_dir=str(run.path), resume=True, report_to="tensorboard")  # given: the call's own
    assert not run.fold_dir(0).exists()  # refused before any training


def test_resuming_a_run_whose_mlflow_store_cannot_open_says_so_not_that_mlflow_is_not_installed(recipe, tmp_path,
                                                                                                  monkeypatch):
    """integrations' refusal of a shut MLflow store was reported as 'mlflow is not installed here'."""
    run = _started_run(tmp_path / "run", recipe | {"report_to": "mlflow"})
    monkeypatch.setitem(trackers._INSTALLED, "mlflow", lambda: True)
    monkeypatch.setattr(trackers, "mlflow_store_error", lambda: "MLflow cannot open its tracking store sqlite:///x.db")
    with pytest.raises(ValueError) as error:
        attnpool.train(output_dir=str(run.path), resume=True)
    assert str(error.value) == (f"--resume: the run's saved config {run.config_file} has report_to: mlflow, and MLflow "
                                "cannot open its tracking store sqlite:///x.db; or resume without it: --resume "
                                "--report-to none")
    assert not run.fold_dir(0).exists()


def test_resuming_a_run_without_its_config_is_refused_instead_of_training_with_this_calls_options(recipe, tmp_path):
    """It trained the remaining folds with the call's options and saved them as the whole run's recipe."""
    run = _started_run(tmp_path / "run", None)
    missing = rf"--resume: {re.escape(str(run.config_file))} is missing: .* Restore the file \(from a backup or a "
    with pytest.raises(RunError, match=missing + r"copy of the run\), or start a new run \(another --output-dir, or "
                                             r"--overwrite\)"):
        attnpool.train(recipe, output_dir=str(run.path), resume=True, only_folds=[0])
    assert not run.config_file.exists() and not run.fold_dir(0).exists()
