"""--report-to: each fold a tracker run grouped per run directory, plus the config and the CV scores; offline."""

from __future__ import annotations

import os

import pytest

import attnpool
from attnpool.runs import Run
from attnpool.training import tracking
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tracking")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    values = {"train_file": str(folder / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "folds": 2, "epochs": 2, "max_length": 16, "batch_size": 4, "pooling_options": {"attn_size": 8},
              "precision": "fp32"}
    return folder, values


def _eval_curve(run: Run, fold: int, metric: str) -> list[tuple[int, float]]:
    return [(h["step"], h[f"eval_{metric}"]) for h in run.fold_history(fold) if f"eval_{metric}" in h]


def test_tensorboard_gets_every_folds_curves_the_config_and_the_cv_scores(recipe):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder, values = recipe
    result = attnpool.train(values, output_dir=str(folder / "tb"), report_to="tensorboard")
    run = Run.open(result.run_dir)
    assert sorted(p.name for p in (run.path / "tensorboard").iterdir()) == ["cv", "fold_0", "fold_1"]
    for fold in (0, 1):
        events = EventAccumulator(str(run.tensorboard_dir(fold))).Reload()
        scalars = events.Tags()["scalars"]
        assert "train/loss" in scalars and "eval/pearson" in scalars
        curve = [(e.step, e.value) for e in events.Scalars("eval/pearson")]
        assert curve == [(s, pytest.approx(v, abs=1e-6)) for s, v in _eval_curve(run, fold, "pearson")]
    cv = EventAccumulator(str(run.tensorboard_dir())).Reload()
    assert cv.Scalars("cv/pearson")[0].value == pytest.approx(result.metrics["overall"]["pearson"], abs=1e-6)
    per_fold = {e.step: e.value for e in cv.Scalars("fold/pearson")}
    assert per_fold == {f["fold"]: pytest.approx(f["pearson"], abs=1e-6) for f in result.metrics["folds"]}
    config = cv.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()  # the resolved config
    assert "    pooling: attention" in config and "    report_to: tensorboard" in config
    assert "TENSORBOARD_LOGGING_DIR" not in os.environ


def test_mlflow_gets_one_experiment_per_run_with_a_run_per_fold_and_the_cv_scores(recipe, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    folder, values = recipe
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 prefers a database; a folder is enough here
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    result = attnpool.train(values, output_dir=str(folder / "ml"), report_to="mlflow")
    run = Run.open(result.run_dir)
    name = run.path.as_posix()
    assert "MLFLOW_EXPERIMENT_NAME" not in os.environ, "the experiment is set for the run only"
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {f"{name}/fold_0", f"{name}/fold_1", f"{name}/cv"}
    for fold in (0, 1):
        entry = runs[f"{name}/fold_{fold}"]
        history = client.get_metric_history(entry.info.run_id, "eval_pearson")
        curve = sorted((m.step, m.value) for m in history)
        assert curve == [(s, pytest.approx(v, abs=1e-6)) for s, v in _eval_curve(run, fold, "pearson")]
        assert entry.info.status == "FINISHED"
    cv = runs[f"{name}/cv"]
    assert cv.data.metrics["cv/pearson"] == pytest.approx(result.metrics["overall"]["pearson"])
    history = client.get_metric_history(cv.info.run_id, "fold/pearson")
    assert {m.step: m.value for m in history} == {f["fold"]: pytest.approx(f["pearson"])
                                                   for f in result.metrics["folds"]}
    assert cv.data.params["attnpool.pooling"] == "attention" and cv.data.params["attnpool.folds"] == "2"
    assert cv.data.params["attnpool.report_to"] == "mlflow"


def test_mlflow_folds_nest_in_a_run_the_caller_opened(recipe, tmp_path, monkeypatch):
    """Without nesting, transformers logs every fold into the caller's run, their curves interleaved at equal steps."""
    mlflow = pytest.importorskip("mlflow")
    folder, values = recipe
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_NESTED_RUN", raising=False)
    # the fluent API's own URI and experiment, for this test only (restored after it)
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", (tmp_path / "mlruns").as_uri())
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    mlflow.set_experiment("outer")
    with mlflow.start_run(run_name="outer") as outer:
        result = attnpool.train(values, output_dir=str(folder / "nested"), report_to="mlflow")
        assert mlflow.active_run().info.run_id == outer.info.run_id, "the caller's run is still the active one"
    assert "MLFLOW_NESTED_RUN" not in os.environ
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    name = Run.open(result.run_dir).path.as_posix()
    children = {r.info.run_name: r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"tags.mlflow.parentRunId = '{outer.info.run_id}'")}
    assert set(children) == {f"{name}/fold_0", f"{name}/fold_1"}
    assert all(client.get_metric_history(r.info.run_id, "eval_pearson") for r in children.values())
    assert not client.get_metric_history(outer.info.run_id, "eval_pearson"), "no fold logged into the caller's run"


def test_a_tracker_that_is_not_installed_is_refused_before_anything_is_written(recipe, monkeypatch):
    folder, values = recipe
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    with pytest.raises(ValueError, match=r"--report-to wandb: wandb is not installed; pip install 'attnpool\[wandb\]'"):
        attnpool.train(values, output_dir=str(folder / "none"), report_to="wandb")
    assert not (folder / "none").exists()
    with pytest.raises(ValueError, match="report_to must be one of none, tensorboard, mlflow, wandb, all"):
        attnpool.train(values, output_dir=str(folder / "none"), report_to="comet")


def test_the_integrations_of_each_choice(monkeypatch):
    for name in tracking.TRACKERS:
        monkeypatch.setitem(tracking._INSTALLED, name, lambda: True)
    assert tracking.integrations("none") == []
    assert tracking.integrations("mlflow") == ["mlflow"]
    assert tracking.integrations("all") == ["tensorboard", "mlflow", "wandb"]
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    assert tracking.integrations("all") == ["tensorboard", "mlflow"]  # all: every one installed


def test_fold_runs_are_named_after_the_run_directory(tmp_path):
    run = Run(tmp_path / "runs" / "x")
    assert tracking.run_name(run, 3) == f"{run.path.as_posix()}/fold_3"
    assert run.tensorboard_dir(2) == run.path / "tensorboard" / "fold_2"
    assert run.tensorboard_dir() == run.path / "tensorboard" / "cv"


def test_wandb_gets_a_run_per_fold_and_the_cv_run_in_one_group(recipe, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")  # not in the test extra: skipped where W&B is not installed
    folder, values = recipe
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    for name in ("WANDB_PROJECT", "WANDB_RUN_GROUP", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    calls, init = [], wandb.init

    def recording_init(*args, **kwargs):
        calls.append((kwargs.get("name"), os.environ.get("WANDB_PROJECT"), os.environ.get("WANDB_RUN_GROUP")))
        return init(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", recording_init)
    result = attnpool.train(values, output_dir=str(folder / "wb"), report_to="wandb")
    name = Run(result.run_dir).path.as_posix()
    assert calls == [(f"{name}/fold_0", "attnpool", name), (f"{name}/fold_1", "attnpool", name),
                     (f"{name}/cv", "attnpool", name)]
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 3 and wandb.run is None
    assert "WANDB_RUN_GROUP" not in os.environ


def test_a_tracker_failing_on_the_summary_does_not_fail_a_trained_run(recipe, monkeypatch, caplog):
    """TensorBoard's SummaryWriter missing (tensorboardX only) or a tracker's server down, after every fold."""
    folder, values = recipe

    def broken(*args, **kwargs):
        raise ImportError("No module named 'tensorboard'")

    monkeypatch.setitem(tracking._INSTALLED, "tensorboard", lambda: True)
    monkeypatch.setattr(tracking, "_tensorboard", broken)
    result = attnpool.train(values, output_dir=str(folder / "broken"), report_to="tensorboard")
    assert result.metrics["complete"] and (result.run_dir / "oof.csv").is_file()
    assert "tracking: tensorboard did not take the CV summary (ImportError: No module named 'tensorboard')" \
        in (result.run_dir / "train.log").read_text()


def test_the_callers_mlflow_experiment_is_the_active_one_after_a_run(recipe, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    folder, values = recipe
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", (tmp_path / "mlruns").as_uri())
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    mine = mlflow.set_experiment("mine").experiment_id
    attnpool.train(values, output_dir=str(folder / "ml_after"), report_to="mlflow")
    with mlflow.start_run() as after:  # went to the run's experiment
        pass
    assert after.info.experiment_id == mine


def test_an_open_wandb_run_is_named_as_where_every_fold_goes(recipe, monkeypatch, caplog):
    """transformers logs into a W&B run the caller opened instead of one per fold: say so before training."""
    import sys
    import types

    fake = types.ModuleType("wandb")
    fake.run = types.SimpleNamespace(name="my-sweep")
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: True)
    cfg = attnpool.TrainConfig(**recipe[1], report_to="wandb")
    with caplog.at_level("WARNING", logger="attnpool"), tracking.run_environment(cfg, Run(recipe[0] / "w")):
        pass
    assert "a W&B run is open (my-sweep): every fold logs into it" in caplog.text
