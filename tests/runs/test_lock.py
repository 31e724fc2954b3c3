"""RunLock: one writer per run directory, refused at once, freed by a holder's death, counted within a process."""

import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from lock_helpers import wait_for

from attnpool.runs import lock as lock_mod
from attnpool.runs.lock import LOCK_NAME, LockedError, RunError, RunLock

posix_only = pytest.mark.skipif(lock_mod.fcntl is None, reason="needs fcntl.flock")

def _flocked(lock_file: Path) -> bool:
    """Whether some open file description holds the flock (a new descriptor conflicts even in this process)."""
    fd = os.open(lock_file, os.O_RDWR)
    try:
        lock_mod.fcntl.flock(fd, lock_mod.fcntl.LOCK_EX | lock_mod.fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@posix_only
def test_a_second_process_is_refused_at_once_with_the_holder(holder, tmp_path):
    run = tmp_path / "run"
    proc = holder(run)
    info = json.loads((run / LOCK_NAME).read_text())
    assert (info["pid"], info["host"], info["purpose"]) == (proc.pid, socket.gethostname(), "train")
    assert info["argv"][-4:] == [str(run), str(tmp_path / "ready0"), "-", "dir"]
    started = time.monotonic()
    with pytest.raises(LockedError) as err:
        RunLock(run, purpose="train").acquire()
    assert time.monotonic() - started < 0.5
    message = str(err.value)
    assert message.startswith(f"{run} is in use by another attnpool process (train, PID {proc.pid} on host "
                              f"{socket.gethostname()}, since {info['started']}); wait for it to finish. ")
    assert message.endswith(f"if no such process is running, delete {run / LOCK_NAME}")
    assert isinstance(err.value, ValueError)
    assert (run / LOCK_NAME).exists()  # the refused process leaves the holder's file alone


@posix_only
def test_a_killed_holders_lock_is_taken_over_and_logged(holder, tmp_path, caplog):
    run = tmp_path / "run"
    proc = holder(run)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (run / LOCK_NAME).exists()  # it had no chance to clean up
    with caplog.at_level(logging.WARNING, logger="attnpool"), RunLock(run, purpose="compare"):
        info = json.loads((run / LOCK_NAME).read_text())
        assert (info["pid"], info["purpose"]) == (os.getpid(), "compare")
    takeovers = [r.getMessage() for r in caplog.records if r.name == "attnpool.runs"]
    assert len(takeovers) == 1
    assert takeovers[0].startswith(f"taking over the lock of {run} left by PID {proc.pid} on host "
                                   f"{socket.gethostname()} (train since ")
    assert takeovers[0].endswith("; no longer running)")
    assert not (run / LOCK_NAME).exists()


@posix_only
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_keep_its_dead_parents_lock(holder, tmp_path):
    run = tmp_path / "run"
    proc = holder(run, fork=True)
    child_file = tmp_path / "ready0.child"
    wait_for(child_file, proc)
    child = int(child_file.read_text())
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        os.kill(child, 0)  # still running
        with RunLock(run):
            pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_release_removes_the_file_and_a_fresh_take_logs_nothing(tmp_path, caplog):
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="attnpool"):
        lock = RunLock(run).acquire()
        assert lock.held and (run / LOCK_NAME).is_file()  # creates the folder too
        lock.release()
        assert not lock.held and not (run / LOCK_NAME).exists()
        with RunLock(run):
            pass
    assert not [r for r in caplog.records if r.name == "attnpool.runs"]
    with pytest.raises(RuntimeError, match="is not held"):
        lock.release()


def test_the_context_manager_releases_on_an_exception(tmp_path):
    with pytest.raises(KeyError), RunLock(tmp_path):
        raise KeyError("boom")
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path):
        pass


def test_nested_acquisition_is_counted_and_only_the_outermost_exit_releases(tmp_path):
    lock_file = tmp_path / LOCK_NAME
    outer = RunLock(tmp_path, purpose="compare")
    with outer:
        with RunLock(tmp_path, purpose="train"), outer:  # another object and the same one again
            assert json.loads(lock_file.read_text())["purpose"] == "compare"
        assert lock_file.exists() and outer.held
        if lock_mod.fcntl is not None:
            assert _flocked(lock_file)
    assert not lock_file.exists()


def test_for_file_locks_beside_the_output(tmp_path):
    out = tmp_path / "preds" / "oof.csv"
    with RunLock.for_file(out) as lock:
        assert lock.lock_file == tmp_path / "preds" / ".oof.csv.lock"
        assert json.loads(lock.lock_file.read_text())["purpose"] == "predict"
        assert not out.exists()
    assert not lock.lock_file.exists()
    assert repr(lock) == f"RunLock({str(out)!r}, purpose='predict')"


@posix_only
def test_a_file_deleted_between_open_and_flock_is_not_the_one_locked(tmp_path, monkeypatch):
    """The race a release opens: its unlink lands after our open; we must lock the file now at the path."""
    lock_file = tmp_path / LOCK_NAME
    real_open = os.open
    calls = []

    def open_then_holder_releases(path, flags, mode=0o777):
        fd = real_open(path, flags, mode)
        if not calls:
            os.unlink(path)  # the holder's release
            real_open(path, os.O_RDWR | os.O_CREAT, 0o644)  # ... and a new file (left open: a stand-in taker)
        calls.append(path)
        return fd

    monkeypatch.setattr(lock_mod.os, "open", open_then_holder_releases)
    with RunLock(tmp_path):
        monkeypatch.setattr(lock_mod.os, "open", real_open)
        assert len(calls) == 2
        assert _flocked(lock_file)


@pytest.fixture
def no_fcntl(monkeypatch):
    monkeypatch.setattr(lock_mod, "fcntl", None)


def _started(pid: int) -> list | None:
    """When process ``pid`` started, as a lock file records it: [clock ticks since boot, the boot's id] (Linux)."""
    try:
        stat, boot = Path(f"/proc/{pid}/stat").read_text(), Path("/proc/sys/kernel/random/boot_id").read_text()
        return [int(stat[stat.rindex(")") + 2:].split()[19]), boot.strip()]
    except OSError:
        return None


def _write_holder(folder: Path, **info) -> None:
    """A lock file as a holder writes it: a live PID records when its process started, unless told otherwise."""
    if "process_start" not in info and isinstance(info.get("pid"), int):
        info["process_start"] = _started(info["pid"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps({"purpose": "train", "started": "2026-12-01T12:00:00+00:00", **info}))


def test_fallback_creates_and_removes_the_file_and_counts(tmp_path, no_fcntl):
    with RunLock(tmp_path) as lock:
        with RunLock(tmp_path):
            assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
        assert lock.lock_file.exists()
    assert not lock.lock_file.exists()


def test_fallback_refuses_a_live_holder_with_the_full_message(tmp_path, no_fcntl):
    _write_holder(tmp_path / "x", pid=os.getppid(), host=socket.gethostname())
    with pytest.raises(LockedError) as err:
        RunLock(tmp_path / "x").acquire()
    x, pid = tmp_path / "x", os.getppid()
    assert str(err.value) == (
        f"{x} is in use by another attnpool process (train, PID {pid} on host {socket.gethostname()}, "
        f"since 2026-12-01T12:00:00+00:00); wait for it to finish. A PID can be reused: before stopping {pid}, check "
        f"on {socket.gethostname()} that it is that process (`ps -o lstart=,args= -p {pid}`: attnpool's command line, "
        f"started before 2026-12-01T12:00:00+00:00); if no such process is running, delete {x / LOCK_NAME}")


proc_only = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux's /proc")


@proc_only
def test_fallback_takes_over_a_lock_whose_pid_is_now_another_process(tmp_path, no_fcntl, caplog):
    """Without flock, a PID reused by an unrelated process kept a dead holder's lock for good, and the message
    invited stopping that process."""
    other = subprocess.Popen(["sleep", "30"])  # a live process that started after the holder took the lock
    try:
        ticks, boot = _started(other.pid)
        for name, recorded in [("old", {"process_start": None}), ("reused", {"process_start": [ticks - 1, boot]}),
                               ("rebooted", {"process_start": [ticks, "another-boot"]})]:
            # an older attnpool's file: its time only (when the holder, killed in 2020, took the lock)
            _write_holder(tmp_path / name, pid=other.pid, host=socket.gethostname(),
                          started="2020-01-01T00:00:00+00:00", **recorded)
            with caplog.at_level(logging.WARNING, logger="attnpool"), RunLock(tmp_path / name) as lock:
                assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
            assert f"left by PID {other.pid} on host" in caplog.text and not lock.lock_file.exists()
        _write_holder(tmp_path / "held", pid=other.pid, host=socket.gethostname(), process_start=[ticks, boot])
        with pytest.raises(LockedError, match=f"before stopping {other.pid}, check"):  # that process is the holder
            RunLock(tmp_path / "held").acquire()
        now = datetime.now().astimezone().isoformat(timespec="seconds")  # an older file, taken after it started
        _write_holder(tmp_path / "held-old", pid=other.pid, host=socket.gethostname(), started=now,
                      process_start=None)
        with pytest.raises(LockedError):
            RunLock(tmp_path / "held-old").acquire()
    finally:
        other.kill()
        other.wait()


@proc_only
def test_a_holder_records_when_its_process_started(tmp_path, no_fcntl):
    with RunLock(tmp_path) as lock:
        recorded = json.loads(lock.lock_file.read_text())["process_start"]
    assert recorded == _started(os.getpid()) and recorded[0] > 0 and recorded[1]


def test_fallback_refuses_a_holder_on_another_host_and_an_unreadable_file(tmp_path, no_fcntl):
    _write_holder(tmp_path / "a", pid=2**22 + 12345, host=socket.gethostname() + "-elsewhere")
    with pytest.raises(LockedError, match="-elsewhere"):
        RunLock(tmp_path / "a").acquire()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / LOCK_NAME).write_text("")  # a holder that has not written yet
    with pytest.raises(LockedError, match=r"\(its details not written yet\)"):
        RunLock(tmp_path / "b").acquire()


def test_fallback_takes_over_a_dead_holder_on_this_host(tmp_path, no_fcntl, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    _write_holder(tmp_path, pid=pid, host=socket.gethostname())
    with caplog.at_level(logging.WARNING, logger="attnpool"), RunLock(tmp_path) as lock:
        assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
    assert [r.getMessage() for r in caplog.records if r.name == "attnpool.runs"] == [
        f"taking over the lock of {tmp_path} left by PID {pid} on host {socket.gethostname()} "
        "(train since 2026-12-01T12:00:00+00:00; no longer running)"]


def test_live_holder_names_a_holder_that_may_hold_the_lock_still(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert lock_mod.live_holder(tmp_path) is None  # no lock file
    for pid, host, live in ((int(dead.stdout), socket.gethostname(), False), (int(dead.stdout), "elsewhere", True),
                            (os.getppid(), socket.gethostname(), True)):
        _write_holder(tmp_path, pid=pid, host=host)
        assert lock_mod.live_holder(tmp_path) == (json.loads((tmp_path / LOCK_NAME).read_text()) if live else None)
    (tmp_path / LOCK_NAME).write_text("[1, 2")  # torn
    assert lock_mod.live_holder(tmp_path) is None


def test_another_thread_of_the_process_is_refused_and_its_own_nesting_still_counts(tmp_path):
    def take_in_a_thread():
        outcome = []

        def take():
            try:
                with RunLock(tmp_path, purpose="overwrite"), RunLock(tmp_path):
                    outcome.append("held")
            except LockedError as err:
                outcome.append(str(err))

        thread = threading.Thread(target=take, name="worker")
        thread.start()
        thread.join()
        return outcome

    with RunLock(tmp_path, purpose="train"), RunLock(tmp_path):
        assert take_in_a_thread() == [f"{tmp_path} is in use by another thread of this process (train, thread "
                                      f"'{threading.current_thread().name}'); wait for it to finish"]
    assert take_in_a_thread() == ["held"]
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.fixture
def foreign_file(tmp_path, monkeypatch):
    """Make the lock file now at ``folder`` another user's (0644): opening it for writing is denied."""
    real_open = os.open

    def make(folder: Path) -> Path:
        lock_file = folder / LOCK_NAME
        inode = os.stat(lock_file).st_ino

        def open_as_another_user(path, flags, mode=0o777):
            denied = flags & (os.O_RDWR | os.O_WRONLY) and not flags & os.O_EXCL
            if denied and Path(path) == lock_file and os.path.exists(path) and os.stat(path).st_ino == inode:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, mode)

        monkeypatch.setattr(lock_mod.os, "open", open_as_another_user)
        return lock_file

    return make


@posix_only
def test_another_users_held_lock_is_refused_with_its_holder(holder, tmp_path, foreign_file):
    run = tmp_path / "run"
    proc = holder(run)
    foreign_file(run)
    with pytest.raises(LockedError, match=f"in use by another attnpool process \\(train, PID {proc.pid} on host "):
        RunLock(run).acquire()
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == proc.pid


@posix_only
def test_another_users_stale_lock_is_taken_over_where_the_folder_allows(tmp_path, foreign_file, caplog):
    dead = 2**22 + 12345
    _write_holder(tmp_path, pid=dead, host=socket.gethostname())
    foreign_file(tmp_path)
    with caplog.at_level(logging.WARNING, logger="attnpool"), RunLock(tmp_path) as lock:
        assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
    assert [r.getMessage() for r in caplog.records if r.name == "attnpool.runs"] == [
        f"taking over the lock of {tmp_path} left by PID {dead} on host {socket.gethostname()} "
        "(train since 2026-12-01T12:00:00+00:00; no longer running)"]
    assert not (tmp_path / LOCK_NAME).exists()


@posix_only
def test_another_users_stale_lock_that_cannot_be_removed_says_so(tmp_path, foreign_file, monkeypatch):
    _write_holder(tmp_path, pid=4321, host="elsewhere")
    lock_file = foreign_file(tmp_path)
    real_unlink = os.unlink

    def unlink_denied(path, *args, **kwargs):
        if Path(path) == lock_file:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(lock_mod.os, "unlink", unlink_denied)
    with pytest.raises(RunError) as err:
        RunLock(tmp_path).acquire()
    assert not isinstance(err.value, LockedError)
    owner = lock_mod.pwd.getpwuid(os.getuid()).pw_name
    assert str(err.value) == (
        f"{tmp_path}: its lock file {lock_file} belongs to another user ({owner}) and cannot be written by you; no "
        f"process holds it (a stale lock of PID 4321 on host elsewhere), so delete it: rm {lock_file} (as {owner} "
        f"or someone allowed to write {tmp_path})")
    monkeypatch.undo()
    assert lock_file.exists() and not _flocked(lock_file)


@posix_only
def test_the_lock_file_mode_is_left_to_the_umask(tmp_path):
    previous = os.umask(0o002)  # a shared group folder: members may take over each other's stale locks
    try:
        with RunLock(tmp_path) as lock:
            assert lock.lock_file.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(previous)


@pytest.fixture
def flock_fails(monkeypatch):
    """A filesystem whose flock fails with the errno given (Lustre noflock: ENOSYS; NFS/CIFS: ENOLCK, ENOTSUP)."""
    calls = []

    def make(code: int) -> list:
        def flock(fd, operation):
            calls.append(fd)
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(lock_mod, "fcntl", SimpleNamespace(LOCK_EX=2, LOCK_NB=4, flock=flock))
        monkeypatch.setattr(lock_mod, "_flockless", set())
        return calls

    return make


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP])
def test_a_filesystem_without_flock_falls_back_to_o_excl_with_one_warning(tmp_path, flock_fails, code, caplog):
    calls = flock_fails(code)
    with caplog.at_level(logging.WARNING, logger="attnpool"):
        with RunLock(tmp_path / "a") as lock:  # the empty file of the failed flock is not left to refuse us
            assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
        assert not lock.lock_file.exists()
        with RunLock(tmp_path / "b"):
            pass
        _write_holder(tmp_path / "c", pid=os.getppid(), host=socket.gethostname())
        with pytest.raises(LockedError, match=f"PID {os.getppid()} on host"):
            RunLock(tmp_path / "c").acquire()
    assert len(calls) == 1  # not tried again on that filesystem
    warnings = [r.getMessage() for r in caplog.records if r.name == "attnpool.runs"]
    assert warnings == [f"the filesystem of {tmp_path / 'a'} has no flock ({os.strerror(code)}); run locks there "
                        "are O_EXCL files, freed when their holder exits normally (one left by a killed process on "
                        "another host must be deleted by hand)"]


def test_another_flock_error_is_raised_and_leaves_no_file(tmp_path, flock_fails):
    flock_fails(errno.EIO)
    with pytest.raises(OSError, match="Input/output error"):
        RunLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_NAME).exists()
