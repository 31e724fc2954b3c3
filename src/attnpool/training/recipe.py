"""``train``: the PPPM baseline's k-fold recipe on transformers' ``Trainer``, with a resumable run directory.

Each fold trains a fresh :class:`~attnpool.AttnPoolForSequenceClassification` with the ``Trainer``
(:mod:`attnpool.training.fold`; so ``torchrun`` and ``accelerate launch`` run it on several GPUs or nodes
unchanged), evaluates every ``eval_steps`` (or epoch), keeps the best checkpoint, and writes its model and
out-of-fold predictions into the run directory (:class:`~attnpool.runs.Run` owns its layout).

A run killed at any point resumes with ``resume=True``: finished folds are skipped, an interrupted fold continues
from its last checkpoint, and the folds are the ones saved with the run. One process writes a run at a time: a
second ``train`` on a directory that a live process is writing is refused with the holder's PID and host.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import AutoConfig, AutoModel

from attnpool.allocator import keep_freed_memory
from attnpool.config import TrainConfig, load_yaml
from attnpool.config_checks import check_output_flags, check_overwrite_inputs, same_pooler
from attnpool.data.sampling import earlier_draw
from attnpool.data.task import TaskData, load_task
from attnpool.metrics import standardised_per_group, task_metrics
from attnpool.model.encoders import check_encoder_reachable, encoder_layers, encoder_position_limit, is_decoder_only
from attnpool.precision import precision_reason, training_precision
from attnpool.runs.run import CONTEXT_TITLES, FOLDS_FILE, Run, RunError
from attnpool.runs.tables import oof_scores
from attnpool.runs.titles import keep_titles
from attnpool.tasks import primary_metric
from attnpool.training.arguments import accelerate_precision_note
from attnpool.training.curves import plot_learning_curves, summary_table
from attnpool.training.distributed import on_every, on_main, process_state, use_cpu
from attnpool.training.fold import train_fold
from attnpool.training.progress import SUMMARY, quiet_third_party
from attnpool.training.run_log import EarlyRecords, attach_log_file, detach_log_file, log_ending
from attnpool.training.saved_paths import PATH_OPTIONS, absolute_paths, find_moved_paths
from attnpool.training.tracking import TRACKERS, experiment_name, integrations, log_summary, run_environment

logger = logging.getLogger("attnpool.train")
_THIS_CALL = ("resume", "overwrite", "output_dir", "only_folds", "report_to")  # what a resumed run takes from the call
# This call's choices, saved as their defaults: a config.yaml reused (--config RUN/config.yaml --output-dir OTHER)
# replaced OTHER without --overwrite, or trained fold 0 alone (the config module drops them from older runs' files)
PER_CALL_SAVED = {"overwrite": False, "resume": False, "only_folds": None}
DEFAULT_MAX_LENGTH = TrainConfig.__dataclass_fields__["max_length"].default  # capped, not refused, where too long


@dataclass
class TrainResult:
    """What a run produced: its directory, its metrics (per fold and overall) and the out-of-fold predictions."""

    run_dir: Path
    metrics: dict[str, Any]
    oof: Any = field(repr=False)  # pandas.DataFrame: the repr counts its rows (tens of thousands in a notebook)
    seconds: float

    def __repr__(self) -> str:
        return (f"TrainResult(run_dir={self.run_dir!r}, overall={self.metrics.get('overall')!r}, "
                f"complete={self.complete}, oof=<{len(self.oof)} rows>, seconds={self.seconds:.1f})")

    @property
    def overall(self) -> dict[str, Any]:
        """The out-of-fold scores over every finished fold (``metrics["overall"]``)."""
        return self.metrics.get("overall", {})

    @property
    def complete(self) -> bool:
        """Whether every fold of the run is trained (``only_folds`` can leave some for later calls)."""
        return bool(self.metrics.get("complete"))


def embeddings_line(cfg: TrainConfig) -> str:
    """Whether the encoder's word embeddings train, and why (a line of the log)."""
    if cfg.freeze_layers is not None:
        return f"frozen, the whole embedding layer and the bottom {cfg.freeze_layers} encoder layers (--freeze-layers)"
    if cfg.freeze_word_embeddings is not None:
        return "frozen (--freeze-word-embeddings)" if cfg.freeze_word_embeddings else (
            "trained (--no-freeze-word-embeddings)")
    if cfg.resolved_freeze_word_embeddings():
        return ("frozen (default: the score is the same and the optimizer skips them; "
                "--no-freeze-word-embeddings trains them)")
    return "trained (default with --adversarial fgm, which perturbs them along their gradient)"


def train(cfg: TrainConfig, callbacks: list | None = None, given: Mapping[str, Any] | None = None) -> TrainResult:
    """Run the recipe: k folds (or one train/valid split), out-of-fold predictions, metrics, plot.

    Started by ``torchrun`` or ``accelerate launch``, every process calls it: the ``Trainer`` trains on all of them
    (DDP, or FSDP / DeepSpeed as the launcher is configured), the main process alone writes the run directory (and
    holds its lock), and every process returns the same result.

    Args:
        cfg: The options; see :class:`~attnpool.config.TrainConfig`. With ``resume``, the run's saved config is
            used instead (only ``output_dir`` and ``only_folds`` are read from ``cfg``).
        callbacks: Extra ``transformers.TrainerCallback`` objects for every fold's ``Trainer``.
        given: The options the caller set explicitly (the CLI's flags, the API's keywords): with ``resume``, those
            the saved config overrides are named in a warning.

    Returns:
        A :class:`TrainResult` with the run directory, the metrics and the out-of-fold predictions.

    Raises:
        attnpool.data.DataError: Bad input data (missing file or column, bad labels...), before any training.
        RunError: The run directory exists (without resume/overwrite), holds this call's data (overwrite), is not
            resumable (its data changed), or another process is writing it.
        ValueError: A bad option (:meth:`TrainConfig.validate`), or overwrite and resume together, before the run
            directory is made.
    """
    started = time.perf_counter()
    lock, early = None, EarlyRecords()  # early: what is logged before train.log is attached, written into it then

    def open_run() -> tuple[Run, TrainConfig]:
        nonlocal lock
        check_output_flags(cfg)  # resume too: --resume --overwrite resumed, though the overwrite was asked for
        if not cfg.resume:  # a bad option stops here, before the folder is made or an old run overwritten
            check_encoder_fit(cfg.validate())
        check_overwrite_inputs(cfg)  # --overwrite empties the old run first: none of this call's inputs may lie in it
        run = Run.create(cfg.output_dir, overwrite=cfg.overwrite, resume=cfg.resume)
        lock = run.lock("train --resume" if cfg.resume else "train").acquire()
        try:
            return run, _resumed_config(run, cfg, given).validate()
        except BaseException:
            lock.release()
            raise

    try:  # a tracker not installed, an MLflow experiment it cannot log to: refused before anything is written
        asked = cfg.report_to, integrations(cfg.report_to, experiment=Path(cfg.output_dir).resolve().as_posix())
        main = process_state().is_main_process  # joins the launcher's process group, as the Trainer will
        run, cfg = on_main(open_run)  # the other processes get the main one's config, or its error
    except BaseException:
        early.close()
        raise
    package_logger = logging.getLogger("attnpool")
    level = package_logger.level
    handler = None
    try:  # from here on the lock is released and the logger restored whatever fails (train.log unwritable too)
        handler = attach_log_file(run.log_file, early) if main else None
        if not main:  # the progress lines and warnings once, the main process's (each process reads the same data)
            package_logger.setLevel(logging.ERROR)
        # the trackers' experiment (restored after); then third-party bars and messages (the trackers' too: imported
        # by now, their own handlers exist to be quieted) to train.log, not the console
        decided = asked[1] if cfg.report_to == asked[0] else None  # None: a resumed run's saved trackers
        with run_environment(cfg, run, decided) as trackers, quiet_third_party(handler):  # decided once, for all
            device = "cpu" if use_cpu() else "cuda"
            training_precision(cfg.precision, device)  # fp16 on a CPU: refused before the data loads
            data = on_every(lambda: load_task(cfg, log=logger))  # also resolves the preset and template into cfg
            folds, done = on_main(lambda: _record_run(run, cfg, data))  # every process trains on the saved folds
            logger.info("precision: %s", precision_reason(cfg.precision, device))
            if note := accelerate_precision_note(cfg):  # once per run, not per fold's TrainingArguments
                logger.warning("%s", note)
            if use_cpu():  # the trainer raises it further for a model whose largest gradient needs more
                logger.info("%s", keep_freed_memory())
            logger.info("word embeddings: %s", embeddings_line(cfg))
            fold_ids = sorted(set(int(f) for f in folds[folds >= 0]))
            for fold in fold_ids:
                if fold in done:
                    logger.info("fold %d: already done, kept (%s)", fold, run.fold_dir(fold))
                    continue
                if cfg.only_folds is not None and fold not in cfg.only_folds:
                    continue
                train_idx, valid_idx = data.split(folds, fold)
                logger.info("fold %d (%d of %d): %d train / %d valid rows", fold, fold + 1, len(fold_ids),
                            len(train_idx), len(valid_idx))
                train_fold(cfg, data, fold, train_idx, valid_idx, run, callbacks, trackers)
            result = on_main(lambda: _summarise(cfg, data, run, fold_ids, time.perf_counter() - started))
            for line in on_main(lambda: log_summary(cfg, run, result.metrics, trackers)):
                logger.info("tracking: %s", line)
    except BaseException as err:
        log_ending(handler, err, run.path)  # train.log's last record: the console says the error once
        raise
    finally:
        try:
            detach_log_file(handler, early)  # never raises: a full disk's last flush would hide the run's error
        finally:
            package_logger.setLevel(level)  # the caller's level: attach_log_file raised it to INFO
            if lock is not None:
                lock.release()
    return result


def check_encoder_fit(cfg: TrainConfig) -> None:
    """Refuse options the encoder cannot take, read from its config before the run folder is made.

    ``max_length`` over its position table, ``freeze_layers`` / ``reinit_layers`` over its layers, ``pooling_layers``
    indices outside its hidden states: each failed in fold 0 (a traceback for ``max_length``), leaving a run folder a
    corrected command was refused on. The encoder is built on the meta device (nothing allocated, no weights read);
    where its config cannot be read (an offline hub name), nothing is checked here and the fold says what fails.
    """
    check_encoder_reachable(cfg.model)  # a mistyped folder, a hub name that cannot be reached: said now, clearly
    try:
        try:  # a local folder or a cached hub name, without asking the hub (offline, it retries for seconds)
            config = AutoConfig.from_pretrained(cfg.model, local_files_only=True)
        except OSError:
            config = AutoConfig.from_pretrained(cfg.model)  # the fold downloads it anyway
        with torch.device("meta"):
            encoder = AutoModel.from_config(config)
    except Exception:  # noqa: BLE001 - any failure here is the fold's to report, with its own message
        return
    where = f"the encoder {cfg.model}"
    limit = encoder_position_limit(encoder, is_decoder_only(config))
    if limit is not None and DEFAULT_MAX_LENGTH != cfg.max_length > limit:  # the default is capped, at the end
        raise ValueError(f"max_length {cfg.max_length} is over what {where} reads: {limit} tokens (its position "
                         f"embeddings); give --max-length {limit} or less")
    try:
        count = len(encoder_layers(encoder))
    except ValueError as err:
        if cfg.freeze_layers is not None or cfg.reinit_layers or cfg.llrd < 1:
            raise ValueError(f"{where}: {err}") from None
        count = None
    for name in ("freeze_layers", "reinit_layers"):
        if count is not None and (getattr(cfg, name) or 0) > count:
            raise ValueError(f"{name} {getattr(cfg, name)} is over the {count} layers of {where}; give "
                             f"--{name.replace('_', '-')} {count} or less")
    if count is not None and cfg.reinit_layers and cfg.freeze_layers is not None and (
            cfg.reinit_layers + cfg.freeze_layers > count):
        raise ValueError(f"reinit_layers {cfg.reinit_layers} and freeze_layers {cfg.freeze_layers} overlap on the "
                         f"{count} layers of {where}: a re-initialised layer would stay random, frozen; keep "
                         f"reinit_layers + freeze_layers <= {count}")
    if cfg.adversarial == "awp" and count is not None and (cfg.freeze_layers or 0) >= count:
        raise ValueError(f"adversarial=awp perturbs the weights of the encoder layers being trained, and freeze_layers "
                         f"{cfg.freeze_layers} freezes all {count} layers of {where}; give --freeze-layers "
                         f"{count - 1} or less, or train without --adversarial")
    depth = getattr(config, "num_hidden_layers", None)
    if isinstance(cfg.pooling_layers, list) and isinstance(depth, int) and (
            outside := [i for i in cfg.pooling_layers if not -(depth + 1) <= i <= depth]):
        raise ValueError(f"pooling_layers {cfg.pooling_layers}: {outside} outside [{-(depth + 1)}, {depth}], the "
                         f"indices into the {depth + 1} hidden states of {where} (0 the embedding output, {depth} "
                         "or -1 the last layer); fix --pooling-layers")
    if limit is not None and cfg.max_length > limit:  # the default, over a small encoder's positions
        logger.warning("max_length: %d tokens, what %s reads (its position embeddings), not the default %d",
                       limit, where, cfg.max_length)
        cfg.max_length = limit


def _resumed_config(run: Run, cfg: TrainConfig, given: Mapping[str, Any] | None = None) -> TrainConfig:
    """On resume the run's saved config wins (the same data, folds and recipe), whatever else the call says.

    Only ``only_folds`` comes from the call: which folds to train now is a choice of this call, not part of the
    run's recipe; so does ``report_to`` where the call gives it (where to log is not the recipe either: a tracker
    added on resume logs the folds trained from now on, and the ``cv`` entry if it has not had it). The ``given``
    options the saved config overrides are named in a warning; a saved path that no longer exists (a moved run) is
    the call's (:func:`~attnpool.training.saved_paths.find_moved_paths`).

    Raises:
        RunError: The run has no ``config.yaml`` to resume with, or a saved path that no longer exists and the call
            gives no other.
        ValueError: The saved config reports to a tracker not installed here (and the call gives no ``report_to``).
    """
    if not cfg.resume:
        return cfg
    if not run.config_file.is_file():  # the run started (Run.create refuses a resume of one that did not)
        raise RunError(f"--resume: {run.config_file} is missing: it holds the recipe the run's folds were trained "
                       "with, and this call's options would train the remaining folds otherwise. Restore the file "
                       "(from a backup or a copy of the run), or start a new run (another --output-dir, or "
                       "--overwrite)")
    values = load_yaml(run.config_file)
    find_moved_paths(run, values, given or {})  # a run moved with its data: the call says where they are now
    _warn_of_overridden(run, values, given or {})
    # A run started before freeze_word_embeddings existed trained them: its checkpoints' optimizer state has them.
    values.setdefault("freeze_word_embeddings", values.get("freeze_layers") is not None)
    # Options earlier versions accepted and ignored, now refused: the run trained without them, and resumes so.
    if values.get("task") in ("binary", "multiclass") and values.get("loss") not in (None, "cross_entropy"):
        logger.warning("%s: loss %s was ignored by this classification run (it trains cross_entropy); resuming "
                       "without it", run.config_file, values["loss"])
        values["loss"] = None
    if values.get("adversarial") is None and values.get("adversarial_start", 1.0) != 1.0:
        values["adversarial_start"] = 1.0  # without adversarial training it never applied
    values.update({"resume": True, "overwrite": False, "output_dir": cfg.output_dir, "only_folds": cfg.only_folds})
    if "report_to" in (given or {}):
        values["report_to"] = cfg.report_to
    else:
        _check_saved_trackers(run, values.get("report_to"))
    return TrainConfig.from_dict(values, where=str(run.config_file))


def _check_saved_trackers(run: Run, report_to: Any) -> None:
    """Refuse a tracker of the saved config that cannot be used here, naming the file it comes from and the reason."""
    try:
        integrations(report_to, experiment=experiment_name(run))  # a deleted experiment: refused now, not in fold 0
    except ValueError as err:
        if report_to not in TRACKERS:
            raise  # not a tracker at all: the config's own check says so
        reason = str(err).removeprefix(f"--report-to {report_to}: ")  # not installed, MLflow's store shut...
        raise ValueError(f"--resume: the run's saved config {run.config_file} has report_to: {report_to}, and "
                         f"{reason}; or resume without it: --resume --report-to none") from None


def _warn_of_overridden(run: Run, saved: dict[str, Any], given: Mapping[str, Any]) -> None:
    """Warn of the options given with ``resume`` that the run's saved config overrides (it wins, see the README)."""

    def normalised(key: str, value: Any) -> Any:  # as the config holds it: --pooling-layers last is "last"
        try:
            return getattr(TrainConfig.from_dict({key: value}), key)
        except (ValueError, TypeError):
            return value

    def same(key: str, value: Any) -> bool:
        if key == "pooling":  # Attention is attention, as make_config reads it
            return same_pooler(value, saved.get(key))
        a_path = key in PATH_OPTIONS and value is not None and saved.get(key) is not None
        if a_path and Path(value).expanduser().exists():
            return Path(value).expanduser().resolve() == Path(saved[key]).expanduser().resolve()
        return normalised(key, value) == normalised(key, saved.get(key))

    ignored = [f"{key}={value!r} (the run has {saved.get(key)!r})" for key, value in given.items()
               if key not in _THIS_CALL and key in saved and not same(key, value)]
    if ignored:
        logger.warning("--resume: the run's saved config (%s) wins, so these options are ignored: %s; to train with "
                       "them, start a new run (another --output-dir, or --overwrite)", run.config_file,
                       ", ".join(ignored))


def _record_run(run: Run, cfg: TrainConfig, data: TaskData) -> tuple[np.ndarray, list[int]]:
    """Save the resolved config, the folds and the run's info (main process); the folds and the finished ones."""
    run.write_config(absolute_paths({**cfg.to_dict(), **PER_CALL_SAVED}))
    keep_context_titles(run, cfg)
    folds = run.read_fold_assignment()
    if folds is None:
        folds = data.make_folds(cfg)
        run.write_fold_assignment(folds)
    elif len(folds) != data.num_rows:
        raise RunError(f"--resume: the run's saved folds ({run.path / FOLDS_FILE}) have {len(folds)} rows but the "
                       f"data ({cfg.train_file or cfg.data_dir}) has {data.num_rows}: the data changed since the run "
                       "started. Put the data back, or start a new run (another --output-dir, or --overwrite)")
    info = {"task": cfg.task, "classes": data.classes, "label": data.label_name, "id_col": data.id_col,
            "num_folds": int(folds.max()) + 1 if len(folds) else 0, "data_sha256": data.fingerprint(),
            "precision": training_precision(cfg.precision, "cpu" if use_cpu() else "cuda")}
    if cfg.group_context:  # the folds tokenise the rows, so data_sha256 is the labels' alone: the texts' too
        info["texts_sha256"] = data.text_fingerprint()
    if cfg.resume and run.has_info():
        previous = run.info()
        if previous.get("precision", info["precision"]) != info["precision"]:  # config.yaml may say auto: resolved
            logger.warning("--resume: the run started in %s and goes on in %s on this machine (precision: %s in "
                           "%s); the folds trained so far and those to come differ in precision. To keep one, set "
                           "precision: %s there", previous["precision"], info["precision"], cfg.precision,
                           run.config_file, previous["precision"])
        if previous.get("classes") != info["classes"]:
            raise ValueError(f"--resume: the labels changed since the run started ({previous.get('classes')} "
                             f"-> {info['classes']}); start a new run")
        if any(previous.get(key, info.get(key)) != info.get(key)  # runs before them had none
               for key in ("data_sha256", "texts_sha256")):
            raise ValueError("--resume: the training data changed since the run started (same number of rows, "
                             "other texts or labels): its finished folds learned the old rows. Put the data back, "
                             "or start a new run" + earlier_draw(cfg, data.num_rows))
    run.write_info(info)
    done = [int(f) for f in sorted(set(folds[folds >= 0])) if run.fold_done(int(f))]
    for fold in done:  # a done fold whose checkpoint deletion was cut short: gigabytes nothing will read again
        run.fold_oof(fold)  # a damaged one is refused now, not at the summary after the other folds have trained
        shutil.rmtree(run.checkpoints_dir(fold), ignore_errors=True)
    return folds, done


def keep_context_titles(run: Run, cfg: TrainConfig) -> None:
    """Keep a copy of a PPPM run's ``cpc_texts.csv`` (12 kB) in the run; refuse a resume with other titles.

    With it the run predicts, serves and explains wherever it is copied to, without its data folder, and with the
    titles it learned (see :meth:`~attnpool.runs.Run.config` and :func:`attnpool.runs.titles.keep_titles`).
    """
    if cfg.preset == "pppm":
        keep_titles(run.path / CONTEXT_TITLES, Path(cfg.data_dir or "", CONTEXT_TITLES))


def _summarise(cfg: TrainConfig, data: TaskData, run: Run, fold_ids: list[int], seconds: float) -> TrainResult:
    """Gather the finished folds into the run's out-of-fold file, metrics and plot (main process)."""
    finished = [f for f in fold_ids if run.fold_done(f)]  # a fold writes its metrics before its predictions
    fold_metrics = [m for m in (run.fold_metrics(f) for f in finished) if m]
    frames = [run.fold_oof(f) for f in finished]
    oof = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    overall: dict[str, Any] = {}
    if len(oof):
        oof = oof.sort_values("row").reset_index(drop=True)
        scores = oof_scores(oof, cfg.task, data.classes)
        target = data.labels[oof["row"].to_numpy()]
        overall = task_metrics(cfg.task, target, scores)
        if cfg.loss == "pearson" and oof["fold"].nunique() > 1 and np.ndim(scores) == 1:
            # the loss ignores each fold model's scale and offset: pooled as predicted, the rows understate them
            standardised = standardised_per_group(scores, oof["fold"].to_numpy())
            overall["pearson_folds_standardised"] = task_metrics(cfg.task, target, standardised)["pearson"]
        overall["n"] = len(oof)
        run.write_oof(oof)
    metrics = {"folds": fold_metrics, "overall": overall, "complete": len(fold_metrics) == len(fold_ids),
               "seconds": round(seconds, 1)}  # this call's; a fold's train_seconds count the calls it resumed from
    if fold_metrics and all("train_seconds" in m for m in fold_metrics):
        metrics["train_seconds"] = round(sum(m["train_seconds"] for m in fold_metrics), 1)
    run.write_metrics(metrics)
    plot_learning_curves(run, fold_ids, primary_metric(cfg.task)[0])
    logger.log(SUMMARY, "\n%s", summary_table(cfg, run, metrics, seconds))  # what --quiet keeps
    return TrainResult(run_dir=run.path, metrics=metrics, oof=oof, seconds=seconds)


__all__ = ["RunError", "TrainResult", "train"]
