"""The recipe's ``Trainer``: optimiser, sampler, metrics, pooling statistics, progress, EMA, adversarial training."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState

from attnpool.allocator import keep_freed_memory, largest_parameter_bytes
from attnpool.config import TrainConfig
from attnpool.data.batching import LengthGroupedSampler, PaddingCollator
from attnpool.metrics import task_metrics
from attnpool.model.dropout import use_cpu_dropout
from attnpool.runs.files import full_disk_checked
from attnpool.runs.run import Run
from attnpool.tasks import scores_from_logits
from attnpool.training.adversarial import Adversary, StartReached, make_adversary, perturbed
from attnpool.training.checkpoints import read_state, resume_point
from attnpool.training.distributed import on_main
from attnpool.training.ema import WeightEMA
from attnpool.training.optim import build_optimizer, can_clip_in_step, clip_in_step, parameter_groups
from attnpool.training.pooling_stats import PoolingMonitor
from attnpool.training.progress import FoldProgress, get_verbosity
from attnpool.training.tracking import FoldTracking, TrackerRuns, fold_environment, resumed_trackers

logger = logging.getLogger("attnpool.train")


def weights_sharded(trainer: transformers.Trainer) -> bool:
    """Whether the trained weights are spread over the processes (FSDP, DeepSpeed), so no process holds them all."""
    return bool(getattr(trainer, "is_fsdp_enabled", False) or getattr(trainer, "is_deepspeed_enabled", False))


class TrainingClock(transformers.TrainerCallback, ExportableState):
    """The fold's training seconds over every resume: each checkpoint keeps those spent before it was saved.

    Its state goes into ``trainer_state.json`` and comes back on resume (``restore_callback_states_from_checkpoint``),
    as a new instance in the Trainer's callbacks: read it through :meth:`RecipeTrainer.train_seconds`.
    """

    def __init__(self) -> None:
        self.seconds_before = 0.0  # spent by the calls before this one, up to the checkpoint resumed from
        self._started: float | None = None
        self._ended: float | None = None

    @property
    def seconds(self) -> float:
        """Seconds of training so far, the resumed calls' included."""
        if self._started is None:
            return self.seconds_before
        return self.seconds_before + ((self._ended or time.perf_counter()) - self._started)

    def on_train_begin(self, args, state, control, **kwargs):
        """Start this call's clock."""
        self._started, self._ended = time.perf_counter(), None

    def on_train_end(self, args, state, control, **kwargs):
        """Stop it (the model's save and the out-of-fold predictions are not training)."""
        self._ended = time.perf_counter()

    def state(self) -> dict:
        """What a checkpoint keeps: the seconds spent until it was saved."""
        return {"args": {}, "attributes": {"seconds_before": round(self.seconds, 3)}}


class LogAtCheckpoints(transformers.TrainerCallback):
    """A log line at every checkpoint, so that a resumed fold's logs cover the steps an uninterrupted one's do.

    A checkpoint keeps neither the loss summed since the last log nor the pooling statistics': with a logging interval
    that does not divide the saving one, the first log after a resume averaged other steps than the uninterrupted
    run's. Added after the Trainer's own flow callback, which decides the saves.
    """

    def on_step_end(self, args, state, control, **kwargs):
        """Log at a step that saves."""
        control.should_log = control.should_log or control.should_save

    def on_epoch_end(self, args, state, control, **kwargs):
        """Log at an epoch's end that saves."""
        control.should_log = control.should_log or control.should_save


def whole_train_loss(saved: dict[str, Any] | None, call_loss: float, global_step: int) -> float:
    """The mean training loss of every step of a fold resumed from ``saved`` (its checkpoint's trainer state).

    The Trainer's ``train_loss`` averages the steps of its own call only (0.0 for a fold resumed where it had
    finished). The steps before are the checkpoint's logged losses, which tile them when a log fell at the
    checkpoint (:class:`LogAtCheckpoints`); else the call's own mean is kept.
    """
    before = int((saved or {}).get("global_step") or 0)
    logged = [(int(e["step"]), float(e["loss"])) for e in (saved or {}).get("log_history", []) if "loss" in e]
    if not before or not logged or logged[-1][0] != before or global_step <= 0:
        return call_loss
    steps = [step for step, _ in logged]
    total = sum(loss * (step - previous) for (step, loss), previous in zip(logged, [0, *steps[:-1]], strict=True))
    return (total + call_loss * (global_step - before)) / global_step


class SameSchedule(transformers.TrainerCallback):
    """Refuses to resume a checkpoint trained for another number of steps in all (another process count)."""

    def __init__(self) -> None:
        self.checkpoint: str | None = None
        self.max_steps: int | None = None  # the checkpoint's total, read by RecipeTrainer.train

    def on_train_begin(self, args, state, control, **kwargs):
        """Raise before the first step when the resumed run's total differs from the checkpoint's."""
        if self.max_steps is not None and state.max_steps != self.max_steps:
            raise ValueError(
                f"cannot resume from {self.checkpoint}: it was trained for {self.max_steps} steps in all and this "
                f"run would train {state.max_steps}, so the number of processes changed since the fold started (the "
                "batch size is the saved config's); where the epoch resumes and the learning-rate schedule would no "
                "longer match. Resume with as many processes as the fold started with, or delete "
                f"{Path(self.checkpoint).parent} to train the fold again from its start")


class RecipeTrainer(transformers.Trainer):
    """The ``Trainer`` with the recipe's optimiser, sampler and pooling-weight statistics in the logs.

    The optimiser has layer-wise decayed encoder rates and rates of their own for the pooler and the head
    (:func:`~attnpool.training.optim.parameter_groups`); the training order is
    :class:`~attnpool.data.batching.LengthGroupedSampler`'s; with a ``monitor``, every log line carries the
    normalised entropy of the pooling weights and their share on special tokens. With an ``ema``, evaluations see
    the averaged weights (:mod:`attnpool.training.ema`); with an ``adversary``, each training step from
    ``recipe.adversarial_start`` on adds the gradient of the perturbed model (:mod:`attnpool.training.adversarial`).

    Args:
        recipe: The run's options (learning rates, weight decay, LLRD, ``adversarial_start``).
        monitor: Pooling-weight statistics to add to the logs, or ``None``.
        ema: The weight average, also one of the ``callbacks``, or ``None``.
        adversary: The perturbation of adversarial training, or ``None``.
        **kwargs: ``transformers.Trainer`` arguments.

    Raises:
        ValueError: ``ema`` or ``adversary`` under FSDP or DeepSpeed, where no process holds the whole weights.
    """
    _save_checkpoint = full_disk_checked(transformers.Trainer._save_checkpoint)  # ENOSPC: one line, --resume

    def __init__(self, *args: Any, recipe: TrainConfig, monitor: PoolingMonitor | None = None,
                 ema: WeightEMA | None = None, adversary: Adversary | None = None, **kwargs: Any) -> None:
        self.recipe = recipe
        self.monitor = monitor
        self.ema = ema
        self.adversary = adversary
        self.schedule = SameSchedule()
        super().__init__(*args, **kwargs)
        self.add_callback(self.schedule)
        self.add_callback(TrainingClock())
        self.add_callback(LogAtCheckpoints())
        self._resumed_state: dict[str, Any] | None = None  # the checkpoint's trainer state, for train_loss
        if weights_sharded(self) and (ema is not None or adversary is not None):
            raise ValueError("ema_decay and adversarial need every process to hold the whole weights: they do not "
                             "work with FSDP or DeepSpeed; train with DDP (torchrun) or leave them off")

    def train_seconds(self) -> float:
        """Seconds of training of this fold, the calls before a resume included (up to their last checkpoint)."""
        return next(c for c in self.callback_handler.callbacks if isinstance(c, TrainingClock)).seconds

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        """The Trainer's ``train``; the weight average and the tracker runs are those of the checkpoint it resumes from.

        On a CPU, glibc keeps freed blocks as large as the biggest gradient for reuse first
        (:func:`~attnpool.allocator.keep_freed_memory`), and the model's dropout draws 16 random bits per element
        instead of one random number (:func:`~attnpool.model.dropout.use_cpu_dropout`).
        """
        if self.args.device.type == "cpu":
            keep_freed_memory(largest_parameter_bytes(self.model))  # attnpool.train logs the setting
            use_cpu_dropout(self.model)
        if resume_from_checkpoint is True:  # the newest complete one (the Trainer's own choice takes a torn one)
            folder = Path(self.args.output_dir)  # torn ones only: from step 0, as warned; none: the Trainer's error
            resume_from_checkpoint = on_main(lambda: resume_point(folder, self.ema is not None))  # one for all
        found = resume_from_checkpoint not in (None, False, True)
        saved = read_state(Path(str(resume_from_checkpoint)) / TRAINER_STATE_NAME) if found else None
        self.schedule.checkpoint = str(resume_from_checkpoint) if found else None
        self.schedule.max_steps = (saved or {}).get("max_steps") or None
        self._resumed_state = saved
        if self.ema is not None:
            self.ema.resume_from = str(resume_from_checkpoint) if found else None
        main = self.is_world_process_zero()
        with resumed_trackers(self.callback_handler.callbacks, saved, main, list(self.args.report_to or [])):
            return super().train(resume_from_checkpoint, *args, **kwargs)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> None:
        """The Trainer's epoch, unless training is over: a fold resumed from the checkpoint it finished at.

        Resumed there, the Trainer clears its stop flag and, where the last step falls inside an epoch (fractional
        ``epochs``), runs one more epoch without checking ``max_steps``: a step past the schedule's end, evaluated and
        saved, that could become the fold's best. The same after early stopping's last checkpoint (its count of
        evaluations without improvement is saved). Not the saved stop flag: a run stopped on purpose resumes.
        """
        stoppers = [c for c in self.callback_handler.callbacks if isinstance(c, transformers.EarlyStoppingCallback)]
        if self.state.global_step >= self.state.max_steps or any(
                c.early_stopping_patience_counter >= c.early_stopping_patience for c in stoppers):
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any],
                      num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
        """The Trainer's step, then, from ``adversarial_start`` on, the same step on the perturbed model.

        The second step is the Trainer's own (autocast, loss scaling, division by the gradient-accumulation steps),
        so its gradient adds to the plain one; the weights are restored after it. Returns the plain step's loss
        (what is logged).
        """
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.adversarial_now():
            paused = self.monitor.paused() if self.monitor is not None else contextlib.nullcontext()
            with perturbed(self.adversary), paused:  # the statistics describe the model, not its perturbation
                super().training_step(model, inputs, num_items_in_batch)
        return loss

    def adversarial_now(self) -> bool:
        """Whether this training step has an adversarial pass: an adversary, and the epoch at adversarial_start."""
        return self.adversary is not None and (self.state.epoch or 0.0) >= self.recipe.adversarial_start

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The Trainer's evaluation, of the weight average while training with one."""
        with self.ema.applied(self.model) if self.ema is not None else contextlib.nullcontext():
            return super().evaluate(*args, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The Trainer's save; into a checkpoint, the weight average is written right after the weights.

        So that ``trainer_state.json``, which the Trainer writes last, still marks a complete checkpoint
        (:func:`last_complete_checkpoint`) and the older checkpoints are rotated away only once it is (the average
        used to be written by :class:`~attnpool.training.ema.WeightEMA`'s ``on_save``, after the rotation).
        """
        super().save_model(output_dir, _internal_call)
        if _internal_call and output_dir is not None and self.ema is not None and self.args.should_save:
            self.ema.save(output_dir, self.state.global_step)

    def create_optimizer(self, *args: Any, **kwargs: Any):
        """AdamW over the recipe's parameter groups."""
        if self.optimizer is None:
            cfg = self.recipe
            groups = parameter_groups(self.model, cfg.lr, cfg.head_lr, cfg.weight_decay, cfg.llrd,
                                      pooler_lr=cfg.resolved_pooler_lr())
            self.optimizer = build_optimizer(groups)
        return self.optimizer

    def _get_learning_rate(self) -> float:
        """The top encoder layer's rate, ``lr`` as scheduled, for the logs (``learning_rate``).

        The Trainer logs the first parameter group's rate: under layer-wise decay that group is the embeddings'
        (``lr * llrd ** layers``). Every group follows the same schedule, so the first group's rate scaled by
        ``lr`` over its initial rate is the top layer's.
        """
        rate = super()._get_learning_rate()
        groups = getattr(self.optimizer, "param_groups", None) or [{}]
        initial = groups[0].get("initial_lr")
        return rate * self.args.learning_rate / initial if initial else rate

    def _clip_grad_norm(self, model: torch.nn.Module):
        """The Trainer's gradient clipping, done inside the fused AdamW step where it can be.

        Same clipping, one pass over the gradients fewer (:func:`~attnpool.training.optim.clip_in_step`). Not with a
        loss scaler (fp16), FSDP or DeepSpeed, where the Trainer's own clipping runs.
        """
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # inside accelerate's wrapper
        if (weights_sharded(self) or getattr(self.accelerator, "scaler", None) is not None
                or not can_clip_in_step(optimizer) or getattr(self, "_has_mixed_mesh_grads", lambda _: False)(model)):
            return super()._clip_grad_norm(model)
        return clip_in_step(optimizer, model.parameters(), self.args.max_grad_norm)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The Trainer's log, plus the pooling-weight statistics since the last one.

        A resumed fold's ``train_loss`` averages all its steps (:func:`whole_train_loss`).
        """
        if "train_loss" in logs and self._resumed_state is not None:
            logs["train_loss"] = whole_train_loss(self._resumed_state, logs["train_loss"], self.state.global_step)
        if self.monitor is not None:
            evaluation = any(key.startswith("eval_") for key in logs)
            stats = self.monitor.summary(training=not evaluation)
            logs.update({f"eval_{k}" if evaluation else k: v for k, v in stats.items()})
        super().log(logs, start_time)

    def _get_train_sampler(self, train_dataset=None):
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if dataset is None or not hasattr(dataset, "__len__"):
            return super()._get_train_sampler(train_dataset)
        lengths = [len(dataset[i]["input_ids"]) for i in range(len(dataset))]
        global_batch = self.args.train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        # a data set that changes per epoch hears of the epoch from the sampler, a resumed epoch included
        self._length_sampler = LengthGroupedSampler(lengths, global_batch, seed,
                                                    epoch_lengths=getattr(dataset, "epoch_lengths", None),
                                                    on_epoch=getattr(dataset, "set_epoch", None))
        return self._length_sampler

    def _get_eval_sampler(self, eval_dataset):
        """In the order given (``fold.eval_order``: the out-of-fold prediction's batches), not length-shuffled."""
        single = eval_dataset is not None and self.args.world_size <= 1  # else the Trainer shards it in order
        return torch.utils.data.SequentialSampler(eval_dataset) if single else None

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """The Trainer's loader that skips the batches a resumed epoch already trained, on that epoch's order.

        Under DDP the skipping wraps the sampler three levels deep (``SkipBatchSampler(BatchSamplerShard(
        BatchSampler(sampler)))``), where neither accelerate's ``set_epoch`` nor the Trainer's reaches it: the
        sampler would replay the first epoch's order (and context-dropout draw), skipping batches never trained.
        """
        sampler = getattr(self, "_length_sampler", None)
        if sampler is not None:
            sampler.set_epoch(math.floor(self.state.epoch))  # the checkpoint's epoch, e.g. 1.4 -> 1
        return super().get_resumed_dataloader(dataloader, num_batches)


def make_trainer(cfg: TrainConfig, model: Any, args: transformers.TrainingArguments, train_ds: Any, eval_ds: Any,
                 tokenizer: Any, monitor: PoolingMonitor | None = None, *, run: Run | None = None,
                 fold: int | None = None) -> RecipeTrainer:
    """The recipe's :class:`RecipeTrainer` for one fold: dynamic padding, the task's metrics, early stopping.

    The fold's progress is :class:`~attnpool.training.progress.FoldProgress`'s one line: the ``Trainer``'s own
    printer of log dicts is removed (at ``verbose`` its bars and dicts stay). Its trackers (``cfg.report_to``) write
    under the run directory (TensorBoard: ``RUN_DIR/tensorboard/fold_K``), one tracker run per fold, which a resumed
    fold goes on in (:func:`~attnpool.training.tracking.resumed_trackers`). With
    ``cfg.ema_decay`` it keeps a :class:`~attnpool.training.ema.WeightEMA`, with ``cfg.adversarial`` it trains
    adversarially (:mod:`attnpool.training.adversarial`).
    """

    def compute_metrics(eval_pred) -> dict[str, float]:
        logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
        return task_metrics(cfg.task, eval_pred.label_ids, scores_from_logits(cfg.task, logits))

    tracking = FoldTracking(list(args.report_to))  # the run's trackers, as training_arguments decided them
    callbacks: list[transformers.TrainerCallback] = [FoldProgress("training" if fold is None else f"fold {fold}"),
                                                     tracking, TrackerRuns()]
    ema = WeightEMA(cfg.ema_decay) if cfg.ema_decay is not None else None
    if ema is not None:
        callbacks.append(ema)
    adversary = None
    if cfg.adversarial is not None:
        adversary = make_adversary(cfg.adversarial, model, cfg.resolved_adversarial_eps(), cfg.adversarial_lr)
        callbacks.append(StartReached(cfg.adversarial_start))
    if cfg.early_stopping_patience:
        callbacks.append(transformers.EarlyStoppingCallback(early_stopping_patience=cfg.early_stopping_patience))
    with fold_environment(run, fold):  # the integrations' callbacks read it when the Trainer makes them
        trainer = RecipeTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                                data_collator=PaddingCollator(tokenizer),
                                compute_metrics=compute_metrics, callbacks=callbacks, recipe=cfg, monitor=monitor,
                                ema=ema, adversary=adversary)
    tracking.watch(trainer.callback_handler.callbacks)
    if get_verbosity() != "verbose":
        trainer.remove_callback(transformers.PrinterCallback)  # print(logs): the dicts go to train.log instead
    return trainer
