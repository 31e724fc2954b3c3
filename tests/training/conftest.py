"""Fixtures shared by the training tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """MLflow in this test's folder, no experiment picked by the environment; yields mlflow and a client of it.

    ``mlflow.set_experiment()`` sets ``MLFLOW_EXPERIMENT_ID`` (which picks the experiment of later runs): undone
    after the test, as are the runs a failing test left open.
    """
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 prefers a database; a folder is enough here
    for name in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_NESTED_RUN", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    # the fluent API's own URI and experiment, for this test only (restored after it)
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", uri)
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    yield mlflow, mlflow.MlflowClient(tracking_uri=uri)
    while mlflow.active_run() is not None:
        mlflow.end_run()
