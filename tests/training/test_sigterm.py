"""SIGTERM (a SLURM or Kubernetes preemption) ends `attnpool train` as Ctrl-C does: one console line with the way on,
train.log's last record, the lock released; exit 143, and the console script then ends by SIGTERM itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from attnpool import api
from attnpool.cli import main
from attnpool.runs.lock import LOCK_NAME
from attnpool.training import recipe
from attnpool.training.stop_signals import sigterm_interrupts
from model_helpers import save_tiny_encoder, write_toy_csv


class _NotHandled(BaseException):
    """What SIGTERM raises where the command line has not set its own handler (it would kill pytest)."""


def _unhandled(signum, frame):
    raise _NotHandled("SIGTERM reached the handler set before the command")


def _sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    pytest.fail("SIGTERM did not stop the command")


@pytest.fixture
def guarded():
    """A SIGTERM handler of the caller's, restored after the test; the command line must put it back too."""
    previous = signal.signal(signal.SIGTERM, _unhandled)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_stops_a_command_with_one_line_and_exit_143(tmp_path, monkeypatch, capsys, guarded):
    monkeypatch.setattr(api, "train", _sigterm)
    with sigterm_interrupts():  # as the console script (cli.run) calls main
        code = main(["train", "--train-file", str(tmp_path / "t.csv"), "--output-dir", str(tmp_path / "run")])
    assert code == 143
    assert capsys.readouterr().err == ("attnpool train: terminated (SIGTERM); start it again (without --resume): it "
                                       "stopped before its run was recorded\n")
    assert signal.getsignal(signal.SIGTERM) is _unhandled  # the caller's handler back


def test_sigterm_during_training_is_logged_and_releases_the_run(tmp_path, monkeypatch, capsys, guarded):
    write_toy_csv(tmp_path / "train.csv", n=16)
    encoder = save_tiny_encoder(tmp_path / "encoder")
    monkeypatch.setattr(recipe, "train_fold", _sigterm)  # preempted in fold 0, once the run is recorded
    run = tmp_path / "run"
    with sigterm_interrupts():
        code = main(["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second",
                     "--label", "label", "--model", encoder, "--output-dir", str(run), "--folds", "2",
                     "--max-length", "16"])
    hint = f"to continue from its last checkpoint: attnpool train ... --output-dir {run} --resume"
    assert code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"attnpool train: terminated (SIGTERM); {hint}"
    last = (run / "train.log").read_text().strip().splitlines()[-1]
    assert last.endswith(f"ERROR attnpool.train: interrupted (Terminated: SIGTERM): the run stopped here; {hint}")
    assert not (run / LOCK_NAME).exists()


def test_the_console_script_ends_by_sigterm_after_its_line(tmp_path):
    script = ("import os, signal, sys; from attnpool import api, cli\n"
              "def stop(*a, **k): os.kill(os.getpid(), signal.SIGTERM)\n"
              "api.poolers = stop; sys.argv = ['attnpool', 'poolers']; cli.run()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM
    assert done.stderr.strip().splitlines()[-1] == "attnpool poolers: terminated (SIGTERM)"


def test_a_caller_of_main_keeps_its_own_sigterm_handling(tmp_path, monkeypatch, guarded):
    """main() set the handler itself: a script calling it in a loop went on to its next command after a SIGTERM."""
    monkeypatch.setattr(api, "train", _sigterm)
    with pytest.raises(_NotHandled):
        main(["train", "--train-file", str(tmp_path / "t.csv"), "--output-dir", str(tmp_path / "run")])


@pytest.mark.parametrize("case", ["ignored", "launcher"])
def test_sigterm_is_left_alone_where_ignored_or_under_a_launcher(case, monkeypatch, guarded):
    """A parent's trap '' TERM was overridden; under torchrun the survivors of a failed rank, waiting in a
    collective, ran the Python handler only once the wait timed out."""
    if case == "ignored":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        monkeypatch.setenv("WORLD_SIZE", "2")
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_interrupts():
        assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_sigterm_does_not_break_the_cleanup(guarded):
    with sigterm_interrupts(), pytest.raises(KeyboardInterrupt):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:  # the cleanup of the first: SLURM and a launcher may both send one
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is _unhandled


def test_a_world_size_that_is_no_number_does_not_break_every_command(monkeypatch, guarded):
    monkeypatch.setenv("WORLD_SIZE", "abc")
    with sigterm_interrupts():
        assert signal.getsignal(signal.SIGTERM) is not _unhandled
