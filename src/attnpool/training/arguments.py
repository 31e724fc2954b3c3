"""The recipe's ``transformers.TrainingArguments``: evaluation, checkpoints, precision, length grouping, DDP."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import transformers

from attnpool.config import TrainConfig
from attnpool.precision import trainer_flags
from attnpool.tasks import primary_metric
from attnpool.training.distributed import ddp_backend, use_cpu
from attnpool.training.progress import get_verbosity
from attnpool.training.tracking import integrations

logger = logging.getLogger("attnpool.train")


def training_arguments(cfg: TrainConfig, out_dir: Path, steps_per_epoch: int, *, run_name: str | None = None,
                       seed: int | None = None):
    """``TrainingArguments`` of the recipe, checkpoints under ``out_dir``.

    ``seed``: of the training's random draws (dropout); default ``cfg.seed``. A fold passes ``cfg.seed + fold``,
    the seed its model is built with: the ``Trainer`` seeds torch again with it, and with one seed for every fold
    each fold drew the same dropout masks. The batches' order stays seeded by ``cfg.seed`` (``data_seed``), so a
    fold resumed mid-epoch from a run started before this skips the very batches it trained.

    Option names differ across transformers 5.x releases; both spellings are handled here. The ``Trainer`` draws no
    bars of its own (:class:`~attnpool.training.progress.FoldProgress` does), except at ``verbose``; it reports to
    ``cfg.report_to``'s trackers under the fold's name, ``RUN_DIR/fold_K``.
    """
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
        "warmup_steps": cfg.warmup_ratio,  # below 1: a share of the training steps (validate keeps it there)
        "eval_strategy": strategy,
        "save_strategy": strategy,
        "eval_steps": cfg.eval_steps,
        "save_steps": cfg.eval_steps,
        "logging_steps": max(1, min(50, steps_per_epoch // 4 or 1)),
        "load_best_model_at_end": True,
        "metric_for_best_model": metric,
        "greater_is_better": greater,
        # the newest and the best: at 1 the Trainer deletes the newest at the end of training, so a fold that failed
        # after it (predicting its validation rows) re-trained from the best checkpoint on resume. 2 keeps no more
        # on disk at a save (the new one, the previous and the best) and one more in between only when the best is
        # the newest; a finished fold's checkpoints are deleted.
        "save_total_limit": 2,
        "restore_callback_states_from_checkpoint": True,  # --resume: early stopping's count of evaluations goes on
        "seed": cfg.seed if seed is None else seed,
        "data_seed": cfg.seed,  # the batches' order (a fold's rows are its own anyway): a run from before keeps it
        "report_to": integrations(cfg.report_to),
        "run_name": run_name,  # DIR/fold_K in MLflow, W&B...
        "disable_tqdm": get_verbosity() != "verbose",
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": not cpu,
        "use_cpu": cpu,  # else bf16 on a CPU-only machine is refused
        "ddp_backend": ddp_backend(cpu),  # several CPU processes: gloo; GPUs: accelerate's choice (NCCL)
        # Encoder weights may get no gradient (pooling_layers below the top layer leave the layers above unused):
        # DDP must be told. (Activation checkpointing is non-reentrant in transformers 5: compatible.)
        "ddp_find_unused_parameters": True,
        "remove_unused_columns": False,
        **trainer_flags(cfg.precision, "cpu" if cpu else "cuda"),
    }
    fields = transformers.TrainingArguments.__dataclass_fields__
    if "train_sampling_strategy" in fields:  # transformers >= 5.x: length-grouped batches, shuffled
        kwargs["train_sampling_strategy"] = "group_by_length"
    else:
        kwargs["group_by_length"] = True
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    kwargs[checkpointing] = cfg.gradient_checkpointing
    if cfg.adversarial is not None and cfg.grad_accum > 1:
        # Every micro-batch but a step's last runs under DDP's no_sync, where a process's gradient is its own rows'
        # alone: each process would perturb its weights along a direction of its own. Synchronised, every backward
        # all-reduces (averages) the gradient accumulated so far, the same on every process, so each perturbation
        # follows the global batch's gradient and the step's sum stays what one process with that batch gets.
        # (One process: nothing to synchronise. Under DDP: one all-reduce per micro-batch, before adversarial_start
        # too.)
        kwargs["accelerator_config"] = {"gradient_accumulation_kwargs": {"sync_each_batch": True}}
    args = transformers.TrainingArguments(**kwargs)
    # Both flags off, transformers reads ACCELERATE_MIXED_PRECISION (what `accelerate launch` exports from its
    # config) and an fp32 run trained under autocast: --precision decides.
    wanted = "bf16" if kwargs["bf16"] else "fp16" if kwargs["fp16"] else "no"
    if args.mixed_precision != wanted:
        logger.warning("precision: the accelerate config's mixed_precision %s is replaced by --precision %s (%s); "
                       "pass --precision to choose", args.mixed_precision, cfg.precision, wanted)
        args.mixed_precision = wanted
    return args
