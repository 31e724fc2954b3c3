"""One writer per run directory: :class:`RunLock`, taken at once or refused at once with :class:`LockedError`.

The lock file (``FOLDER/.attnpool.lock``, or ``.NAME.lock`` beside an output file) records its holder as JSON:
``pid``, ``host``, ``purpose``, ``started`` (ISO time) and ``argv``. Where ``fcntl`` exists the file is held with
``flock(LOCK_EX | LOCK_NB)``, which the OS drops when the holder dies: a lock left by a killed process is simply
free, and taking it over logs one line. Without ``fcntl`` (Windows) the file is created with ``O_EXCL``, and one
naming a PID on this host that is no longer running counts as stale (best effort: two takers of one stale file
can race). ``flock`` on network filesystems is only as good as their lock emulation.

A process may take a lock it already holds (``compare`` around its ``train`` calls, or one ``train`` after
another): the acquisitions are counted per process and only the outermost release frees the lock. A forked child
does not inherit its parent's locks. Under ``torchrun`` only the main process should take the lock; the callers
see to that.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: the O_EXCL fallback
    fcntl = None

LOCK_NAME = ".attnpool.lock"
logger = logging.getLogger("attnpool.runs")
_held: dict[str, list[int]] = {}  # resolved lock file -> [fd, depth], for this process
_guard = threading.Lock()


class RunError(ValueError):
    """A run directory that cannot be used as asked (exists, wrong version, incomplete, corrupt, in use)."""


class LockedError(RunError):
    """Another live process holds the lock (a run in use); the message names it and says how to proceed."""


class RunLock:
    """An exclusive lock on a run directory (or an output file), as a context manager; it never waits.

    Args:
        path: What is locked, as messages name it: a folder, whose lock file is ``path/.attnpool.lock``.
        purpose: What the holder is doing (``"train"``, ``"compare"``, ...), shown to a refused process.
        lock_file: The lock file, when not the default; :meth:`for_file` uses it.

    Raises:
        LockedError: On entry (or :meth:`acquire`), when another live process holds the lock.

    Example:
        >>> with RunLock("runs/x", purpose="train"):  # doctest: +SKIP
        ...     train_folds()
    """

    def __init__(self, path: str | Path, *, purpose: str = "train", lock_file: str | Path | None = None) -> None:
        self.path = Path(path)
        self.purpose = purpose
        self.lock_file = Path(lock_file) if lock_file is not None else self.path / LOCK_NAME
        self._file = self.lock_file.resolve()  # absolute now, so a later chdir cannot move it
        self._depth = 0

    @classmethod
    def for_file(cls, file: str | Path, *, purpose: str = "predict") -> RunLock:
        """Lock an output file through ``.NAME.lock`` beside it (the file itself may not exist yet)."""
        file = Path(file)
        return cls(file, purpose=purpose, lock_file=file.parent / f".{file.name}.lock")

    def __repr__(self) -> str:
        return f"RunLock({str(self.path)!r}, purpose={self.purpose!r})"

    @property
    def held(self) -> bool:
        """Whether this object holds the lock (at least once)."""
        return self._depth > 0

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`LockedError` at once; creates the parent folder if needed."""
        with _guard:
            key = str(self._file)
            if key in _held:
                _held[key][1] += 1
            else:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                _held[key] = [self._open_flock() if fcntl is not None else self._open_excl(), 1]
            self._depth += 1
        return self

    def release(self) -> None:
        """Undo one :meth:`acquire`; the last one deletes the lock file and frees the lock."""
        with _guard:
            if not self._depth:
                raise RuntimeError(f"{self!r} is not held")
            self._depth -= 1
            entry = _held.get(str(self._file))
            if entry is None:  # taken before a fork; this child never held it
                return
            entry[1] -= 1
            if entry[1]:
                return
            del _held[str(self._file)]
            if fcntl is None:  # Windows cannot delete an open file; O_EXCL keeps others out until the unlink
                os.close(entry[0])
                self._file.unlink(missing_ok=True)
                return
            try:  # unlink while still holding the flock; a taker that opened the old file sees it gone, retries
                if _same_file(entry[0], self._file):
                    self._file.unlink()
            finally:
                os.close(entry[0])

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _open_flock(self) -> int:
        while True:
            fd = os.open(self._file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                info = _read(fd)
                os.close(fd)
                raise LockedError(self._message(info)) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self._file):
                break
            os.close(fd)  # the holder deleted this file between our open and our flock: lock the new one
        try:
            if previous := _read(fd):  # a normal release deletes the file, so its writer died holding it
                self._log_takeover(previous)
            _write(fd, self._holder())
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_excl(self) -> int:
        while True:
            try:
                fd = os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    info = _parse(self._file.read_bytes())
                except FileNotFoundError:  # released meanwhile
                    continue
                if not info or info.get("host") != socket.gethostname() or _alive(info.get("pid")):
                    raise LockedError(self._message(info)) from None
                self._log_takeover(info)
                self._file.unlink(missing_ok=True)
                continue
            _write(fd, self._holder())
            return fd

    def _holder(self) -> dict[str, Any]:
        started = datetime.now().astimezone().isoformat(timespec="seconds")
        return {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose, "started": started,
                "argv": sys.argv}

    def _message(self, info: dict[str, Any] | None) -> str:
        holder = (f"{info.get('purpose')}, PID {info.get('pid')} on host {info.get('host')}, "
                  f"since {info.get('started')}" if info else "its details not written yet")
        return (f"{self.path} is in use by another attnpool process ({holder}); wait for it to finish or stop it; "
                f"if no such process is running, delete {self.lock_file}")

    def _log_takeover(self, info: dict[str, Any]) -> None:
        logger.warning("taking over the lock of %s left by PID %s on host %s (%s since %s; no longer running)",
                       self.path, info.get("pid"), info.get("host"), info.get("purpose"), info.get("started"))


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        info = json.loads(data)
    except ValueError:  # empty (a holder that has not written yet) or torn
        return None
    return info if isinstance(info, dict) else None


def _read(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return _parse(b"".join(chunks))


def _write(fd: int, info: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(info).encode())


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid == os.getpid():  # our own PID in a file we do not hold: a leftover
        return False
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there: ask for its exit code instead
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return kernel32.GetLastError() == 5  # access denied: it exists
        code = ctypes.c_ulong()
        ok = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return not ok or code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _forget_in_child() -> None:  # a forked child (a DataLoader worker, say) must not keep its parent's locks alive
    global _guard
    _guard = threading.Lock()
    for fd, _ in _held.values():
        os.close(fd)  # the parent's descriptor still holds the flock
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
