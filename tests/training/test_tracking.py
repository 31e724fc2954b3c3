"""--report-to: each fold a tracker run grouped per run directory, plus the config and the CV scores; offline."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import transformers
from transformers import integrations as hf_integrations

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


def _summary_metrics(complete: bool = True) -> dict:
    """``metrics.json`` of a two-fold run, or of the same run with fold 0 alone trained."""
    folds = [{"fold": 0, "pearson": 0.5}, {"fold": 1, "pearson": 0.7}]
    if not complete:
        return {"folds": folds[:1], "overall": {"pearson": 0.5, "n": 12}, "complete": False}
    return {"folds": folds, "overall": {"pearson": 0.6, "n": 24}, "complete": True}


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


def test_mlflow_gets_one_experiment_per_run_with_a_run_per_fold_and_the_cv_scores(recipe, mlflow_store):
    _, client = mlflow_store
    folder, values = recipe
    result = attnpool.train(values, output_dir=str(folder / "ml"), report_to="mlflow")
    run = Run.open(result.run_dir)
    name = run.path.resolve().as_posix()
    assert "MLFLOW_EXPERIMENT_NAME" not in os.environ, "the experiment is set for the run only"
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


def test_mlflow_folds_nest_in_a_run_the_caller_opened(recipe, mlflow_store):
    """Without nesting, transformers logs every fold into the caller's run, their curves interleaved at equal steps."""
    mlflow, client = mlflow_store
    folder, values = recipe
    mlflow.set_experiment("outer")
    with mlflow.start_run(run_name="outer") as outer:
        result = attnpool.train(values, output_dir=str(folder / "nested"), report_to="mlflow")
        assert mlflow.active_run().info.run_id == outer.info.run_id, "the caller's run is still the active one"
    assert "MLFLOW_NESTED_RUN" not in os.environ
    name = Run.open(result.run_dir).path.resolve().as_posix()
    children = {r.info.run_name: r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"tags.mlflow.parentRunId = '{outer.info.run_id}'")}
    assert set(children) == {f"{name}/fold_0", f"{name}/fold_1", f"{name}/cv"}  # the cv entry nested too
    assert all(client.get_metric_history(r.info.run_id, "eval_pearson") for n, r in children.items()
               if not n.endswith("/cv"))
    assert not client.get_metric_history(outer.info.run_id, "eval_pearson"), "no fold logged into the caller's run"


def test_a_tracker_that_is_not_installed_is_refused_before_anything_is_written(recipe, monkeypatch):
    folder, values = recipe
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    with pytest.raises(ValueError, match=r"--report-to wandb: wandb is not installed; pip install 'attnpool\[wandb\]'"):
        attnpool.train(values, output_dir=str(folder / "none"), report_to="wandb")
    assert not (folder / "none").exists()
    with pytest.raises(ValueError, match="report_to must be one of none, tensorboard, mlflow, wandb, all"):
        attnpool.train(values, output_dir=str(folder / "none"), report_to="comet")


def test_the_integrations_of_each_choice(monkeypatch, mlflow_store):  # a store MLflow can open
    for name in tracking.TRACKERS:
        monkeypatch.setitem(tracking._INSTALLED, name, lambda: True)
    assert tracking.integrations("none") == []
    assert tracking.integrations("mlflow") == ["mlflow"]
    assert tracking.integrations("all") == ["tensorboard", "mlflow", "wandb"]
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    assert tracking.integrations("all") == ["tensorboard", "mlflow"]  # all: every one installed


def test_fold_runs_are_named_after_the_run_directory(tmp_path):
    run = Run(tmp_path / "runs" / "x")
    assert tracking.run_name(run, 3) == f"{run.path.resolve().as_posix()}/fold_3"
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
    name = Run(result.run_dir).path.resolve().as_posix()
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


def test_the_callers_mlflow_experiment_is_the_active_one_after_a_run(recipe, mlflow_store):
    mlflow, _ = mlflow_store
    folder, values = recipe
    mine = mlflow.set_experiment("mine").experiment_id
    attnpool.train(values, output_dir=str(folder / "ml_after"), report_to="mlflow")
    with mlflow.start_run() as after:  # went to the run's experiment
        pass
    assert after.info.experiment_id == mine


def test_an_open_wandb_run_is_named_as_where_every_fold_goes(recipe, monkeypatch, caplog):
    """transformers logs into a W&B run the caller opened instead of one per fold: say so before training."""
    fake = types.ModuleType("wandb")
    fake.run = types.SimpleNamespace(name="my-sweep")
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: True)
    cfg = attnpool.TrainConfig(**recipe[1], report_to="wandb")
    with caplog.at_level("WARNING", logger="attnpool"), tracking.run_environment(cfg, Run(recipe[0] / "w")):
        pass
    assert "a W&B run is open (my-sweep): every fold logs into it" in caplog.text


class _Boom(transformers.TrainerCallback):
    """Training that fails at its second step, as a CUDA out-of-memory error would."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            raise RuntimeError("boom")


def test_a_fold_that_fails_ends_its_mlflow_run_as_failed(recipe, mlflow_store):
    """Left open, the process's next training (a notebook's) nests its folds in it; at exit MLflow marks it FINISHED."""
    mlflow, client = mlflow_store
    folder, values = recipe
    with pytest.raises(RuntimeError, match="boom"):
        attnpool.train(values | {"epochs": 1}, output_dir=str(folder / "ml_fail"), report_to="mlflow",
                       callbacks=[_Boom()])
    assert mlflow.active_run() is None
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    name = (folder / "ml_fail").resolve().as_posix()
    assert [(r.info.run_name, r.info.status) for r in runs] == [(f"{name}/fold_0", "FAILED")]


def test_a_fold_stopped_by_ctrl_c_is_killed_and_the_callers_run_stays_open(mlflow_store, monkeypatch):
    """abort() ends the run transformers' callback started (and disarms it), never the caller's; and the W&B run."""
    mlflow, client = mlflow_store
    fake = types.ModuleType("wandb")  # W&B is not in the test extra
    fake.run, finished = None, []
    fake.finish = lambda **kwargs: finished.append(kwargs)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    folds = tracking.FoldTracking(["mlflow", "wandb"])
    callback = hf_integrations.MLflowCallback()
    folds.watch([callback])
    with mlflow.start_run(run_name="caller's") as outer:
        fold = mlflow.start_run(run_name="fold_0", nested=True)  # what the callback's setup does, and then:
        callback._auto_end_run = True
        fake.run = types.SimpleNamespace(name="fold_0")
        folds.abort(KeyboardInterrupt())
        assert mlflow.active_run().info.run_id == outer.info.run_id
    assert client.get_run(fold.info.run_id).info.status == "KILLED"
    assert client.get_run(outer.info.run_id).info.status == "FINISHED"
    assert not callback._auto_end_run, "its __del__ would end whichever run is active then"
    assert finished == [{"exit_code": 1}]


def test_an_incomplete_run_logs_no_cv_entry_and_a_complete_one_logs_it_once(recipe, tmp_path, mlflow_store,
                                                                           monkeypatch):
    """--only-folds 0, then --resume: the half-data score is not the run's, nor fold 0's entry logged twice."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, client = mlflow_store
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    cfg = attnpool.TrainConfig(**recipe[1], report_to="all")
    run = Run(tmp_path / "run")
    assert tracking.log_summary(cfg, run, _summary_metrics(complete=False)) == [
        "the cv entry waits for the remaining folds (1 trained): it is logged once --resume has trained them all"]
    assert not run.tensorboard_dir().exists() and client.get_experiment_by_name(tracking.experiment_name(run)) is None
    assert len(tracking.log_summary(cfg, run, _summary_metrics())) == 2
    experiment = client.get_experiment_by_name(tracking.experiment_name(run))
    assert [r.data.metrics["cv/pearson"] for r in client.search_runs([experiment.experiment_id])] == [0.6]
    # the complete run resumed again: TensorBoard's entry replaced, not drawn twice
    tracking.log_summary(attnpool.TrainConfig(**recipe[1], report_to="tensorboard"), run, _summary_metrics())
    events = EventAccumulator(str(run.tensorboard_dir())).Reload()
    assert [(e.step, e.value) for e in events.Scalars("cv/pearson")] == [(2, pytest.approx(0.6))]
    assert [(e.step, e.value) for e in events.Scalars("fold/pearson")] == [(0, 0.5), (1, pytest.approx(0.7))]


def test_a_complete_run_resumed_logs_no_second_cv_entry_but_gives_it_to_a_tracker_that_missed_it(
        recipe, mlflow_store, monkeypatch):
    """Each --resume of a complete run added a cv run to MLflow (and W&B): two entries read as two runs' scores."""
    _, client = mlflow_store
    folder, values = recipe
    values = values | {"epochs": 1}
    result = attnpool.train(values, output_dir=str(folder / "resumed_cv"), report_to="mlflow")
    experiment = client.get_experiment_by_name(tracking.experiment_name(Run(result.run_dir)))
    attnpool.train(values, output_dir=str(folder / "resumed_cv"), report_to="mlflow", resume=True)
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name.rsplit("/", 1)[1] for r in runs) == ["cv", "fold_0", "fold_1"]
    assert "tracking: the cv entry was logged when the run completed, kept: mlflow: experiment" in \
        (result.run_dir / "train.log").read_text()
    # a tracker added on resume (or one that was down) gets the entry then, once
    monkeypatch.setitem(tracking._INSTALLED, "tensorboard", lambda: True)
    written = []
    monkeypatch.setattr(tracking, "_tensorboard", lambda cfg, run, folds, overall: written.append(run) or "tb")
    for _ in range(2):
        attnpool.train(values, output_dir=str(folder / "resumed_cv"), report_to="all", resume=True)
    assert len(written) == 1 and len(client.search_runs([experiment.experiment_id])) == 3


def test_a_fold_retrained_after_the_cv_entry_changes_it(recipe, tmp_path, mlflow_store):
    """A complete run whose fold was re-trained (deleted, then --resume, as a damaged fold's error says) has other
    scores: the trackers that took its cv entry take the new one; the same scores are not logged twice."""
    _, client = mlflow_store
    cfg = attnpool.TrainConfig(**recipe[1], report_to="mlflow")
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})
    assert tracking.log_summary(cfg, run, _summary_metrics())[0].startswith("mlflow: experiment")
    assert tracking.log_summary(cfg, run, _summary_metrics())[0].startswith("the cv entry was logged when the run")
    retrained = _summary_metrics()
    retrained["folds"][1]["pearson"], retrained["overall"]["pearson"] = 0.3, 0.4
    tracking.log_summary(cfg, run, retrained)
    experiment = client.get_experiment_by_name(tracking.experiment_name(run))
    cv = sorted(r.data.metrics["cv/pearson"] for r in client.search_runs([experiment.experiment_id]))
    assert cv == [0.4, 0.6]


def test_a_run_is_one_experiment_whichever_path_reaches_it(tmp_path, monkeypatch):
    """Started as runs/x, resumed as /home/me/runs/x (or through a link): one MLflow experiment, one W&B group."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    paths = [Path("runs/x"), tmp_path / "runs" / "x", tmp_path / "link" / "x"]
    assert {tracking.experiment_name(Run(p)) for p in paths} == {(tmp_path / "runs" / "x").resolve().as_posix()}
    assert len({tracking.run_name(Run(p), 0) for p in paths}) == 1


def test_mlflow_experiment_id_picks_the_experiment_of_every_fold_and_the_cv_entry(recipe, mlflow_store, monkeypatch):
    """MLflow's documented way to pick an experiment; transformers' set_experiment(name) would otherwise win."""
    _, client = mlflow_store
    folder, values = recipe
    team = client.create_experiment("team")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", team)
    result = attnpool.train(values | {"epochs": 1}, output_dir=str(folder / "ml_id"), report_to="mlflow")
    name = Run(result.run_dir).path.resolve().as_posix()
    assert sorted(r.info.run_name for r in client.search_runs([team])) == [f"{name}/cv", f"{name}/fold_0",
                                                                          f"{name}/fold_1"]
    assert client.get_experiment_by_name(name) is None
    assert os.environ["MLFLOW_EXPERIMENT_ID"] == team and "MLFLOW_EXPERIMENT_NAME" not in os.environ


def test_the_mlflow_cv_run_is_ended_whatever_fails(recipe, tmp_path, mlflow_store, monkeypatch, caplog):
    """A run left RUNNING reads as a training still going: the scores are what counts, the config file best effort."""
    mlflow, client = mlflow_store
    cfg = attnpool.TrainConfig(**recipe[1], report_to="mlflow")
    run = Run(tmp_path / "run")

    def refused(*args, **kwargs):
        raise PermissionError("no write access")

    monkeypatch.setattr(mlflow.MlflowClient, "log_dict", refused)  # the artifact store
    with caplog.at_level("WARNING", logger="attnpool"):
        assert len(tracking.log_summary(cfg, run, _summary_metrics())) == 1
    assert "mlflow took the CV scores but not the config file (PermissionError: no write access)" in caplog.text
    monkeypatch.setattr(mlflow.MlflowClient, "log_batch", refused)  # the tracking server
    assert tracking.log_summary(cfg, run, _summary_metrics()) == []
    experiment = client.get_experiment_by_name(tracking.experiment_name(run))
    ended = {r.info.status: r.data.metrics.get("cv/pearson") for r in client.search_runs([experiment.experiment_id])}
    assert ended == {"FINISHED": 0.6, "FAILED": None}
