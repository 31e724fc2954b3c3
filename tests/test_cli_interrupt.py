"""Ctrl-C during a command: one line and exit 130, with train's way to go on; no traceback."""

from __future__ import annotations

import pytest

from attnpool import api
from attnpool.cli import main


def _interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_in_train_prints_one_line_with_the_resume_command(tmp_path, monkeypatch, capsys):
    run = tmp_path / "my run"
    run.mkdir()  # the run folder was made before the Ctrl-C
    monkeypatch.setattr(api, "train", _interrupted)
    code = main(["train", "--train-file", str(tmp_path / "t.csv"), "--output-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 130
    assert err.splitlines() == [f"attnpool train: interrupted; to continue from its last checkpoint: attnpool train "
                                f"... --output-dir '{run}' --resume"]


def test_ctrl_c_before_the_run_folder_exists_and_in_other_commands_gives_no_resume_hint(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.setattr(api, "train", _interrupted)
    assert main(["train", "--train-file", "t.csv", "--output-dir", str(tmp_path / "not made")]) == 130
    assert capsys.readouterr().err == "attnpool train: interrupted\n"
    monkeypatch.setattr(api, "export", _interrupted)
    assert main(["export", "--model", str(tmp_path), "--output", str(tmp_path / "m.onnx")]) == 130
    assert capsys.readouterr().err == "attnpool export: interrupted\n"


def test_quiet_help_says_warnings_print_too(capsys):
    """The console shows attnpool's warnings at --quiet (level SUMMARY is below WARNING): the help said it did not."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "print only the summary, warnings and errors" in " ".join(capsys.readouterr().out.split())
