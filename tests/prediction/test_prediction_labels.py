"""The labels of a file to predict are compared with the run's classes however each column was read."""

from __future__ import annotations

import re

import pytest

from attnpool.config import TrainConfig
from attnpool.data import DataError, read_table, validate_labels
from attnpool.data.prediction import _check_prediction_rows


def check(tmp_path, train: str, test: str) -> None:
    (tmp_path / "train.csv").write_text("text,stars\n" + train)
    (tmp_path / "test.csv").write_text("text,stars\n" + test)
    classes = validate_labels(read_table(tmp_path / "train.csv", text_columns=["text"]), "stars", "multiclass").classes
    cfg = TrainConfig(text_cols=["text"], model="unused", task="multiclass", label="stars")
    _check_prediction_rows(cfg, {"classes": classes}, read_table(tmp_path / "test.csv", text_columns=["text"]),
                           tmp_path / "test.csv")


def test_numbers_saved_as_text_are_the_labels_of_a_column_read_as_numbers(tmp_path):
    """Classes '3.5', '5.0', 'unrated' (text: one is not a number); the test file's 5.0 read as a float was '5',
    refused as a label the model never saw."""
    train = "great,5.0\nok,3.5\nmeh,unrated\nfine,5.0\n"
    check(tmp_path, train, "super,5.0\nso so,3.5\nblank,\n")
    check(tmp_path, train, "super,5\nnone,unrated\n")
    with pytest.raises(DataError, match=re.escape("test.csv: column 'stars' has labels the model never saw in "
                                                  "training: 4 (data rows 2); known labels: 3.5, 5.0, unrated. "
                                                  "predict does not need the label column")):
        check(tmp_path, train, "super,5.0\nso so,4.0\n")


def test_an_id_like_class_is_not_the_number_it_spells(tmp_path):
    """'0001' is read as text, never as 1: a test label 1 is no class '0001'."""
    check(tmp_path, "a,0001\nb,x\n", "c,0001\n")
    with pytest.raises(DataError, match=r"never saw in training: 1 \(data rows 1\); known labels: 0001, x\. predict"):
        check(tmp_path, "a,0001\nb,x\n", "c,1\n")
