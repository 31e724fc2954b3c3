"""``Run``: the one owner of a train run directory's layout.

A run directory, written by ``attnpool train``::

    RUN_DIR/
      run.json  config.yaml  folds.csv  train.log
      cpc_texts.csv         a PPPM run's copy of its CPC titles (predicts without its data folder)
      fold_K/model/         save_pretrained(): config.json, model.safetensors, tokenizer
      fold_K/oof.csv        out-of-fold predictions of fold K (written last: its presence marks the fold done)
      fold_K/metrics.json   fold_K/log_history.json   fold_K/checkpoints/ (while training)
      fold_K/onnx/          the fold's ONNX graphs, once ``predict --backend onnx`` has exported them
      oof.csv  metrics.json  learning_curve.png
      tensorboard/fold_K/  tensorboard/cv/   with --report-to tensorboard: each fold's curves, the CV scores
      tracked.json          the trackers that took the run's cv entry (a complete run resumed logs it no more)

``run.json`` records the attnpool version, the layout format and the task facts that prediction needs (task,
classes, label and id columns, number of folds). Every other module reaches these files through :class:`Run`.

Which folds a command uses follows one rule (:meth:`Run.select_folds`): commands that ensemble (``predict``) use
every trained fold unless told which; commands that need one model (``explain``, ``export``) take ``fold``, by
default the first trained fold. A fold whose training did not finish is none of them (a warning, or an error where
it is named).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from attnpool._version import __version__
from attnpool.config import TrainConfig, load_yaml
from attnpool.runs.files import atomic_write, atomic_write_json, atomic_write_text, not_a_folder
from attnpool.runs.folds import choose_folds, read_fold_ids
from attnpool.runs.lock import LOCK_NAME, RunError, RunLock
from attnpool.runs.tables import read_oof
from attnpool.runs.titles import same_titles

RUN_FORMAT = 1  # bumped when the layout of a run directory changes incompatibly
RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"
FOLDS_FILE = "folds.csv"
OOF_FILE = "oof.csv"
METRICS_FILE = "metrics.json"
CONTEXT_TITLES = "cpc_texts.csv"  # a PPPM run's copy of its data folder's CPC titles
LOG_FILE = "train.log"
CURVES_FILE = "learning_curve.png"
HISTORY_FILE = "log_history.json"
ONNX_DIR = "onnx"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
TRACKED_FILE = "tracked.json"
SUMMARY_RUN = "cv"  # the name of the run-level (cross-validation) entry of a tracker

logger = logging.getLogger(__name__)


class Run:
    """A train run directory: its files, folds and models, by name.

    ``Run(path)`` reads nothing; :meth:`open` checks that ``path`` is a run of this layout version and
    :meth:`create` makes a new one (or accepts an existing one to resume or overwrite).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()  # "~/runs/x" as every path option reads it

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    # --- opening and creating
    @classmethod
    def open(cls, path: str | Path) -> Run:
        """The run at ``path``, after checking ``run.json``; :class:`RunError` when it is not a usable run."""
        run = cls(path)
        run.info()
        return run

    @classmethod
    def is_run(cls, path: str | Path) -> bool:
        """Whether ``path`` holds a ``run.json`` (of any version)."""
        return (Path(path).expanduser() / RUN_FILE).is_file()

    @classmethod
    def create(cls, path: str | Path, *, overwrite: bool = False, resume: bool = False) -> Run:
        """Create the run directory, or accept an existing one only with ``resume`` or ``overwrite``.

        ``overwrite`` deletes an existing attnpool run (a folder with ``run.json``) or an empty folder, and refuses
        any other folder so that a mistyped path cannot wipe unrelated files.
        """
        path = Path(path).expanduser()  # the folder checked is the one emptied: not a literal "~" beside it
        if problem := not_a_folder(path):
            raise RunError(problem)
        if (path / LOCK_NAME).is_file():  # a live holder first: what it has written so far says nothing yet
            RunLock(path, purpose="train").acquire().release()
        if cls.never_started(path):  # a first start stopped by bad data: start afresh (its log is appended to)
            if resume:
                raise RunError(f"--resume: {path} holds a run that stopped before it started (no {RUN_FILE}, e.g. "
                               "bad data); start it again without --resume")
            with RunLock(path, purpose="train"):  # not from under a start that is still reading its data
                for name in (CONFIG_FILE, FOLDS_FILE, CONTEXT_TITLES):
                    (path / name).unlink(missing_ok=True)
                for name in (CONFIG_FILE, FOLDS_FILE, CONTEXT_TITLES, RUN_FILE):  # killed writes' temporaries
                    for leftover in path.glob(f".{name}.*.tmp"):
                        leftover.unlink(missing_ok=True)
            return cls(path)
        if path.exists() and (names := sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)):
            if resume:  # (a lock alone: not a run yet)
                return cls.open(path)
            if not overwrite and not cls.is_run(path):  # e.g. a recipe of the user's (config.yaml): never deleted
                raise RunError(f"output directory {path} already exists and is not an attnpool run (no {RUN_FILE}; it "
                               f"holds {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); choose another "
                               "--output-dir")
            if not overwrite:
                raise RunError(f"run directory {path} already exists; pass --resume to continue it, --overwrite to "
                               "replace it, or choose another --output-dir")
            if not cls.is_run(path):
                raise RunError(f"--overwrite refuses to delete {path}: it is not an attnpool run (no {RUN_FILE}); "
                               "choose another --output-dir, or empty that folder yourself")
            with RunLock(path, purpose="overwrite"):  # held while deleting: no other process can start on it
                # run.json last: cut short, the folder stays a run that --overwrite accepts again
                for entry in sorted(path.iterdir(), key=lambda p: p.name == RUN_FILE):
                    if entry.name == LOCK_NAME:
                        continue
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
        elif resume:
            raise RunError(f"--resume: run directory {path} does not exist or is empty; start the run without "
                           "--resume")
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def never_started(cls, path: str | Path) -> bool:
        """Whether ``path`` holds only what a start leaves before ``run.json`` (its log, config, PPPM titles, folds).

        ``train`` opens its log, then saves its config (and a PPPM run's copy of its CPC titles) before the data is
        fully checked and the folds are made; a start that stops there (a mistyped column, an unreadable file, more
        folds than groups) recorded no run to resume. Only a folder provably so counts: ``train.log`` there, and a
        ``config.yaml`` as attnpool saves it (:func:`_saved_config`; never a recipe of the user's: it is deleted).
        """
        path = Path(path).expanduser()
        if not path.is_dir() or cls.is_run(path):
            return False
        own = {LOG_FILE, CONFIG_FILE, FOLDS_FILE, CONTEXT_TITLES}
        names = {p.name for p in path.iterdir()} - {LOCK_NAME}
        # ... and the temporary file of one of them or of run.json, when the start was killed writing it (.x.tmp)
        temporary = {n for n in names if n.endswith(".tmp") and any(n.startswith(f".{o}.") for o in (*own, RUN_FILE))}
        if LOG_FILE not in names or not names - temporary <= own:  # every start opens its log first
            return False
        if names & {FOLDS_FILE, CONTEXT_TITLES} and CONFIG_FILE not in names:  # saved after the config: the user's
            return False
        return CONFIG_FILE not in names or _saved_config(path / CONFIG_FILE)

    def lock(self, purpose: str) -> RunLock:
        """The lock that keeps one writer at a time on this run (a context manager)."""
        return RunLock(self.path, purpose=purpose)

    # --- run.json and config.yaml
    def info(self) -> dict[str, Any]:
        """``run.json``, refusing runs of another layout version or folders that are not runs."""
        file = self.path / RUN_FILE
        if not file.is_file():
            raise RunError(f"{self.path} is not an attnpool run directory (no {RUN_FILE}); give the --output-dir of "
                           "a train run")
        info = _read_json(file, fix="restore the file (from a copy of the run) or re-train the run")
        if not isinstance(info, dict):
            raise RunError(f"{file} is corrupt (not a JSON object); restore the file (from a copy of the run) or "
                           "re-train the run")
        if info.get("format") != RUN_FORMAT:
            raise RunError(
                f"{self.path} was written by attnpool {info.get('attnpool_version', '?')} in run format "
                f"{info.get('format')}, but this attnpool {__version__} reads format {RUN_FORMAT}; use a matching "
                "attnpool version or re-train")
        return info

    def has_info(self) -> bool:
        """Whether ``run.json`` exists."""
        return (self.path / RUN_FILE).is_file()

    def write_info(self, info: dict[str, Any]) -> None:
        """Record the version and layout of the run, plus task facts (label classes...) that prediction needs."""
        atomic_write_json(self.path / RUN_FILE, {"attnpool_version": __version__, "format": RUN_FORMAT, **info})

    @property
    def config_file(self) -> Path:
        """The resolved recipe the run was trained with, ``config.yaml``."""
        return self.path / CONFIG_FILE

    def config(self) -> TrainConfig:
        """The resolved recipe the run was trained with (``config.yaml``)."""
        if not self.config_file.is_file():
            raise RunError(f"{self.path} has no {CONFIG_FILE}; the run is incomplete: re-run training")
        cfg = TrainConfig.from_dict(load_yaml(self.config_file), where=str(self.config_file))
        kept, data = self.path / CONTEXT_TITLES, Path(cfg.data_dir or "", CONTEXT_TITLES)
        if cfg.preset == "pppm" and kept.is_file() and not same_titles(kept, data):
            cfg.data_dir = str(self.path)  # its own CPC titles: the data folder's are gone or edited since training
        return cfg

    def write_config(self, values: dict[str, Any]) -> None:
        """Save the resolved config (once: a resumed run keeps the one it started with)."""
        if not self.config_file.is_file():
            atomic_write_text(self.config_file, yaml.safe_dump(values, sort_keys=False))

    # --- folds
    @property
    def log_file(self) -> Path:
        """``train.log``."""
        return self.path / LOG_FILE

    @property
    def curves_file(self) -> Path:
        """The learning-curve plot."""
        return self.path / CURVES_FILE

    def read_fold_assignment(self) -> Any:
        """The fold id of every row (``folds.csv``), or ``None`` before it is written; RunError when it is damaged."""
        path = self.path / FOLDS_FILE
        return read_fold_ids(path, fix=f"restore it from a copy of the run, or delete the run ({self.path}) to start "
                             "over") if path.is_file() else None

    def write_fold_assignment(self, folds: Any) -> None:
        """Save the fold id of every row, once per run."""
        frame = pd.DataFrame({"row": range(len(folds)), "fold": folds})
        atomic_write(self.path / FOLDS_FILE, lambda tmp: frame.to_csv(tmp, index=False))

    def fold_dir(self, fold: int) -> Path:
        """``fold_K/``."""
        return self.path / f"fold_{fold}"

    def model_dir(self, fold: int) -> Path:
        """``fold_K/model/``, a ``from_pretrained()`` folder."""
        return self.fold_dir(fold) / "model"

    def checkpoints_dir(self, fold: int) -> Path:
        """``fold_K/checkpoints/``, absolute: the Trainer records its best checkpoint's path, read from anywhere."""
        return (self.fold_dir(fold) / CHECKPOINTS_DIR).absolute()

    def onnx_file(self, fold: int, quantize: str = "none") -> Path:
        """``fold_K/onnx/model.onnx`` (``model.int8.onnx`` quantized), exported once for the ONNX backend."""
        name = "model.onnx" if quantize == "none" else f"model.{quantize}.onnx"
        return self.fold_dir(fold) / ONNX_DIR / name

    def tensorboard_dir(self, fold: int | None = None) -> Path:
        """``tensorboard/fold_K/`` (a fold's curves) or, for ``None``, ``tensorboard/cv/`` (the run's scores).

        One folder per TensorBoard run under one log directory: ``tensorboard --logdir RUN_DIR/tensorboard``.
        """
        return self.path / TENSORBOARD_DIR / (SUMMARY_RUN if fold is None else f"fold_{fold}")

    def fold_done(self, fold: int) -> bool:
        """Whether fold ``fold`` finished: its model and its out-of-fold file (written last) are there."""
        return (self.fold_dir(fold) / OOF_FILE).is_file() and (self.model_dir(fold) / "config.json").is_file()

    def trained_folds(self) -> list[int]:
        """The folds with a saved model, in fold order (``fold_2`` before ``fold_10``), finished or not (resume's)."""
        found = (p.parent.name for p in self.path.glob("fold_*/model") if re.fullmatch(r"fold_\d+", p.parent.name))
        return sorted(int(name.split("_")[1]) for name in found)

    def fold_unfinished(self, fold: int) -> bool:
        """Whether fold ``fold``'s training stopped after its model was saved, before its results were written.

        A fold saves its model, predicts its validation rows, then writes its results, its out-of-fold file last,
        and deletes its checkpoints: a fold still training, or killed in between, has its ``checkpoints/`` and no
        ``oof.csv``; its model may not be the one training chose.
        """
        return not (self.fold_dir(fold) / OOF_FILE).is_file() and self.checkpoints_dir(fold).is_dir()

    def select_folds(self, folds: int | Sequence[int] | None = None) -> list[int]:
        """The folds a command uses: ``None`` for every trained fold, else the given ones (each must be trained).

        A fold that did not finish training (:meth:`fold_unfinished`) is left out with a warning, and refused when
        named; ``train --resume`` finishes it.
        """
        trained = self.trained_folds()
        if not trained:
            raise RunError(f"{self.path} has no trained fold (no fold_K/model/); finish training with --resume first")
        unfinished = {f: f"{self.model_dir(f)} is saved, but its {OOF_FILE} is not written and its "
                         f"{CHECKPOINTS_DIR}/ is still there" for f in trained if self.fold_unfinished(f)}
        return choose_folds(self.path, trained, unfinished, folds)

    def select_fold(self, fold: int | None = None) -> int:
        """The one fold a single-model command uses: ``fold``, by default the first trained fold."""
        return self.select_folds(fold)[0]

    # --- per-fold results
    def fold_metrics(self, fold: int) -> dict[str, Any]:
        """``fold_K/metrics.json``, or ``{}`` when the fold has none."""
        path = self.fold_dir(fold) / METRICS_FILE
        return _read_json(path) if path.is_file() else {}

    def fold_history(self, fold: int) -> list[dict[str, Any]] | None:
        """The Trainer's log history of a fold, or ``None``."""
        path = self.fold_dir(fold) / HISTORY_FILE
        return _read_json(path) if path.is_file() else None

    def fold_oof(self, fold: int) -> pd.DataFrame:
        """A finished fold's out-of-fold predictions; :class:`RunError` naming the file when it is damaged."""
        return read_oof(self.fold_dir(fold) / OOF_FILE, fix=_FOLD_FIX)

    def write_fold_results(self, fold: int, metrics: dict[str, Any], history: list[dict[str, Any]],
                           oof: pd.DataFrame) -> None:
        """Write a fold's metrics, log history and out-of-fold file, then delete its checkpoints.

        The out-of-fold file is written last: its presence marks the fold done.
        """
        folder = self.fold_dir(fold)
        atomic_write_json(folder / HISTORY_FILE, history)
        atomic_write_json(folder / METRICS_FILE, metrics)
        atomic_write(folder / OOF_FILE, lambda tmp: oof.to_csv(tmp, index=False))
        shutil.rmtree(self.checkpoints_dir(fold), ignore_errors=True)

    # --- the run's results
    def metrics(self) -> dict[str, Any]:
        """The run's ``metrics.json`` (per-fold and overall metrics, ``complete``, seconds)."""
        path = self.path / METRICS_FILE
        if not path.is_file():
            raise RunError(f"{self.path} has no {METRICS_FILE}: the run has not finished a fold yet")
        return _read_json(path, fix="re-run `attnpool train --resume` on the run: it rewrites "
                          f"{METRICS_FILE} from the trained folds")

    def has_metrics(self) -> bool:
        """Whether the run wrote its ``metrics.json``."""
        return (self.path / METRICS_FILE).is_file()

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """Write the run's ``metrics.json``."""
        atomic_write_json(self.path / METRICS_FILE, metrics)

    def tracked(self) -> dict[str, dict[str, str]]:
        """The trackers that took the run's ``cv`` entry, ``{tracker: {"where": ..., "scores": ...}}`` (tracked.json).

        ``where`` says where the entry went, ``scores`` which results it holds (:meth:`record_tracked`). ``{}`` when
        nothing is recorded, and when the file cannot be read (a warning): it must not stop a run whose folds are all
        trained; at worst a tracker takes the ``cv`` entry a second time.
        """
        path = self.path / TRACKED_FILE
        if not path.is_file():
            return {}
        try:
            tracked = _read_json(path, fix="it is rewritten when a tracker next takes the run's cv entry")
        except (RunError, OSError) as err:
            logger.warning("%s; reading it as no tracker recorded", err)
            return {}
        if not isinstance(tracked, dict):
            logger.warning("%s is corrupt (not a JSON object); reading it as no tracker recorded", path)
            return {}
        return {str(tracker): {"where": str(entry.get("where")), "scores": str(entry.get("scores"))}
                for tracker, entry in tracked.items() if isinstance(entry, dict)}

    def record_tracked(self, tracker: str, where: str, scores: str) -> None:
        """Record that ``tracker`` took the run's ``cv`` entry: ``where`` it went, a key of the ``scores`` it holds.

        A fold re-trained since changes the scores, and the entry is logged again.
        """
        if self.has_info():  # a run directory's (a summary logged for a bare folder is not recorded)
            atomic_write_json(self.path / TRACKED_FILE, self.tracked() | {tracker: {"where": where, "scores": scores}})

    def oof(self) -> pd.DataFrame:
        """The run's out-of-fold predictions, every finished fold, sorted by row."""
        path = self.path / OOF_FILE
        if not path.is_file():
            raise RunError(f"{self.path} has no {OOF_FILE}: the run has not finished a fold yet")
        return read_oof(path, fix=f"re-run `attnpool train --resume` on the run: it rewrites {OOF_FILE} from the "
                        "trained folds")

    def write_oof(self, oof: pd.DataFrame) -> None:
        """Write the run's ``oof.csv``."""
        atomic_write(self.path / OOF_FILE, lambda tmp: oof.to_csv(tmp, index=False))


_FOLD_FIX = "re-train that fold (delete the fold folder and run train --resume) or restore the file"


def _read_json(path: Path, fix: str = _FOLD_FIX) -> Any:
    """A JSON file of the run, or a RunError naming it and ``fix`` when it cannot be parsed (cut short, edited)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunError(f"{path} is corrupt ({err}); {fix}") from err


def _saved_config(file: Path) -> bool:
    """Whether ``file`` is a config.yaml as attnpool saves it: the per-call keys, in ``yaml.safe_dump``'s text."""
    try:
        text = file.read_text(encoding="utf-8")
        values = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return (isinstance(values, dict) and {"overwrite", "resume", "only_folds"} <= set(values)
            and text in (yaml.safe_dump(values, sort_keys=False), yaml.safe_dump(values)))  # older: sorted keys
