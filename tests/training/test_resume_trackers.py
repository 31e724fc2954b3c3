"""--resume after a crash mid-fold: the fold goes on in its tracker runs, no step twice in TensorBoard."""

from __future__ import annotations

import collections
import os
import sys
import types

import pytest
import transformers

import attnpool
from attnpool.training import tracking
from model_helpers import save_tiny_encoder, write_toy_csv


class _CrashAt4(transformers.TrainerCallback):
    """A crash after step 4's update, before its log: steps 1-3 are logged, checkpoint-2 is the last."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 4:
            raise RuntimeError("crash at step 4")


def test_a_resumed_fold_goes_on_in_its_mlflow_run_and_logs_no_tensorboard_step_twice(tmp_path, mlflow_store):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    mlflow, client = mlflow_store
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    values = {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "folds": 2, "only_folds": [0], "epochs": 2, "max_length": 16, "batch_size": 4,
              "pooling_options": {"attn_size": 8}, "precision": "fp32", "eval_steps": 2}
    out = str(tmp_path / "run")
    with pytest.raises(RuntimeError, match="crash at step 4"):
        attnpool.train(values, output_dir=out, report_to="all", callbacks=[_CrashAt4()])
    result = attnpool.train(values, output_dir=out, report_to="all", resume=True)
    assert result.metrics["folds"][0]["fold"] == 0

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard" / "fold_0")).Reload()
    steps = [e.step for e in events.Scalars("train/loss")]
    assert steps == [1, 2, 3, 4, 5, 6], steps  # step 3 was logged before the crash and again after the resume
    assert [e.step for e in events.Scalars("eval/pearson")] == [2, 4, 6]

    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    name = (tmp_path / "run").resolve().as_posix()
    assert [(r.info.run_name, r.info.status) for r in runs] == [(f"{name}/fold_0", "FINISHED")]
    history = collections.Counter(m.step for m in client.get_metric_history(runs[0].info.run_id, "loss"))
    assert sorted(history) == [1, 2, 3, 4, 5, 6]
    assert history[3] == 2  # logged before the crash and after the resume: MLflow keeps both (see the docs)
    assert "MLFLOW_RUN_ID" not in os.environ  # for the resumed fold's training only
    assert mlflow.active_run() is None


def test_checkpoints_keep_the_wandb_run_and_a_resumed_fold_goes_on_in_it(monkeypatch):
    """W&B is not in the test extra: a stand-in with a run id; wandb.init reads WANDB_RUN_ID and WANDB_RESUME."""
    fake = types.ModuleType("wandb")
    fake.run = types.SimpleNamespace(id="abc123", name="DIR/fold_0")
    monkeypatch.setitem(sys.modules, "wandb", fake)
    for name in ("WANDB_RUN_ID", "WANDB_RESUME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    runs = tracking.TrackerRuns()
    runs.on_train_begin(types.SimpleNamespace(report_to=["wandb"]), types.SimpleNamespace(is_world_process_zero=True),
                        None)
    saved = {"global_step": 2, "stateful_callbacks": {"TrackerRuns": runs.state()}}
    assert runs.state()["attributes"] == {"mlflow_run_id": None, "wandb_run_id": "abc123"}
    with tracking.resumed_trackers([], saved, main=True, used=["wandb"]):
        assert (os.environ["WANDB_RUN_ID"], os.environ["WANDB_RESUME"]) == ("abc123", "allow")
        assert "MLFLOW_RUN_ID" not in os.environ
    assert "WANDB_RUN_ID" not in os.environ and "WANDB_RESUME" not in os.environ
    with tracking.resumed_trackers([], None, main=True, used=["wandb"]):  # not resumed: a new run
        assert "WANDB_RUN_ID" not in os.environ


def test_a_fold_trained_again_from_step_0_replaces_the_curves_of_a_start_stopped_before_its_first_checkpoint(
        tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    values = {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "folds": 2, "only_folds": [0], "epochs": 1, "max_length": 16, "batch_size": 4,
              "pooling_options": {"attn_size": 8}, "precision": "fp32", "eval_steps": 2}
    out = str(tmp_path / "run")

    class CrashAt2(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:  # before step 2's log and first checkpoint
                raise RuntimeError("crash at step 2")

    with pytest.raises(RuntimeError, match="crash at step 2"):
        attnpool.train(values, output_dir=out, report_to="tensorboard", callbacks=[CrashAt2()])
    attnpool.train(values, output_dir=out, report_to="tensorboard", resume=True)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard" / "fold_0")).Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]


def test_a_resumed_fold_whose_mlflow_run_is_gone_logs_into_a_new_run(mlflow_store, caplog):
    """Resumed on another machine (another MLFLOW_TRACKING_URI), the run id was refused: the fold failed to start."""
    saved = {"global_step": 2, "stateful_callbacks": {"TrackerRuns": {"args": {}, "attributes": {
        "mlflow_run_id": "0123456789abcdef0123456789abcdef", "wandb_run_id": None}}}}
    with caplog.at_level("WARNING", logger="attnpool"), \
            tracking.resumed_trackers([], saved, main=True, used=["mlflow"]):
        assert "MLFLOW_RUN_ID" not in os.environ
    assert "the fold's run 0123456789abcdef0123456789abcdef is not at " in caplog.text
    assert "the resumed fold logs into a new run" in caplog.text
    with tracking.resumed_trackers([], saved, main=False, used=["mlflow"]):  # the other processes start no tracker run
        assert "MLFLOW_RUN_ID" not in os.environ
