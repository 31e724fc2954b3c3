r"""Adversarial training: perturb the model along the gradient of the step, and train on the perturbed model too.

:class:`~attnpool.training.trainer.RecipeTrainer` runs each training step as usual (forward, backward), then,
from ``adversarial_start`` on, perturbs the weights along the gradient just computed, runs the same batch forward
and backward again so the adversarial gradient adds to the plain one, and restores the weights bit for bit before
the optimizer steps. Two perturbations (``adversarial``):

* ``fgm`` -- the fast gradient method on the word-embedding matrix ``E`` (Miyato et al., "Adversarial Training
  Methods for Semi-Supervised Text Classification", ICLR 2017, arXiv:1605.07725; PPPM 2nd place, Kaggle 2022):
  :math:`E \leftarrow E + \epsilon\, g / \lVert g \rVert_2` with ``g`` the gradient of ``E`` (default
  :math:`\epsilon = 1`).
* ``awp`` -- adversarial weight perturbation (Wu et al., "Adversarial Weight Perturbation Helps Robust
  Generalization", NeurIPS 2020, arXiv:2004.05884), as the PPPM 1st-place solution applied it: every encoder weight
  matrix ``W`` (not the embeddings, norms or biases) moves by :math:`\eta\, g\, \lVert W \rVert / \lVert g
  \rVert` (``adversarial_lr`` :math:`\eta`, default 1), clamped to :math:`[W - \epsilon |W|, W + \epsilon |W|]`
  (``adversarial_eps``, default 0.001).

The gradient ``g`` is the one accumulated so far in the optimizer step: under gradient accumulation it includes the
earlier micro-batches of the step (and their adversarial passes), as in the Kaggle implementations. Under DDP it is
averaged over the processes at every micro-batch, not only at a step's last (``training_arguments`` turns on
accelerate's ``sync_each_batch``), so every process perturbs its weights the same way. A gradient that is zero or
not finite (an fp16 overflow) leaves its weights unperturbed. The perturbation is computed without a device
synchronisation.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import transformers
from torch import Tensor, nn

from attnpool.config import ADVERSARIAL
from attnpool.model import AttnPoolModel
from attnpool.model.encoders import encoder_layers

_TINY = 1e-6  # keeps ||g|| and ||W|| away from 0 in AWP's ratio (the 1st-place code's e)


def _direction(grad: Tensor) -> tuple[Tensor, Tensor]:
    """``(g / ||g||, ok)``: the unit direction of ``grad`` and whether it has one (finite, non-zero)."""
    norm = torch.linalg.vector_norm(grad.float())
    ok = torch.isfinite(norm) & (norm > 0)
    return torch.where(ok, grad / norm.clamp_min(_TINY).to(grad.dtype), torch.zeros_like(grad)), ok


class FGM:
    """The fast gradient method on the input word embeddings.

    Args:
        model: The model; its ``get_input_embeddings()`` is perturbed (it must be trained).
        eps: The L2 norm of the perturbation of the whole embedding matrix.
    """

    def __init__(self, model: nn.Module, eps: float = 1.0) -> None:
        self.weight = model.get_input_embeddings().weight
        if not self.weight.requires_grad:
            raise ValueError("adversarial=fgm perturbs the word embeddings, which are frozen here "
                             "(freeze_word_embeddings or freeze_layers); use adversarial=awp or train the embeddings")
        self.eps = float(eps)
        self._saved: Tensor | None = None

    @torch.no_grad()
    def perturb(self) -> None:
        """Add ``eps * g / ||g||`` to the embeddings (nothing without a gradient yet)."""
        grad = self.weight.grad
        if grad is None:
            return
        self._saved = self.weight.detach().clone()
        direction, _ = _direction(grad)
        self.weight.add_(direction, alpha=self.eps)

    @torch.no_grad()
    def restore(self) -> None:
        """The embeddings as they were before :meth:`perturb`."""
        if self._saved is not None:
            self.weight.copy_(self._saved)
            self._saved = None


def awp_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weights AWP perturbs: the trained weight matrices of the encoder's layers, not embeddings, norms or biases.

    Raises:
        ValueError: The model is no attnpool model, or none of its encoder's weight matrices is trained.
    """
    base = next((m for m in model.modules() if isinstance(m, AttnPoolModel)), None)
    if base is None:
        raise ValueError(f"adversarial=awp perturbs an attnpool model's encoder, got {type(model).__name__}")
    encoder = base.encoder
    # the transformer layers only: an encoder's own pooler (BERT's pooler.dense) is trained but never used here, so
    # it never gets a gradient and would hide that every layer is frozen
    try:
        inside = {id(p) for p in encoder_layers(encoder).parameters()}
    except ValueError:  # layers not found by their number: every weight matrix but the embeddings
        embeddings = {id(p) for m in encoder.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
        inside = {id(p) for p in encoder.parameters() if id(p) not in embeddings}
    params = {name: p for name, p in encoder.named_parameters()
              if p.requires_grad and p.dim() >= 2 and id(p) in inside}  # norms and biases are 1-d
    if not params:
        raise ValueError("adversarial=awp: no encoder weight matrix is trained (freeze_layers freezes them all)")
    return params


class AWP:
    """Adversarial weight perturbation of the encoder's weight matrices, relative to their size.

    Args:
        model: The model; :func:`awp_parameters` says which weights move.
        eps: The largest change of a weight relative to its magnitude (the box ``[W - eps|W|, W + eps|W|]``).
        lr: The step along the gradient relative to each matrix's norm, before the clamp.
    """

    def __init__(self, model: nn.Module, eps: float = 1e-3, lr: float = 1.0) -> None:
        self.params = awp_parameters(model)
        self.eps = float(eps)
        self.lr = float(lr)
        self._saved: dict[str, Tensor] = {}

    @torch.no_grad()
    def perturb(self) -> None:
        """Move each weight ``W`` by ``lr * ||W|| * g / ||g||``, then clamp it into ``W +- eps |W|``."""
        for name, p in self.params.items():
            if p.grad is None:
                continue
            saved = p.detach().clone()
            self._saved[name] = saved
            direction, _ = _direction(p.grad)
            scale = self.lr * (torch.linalg.vector_norm(saved.float()) + _TINY)
            p.add_(direction * scale.to(p.dtype))
            bound = self.eps * saved.abs()
            p.clamp_(saved - bound, saved + bound)

    @torch.no_grad()
    def restore(self) -> None:
        """The weights as they were before :meth:`perturb`."""
        for name, saved in self._saved.items():
            self.params[name].copy_(saved)
        self._saved = {}


Adversary = FGM | AWP


def make_adversary(kind: str, model: nn.Module, eps: float, lr: float = 1.0) -> Adversary:
    """The perturbation ``kind`` (one of :data:`attnpool.config.ADVERSARIAL`) of ``model``."""
    if kind == "fgm":
        return FGM(model, eps)
    if kind == "awp":
        return AWP(model, eps, lr)
    raise ValueError(f"adversarial must be one of {', '.join(ADVERSARIAL)}, got {kind!r}")


@contextlib.contextmanager
def perturbed(adversary: Adversary) -> Iterator[None]:
    """The adversary's perturbation in the model for the ``with`` block, restored after it (also on an error)."""
    try:
        adversary.perturb()
        yield
    finally:
        adversary.restore()


class StartReached(transformers.TrainerCallback):
    """Refuses, before the first step, an ``adversarial_start`` that no training step reaches.

    A step is adversarial when the epoch at its start is ``adversarial_start`` or later. The config can only check
    ``adversarial_start < epochs``; the last step starts a fraction of an epoch before the end (2 epochs of 4 steps:
    at 1.75), so a start of 1.9 trained without one adversarial pass, its config and model card saying it had.
    """

    def __init__(self, start: float) -> None:
        self.start = start

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        """Raise where the last step starts before ``start``, naming the latest start that works."""
        if train_dataloader is None or not state.max_steps:
            return
        batches, accumulation = len(train_dataloader), args.gradient_accumulation_steps
        updates = max(math.ceil(batches / accumulation), 1)  # optimizer steps per epoch, as the Trainer counts them
        last = state.max_steps - 1  # the Trainer's epoch at a step's start: batches of the epoch done / its batches
        epoch = last // updates + min(last % updates * accumulation, batches) / batches
        if epoch < self.start:
            raise ValueError(f"adversarial_start {self.start:g} is never reached: the last of the {state.max_steps} "
                             f"training steps starts at epoch {epoch:.4g}, so no step would train adversarially; "
                             f"give --adversarial-start {math.floor(epoch * 1000) / 1000:g} or less (the run "
                             "folder is made by now: rerun with --overwrite, as --resume keeps the saved value)")

