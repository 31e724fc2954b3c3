"""check_columns, build_texts and validate_labels: exact strings, exact encodings, errors naming rows and columns."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from attnpool.data import DataError, Labels, Texts, build_texts, check_columns, validate_labels
from attnpool.tasks import label_text


@pytest.fixture
def frame():
    return pd.DataFrame(
        {
            "anchor": ["abatement", "opc drum", "wood"],
            "target": ["act of abating", "inorganic drum", "timber"],
            "context": ["A47", "G02", "B27"],
        }
    )


# --- check_columns


def test_check_columns_passes_and_skips_none(frame):
    check_columns(frame, ["anchor", None, "target"], "train.csv")


def test_check_columns_lists_missing_and_present(frame):
    msg = (
        "train.csv: missing column(s) 'label', 'text'; the columns present are: anchor, target, context. "
        "Fix the column names"
    )
    with pytest.raises(DataError, match=re.escape(msg)):
        check_columns(frame, ["label", "anchor", "text", "label"], "train.csv")


# --- build_texts


def test_single_column(frame):
    assert build_texts(frame, "anchor") == Texts(["abatement", "opc drum", "wood"], None, 0)
    assert build_texts(frame, ["anchor"]).first == ["abatement", "opc drum", "wood"]


def test_two_columns_make_pairs(frame):
    first, second, empty = build_texts(frame, ["anchor", "target"])
    assert first == ["abatement", "opc drum", "wood"]
    assert second == ["act of abating", "inorganic drum", "timber"]
    assert empty == 0


def test_more_columns_are_joined_with_the_separator(frame):
    texts = build_texts(frame, ["anchor", "target", "context"])
    assert texts.first[0] == "abatement [SEP] act of abating [SEP] A47"
    assert texts.second is None
    assert build_texts(frame, ["anchor", "target", "context"], sep_token="</s>").first[1] == (
        "opc drum </s> inorganic drum </s> G02"
    )


def test_template(frame):
    texts = build_texts(frame, template="{anchor} [SEP] {target} [SEP] {context}")
    assert texts.first == [
        "abatement [SEP] act of abating [SEP] A47",
        "opc drum [SEP] inorganic drum [SEP] G02",
        "wood [SEP] timber [SEP] B27",
    ]
    assert texts.second is None and texts.num_empty == 0


def test_template_takes_the_tokenizers_separator_and_literal_braces(frame):
    texts = build_texts(frame, template="{{{context}}}: {anchor} [SEP] {target} ({anchor})", sep_token="</s>")
    assert texts.first[0] == "{A47}: abatement </s> act of abating (abatement)"


def test_template_unknown_placeholder_lists_columns(frame):
    msg = "unknown placeholder(s) {score}, {ctx}; placeholders must be column names: anchor, target, context"
    with pytest.raises(DataError, match=re.escape(msg)):
        build_texts(frame, template="{anchor} {score} {ctx}")


@pytest.mark.parametrize("template", ["{} [SEP] {anchor}", "{0}"])
def test_template_placeholder_needs_a_name(frame, template):
    with pytest.raises(DataError, match=re.escape("every placeholder must name a column, e.g. {anchor}; columns:")):
        build_texts(frame, template=template)


def test_template_with_unbalanced_brace(frame):
    with pytest.raises(DataError, match=re.escape("write a literal brace as {{ or }}")):
        build_texts(frame, template="{anchor")


def test_text_columns_or_template_not_both_nor_neither(frame):
    with pytest.raises(DataError, match="not both"):
        build_texts(frame, ["anchor"], template="{anchor}")
    with pytest.raises(DataError, match=re.escape("no text: give text_cols")):
        build_texts(frame)


def test_unknown_text_column(frame):
    with pytest.raises(DataError, match=re.escape("text columns: missing column(s) 'text'; the columns present are")):
        build_texts(frame, ["text"])


def test_missing_and_blank_text_becomes_empty_and_is_counted_per_row():
    df = pd.DataFrame({"a": ["x", None, "  ", "y", np.nan], "b": ["p", "q", "", np.nan, "s"], "n": [1, 2, 3, 4, 5]})
    assert build_texts(df, ["a", "b"]) == Texts(["x", "", "", "y", ""], ["p", "q", "", "", "s"], 4)
    assert build_texts(df, template="{a}-{b}") == Texts(["x-p", "-q", "-", "y-", "-s"], None, 4)
    assert build_texts(df, ["b"]).num_empty == 2
    assert build_texts(df, ["a", "n", "b"]).first[1] == " [SEP] 2 [SEP] q"  # numbers written with str


# --- validate_labels


def test_regression():
    labels = validate_labels(pd.DataFrame({"score": [0, 0.25, 1]}), "score", "regression")
    assert labels.values.dtype == np.float64
    assert labels.values.tolist() == [0.0, 0.25, 1.0]
    assert labels.classes is None and labels.num_classes == 0


def test_regression_accepts_numeric_strings():
    assert validate_labels(pd.DataFrame({"y": ["1.5", " 2"]}), "y", "regression").values.tolist() == [1.5, 2.0]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0, np.nan, 2.0, None], "column 'y' has 2 missing values in data rows 2, 4; regression labels"),
        (["1", "x", "2", "high"], "column 'y' has 2 non-numeric values in data rows 2, 4 ('x', 'high'); regression"),
        ([1.0, np.inf, -np.inf], "column 'y' has 2 infinite values in data rows 2, 3 (inf, -inf); regression labels"),
    ],
)
def test_regression_bad_values_name_rows_and_column(values, message):
    with pytest.raises(DataError, match=re.escape(message) + ".*must be finite numbers: fix or drop those rows"):
        validate_labels(pd.DataFrame({"y": values}), "y", "regression")


def test_regression_many_bad_rows_are_summarised():
    values = ["x"] * 12
    with pytest.raises(DataError, match=re.escape("in data rows 1, 2, 3, 4, 5, ... (12 rows)")):
        validate_labels(pd.DataFrame({"y": values}), "y", "regression")


def test_binary_with_strings():
    labels = validate_labels(pd.DataFrame({"y": ["yes", "no", "yes"]}), "y", "binary")
    assert labels.classes == ["no", "yes"]
    assert labels.values.dtype == np.int64 and labels.values.tolist() == [1, 0, 1]


def test_binary_needs_two_classes():
    with pytest.raises(DataError, match=re.escape("task 'binary' needs exactly 2 classes, found 3: 'a', 'b', 'c'; "
                                                  "use task='multiclass'")):
        validate_labels(pd.DataFrame({"y": ["a", "b", "c"]}), "y", "binary")
    with pytest.raises(DataError, match=re.escape("found 1: 'a'; a binary task needs both classes")):
        validate_labels(pd.DataFrame({"y": ["a", "a"]}), "y", "binary")


def test_multiclass_integral_floats_become_ints():
    labels = validate_labels(pd.DataFrame({"y": [2.0, 0.0, 1.0, 2.0]}), "y", "multiclass")
    assert isinstance(labels, Labels) and labels.classes == [0, 1, 2]
    assert all(type(c) is int for c in labels.classes)
    assert labels.values.tolist() == [2, 0, 1, 2]


def test_multiclass_mixed_types_compare_as_strings():
    labels = validate_labels(pd.DataFrame({"y": pd.Series([10, "b", 2], dtype=object)}), "y", "multiclass")
    assert labels.classes == ["10", "2", "b"]
    assert labels.values.tolist() == [0, 2, 1]
    # a JSONL column of 1.0, "other", 2.0: "1" and "2", as predict reads these labels back (label_text)
    labels = validate_labels(pd.DataFrame({"y": pd.Series([1.0, "other", 2.0, 2.5], dtype=object)}), "y", "multiclass")
    assert labels.classes == ["1", "2", "2.5", "other"]
    assert labels.classes == sorted({label_text(v) for v in [1.0, "other", 2.0, 2.5]})


def test_multiclass_needs_two_classes():
    with pytest.raises(DataError, match="task 'multiclass' needs at least 2 classes, found only 3"):
        validate_labels(pd.DataFrame({"y": [3, 3]}), "y", "multiclass")


def test_classification_missing_labels_name_rows():
    with pytest.raises(DataError, match=re.escape("column 'y' has missing labels in data rows 2; every row of a "
                                                  "multiclass task needs a class: fill them in or drop those rows")):
        validate_labels(pd.DataFrame({"y": ["a", None, "b"]}), "y", "multiclass")


def test_class_names_lose_their_surrounding_spaces_and_a_blank_label_is_missing():
    """"cat " was a class apart from "cat", and a cell of spaces a class of its own."""
    labels = validate_labels(pd.DataFrame({"y": ["cat", "cat ", " dog", "cat"]}), "y", "binary")
    assert labels.classes == ["cat", "dog"] and labels.values.tolist() == [0, 0, 1, 0]
    with pytest.raises(DataError, match="missing labels in data rows 4; every row of a multiclass task"):
        validate_labels(pd.DataFrame({"y": ["cat", "cat ", "dog", "  "]}), "y", "multiclass")


def test_multilabel_from_strings_and_lists():
    df = pd.DataFrame({"tags": ["b|a", "c", "", None, " a | c "]})
    labels = validate_labels(df, "tags", "multilabel")
    assert labels.classes == ["a", "b", "c"]
    assert labels.values.dtype == np.float32
    assert labels.values.tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [1, 0, 1]]
    lists = pd.DataFrame({"tags": [["x"], ["y", "x"], np.array(["y"])]})
    assert validate_labels(lists, "tags", "multilabel").values.tolist() == [[1, 0], [1, 1], [0, 1]]
    semi = validate_labels(pd.DataFrame({"tags": ["a;b"]}), "tags", "multilabel", delimiter=";")
    assert semi.classes == ["a", "b"]
    numbers = validate_labels(pd.DataFrame({"tags": [1.0, np.nan, 2.0]}), "tags", "multilabel")  # a blank cell
    assert numbers.classes == ["1", "2"]  # as the same column without the blank reads them, not "1.0"


def test_a_list_label_holding_the_delimiter_is_refused():
    """["a|b"] trained as one class "a|b", which predict's output ("a|b") reads back as two."""
    for delimiter in ("|", ";"):
        with pytest.raises(DataError, match=r"column 'tags' has class name\(s\) 'a\|b' holding a label delimiter"):
            validate_labels(pd.DataFrame({"tags": [["a|b"], ["c"]]}), "tags", "multilabel", delimiter=delimiter)


def test_multilabel_without_any_label():
    with pytest.raises(DataError, match="column 'tags' has no labels in any row"):
        validate_labels(pd.DataFrame({"tags": ["", None]}), "tags", "multilabel")


def test_unknown_task_and_column():
    df = pd.DataFrame({"y": [1, 2]})
    with pytest.raises(DataError, match="unknown task 'ordinal'; choose one of regression, binary, multiclass"):
        validate_labels(df, "y", "ordinal")
    with pytest.raises(DataError, match=re.escape("labels: missing column(s) 'score'; the columns present are: y")):
        validate_labels(df, "score", "regression")


def test_a_template_s_columns_are_read_as_text_in_training_and_in_every_chunk_of_a_prediction(tmp_path):
    """A numeric-looking column in a template: "4" must not become "4.0" in a chunk that also holds a blank."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.prediction import PredictionInputs
    from attnpool.data.readers import iter_table
    from attnpool.data.task import frame_and_template

    path = tmp_path / "reviews.csv"
    path.write_text("title,rating,label\ngood,4,1\nbad,,0\nfine,9.90,1\nmeh,5,0\n")
    cfg = TrainConfig(train_file=str(path), template="{title} ({rating})", label="label")
    frame, template = frame_and_template(cfg, str(path))
    assert build_texts(frame, template=template).first == ["good (4)", "bad ()", "fine (9.90)", "meh (5)"]
    inputs = PredictionInputs(cfg, {}, path, tokenizer=None, log=logging.getLogger("test"))
    assert "rating" in inputs.text_columns
    chunks = [build_texts(chunk, template=template).first for chunk in iter_table(path, 2,
                                                                           text_columns=inputs.text_columns)]
    assert chunks == [["good (4)", "bad ()"], ["fine (9.90)", "meh (5)"]]


def test_a_column_name_with_spaces_is_shown_with_them():
    """'text, label' as a header names the column ' label': the message must make the space visible."""
    frame = pd.DataFrame({"text": ["a"], " label": [1]})
    with pytest.raises(DataError, match=re.escape("train.csv: missing column(s) 'label'; the columns present are: "
                                                  "text, ' label' (' label' in the header: the spaces around a name "
                                                  "are part of it")):
        check_columns(frame, ["text", "label"], "train.csv")


def test_a_column_name_with_a_control_character_is_shown_quoted():
    """'text\tlabel' (a TSV header read as CSV) printed as "text	label", as if it were two columns."""
    frame = pd.DataFrame({"text\tlabel": ["a"]})
    with pytest.raises(DataError, match=re.escape(r"missing column(s) 'text'; the columns present are: 'text\tlabel'")):
        check_columns(frame, ["text"], "train.csv")


def test_template_placeholders_are_column_names_verbatim():
    """str.format read {review.title} as the attribute 'title' of a column 'review': a KeyError traceback."""
    df = pd.DataFrame({"review.title": ["x", "y"], "q[1]": ["m", "n"], "0": ["z", "w"]})
    texts = build_texts(df, template="{{{review.title}}} [SEP] {q[1]} {0}", sep_token="</s>")
    assert texts.first == ["{x} </s> m z", "{y} </s> n w"]
    from attnpool.data.columns import template_fields, text_fields

    assert template_fields("{review.title} {q[1]}") == text_fields(None, "{review.title} {q[1]}") == [
        "review.title", "q[1]"]


@pytest.mark.parametrize("placeholder", ["{price:.2f}", "{price!r}", "{price:>5}"])
def test_template_format_specs_and_conversions_are_refused(placeholder):
    """{price:.2f} failed with "Unknown format code 'f' for object of type 'str'" (template cells are text)."""
    from attnpool.data.columns import template_fields

    template = f"{{title}} costs {placeholder}"
    message = f"template {template!r}: placeholder {placeholder} has a format spec or conversion"
    df = pd.DataFrame({"title": ["a"], "price": ["1.5"]})
    for call in (lambda: build_texts(df, template=template), lambda: template_fields(template)):
        with pytest.raises(DataError, match=re.escape(message) + ".* write {price} and format the values"):
            call()


def test_multilabel_lists_written_as_text_are_lists():
    """df.to_csv writes a list column as "['a', 'b']": split at '|', it trained on the class "['a', 'b']"."""
    df = pd.DataFrame({"tags": ["['sports', 'news']", "['news']", ' ["tech"] ', "[]", "[1, 2.0]", "a|b"]})
    labels = validate_labels(df, "tags", "multilabel")
    assert labels.classes == ["1", "2", "a", "b", "news", "sports", "tech"]
    assert labels.values.sum(axis=1).tolist() == [2, 1, 1, 0, 2, 2]
    for cell in ("[draft]", "[['a'], 'b']", "[a, b]"):
        with pytest.raises(DataError, match=re.escape(f"column 'tags', data row 2: {cell!r} looks like a list written "
                                                      "as text but is not a list of labels; write a row's labels "
                                                      "separated by '|' (e.g. 'a|b'), or keep lists in a JSONL")):
            validate_labels(pd.DataFrame({"tags": ["a", cell]}), "tags", "multilabel")
