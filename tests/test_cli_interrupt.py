"""Ctrl-C during a command: one line and exit 130, with train's way to go on; no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from attnpool import api
from attnpool.cli import main
from attnpool.runs import Run


def _interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_in_train_prints_one_line_with_the_resume_command(tmp_path, monkeypatch, capsys):
    run = tmp_path / "my run"
    Run.create(run).write_info({"task": "regression"})  # the run was recorded (run.json) before the Ctrl-C
    monkeypatch.setattr(api, "train", _interrupted)
    code = main(["train", "--train-file", str(tmp_path / "t.csv"), "--output-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 130
    assert err.splitlines() == [f"attnpool train: interrupted; to continue from its last checkpoint: attnpool train "
                                f"... --output-dir '{run}' --resume"]


def test_ctrl_c_before_the_run_is_recorded_and_in_other_commands_gives_no_resume_hint(tmp_path, monkeypatch,
                                                                                         capsys):
    """A first start stopped while reading its data leaves a folder without run.json, which --resume refuses."""
    monkeypatch.setattr(api, "train", _interrupted)
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "train.log").write_text("reading the data\n")
    for folder in ("not made", "started"):
        assert main(["train", "--train-file", "t.csv", "--output-dir", str(tmp_path / folder)]) == 130
        assert capsys.readouterr().err == ("attnpool train: interrupted; start it again (without --resume): it stopped "
                                           "before its run was recorded\n")
    monkeypatch.setattr(api, "export", _interrupted)
    assert main(["export", "--model", str(tmp_path), "--output", str(tmp_path / "m.onnx")]) == 130
    assert capsys.readouterr().err == "attnpool export: interrupted\n"


def test_quiet_help_says_warnings_print_too(capsys):
    """The console shows attnpool's warnings at --quiet (level SUMMARY is below WARNING): the help said it did not."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "print only the summary, warnings and errors" in " ".join(capsys.readouterr().out.split())


def test_the_console_script_ends_by_sigint_so_a_calling_shell_loop_stops(tmp_path):
    """An exit 130 after Ctrl-C let `for f in ...; do attnpool predict ...; done` go on to the next file: a shell
    stops only for a child killed by the signal, as an uncaught KeyboardInterrupt ends Python."""
    script = ("import sys; from attnpool import api, cli\n"
              "def stop(*a, **k): raise KeyboardInterrupt\n"
              "api.poolers = stop; sys.argv = ['attnpool', 'poolers']; cli.run()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGINT
    assert done.stderr.strip().splitlines()[-1] == "attnpool poolers: interrupted"
