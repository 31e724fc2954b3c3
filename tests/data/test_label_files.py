"""A bad label of a training or validation file names that file and its row there, not a row of the joined table."""

from __future__ import annotations

import logging
import re

import pytest

from attnpool.config import TrainConfig
from attnpool.data import DataError
from attnpool.data.task import load_task
from model_helpers import save_tiny_encoder

LOG = logging.getLogger("test")


def config(tmp_path, task: str, valid: bool = True) -> TrainConfig:
    return TrainConfig(train_file=str(tmp_path / "train.csv"),
                       valid_file=str(tmp_path / "valid.csv") if valid else None, text_cols=["text"],
                       model="/unused: the labels are refused before the tokenizer loads", task=task)


def test_a_multilabel_validation_file_is_checked_on_its_own(tmp_path):
    """Checked joined to the training rows: 'data row 6' was in neither file, and no file was named."""
    (tmp_path / "train.csv").write_text("text,label\na,x|y\nb,y\nc,x\nd,y\n")
    (tmp_path / "valid.csv").write_text('text,label\ne,x\nf,"[x, y]"\n')
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'valid.csv'}: column 'label', data row 2: '[x, y]' "
                                                  "looks like a list written as text")):
        load_task(config(tmp_path, "multilabel"), LOG)


def test_a_multilabel_validation_file_of_rows_without_classes_is_accepted(tmp_path):
    """Checked alone, it was refused as "no labels in any row": a blank cell is a row without classes."""
    (tmp_path / "train.csv").write_text("text,label\na,x|y\nb,y\nc,x\nd,y\n")
    (tmp_path / "valid.csv").write_text("text,label\ne,\nf,[]\n")
    cfg = config(tmp_path, "multilabel")
    cfg.model = save_tiny_encoder(tmp_path / "encoder")
    data = load_task(cfg, LOG)
    assert data.labels.shape == (6, 2) and not data.labels[4:].any()


@pytest.mark.parametrize(("task", "rows", "message"), [
    ("binary", "a,pos\nb,\nc,neg\n", "column 'label' has missing labels in data rows 2; every row of a binary task"),
    ("regression", "a,0.5\nb,0.1\nc,high\n", "column 'label' has 1 non-numeric values in data rows 3 ('high')"),
    ("multilabel", 'a,x\nb,"[x, y]"\nc,y\n', "column 'label', data row 2: '[x, y]' looks like a list"),
    ("binary", "a,pos\nb,neg\nc,meh\n", "column 'label': task 'binary' needs exactly 2 classes, found 3"),
])
@pytest.mark.parametrize("valid", [False, True])
def test_a_bad_training_label_names_the_training_file(tmp_path, task, rows, message, valid):
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    (tmp_path / "valid.csv").write_text("text,label\nv,x\n" if task == "multilabel" else
                                        "text,label\nv,0.2\n" if task == "regression" else "text,label\nv,pos\n")
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / 'train.csv'}: {message}")):
        load_task(config(tmp_path, task, valid), LOG)


def test_a_bad_label_of_the_pppm_preset_names_its_train_csv(tmp_path):
    (tmp_path / "train.csv").write_text("id,anchor,target,context,score\n1,a,b,A47,0.5\n2,c,d,A47,high\n")
    (tmp_path / "cpc_texts.csv").write_text("context,text\nA47,HUMAN NECESSITIES\n")
    cfg = TrainConfig(preset="pppm", data_dir=str(tmp_path), model="/unused")
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / 'train.csv'}: column 'score' has 1 "
                                                        "non-numeric values in data rows 2 ('high')")):
        load_task(cfg, LOG)
