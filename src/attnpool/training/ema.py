r"""``ema_decay``: an exponential moving average of the weights, beside the training (PPPM 2nd place, 2022).

After every optimizer step the float32 shadow of each trainable parameter moves towards it,

.. math:: \bar\theta \leftarrow d\,\bar\theta + (1 - d)\,\theta,

starting from the weights training starts with. The recipe evaluates the shadow (so the best checkpoint is the best
averaged model), and at the end of training the model holds the shadow of the best checkpoint: that is what the fold
folder saves and what predicts the out-of-fold rows. Checkpoints keep the raw weights (training resumes from them)
and the shadow beside them in ``ema.safetensors``.

The average carries ``d ** steps`` of the starting weights (the randomly initialised head among them) after
``steps`` updates: with ``d = 0.999`` that is 37% after 1,000 steps and 5% after 3,000. A fold too short for its
decay is warned about at its start.

Under ``torchrun`` every process updates its own shadow from the same synchronised parameters, so the shadows are
equal; only the main process writes them. FSDP and DeepSpeed (sharded weights) are refused by the trainer.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from attnpool.runs.files import atomic_write

logger = logging.getLogger("attnpool.train")

EMA_FILE = "ema.safetensors"  # in each checkpoint folder, beside the Trainer's files
# The share of the starting weights still in the final average above which a fold is warned about.
STALE_SHARE = 0.1


def trainable(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters the average follows: those being trained, by name."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


class WeightEMA(transformers.TrainerCallback):
    """The ``Trainer`` callback that keeps the shadow weights, saves and restores them, and swaps them in.

    Args:
        decay: ``d`` in (0, 1): the share of the average kept at each step (0.999: about the last 1,000 steps).

    Example:
        >>> ema = WeightEMA(0.999)  # doctest: +SKIP
        >>> trainer = RecipeTrainer(..., callbacks=[ema], ema=ema)  # doctest: +SKIP
    """

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema_decay must be in (0, 1), e.g. 0.999, got {decay}")
        self.decay = float(decay)
        self.shadow: dict[str, Tensor] = {}
        self.resume_from: str | None = None  # the checkpoint training resumes from, set before train() starts
        self.training = False  # the shadow is swapped in for evaluation only while training
        self._raw: dict[str, Tensor] | None = None

    # --- the average ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def start(self, model: nn.Module) -> None:
        """Start the shadow at the model's current weights."""
        self.shadow = {name: p.detach().float().clone() for name, p in trainable(model).items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """One step of the average: ``shadow += (1 - d) * (weights - shadow)``."""
        params = trainable(model)
        if params.keys() != self.shadow.keys():
            raise RuntimeError("ema: the trainable parameters changed during training (frozen or unfrozen); "
                               "the weight average cannot follow them")
        for name, p in params.items():
            self.shadow[name].lerp_(p.detach().float(), 1.0 - self.decay)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Write the shadow into the model's parameters (in their own dtype)."""
        for name, p in trainable(model).items():
            p.copy_(self.shadow[name])

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """The shadow in the model for the ``with`` block, the raw weights back after it (bit for bit).

        Outside training (before ``on_train_begin``, after ``on_train_end``) the model is left as it is.
        """
        if not self.training or self._raw is not None:
            yield
            return
        params = trainable(model)
        self._raw = {name: p.detach().clone() for name, p in params.items()}
        self.copy_to(model)
        try:
            yield
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(self._raw[name])
            self._raw = None

    # --- files ------------------------------------------------------------------------------------------------------

    def save(self, folder: str | Path, step: int) -> Path:
        """Write the shadow to ``folder/ema.safetensors`` (atomically), with its decay and step as metadata."""
        tensors = {name: t.detach().cpu().contiguous() for name, t in self.shadow.items()}
        metadata = {"decay": repr(self.decay), "step": str(step)}
        return atomic_write(Path(folder) / EMA_FILE, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))

    def load(self, folder: str | Path, model: nn.Module) -> None:
        """Read the shadow from ``folder/ema.safetensors``; its names must be the model's trainable parameters."""
        path = Path(folder) / EMA_FILE
        params = trainable(model)
        with safe_open(str(path), framework="pt") as f:
            names = set(f.keys())
            if names != params.keys():
                missing, extra = sorted(params.keys() - names), sorted(names - params.keys())
                raise ValueError(f"{path}: the saved weight average does not match the model's trainable "
                                 f"parameters (missing {missing[:3]}, unexpected {extra[:3]}); was the checkpoint "
                                 "made with other freeze_layers / freeze_word_embeddings or another model?")
            self.shadow = {name: f.get_tensor(name).to(device=p.device, dtype=torch.float32)
                           for name, p in params.items()}

    # --- the Trainer's events ---------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Start the shadow, or read it back from the checkpoint training resumes from."""
        saved = Path(self.resume_from) / EMA_FILE if self.resume_from else None
        if saved is not None and saved.is_file():
            self.load(saved.parent, model)
        else:
            if saved is not None:
                logger.warning("ema: %s has no %s; the weight average restarts from the checkpoint's weights",
                               self.resume_from, EMA_FILE)
            self.start(model)
        self.training = True
        stale = self.decay ** max(state.max_steps, 1)
        if stale > STALE_SHARE and state.is_world_process_zero:
            suggestion = 0.01 ** (1 / max(state.max_steps, 1))
            logger.warning("ema_decay=%s over %d optimizer steps: the final average still holds %.0f%% of the "
                           "starting weights; a decay near %.4f would leave 1%%", self.decay, state.max_steps,
                           100 * stale, math.floor(suggestion * 1e4) / 1e4)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        """Follow the optimizer step."""
        self.update(model)

    def on_save(self, args, state, control, **kwargs):
        """Write the shadow into the checkpoint the Trainer has just saved, unless there already (main process only).

        attnpool's Trainer writes it with the weights, before the checkpoint is marked complete; this is for a
        plain ``transformers.Trainer`` given this callback.
        """
        if not args.should_save:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if not os.path.isdir(folder):
            raise RuntimeError(f"ema: no checkpoint folder {folder} to save the weight average in")
        if not os.path.isfile(os.path.join(folder, EMA_FILE)):
            self.save(folder, state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """Leave the model holding the average: the best checkpoint's (as the Trainer loaded its weights), else ours."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()  # the main process may still be writing the last checkpoint's average
        best = state.best_model_checkpoint if args.load_best_model_at_end else None
        if best and (Path(best) / EMA_FILE).is_file():
            self.load(best, model)
        elif best:
            logger.warning("ema: the best checkpoint %s has no %s; the model keeps the last weight average",
                           best, EMA_FILE)
        self.copy_to(model)
        self.training = False
