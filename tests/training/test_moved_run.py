"""A run moved to another folder or machine (its data and encoder with it) resumes with the call's --train-file /
--model where its config.yaml's absolute paths no longer exist; without them the error names config.yaml."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
import yaml

import attnpool
from attnpool.config import TrainConfig
from attnpool.runs import Run, RunError
from attnpool.training.recipe import PER_CALL_SAVED, _resumed_config
from model_helpers import save_tiny_encoder, write_toy_csv


def _options(folder):
    return {"train_file": str(folder / "train.csv"), "text_cols": ["first", "second"], "label": "label",
            "model": str(folder / "encoder"), "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4,
            "pooling_options": {"attn_size": 8}, "precision": "fp32"}


def test_a_moved_run_resumes_with_the_calls_paths_and_refuses_other_data_or_encoder(tmp_path, caplog):
    """The saved paths won and the call's were ignored with a warning, then 'Repo id must be in the form...' or
    'no such file', never naming config.yaml."""
    before, after = tmp_path / "before", tmp_path / "after"
    save_tiny_encoder(before / "encoder")
    write_toy_csv(before / "train.csv", n=24, seed=0)
    attnpool.train(_options(before), output_dir=str(before / "run"), only_folds=[0])
    shutil.move(before, after)  # the run, its data and its encoder: on another machine
    run = Run(after / "run")
    missing = (rf"--resume: {re.escape(str(run.config_file))} has train_file: {re.escape(str(before / 'train.csv'))}"
               r", which does not exist \(the run or its data moved\?\); give --train-file with where it is now, or "
               "edit train_file in that file")
    with pytest.raises(RunError, match=missing):
        attnpool.train(output_dir=str(run.path), resume=True)
    with pytest.raises(RunError, match=rf"has model: {re.escape(str(before / 'encoder'))}, which does not exist .*"
                                       "give --model with where it is now, or edit model in that file"):
        attnpool.train(output_dir=str(run.path), resume=True, train_file=str(after / "train.csv"))
    other = after / "other_encoder"  # another architecture: refused before any training
    shutil.copytree(after / "encoder", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "num_hidden_layers": config["num_hidden_layers"] + 1}))
    with pytest.raises(RunError, match=r"the encoder given with --model .* is not the one the run's folds were "
                                       r"trained from: num_hidden_layers"):
        attnpool.train(output_dir=str(run.path), resume=True, train_file=str(after / "train.csv"), model=str(other))
    relabelled = pd.read_csv(after / "train.csv")
    relabelled["label"] = 1 - relabelled["label"]  # the same rows, other labels: not the run's data
    relabelled.to_csv(after / "relabelled.csv", index=False)
    with pytest.raises(ValueError, match="the training data changed since the run started"):
        attnpool.train(output_dir=str(run.path), resume=True, train_file=str(after / "relabelled.csv"),
                       model=str(after / "encoder"))
    assert not run.fold_dir(1).exists()
    caplog.clear()
    result = attnpool.train(output_dir=str(run.path), resume=True, train_file=str(after / "train.csv"),
                            model=str(after / "encoder"))
    assert result.complete and run.fold_done(1)
    assert f"train_file of {run.config_file} ({before / 'train.csv'}) does not exist; using the given " \
           f"--train-file {after / 'train.csv'}" in caplog.text
    assert "these options are ignored" not in caplog.text  # the call's paths were taken, not ignored


def test_a_saved_hub_name_is_kept_and_a_saved_path_that_exists_wins(tmp_path):
    write_toy_csv(tmp_path / "train.csv", n=8, seed=0)
    run = Run.create(tmp_path / "run")
    run.write_config({**TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["first"],
                                    model="org/some-encoder").to_dict(), **PER_CALL_SAVED})
    cfg = _resumed_config(run, TrainConfig(resume=True, output_dir=str(run.path)),
                          {"model": "org/other", "train_file": str(tmp_path / "elsewhere.csv")})
    assert (cfg.model, cfg.train_file) == ("org/some-encoder", str(tmp_path / "train.csv"))
    assert yaml.safe_load(run.config_file.read_text())["model"] == "org/some-encoder"
