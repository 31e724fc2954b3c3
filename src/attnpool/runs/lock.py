"""One writer per run directory: :class:`RunLock`, taken at once or refused at once with :class:`LockedError`.

The lock file (``FOLDER/.attnpool.lock``, or ``.NAME.lock`` beside an output file) records its holder as JSON:
``pid``, ``host``, ``purpose``, ``started`` (ISO time) and ``argv``. Where ``fcntl`` exists the file is held with
``flock(LOCK_EX | LOCK_NB)``, which the OS drops when the holder dies: a lock left by a killed process is simply
free, and taking it over logs one line. Without ``fcntl`` (Windows), or on a filesystem that has no ``flock``
(Lustre mounted ``noflock``, some NFS and CIFS mounts: a warning, once per filesystem), the file is created with
``O_EXCL``, and one naming a PID on this host that is no longer running counts as stale, as does one whose PID is
now another process's (Linux: one started since, ``process_start``: clock ticks since boot and the boot's id; best
effort: two takers of one stale file can race). ``flock`` on network filesystems is as good as their lock emulation.

The file is created with mode ``0o666`` less the umask. Another user's lock file that this user may not write is
still locked and read (``flock`` needs no write access): held, it refuses as any holder does; free (stale), it is
removed when the folder allows that, else the error says whose it is and to delete it.

A thread may take a lock it already holds (``compare`` around its ``train`` calls, or one ``train`` after
another): the acquisitions are counted per thread and only the outermost release frees the lock; another thread
of the process is refused like another process. A forked child does not inherit its parent's locks. Under
``torchrun`` only the main process should take the lock; the callers see to that.
"""

from __future__ import annotations

import errno
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
try:
    import pwd
except ImportError:  # Windows
    pwd = None

LOCK_NAME = ".attnpool.lock"
logger = logging.getLogger("attnpool.runs")
_guard = threading.Lock()
# What flock answers on a filesystem without it (Lustre noflock: ENOSYS; NFS without lockd, CIFS: ENOLCK, ENOTSUP).
_NO_FLOCK = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP})
_flockless: set[int] = set()  # st_dev of the filesystems where flock failed so: O_EXCL there from then on


class _Hold:
    """A lock this process holds: its file, acquisitions, thread, how held (no dataclass: tests load it by path)."""

    def __init__(self, fd: int, purpose: str, flocked: bool) -> None:
        self.fd, self.purpose, self.depth = fd, purpose, 1
        self.flocked = flocked  # False: the O_EXCL file (Windows, a filesystem without flock)
        thread = threading.current_thread()
        self.thread, self.thread_name = thread.ident, thread.name  # only the owner thread may acquire it again


_held: dict[str, _Hold] = {}  # resolved lock file -> its hold, for this process


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
            hold = _held.get(key)
            if hold is not None and hold.thread != threading.get_ident():
                raise LockedError(f"{self.path} is in use by another thread of this process ({hold.purpose}, thread "
                                  f"{hold.thread_name!r}); wait for it to finish")
            if hold is not None:
                hold.depth += 1
            else:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                fd = self._open_flock() if self._use_flock() else None
                _held[key] = _Hold(fd if fd is not None else self._open_excl(), self.purpose, fd is not None)
            self._depth += 1
        return self

    def release(self) -> None:
        """Undo one :meth:`acquire`; the last one deletes the lock file and frees the lock."""
        with _guard:
            if not self._depth:
                raise RuntimeError(f"{self!r} is not held")
            self._depth -= 1
            hold = _held.get(str(self._file))
            if hold is None:  # taken before a fork; this child never held it
                return
            hold.depth -= 1
            if hold.depth:
                return
            del _held[str(self._file)]
            if not hold.flocked:  # Windows cannot delete an open file; O_EXCL keeps others out until the unlink
                os.close(hold.fd)
                self._file.unlink(missing_ok=True)
                return
            try:  # unlink while still holding the flock; a taker that opened the old file sees it gone, retries
                if _same_file(hold.fd, self._file):
                    self._file.unlink()
            finally:
                os.close(hold.fd)

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _use_flock(self) -> bool:
        return fcntl is not None and os.stat(self._file.parent).st_dev not in _flockless

    def _open_flock(self) -> int | None:
        """The flocked lock file; ``None`` where the filesystem has no flock (then O_EXCL, :meth:`_open_excl`)."""
        denied = 0
        while True:
            try:
                fd, created = _open_or_create(self._file)
            except PermissionError:  # another user's file (0644): lock it read-only, flock needs no write access
                denied += 1
                try:
                    again = self._take_foreign(denied)
                except OSError as err:
                    if err.errno not in _NO_FLOCK:
                        raise
                    self._no_flock(err)
                    return None
                if again:
                    continue
                raise
            try:
                self._flock(fd)
            except LockedError:
                raise
            except BaseException as err:
                if created and _same_file(fd, self._file):  # leave no empty lock file behind
                    self._file.unlink()
                os.close(fd)
                if isinstance(err, OSError) and err.errno in _NO_FLOCK:
                    self._no_flock(err)
                    return None
                raise
            if _same_file(fd, self._file):
                break
            os.close(fd)  # the holder deleted this file between our open and our flock: lock the new one
        return self._write_holder(fd, read_first=True)

    def _write_holder(self, fd: int, read_first: bool = False) -> int:
        """Write this process into the held lock file ``fd``, returned; failing, delete the file and close ``fd``."""
        try:
            if read_first and (previous := _read(fd)):  # a normal release deletes the file: its writer died holding it
                self._log_takeover(previous)
            _write(fd, self._holder())
            return fd
        except BaseException as err:
            if _same_file(fd, self._file):  # ours (flocked, or made with O_EXCL): not left behind empty
                self._file.unlink(missing_ok=True)
            os.close(fd)
            if getattr(err, "errno", None) in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):  # disk, quota
                raise OSError(err.errno, f"{os.strerror(err.errno).lower()} writing the lock file {self.lock_file} "
                              f"(of {self.path}); free space there (or in your quota), then run it again") from err
            raise

    def _flock(self, fd: int) -> None:
        """Lock ``fd`` now, or close it and raise :class:`LockedError` naming the holder (other errors leave it)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read(fd)
            os.close(fd)
            raise LockedError(self._message(info)) from None

    def _no_flock(self, err: OSError) -> None:
        _flockless.add(os.stat(self._file.parent).st_dev)
        logger.warning("the filesystem of %s has no flock (%s); run locks there are O_EXCL files, freed when their "
                       "holder exits normally (one left by a killed process on another host must be deleted by "
                       "hand)", self._file.parent, os.strerror(err.errno))

    def _take_foreign(self, attempt: int) -> bool:
        """Another user's lock file we may not write: refuse if held, else remove it; whether to open again."""
        try:
            fd = os.open(self._file, os.O_RDONLY)
        except FileNotFoundError:  # released meanwhile; or the folder itself denies us: then the PermissionError
            return attempt < 3
        try:
            self._flock(fd)
        except LockedError:
            raise
        except BaseException:
            os.close(fd)
            raise
        try:
            info = _read(fd)
            if not _same_file(fd, self._file):  # released and replaced meanwhile
                return True
            try:
                self._file.unlink()  # held while unlinked: a taker that opened it sees it gone, as after a release
            except PermissionError:
                try:
                    owner = pwd.getpwuid(os.fstat(fd).st_uid).pw_name
                except (AttributeError, KeyError):  # no pwd (Windows), or a uid without a name
                    owner = f"uid {os.fstat(fd).st_uid}"
                raise RunError(f"{self.path}: its lock file {self.lock_file} belongs to another user ({owner}) and "
                               "cannot be written by you; no process holds it (a stale lock"
                               + (f" of PID {info.get('pid')} on host {info.get('host')}" if info else "")
                               + f"), so delete it: rm {self.lock_file} (as {owner} or someone allowed to write "
                               f"{self.lock_file.parent})") from None
            if info:
                self._log_takeover(info)
            return True
        finally:
            os.close(fd)

    def _open_excl(self) -> int:
        while True:
            try:
                fd = os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                try:
                    info = _parse(self._file.read_bytes())
                except FileNotFoundError:  # released meanwhile
                    continue
                if not info or info.get("host") != socket.gethostname() or holder_alive(info):
                    raise LockedError(self._message(info)) from None
                self._log_takeover(info)
                self._file.unlink(missing_ok=True)
                continue
            return self._write_holder(fd)

    def _holder(self) -> dict[str, Any]:
        started = datetime.now().astimezone().isoformat(timespec="seconds")
        return {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose, "started": started,
                "argv": sys.argv, "process_start": _process_start(os.getpid())}

    def _message(self, info: dict[str, Any] | None) -> str:
        if not info:
            return (f"{self.path} is in use by another attnpool process (its details not written yet); wait for it to "
                    f"finish; if no attnpool process is using it, delete {self.lock_file}")
        pid, host, since = info.get("pid"), info.get("host"), info.get("started")
        check = f"Get-Process -Id {pid} | fl StartTime,Path" if os.name == "nt" else f"ps -o lstart=,args= -p {pid}"
        return (f"{self.path} is in use by another attnpool process ({info.get('purpose')}, PID {pid} on host {host}, "
                f"since {since}); wait for it to finish. A PID can be reused: before stopping {pid}, check on {host} "
                f"that it is that process (`{check}`: attnpool's command line, started before {since}); if no such "
                f"process is running, delete {self.lock_file}")

    def _log_takeover(self, info: dict[str, Any]) -> None:
        logger.warning("taking over the lock of %s left by PID %s on host %s (%s since %s; no longer running)",
                       self.path, info.get("pid"), info.get("host"), info.get("purpose"), info.get("started"))


def _open_or_create(path: Path) -> tuple[int, bool]:
    """Open the lock file for writing, creating it (mode 0o666 less the umask) if needed; and whether we did."""
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), True
        except FileExistsError:
            pass
        try:
            return os.open(path, os.O_RDWR), False
        except FileNotFoundError:  # released between the two opens
            continue


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        info = json.loads(data)
    except ValueError:  # empty (a holder that has not written yet) or torn
        return None
    return info if isinstance(info, dict) else None


def _read(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    return _parse(b"".join(iter(lambda: os.read(fd, 65536), b"")))


def _write(fd: int, info: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(info).encode())


def process_alive(pid: object) -> bool:
    """Whether process ``pid`` of this host is running; ``False`` for a non-integer or this process's own PID."""
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


def live_holder(folder: str | Path) -> dict[str, Any] | None:
    """The holder ``folder``'s lock file names, if it may hold it still (this host's: while it runs), else ``None``."""
    try:
        info = _parse((Path(folder) / LOCK_NAME).read_bytes())
    except OSError:
        return None
    return info if info and (info.get("host") != socket.gethostname() or holder_alive(info)) else None


def holder_alive(info: dict[str, Any]) -> bool:
    """Whether the lock's holder, a PID of this host, runs: its PID alive and, where /proc tells, the same process."""
    alive = process_alive(pid := info.get("pid"))
    if not alive or (now := _process_start(pid)) is None:  # no /proc (Windows, macOS): the PID alone tells
        return alive
    if isinstance(info.get("process_start"), list):  # [ticks, boot id]: the PID reused, or the host rebooted
        return info["process_start"] == list(now)
    try:  # an older lock file: a process started after its time (a minute's margin for the clock) is not its holder
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if "btime " in line)
        return btime + now[0] / os.sysconf("SC_CLK_TCK") <= datetime.fromisoformat(info["started"]).timestamp() + 60
    except (OSError, ValueError, StopIteration, KeyError, TypeError):
        return True


def _process_start(pid: int) -> tuple[int, str] | None:
    """When ``pid`` started: clock ticks since boot (/proc/PID/stat field 22), the boot's id; or ``None``."""
    try:  # without /proc (Windows, macOS), or once the process has exited; the fields after the name from field 3:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19]), Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None


def _forget_in_child() -> None:  # a forked child (a DataLoader worker, say) must not keep its parent's locks alive
    global _guard
    _guard = threading.Lock()
    for hold in _held.values():
        os.close(hold.fd)  # the parent's descriptor still holds the flock
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
