"""Where the commands write: an output that cannot be written is refused up front, and the last line said once.

``predict --output``, ``explain --output/--json``, ``export --output``, ``train --output-dir`` and ``compare
--output-dir`` under a file, or in a folder that is not writable, failed with a raw errno naming attnpool's own lock
or temporary files, after the models had loaded (explain and export: after all the work).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from attnpool import api
from attnpool.cli import main
from model_helpers import make_run, save_tiny_encoder, write_toy_csv

predict_module = importlib.import_module("attnpool.prediction.predict")
explain_module = importlib.import_module("attnpool.explanations.files")
onnx_module = importlib.import_module("attnpool.exporters.onnx")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_toy_csv(folder / "test.csv", n=6, seed=1)
    return folder / "test.csv"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    encoder = save_tiny_encoder(tmp_path_factory.mktemp("encoder"))
    return make_run(tmp_path_factory.mktemp("runs") / "run", encoder, folds=1)


def _never(*args, **kwargs):
    raise AssertionError("the work started before the output path was checked")


@pytest.fixture
def nothing_runs(monkeypatch):
    """The heavy part of every command fails the test if it is reached."""
    monkeypatch.setattr(predict_module, "_load_ensemble", _never)
    monkeypatch.setattr(explain_module, "_load_model", _never)
    monkeypatch.setattr(explain_module, "explain", _never)
    monkeypatch.setattr(onnx_module, "load_for_export", _never)
    monkeypatch.setattr(api, "_train", _never)
    monkeypatch.setattr(api, "_compare", _never)


def _commands(run: Path, data: Path, output: Path, folder: Path) -> list[tuple[list[str], str, Path]]:
    """Each command with ``output`` (a file) or ``folder`` (a folder) as what it writes: (argv, option, path)."""
    report = output.with_suffix(".html")
    return [
        (["predict", "--run", str(run), "--input", str(data), "--output", str(output)], "--output", output),
        (["explain", "--run", str(run), "--input", str(data), "--output", str(report)], "--output", report),
        (["explain", "--run", str(run), "--input", str(data), "--output", str(data.parent / "ok.html"), "--json",
          str(output.with_suffix(".json"))], "--json", output.with_suffix(".json")),
        (["export", "--model", str(run), "--output", str(output.with_suffix(".onnx"))], "--output",
         output.with_suffix(".onnx")),
        (["train", "--train-file", str(data), "--text-cols", "first", "second", "--output-dir", str(folder)],
         "--output-dir", folder),
        (["compare", "--poolings", "mean", "max", "--train-file", str(data), "--text-cols", "first", "second",
          "--output-dir", str(folder)], "--output-dir", folder),
    ]


def test_an_output_in_a_folder_that_is_not_writable_is_refused_before_anything_runs(
        run, data, tmp_path, monkeypatch, capsys, nothing_runs):
    """Was: `[Errno 2] No such file or directory: '/proc/.p.csv.lock'`, or the temporary file's, after the work."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != locked and real_access(path, mode, **kw))
    for argv, option, path in _commands(run, data, locked / "p.csv", locked / "sub" / "runx"):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert (f"cannot write {option} {path}: folder {locked} is not writable (read-only or no permission); "
                f"choose another {option}") in err, argv
        assert "Errno" not in err and ".lock" not in err and ".tmp" not in err
    assert list(locked.iterdir()) == []


def test_an_output_under_a_file_is_refused_before_anything_runs(run, data, tmp_path, capsys, nothing_runs):
    """Was: `[Errno 17] File exists: 'test.csv'` (predict) and `[Errno 20] Not a directory` (train)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("x", encoding="utf-8")
    for argv, option, path in _commands(run, data, notes / "y.csv", notes / "run"):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert (f"{option} {path}: {notes} is a file, not a folder, so nothing can be written under it; give a path "
                f"in a folder, e.g. {tmp_path / path.name}") in err, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_writable_output_is_not_refused(run, data, tmp_path, monkeypatch):
    """The check does not stop a good path: a new folder below a writable one."""
    monkeypatch.setattr(predict_module, "_load_ensemble", _never)
    argv = ["predict", "--run", str(run), "--input", str(data), "--output", str(tmp_path / "new" / "p.csv")]
    with pytest.raises(AssertionError, match="the work started"):
        main(argv)


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_predict_and_explain_say_what_they_wrote_once(run, data, tmp_path, capsys, quiet):
    """Was: the API's logged line, then the command's own line again (`wrote 30 predictions to preds.csv`)."""
    out = tmp_path / "preds.csv"
    assert main(["predict", "--run", str(run), "--input", str(data), "--output", str(out), *quiet]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert said.count("wrote 6 predictions") == 1 and f"to {out} in 1 chunk(s)" in captured.err
    report = tmp_path / "rep.html"
    assert main(["explain", "--run", str(run), "--input", str(data), "--output", str(report), "--limit", "3",
                 "--erasure-k", "2", *quiet]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert said.count("wrote") == 1 and said.count("explained 3 examples") == 1
    assert f"wrote {report} and {report.with_suffix('.json')}" in captured.err
    assert "erasure AOPC of 3 examples: most-weighted " in captured.out


def test_a_folder_that_passes_os_access_but_takes_no_file_is_refused(tmp_path, monkeypatch):
    """Root passes os.access everywhere: /proc/p.csv still ended at the lock file; a file is tried in the folder."""
    files = importlib.import_module("attnpool.runs.files")
    real = files.tempfile.TemporaryFile

    def no_file_in_tmp_path(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's own name
        if Path(dir) == tmp_path:
            raise FileNotFoundError(2, "No such file or directory")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(files.tempfile, "TemporaryFile", no_file_in_tmp_path)
    with pytest.raises(ValueError, match=f"cannot write --output {tmp_path / 'p.csv'}: folder {tmp_path} is not "
                       "writable"):
        files.check_writable(tmp_path / "p.csv")
    assert list(tmp_path.iterdir()) == []


def test_an_output_dir_that_is_a_file_or_a_link_to_nothing_is_refused_before_anything_runs(
        run, data, tmp_path, capsys, nothing_runs):
    """Was: train loaded the data and the encoder before Run.create refused the file; compare followed the dangling
    link into `[Errno 17] File exists` at its lock."""
    notes = tmp_path / "notes.txt"
    notes.write_text("x", encoding="utf-8")
    link = tmp_path / "dangling"
    os.symlink("gone/run", link)
    for folder, said in [(notes, f"--output-dir {notes} is a file, not a folder; choose another --output-dir"),
                         (link, f"output path {link} is a symbolic link to gone/run ({tmp_path / 'gone/run'}), which "
                                "does not exist; create that folder, or remove the link")]:
        for argv, _, _ in _commands(run, data, tmp_path / "p.csv", folder)[-2:]:
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert said in err and "Errno" not in err, (argv, err)
    assert notes.read_text(encoding="utf-8") == "x" and not (tmp_path / "gone").exists()
