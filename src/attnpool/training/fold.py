"""One fold of the recipe: build the model, train it with the ``Trainer``, save the best, predict its validation rows.

Under ``torchrun`` / ``accelerate launch`` every process runs :func:`train_fold`; only the main process writes (the
``Trainer`` itself saves checkpoints from the main process only), and the out-of-fold predictions are computed on a
shard of the validation rows per process and gathered in row order (see :mod:`attnpool.training.distributed`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from transformers import set_seed

from attnpool.allocator import own_peak_bytes
from attnpool.config import TrainConfig
from attnpool.config_checks import SEED_BOUND
from attnpool.data.batching import length_sorted_batches
from attnpool.data.columns import template_fields
from attnpool.data.context import own_segments
from attnpool.data.datasets import EncodedDataset
from attnpool.data.task import TaskData
from attnpool.metrics import task_metrics
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE, TrainingFacts, model_card
from attnpool.model.modeling import keeping_encoder_pooler
from attnpool.precision import resolve_precision
from attnpool.prediction.engine import predict_encoded
from attnpool.runs.files import atomic_save_dir, atomic_write_text, full_disk_hint
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import oof_frame
from attnpool.tasks import num_labels, problem_type, scores_from_logits
from attnpool.training.arguments import training_arguments
from attnpool.training.checkpoints import last_complete_checkpoint
from attnpool.training.distributed import gather_shards, on_main, process_state, shard, unshard, use_cpu
from attnpool.training.pooling_stats import PoolingMonitor
from attnpool.training.progress import FoldProgress
from attnpool.training.tracking import FoldTracking, run_name
from attnpool.training.trainer import make_trainer, weights_sharded

logger = logging.getLogger("attnpool.train")


def paired_inputs(cfg: TrainConfig) -> bool:
    """Whether each input joins two or more texts: two ``text_cols``, a two-field template, or the PPPM preset."""
    if len(cfg.text_cols) >= 2 or cfg.preset == "pppm":
        return True
    return len({name for name in template_fields(cfg.template or "") if name}) >= 2


def fold_seed(cfg: TrainConfig, fold: int) -> int:
    """The seed of fold ``fold``: ``seed + fold``, wrapped into ``[0, 2**32 - 1]`` (numpy's and torch's seeds).

    Every valid seed thus seeds every fold (``2**32 - 1`` with 2 folds: 4294967295, then 0); below ``2**32 - folds``
    nothing wraps, so the folds of earlier runs keep their seeds.
    """
    return (cfg.seed + fold) % SEED_BOUND


def build_model(cfg: TrainConfig, data: TaskData, fold: int) -> AttnPoolForSequenceClassification:
    """A fresh model for fold ``fold`` (seeded by :func:`fold_seed`): the encoder, the pooler and the task head."""
    set_seed(fold_seed(cfg, fold))
    extra: dict[str, Any] = {}
    if data.classes is not None and cfg.task != "regression":
        extra["id2label"] = {i: str(c) for i, c in enumerate(data.classes)}
        extra["label2id"] = {str(c): i for i, c in enumerate(data.classes)}
    if cfg.group_context_pooling == "own":
        extra["pool_segments"], extra["segment_token_id"] = own_segments(data.tokenizer, cfg.text_cols or None,
                                                                         cfg.template)
    return AttnPoolForSequenceClassification.from_encoder(
        cfg.model,
        pooling=cfg.pooling,
        pooling_options=cfg.pooling_options,
        paired=paired_inputs(cfg),
        num_labels=num_labels(cfg.task, data.num_outputs),
        problem_type=problem_type(cfg.task),
        pooling_layers=cfg.pooling_layers,
        recurrent=cfg.recurrent, recurrent_layers=cfg.recurrent_layers,
        encoder_dropout=cfg.encoder_dropout,
        head_dropout=cfg.head_dropout,
        multi_sample_dropout=cfg.multi_sample_dropout,
        head_hidden_size=cfg.head_hidden_size,
        output_activation=cfg.output_activation,
        loss=cfg.loss,
        reinit_layers=cfg.reinit_layers,
        freeze_layers=cfg.freeze_layers,
        freeze_word_embeddings=cfg.resolved_freeze_word_embeddings(),
        **extra,
    )


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


# Recipe options a fold model's card lists (the model's own options are in its config, and so in the card already).
CARD_OPTIONS = ("limit", "label_bins", "group_col", "reinit_layers", "freeze_layers")


def training_facts(cfg: TrainConfig, data: TaskData, fold: int, train_idx: np.ndarray, valid_idx: np.ndarray,
                   run: Run, scores: dict[str, float] | None = None, **more: Any) -> TrainingFacts:
    """What a fold model's card says about its training: data, split, recipe options and validation ``scores``.

    ``more``: other :class:`~attnpool.model.card.TrainingFacts` (``train_seconds``, ``device``).
    """
    recipe = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
              if f.metadata.get("group") == "recipe" or f.name in CARD_OPTIONS}
    recipe = {k: v for k, v in recipe.items() if v is not None}
    recipe["freeze_word_embeddings"] = cfg.resolved_freeze_word_embeddings()  # what was trained, "auto" resolved
    recipe["precision"] = resolve_precision(cfg.precision, "cpu" if use_cpu() else "cuda")  # auto: this machine's
    recipe["seed"] = fold_seed(cfg, fold)  # what build_model seeds this fold with
    text = f"template `{cfg.template}`" if cfg.template else ", ".join(f"`{c}`" for c in cfg.text_cols) or None
    scores = {k: float(v) for k, v in (scores or {}).items() if math.isfinite(v)}
    return TrainingFacts(  # paths absolute: the card's `attnpool predict --run DIR` works from any folder
        data_file=_absolute(cfg.train_file or cfg.data_dir),  # with a valid_file, rows: the data file's alone
        rows=len(train_idx) if cfg.valid_file else data.num_rows, train_rows=len(train_idx),
        valid_rows=len(valid_idx), fold=None if cfg.valid_file else fold, folds=None if cfg.valid_file else cfg.folds,
        valid_file=_absolute(cfg.valid_file), text=text, label=data.label_name, validation=scores, recipe=recipe,
        run_dir=_absolute(run.path), **more)


def _absolute(path: str | os.PathLike | None) -> str | None:
    return None if path is None else str(Path(path).expanduser().absolute())


def _save_fold_model(trainer, tokenizer, folder: Path, card: str | None = None) -> None:
    """Save the best weights as one ``from_pretrained()`` folder with the tokenizer and its model card.

    Written by the main process, atomically (a staged folder swapped in); ``card`` is the card so far (the fold's
    data and recipe), completed with the validation scores once they are known (``None``: the config's card).
    """
    if not weights_sharded(trainer):
        on_main(lambda: atomic_save_dir(folder, lambda tmp: trainer.model.save_pretrained(
            tmp, tokenizer=tokenizer, model_card=card)))
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
        if card is not None:
            atomic_write_text(staging / CARD_FILE, card)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)

    on_main(finish)


def _has_encoder_pooler(checkpoint: Path) -> bool:
    """Whether ``checkpoint``'s weights hold the encoder's own pooler (saved by attnpool before 2026-12-06)."""
    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        names = list(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
    elif (checkpoint / "model.safetensors").is_file():
        with safe_open(checkpoint / "model.safetensors", framework="pt") as weights:
            names = list(weights.keys())
    else:
        return False
    return any(".encoder.pooler." in f".{name}" for name in names)


def _peak_memory_start(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_memory_bytes(device: torch.device) -> int | None:
    """CUDA: the most memory the tensors took since the fold started. CPU: the process's peak RSS so far (all folds).

    The CPU figure cannot be reset: it is the high-water mark of the whole process, fold 0 included
    (:func:`~attnpool.allocator.own_peak_bytes`; ``None`` on Windows).
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return own_peak_bytes()


def eval_order(encodings: dict[str, list], valid_idx: np.ndarray, batch_size: int) -> np.ndarray:
    """``valid_idx`` in the order of the out-of-fold prediction's batches: length-sorted, as in ``padded_batches``.

    The Trainer's evaluations (the progress line, the best checkpoint) then pad each batch as the final prediction
    does: under bf16 another padding rounds the logits otherwise, and the progress line's ``val pearson 0.2776``
    was ``0.2773`` in the fold's metrics. One process only: under a launcher each predicts its own shard.
    """
    lengths = [len(encodings["input_ids"][i]) for i in valid_idx]
    return valid_idx[[i for batch in length_sorted_batches(lengths, batch_size) for i in batch]]


def train_fold(cfg: TrainConfig, data: TaskData, fold: int, train_idx: np.ndarray, valid_idx: np.ndarray,
               run: Run, callbacks: list | None = None, trackers: list[str] | None = None):
    """Train one fold, save its best model, and write its out-of-fold predictions; returns them as a frame.

    ``trackers``: the run's ``--report-to`` integrations, decided once for the run; by default looked up.

    Under a launcher every process calls this; each predicts a shard of ``valid_idx`` and every process returns the
    whole, gathered frame, while only the main process writes files.
    """
    resume_from = on_main(lambda: last_complete_checkpoint(run.checkpoints_dir(fold), cfg.ema_decay is not None))
    if not resume_from:  # trained from step 0 again: the curves of a start stopped before its first checkpoint go
        on_main(lambda: [old.unlink() for old in run.tensorboard_dir(fold).glob("events.out.tfevents.*")])
    with keeping_encoder_pooler() if resume_from and _has_encoder_pooler(Path(resume_from)) else nullcontext():
        model = build_model(cfg, data, fold)  # a checkpoint of an earlier attnpool: its optimizer state has it
    encodings = data.fold_encodings(cfg, train_idx, valid_idx, logger)  # per fold with group_context
    train_ds = data.training_set(cfg, encodings, train_idx, logger)  # with context dropout: drawn per epoch
    eval_ds = EncodedDataset(encodings, data.labels, eval_order(encodings, valid_idx, cfg.eval_batch_size))
    processes = process_state().num_processes
    steps_per_epoch = max(1, math.ceil(len(train_ds) / (cfg.batch_size * cfg.grad_accum * processes)))
    args = training_arguments(cfg, run.checkpoints_dir(fold), steps_per_epoch, run_name=run_name(run, fold),
                              seed=fold_seed(cfg, fold), model=model,  # as build_model's: each fold its dropout masks
                              trackers=trackers)
    monitor = PoolingMonitor(model, data.tokenizer.all_special_ids)
    trainer = make_trainer(cfg, model, args, train_ds, eval_ds, data.tokenizer, monitor, run=run, fold=fold)
    _check_engine(trainer)
    for callback in callbacks or []:
        trainer.add_callback(callback)
    if resume_from:
        logger.info("fold %d: resuming from %s", fold, resume_from)
    _peak_memory_start(args.device)
    failure: BaseException | None = None
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except BaseException as err:
        failure = err
        raise
    finally:  # on an error or Ctrl-C the Trainer skips on_train_end: end the live line before the error is printed,
        for callback in trainer.callback_handler.callbacks:  # and the fold's tracker runs, as failed
            if isinstance(callback, FoldProgress):
                callback.close()
            elif isinstance(callback, FoldTracking) and failure is not None:
                callback.abort(failure)
    train_seconds = trainer.train_seconds()  # a resumed fold's included, up to the checkpoint it resumed from
    peak_memory = _peak_memory_bytes(args.device)
    # the card so far (data, split, recipe); the validation scores are added below, once measured
    draft = model_card(trainer.model.config, architecture=type(trainer.model).__name__,
                       training=training_facts(cfg, data, fold, train_idx, valid_idx, run),
                       has_weights=trainer.model.base_model.pooler.has_weights)
    with full_disk_hint(f"the model of fold {fold}", run.model_dir(fold), run.path):
        _save_fold_model(trainer, data.tokenizer, run.model_dir(fold), draft)
    # load_best_model_at_end restored the best checkpoint's weights; sharded ones are read back whole from the folder.
    best = trainer.model
    if weights_sharded(trainer):
        best = AttnPoolForSequenceClassification.from_pretrained(run.model_dir(fold))
        monitor.remove()
        monitor = PoolingMonitor(best, data.tokenizer.all_special_ids)
    state = process_state()
    mine = shard(valid_idx, state.process_index, state.num_processes)
    monitor.summary(training=False)  # reset: what follows is the best model on this process's validation rows
    # in the training's precision, as the evaluation that chose the checkpoint (the Trainer's model keeps accelerate's
    # autocast forward; a sharded one read back has none)
    local = predict_encoded([best], encodings, mine, cfg.eval_batch_size, data.tokenizer, device=args.device,
                            precision=cfg.precision)[0]
    pooling = {f"pooling_{k.removeprefix('pool_')}": v for k, v in monitor.summary(training=False).items()}
    monitor.remove()
    parts, peaks = gather_shards(local, peak_memory)
    scores = scores_from_logits(cfg.task, unshard(parts))
    metrics = task_metrics(cfg.task, data.labels[valid_idx], scores)
    validation = dict(metrics)
    known_peaks = [p for p in peaks if p is not None]
    metrics.update({"fold": fold, "n_train": len(train_idx), "n_valid": len(valid_idx),
                    "best_checkpoint": Path(trainer.state.best_model_checkpoint or "").name,
                    "train_seconds": round(train_seconds, 2),
                    "peak_memory_bytes": max(known_peaks) if known_peaks else None,  # the largest over processes
                    "device": args.device.type,  # cuda: peak of the tensors; cpu: the process's peak RSS
                    "processes": state.num_processes,
                    **pooling})  # pooling_entropy, pooling_special_share (the main process's rows)
    if pooling:
        logger.info("fold %d: pooling weights on validation: normalised entropy %.3f (1 = mean pooling, 0 = one "
                    "token), %.1f%% on special tokens", fold, pooling.get("pooling_entropy", float("nan")),
                    100 * pooling.get("pooling_special_share", float("nan")))
    card = model_card(best.config, architecture=type(best).__name__, num_parameters=best.num_parameters(),
                      training=training_facts(cfg, data, fold, train_idx, valid_idx, run, validation,
                                              train_seconds=round(train_seconds, 2), device=args.device.type),
                      has_weights=best.base_model.pooler.has_weights)
    on_main(lambda: atomic_write_text(run.model_dir(fold) / CARD_FILE, card))
    ids = data.frame[data.id_col].to_numpy()[valid_idx] if data.id_col else None
    groups = data.groups[valid_idx] if data.groups is not None else None
    oof = oof_frame(cfg.task, data.classes, valid_idx, ids, data.labels[valid_idx], scores, fold, groups)

    on_main(lambda: run.write_fold_results(fold, metrics, trainer.state.log_history, oof))
    return oof
