"""compare_config.yaml: a recipe no run was recorded with does not block a corrected command."""

from __future__ import annotations

import pytest
import yaml

from attnpool.comparison import runner
from attnpool.config import TrainConfig
from attnpool.runs.run import Run, RunError


def test_a_recipe_whose_runs_all_stopped_before_recording_is_replaced(tmp_path):
    """A mistyped --train-file was saved before any run; its first run stopped at the data (train.log and
    config.yaml only), and the corrected command was refused as another recipe."""
    out = tmp_path / "cmp"
    bad, good = (str(tmp_path / name) for name in ("typo.csv", "x.csv"))
    runner._check_recipe(out, TrainConfig(train_file=bad, text_cols=["a"]), False)
    stopped = out / "runs" / "mean" / "seed_42"
    stopped.mkdir(parents=True)
    (stopped / "train.log").write_text("no such file\n")
    runner._check_recipe(out, TrainConfig(train_file=good, text_cols=["a"]), False)
    assert yaml.safe_load((out / runner.CONFIG_FILE).read_text())["train_file"] == good
    Run(stopped).write_info({"task": "regression"})  # a recorded run: its recipe holds
    with pytest.raises(RunError, match="holds a comparison with another recipe"):
        runner._check_recipe(out, TrainConfig(train_file=bad, text_cols=["a"]), False)
    assert yaml.safe_load((out / runner.CONFIG_FILE).read_text())["train_file"] == good
