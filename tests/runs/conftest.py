"""A process that holds a run lock, for the lock's tests and for the commands that must respect it."""

import subprocess
import sys
from pathlib import Path

import pytest
from lock_helpers import HOLDER, wait_for

from attnpool.runs import lock as lock_mod


@pytest.fixture
def holder(tmp_path):
    """Start a process that takes the lock of a folder and keeps it; returns its Popen once it holds it."""
    procs = []

    def start(folder: Path, fork: bool = False, file: bool = False) -> subprocess.Popen:
        """Lock ``folder`` (``file``: the output file ``folder``, as ``predict`` does) in another process."""
        ready = tmp_path / f"ready{len(procs)}"
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, lock_mod.__file__, str(folder), str(ready),
                                 "fork" if fork else "-", "file" if file else "dir"], stderr=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        wait_for(ready, proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        proc.stderr.close()


