"""--report-to mlflow with a tracking store MLflow cannot open: refused before the run folder, left out of ``all``."""

from __future__ import annotations

import importlib.util
import logging

import pytest

import attnpool
from attnpool.training import trackers, tracking
from model_helpers import save_tiny_encoder, write_toy_csv

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    monkeypatch.setattr(trackers, "_LEFT_OUT", set())
    for name in tracking.TRACKERS:
        monkeypatch.setitem(tracking._INSTALLED, name, lambda: True)
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
            "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4, "precision": "fp32"}


def _shut_store(monkeypatch, tmp_path):
    """A folder store without MLFLOW_ALLOW_FILE_STORE: MLflow 3 refuses to open it (as skinny its sqlite default)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None)

    def refuse(*args, **kwargs):
        raise mlflow.exceptions.MlflowException("The store is shut. Details follow")

    monkeypatch.setattr(mlflow, "MlflowClient", refuse)


def test_report_to_mlflow_with_a_store_that_cannot_open_is_refused_before_anything_is_written(recipe, tmp_path,
                                                                                              monkeypatch):
    _shut_store(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match=r"--report-to mlflow: MLflow cannot open its tracking store file://.*mlruns "
                                         r"\(MlflowException: The store is shut\); pip install mlflow .*"
                                         r"MLFLOW_TRACKING_URI .*file:\./mlruns, with MLFLOW_ALLOW_FILE_STORE=true"):
        attnpool.train(recipe, output_dir=str(tmp_path / "run"), report_to="mlflow")
    assert not (tmp_path / "run").exists()


def test_report_to_all_leaves_mlflow_out_when_its_store_cannot_open_and_says_so_once(recipe, tmp_path, monkeypatch,
                                                                                    caplog):
    _shut_store(monkeypatch, tmp_path)
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    with caplog.at_level(logging.WARNING, logger="attnpool.train"):
        assert tracking.integrations("all") == ["tensorboard"]
        assert tracking.integrations("all") == ["tensorboard"]
    left_out = [r.getMessage() for r in caplog.records if "leaves out mlflow" in r.getMessage()]
    assert len(left_out) == 1 and "MLflow cannot open its tracking store" in left_out[0]


def test_report_to_all_keeps_mlflow_whose_store_opens(recipe, mlflow_store, monkeypatch):
    assert tracking.integrations("all") == ["tensorboard", "mlflow", "wandb"]
    assert tracking.mlflow_store_error() is None


@pytest.mark.skipif(importlib.util.find_spec("sqlalchemy") is not None, reason="full MLflow opens sqlite stores")
def test_mlflow_skinnys_default_sqlite_store_is_named_with_the_fix(tmp_path, monkeypatch):
    """The reviewer's case: MLflow 3's default store, sqlite, which mlflow-skinny cannot open (no SQLAlchemy)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None)
    error = tracking.mlflow_store_error()
    assert error is not None and error.startswith(f"MLflow cannot open its tracking store sqlite:///{tmp_path}")
    assert "pip install mlflow" in error
