"""Poolers from the literature are selectable with --pooling in `attnpool train` (multi-layer and combined)."""

from __future__ import annotations

import json

import pytest

from attnpool.cli import main
from attnpool.model import AttnPoolForSequenceClassification
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.mark.parametrize(("pooling", "options"), [("weighted_layer", []), ("attention+mean", []),
                                                  ("stats", []), ("simpool", [])])
def test_train_with_pooling(tmp_path, pooling, options):
    write_toy_csv(tmp_path / "train.csv", n=16)
    run = tmp_path / "run"
    code = main(["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--epochs", "1", "--batch-size", "8", "--max-length", "16",
                 "--model", save_tiny_encoder(tmp_path / "enc"), "--pooling", pooling, *options,
                 "--output-dir", str(run)])
    assert code == 0
    assert json.loads((run / "metrics.json").read_text())["complete"]
    model = AttnPoolForSequenceClassification.from_pretrained(run / "fold_0" / "model")
    assert model.config.pooling["type"] == ("combined" if "+" in pooling else pooling)
