"""The lock holder process of the run tests, and a wait for its ready file."""

import subprocess
import time
from pathlib import Path

import pytest

# The holder loads lock.py by its path: importing the attnpool package (torch, transformers) takes seconds.
HOLDER = r"""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("attnpool_lock", sys.argv[1])
lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lock)
if sys.argv[5] == "file":
    lock.RunLock.for_file(sys.argv[2], purpose="predict").acquire()
else:
    lock.RunLock(sys.argv[2], purpose="train").acquire()
if sys.argv[4] == "fork" and os.fork() == 0:  # a child that outlives its parent, like a DataLoader worker
    with open(sys.argv[3] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(sys.argv[3] + ".tmp", sys.argv[3] + ".child")
    time.sleep(30)
    os._exit(0)
open(sys.argv[3], "w").close()
time.sleep(30)
"""


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"holder exited early: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail("holder never got ready")
        time.sleep(0.01)


