"""``--report-to``'s trackers: transformers' integrations, which ones are installed and usable.

:mod:`attnpool.training.tracking` names and groups their runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from transformers import integrations as hf_integrations

logger = logging.getLogger("attnpool.train")
# --report-to's trackers (transformers' integrations; attnpool.training.tracking names and groups their runs)
TRACKERS = ("tensorboard", "mlflow", "wandb")
_INSTALLED = {"tensorboard": hf_integrations.is_tensorboard_available,
              "mlflow": hf_integrations.is_mlflow_available,
              "wandb": hf_integrations.is_wandb_available}
_LEFT_OUT: set[tuple[str | None, str]] = set()  # (run, why) --report-to all left MLflow out: warned once per run
# For the up-front experiment lookup only: a tracking server out of reach is said at once, not after minutes of retries
# (two quick retries: one 503 or 429 of a server that works is not a server out of reach)
_QUICK_LOOKUP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def integrations(report_to: str, experiment: str | None = None) -> list[str]:
    """The ``Trainer`` integrations of ``--report-to``: ``[]`` for none, every usable installed tracker for ``all``.

    ``experiment``: the run's own MLflow experiment (its folder's absolute path); given, the experiment the folds
    will use is looked up too (:func:`mlflow_experiment_error`), before the run folder is made.

    Raises:
        ValueError: An unknown tracker, one that is not installed (with the command that installs it), or MLflow
            whose tracking store cannot be opened (:func:`mlflow_store_error`) or whose experiment cannot be used
            (:func:`mlflow_experiment_error`); ``all`` leaves MLflow out then, warning once.
    """
    if report_to in (None, "none"):
        return []

    def mlflow_error() -> str | None:
        return mlflow_store_error() or (mlflow_experiment_error(experiment) if experiment else None)

    if report_to == "all":
        used = [name for name in TRACKERS if _INSTALLED[name]()]
        if "mlflow" in used and (error := mlflow_error()):
            used.remove("mlflow")
            if (experiment, error) not in _LEFT_OUT:  # asked again as the run opens and resumes
                _LEFT_OUT.add((experiment, error))
                logger.warning("tracking: --report-to all leaves out mlflow: %s", error)
        return used
    if report_to not in TRACKERS:
        raise ValueError(f"report_to must be one of none, {', '.join(TRACKERS)}, all; got {report_to!r}")
    if not _INSTALLED[report_to]():
        raise ValueError(f"--report-to {report_to}: {report_to} is not installed; pip install "
                         f"'attnpool[{report_to}]'")  # each tracker's extra is named after it
    if report_to == "mlflow" and (error := mlflow_error()):  # else the first fold fails, its folder made
        raise ValueError(f"--report-to mlflow: {error}")
    return [report_to]


def mlflow_store_error() -> str | None:
    """Why MLflow cannot open its tracking store as transformers' callback will; ``None`` if it can (no server asked).

    MLflow 3's default, ``sqlite:///mlflow.db``, needs SQLAlchemy, which mlflow-skinny lacks.
    """
    import mlflow

    try:
        mlflow.MlflowClient()
    except Exception as err:  # noqa: BLE001 - whatever keeps the store shut, transformers' callback fails on it
        return (f"MLflow cannot open its tracking store {mlflow.get_tracking_uri()} ({type(err).__name__}: "
                f"{str(err).strip().split('. ')[0]}); pip install mlflow (mlflow-skinny has no SQLAlchemy for the "
                "default sqlite store), or set MLFLOW_TRACKING_URI to a server (http://HOST:PORT) or a folder "
                "(file:./mlruns, with MLFLOW_ALLOW_FILE_STORE=true)")
    return None


def cfg_trackers(cfg: Any) -> list[str]:
    """:func:`integrations` of ``cfg.report_to`` for the run in ``cfg.output_dir`` (its MLflow experiment checked).

    For a fold trained outside :func:`attnpool.train`; the recipe decides once per run
    (:func:`attnpool.training.tracking.run_environment`) and hands its folds that list.
    """
    folder = getattr(cfg, "output_dir", None)
    return integrations(cfg.report_to, experiment=Path(folder).resolve().as_posix() if folder else None)


def mlflow_experiment(default: str) -> str:
    """The MLflow experiment a run's folds go to (``default``, the run directory's, unless another is picked).

    ``MLFLOW_EXPERIMENT_NAME``; else the one ``MLFLOW_EXPERIMENT_ID`` names; else, called inside an MLflow run of
    the caller's, that run's experiment (the folds are nested in it); else ``default``.

    The id is turned into its experiment's name: transformers' callback picks an experiment by name only, and its
    ``set_experiment(name)`` would otherwise send the folds to the run's own experiment, the id silently ignored.
    """
    import mlflow

    if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
        return os.environ["MLFLOW_EXPERIMENT_NAME"]
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return mlflow.MlflowClient().get_experiment(os.environ["MLFLOW_EXPERIMENT_ID"]).name
    if (active := mlflow.active_run()) is not None:
        return mlflow.MlflowClient().get_experiment(active.info.experiment_id).name
    return default


def mlflow_experiment_error(default: str) -> str | None:
    """Why the folds could not log to the experiment :func:`mlflow_experiment` picks; ``None`` if they can.

    ``MLFLOW_EXPERIMENT_ID`` naming no experiment, a deleted experiment (transformers' callback cannot set it), or a
    tracking server that does not answer: each failed inside fold 0, after the run folder was made (or emptied).
    One lookup, with two quick retries; an experiment that does not exist yet is fine (the first fold creates it).
    """
    import mlflow

    uri = mlflow.get_tracking_uri()
    wanted = None if os.environ.get("MLFLOW_EXPERIMENT_NAME") else os.environ.get("MLFLOW_EXPERIMENT_ID")
    try:
        with scoped_environ(_QUICK_LOOKUP):
            return _experiment_error(mlflow.MlflowClient(), default, wanted, uri)
    except Exception as err:  # noqa: BLE001 - a server out of reach, refusing...: the first fold would fail on it
        return (f"MLflow cannot reach its tracking store {uri} ({type(err).__name__}: "
                f"{str(err).strip().splitlines()[0][:200]}); start the server, or set MLFLOW_TRACKING_URI to "
                "one that answers")


def _experiment_error(client: Any, default: str, wanted: str | None, uri: str) -> str | None:
    """:func:`mlflow_experiment_error`'s lookup; MLflow's errors other than an id naming nothing are raised."""
    import mlflow

    if wanted:
        try:
            found = client.get_experiment(wanted)
        except mlflow.exceptions.MlflowException as err:
            if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise
            return (f"MLFLOW_EXPERIMENT_ID={wanted} names no experiment at {uri}; set it to the id of an "
                    "existing experiment, or unset it (each run then has an experiment of its own)")
    else:
        found = client.get_experiment_by_name(mlflow_experiment(default))
    if found is not None and found.lifecycle_stage == "deleted":
        return (f"the MLflow experiment {found.name!r} (id {found.experiment_id}) at {uri} is deleted, and a "
                f"deleted experiment takes no runs; restore it (in the MLflow UI, or mlflow experiments restore "
                f"--experiment-id {found.experiment_id}), delete it for good (mlflow gc --experiment-ids "
                f"{found.experiment_id}), or set MLFLOW_EXPERIMENT_NAME to another experiment")
    return None


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str], keep: tuple[str, ...] = ()) -> Iterator[None]:
    """Set ``values`` in ``os.environ``; on exit put back every variable of ``keep`` (and ``values``) as it was."""
    saved = {name: os.environ.get(name) for name in {*keep, *values}}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
