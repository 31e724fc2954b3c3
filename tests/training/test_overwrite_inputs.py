"""--overwrite refuses, deleting nothing, where this call's data or local encoder lies in the run it would empty; a
resumed run whose data has other rows than its folds is a RunError (the CLI prints a ValueError's one line) naming
folds.csv, the data and the ways out."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import yaml

import attnpool
from attnpool.cli import main
from attnpool.config import TrainConfig
from attnpool.runs import Run, RunError
from attnpool.training.recipe import _record_run
from model_helpers import save_tiny_encoder, write_toy_csv


def _options(tmp_path, **kwargs):
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "label": "label",
            "model": str(tmp_path / "encoder"), "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4,
            "pooling_options": {"attn_size": 8}, "output_dir": str(tmp_path / "run"), "overwrite": True, **kwargs}


@pytest.mark.parametrize(("option", "key", "inside"), [("--train-file", "train_file", "pseudo.csv"),
                                                      ("--model", "model", "encoder")])
def test_overwrite_refuses_to_delete_the_calls_data_or_encoder(tmp_path, option, key, inside):
    save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})  # an old run, holding the user's file or encoder
    if key == "train_file":
        write_toy_csv(run.path / inside, n=24, seed=0)
    else:
        save_tiny_encoder(run.path / inside)
    given = str(run.path / inside)
    fix = f"move it out of {run.path} first or choose another --output-dir"
    with pytest.raises(RunError, match=re.escape(f"--overwrite would delete {option} {given} (in the run folder "
                                                 f"{run.path}) before reading it; {fix}")):
        attnpool.train(**_options(tmp_path, **{key: given}))
    assert (run.path / inside).exists() and run.has_info()  # nothing deleted


def test_overwrite_refuses_data_reached_through_a_link_to_the_run(tmp_path):
    save_tiny_encoder(tmp_path / "encoder")
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})
    write_toy_csv(run.path / "train.csv", n=24, seed=0)
    (tmp_path / "link").symlink_to(run.path)
    with pytest.raises(RunError, match="--overwrite would delete --train-file .*link/train.csv"):
        attnpool.train(**_options(tmp_path, train_file=str(tmp_path / "link/train.csv")))
    assert (run.path / "train.csv").is_file()


def test_other_rows_than_the_saved_folds_is_a_run_error_naming_the_files(tmp_path):
    write_toy_csv(tmp_path / "train.csv", n=28, seed=0)
    run = Run.create(tmp_path / "run")
    run.write_fold_assignment([0, 1] * 12)
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["first"], output_dir=str(run.path),
                      resume=True)
    with pytest.raises(RunError) as raised:
        _record_run(run, cfg, SimpleNamespace(num_rows=28))
    assert str(raised.value) == (
        f"--resume: the run's saved folds ({run.path / 'folds.csv'}) have 24 rows but the data "
        f"({tmp_path / 'train.csv'}) has 28: the data changed since the run started. Put the data back, or start a new "
        "run (another --output-dir, or --overwrite)")


@pytest.mark.parametrize("through_cli", [False, True])
def test_overwrite_refuses_to_delete_the_calls_config_file(tmp_path, capsys, through_cli):
    """--overwrite emptied the run folder holding the user's --config recipe: the recipe was lost."""
    save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    run = Run.create(tmp_path / "run")
    run.write_info({"task": "regression"})
    recipe = run.path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(_options(tmp_path)))
    fix = f"move it out of {run.path} first or choose another --output-dir"
    message = re.escape(f"--overwrite would delete --config {recipe} (in the run folder {run.path}) before reading "
                        f"it; {fix}")
    if through_cli:
        assert main(["train", "--config", str(recipe)]) == 2
        assert re.search(message, capsys.readouterr().err)
    else:
        with pytest.raises(RunError, match=message):
            attnpool.train(recipe)
    assert recipe.is_file() and run.has_info()  # nothing deleted
