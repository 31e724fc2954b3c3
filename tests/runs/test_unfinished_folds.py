"""Readers of a run (predict, serve, explain, export) use the folds that finished training; folds.csv is read back
checked; export opens a run as the other readers do (its format checked)."""

from __future__ import annotations

import json
import logging
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import attnpool
from attnpool.config import TrainConfig
from attnpool.exporters import resolve_model_dir
from attnpool.runs import Run, RunError
from attnpool.runs.run import RUN_FORMAT
from attnpool.training.recipe import _record_run
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv


def _killed_before_its_results(run: Run, fold: int) -> None:
    """As a fold killed after saving its model, before writing its results, leaves it (train_fold's order)."""
    for name in ("oof.csv", "metrics.json"):
        (run.fold_dir(fold) / name).unlink(missing_ok=True)
    (run.checkpoints_dir(fold) / "checkpoint-1").mkdir(parents=True)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("enc") / "encoder")


@pytest.fixture
def gap_run(encoder, tmp_path):
    """A 2-fold run whose fold 1 was killed between its model's save and its out-of-fold file."""
    run = Run(add_oof(make_run(tmp_path / "run", encoder), rows=24))
    _killed_before_its_results(run, 1)
    return run


def test_a_fold_killed_before_its_results_is_left_out_with_a_warning_and_refused_by_number(gap_run, caplog):
    """The readers used fold_K/model/ alone: a fold killed before its oof.csv was ensembled, exported, served."""
    assert gap_run.trained_folds() == [0, 1]  # resume's: the model is there
    assert gap_run.fold_unfinished(1) and not gap_run.fold_unfinished(0)
    with caplog.at_level(logging.WARNING, logger="attnpool"):
        assert gap_run.select_folds() == [0] and gap_run.select_fold() == 0
    assert "leaving out fold 1: it did not finish training" in caplog.text
    assert "`attnpool train --resume` on the run finishes it" in caplog.text
    for asked in (1, [0, 1]):
        with pytest.raises(RunError, match=r"fold 1 did not finish training \(.*oof.csv is not written.*\); "
                                           r"`attnpool train --resume` on the run finishes it"):
            gap_run.select_folds(asked)
    with pytest.raises(RunError, match="fold 1 did not finish training"):
        gap_run.select_fold(1)
    with pytest.raises(RunError, match="has no trained fold 5; trained folds: 0$"):
        gap_run.select_folds(5)


def test_predict_and_export_leave_out_a_fold_that_did_not_finish(gap_run, tmp_path, caplog):
    """The repro: predict 'wrote 8 predictions of 2 fold models' with fold 1 killed before its oof.csv."""
    write_toy_csv(tmp_path / "test.csv", n=8, seed=3)
    with caplog.at_level(logging.WARNING, logger="attnpool"):
        attnpool.predict(gap_run.path, tmp_path / "test.csv", tmp_path / "pred.csv", progress=False)
    assert "leaving out fold 1" in caplog.text
    attnpool.predict(gap_run.path, tmp_path / "test.csv", tmp_path / "pred0.csv", progress=False, folds=[0])
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "pred.csv"), pd.read_csv(tmp_path / "pred0.csv"))
    with pytest.raises(RunError, match="fold 1 did not finish training"):
        attnpool.predict(gap_run.path, tmp_path / "test.csv", tmp_path / "pred1.csv", folds=[1])
    assert resolve_model_dir(gap_run.path) == gap_run.model_dir(0)
    with pytest.raises(RunError, match="fold 1 did not finish training"):
        resolve_model_dir(gap_run.path, fold=1)


def test_a_run_whose_only_fold_did_not_finish_has_no_fold_to_use(encoder, tmp_path):
    run = Run(add_oof(make_run(tmp_path / "run", encoder, folds=1), rows=24))
    _killed_before_its_results(run, 0)
    with pytest.raises(RunError, match="has no trained fold that finished training .*fold 0: .*; `attnpool train "
                                       "--resume` on the run finishes it"):
        run.select_folds()


def _fake_model(run: Run, fold: int) -> None:
    run.model_dir(fold).mkdir(parents=True)
    (run.model_dir(fold) / "config.json").write_text("{}")


def test_export_checks_the_run_format_as_predict_does(tmp_path):
    """export used Run(path): a run of another format was exported while predict refused it."""
    run = Run(tmp_path / "run")
    _fake_model(run, 0)
    (run.path / "run.json").write_text(json.dumps({"format": RUN_FORMAT + 1, "attnpool_version": "9.9"}))
    with pytest.raises(RunError, match=f"written by attnpool 9.9 in run format {RUN_FORMAT + 1}"):
        resolve_model_dir(run.path)
    run.write_info({"task": "regression"})
    assert resolve_model_dir(run.path) == run.model_dir(0)


DAMAGED = {
    "empty": ("", r"is damaged \(empty\)"),
    "no fold column": ("row,fols\n0,0\n1,1\n", r"is damaged \(no fold column"),
    "cut mid-line": ("row,fold\n0,0\n1,1\n2,", r"is damaged \(no fold number in its fold column on line 4"),
    "edited fold": ("row,fold\n0,0\n1,x\n2,1\n", r"is damaged \(no fold number in its fold column on line 3"),
    "fractional fold": ("row,fold\n0,0\n1,0.5\n", r"is damaged \(no fold number in its fold column on line 3"),
    "rows out of order": ("row,fold\n0,0\n2,1\n1,1\n", r"is damaged \(line 3 holds row 2, not 1"),
    "missing row": ("row,fold\n0,0\n1,1\n,0\n", r"is damaged \(line 4 holds row nothing, not 2"),
    "cut in the header": ("ro", r"is damaged \(no row or fold column"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_folds_file_is_named_with_how_to_recover(tmp_path, case):
    """An empty folds.csv said 'No columns to parse from file'; a cut one 'the data changed: start a new run'."""
    text, what = DAMAGED[case]
    run = Run(tmp_path / "run")
    run.path.mkdir()
    (run.path / "folds.csv").write_text(text)
    with pytest.raises(RunError, match=rf"{run.path / 'folds.csv'} {what}.*restore it from a copy of the run, or "
                                       r"delete the run \(.*\) to start over"):
        run.read_fold_assignment()


def test_a_sound_folds_file_reads_back_as_written(tmp_path):
    run = Run(tmp_path / "run")
    run.path.mkdir()
    assert run.read_fold_assignment() is None
    run.write_fold_assignment(np.array([0, 1, -1, 1]))
    folds = run.read_fold_assignment()
    assert folds.tolist() == [0, 1, -1, 1] and folds.dtype == np.int64
    pd.DataFrame({"row": [], "fold": []}).to_csv(run.path / "folds.csv", index=False)  # no rows: sound
    assert run.read_fold_assignment().tolist() == []


def _resumed(run: Run, rows: int):
    cfg = TrainConfig(train_file="train.csv", text_cols=["text"], output_dir=str(run.path), resume=True)
    data = SimpleNamespace(num_rows=rows, make_folds=lambda cfg: pytest.fail("the saved folds are reused"))
    return _record_run(run, cfg, data)


def test_resuming_with_a_cut_folds_file_says_it_is_damaged_not_that_the_data_changed(tmp_path):
    run = Run.create(tmp_path / "run")
    run.write_fold_assignment(np.arange(24) % 2)
    text = (run.path / "folds.csv").read_text()
    (run.path / "folds.csv").write_text(text[: text.index("\n20,") + 3])  # cut inside the line of row 20
    with pytest.raises(RunError, match=r"folds.csv is damaged .*line 22.*restore it from a copy of the run"):
        _resumed(run, 24)
    (run.path / "folds.csv").write_text(text)
    with pytest.raises(ValueError, match="the data changed since the run started"):  # sound, another row count
        _resumed(run, 30)
    shutil.rmtree(run.path)
