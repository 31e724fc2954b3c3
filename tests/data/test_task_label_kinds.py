"""load_task across a training and a validation file: true/false in one and numbers in the other are refused."""

from __future__ import annotations

import json
import logging

import pytest

from attnpool.config import TrainConfig
from attnpool.data.errors import DataError
from attnpool.data.task import load_task
from model_helpers import save_tiny_encoder


def _write_jsonl(path, labels):
    path.write_text("".join(json.dumps({"text": f"text {i}", "label": v}) + "\n" for i, v in enumerate(labels)))


def _config(tmp_path, train, valid, task="binary"):
    return TrainConfig(train_file=str(tmp_path / train), valid_file=str(tmp_path / valid), text_cols=["text"],
                       model=save_tiny_encoder(tmp_path / "encoder"), task=task)


def test_numbers_in_the_training_file_and_true_false_in_the_validation_file_are_refused(tmp_path):
    """Joined, pandas made the validation file's true the class 1: one error names both files and their values."""
    (tmp_path / "train.csv").write_text("text,label\nthe cat,0\na dog,1\nred mat,0\nblue sky,1\n")
    _write_jsonl(tmp_path / "valid.jsonl", [True, False])
    with pytest.raises(DataError) as error:
        load_task(_config(tmp_path, "train.csv", "valid.jsonl"), logging.getLogger("test"))
    assert str(error.value) == (
        f"column 'label' writes classes as numbers in {tmp_path / 'train.csv'} (0, 1) but as true/false in "
        f"{tmp_path / 'valid.jsonl'} (False, True); predict reads true and 1 as two classes: write each class one way "
        "in both files, all true/false or all numbers")


def test_true_false_in_the_training_file_and_numbers_in_the_validation_file_are_refused(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", [True, False, True, False])
    (tmp_path / "valid.csv").write_text("text,label\nthe cat,0\na dog,1\nred mat,2\n")
    with pytest.raises(DataError, match=r"as true/false in .*train\.jsonl \(False, True\) but as numbers in "
                                        r".*valid\.csv \(0, 1, 2\)"):
        load_task(_config(tmp_path, "train.jsonl", "valid.csv", task="multiclass"), logging.getLogger("test"))


def test_one_kind_in_both_files_still_loads(tmp_path):
    """0/1 in a CSV and 0/1 in JSONL, or true/false in both: one encoding of the classes, as before."""
    (tmp_path / "train.csv").write_text("text,label\nthe cat,0\na dog,1\nred mat,0\nblue sky,1\n")
    _write_jsonl(tmp_path / "valid.jsonl", [1, 0])
    task = load_task(_config(tmp_path, "train.csv", "valid.jsonl"), logging.getLogger("test"))
    assert task.classes == [0, 1] and task.labels.tolist() == [0, 1, 0, 1, 1, 0]
    _write_jsonl(tmp_path / "train.jsonl", [False, True, True])
    _write_jsonl(tmp_path / "valid2.jsonl", [True, False])
    task = load_task(_config(tmp_path, "train.jsonl", "valid2.jsonl"), logging.getLogger("test"))
    assert task.classes == [False, True] and task.labels.tolist() == [0, 1, 1, 1, 0]
