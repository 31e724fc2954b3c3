"""How many CPU threads prediction and serving use: one intra-op thread per physical core, and no oversubscription.

PyTorch and ONNX Runtime each run a pool of intra-op threads. More threads than physical cores (SMT siblings, or
cores this process may not run on) slow the matrix products down, and so does a second pool competing with the
first: a fast tokenizer parallelises ``tokenizer(batch)`` over every core, which in ``attnpool serve`` happens in
the request threads while the batcher's forward pass runs. :func:`set_threads` sizes the model's pool to the
physical cores this process may use (unless ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` says how many) and,
where tokenising overlaps the model, turns the tokenizer's own pool off.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

CPUINFO = Path("/proc/cpuinfo")


def usable_cpus() -> set[int]:
    """The logical CPUs this process may run on (its affinity mask; every CPU where the OS has no such mask)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def physical_cores(cpuinfo: str | None = None) -> int:
    """The physical cores among :func:`usable_cpus`: SMT siblings count once.

    Read from ``/proc/cpuinfo`` (``processor``, ``physical id``, ``core id``) on Linux; elsewhere, or when it
    does not say, the number of usable logical CPUs.

    Args:
        cpuinfo: The text of ``/proc/cpuinfo`` (read from the file when ``None``).
    """
    cpus = usable_cpus()
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return max(1, len(cpus))
    cores: set[tuple[str, str]] = set()
    entry: dict[str, str] = {}
    for line in [*cpuinfo.splitlines(), ""]:
        key, _, value = line.partition(":")
        if key.strip():
            entry[key.strip()] = value.strip()
            continue
        if "processor" in entry and "core id" in entry and int(entry["processor"]) in cpus:
            cores.add((entry.get("physical id", "0"), entry["core id"]))
        entry = {}
    return len(cores) if cores else max(1, len(cpus))


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # set, they size torch's pool: kept without threads


def set_threads(threads: int | None = None, *, tokenizer_threads: bool = True) -> int:
    """Size PyTorch's intra-op pool: ``threads``, or one per physical core; returns the number set.

    Args:
        threads: Intra-op threads; ``None``: :func:`physical_cores`, unless ``OMP_NUM_THREADS`` or
            ``MKL_NUM_THREADS`` is set: then the pool keeps its size (``torch.get_num_threads()``, which they set).
        tokenizer_threads: ``False`` where tokenising overlaps the forward pass (serving): sets
            ``TOKENIZERS_PARALLELISM=false``, unless the environment already sets it.

    Raises:
        ValueError: ``threads`` is not a positive integer (the message names ``--threads``, its flag).
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"--threads must be a positive number of threads, got {threads!r}: give 1 or more, or leave "
                         "--threads out (threads=None) for the default")
    chosen = any(os.environ.get(name, "").strip() for name in THREAD_VARIABLES)  # by the user: kept
    count = threads or (torch.get_num_threads() if chosen else physical_cores())
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    if not tokenizer_threads:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return count


F = TypeVar("F", bound=Callable[..., Any])


def restores_threads(func: F) -> F:
    """Decorate a call that sizes the thread pool (:func:`set_threads`) to give the caller's size back after it.

    ``predict`` in a notebook left the process at its own count of threads, also when it raised.
    """
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = torch.get_num_threads()
        try:
            return func(*args, **kwargs)
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)
    return wrapper  # type: ignore[return-value]
