"""What a call logs to its trackers: only the trackers it reports to, the run's own config, MLflow's lines quieted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import transformers
import yaml

import attnpool
from attnpool.config import load_yaml
from attnpool.runs import Run
from attnpool.training import tracking
from model_helpers import save_tiny_encoder, write_toy_csv


def _values(folder: Path, train_file: str | None = None) -> dict:
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    return {"train_file": train_file or str(folder / "train.csv"), "text_cols": ["first", "second"],
            "model": encoder, "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4,
            "pooling_options": {"attn_size": 8}, "precision": "fp32", "eval_steps": 2}


class _CrashAt3(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:  # checkpoint-2 is the last
            raise RuntimeError("crash after checkpoint-2")


class _SeenEnvironment(transformers.TrainerCallback):
    """The resume variables the fold's training started with."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.seen.append({name: os.environ.get(name) for name in ("MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_RESUME")})


def test_a_resume_without_mlflow_or_wandb_asks_no_tracking_server_for_the_checkpoints_runs(
        tmp_path, mlflow_store, monkeypatch, caplog):
    """--resume --report-to none after an MLflow run: the server (down now) was asked, with retries, and a fold
    said to log "into a new run"; WANDB_RUN_ID / WANDB_RESUME were exported without W&B."""
    values = _values(tmp_path) | {"only_folds": [0], "epochs": 2}
    out = str(tmp_path / "run")
    with pytest.raises(RuntimeError, match="crash after checkpoint-2"):
        attnpool.train(values, output_dir=out, report_to="mlflow", callbacks=[_CrashAt3()])
    states = sorted((tmp_path / "run").glob("fold_0/**/checkpoint-*/trainer_state.json"))
    assert states, "the fold left a checkpoint to resume from"
    for state_file in states:  # as if the run had reported to W&B as well
        state = json.loads(state_file.read_text())
        assert state["stateful_callbacks"]["TrackerRuns"]["attributes"]["mlflow_run_id"]
        state["stateful_callbacks"]["TrackerRuns"]["attributes"]["wandb_run_id"] = "abc123"
        state_file.write_text(json.dumps(state))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the tracking server is down now
    asked = []
    monkeypatch.setattr(tracking, "_mlflow_run_exists", lambda run_id: asked.append(run_id) or True)
    seen = _SeenEnvironment()
    with caplog.at_level("WARNING", logger="attnpool"):
        result = attnpool.train(values, output_dir=out, report_to="none", resume=True, callbacks=[seen])
    assert [f["fold"] for f in result.metrics["folds"]] == [0]
    assert asked == [], "a tracker this call does not report to was asked for the fold's run"
    assert seen.seen == [{"MLFLOW_RUN_ID": None, "WANDB_RUN_ID": None, "WANDB_RESUME": None}]
    assert "logs into a new run" not in caplog.text


def test_resumed_trackers_sets_the_run_ids_of_the_trackers_used_only(monkeypatch):
    for name in ("WANDB_RUN_ID", "WANDB_RESUME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    asked = []
    monkeypatch.setattr(tracking, "_mlflow_run_exists", lambda run_id: asked.append(run_id) or True)
    saved = {"global_step": 2, "stateful_callbacks": {"TrackerRuns": {"args": {}, "attributes": {
        "mlflow_run_id": "m1", "wandb_run_id": "w1"}}}}
    for used, expected in (([], (None, None)), (["mlflow"], ("m1", None)), (["wandb"], (None, "w1")),
                           (["tensorboard", "mlflow", "wandb"], ("m1", "w1"))):
        with tracking.resumed_trackers([], saved, True, used):
            assert (os.environ.get("MLFLOW_RUN_ID"), os.environ.get("WANDB_RUN_ID")) == expected, used
    assert asked == ["m1", "m1"]


def test_mlflow_info_lines_go_to_train_log_not_the_console(tmp_path):
    """MLflow imported after the run had quieted its logger added its own console handler: its INFO lines (the
    experiment it creates) were printed and missing from train.log."""
    pytest.importorskip("mlflow")
    values = _values(tmp_path) | {"only_folds": [0]}
    out = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys
        import attnpool
        assert "mlflow" not in sys.modules, "mlflow imported before the run"
        attnpool.train({values!r}, output_dir={str(out)!r}, report_to="mlflow")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PYTEST_"))}
    env |= {"MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true",
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    line = "does not exist. Creating a new experiment"
    assert line not in done.stderr, done.stderr
    assert line in (out / "train.log").read_text()  # quiet_third_party: the library's records go to train.log


def test_the_cv_entry_logs_the_runs_saved_config_not_the_resuming_calls_options(tmp_path, mlflow_store, monkeypatch):
    """Resumed with --only-folds 1 from another folder: resume true, only_folds [1] and the relative paths of the
    call were logged as the run's config, unlike its config.yaml."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, client = mlflow_store
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: False)
    monkeypatch.chdir(tmp_path)
    values = _values(tmp_path, train_file="train.csv")  # relative to the working folder
    attnpool.train(values, output_dir="run", report_to="all", only_folds=[0])
    result = attnpool.train(values, output_dir="run", report_to="all", resume=True, only_folds=[1])
    assert result.complete
    run = Run.open(result.run_dir)
    saved = load_yaml(run.config_file)
    assert saved["resume"] is False and saved["only_folds"] is None
    assert saved["train_file"] == str((tmp_path / "train.csv").resolve())

    text = EventAccumulator(str(run.tensorboard_dir())).Reload().Tensors("config/text_summary")[0]
    logged = text.tensor_proto.string_val[0].decode()
    assert yaml.safe_load("\n".join(line[4:] for line in logged.splitlines())) == saved

    experiment = client.get_experiment_by_name(tracking.experiment_name(run))
    cv = [r for r in client.search_runs([experiment.experiment_id]) if r.info.run_name.endswith("/cv")]
    assert len(cv) == 1
    params = cv[0].data.params
    assert (params["attnpool.resume"], params["attnpool.only_folds"]) == ("False", "None")
    assert params["attnpool.train_file"] == saved["train_file"]
    assert {k.removeprefix("attnpool."): v for k, v in params.items()} == {k: str(v) for k, v in saved.items()}
    artifact = client.download_artifacts(cv[0].info.run_id, run.config_file.name, str(tmp_path / "artifact"))
    assert load_yaml(artifact) == saved

    # W&B (not in the test extra): a stand-in that keeps the config given to wandb.init
    inits = []
    entry = types.SimpleNamespace(log=lambda values: None, summary={}, finish=lambda: None)
    fake = types.ModuleType("wandb")
    fake.run, fake.init = None, lambda **kwargs: inits.append(kwargs) or entry
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setitem(tracking._INSTALLED, "wandb", lambda: True)
    cfg = attnpool.TrainConfig(**values, report_to="wandb", resume=True, only_folds=[1], output_dir="run")
    assert tracking.log_summary(cfg, run, result.metrics)[0].startswith("wandb: project")
    assert inits[0]["config"] == saved
