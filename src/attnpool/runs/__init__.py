"""The run directory: its layout (:class:`Run`), atomic writes, the prediction tables, and the one-writer lock."""

from attnpool.runs.files import atomic_save_dir, atomic_write, atomic_write_json, atomic_write_text
from attnpool.runs.lock import LockedError, RunLock
from attnpool.runs.run import Run, RunError

__all__ = ["LockedError", "Run", "RunError", "RunLock", "atomic_save_dir", "atomic_write", "atomic_write_json",
           "atomic_write_text"]
