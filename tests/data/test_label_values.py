"""Labels that would train without an error but wrongly: outside a sigmoid output's range, one class spelled twice."""

from __future__ import annotations

import logging
import re

import pandas as pd
import pytest

from attnpool.config import TrainConfig
from attnpool.data import DataError
from attnpool.data.columns import validate_labels
from attnpool.data.task import load_task
from model_helpers import save_tiny_encoder

LOG = logging.getLogger("test")


def config(tmp_path, valid: bool = False, **options) -> TrainConfig:
    return TrainConfig(train_file=str(tmp_path / "train.csv"),
                       valid_file=str(tmp_path / "valid.csv") if valid else None, text_cols=["text"],
                       model="/unused: the labels are refused before the tokenizer loads", task="regression",
                       **options)


@pytest.mark.parametrize("loss", [None, "mse", "bce"])
def test_a_sigmoid_output_refuses_labels_outside_0_1(tmp_path, loss):
    """With MSE it trained to predictions stuck in (0, 1); with BCE it failed in the first step, naming no row."""
    (tmp_path / "train.csv").write_text("text,label\na,0\nb,0.5\nc,4\nd,1\ne,-1\n")
    message = (f"{tmp_path / 'train.csv'}: column 'label' has 2 label(s) outside [0, 1] in data rows 3, 5 (the labels "
               "range from -1 to 4), but the sigmoid output of --output-activation sigmoid predicts values in (0, 1) "
               "only: rescale the labels to [0, 1], or drop that option")
    with pytest.raises(DataError, match="^" + re.escape(message)):
        load_task(config(tmp_path, output_activation="sigmoid", loss=loss), LOG)


def test_a_sigmoid_output_checks_the_validation_file_by_its_own_rows(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\na,0\nb,0.5\nc,1\n")
    (tmp_path / "valid.csv").write_text("text,label\nd,0.25\ne,2.5\n")
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / 'valid.csv'}: column 'label' has 1 label(s) "
                                                        "outside [0, 1] in data rows 2 (the labels range from 0.25 "
                                                        "to 2.5)")):
        load_task(config(tmp_path, valid=True, output_activation="sigmoid"), LOG)


def test_the_pppm_preset_refuses_scores_outside_0_1(tmp_path):
    (tmp_path / "train.csv").write_text("id,anchor,target,context,score\n1,a,b,A47,0.5\n2,c,d,A47,3\n")
    (tmp_path / "cpc_texts.csv").write_text("context,text\nA47,HUMAN NECESSITIES\n")
    cfg = TrainConfig(preset="pppm", data_dir=str(tmp_path), model="/unused")
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / 'train.csv'}: column 'score' has 1 label(s) "
                                                        "outside [0, 1] in data rows 2")) as caught:
        load_task(cfg, LOG)
    assert "the sigmoid output of --preset pppm" in str(caught.value)
    assert "train without the preset" in str(caught.value)


@pytest.mark.parametrize(("rows", "options"), [
    ("a,0\nb,4\nc,2\n", {"output_activation": "sigmoid", "loss": "pearson"}),  # scale-free: any range fits
    ("a,0\nb,0.25\nc,1\n", {"output_activation": "sigmoid"}),
    ("a,0\nb,4\nc,2\n", {}),
])
def test_labels_a_sigmoid_output_can_fit_are_accepted(tmp_path, rows, options):
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    cfg = config(tmp_path, **options)
    cfg.model = save_tiny_encoder(tmp_path / "encoder")
    assert load_task(cfg, LOG).labels.tolist() == [float(v.split(",")[1]) for v in rows.split()]


@pytest.mark.parametrize(("values", "shown"), [
    (["1.0", 1, 2], "'1', '1.0'"),  # the text "1.0" and the number 1 of a JSONL or Parquet column
    (["1", "1.0", "cat"], "'1', '1.0'"),  # a column of text
    (["+1", 1, 2], "'+1', '1'"),
])
@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_one_class_spelled_two_ways_is_refused(values, shown, task):
    """Trained as two classes, predict and explain read them as one: explain's label2id lost a class index."""
    if task == "binary":
        values = values[:2]
    with pytest.raises(DataError, match="^" + re.escape(f"column 'label' writes a class in several ways: {shown}; "
                                                        "predict reads them as one class")) as caught:
        validate_labels(pd.DataFrame({"label": values}), "label", task)
    assert "write each class one way" in str(caught.value)


def test_one_class_spelled_two_ways_in_a_jsonl_file_names_the_file(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"text": "a", "label": "1.0"}\n{"text": "b", "label": 1}\n'
                                          '{"text": "c", "label": 2}\n')
    cfg = TrainConfig(train_file=str(tmp_path / "train.jsonl"), text_cols=["text"], model="/unused",
                      task="multiclass")
    with pytest.raises(DataError, match="^" + re.escape(f"{tmp_path / 'train.jsonl'}: column 'label' writes a class "
                                                        "in several ways: '1', '1.0'")):
        load_task(cfg, LOG)


@pytest.mark.parametrize(("values", "classes"), [
    ([1, 1.0, 2], [1, 2]),  # one class, as Python compares them
    ([1.5, 2, "3"], ["1.5", "2", "3"]),
    (["cat", "Cat"], ["Cat", "cat"]),
    ([True, False], [False, True]),
    (["5", "05"], ["05", "5"]),  # "05" is not read as a number
])
def test_distinct_classes_and_one_spelling_are_accepted(values, classes):
    assert validate_labels(pd.DataFrame({"label": values}), "label", "multiclass").classes == classes


@pytest.mark.parametrize("values", [
    [True, 1, 0, False, 2],  # JSONL's true and 1: int(True) == 1 made them one class, predict reads two
    [True, False, 1.0],
])
@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_true_false_beside_numbers_is_refused_not_merged_into_1_0(values, task):
    flags = sorted({v for v in values if isinstance(v, bool)})
    numbers = sorted({v for v in values if not isinstance(v, bool)})
    message = (f"column 'label' writes classes both as true/false ({', '.join(map(repr, flags))}) and as numbers "
               f"({', '.join(map(repr, numbers))}); predict reads true and 1 as two classes")
    with pytest.raises(DataError, match="^" + re.escape(message)):
        validate_labels(pd.DataFrame({"label": values}, dtype=object), "label", task)


def test_the_labels_of_a_csv_of_0_1_joined_to_a_jsonl_of_true_false_are_refused(tmp_path):
    """The joined label column holds 0, 1, True and False: it trained as the two classes 0 and 1 without a word."""
    from attnpool.data import read_table

    (tmp_path / "train.csv").write_text("text,label\na,0\nb,1\nc,1\n")
    (tmp_path / "valid.jsonl").write_text('{"text": "d", "label": true}\n{"text": "e", "label": false}\n')
    joined = pd.concat([read_table(tmp_path / name)["label"] for name in ("train.csv", "valid.jsonl")])
    with pytest.raises(DataError, match=re.escape("writes classes both as true/false (False, True) and as numbers "
                                                  "(0, 1)")):
        validate_labels(joined.to_frame(), "label", "binary")


def test_a_column_of_true_false_is_a_binary_task_with_the_classes_predict_reads():
    """JSONL/Parquet booleans train as False/True; predict knows them by the same names, as text or as booleans."""
    from attnpool.data.numbers import class_key

    labels = validate_labels(pd.DataFrame({"label": [True, False, True]}), "label", "binary")
    assert labels.classes == [False, True] and labels.values.tolist() == [1, 0, 1]
    assert [class_key(c) for c in labels.classes] == [class_key("False"), class_key("True")] == ["False", "True"]
    assert validate_labels(pd.DataFrame({"label": ["True", "False"]}), "label", "binary").classes == ["False", "True"]
