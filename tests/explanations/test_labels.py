"""The labels given to ``explain``: frames read by row, and a multi-label example's error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from explain_helpers import wordpiece_tokenizer

import attnpool
from attnpool import AttnPoolForSequenceClassification
from attnpool.explanations.labels import label_and_error, label_list
from attnpool.explanations.page import render_html
from model_helpers import tiny_config

TEXTS = ["the cat", "a dog", "red mat"]
FRAME = pd.DataFrame({"text": TEXTS, "y1": [0.1, 0.2, 0.3], "y2": [1.0, 2.0, 3.0]}, index=[7, 3, 5])


def test_a_frame_of_labels_gives_one_label_a_row_not_its_column_names():
    assert label_list(FRAME[["y1", "y2"]], TEXTS, False) == [[0.1, 1.0], [0.2, 2.0], [0.3, 3.0]]
    assert label_list(FRAME[["y1", "y2"]].iloc[:2], TEXTS[:2], False) == [[0.1, 1.0], [0.2, 2.0]]  # 2 rows, 2 columns
    assert label_list(FRAME[["y1"]], TEXTS, False) == [0.1, 0.2, 0.3], "one column: its cells"
    assert label_list(FRAME["y1"], TEXTS, False) == [0.1, 0.2, 0.3]
    assert label_list(FRAME[["y1", "y2"]].iloc[:1], ["the cat"], True) == [[0.1, 1.0]]


def test_multi_target_regression_takes_a_frame_as_it_takes_its_array():
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=2,
                                                           problem_type="regression").eval()
    tokenizer = wordpiece_tokenizer()
    framed = attnpool.explain(model, tokenizer, FRAME["text"], labels=FRAME[["y1", "y2"]], erasure_k=0)
    array = attnpool.explain(model, tokenizer, FRAME["text"], labels=FRAME[["y1", "y2"]].to_numpy(), erasure_k=0)
    assert [x.label for x in framed.examples] == [[0.1, 1.0], [0.2, 2.0], [0.3, 3.0]]
    assert [x.error for x in framed.examples] == [x.error for x in array.examples]


NAMES = ["a", "b", "c", "d"]
SCORES = np.array([0.9, 0.7, 0.2, 0.1])  # predicts {a, b}


@pytest.mark.parametrize(("label", "error"), [
    ("a|b", 0.0), ("b|a", 0.0), (["a", "b"], 0.0), (("b", "a"), 0.0), ("['a', 'b']", 0.0),
    (np.array([1, 1, 0, 0]), 0.0),  # multi-hot, one value per output
    ("a", 0.25), (["a", "b", "c"], 0.25), ([1, 0, 1, 0], 0.5), ("", 0.5), ([], 0.5), ("c|d", 1.0),
    ("a|b|zz", 0.2),  # a class the model lacks: wrong, and one class more to count
])
def test_a_multi_label_error_is_the_share_of_classes_predicted_wrongly(label, error):
    _, got = label_and_error(label, "multi_label_classification", SCORES, NAMES, None)
    assert got == pytest.approx(error)


def test_multi_hot_rows_of_numbered_classes_are_read_as_class_names():
    _, got = label_and_error([1, 1], "multi_label_classification", np.array([0.9, 0.9]), ["0", "1"], None)
    assert got == 0.5, "the class 1 alone, as training reads the list [1, 1]: class 0 is missed"


def test_multi_label_examples_can_be_filtered_and_sorted_by_error():
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="attention", num_labels=3, problem_type="multi_label_classification",
        id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2}).eval()
    tokenizer = wordpiece_tokenizer()
    predicted = [set(x.prediction) for x in attnpool.explain(model, tokenizer, TEXTS, erasure_k=0).examples]
    labels = ["|".join(sorted(predicted[0])), sorted({"a", "b", "c"} - predicted[1]), None]
    result = attnpool.explain(model, tokenizer, TEXTS, labels=labels, erasure_k=0)
    missing = len(predicted[2]) / 3  # None: the empty set of classes, as training reads a blank cell
    assert [x.error for x in result.examples] == [0.0, 1.0, pytest.approx(missing)]
    page = render_html(result)
    assert '<option value="wrong">misclassified</option>' in page and '<option value="error">' in page
    assert 'data-wrong="0"' in page and 'data-wrong="1"' in page
