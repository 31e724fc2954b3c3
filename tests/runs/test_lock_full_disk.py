"""A full disk while the lock file records its holder: an error naming the lock file and what to do, and no empty
lock file left behind (one would refuse every later command as "in use", its details not written)."""

from __future__ import annotations

import errno
import os

import pytest

from attnpool.runs import lock as lock_module
from attnpool.runs.lock import LOCK_NAME, RunLock


def _full(fd, info):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(("flock", "stale"), [(True, False), (True, True), (False, False)],
                         ids=["flock", "flock_stale_file", "o_excl"])  # O_EXCL removes a stale file before its own
def test_a_full_disk_writing_the_lock_file_says_so_and_leaves_no_lock_file(tmp_path, monkeypatch, flock, stale):
    if flock and lock_module.fcntl is None:
        pytest.skip("no flock here (Windows)")
    run = tmp_path / "run"
    run.mkdir()
    if stale:  # a holder killed without releasing: the file stays, its flock gone
        (run / LOCK_NAME).write_text('{"pid": 1, "host": "elsewhere"}')
    monkeypatch.setattr(RunLock, "_use_flock", lambda self: flock)
    monkeypatch.setattr(lock_module, "_write", _full)
    lock = RunLock(run, purpose="train")
    with pytest.raises(OSError) as caught:
        lock.acquire()
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value) == (f"[Errno 28] no space left on device writing the lock file {run / LOCK_NAME} "
                                 f"(of {run}); free space there (or in your quota), then run it again")
    assert not (run / LOCK_NAME).exists()
    assert not lock.held
    monkeypatch.undo()  # space freed: the lock is taken as usual
    with RunLock(run, purpose="train") as again:
        assert again.held


def test_other_errors_writing_the_lock_file_pass_unchanged(tmp_path, monkeypatch):
    def broken(fd, info):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(lock_module, "_write", broken)
    with pytest.raises(OSError, match=r"^\[Errno 5\] Input/output error$"):
        RunLock(tmp_path, purpose="train").acquire()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_full_quota_writing_the_lock_file_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def quota(fd, info):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(lock_module, "_write", quota)
    with pytest.raises(OSError, match=r"^\[Errno 122\] disk quota exceeded writing the lock file "):
        RunLock(tmp_path, purpose="train").acquire()
