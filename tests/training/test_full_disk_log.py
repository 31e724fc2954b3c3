"""A full disk under train.log too (the run's own disk): the hinted error, no logging traceback, the lock released
and the package logger's level restored."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from safetensors import SafetensorError

from attnpool import api
from attnpool.cli import main
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.runs.lock import LOCK_NAME
from attnpool.training import recipe
from model_helpers import save_tiny_encoder, write_toy_csv

FAST = {"epochs": 1, "batch_size": 8, "max_length": 16, "pooling_options": {"attn_size": 8}, "folds": 2,
        "only_folds": [0]}
FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("full_log")
    write_toy_csv(folder / "train.csv", n=16)
    return save_tiny_encoder(folder / "encoder"), folder / "train.csv"


class _FullStream:
    """train.log's stream on a disk that fills: every write and flush fails once ``full["now"]`` is set."""

    def __init__(self, stream, full):
        self.stream, self.full = stream, full

    def _check(self):
        if self.full["now"]:
            raise OSError(errno.ENOSPC, "No space left on device")

    def write(self, text):
        self._check()
        return self.stream.write(text)

    def flush(self):
        self._check()
        self.stream.flush()

    def close(self):
        self.stream.close()
        self._check()


@pytest.fixture
def full_disk(monkeypatch):
    """The disk fills when fold 0 saves its model: that save fails, and so does every train.log write after it."""
    full = {"now": False}
    attach, save = recipe.attach_log_file, AttnPoolForSequenceClassification.save_pretrained

    def attach_log_file(*args, **kwargs):
        handler = attach(*args, **kwargs)
        handler.stream = _FullStream(handler.stream, full)
        return handler

    def save_pretrained(model, folder, *args, **kwargs):
        if "checkpoints" in str(folder):
            return save(model, folder, *args, **kwargs)
        full["now"] = True
        raise SafetensorError(FULL)

    monkeypatch.setattr(recipe, "attach_log_file", attach_log_file)
    monkeypatch.setattr(AttnPoolForSequenceClassification, "save_pretrained", save_pretrained)
    return full


def _hinted(run):
    return (f"[Errno 28] no space left on device while saving the model of fold 0 in {run / 'fold_0' / 'model'}; "
            f"free space, then attnpool train --output-dir {run} --resume")


def test_a_full_disk_under_train_log_raises_the_hinted_error_and_releases_the_lock(data, tmp_path, full_disk,
                                                                                    capsys):
    encoder, train_file = data
    run = tmp_path / "run"
    package = logging.getLogger("attnpool")
    level = package.level
    with pytest.raises(OSError) as caught:
        api.train(train_file=str(train_file), text_cols=["first", "second"], label="label", model=encoder,
                  output_dir=str(run), **FAST)
    assert str(caught.value) == _hinted(run)
    assert not (run / LOCK_NAME).exists()  # released: a --resume in another process is not refused as in use
    assert package.level == level
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err
    assert err.count(f"attnpool: warning: could not write {run.resolve() / 'train.log'}") == 1


def test_the_cli_prints_the_hinted_error_on_a_full_disk_under_train_log(data, tmp_path, full_disk, capsys):
    encoder, train_file = data
    run = tmp_path / "run"
    code = main(["train", "--train-file", str(train_file), "--text-cols", "first", "second", "--label", "label",
                 "--model", encoder, "--output-dir", str(run), "--epochs", "1", "--batch-size", "8", "--max-length",
                 "16", "--pooling-opt", "attn_size=8", "--folds", "2", "--only-folds", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1] == f"attnpool train: error: {_hinted(run)}"
    assert "Logging error" not in err and "Traceback" not in err
    assert not (run / LOCK_NAME).exists()


def test_train_log_reports_a_record_that_does_not_format_as_logging_does_and_writes_undecodable_paths(tmp_path,
                                                                                                        capsys):
    """Every logging error was taken for a full disk ("free space on its disk") and the next ones went unsaid."""
    from attnpool.training.run_log import attach_log_file, detach_log_file

    handler = attach_log_file(tmp_path / "train.log")
    log = logging.getLogger("attnpool.train")
    try:  # to the file's handler alone (pytest's own raises on a record that does not format)
        handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, "reading %s",
                                      (os.fsdecode(b"/data/caf\xe9.csv"),), None))  # bytes that are not UTF-8
        handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, "%d rows", ("x",), None))
    finally:
        detach_log_file(handler)
    err = capsys.readouterr().err
    assert "--- Logging error ---" in err and "free space" not in err
    assert "reading /data/caf\\udce9.csv" in (tmp_path / "train.log").read_text(encoding="utf-8")
