"""Run: the run directory's layout, its version check, the one fold rule, and the lock that train, predict and
compare take before they write."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import attnpool
from attnpool.config import TrainConfig
from attnpool.runs import LockedError, Run, RunError
from attnpool.runs.run import RUN_FORMAT
from attnpool.training.recipe import PER_CALL_SAVED
from model_helpers import save_tiny_encoder, write_toy_csv


def _saved_config(run: Path) -> None:
    """config.yaml as a start saves it (recipe._record_run), before it makes its folds and writes run.json."""
    Run(run).write_config({**TrainConfig(train_file="train.csv", text_cols=["text"], output_dir=str(run)).to_dict(),
                           **PER_CALL_SAVED})


def test_create_refuses_an_existing_run_unless_resumed_or_overwritten(tmp_path):
    run = Run.create(tmp_path / "r")
    run.write_info({"task": "regression"})
    with pytest.raises(RunError, match="already exists; pass --resume to continue it, --overwrite to replace it"):
        Run.create(tmp_path / "r")
    assert Run.create(tmp_path / "r", resume=True).info()["task"] == "regression"
    assert not Run.create(tmp_path / "r", overwrite=True).has_info()  # replaced by an empty run
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(RunError, match="--overwrite refuses to delete .*mine: it is not an attnpool run \\(no "
                                       "run.json\\); choose another --output-dir, or empty that folder yourself$"):
        Run.create(tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(RunError, match="--resume: run directory .*new does not exist or is empty"):
        Run.create(tmp_path / "new", resume=True)


def test_info_is_version_checked(tmp_path):
    with pytest.raises(RunError, match="is not an attnpool run directory"):
        Run.open(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"format": RUN_FORMAT + 1, "attnpool_version": "9.9"}))
    with pytest.raises(RunError, match=f"written by attnpool 9.9 in run format {RUN_FORMAT + 1}"):
        Run.open(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(RunError, match="is corrupt"):
        Run.open(tmp_path)
    (tmp_path / "run.json").write_bytes(b"\xff\xfe{}")  # not UTF-8 (saved as UTF-16 by an editor)
    with pytest.raises(RunError, match="run.json is corrupt .*restore the file"):
        Run.open(tmp_path)


def test_a_damaged_metrics_file_is_a_run_error_naming_it(tmp_path):
    """A cut-short metrics.json (a copy or a full disk) gave a bare parser error that named no file."""
    run = Run.create(tmp_path / "r")
    run.write_info({"task": "regression"})
    (tmp_path / "r" / "metrics.json").write_bytes(b'{"folds": [], "overall": {"pearson": 0.8')
    with pytest.raises(RunError, match=f"{re.escape(str(tmp_path / 'r' / 'metrics.json'))} is corrupt .*--resume"):
        run.metrics()
    (tmp_path / "r" / "metrics.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(RunError, match="metrics.json is corrupt"):
        run.metrics()


def test_a_damaged_tracked_file_reads_as_nothing_recorded(tmp_path, caplog):
    """tracked.json is read after every fold is trained: a damaged one must not fail the run, nor stop recording."""
    run = Run.create(tmp_path / "r")
    run.write_info({"task": "regression"})
    for damaged in (b'{"mlflow": "logged', b"\xff\xfe{}", b'["mlflow"]'):
        (tmp_path / "r" / "tracked.json").write_bytes(damaged)
        assert run.tracked() == {}
        assert "tracked.json" in caplog.text
    run.record_tracked("tensorboard", "the cv entry went to tensorboard/cv", "abc")
    assert run.tracked() == {"tensorboard": {"where": "the cv entry went to tensorboard/cv", "scores": "abc"}}


def _fold(run: Run, fold: int) -> None:
    run.model_dir(fold).mkdir(parents=True)
    (run.model_dir(fold) / "config.json").write_text("{}")


def test_one_fold_rule(tmp_path):
    run = Run(tmp_path)
    with pytest.raises(RunError, match="has no trained fold"):
        run.select_folds()
    for fold in (10, 2, 0):
        _fold(run, fold)
    (tmp_path / "fold_x" / "model").mkdir(parents=True)  # not a fold
    assert run.trained_folds() == [0, 2, 10]  # numeric order
    assert run.select_folds() == [0, 2, 10] and run.select_folds([10, 2]) == [10, 2] and run.select_folds(2) == [2]
    assert run.select_fold() == 0 and run.select_fold(10) == 10
    # a fold number from numpy (a column of folds, np.arange) is one fold, not a sequence of them
    assert run.select_folds(np.int64(2)) == [2] and run.select_fold(np.int64(10)) == 10
    assert run.select_folds(np.array([10, 2])) == [10, 2]
    with pytest.raises(RunError, match="has no trained fold 1; trained folds: 0, 2, 10"):
        run.select_folds([0, 1])


def test_fold_results_mark_the_fold_done_last(tmp_path):
    run = Run(tmp_path)
    _fold(run, 0)
    run.checkpoints_dir(0).mkdir()
    assert not run.fold_done(0)
    oof = pd.DataFrame({"row": [1, 0], "id": ["007", "001"], "target": [0.5, 0.1], "prediction": [0.4, 0.2],
                        "fold": 0})
    run.write_fold_results(0, {"pearson": 1.0}, [{"step": 1, "loss": 0.3}], oof)
    assert run.fold_done(0) and not run.checkpoints_dir(0).exists()
    assert run.fold_metrics(0) == {"pearson": 1.0} and run.fold_history(0) == [{"step": 1, "loss": 0.3}]
    back = run.fold_oof(0)
    assert list(back["row"]) == [0, 1] and list(back["id"]) == ["001", "007"]  # sorted; ids stay strings
    assert run.fold_metrics(1) == {} and run.fold_history(1) is None
    run.write_fold_assignment(np.array([0, 1, 0]))
    assert list(run.read_fold_assignment()) == [0, 1, 0]


@pytest.fixture
def recipe(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24)
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": str(encoder),
            "folds": 2, "epochs": 1, "max_length": 16, "pooling_options": {"attn_size": 8}}


def test_train_is_refused_while_another_process_writes_the_run(holder, recipe, tmp_path):
    run_dir = tmp_path / "run"
    proc = holder(run_dir)
    with pytest.raises(LockedError) as caught:
        attnpool.train(recipe, output_dir=str(run_dir))
    message = str(caught.value)
    assert f"PID {proc.pid} on host {socket.gethostname()}" in message
    assert "in use by another attnpool process" in message
    assert sorted(os.listdir(run_dir)) == [".attnpool.lock"]  # nothing was written


def test_compare_is_refused_while_another_process_writes_it(holder, recipe, tmp_path):
    out = tmp_path / "cmp"
    proc = holder(out)
    with pytest.raises(LockedError, match=f"PID {proc.pid}"):
        attnpool.compare(recipe, poolings=["mean", "max"], seeds=1, output_dir=out)


def test_predict_is_refused_while_another_process_writes_the_output(holder, tmp_path):
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression", "classes": None, "label": "label", "id_col": "id", "num_folds": 1})
    output = tmp_path / "out" / "predictions.csv"
    proc = holder(output, file=True)
    with pytest.raises(LockedError, match=f"predictions.csv is in use by another attnpool process \\(predict, PID "
                                          f"{proc.pid}"):
        attnpool.predict(run.path, tmp_path / "test.csv", output)


def test_overwrite_holds_the_lock_while_it_deletes_the_old_run(tmp_path, monkeypatch):
    """A `train --resume` started by another process in the meantime must be refused, not have its files deleted."""
    import shutil
    import subprocess
    import sys

    from attnpool.runs import lock

    run = Run.create(tmp_path / "r")
    run.write_info({"task": "regression"})
    (tmp_path / "r" / "fold_0").mkdir()
    probe = ("import importlib.util, sys\n"
             "spec = importlib.util.spec_from_file_location('lock', sys.argv[1])\n"
             "lock = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(lock)\n"
             "try:\n    lock.RunLock(sys.argv[2], purpose='train').acquire()\n    print('taken')\n"
             "except lock.LockedError:\n    print('refused')\n")
    seen, rmtree = [], shutil.rmtree

    def deleting(path, *args, **kwargs):
        seen.append(subprocess.run([sys.executable, "-c", probe, lock.__file__, str(tmp_path / "r")],
                                   capture_output=True, text=True, timeout=60).stdout.strip())
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", deleting)
    assert not Run.create(tmp_path / "r", overwrite=True).has_info()
    assert seen == ["refused"] and not (tmp_path / "r" / "fold_0").exists()


def test_a_run_in_use_is_a_run_error():
    """`except RunError` (the documented error of train, predict and compare) catches a run another process holds."""
    assert issubclass(LockedError, RunError) and issubclass(RunError, ValueError)


def test_a_start_killed_while_writing_its_folds_counts_as_never_started(tmp_path):
    """Its temporary file is attnpool's own: the same command starts afresh instead of every option refusing."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text("...")
    (tmp_path / "run" / ".folds.csv.abc123.tmp").write_text("row,fold\n0,")
    assert Run.never_started(tmp_path / "run")
    Run.create(tmp_path / "run")  # the same command again: starts afresh, the leftover gone
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name != ".lock") == ["train.log"]
    (tmp_path / "run" / "notes.txt").write_text("mine")
    assert not Run.never_started(tmp_path / "run")  # a file of the user's: not ours to delete


def test_a_pppm_start_whose_folds_fail_counts_as_never_started(tmp_path):
    """A PPPM start copies its CPC titles before it makes the folds: when making them fails (--folds 5 with three
    anchors) the folder held config.yaml, cpc_texts.csv and train.log, which train, --resume and --overwrite all
    refused for good."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("train.log", "cpc_texts.csv", ".cpc_texts.csv.abc123.tmp"):
        (run / name).write_text("...")
    _saved_config(run)
    assert Run.never_started(run)
    Run.create(run)  # the same command again: starts afresh (the titles are copied again)
    assert sorted(p.name for p in run.iterdir() if p.name != ".attnpool.lock") == ["train.log"]
    (tmp_path / "titles").mkdir()
    (tmp_path / "titles" / "cpc_texts.csv").write_text("context,text\n")
    assert not Run.never_started(tmp_path / "titles")  # no config saved before it: the user's own copy


def test_a_pppm_start_with_too_many_folds_can_be_started_again(tmp_path):
    data = tmp_path / "pppm"
    data.mkdir()
    rows = [{"id": f"{a}{t}", "anchor": f"anchor {a}", "target": f"target {t}", "context": "A01", "score": "0.5"}
            for a in range(3) for t in range(a + 2)]
    pd.DataFrame(rows).to_csv(data / "train.csv", index=False)
    (data / "cpc_texts.csv").write_text("context,text\nA01,HUMAN NECESSITIES\n")
    recipe = {"preset": "pppm", "data_dir": str(data), "model": str(save_tiny_encoder(tmp_path / "encoder")),
              "folds": 5, "epochs": 1, "max_length": 16}
    for _ in range(2):  # the second start was refused: "already exists" (and --overwrite: "not a run")
        with pytest.raises(ValueError, match="cannot make 5 grouped folds from 3 distinct groups"):
            attnpool.train(recipe, output_dir=str(tmp_path / "run"))
    assert Run.never_started(tmp_path / "run")


def test_an_overwrite_cut_short_leaves_a_run_that_overwrite_accepts_again(tmp_path, monkeypatch):
    """run.json went first in iterdir order: the folder left was no run, refused by --overwrite and --resume."""
    import shutil

    run = Run.create(tmp_path / "r")
    run.write_info({"task": "regression"})
    for name in ("a_fold", "fold_0", "zz_fold"):  # folders on both sides of run.json in name order
        (tmp_path / "r" / name).mkdir()
    rmtree = shutil.rmtree

    def interrupted(path, *args, **kwargs):
        rmtree(path, *args, **kwargs)
        raise KeyboardInterrupt

    from pathlib import Path

    iterdir = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(sorted(iterdir(self), key=lambda p: p.name != "run.json")))
    monkeypatch.setattr(shutil, "rmtree", interrupted)  # a directory listing that gives run.json first
    with pytest.raises(KeyboardInterrupt):
        Run.create(tmp_path / "r", overwrite=True)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert Run.is_run(tmp_path / "r")
    assert not Run.create(tmp_path / "r", overwrite=True).has_info()
    assert [p.name for p in (tmp_path / "r").iterdir() if p.name != ".attnpool.lock"] == []


RECIPE_OF_THE_USERS = """\
# my experiment: reviews, MiniLM, attention pooling
train_file: data.csv
text_cols: [review]
label: sentiment   # the label column
output_dir: exp1
"""


def test_a_recipe_of_the_users_in_the_output_dir_is_never_deleted(tmp_path):
    """--output-dir the folder holding the user's config.yaml: it counted as a failed first start, and was deleted."""
    exp = tmp_path / "exp1"
    exp.mkdir()
    (exp / "config.yaml").write_text(RECIPE_OF_THE_USERS)
    assert not Run.never_started(exp)
    for log in (False, True):  # and after a start there stopped by bad data (its train.log beside the recipe)
        if log:
            (exp / "train.log").write_text("... ERROR the data has no column sentiment\n")
            assert not Run.never_started(exp)
        with pytest.raises(RunError, match=r"exp1 already exists and is not an attnpool run \(no run.json; it holds "
                                           r"config.yaml.*\); choose another --output-dir"):
            Run.create(exp)
        assert (exp / "config.yaml").read_text() == RECIPE_OF_THE_USERS
    keys = {"overwrite": False, "resume": False, "only_folds": None}  # the saved keys, not in safe_dump's text:
    for saved_keys_but_edited in (yaml.safe_dump(keys) + "# mine\n", "overwrite: no\nresume: no\nonly_folds: ~\n"):
        (exp / "config.yaml").write_text(saved_keys_but_edited)
        assert not Run.never_started(exp)
    (exp / "config.yaml").unlink()
    _saved_config(exp)  # as attnpool saves it: a failed start's, started afresh
    (exp / "folds.csv").write_text("row,fold\n0,0\n")
    assert Run.never_started(exp)
    (exp / "config.yaml").unlink()
    assert not Run.never_started(exp), "folds.csv comes after the config: without it, the user's"


def test_train_with_its_recipe_in_the_output_dir_keeps_the_recipe(tmp_path):
    """`attnpool train --config exp1/config.yaml` (output_dir: exp1), stopped by a wrong label: the recipe was gone."""
    write_toy_csv(tmp_path / "data.csv", n=12)
    exp = tmp_path / "exp1"
    exp.mkdir()
    recipe = RECIPE_OF_THE_USERS.replace("data.csv", str(tmp_path / "data.csv")).replace("[review]", "[first]")
    recipe = recipe.replace("exp1", str(exp)) + f"model: {save_tiny_encoder(tmp_path / 'encoder')}\n"
    (exp / "config.yaml").write_text(recipe)
    with pytest.raises(ValueError, match="already exists and is not an attnpool run"):
        attnpool.train(str(exp / "config.yaml"))
    assert (exp / "config.yaml").read_text() == recipe


def test_a_start_killed_while_writing_run_json_can_be_started_again(tmp_path):
    """Its .run.json.*.tmp was no file of a start: train said "already exists", --resume and --overwrite "not a run"."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("...")
    _saved_config(run)
    Run(run).write_fold_assignment(np.array([0, 1, 0, 1]))
    (run / ".run.json.k3x9q2ab.tmp").write_text('{"attnpool_version": ')  # killed mid-write (atomic_write's name)
    assert Run.never_started(run)
    Run.create(run)  # the same command again starts afresh
    assert sorted(p.name for p in run.iterdir()) == ["train.log"]


def test_a_damaged_out_of_fold_file_is_a_run_error_naming_it_and_the_fix(tmp_path):
    """Empty, its header edited or its last line cut short, a fold's oof.csv counted as done: --resume then failed
    with EmptyDataError or KeyError naming no file, or went on with a fold of NaN."""
    run = Run(tmp_path)
    _fold(run, 0)
    oof = run.fold_dir(0) / "oof.csv"
    fix = r"re-train that fold \(delete the fold folder and run train --resume\) or restore the file"
    for text, what in [("", r"\(empty\)"), ("Row,target,prediction,fold\n0,0.5,0.4,0\n", r"\(no row column"),
                       ("row,target,prediction\n0,0.5,0.4\n", r"\(no fold column"),
                       ("row,target,prediction,fold\n0,0.5,0.4,0\n1,0.2", r"its fold column on line 3"),
                       ("row,target,prediction,fold\n0,0.5,0.4,0\n,0.2,0.1,0\n", r"its row column on line 3"),
                       ('row,target,prediction,fold\n0,0.5,0.4,0\n1,"0.2\n', r"\(Error tokenizing data|EOF")]:
        oof.write_text(text)
        assert run.fold_done(0)
        with pytest.raises(RunError, match=re.escape(str(oof)) + f" is corrupt .*{what}.*{fix}"):
            run.fold_oof(0)
    (tmp_path / "run.json").write_text(json.dumps({"format": RUN_FORMAT}))
    (tmp_path / "oof.csv").write_text("row,target,prediction,fold\n0,0.5,0.4,0\n1,0.2")
    with pytest.raises(RunError, match=r"oof.csv is corrupt .*re-run `attnpool train --resume` on the run"):
        run.oof()
    oof.write_text("row,target,prediction,fold\n1,0.5,,0\n0,0.2,0.1,0\n")  # a diverged row's NaN score: fine
    assert run.fold_oof(0)["row"].tolist() == [0, 1]


def test_select_folds_refuses_text_and_non_integers_saying_what_to_give(tmp_path):
    """select_folds("10") iterated the string (folds 1 and 0), select_folds(1.0) raised a bare TypeError."""
    run = Run(tmp_path)
    for fold in (0, 1):
        _fold(run, fold)
    for bad, shown in [("10", "'10'"), (b"1", "b'1'"), (1.0, "1.0"), (True, "True"), ([0, "1"], "'1'"),
                       ([1.0], "1.0"), ([np.True_], "np.True_|True"), (None, None)]:
        if bad is None:
            continue
        with pytest.raises(ValueError, match=f"folds .*: ({shown}) is not a fold number; give a fold number or a "
                                             "list of fold numbers"):
            run.select_folds(bad)
    assert run.select_folds(np.int64(1)) == [1] and run.select_folds((np.int32(1), 0)) == [1, 0]
    assert run.select_folds(np.arange(2)) == [0, 1] and run.select_folds(range(1, -1, -1)) == [1, 0]
    assert run.select_fold(np.int64(1)) == 1
