"""Experiment tracking (``--report-to``): every fold a run of the ``Trainer``'s integration, grouped per run directory.

Each fold's ``Trainer`` reports its logs (training loss, learning rate, every evaluation) through transformers'
own integration callbacks; attnpool names and groups them by the run directory's absolute path (``DIR``, the same
whichever working directory a run is resumed from), and once every fold is trained logs one more entry per run,
``DIR/cv``, with the resolved config, every fold's final validation metrics (step = fold) and the cross-validation
scores of the out-of-fold predictions (``cv/<metric>``), once per tracker (a complete run resumed logs it no more). A
fold that fails ends its tracker runs as failed.

- TensorBoard: ``RUN_DIR/tensorboard/fold_K/`` and ``RUN_DIR/tensorboard/cv/``; ``tensorboard --logdir
  RUN_DIR/tensorboard`` shows the folds side by side.
- MLflow: one experiment per run directory, ``DIR``, unless ``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID``
  picks one (``mlflow.set_experiment()`` sets the latter); runs ``DIR/fold_K`` and ``DIR/cv``; ``MLFLOW_TRACKING_URI``
  says where (MLflow's default otherwise). Called inside an MLflow run of the caller's, the folds and the ``cv`` entry
  are runs nested in it (``MLFLOW_NESTED_RUN``), in its experiment unless one is picked, and it stays open.
- Weights & Biases: project ``WANDB_PROJECT`` (default ``attnpool``), one group per run directory
  (``WANDB_RUN_GROUP``), one run per fold plus the ``cv`` run.

A fold resumed from a checkpoint goes on in its tracker runs (:func:`resumed_trackers`, :class:`TrackerRuns`); MLflow
keeps what was logged between the checkpoint and the stop too (those steps have two values). A fold stopped before
its first checkpoint trains from step 0 again, in new runs, its TensorBoard curves replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import transformers
import yaml
from transformers import integrations as hf_integrations
from transformers.trainer_callback import ExportableState

from attnpool.config import TrainConfig, load_yaml
from attnpool.runs.run import SUMMARY_RUN, Run
from attnpool.training.progress import get_verbosity
from attnpool.training.trackers import (  # noqa: F401
    _INSTALLED,
    TRACKERS,
    cfg_trackers,
    integrations,
    mlflow_experiment,
    mlflow_store_error,  # noqa: F401
    scoped_environ,
)

logger = logging.getLogger("attnpool.train")
# Environment variables a run sets for the integrations, restored afterwards (MLflow sets MLFLOW_EXPERIMENT_ID).
_SCOPED_ENV = ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "WANDB_PROJECT", "WANDB_RUN_GROUP", "WANDB_SILENT",
               "TENSORBOARD_LOGGING_DIR")
# What a resumed fold sets for the integrations (the tracker runs it goes on in), restored after its training.
_RESUME_ENV = ("MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_RESUME")
_Folds = list[tuple[int, dict[str, float]]]  # each fold's final validation metrics, for the cv entry


def experiment_name(run: Run) -> str:
    """The name that groups a run's folds in a tracker: the run directory's absolute path.

    Not the path as typed: a run started as ``runs/x`` and resumed as ``/home/me/runs/x`` is one experiment.
    """
    return run.path.resolve().as_posix()


def run_name(run: Run, fold: int) -> str:
    """A fold's name in a tracker: ``DIR/fold_K``."""
    return f"{experiment_name(run)}/fold_{fold}"


@contextlib.contextmanager
def run_environment(cfg: TrainConfig, run: Run, trackers: list[str] | None = None) -> Iterator[list[str]]:
    """For one run: the trackers' experiment (MLflow) or project and group (W&B), unless already set; yields them.

    ``trackers``: ``cfg.report_to``'s, as the caller already decided them (:func:`integrations`); ``None`` decides.

    W&B's own console output is silenced (``WANDB_SILENT``) except at ``verbose``.

    Raises:
        ValueError: ``cfg.report_to`` names a tracker that is not installed.
    """
    name = experiment_name(run)
    used = integrations(cfg.report_to, experiment=name) if trackers is None else trackers
    values: dict[str, str] = {}
    if "mlflow" in used:
        import mlflow  # imported now: its loggers exist before the run quiets them

        values["MLFLOW_EXPERIMENT_NAME"] = mlflow_experiment(name)  # nested in the caller's run: its experiment
        if mlflow.active_run() is not None:  # the caller's run: each fold a run nested in it, not all folds in it
            values["MLFLOW_NESTED_RUN"] = os.environ.get("MLFLOW_NESTED_RUN") or "TRUE"
    if "wandb" in used:
        import wandb

        if wandb.run is not None:  # transformers logs into an open run instead of starting one per fold
            logger.warning("tracking: a W&B run is open (%s): every fold logs into it, their steps starting over at "
                           "each fold; call wandb.finish() before training for a W&B run per fold",
                           getattr(wandb.run, "name", None) or "unnamed")
        values["WANDB_PROJECT"] = os.environ.get("WANDB_PROJECT") or "attnpool"
        values["WANDB_RUN_GROUP"] = os.environ.get("WANDB_RUN_GROUP") or name
        if get_verbosity() != "verbose":  # its banners and run summaries, on every fold
            values["WANDB_SILENT"] = os.environ.get("WANDB_SILENT") or "true"
    with scoped_environ(values, keep=_SCOPED_ENV), _mlflow_experiment("mlflow" in used):
        yield used


@contextlib.contextmanager
def _mlflow_experiment(used: bool) -> Iterator[None]:
    """Restore the MLflow fluent API's active experiment after a run.

    Transformers' callback sets it to the run's experiment, where the caller's next ``mlflow.start_run()`` went.
    """
    fluent = None
    if used:
        import mlflow.tracking.fluent as fluent
    saved = getattr(fluent, "_active_experiment_id", None)
    try:
        yield
    finally:
        if fluent is not None and hasattr(fluent, "_active_experiment_id"):
            fluent._active_experiment_id = saved


@contextlib.contextmanager
def fold_environment(run: Run | None, fold: int | None) -> Iterator[None]:
    """Around a fold's ``Trainer(...)``: its TensorBoard folder, ``RUN_DIR/tensorboard/fold_K`` (not checkpoints/).

    Outside a run (``run`` or ``fold`` ``None``) the Trainer's own default stands.
    """
    values = {} if run is None or fold is None else {"TENSORBOARD_LOGGING_DIR": str(run.tensorboard_dir(fold))}
    with scoped_environ(values, keep=("TENSORBOARD_LOGGING_DIR",)):
        yield


class FoldTracking(transformers.TrainerCallback):
    """Each fold a tracker run of its own, and a run the caller opened left open.

    Ends a fold's W&B run when the fold ends (the integration keeps it open). Transformers' MLflow callback ends
    *the active run* when it is garbage collected if it started one: after a fold nested in the caller's MLflow run,
    that is the caller's run. :meth:`watch` finds it among the Trainer's callbacks; once it has ended its own run
    (its ``on_train_end`` comes before this one's), it is told it has none left to end. A fold that raises skips
    ``on_train_end``: :meth:`abort` ends its runs instead.
    """

    def __init__(self, used: list[str]) -> None:
        self._wandb = None
        self._mlflow: Any = None
        if "wandb" in used:
            import wandb

            self._wandb = wandb if wandb.run is None else None  # a run the caller opened is theirs to finish

    def watch(self, callbacks: list[transformers.TrainerCallback]) -> None:
        """Remember the Trainer's MLflow callback, if any."""
        self._mlflow = next((c for c in callbacks if isinstance(c, hf_integrations.MLflowCallback)), None)

    def on_train_end(self, args, state, control, **kwargs):
        """Finish the fold's W&B run (main process); disarm the MLflow callback that has ended its own run."""
        if self._wandb is not None and state.is_world_process_zero and self._wandb.run is not None:
            self._wandb.finish()
        if getattr(self._mlflow, "_auto_end_run", False):
            self._mlflow._auto_end_run = False

    def abort(self, error: BaseException) -> None:
        """End the fold's tracker runs as failed after ``error`` stopped its training (MLflow: KILLED on Ctrl-C).

        Left open, the fold's MLflow run is the one the process's next training (a notebook's) nests its folds in,
        and MLflow's exit handler marks it FINISHED. A run the caller opened stays open. Never raises: the error
        that stopped the fold is the one to see.
        """
        status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
        callback, wandb = self._mlflow, self._wandb
        ends = {}
        if getattr(callback, "_auto_end_run", False):  # it started the fold's run (main process)
            callback._auto_end_run = False  # or its on_train_end / __del__ would end whichever run is active later
            ends["mlflow"] = lambda: callback._ml_flow.active_run() and callback._ml_flow.end_run(status=status)
        if wandb is not None and wandb.run is not None:
            ends["wandb"] = lambda: wandb.finish(exit_code=1)
        for tracker, end in ends.items():
            try:
                end()
            except Exception as err:  # noqa: BLE001 - a tracker out of reach must not hide why the fold failed
                logger.warning("tracking: %s: could not end the failed fold's run (%s: %s)", tracker,
                               type(err).__name__, err)


class TrackerRuns(transformers.TrainerCallback, ExportableState):
    """The fold's MLflow and W&B run ids, in each checkpoint's ``trainer_state.json`` for :func:`resumed_trackers`."""

    def __init__(self) -> None:
        self.mlflow_run_id: str | None = None
        self.wandb_run_id: str | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        """Note the runs the integrations started (their callbacks come first; on the main process only)."""
        if not state.is_world_process_zero:
            return
        if "mlflow" in args.report_to:
            import mlflow

            self.mlflow_run_id = getattr(getattr(mlflow.active_run(), "info", None), "run_id", None)
        if "wandb" in args.report_to:
            import wandb

            self.wandb_run_id = getattr(wandb.run, "id", None)

    def state(self) -> dict:
        """What a checkpoint keeps: the run ids."""
        return {"args": {}, "attributes": {"mlflow_run_id": self.mlflow_run_id, "wandb_run_id": self.wandb_run_id}}


@contextlib.contextmanager
def resumed_trackers(callbacks: list[transformers.TrainerCallback], saved: Mapping[str, Any] | None, main: bool,
                     used: list[str]) -> Iterator[None]:
    """Around a fold's ``Trainer.train()`` resumed from a checkpoint: go on in that checkpoint's tracker runs.

    ``saved``: the checkpoint's ``trainer_state.json`` (``None``: no resume, nothing changes). On the main process
    (``main``), for this training only, MLflow and W&B, where ``used`` (the ``--report-to`` trackers) has them, get
    the run ids :class:`TrackerRuns` kept (``MLFLOW_RUN_ID``, unless its server lacks that run; ``WANDB_RUN_ID`` with
    ``WANDB_RESUME=allow``); TensorBoard writes through a ``SummaryWriter`` whose ``purge_step`` hides the steps after.
    """
    entry = (saved or {}).get("stateful_callbacks", {}).get(TrackerRuns.__name__) or {}
    ids = (entry[0] if isinstance(entry, list) else entry).get("attributes", {}) if main else {}
    ids = {name: ids.get(f"{name}_run_id") for name in ("mlflow", "wandb") if name in used}
    values = {"WANDB_RUN_ID": str(ids["wandb"]), "WANDB_RESUME": "allow"} if ids.get("wandb") else {}
    if ids.get("mlflow") and _mlflow_run_exists(str(ids["mlflow"])):
        values["MLFLOW_RUN_ID"] = str(ids["mlflow"])
    for callback in callbacks if main and saved else []:
        folder = getattr(callback, "logging_dir", None)  # set: the run's fold folder (else a new folder each time)
        if isinstance(callback, hf_integrations.TensorBoardCallback) and callback.tb_writer is None and folder:
            from torch.utils.tensorboard import SummaryWriter

            step = int(saved.get("global_step") or 0)
            callback.tb_writer = SummaryWriter(log_dir=folder, purge_step=step + 1)
    with scoped_environ(values, keep=_RESUME_ENV):
        yield


def _mlflow_run_exists(run_id: str) -> bool:
    """Whether the tracking server holds the run, not deleted (resumed elsewhere: the fold gets a new run)."""
    import mlflow

    try:
        return mlflow.MlflowClient().get_run(run_id).info.lifecycle_stage == "active"
    except Exception as err:  # noqa: BLE001 - not found, or out of reach: the fold trains and logs anew
        logger.warning("tracking: mlflow: the fold's run %s is not at %s (%s); the resumed fold logs into a new run",
                       run_id, mlflow.get_tracking_uri(), type(err).__name__)
        return False


def _numbers(values: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, float]:
    return {k: float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in skip and math.isfinite(v)}


def log_summary(cfg: TrainConfig, run: Run, metrics: Mapping[str, Any], trackers: list[str] | None = None) -> list[str]:
    """Log the run's ``cv`` entry to each tracker of ``cfg.report_to``; returns one line per tracker, where it went.

    The entry holds the run's ``config.yaml``, each fold's final validation metrics (``fold/<metric>`` at step K) and
    the out-of-fold scores (``cv/<metric>``). An incomplete run (``metrics["complete"]`` false, as after
    ``--only-folds``) logs nothing, so that no partial score reads as the run's, nor a fold's entry is logged again
    on resume: the one line returned says the entry waits for the remaining folds. A tracker that took the entry
    (recorded in the run directory) is not given it again when a complete run is resumed. ``trackers``: the run's,
    as :func:`run_environment` decided them; by default they are looked up.
    """
    used = integrations(cfg.report_to, experiment=experiment_name(run)) if trackers is None else trackers
    if used and not metrics.get("complete"):
        return [f"the {SUMMARY_RUN} entry waits for the remaining folds ({len(metrics.get('folds', []))} trained): "
                "it is logged once --resume has trained them all"]
    folds: _Folds = [(int(m["fold"]), _numbers(m, skip=("fold",))) for m in metrics.get("folds", [])]
    overall = _numbers(metrics.get("overall", {}))
    name = f"{experiment_name(run)}/{SUMMARY_RUN}"
    config = load_yaml(run.config_file) if run.config_file.is_file() else cfg.to_dict()  # the run's, not the call's
    writers = {"tensorboard": lambda: _tensorboard(config, run, folds, overall),
               "mlflow": lambda: _mlflow(config, run, name, folds, overall),
               "wandb": lambda: _wandb(config, name, folds, overall)}
    scores = hashlib.sha256(json.dumps([folds, overall], sort_keys=True).encode()).hexdigest()[:16]
    where, logged = [], run.tracked()
    for tracker in used:
        if logged.get(tracker, {}).get("scores") == scores:  # resumed: a second entry would read as another run's
            where.append(f"the {SUMMARY_RUN} entry was logged when the run completed, kept: "
                         f"{logged[tracker]['where']}")
            continue
        try:
            where.append(writers[tracker]())
        except Exception as err:  # noqa: BLE001 - every fold is trained and saved: a tracker must not fail the run
            logger.warning("tracking: %s did not take the CV summary (%s: %s); every fold is trained and the "
                           "run's results are saved in %s", tracker, type(err).__name__, err, run.path)
            continue
        try:
            run.record_tracked(tracker, where[-1], scores)
        except OSError as err:  # a read-only run folder: the entry is logged, and would be logged again on resume
            logger.warning("tracking: %s took the CV summary, but %s could not record it (%s)", tracker, run.path, err)
    return where


def _tensorboard(config: dict[str, Any], run: Run, folds: _Folds, overall: dict[str, float]) -> str:
    from torch.utils.tensorboard import SummaryWriter

    # an entry logged before and not recorded (a folder that is no run) is replaced: TensorBoard would draw it twice
    for old in run.tensorboard_dir().glob("events.out.tfevents.*"):
        old.unlink()
    writer = SummaryWriter(log_dir=str(run.tensorboard_dir()))
    try:
        text = yaml.safe_dump(config, sort_keys=False)
        writer.add_text("config", "".join(f"    {line}\n" for line in text.splitlines()), global_step=len(folds))
        for fold, values in folds:
            for key, value in values.items():
                writer.add_scalar(f"fold/{key}", value, global_step=fold)
        for key, value in overall.items():
            writer.add_scalar(f"cv/{key}", value, global_step=len(folds))
    finally:
        writer.close()
    return f"tensorboard --logdir {run.tensorboard_dir().parent}"


def _mlflow(config: dict[str, Any], run: Run, name: str, folds: _Folds, overall: dict[str, float]) -> str:
    import mlflow
    from mlflow.entities import Metric, Param

    client = mlflow.MlflowClient()
    experiment = mlflow_experiment(experiment_name(run))
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    tags = {"attnpool.run_dir": experiment_name(run)}
    if (parent := mlflow.active_run()) is not None:  # the caller's run, the folds nested in it: the entry too
        tags["mlflow.parentRunId"] = parent.info.run_id
    entry = client.create_run(experiment_id, run_name=name, tags=tags)
    run_id, now = entry.info.run_id, int(time.time() * 1000)
    limit = mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
    params = [Param(f"attnpool.{k}", str(v)[:limit]) for k, v in config.items()]
    values = [Metric(f"fold/{k}", v, now, fold) for fold, row in folds for k, v in row.items()]
    values += [Metric(f"cv/{k}", v, now, len(folds)) for k, v in overall.items()]
    status = "FAILED"
    try:  # whatever fails, the entry is ended: a run left RUNNING reads as a training still going
        client.log_batch(run_id, metrics=values, params=params)
        status = "FINISHED"  # the scores are in; the config file is a copy of the params, best effort
        try:
            client.log_dict(run_id, config, run.config_file.name)
        except Exception as err:  # noqa: BLE001 - e.g. no write access to the artifact store
            logger.warning("tracking: mlflow took the CV scores but not the config file (%s: %s); the run's params "
                           "hold the config", type(err).__name__, err)
    finally:
        client.set_terminated(run_id, status=status)
    return f"mlflow: experiment {experiment!r} at {mlflow.get_tracking_uri()}"


def _wandb(config: dict[str, Any], name: str, folds: _Folds, overall: dict[str, float]) -> str:
    import wandb

    owned = wandb.run is None
    entry = wandb.init(project=os.environ.get("WANDB_PROJECT"), group=os.environ.get("WANDB_RUN_GROUP"), name=name,
                       job_type="cv", config=config) if owned else wandb.run
    for fold, values in folds:
        entry.log({f"fold/{k}": v for k, v in values.items()} | {"fold": fold})
    entry.summary.update({f"cv/{k}": v for k, v in overall.items()})
    if owned:
        entry.finish()
    return f"wandb: project {os.environ.get('WANDB_PROJECT')}, group {os.environ.get('WANDB_RUN_GROUP')}"
