"""One run, several processes: who writes, how the others learn what it decided, and how shards come back together.

``attnpool train`` started by ``torchrun`` or ``accelerate launch`` runs once per GPU. The ``Trainer`` (through
accelerate) owns the distributed part of training: it joins the process group, wraps the model (DDP, or FSDP /
DeepSpeed when the launcher is configured for them), shards the batches and gathers evaluation outputs. This module
covers what the recipe does around the ``Trainer``:

* only the main process touches the run directory; what it decides there (the resolved config, the folds, which
  folds are done, where to resume) and any error it meets reach every process, so that no process waits forever at a
  barrier for a process that has already failed;
* out-of-fold predictions are computed on one shard of the rows per process and gathered back in row order, each row
  exactly once, whatever the split (7 rows on 2 processes: 4 + 3, no padding, no duplicate).

Outside a launcher (one process) every helper is a plain function call.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")


def launched_world_size() -> int:
    """Processes the launcher started (``WORLD_SIZE``, set by ``torchrun`` and ``accelerate launch``); 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def use_cpu() -> bool:
    """Whether the ``Trainer`` will train on CPUs: no CUDA, or ``accelerate launch --cpu`` (``ACCELERATE_USE_CPU``)."""
    forced = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes")
    return forced or not torch.cuda.is_available()


def ddp_backend(cpu: bool) -> str | None:
    """``gloo`` for several CPU processes; ``None`` (accelerate's choice: NCCL on GPUs) otherwise.

    On CPUs accelerate would pick MPI whenever torch was built with it, which needs an MPI launcher; ``gloo`` works
    under ``torchrun``. A single process must get ``None``: a backend there makes accelerate look for a process group.
    """
    return "gloo" if cpu and launched_world_size() > 1 else None


def process_state(cpu: bool | None = None):
    """The process group as the ``Trainer`` sets it up (``accelerate.PartialState``), created now if it is not yet.

    ``TrainingArguments`` re-creates the state with the same settings (same ``cpu`` flag and backend), so creating it
    here first, before any ``Trainer`` exists, is what lets the recipe know its rank from the start.
    """
    from accelerate import PartialState

    cpu = use_cpu() if cpu is None else cpu
    return PartialState(cpu=cpu, backend=ddp_backend(cpu))


def _portable(err: BaseException) -> BaseException:
    """The error itself when it can be sent to other processes (pickled), else a ``RuntimeError`` with its text."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001 - any failure to pickle means: send the text instead
        return RuntimeError(f"{type(err).__name__}: {err}")


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the main process only; every process returns its result, or raises the error it raised.

    Also a barrier: no process returns before the main process has finished ``fn``.
    """
    state = process_state()
    if not state.use_distributed:
        return fn()
    from accelerate.utils import broadcast_object_list

    payload: list[Any] = [None]
    error: BaseException | None = None
    if state.is_main_process:
        try:
            payload[0] = ("ok", fn())
        except Exception as err:  # noqa: BLE001 - re-raised below, after the others have been told
            error = err
            payload[0] = ("error", _portable(err))
    broadcast_object_list(payload, from_process=0)
    kind, value = payload[0]
    if error is not None:
        raise error
    if kind == "error":
        raise value
    return value


def on_every(fn: Callable[[], T]) -> T:
    """Run ``fn`` on every process; if it failed on any of them, every process raises (the lowest rank's error).

    For work each process does for itself (reading and tokenising the data) where one process failing alone would
    leave the others blocked at the next collective step.
    """
    state = process_state()
    if not state.use_distributed:
        return fn()
    from accelerate.utils import gather_object

    result: Any = None
    error: BaseException | None = None
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - re-raised below, after the others have been told
        error = err
    failures = [e for e in gather_object([None if error is None else _portable(error)]) if e is not None]
    if error is not None:
        raise error
    if failures:
        raise failures[0]
    return result


def barrier() -> None:
    """Wait until every process gets here (nothing to wait for in a single process)."""
    state = process_state()
    if state.use_distributed:
        state.wait_for_everyone()


def shutdown() -> None:
    """Tear the launcher's process group down, if one is up: at the end of a process, before the interpreter exits.

    Left to interpreter shutdown, gloo's threads can outlive Python's teardown and abort the process
    ("terminate called without an active exception") after the work is done, which turns a finished
    ``torchrun`` job into a failed one.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def shard(rows: np.ndarray, index: int, count: int) -> np.ndarray:
    """Process ``index`` of ``count``'s share of ``rows``: every ``count``-th row from its own offset.

    The shares differ in size by at most one row and together hold each row exactly once.
    """
    return np.asarray(rows)[index::count]


def unshard(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Invert :func:`shard`: ``parts[i]`` holds the values of ``shard(rows, i, len(parts))``, in that order.

    Shapes:
        parts[i]: ``(n_i, ...)`` with ``sum(n_i) = n``; returns ``(n, ...)``.
    """
    count = len(parts)
    total = sum(len(p) for p in parts)
    filled = [np.asarray(p) for p in parts if len(p)]
    if not filled:  # no rows at all
        return np.asarray(parts[0]) if parts else np.zeros(0)
    out = np.empty((total, *filled[0].shape[1:]), dtype=filled[0].dtype)
    for i, part in enumerate(parts):
        if len(part):
            out[i::count] = part
    return out


def gather_shards(local: Any, extra: Any = None) -> tuple[list[Any], list[Any]]:
    """Every process's ``local`` (and ``extra``), in process order, on every process.

    Returns:
        ``(locals, extras)``: one entry per process, index = process rank.
    """
    state = process_state()
    if not state.use_distributed:
        return [local], [extra]
    from accelerate.utils import gather_object

    gathered = sorted(gather_object([(state.process_index, local, extra)]), key=lambda item: item[0])
    return [g[1] for g in gathered], [g[2] for g in gathered]
