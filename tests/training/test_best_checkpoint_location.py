"""A resumed fold's best checkpoint is this run's: a copied run, or one recorded relative to another working directory,
never loads another run folder's weights (trainer_state.json's best_model_checkpoint, which the EMA reads too)."""

from __future__ import annotations

import json
import shutil

from attnpool.runs import Run
from attnpool.training.checkpoints import last_complete_checkpoint


def _checkpoints(folder, best):
    for step in (2, 4):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        (folder / f"checkpoint-{step}/trainer_state.json").write_text(
            json.dumps({"global_step": step, "best_model_checkpoint": best}))


def _best(checkpoint):
    with open(f"{checkpoint}/trainer_state.json", encoding="utf-8") as file:
        return json.load(file)["best_model_checkpoint"]


def test_a_copied_run_resumes_with_its_own_best_checkpoint(tmp_path):
    a, b = tmp_path / "run_a/fold_0/checkpoints", tmp_path / "run_b/fold_0/checkpoints"
    _checkpoints(a, str(a / "checkpoint-2"))
    shutil.copytree(tmp_path / "run_a", tmp_path / "run_b")  # run_a still there: its path exists
    assert _best(last_complete_checkpoint(b)) == str(b / "checkpoint-2")
    assert _best(a / "checkpoint-4") == str(a / "checkpoint-2")  # the original is left alone


def test_a_best_checkpoint_this_run_lacks_is_cleared_not_kept(tmp_path, caplog):
    a, b = tmp_path / "run_a/fold_0/checkpoints", tmp_path / "run_b/fold_0/checkpoints"
    _checkpoints(a, str(a / "checkpoint-2"))
    shutil.copytree(tmp_path / "run_a", tmp_path / "run_b")
    shutil.rmtree(b / "checkpoint-2")
    assert _best(last_complete_checkpoint(b)) is None
    assert f"names the best checkpoint {a / 'checkpoint-2'}, not in {b}; ignoring it" in caplog.text


def test_a_relative_best_checkpoint_is_this_runs_from_any_working_directory(tmp_path, monkeypatch):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    relative = "run/fold_0/checkpoints/checkpoint-2"  # as a relative --output-dir recorded it
    _checkpoints(here / "run/fold_0/checkpoints", relative)
    (elsewhere / relative).mkdir(parents=True)  # another run, where the relative path leads from elsewhere
    monkeypatch.chdir(elsewhere)
    folder = here / "run/fold_0/checkpoints"
    assert _best(last_complete_checkpoint(folder)) == str(folder / "checkpoint-2")


def test_the_trainer_is_given_an_absolute_checkpoints_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Run("runs/a").checkpoints_dir(0) == tmp_path / "runs/a/fold_0/checkpoints"
