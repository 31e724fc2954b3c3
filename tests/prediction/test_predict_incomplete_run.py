"""predict on a run with fewer fold models than folds (still training, or trained in part with --only-folds): it
predicts (a documented workflow) with one warning saying how many folds it uses, which are missing, and whether a
train holds the run; the summary line counts "1 fold model", not "1 fold models"."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket

import pytest

import attnpool
from attnpool.runs.lock import LOCK_NAME
from model_helpers import make_run, save_tiny_encoder, write_toy_csv


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """A 3-fold run whose folds 1 and 2 are not trained yet, and a file to predict."""
    folder = tmp_path_factory.mktemp("partial")
    run = make_run(folder / "run", save_tiny_encoder(folder / "encoder"), folds=3)
    for fold in (1, 2):
        shutil.rmtree(run / f"fold_{fold}")
    write_toy_csv(folder / "test.csv", n=8, seed=3)
    return run, folder / "test.csv"


def _predict(partial, output, caplog, **options):
    run, test_file = partial
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnpool"):
        attnpool.predict(run, test_file, output, progress=False, **options)
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING], caplog.text


def _warning(run, holder=""):
    return (f"{run}: using 1 of its 3 folds: the run is incomplete (fold(s) 1, 2 not trained yet{holder}); predict "
            f"again once they are (attnpool train --output-dir {run} --resume), or choose folds with --folds")


def test_an_incomplete_run_predicts_with_one_warning(partial, tmp_path, caplog):
    run = partial[0]
    warnings, text = _predict(partial, tmp_path / "pred.csv", caplog)
    assert warnings == [_warning(run)]
    assert "wrote 8 predictions of 1 fold model (mean ensemble" in text


def test_the_warning_names_the_train_holding_the_run(partial, tmp_path, caplog):
    run = partial[0]
    (run / LOCK_NAME).write_text(json.dumps({"pid": 4242, "host": "gpu-node-7", "purpose": "train"}))
    try:
        warnings, _ = _predict(partial, tmp_path / "pred.csv", caplog)
    finally:
        (run / LOCK_NAME).unlink()
    assert warnings == [_warning(run, "; its lock held by attnpool train, PID 4242 on host gpu-node-7")]


@pytest.mark.parametrize("holder", [{"pid": 99_999_999}, {"pid": os.getpid(), "process_start": [1, "another boot"]}])
def test_a_lock_file_left_by_a_dead_process_of_this_host_is_not_named(partial, tmp_path, caplog, holder):
    """The second: its PID reused since (by this process): the lock's own check tells it apart by its start."""
    run = partial[0]
    (run / LOCK_NAME).write_text(json.dumps({**holder, "host": socket.gethostname(), "purpose": "train"}))
    try:
        warnings, _ = _predict(partial, tmp_path / "pred.csv", caplog)
    finally:
        (run / LOCK_NAME).unlink()
    assert warnings == [_warning(run)]


def test_folds_given_choose_without_the_warning(partial, tmp_path, caplog):
    warnings, text = _predict(partial, tmp_path / "pred.csv", caplog, folds=[0])
    assert warnings == []
    assert "of 1 fold model (" in text
