"""Labels that trained on something else than the file says (another delimiter, a list, a date), and ``--limit``
draws whose lost classes were blamed on the file."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pandas as pd
import pytest

from attnpool.config import TrainConfig
from attnpool.data import DataError, read_table
from attnpool.data.columns import validate_labels
from attnpool.data.task import load_task

LOG = logging.getLogger("test")


def test_multilabel_labels_separated_by_commas_are_refused():
    """'sports,news' beside 'sports' and 'news' trained as a combination class of its own."""
    frame = pd.DataFrame({"topics": ["sports", "news", "sports,news", "news; sports"]})
    with pytest.raises(DataError) as caught:
        validate_labels(frame, "topics", "multilabel")
    assert str(caught.value) == (
        "column 'topics', data row 3: 'sports,news' separates labels by ',', but multilabel cells separate them by "
        "'|': it would train as a class of its own beside 'sports', 'news'; write 'sports|news', or, if 'sports,news' "
        "is one class, the row's labels as a list (['sports,news'] in a CSV cell, a JSON list in JSONL, a list column "
        "in Parquet)")
    frame = pd.DataFrame({"topics": ["news", "sports", "news; sports"]})
    with pytest.raises(DataError, match=r"data row 3: 'news; sports' separates labels by ';'.* write 'news\|sports'"):
        validate_labels(frame, "topics", "multilabel")
    # a class whose name holds a comma, its parts not classes, is a class
    assert validate_labels(pd.DataFrame({"t": ["rock, paper", "x|rock"]}), "t", "multilabel").classes == [
        "rock", "rock, paper", "x"]
    # ... and so is one written in a list, where a comma separates nothing (the way out the message gives)
    for cells in ([["Arts, Culture", "Arts"], ["Culture"]], ["['Arts, Culture', 'Arts']", "Culture"],
                  [np.array(["Arts, Culture", "Arts"]), np.array(["Culture"])]):
        assert validate_labels(pd.DataFrame({"t": cells}), "t", "multilabel").classes == [
            "Arts", "Arts, Culture", "Culture"]


def _jsonl(path, labels):
    path.write_text("".join(json.dumps({"text": "t", "label": v}) + "\n" for v in labels))
    return read_table(path)


def test_list_and_object_labels_of_a_class_task_are_refused(tmp_path):
    """[1], 2 and {"x": 1} were the classes '2', '[1]' and "{'x': 1}"."""
    frame = _jsonl(tmp_path / "a.jsonl", [2, [1], {"x": 1}])
    with pytest.raises(DataError) as caught:
        validate_labels(frame, "label", "multiclass")
    assert str(caught.value) == (
        "column 'label', data row 2: the label [1] is a list, but a multiclass label is one class per row (a number "
        "or a text): write the class itself, or train with --task multilabel for rows with several labels")
    with pytest.raises(DataError) as caught:
        validate_labels(_jsonl(tmp_path / "b.jsonl", ["a", {"x": 1}]), "label", "binary")
    assert str(caught.value) == (
        "column 'label', data row 2: the label {'x': 1} is an object, but a binary label is one class per row (a "
        "number or a text): write the class itself")


def test_object_labels_of_a_multilabel_task_are_refused(tmp_path):
    """{"x": 1} was the class "{'x': 1}"."""
    with pytest.raises(DataError) as caught:
        validate_labels(_jsonl(tmp_path / "a.jsonl", [["a"], {"x": 1}]), "label", "multilabel")
    assert str(caught.value) == (
        "column 'label', data row 2: {'x': 1} is an object, not labels; write a row's labels as a list of texts or "
        "numbers (JSONL, Parquet) or separated by '|' (e.g. 'a|b')")
    with pytest.raises(DataError, match=r"data row 1: \[\['a'\]\] is a list holding lists or objects, not labels"):
        validate_labels(_jsonl(tmp_path / "b.jsonl", [[["a"]], ["b"]]), "label", "multilabel")
    assert validate_labels(_jsonl(tmp_path / "c.jsonl", [["a", "b"], []]), "label", "multilabel").classes == ["a", "b"]


def test_date_and_duration_regression_labels_are_refused(tmp_path):
    """A Parquet datetime label trained on the timestamps in nanoseconds."""
    pytest.importorskip("pyarrow")
    path = tmp_path / "d.parquet"
    pd.DataFrame({"text": ["a", "b"], "when": pd.to_datetime(["2020-01-01", "2021-01-01"])}).to_parquet(path)
    frame = read_table(path)
    with pytest.raises(DataError) as caught:
        validate_labels(frame, "when", "regression")
    assert str(caught.value) == (
        f"column 'when' holds {frame['when'].dtype} values (dates or durations), not numbers; regression labels must "
        "be finite numbers: convert the column to the numbers to predict (e.g. days), or choose a classification task")
    with pytest.raises(DataError, match=r"column 'span' holds timedelta64\[\w+\] values \(dates or durations\)"):
        validate_labels(pd.DataFrame({"span": pd.to_timedelta([1, 2], unit="D")}), "span", "regression")


def test_a_group_limit_that_loses_a_class_names_limit(tmp_path, tok):
    """Whole groups of one class each: the draw kept one class, and the error said the file had one."""
    path = tmp_path / "gl.csv"
    labels = "xxyyxxyy"
    path.write_text("text,g,other,label\n" + "".join(f"row {i},{'abcd'[i // 2]},o{i},{v}\n"
                                                     for i, v in enumerate(labels)))
    cfg = TrainConfig(train_file=str(path), text_cols=["text"], label="label", task="binary", model=tok, limit=2,
                      folds=2, group_context="other", group_context_by=["g"])
    with pytest.raises(DataError) as caught:
        load_task(cfg, LOG)
    message = str(caught.value)
    lost = "'y'" if "(not 'y')" in message else "'x'"
    assert message == (
        f"--limit 2 draws 2 row(s) of {path} in whole groups of --group-context-by g, holding 1 of the 2 classes of "
        f"column 'label' (not {lost}): a binary task needs both classes among its training rows. Raise --limit so "
        "that the groups drawn hold rows of each class")


def test_a_group_limit_that_loses_a_multiclass_class_warns(tmp_path, tok, caplog):
    path = tmp_path / "gl.csv"
    labels = "xxyyzzxxyyzz"
    path.write_text("text,g,other,label\n" + "".join(f"row {i},{'abcdef'[i // 2]},o{i},{v}\n"
                                                     for i, v in enumerate(labels)))
    cfg = TrainConfig(train_file=str(path), text_cols=["text"], label="label", task="multiclass", model=tok, limit=4,
                      folds=2, group_context="other", group_context_by=["g"])
    with caplog.at_level(logging.WARNING, logger="test"):
        data = load_task(cfg, LOG)
    assert len(data.classes) == 2
    lost = ({"x", "y", "z"} - set(data.classes)).pop()
    assert (f"--limit 4 draws 4 row(s) of {path} in whole groups of --group-context-by g: the model trains without "
            f"class(es) {lost!r} of column 'label'; raise --limit to keep rows of each class") in caplog.text


def test_a_limit_that_drops_a_validation_class_names_limit(tmp_path, tok):
    """--limit left class 'a' out of the training rows; the error said the training file had none."""
    train, valid = tmp_path / "tr.csv", tmp_path / "va.csv"
    train.write_text("text,label\n" + "".join(f"t {i},{v}\n" for i, v in enumerate("abbbbbbbbbbbbbbbbbbc")))
    valid.write_text("text,label\nv,a\nw,b\nx,c\n")
    cfg = TrainConfig(train_file=str(train), valid_file=str(valid), text_cols=["text"], label="label",
                      task="multiclass", model=tok, limit=2, split_seed=0)
    with pytest.raises(DataError) as caught:
        load_task(cfg, LOG)
    message = str(caught.value)
    lost = re.match(r".*: class\(es\) ('\w') of column", message).group(1)  # a row of each of 2 classes is drawn
    rows = {"'a'": "1", "'b'": "2", "'c'": "3"}[lost]
    assert message == (
        f"{valid}: class(es) {lost} of column 'label' are not among the 2 rows that --limit 2 drew from the training "
        f"file (validation data rows {rows}); the model would have an output it never trains on. Raise --limit (the "
        f"training file has {lost}), or drop these rows")
    valid.write_text(f"text,label\nv,{lost[1]}\nw,z\n")
    with pytest.raises(DataError, match=rf"are not among the 2 rows that --limit 2 drew from the training file "
                                        rf"\(validation data rows 1, 2\).* Raise --limit \(the training file has "
                                        rf"{lost}; add training rows of 'z'\), or drop these rows"):
        load_task(cfg, LOG)
    valid.write_text("text,label\nw,z\n")  # only a class the training file lacks: as before
    with pytest.raises(DataError, match=r"class\(es\) 'z' of column 'label' are not in the training file \(validation "
                                        r"data rows 1\).* Add training rows of those classes, or drop these rows"):
        load_task(cfg, LOG)


def test_nan_and_inf_beside_numbers_are_read_as_the_readers_docstring_says(tmp_path):
    """The docstring said only an empty field is missing; ``nan``/``inf`` beside numbers are read as numbers."""
    path = tmp_path / "n.csv"
    path.write_text("a,b,c\n1,nan,x\nNaN,2,y\n-Infinity,INF,z\n,3,w\n")
    frame = read_table(path)
    assert frame["a"].tolist()[0] == 1.0 and pd.isna(frame["a"][1]) and frame["a"][2] == float("-inf")
    assert pd.isna(frame["a"][3]) and frame["b"].tolist()[1:] == [2.0, float("inf"), 3.0]
    only = tmp_path / "o.csv"
    only.write_text("a\nnan\ninf\n")
    assert read_table(only)["a"].tolist() == ["nan", "inf"]  # the words alone stay text


def test_a_group_limit_that_drops_a_validation_class_counts_the_rows_drawn(tmp_path, tok, caplog):
    """Whole groups can hold fewer rows than --limit: the error said "the 4 rows" of a 3-row draw."""
    train, valid = tmp_path / "tr.csv", tmp_path / "va.csv"
    train.write_text("text,g,other,label\n" + "".join(f"row {i},{'abcdefghijkl'[i // 2]},o{i},{'xyz'[i // 2 % 3]}\n"
                                                      for i in range(24)))  # groups of 2 rows
    valid.write_text("text,g,other,label\nv,q,o,x\nw,q,o,y\nu,q,o,z\n")
    cfg = TrainConfig(train_file=str(train), valid_file=str(valid), text_cols=["text"], label="label",
                      task="multilabel", model=tok, limit=5, group_context="other", group_context_by=["g"])
    with caplog.at_level(logging.WARNING, logger="test"), pytest.raises(DataError) as caught:
        load_task(cfg, LOG)
    assert "--limit 5 draws 4 row(s)" in caplog.text  # two groups of 2: a third would pass 5
    assert "are not among the 4 rows that --limit 5 drew from the training file" in str(caught.value)
