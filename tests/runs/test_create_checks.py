"""Run.create on a folder it cannot take: one a live process holds (named first, whatever it has written so far),
and an --output-dir that is a symbolic link to nothing."""

from __future__ import annotations

import os

import pytest

from attnpool.config import TrainConfig
from attnpool.runs import LockedError, Run, RunError
from attnpool.training.recipe import PER_CALL_SAVED


def _started(run) -> None:
    """What a live ``train`` has written before its run.json: its log and its saved config."""
    run.mkdir()
    (run / "train.log").write_text("started\n")
    Run(run).write_config({**TrainConfig(train_file="train.csv", text_cols=["text"], output_dir=str(run)).to_dict(),
                           **PER_CALL_SAVED})
    assert Run.never_started(run)


@pytest.mark.parametrize("resume", [True, False])
def test_a_start_still_running_is_named_not_taken_for_a_stopped_one(holder, tmp_path, resume):
    run = tmp_path / "run"
    _started(run)
    proc = holder(run)
    with pytest.raises(LockedError, match=rf"in use by another attnpool process \(train, PID {proc.pid} on host "):
        Run.create(run, resume=resume)
    assert (run / "config.yaml").is_file()  # not deleted from under it


@pytest.mark.parametrize("options", [{}, {"overwrite": True}, {"resume": True}])
def test_a_run_in_use_is_named_not_said_to_exist(holder, tmp_path, options):
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})
    proc = holder(run.path)
    with pytest.raises(LockedError, match=rf"in use by another attnpool process \(train, PID {proc.pid} on host "):
        Run.create(run.path, **options)
    assert run.has_info()


def test_a_lock_left_by_a_dead_process_is_no_holder(tmp_path):
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})
    (run.path / ".attnpool.lock").write_text('{"pid": 999999999, "host": "elsewhere", "purpose": "train"}')
    with pytest.raises(RunError, match="already exists; pass --resume") as caught:
        Run.create(run.path)
    assert not isinstance(caught.value, LockedError)
    assert Run.create(run.path, resume=True).has_info()


def test_a_link_to_nothing_names_its_missing_target(tmp_path):
    link = tmp_path / "dangling"
    os.symlink("gone/run", link)
    with pytest.raises(RunError, match=rf"output path {link} is a symbolic link to gone/run \({tmp_path / 'gone/run'}"
                                       r"\), which does not exist; create that folder, or remove the link"):
        Run.create(link)
    assert not (tmp_path / "gone").exists()
    (tmp_path / "gone" / "run").mkdir(parents=True)
    assert Run.create(link).path == link  # its target made: a run there
