"""SIGTERM (a SLURM or Kubernetes preemption, ``kill``) ends a command as Ctrl-C does.

While :func:`sigterm_interrupts` is active on the main thread, SIGTERM raises :class:`Terminated`, a
``KeyboardInterrupt``, there: ``train`` writes why it stopped into its ``train.log``, marks its trackers' runs killed
and releases its lock, and the command line prints one line with the way on (``--resume``) and returns
:data:`TERMINATED`. :func:`end_by_signal` then ends the process by the signal itself, as Python's default handlers
would have: a calling shell loop or scheduler sees a process killed by it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from attnpool.training.distributed import launched_world_size

INTERRUPTED = 128 + signal.SIGINT  # 130: what the command line returns after Ctrl-C
TERMINATED = 128 + signal.SIGTERM  # 143: after SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM received (raised in the main thread by :func:`sigterm_interrupts`): an interrupt, from outside."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one (SLURM's and a launcher's) must not break the cleanup
    raise Terminated("SIGTERM")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread meanwhile; the previous handler is restored after.

    Once: a second SIGTERM is ignored while the command cleans up (the process still ends by the signal after).

    Nothing changes off the main thread (where Python cannot set a handler), where SIGTERM is ignored (a parent's
    ``trap '' TERM``), and under a launcher of several processes: torchrun stops the survivors of a failed process
    by SIGTERM, often while they wait in a collective, where a Python handler would run only once the wait timed out
    (and then SIGKILL); the default handler ends them at once.
    """
    try:
        several = launched_world_size() > 1
    except ValueError:  # WORLD_SIZE that is no number: the command's own check says so, not a traceback here
        several = False
    if several or threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:  # None: a handler not set from Python; the default is what a process starts with
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def end_by_signal(code: int) -> None:
    """After :data:`INTERRUPTED` or :data:`TERMINATED`: end this process by SIGINT or SIGTERM (POSIX; else return)."""
    sig = {INTERRUPTED: signal.SIGINT, TERMINATED: signal.SIGTERM}.get(code)
    if sig is not None and os.name == "posix":
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)


__all__ = ["INTERRUPTED", "TERMINATED", "Terminated", "end_by_signal", "sigterm_interrupts"]
