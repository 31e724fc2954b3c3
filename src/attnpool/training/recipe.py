"""``train``: the PPPM baseline's k-fold recipe on transformers' ``Trainer``, with a resumable run directory.

Each fold trains a fresh :class:`~attnpool.AttnPoolForSequenceClassification` with the ``Trainer`` (so ``torchrun`` and
``accelerate launch`` run it on several GPUs or nodes unchanged), evaluates every ``eval_steps`` (or epoch), keeps
the best checkpoint, and writes::

    RUN_DIR/
      run.json  config.yaml  folds.csv  train.log
      fold_K/model/         save_pretrained(): config.json, model.safetensors, tokenizer
      fold_K/oof.csv        out-of-fold predictions of fold K (written last: its presence marks the fold done)
      fold_K/metrics.json   fold_K/log_history.json   fold_K/checkpoints/ (while training)
      oof.csv  metrics.json  learning_curve.png

A run killed at any point resumes with ``resume=True``: finished folds are skipped, an interrupted fold continues
from its last checkpoint, and the folds are the ones saved in ``folds.csv``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnpool.training.config import TrainConfig, load_yaml
from attnpool.training.inputs import EncodedDataset, TaskData, load_task
from attnpool.training.metrics import primary_metric, task_metrics
from attnpool.training.runs import (
    CONFIG_FILE,
    atomic_save_dir,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    prepare_run_dir,
    read_run_info,
    write_run_info,
)

logger = logging.getLogger("attnpool.train")


@dataclass
class TrainResult:
    """What a finished run produced."""

    run_dir: Path
    metrics: dict[str, Any]
    oof: Any  # pandas.DataFrame
    seconds: float


def read_oof(path: Path):
    """Read an out-of-fold file back; ids stay strings (``0001`` is not the number 1)."""
    import pandas as pd

    return pd.read_csv(path, dtype={"id": str})


def _problem(task: str, num_classes: int) -> tuple[int, str]:
    if task == "regression":
        return max(num_classes, 1), "regression"
    if task == "multilabel":
        return num_classes, "multi_label_classification"
    return num_classes, "single_label_classification"


def scores_from_logits(task: str, logits: np.ndarray) -> np.ndarray:
    """Predictions as reported: values for regression, probabilities for classification."""
    logits = np.asarray(logits, dtype=np.float64)
    if task == "regression":
        return logits[:, 0] if logits.shape[1] == 1 else logits
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _precision_flags(precision: str) -> dict[str, bool]:
    if precision == "auto":
        use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return {"bf16": use_bf16, "fp16": False}
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def _training_arguments(cfg: TrainConfig, out_dir: Path, steps_per_epoch: int):
    """``TrainingArguments`` of the recipe; option names differ across transformers 5.x releases."""
    import transformers

    metric, greater = primary_metric(cfg.task)
    strategy = "steps" if cfg.eval_steps else "epoch"
    kwargs: dict[str, Any] = {
        "output_dir": str(out_dir),
        "per_device_train_batch_size": cfg.batch_size,
        "per_device_eval_batch_size": cfg.eval_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "num_train_epochs": cfg.epochs,
        "learning_rate": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "lr_scheduler_type": {"constant": "constant_with_warmup"}.get(cfg.scheduler, cfg.scheduler),
        "warmup_steps": cfg.warmup_ratio if cfg.warmup_ratio < 1 else int(cfg.warmup_ratio),
        "eval_strategy": strategy,
        "save_strategy": strategy,
        "eval_steps": cfg.eval_steps,
        "save_steps": cfg.eval_steps,
        "logging_steps": max(1, min(50, steps_per_epoch // 4 or 1)),
        "load_best_model_at_end": True,
        "metric_for_best_model": metric,
        "greater_is_better": greater,
        "save_total_limit": 1,  # the best checkpoint is kept in addition
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "report_to": [],
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": torch.cuda.is_available(),
        "use_cpu": not torch.cuda.is_available(),  # else bf16 on a CPU-only machine is refused
        "remove_unused_columns": False,
        **_precision_flags(cfg.precision),
    }
    fields = transformers.TrainingArguments.__dataclass_fields__
    if "train_sampling_strategy" in fields:  # transformers >= 5.x: length-grouped batches, shuffled
        kwargs["train_sampling_strategy"] = "group_by_length"
    else:
        kwargs["group_by_length"] = True
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    kwargs[checkpointing] = cfg.gradient_checkpointing
    return transformers.TrainingArguments(**kwargs)


def _make_trainer(cfg: TrainConfig, model, args, train_ds, eval_ds, tokenizer, task: str):
    import transformers

    from attnpool.training.optim import build_optimizer, parameter_groups

    class RecipeTrainer(transformers.Trainer):
        """The Trainer with the recipe's optimiser: layer-wise decayed rates, a separate head rate."""

        def create_optimizer(self, *args: Any, **kwargs: Any):
            if self.optimizer is None:
                groups = parameter_groups(self.model, cfg.lr, cfg.head_lr, cfg.weight_decay, cfg.llrd)
                self.optimizer = build_optimizer(groups)
            return self.optimizer

    def compute_metrics(eval_pred) -> dict[str, float]:
        logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
        return task_metrics(task, eval_pred.label_ids, scores_from_logits(task, logits))

    callbacks = []
    if cfg.early_stopping_patience:
        callbacks.append(transformers.EarlyStoppingCallback(early_stopping_patience=cfg.early_stopping_patience))
    return RecipeTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=transformers.DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        callbacks=callbacks,
    )


def _build_model(cfg: TrainConfig, data: TaskData, fold: int):
    from transformers import set_seed

    from attnpool.model import AttnPoolForSequenceClassification

    set_seed(cfg.seed + fold)
    num_labels, problem_type = _problem(cfg.task, data.num_outputs)
    extra: dict[str, Any] = {}
    if data.classes is not None and cfg.task != "regression":
        extra["id2label"] = {i: str(c) for i, c in enumerate(data.classes)}
        extra["label2id"] = {str(c): i for i, c in enumerate(data.classes)}
    return AttnPoolForSequenceClassification.from_encoder(
        cfg.model,
        pooling=cfg.pooling,
        pooling_options=cfg.pooling_options,
        num_labels=num_labels,
        problem_type=problem_type,
        pooling_layers=cfg.pooling_layers,
        head_dropout=cfg.head_dropout,
        multi_sample_dropout=cfg.multi_sample_dropout,
        head_hidden_size=cfg.head_hidden_size,
        output_activation=cfg.output_activation,
        loss=cfg.loss,
        reinit_layers=cfg.reinit_layers,
        freeze_layers=cfg.freeze_layers,
        **extra,
    )


def _last_checkpoint(folder: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def _fold_done(fold_dir: Path) -> bool:
    return (fold_dir / "oof.csv").is_file() and (fold_dir / "model" / "config.json").is_file()


def train_fold(cfg: TrainConfig, data: TaskData, fold: int, train_idx: np.ndarray, valid_idx: np.ndarray,
               fold_dir: Path, callbacks: list | None = None):
    """Train one fold, save its best model, and write its out-of-fold predictions; returns them as a frame."""
    from attnpool.training.predict import predict_encoded

    model = _build_model(cfg, data, fold)
    train_ds = EncodedDataset(data.encodings, data.labels, train_idx)
    eval_ds = EncodedDataset(data.encodings, data.labels, valid_idx)
    steps_per_epoch = max(1, math.ceil(len(train_ds) / (cfg.batch_size * cfg.grad_accum)))
    args = _training_arguments(cfg, fold_dir / "checkpoints", steps_per_epoch)
    trainer = _make_trainer(cfg, model, args, train_ds, eval_ds, data.tokenizer, cfg.task)
    for callback in callbacks or []:
        trainer.add_callback(callback)
    resume_from = _last_checkpoint(fold_dir / "checkpoints")
    if resume_from:
        logger.info("fold %d: resuming from %s", fold, resume_from)
    trainer.train(resume_from_checkpoint=resume_from)
    best = trainer.model  # load_best_model_at_end restored the best checkpoint's weights
    atomic_save_dir(fold_dir / "model", lambda tmp: best.save_pretrained(tmp, tokenizer=data.tokenizer))
    atomic_write_json(fold_dir / "log_history.json", trainer.state.log_history)
    logits = predict_encoded([best], data.encodings, valid_idx, cfg.eval_batch_size, data.tokenizer)[0]
    scores = scores_from_logits(cfg.task, logits)
    metrics = task_metrics(cfg.task, data.labels[valid_idx], scores)
    metrics.update({"fold": fold, "n_train": len(train_idx), "n_valid": len(valid_idx),
                    "best_checkpoint": Path(trainer.state.best_model_checkpoint or "").name})
    atomic_write_json(fold_dir / "metrics.json", metrics)
    oof = data.oof_frame(valid_idx, scores, fold)
    atomic_write(fold_dir / "oof.csv", lambda tmp: oof.to_csv(tmp, index=False))  # last: marks the fold done
    import shutil

    shutil.rmtree(fold_dir / "checkpoints", ignore_errors=True)
    return read_oof(fold_dir / "oof.csv")


def _resumed_config(cfg: TrainConfig) -> TrainConfig:
    """On resume the run's saved config wins (the same data, folds and recipe), whatever else the call says.

    Only ``only_folds`` comes from the call.
    """
    saved = Path(cfg.output_dir) / CONFIG_FILE
    if not cfg.resume or not saved.is_file():
        return cfg
    values = load_yaml(saved)
    # Which folds to train now is a choice of this call, not part of the run's recipe.
    values.update({"resume": True, "overwrite": False, "output_dir": cfg.output_dir, "only_folds": cfg.only_folds})
    return TrainConfig.from_dict(values, where=str(saved))


def train(cfg: TrainConfig, callbacks: list | None = None) -> TrainResult:
    """Run the recipe: k folds (or one train/valid split), out-of-fold predictions, metrics, plot.

    Args:
        cfg: The options; see :class:`~attnpool.training.config.TrainConfig`. With ``resume``, the run's saved
            config is used instead (only ``output_dir`` is read from ``cfg``).
        callbacks: Extra ``transformers.TrainerCallback`` objects for every fold's ``Trainer``.

    Returns:
        A :class:`TrainResult` with the run directory, the metrics and the out-of-fold predictions.

    Raises:
        attnpool.data.DataError: Bad input data (missing file or column, bad labels...), before any training.
        RunError: The run directory exists (without resume/overwrite) or is not resumable.
    """
    import yaml

    started = time.perf_counter()
    run_dir = prepare_run_dir(cfg.output_dir, overwrite=cfg.overwrite, resume=cfg.resume)
    cfg = _resumed_config(cfg).validate()
    handler = _attach_log_file(run_dir / "train.log")
    try:
        data = load_task(cfg, log=logger)  # also resolves the preset and template into cfg
        if not (run_dir / CONFIG_FILE).is_file():  # the resolved config, saved with the run
            atomic_write_text(run_dir / CONFIG_FILE, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        folds = _folds(cfg, data, run_dir)
        info = {"task": cfg.task, "classes": data.classes, "label": data.label_name, "id_col": data.id_col,
                "num_folds": int(folds.max()) + 1 if len(folds) else 0}
        if cfg.resume and (run_dir / "run.json").is_file():
            previous = read_run_info(run_dir)
            if previous.get("classes") != info["classes"]:
                raise ValueError(f"--resume: the labels changed since the run started ({previous.get('classes')} "
                                 f"-> {info['classes']}); start a new run")
        write_run_info(run_dir, info)
        fold_ids = sorted(set(int(f) for f in folds[folds >= 0]))
        wanted = [f for f in fold_ids if cfg.only_folds is None or f in cfg.only_folds]
        frames = []
        for fold in fold_ids:
            fold_dir = run_dir / f"fold_{fold}"
            if _fold_done(fold_dir):
                logger.info("fold %d: already done, kept (%s)", fold, fold_dir / "oof.csv")
                frames.append(read_oof(fold_dir / "oof.csv"))
                continue
            if fold not in wanted:
                continue
            train_idx, valid_idx = data.split(folds, fold)
            logger.info("fold %d (%d of %d): %d train / %d valid rows", fold, fold + 1, len(fold_ids), len(train_idx),
                        len(valid_idx))
            frames.append(train_fold(cfg, data, fold, train_idx, valid_idx, fold_dir, callbacks))
        result = _summarise(cfg, data, run_dir, frames, fold_ids, time.perf_counter() - started)
    finally:
        logging.getLogger("attnpool").removeHandler(handler)
        handler.close()
    return result


def _folds(cfg: TrainConfig, data: TaskData, run_dir: Path) -> np.ndarray:
    """Fold id per row (-1: training only, with a fixed validation file), saved once and reused on resume."""
    import pandas as pd

    path = run_dir / "folds.csv"
    if path.is_file():
        saved = pd.read_csv(path)
        if len(saved) != data.num_rows:
            raise ValueError(f"{path} has {len(saved)} rows but the data has {data.num_rows}; the data changed since "
                             "the run started: start a new run")
        return saved["fold"].to_numpy()
    folds = data.make_folds(cfg)
    frame = pd.DataFrame({"row": np.arange(data.num_rows), "fold": folds})
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
    return folds


def _summarise(cfg: TrainConfig, data: TaskData, run_dir: Path, frames: list, fold_ids: list[int],
               seconds: float) -> TrainResult:
    import json

    import pandas as pd

    from attnpool.training.report import plot_learning_curves, summary_table

    fold_metrics = []
    for fold in fold_ids:
        path = run_dir / f"fold_{fold}" / "metrics.json"
        if path.is_file():
            fold_metrics.append(json.loads(path.read_text(encoding="utf-8")))
    oof = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    complete = len(fold_metrics) == len(fold_ids)
    overall: dict[str, Any] = {}
    if len(oof):
        oof = oof.sort_values("row").reset_index(drop=True)
        overall = task_metrics(cfg.task, data.labels[oof["row"].to_numpy()], data.scores_of(oof))
        overall["n"] = len(oof)
        atomic_write(run_dir / "oof.csv", lambda tmp: oof.to_csv(tmp, index=False))
    metrics = {"folds": fold_metrics, "overall": overall, "complete": complete, "seconds": round(seconds, 1)}
    atomic_write_json(run_dir / "metrics.json", metrics)
    plot_learning_curves(run_dir, fold_ids, primary_metric(cfg.task)[0])
    logger.info("\n%s", summary_table(cfg, run_dir, metrics, seconds))
    return TrainResult(run_dir=run_dir, metrics=metrics, oof=oof, seconds=seconds)


def _attach_log_file(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("attnpool")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler
