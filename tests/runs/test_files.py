"""Atomic writes: never a partial file, and the permissions a plain ``open()`` would give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnpool.runs.files import atomic_save_dir, atomic_write, atomic_write_text


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_atomic_files_and_folders_get_the_umask_permissions(tmp_path, umask_022):
    path = atomic_write_text(tmp_path / "a.json", "{}")
    assert path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    folder = atomic_save_dir(tmp_path / "model", lambda tmp: (tmp / "x").write_text("1"))
    assert folder.stat().st_mode & 0o777 == 0o755  # not mkdtemp's 0700
    assert (folder / "x").read_text() == "1"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = atomic_write_text(tmp_path / "out.csv", "old")

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_folder_swap_keeps_a_whole_folder_and_sweeps_the_leftovers_of_a_killed_save(tmp_path):
    old = atomic_save_dir(tmp_path / "model", lambda tmp: (tmp / "w").write_text("old"))
    (tmp_path / ".model.k1ll3d").mkdir()  # a save killed before: a full copy nothing else would delete
    (tmp_path / ".model.k1ll3d" / "w").write_text("half")

    def fail(tmp):
        (tmp / "w").write_text("new, half")
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        atomic_save_dir(old, fail)
    assert (old / "w").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    atomic_save_dir(old, lambda tmp: (tmp / "w").write_text("new"))
    assert (old / "w").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ENOSPC, EIO; EINVAL: no fsync; EACCES: CIFS refuses fsync on a descriptor opened read-only
@pytest.mark.parametrize(("code", "raises"), [(28, True), (5, True), (22, False), (13, False)])
def test_an_fsync_that_fails_keeps_the_old_file_unless_the_file_system_has_no_fsync(tmp_path, monkeypatch, code,
                                                                                   raises):
    """Every fsync error was ignored: a full disk or an I/O error at fsync renamed a file that may not be on disk."""
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def fsync(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fsync)
    if raises:
        with pytest.raises(OSError) as caught:
            atomic_write_text(target, "new")
        assert caught.value.errno == code
        assert target.read_text() == "old"
        assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary left
    else:
        atomic_write_text(target, "new")
        assert target.read_text() == "new"


def test_the_file_is_fsynced_through_a_descriptor_open_for_writing(tmp_path, monkeypatch):
    """CIFS answers EACCES to fsync on a read-only descriptor: the file written is opened for writing to be synced."""
    modes, real_open = [], os.open

    def spy(path, flags, *args, **kwargs):
        modes.append((Path(path).name, flags & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    atomic_write_text(tmp_path / "a.json", "{}")
    assert {mode for name, mode in modes if name.endswith(".tmp")} == {os.O_RDWR}  # made (mkstemp), then synced
