"""Staging folders beside an export's output, and the removal of those that a killed export left behind.

An export writes into a hidden folder beside its output (``.model.onnx.XXXX/``, ``.int8.XXXX/``) and renames the
files into place when they are complete; the folder is deleted after, even on an error. A process killed outright
(SIGKILL, the OOM killer) deletes nothing, and its folder (a whole graph, gigabytes for a large model) stayed
forever. Each staging folder therefore records its owner (``host pid``): the next export beside it removes the
folders whose owner on this host is dead. A live export's folder (another process's, or another thread's of this
one) is left alone; a folder of another host, or one without an owner (an attnpool before this one), is removed
only once it is :data:`STALE_AFTER` seconds old.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from attnpool.runs.lock import process_alive

OWNER_FILE = ".owner"
STALE_AFTER = 24 * 3600  # seconds: no owner to ask (another host, an older attnpool), so only its age tells


def make_staging(parent: Path, prefix: str) -> Path:
    """A new staging folder ``PARENT/PREFIXxxxx`` owned by this process, after removing abandoned ones of ``prefix``."""
    parent.mkdir(parents=True, exist_ok=True)
    clear_abandoned(parent, prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (folder / OWNER_FILE).write_text(f"{socket.gethostname()} {os.getpid()}\n", encoding="utf-8")
    return folder


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and the folders above it that do not exist yet, deepest first: those :func:`make_staging` makes."""
    folder = Path(folder).absolute()
    return [p for p in (folder, *folder.parents) if not p.exists()]


def remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty: those a failed export made, with nothing else there."""
    for folder in folders:
        try:
            folder.rmdir()  # refuses a folder that is not empty (another export's files meanwhile): kept
        except OSError:
            return  # the ones above it hold it


def clear_abandoned(parent: Path, prefix: str) -> list[Path]:
    """Delete the staging folders ``PARENT/PREFIX*`` whose export is dead (see the module's docstring)."""
    removed = []
    for folder in Path(parent).glob(glob.escape(prefix) + "*"):
        if folder.is_dir() and not folder.is_symlink() and _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _abandoned(folder: Path) -> bool:
    try:
        host, pid = (folder / OWNER_FILE).read_text(encoding="utf-8").split()
        owner = int(pid)
    except (OSError, ValueError):  # no owner yet (made this instant), or an older attnpool's folder: its age tells
        return _older_than(folder, STALE_AFTER)
    if host != socket.gethostname():  # a shared filesystem: that host's processes cannot be asked
        return _older_than(folder, STALE_AFTER)
    return owner != os.getpid() and not process_alive(owner)  # this process's own folder: another thread's live export


def _older_than(folder: Path, seconds: float) -> bool:
    try:
        return time.time() - folder.stat().st_mtime > seconds
    except OSError:  # removed meanwhile
        return False
