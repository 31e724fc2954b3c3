"""``--report-to``'s trackers: transformers' integrations, which ones are installed and usable.

:mod:`attnpool.training.tracking` names and groups their runs.
"""

from __future__ import annotations

import logging

from transformers import integrations as hf_integrations

logger = logging.getLogger("attnpool.train")
# --report-to's trackers (transformers' integrations; attnpool.training.tracking names and groups their runs)
TRACKERS = ("tensorboard", "mlflow", "wandb")
_INSTALLED = {"tensorboard": hf_integrations.is_tensorboard_available,
              "mlflow": hf_integrations.is_mlflow_available,
              "wandb": hf_integrations.is_wandb_available}
_LEFT_OUT: set[str] = set()  # why --report-to all left MLflow out, warned of once per process


def integrations(report_to: str) -> list[str]:
    """The ``Trainer`` integrations of ``--report-to``: ``[]`` for none, every usable installed tracker for ``all``.

    Raises:
        ValueError: An unknown tracker, one that is not installed (with the command that installs it), or MLflow
            whose tracking store cannot be opened (:func:`mlflow_store_error`; ``all`` leaves it out, warning once).
    """
    if report_to in (None, "none"):
        return []
    if report_to == "all":
        used = [name for name in TRACKERS if _INSTALLED[name]()]
        if "mlflow" in used and (error := mlflow_store_error()):
            used.remove("mlflow")
            if error not in _LEFT_OUT:  # asked again at every fold
                _LEFT_OUT.add(error)
                logger.warning("tracking: --report-to all leaves out mlflow: %s", error)
        return used
    if report_to not in TRACKERS:
        raise ValueError(f"report_to must be one of none, {', '.join(TRACKERS)}, all; got {report_to!r}")
    if not _INSTALLED[report_to]():
        raise ValueError(f"--report-to {report_to}: {report_to} is not installed; pip install "
                         f"'attnpool[{report_to}]'")  # each tracker's extra is named after it
    if report_to == "mlflow" and (error := mlflow_store_error()):  # else the first fold fails, its folder made
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
