"""glibc ``malloc`` settings for training on a CPU (large freed blocks kept for reuse), and a process's peak memory.

glibc serves every allocation above its mmap threshold (at most 32 MiB however it adapts) with a fresh ``mmap``
and gives it back with ``munmap`` when freed. A training step allocates a few such blocks and frees them again:
the backward pass of the word embeddings writes a dense gradient the size of the embedding matrix (47 MB for
all-MiniLM-L6-v2, 525 MB for DeBERTa-v3-large), every step. Each new mapping costs one page fault per 4 KiB page
when it is first written, about 14,000 faults per MiniLM step on the project's CPU, and the embedding backward took
14.5 ms instead of 1.7 ms; a whole bf16 training step was about a fifth slower (``benchmarks/pppm_throughput.py``
measures it against the notebook recipe). :func:`keep_freed_memory` raises the mmap and trim thresholds with
``mallopt`` so those blocks stay in the heap and are reused by the next step.

The cost is memory that is not handed back to the system until the process ends (at most the peak the process
reached anyway). It is left alone where it does not apply or was chosen by the user: other C libraries (macOS,
musl), a preloaded allocator (jemalloc, tcmalloc, mimalloc), glibc's own ``MALLOC_*`` variables or malloc tunables,
and ``ATTNPOOL_MALLOC_TUNING=0`` (read by each call, but settings made once stay until the process exits: set it
before the first training of the process).

:func:`own_peak_bytes` reads the peak resident memory of the calling process itself, not of the one it started from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import sys
from pathlib import Path

from attnpool.options import switched_off

try:
    import resource
except ImportError:  # Windows
    resource = None

# mallopt parameters, from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MIN_THRESHOLD = 1 << 30  # 1 GiB: above the embedding gradient of the common encoders
MAX_THRESHOLD = 2**31 - 1  # mallopt takes a C int
OFF_VARIABLE = "ATTNPOOL_MALLOC_TUNING"
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
PRELOADED_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")

_applied: int | None = None  # the mmap threshold this process set, once set


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, when it is glibc (the only one whose ``mallopt`` takes these parameters)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _left_to_user() -> str | None:
    """Why the user's own allocator settings win, or ``None``."""
    if switched_off(OFF_VARIABLE):
        return f"{OFF_VARIABLE}={os.environ[OFF_VARIABLE]}"
    for name in USER_VARIABLES:
        if name in os.environ:
            return f"{name} is set"
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets malloc tunables"
    preload = os.environ.get("LD_PRELOAD", "")
    for allocator in PRELOADED_ALLOCATORS:
        if allocator in preload:
            return f"{allocator} is preloaded"
    return None


def keep_freed_memory(largest_block: int = 0) -> str:
    """Raise glibc's mmap and trim thresholds so that freed blocks up to ``largest_block`` bytes are reused.

    The mmap threshold becomes the larger of 1 GiB and twice ``largest_block`` (at most 2 GiB - 1, a C int); the
    trim threshold twice that (as glibc's own adaptive rule pairs them), within the same bound. Calling it again
    only raises them further.

    Args:
        largest_block: The largest block a step allocates, e.g. the biggest parameter's bytes (its gradient).

    Returns:
        A line for the log: what is set (the same whether this call or an earlier one set it), or why nothing was.
        Settings made once stay until the process exits: a later call that finds them switched off says so.
    """
    global _applied
    reason = _left_to_user()
    if reason is not None and _applied is not None:
        # mallopt cannot be undone here (glibc's own defaults adapt at run time), so "left alone" would be untrue.
        return (f"malloc: the settings applied earlier in this process stay until it exits ({reason} only keeps them "
                f"from being raised further): freed blocks up to {_applied / 2**20:,.0f} MiB are kept for reuse")
    if reason is not None:
        return f"malloc settings left alone: {reason}"
    libc = _glibc()
    if libc is None:
        return f"malloc settings left alone: not glibc ({platform.system()} {platform.libc_ver()[0] or 'libc'})"
    threshold = min(max(MIN_THRESHOLD, 2 * int(largest_block)), MAX_THRESHOLD)
    if _applied is None or _applied < threshold:
        if not (libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(threshold))
                and libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(min(2 * threshold, MAX_THRESHOLD)))):
            return f"malloc settings left alone: glibc refused an mmap threshold of {threshold:,} bytes"
        _applied = threshold
    return (f"malloc: freed blocks up to {_applied / 2**20:,.0f} MiB are kept for reuse instead of unmapped "
            f"(glibc mallopt; to turn this off, set {OFF_VARIABLE}=0 before the first training of the process)")


def largest_parameter_bytes(model) -> int:
    """The bytes of the model's largest trainable parameter in float32: the size of its gradient."""
    sizes = [p.numel() * 4 for p in model.parameters() if p.requires_grad]
    return max(sizes, default=0)


def own_peak_bytes() -> int | None:
    """This process's peak resident memory in bytes: ``VmHWM``, the high-water mark of its own address space.

    Not the ``ru_maxrss`` its parent gets from ``os.wait4``: on Linux that also counts the peak of the process it was
    started from (``exec`` keeps the high-water mark of the memory it replaces), so a child started by a process
    holding models (a compare called by ``benchmarks/quality.py``, a benchmark's memory child) would report at least
    that process's peak. ``VmHWM`` starts anew at ``exec``. Where ``/proc`` is missing (macOS), this process's own
    ``ru_maxrss`` (bytes on macOS, KiB on Linux), which may carry the same inherited peak; ``None`` on Windows.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
