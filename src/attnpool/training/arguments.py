"""The recipe's ``transformers.TrainingArguments``: evaluation, checkpoints, precision, length grouping, DDP."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import transformers
from torch import nn

from attnpool.config import TrainConfig
from attnpool.model.encoders import encoder_layers, parameter_depths
from attnpool.precision import trainer_flags
from attnpool.tasks import primary_metric
from attnpool.training.distributed import ddp_backend, use_cpu
from attnpool.training.progress import get_verbosity
from attnpool.training.trackers import cfg_trackers


def unused_parameters(model: nn.Module) -> list[str]:
    """The names of ``model``'s trainable parameters that get no gradient: what DDP must be told to expect.

    The encoder's own pooler, where the model keeps it (built under
    :func:`~attnpool.model.modeling.keeping_encoder_pooler` to resume a checkpoint of attnpool before 2026-12-06, or an
    encoder class that cannot go without it); and with ``pooling_layers`` indices all below the top layer, the layers
    above the highest one and what reads the top layer (a final norm). Every pooler, the recurrent layer, the head
    and adversarial training give every other parameter a gradient (``tests/training/test_ddp_unused.py``).
    """
    base = model.base_model
    encoder, layers = base.encoder, base.config.pooling_layers
    own = getattr(encoder, "pooler", None)
    unused = list(own.parameters()) if isinstance(own, nn.Module) else []
    depth = getattr(encoder.config, "num_hidden_layers", None)
    if isinstance(layers, list) and isinstance(depth, int):
        top = max(i if i >= 0 else depth + 1 + i for i in layers)  # hidden_states[top]: layer top's output
        try:
            depths = parameter_depths(encoder, encoder_layers(encoder))  # 0: the top layer, `depth`: the embeddings
            unused += [p for p in encoder.parameters() if depths.get(id(p), depth) < depth - top]
        except ValueError:  # no layer list found: which layers are left out is unknown, but some are
            unused += list(encoder.parameters()) if top < depth else []
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for p in dict.fromkeys(unused) if p.requires_grad and id(p) in names]


def accelerate_precision_note(cfg: TrainConfig) -> str | None:
    """What to say when ``--precision`` replaces the accelerate config's ``mixed_precision``; once per run (recipe).

    Both bf16 and fp16 off, transformers reads ``ACCELERATE_MIXED_PRECISION`` (what ``accelerate launch`` exports from
    its config), and an fp32 run trained under autocast: :func:`training_arguments` puts ``--precision`` back.
    """
    flags = trainer_flags(cfg.precision, "cpu" if use_cpu() else "cuda")
    wanted = "bf16" if flags["bf16"] else "fp16" if flags["fp16"] else "no"
    configured = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if wanted != "no" or configured == "no":
        return None
    return (f"precision: the accelerate config's mixed_precision {configured} is replaced by --precision "
            f"{cfg.precision} ({wanted}); pass --precision to choose")


def logging_steps(steps_per_epoch: int, eval_steps: int | None = None) -> int:
    """The training-loss log interval: about a quarter epoch (at most 50 steps), a divisor of the save interval.

    Every checkpoint (``eval_steps``, else each epoch) also logs (``LogAtCheckpoints``): an interval that does not
    divide the saving one made the log before each checkpoint average a window of a few steps, the curve jagged and
    the tracker's points uneven. The largest divisor not above a quarter epoch keeps every window equal; where that
    is under a quarter of the interval wanted (a prime save interval: every step), the quarter epoch is kept, and
    one short window per save (the progress line weighs it by its length).
    """
    interval = max(1, int(eval_steps or steps_per_epoch))
    wanted = max(1, min(50, steps_per_epoch // 4))
    cap = min(wanted, interval)
    best = max(d for d in range(1, cap + 1) if interval % d == 0)
    return best if 4 * best >= cap else wanted


def training_arguments(cfg: TrainConfig, out_dir: Path, steps_per_epoch: int, *, run_name: str | None = None,
                       seed: int | None = None, model: nn.Module | None = None, trackers: list[str] | None = None):
    """``TrainingArguments`` of the recipe, checkpoints under ``out_dir``.

    ``seed``: of the training's random draws (dropout); default ``cfg.seed``. A fold passes ``fold_seed``,
    the seed its model is built with: the ``Trainer`` seeds torch again with it, and with one seed for every fold
    each fold drew the same dropout masks. The batches' order stays seeded by ``cfg.seed`` (``data_seed``), so a
    fold resumed mid-epoch from a run started before this skips the very batches it trained.

    Option names differ across transformers 5.x releases; both spellings are handled here. The ``Trainer`` draws no
    bars of its own (:class:`~attnpool.training.progress.FoldProgress` does), except at ``verbose``; it reports to
    ``cfg.report_to``'s trackers under the fold's name, ``RUN_DIR/fold_K``: ``trackers``, as the run decided them
    once (:func:`~attnpool.training.tracking.run_environment`); by default they are looked up (:func:`cfg_trackers`).

    DDP looks for parameters without a gradient at every step (``ddp_find_unused_parameters``) only where ``model``
    has some (:func:`unused_parameters`); without a ``model``, where ``cfg.pooling_layers`` are indices without -1.
    The accelerate config's ``mixed_precision`` gives way to ``--precision`` (:func:`accelerate_precision_note`).
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
        "logging_steps": logging_steps(steps_per_epoch, cfg.eval_steps),
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
        "report_to": cfg_trackers(cfg) if trackers is None else list(trackers),
        "run_name": run_name,  # DIR/fold_K in MLflow, W&B...
        "disable_tqdm": get_verbosity() != "verbose",
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": not cpu,
        "use_cpu": cpu,  # else bf16 on a CPU-only machine is refused
        "ddp_backend": ddp_backend(cpu),  # several CPU processes: gloo; GPUs: accelerate's choice (NCCL)
        # DDP must be told of parameters without a gradient; looking for them costs a pass over the autograd graph
        # per step. (Activation checkpointing is non-reentrant in transformers 5: compatible with either.)
        "ddp_find_unused_parameters": bool(unused_parameters(model)) if model is not None else (
            isinstance(cfg.pooling_layers, list) and -1 not in cfg.pooling_layers),
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
    # --precision, not the accelerate config's mixed_precision (accelerate_precision_note says so, once per run)
    args.mixed_precision = "bf16" if kwargs["bf16"] else "fp16" if kwargs["fp16"] else "no"
    return args
