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

Under ``torchrun`` / ``accelerate launch`` every process runs :func:`train`; only the main process writes the run
directory (the ``Trainer`` itself saves checkpoints from the main process only), and the out-of-fold predictions are
computed on a shard of the validation rows per process and gathered in row order (see
:mod:`attnpool.training.distributed`).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnpool.training.config import TrainConfig, load_yaml
from attnpool.training.distributed import (
    ddp_backend,
    gather_shards,
    on_every,
    on_main,
    process_state,
    shard,
    unshard,
    use_cpu,
)
from attnpool.training.inputs import EncodedDataset, TaskData, load_task
from attnpool.training.metrics import primary_metric, task_metrics
from attnpool.training.pooling_stats import PoolingMonitor
from attnpool.training.runs import (
    CONFIG_FILE,
    RunError,
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
        use_bf16 = not use_cpu() and torch.cuda.is_bf16_supported()
        return {"bf16": use_bf16, "fp16": False}
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def _training_arguments(cfg: TrainConfig, out_dir: Path, steps_per_epoch: int):
    """``TrainingArguments`` of the recipe; option names differ across transformers 5.x releases."""
    import transformers

    metric, greater = primary_metric(cfg.task)
    strategy = "steps" if cfg.eval_steps else "epoch"
    cpu = use_cpu()
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
        "dataloader_pin_memory": not cpu,
        "use_cpu": cpu,  # else bf16 on a CPU-only machine is refused
        "ddp_backend": ddp_backend(cpu),  # several CPU processes: gloo; GPUs: accelerate's choice (NCCL)
        # The encoder keeps its own pooler (BERT, MiniLM...), which attnpool's pooler replaces: those weights get no
        # gradient, and DDP must be told. (Activation checkpointing is non-reentrant in transformers 5: compatible.)
        "ddp_find_unused_parameters": True,
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


class LengthGroupedSampler(torch.utils.data.Sampler):
    """Shuffled row order in which runs of similar length follow each other; the same on every process.

    The order is ``transformers``' length grouping (a random permutation, cut into mega-batches of up to 50 global
    batches, each sorted by length, the longest batch first), drawn from a generator seeded by ``seed + epoch``
    rather than from the global torch RNG, and grouped by the *global* batch (per-device batch x processes x
    gradient accumulation). So:

    * every process draws the same order, which the ``Trainer`` then splits batch by batch between processes (with
      the global RNG the processes drift apart after the first epoch on CPUs, where dropout draws from that RNG a
      number of values that depends on each process's padded batch shapes: rows get repeated or skipped);
    * one process with batch ``2B`` and two with batch ``B`` take their optimizer steps on the same rows;
    * a run resumed in the middle of an epoch skips exactly the batches it had already trained on.

    Args:
        lengths: Token length of each row of the training set.
        global_batch_size: Rows per optimizer step, over all processes.
        seed: The data seed; epoch ``e`` uses ``seed + e``.
    """

    def __init__(self, lengths: list[int], global_batch_size: int, seed: int) -> None:
        self.lengths = list(lengths)
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the ``Trainer`` (through accelerate) at the start of every epoch."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        from transformers.trainer_pt_utils import get_length_grouped_indices

        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.global_batch_size, generator=generator))


def _make_trainer(cfg: TrainConfig, model, args, train_ds, eval_ds, tokenizer, task: str,
                  monitor: PoolingMonitor | None = None):
    import transformers

    from attnpool.training.optim import build_optimizer, parameter_groups

    class RecipeTrainer(transformers.Trainer):
        """The Trainer with the recipe's optimiser, sampler and pooling-weight statistics in the logs.

        The optimiser has layer-wise decayed encoder rates and rates of their own for the pooler and the head.
        """

        def create_optimizer(self, *args: Any, **kwargs: Any):
            if self.optimizer is None:
                groups = parameter_groups(self.model, cfg.lr, cfg.head_lr, cfg.weight_decay, cfg.llrd,
                                          pooler_lr=cfg.resolved_pooler_lr())
                self.optimizer = build_optimizer(groups)
            return self.optimizer

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if monitor is not None:
                evaluation = any(key.startswith("eval_") for key in logs)
                stats = monitor.summary(training=not evaluation)
                logs.update({f"eval_{k}" if evaluation else k: v for k, v in stats.items()})
            super().log(logs, start_time)

        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            if dataset is None or not hasattr(dataset, "__len__"):
                return super()._get_train_sampler(train_dataset)
            lengths = [len(dataset[i]["input_ids"]) for i in range(len(dataset))]
            global_batch = self.args.train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return LengthGroupedSampler(lengths, global_batch, seed)

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


def _weights_sharded(trainer) -> bool:
    """Whether the trained weights are spread over the processes (FSDP, DeepSpeed), so saving them is collective."""
    return bool(getattr(trainer, "is_fsdp_enabled", False) or getattr(trainer, "is_deepspeed_enabled", False))


def _check_engine(trainer) -> None:
    """Refuse, before any training, FSDP / DeepSpeed settings under which no loadable fold model could be saved."""
    if getattr(trainer, "is_fsdp_enabled", False):
        kind = str(trainer.accelerator.state.fsdp_plugin.state_dict_type)
        if "FULL_STATE_DICT" not in kind:
            raise ValueError(f"FSDP with state dict type {kind}: attnpool saves each fold's best model as one "
                             "from_pretrained() folder, which needs fsdp_state_dict_type: FULL_STATE_DICT in the "
                             "accelerate config")
    if getattr(trainer, "is_deepspeed_enabled", False):
        zero = trainer.accelerator.state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {})
        if zero.get("stage") == 3 and not zero.get("stage3_gather_16bit_weights_on_model_save"):
            raise ValueError("DeepSpeed ZeRO-3: attnpool saves each fold's best model as one from_pretrained() "
                             "folder, which needs zero_optimization.stage3_gather_16bit_weights_on_model_save: true")


def _save_fold_model(trainer, tokenizer, folder: Path) -> None:
    """Save the best weights as one ``from_pretrained()`` folder with the tokenizer, written by the main process."""
    if not _weights_sharded(trainer):
        on_main(lambda: atomic_save_dir(folder, lambda tmp: trainer.model.save_pretrained(tmp, tokenizer=tokenizer)))
        return
    # FSDP / DeepSpeed: every process takes part in gathering the weights; the Trainer writes from the main one.
    staging = folder.parent / f".{folder.name}.gathered"
    on_main(lambda: shutil.rmtree(staging, ignore_errors=True))
    trainer.save_model(str(staging))

    def finish() -> None:
        if not any(staging.glob("*.safetensors")):
            raise RunError(f"the Trainer saved no model weights in {staging}; check the FSDP / DeepSpeed config")
        (staging / "training_args.bin").unlink(missing_ok=True)  # a pickle; the model folder holds none
        tokenizer.save_pretrained(staging)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)

    on_main(finish)


def _peak_memory_start(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_memory_bytes(device: torch.device) -> int | None:
    """CUDA: the most memory the tensors took since the fold started. CPU: the process's peak RSS so far (all folds).

    The CPU figure cannot be reset: it is the high-water mark of the whole process, fold 0 included.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def train_fold(cfg: TrainConfig, data: TaskData, fold: int, train_idx: np.ndarray, valid_idx: np.ndarray,
               fold_dir: Path, callbacks: list | None = None):
    """Train one fold, save its best model, and write its out-of-fold predictions; returns them as a frame.

    Under a launcher every process calls this; each predicts a shard of ``valid_idx`` and every process returns the
    whole, gathered frame, while only the main process writes files.
    """
    from attnpool.training.predict import predict_encoded

    model = _build_model(cfg, data, fold)
    train_ds = EncodedDataset(data.encodings, data.labels, train_idx)
    eval_ds = EncodedDataset(data.encodings, data.labels, valid_idx)
    processes = process_state().num_processes
    steps_per_epoch = max(1, math.ceil(len(train_ds) / (cfg.batch_size * cfg.grad_accum * processes)))
    args = _training_arguments(cfg, fold_dir / "checkpoints", steps_per_epoch)
    monitor = PoolingMonitor(model, data.tokenizer.all_special_ids)
    trainer = _make_trainer(cfg, model, args, train_ds, eval_ds, data.tokenizer, cfg.task, monitor)
    _check_engine(trainer)
    for callback in callbacks or []:
        trainer.add_callback(callback)
    resume_from = on_main(lambda: _last_checkpoint(fold_dir / "checkpoints"))
    if resume_from:
        logger.info("fold %d: resuming from %s", fold, resume_from)
    _peak_memory_start(args.device)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.perf_counter() - started
    peak_memory = _peak_memory_bytes(args.device)
    _save_fold_model(trainer, data.tokenizer, fold_dir / "model")
    # load_best_model_at_end restored the best checkpoint's weights; sharded ones are read back whole from the folder.
    best = trainer.model
    if _weights_sharded(trainer):
        from attnpool.model import AttnPoolForSequenceClassification

        best = AttnPoolForSequenceClassification.from_pretrained(fold_dir / "model")
        monitor.remove()
        monitor = PoolingMonitor(best, data.tokenizer.all_special_ids)
    state = process_state()
    mine = shard(valid_idx, state.process_index, state.num_processes)
    monitor.summary(training=False)  # reset: what follows is the best model on this process's validation rows
    local = predict_encoded([best], data.encodings, mine, cfg.eval_batch_size, data.tokenizer, device=args.device)[0]
    pooling = {f"pooling_{k.removeprefix('pool_')}": v for k, v in monitor.summary(training=False).items()}
    monitor.remove()
    parts, peaks = gather_shards(local, peak_memory)
    scores = scores_from_logits(cfg.task, unshard(parts))
    metrics = task_metrics(cfg.task, data.labels[valid_idx], scores)
    known_peaks = [p for p in peaks if p is not None]
    metrics.update({"fold": fold, "n_train": len(train_idx), "n_valid": len(valid_idx),
                    "best_checkpoint": Path(trainer.state.best_model_checkpoint or "").name,
                    "train_seconds": round(train_seconds, 2),  # trainer.train() of this call (the resumed part)
                    "peak_memory_bytes": max(known_peaks) if known_peaks else None,  # the largest over processes
                    "device": args.device.type,  # cuda: peak of the tensors; cpu: the process's peak RSS
                    "processes": state.num_processes,
                    **pooling})  # pooling_entropy, pooling_special_share (the main process's rows)
    if pooling:
        logger.info("fold %d: pooling weights on validation: normalised entropy %.3f (1 = mean pooling, 0 = one "
                    "token), %.1f%% on special tokens", fold, pooling.get("pooling_entropy", float("nan")),
                    100 * pooling.get("pooling_special_share", float("nan")))
    oof = data.oof_frame(valid_idx, scores, fold)

    def write() -> None:
        atomic_write_json(fold_dir / "log_history.json", trainer.state.log_history)
        atomic_write_json(fold_dir / "metrics.json", metrics)
        atomic_write(fold_dir / "oof.csv", lambda tmp: oof.to_csv(tmp, index=False))  # last: marks the fold done
        shutil.rmtree(fold_dir / "checkpoints", ignore_errors=True)

    on_main(write)
    return oof


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

    Started by ``torchrun`` or ``accelerate launch``, every process calls it: the ``Trainer`` trains on all of them
    (DDP, or FSDP / DeepSpeed as the launcher is configured), the main process alone writes the run directory, and
    every process returns the same result.

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
    main = process_state().is_main_process  # joins the launcher's process group, as the Trainer will

    def open_run() -> tuple[Path, TrainConfig]:
        run_dir = prepare_run_dir(cfg.output_dir, overwrite=cfg.overwrite, resume=cfg.resume)
        return run_dir, _resumed_config(cfg).validate()

    run_dir, cfg = on_main(open_run)  # the other processes get the main one's config, or its error
    package_logger = logging.getLogger("attnpool")
    level = package_logger.level
    handler = _attach_log_file(run_dir / "train.log") if main else None
    if not main:
        package_logger.setLevel(logging.WARNING)  # one copy of the progress lines, from the main process
    try:
        data = on_every(lambda: load_task(cfg, log=logger))  # also resolves the preset and template into cfg

        def record_run() -> tuple[np.ndarray, list[int]]:
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
            done = [int(f) for f in sorted(set(folds[folds >= 0])) if _fold_done(run_dir / f"fold_{int(f)}")]
            return folds, done

        folds, done = on_main(record_run)  # every process trains on the folds the main process saved
        fold_ids = sorted(set(int(f) for f in folds[folds >= 0]))
        wanted = [f for f in fold_ids if cfg.only_folds is None or f in cfg.only_folds]
        for fold in fold_ids:
            fold_dir = run_dir / f"fold_{fold}"
            if fold in done:
                logger.info("fold %d: already done, kept (%s)", fold, fold_dir / "oof.csv")
                continue
            if fold not in wanted:
                continue
            train_idx, valid_idx = data.split(folds, fold)
            logger.info("fold %d (%d of %d): %d train / %d valid rows", fold, fold + 1, len(fold_ids), len(train_idx),
                        len(valid_idx))
            train_fold(cfg, data, fold, train_idx, valid_idx, fold_dir, callbacks)
        result = on_main(lambda: _summarise(cfg, data, run_dir, fold_ids, time.perf_counter() - started))
    finally:
        if handler is not None:
            package_logger.removeHandler(handler)
            handler.close()
        else:
            package_logger.setLevel(level)
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


def _summarise(cfg: TrainConfig, data: TaskData, run_dir: Path, fold_ids: list[int], seconds: float) -> TrainResult:
    """Gather the finished folds' files into the run's ``oof.csv``, ``metrics.json`` and plot (main process)."""
    import json

    import pandas as pd

    from attnpool.training.report import plot_learning_curves, summary_table

    fold_metrics, frames = [], []
    for fold in fold_ids:
        fold_dir = run_dir / f"fold_{fold}"
        if (fold_dir / "metrics.json").is_file():
            fold_metrics.append(json.loads((fold_dir / "metrics.json").read_text(encoding="utf-8")))
        if _fold_done(fold_dir):
            frames.append(read_oof(fold_dir / "oof.csv"))
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
