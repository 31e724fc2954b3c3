"""`~` in a config's paths is the home folder for every reader: `output_dir: ~/x` made a folder named `~` in the
current one, and `train_file: ~/...` was looked for there ("no such file (resolved to CWD/~/...)")."""

from __future__ import annotations

import yaml

import attnpool
from attnpool.config import TrainConfig, make_config
from model_helpers import save_tiny_encoder, write_toy_csv


def test_a_config_file_s_home_paths_train_the_run_there(home, tmp_path):
    save_tiny_encoder(home / "encoder")
    write_toy_csv(home / "train.csv", n=24, seed=0)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "train_file": "~/../home/train.csv", "model": "~/encoder", "output_dir": "~/x",
        "text_cols": ["first", "second"], "label": "label", "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4,
        "pooling_options": {"attn_size": 8}}))
    result = attnpool.train(recipe)
    assert result.complete
    assert (home / "x" / "config.yaml").is_file()
    assert not (tmp_path / "cwd" / "~").exists(), "no folder named ~ in the current one"
    saved = yaml.safe_load((home / "x" / "config.yaml").read_text())
    assert saved["train_file"] == str(home / "train.csv")  # expanded and absolute
    assert saved["model"] == str(home / "encoder")
    assert saved["output_dir"] == str(home / "x")


def test_every_way_of_making_a_config_expands_home(home):
    for cfg in (TrainConfig(output_dir="~/x", train_file="~/t.csv"), make_config({"output_dir": "~/x"}),
                make_config(None, output_dir="~/x"), TrainConfig.from_dict({"output_dir": "~/x"})):
        assert cfg.output_dir == str(home / "x")
    cfg = TrainConfig(train_file="~/t.csv", valid_file="~/v.csv", data_dir="~/pppm", model="~/enc")
    assert [cfg.train_file, cfg.valid_file, cfg.data_dir, cfg.model] == [
        str(home / "t.csv"), str(home / "v.csv"), str(home / "pppm"), str(home / "enc")]
    assert TrainConfig(model="org/name").model == "org/name"  # a hub name is left as it is
