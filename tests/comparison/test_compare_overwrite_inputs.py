"""``compare --overwrite`` refuses to empty a comparison folder that holds this call's own inputs.

It deleted every file in the folder but its lock: the recipe it was reading, the data, the local encoder (``train
--overwrite`` refused that case already).
"""

from __future__ import annotations

import pytest
import yaml

import attnpool
from attnpool.cli import main
from attnpool.comparison import runner
from attnpool.runs import RunError
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.fixture
def cmp(tmp_path):
    """A comparison folder (an earlier comparison's recipe in it) holding an encoder, the data and the recipe."""
    out = tmp_path / "cmp"
    out.mkdir()
    (out / runner.CONFIG_FILE).write_text("epochs: 1\n")
    save_tiny_encoder(out / "encoder")
    write_toy_csv(out / "train.csv")
    recipe = {"model": str(out / "encoder"), "train_file": str(out / "train.csv"), "text_cols": ["first", "second"],
              "folds": 2, "epochs": 1, "max_length": 16}
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return out


def _children(folder):
    return sorted(p.name for p in folder.iterdir())


def test_compare_overwrite_refuses_to_delete_its_own_recipe_file(cmp):
    before = _children(cmp)
    with pytest.raises(RunError) as raised:
        attnpool.compare(cmp / "recipe.yaml", poolings=["attention"], seeds=1, output_dir=cmp, overwrite=True)
    assert str(raised.value) == (f"--overwrite would delete --config {cmp / 'recipe.yaml'} (in the comparison folder "
                                 f"{cmp}) before reading it; move it out of {cmp} first or choose another --output-dir")
    assert _children(cmp) == before  # nothing deleted


@pytest.mark.parametrize(("option", "key"), [("--train-file", "train_file"), ("--model", "model")])
def test_compare_overwrite_refuses_to_delete_its_data_or_model(cmp, tmp_path, option, key):
    recipe = yaml.safe_load((cmp / "recipe.yaml").read_text())
    if key == "model":  # the data outside too: the model alone inside
        (tmp_path / "train.csv").write_bytes((cmp / "train.csv").read_bytes())
        recipe["train_file"] = str(tmp_path / "train.csv")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))  # the recipe outside: its inputs still inside
    before = _children(cmp)
    with pytest.raises(RunError, match=f"^--overwrite would delete {option} {recipe[key]} \\(in the comparison "
                                       "folder .*; move it out of .* first or choose another --output-dir$"):
        attnpool.compare(tmp_path / "recipe.yaml", poolings=["attention"], seeds=1, output_dir=cmp, overwrite=True)
    assert _children(cmp) == before


def test_compare_overwrite_on_the_command_line_refuses_too(cmp, capsys):
    before = _children(cmp)
    code = main(["compare", "--config", str(cmp / "recipe.yaml"), "--poolings", "attention", "--seeds", "1",
                 "--output-dir", str(cmp), "--overwrite"])
    assert code != 0
    assert f"--overwrite would delete --config {cmp / 'recipe.yaml'} (in the comparison folder {cmp})" in (
        capsys.readouterr().err)
    assert _children(cmp) == before


def test_compare_overwrite_still_empties_a_comparison_whose_inputs_lie_elsewhere(cmp, tmp_path):
    """The check reaches only this call's inputs: a folder holding none of them is emptied as before."""
    (cmp / "notes.txt").write_text("old")
    (tmp_path / "train.csv").write_bytes((cmp / "train.csv").read_bytes())
    cfg = attnpool.TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["first", "second"], model="bert-x")
    runner._check_recipe(cmp, cfg, True, tmp_path / "recipe.yaml")
    assert _children(cmp) == [runner.CONFIG_FILE]


def test_compare_overwrite_may_start_again_from_the_comparisons_own_saved_recipe(cmp, tmp_path):
    """--config OUT/compare_config.yaml --overwrite (the same recipe, from scratch) was refused: that file is read
    before anything is deleted, and written anew from it."""
    (tmp_path / "train.csv").write_bytes((cmp / "train.csv").read_bytes())
    cfg = attnpool.TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["first", "second"], model="bert-x")
    runner._check_recipe(cmp, cfg, True, cmp / runner.CONFIG_FILE)
    assert _children(cmp) == [runner.CONFIG_FILE]
