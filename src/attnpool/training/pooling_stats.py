"""How spread a model's pooling weights are, measured on the forwards it runs: did the pooler collapse?

A learned pooler can collapse onto a few tokens in the first steps (fine when one word decides, harmful when the
meaning is spread over the sentence) or put its weight on ``[CLS]`` / ``[SEP]``. :class:`PoolingMonitor` hooks a
model's pooler and keeps running means, separately for training and evaluation forwards, of

* the normalised entropy of the token weights, ``H(a) / log n`` over the ``n`` real tokens of a row (the
  definition of :func:`attnpool.explanations.words.entropy`): 1 is mean pooling, 0 all weight on one token; rows with a
  single token are left out, multi-head weights are averaged over heads;
* the share of the weight on special tokens (the tokenizer's ``all_special_ids``).

The recipe logs them with the Trainer's logs (``pool_entropy``, ``pool_special_share``; ``eval_`` prefixed for
evaluations) and writes the validation values into each fold's metrics.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from attnpool.model import AttnPoolModel


def normalized_entropy(weights: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row ``H(a) / log n`` of token weights, and which rows count (at least two real tokens).

    Args:
        weights: ``(B, T)`` or ``(B, K, T)`` weights, summing to 1 over the real tokens (heads are averaged).
        mask: ``(B, T)`` boolean, ``True`` for real tokens.

    Returns:
        ``(entropy (B,), counted (B,) bool)`` in float32; the entropy of uncounted rows is 0.
    """
    w = weights.detach().float()
    if w.dim() == 2:
        w = w.unsqueeze(1)  # (B, 1, T)
    m = mask.unsqueeze(1)
    w = torch.where(m, w, torch.zeros_like(w))  # bf16 weights sum to 1 only within their rounding: renormalise
    w = w / w.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    plogp = torch.where(m & (w > 0), w * w.clamp_min(torch.finfo(torch.float32).tiny).log(), torch.zeros_like(w))
    n = mask.sum(dim=-1).float()  # (B,)
    counted = n >= 2
    entropy = -plogp.sum(dim=-1).mean(dim=1)  # (B,), averaged over heads
    return torch.where(counted, entropy / n.clamp_min(2).log(), torch.zeros_like(entropy)), counted


class PoolingMonitor:
    """Running means of the pooling weights' entropy and special-token share, kept by hooks on a model.

    Args:
        model: An :class:`~attnpool.AttnPoolForSequenceClassification` or :class:`~attnpool.AttnPoolModel` (also
            inside a DDP wrapper); nothing is recorded for a pooler without token weights.
        special_ids: Token ids counted as special (``tokenizer.all_special_ids``).

    Example:
        >>> monitor = PoolingMonitor(model, tokenizer.all_special_ids)  # doctest: +SKIP
        >>> model(**batch); monitor.summary(training=False)  # doctest: +SKIP
        {'pool_entropy': 0.93, 'pool_special_share': 0.11}
    """

    def __init__(self, model: nn.Module, special_ids: Iterable[int] = ()) -> None:
        base = next((m for m in model.modules() if isinstance(m, AttnPoolModel)), None)
        if base is None:
            raise ValueError(f"PoolingMonitor needs an attnpool model, got {type(model).__name__}")
        self.special_ids = sorted({int(i) for i in special_ids})
        self.active = bool(base.pooler.has_weights)
        self._paused = False
        self._input_ids: Tensor | None = None
        self._sums: dict[bool, Tensor | None] = {True: None, False: None}  # training -> [entropy, rows, share, rows]
        self._hooks = []
        if self.active:
            self._hooks.append(base.register_forward_pre_hook(self._remember_ids, with_kwargs=True))
            self._hooks.append(base.pooler.register_forward_hook(self._record))

    def _remember_ids(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._input_ids = ids if isinstance(ids, Tensor) else None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block: forwards that are not the model's own (an adversarial pass's)."""
        before, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = before

    def _record(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self._paused or not isinstance(output, tuple) or output[1] is None:
            return
        mask = args[1] if len(args) > 1 else None
        weights = output[1]
        seq_len = weights.shape[-1]
        mask = torch.ones(weights.shape[0], seq_len, dtype=torch.bool, device=weights.device) if mask is None \
            else mask != 0
        entropy, counted = normalized_entropy(weights, mask)
        share_sum = torch.zeros((), device=weights.device)
        rows = torch.zeros((), device=weights.device)
        ids = self._input_ids
        if self.special_ids and ids is not None and tuple(ids.shape) == tuple(mask.shape):
            special = torch.isin(ids, torch.tensor(self.special_ids, device=ids.device)) & mask  # (B, T)
            w = weights.detach().float()
            w = w if w.dim() == 2 else w.mean(dim=1)
            has = mask.any(dim=-1)
            share_sum = (w * special).sum(dim=-1)[has].sum()
            rows = has.sum().float()
        step = torch.stack([entropy[counted].sum(), counted.sum().float(), share_sum, rows])
        key = bool(module.training)
        self._sums[key] = step if self._sums[key] is None else self._sums[key] + step

    def summary(self, training: bool, reset: bool = True) -> dict[str, float]:
        """Means since the last reset over training (or evaluation) forwards: ``pool_entropy``, ``pool_special_share``.

        Keys are left out when nothing was measured (a pooler without weights, or no forward yet).
        """
        sums = self._sums[training]
        if reset:
            self._sums[training] = None
        if sums is None:
            return {}
        entropy_sum, entropy_rows, share_sum, share_rows = sums.tolist()
        out: dict[str, float] = {}
        if entropy_rows:
            out["pool_entropy"] = round(entropy_sum / entropy_rows, 4)
        if share_rows:
            out["pool_special_share"] = round(share_sum / share_rows, 4)
        return {k: v for k, v in out.items() if math.isfinite(v)}

    def remove(self) -> None:
        """Detach the hooks."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
