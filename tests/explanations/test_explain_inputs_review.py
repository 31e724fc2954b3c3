"""explain's inputs read as training reads them: a blank multi-label cell is the empty set, a DataFrame of texts is
refused; explain_file's --fold is a whole number and its --device is checked before the input is read."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
from explain_helpers import wordpiece_tokenizer

import attnpool.explanations.files as files
from attnpool import AttnPoolForSequenceClassification, explain
from attnpool.explanations import explain_file
from attnpool.explanations.page import render_html
from model_helpers import make_run, save_tiny_encoder, tiny_config, tiny_tokenizer, write_toy_csv

CLASSES = ["a", "b", "c"]


def _multilabel(encoder=None):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(
        encoder or tiny_config("bert"), pooling="attention", pooling_options={"attn_size": 8}, num_labels=3,
        problem_type="multi_label_classification", id2label=dict(enumerate(CLASSES)),
        label2id={c: i for i, c in enumerate(CLASSES)}).eval()


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    encoder = save_tiny_encoder(tmp_path_factory.mktemp("encoder"))
    run = make_run(tmp_path_factory.mktemp("runs") / "reg", encoder, folds=2)
    data = tmp_path_factory.mktemp("data") / "test.csv"
    write_toy_csv(data, n=3, seed=1)
    return run, data


def test_a_missing_multi_label_is_the_empty_set_of_classes_as_in_training():
    """A blank tags cell had no error (and dropped out of the error sort), while [] for the same row had one."""
    model, tokenizer = _multilabel(), wordpiece_tokenizer()
    texts = ["the cat", "a dog", "red mat", "big"]
    result = explain(model, tokenizer, texts, labels=["a", None, float("nan"), []], erasure_k=0)
    missing = result.examples[1:3]
    assert [x.label for x in missing] == [[], []]
    assert [x.error for x in missing] == [result.examples[3].error] * 2
    assert result.examples[3].error == pytest.approx(len(result.examples[3].prediction) / 3)
    assert all(x.error is not None for x in result.examples)
    unlabelled = explain(model, tokenizer, texts[:2], labels=[None, float("nan")], erasure_k=0)
    assert [(x.label, x.error) for x in unlabelled.examples] == [(None, None)] * 2  # no labels: no fake errors


def test_explain_file_reads_a_blank_multi_label_cell_as_the_empty_set(tmp_path):
    folder = tmp_path / "model"
    _multilabel(save_tiny_encoder(tmp_path / "encoder")).save_pretrained(folder, tokenizer=tiny_tokenizer())
    data = tmp_path / "ml.csv"
    pd.DataFrame({"id": ["r0", "r1", "r2"], "text": ["the cat", "a dog", "red mat"],
                  "label": ["a|b", None, "c"]}).to_csv(data, index=False)
    result = explain_file(folder, data, tmp_path / "r.html", text_cols="text", erasure_k=0)
    blank = result.examples[1]
    assert blank.label == [] and blank.error == pytest.approx(len(blank.prediction) / 3)
    marks = dict(re.findall(r'data-index="(\d+)" data-error="([^"]*)"', render_html(result)))
    assert marks["1"] != "", "the blank row takes part in the error sort"


@pytest.mark.parametrize(("texts", "pairs", "name"), [
    (pd.DataFrame({"text": ["the cat", "a dog"]}), None, "texts"),
    (pd.Series(["the cat", "a dog"]), pd.DataFrame({"second": ["red", "mat"]}), "text_pairs"),
])
def test_a_frame_of_texts_is_refused_not_explained_as_its_column_names(texts, pairs, name):
    """explain(model, tok, df[["text"]]) explained the one text "text", the column's name."""
    columns = "['text']" if name == "texts" else "['second']"
    with pytest.raises(ValueError, match=re.escape(
            f"explain: {name} is a DataFrame (columns {columns}), whose iteration gives its column names, not its "
            "rows; pass one column of it: texts=df['text'] (and text_pairs=df['text2'] for pairs)")):
        explain(_multilabel(), wordpiece_tokenizer(), texts, text_pairs=pairs, erasure_k=0)


@pytest.mark.parametrize(("fold", "shown"), [("1", "'1'"), (True, "True"), (1.0, "1.0; give 1"), (-1, None)])
@pytest.mark.parametrize("fold_folder", [False, True])
def test_explain_file_refuses_a_fold_that_is_no_whole_number(regression_run, tmp_path, fold, shown, fold_folder):
    """fold="1" was "--fold 1 disagrees with ..., the folder of fold 1", or a message about lists of folds; True
    was the fold 1."""
    run, data = regression_run
    source = run / "fold_1" if fold_folder else run
    want = (f"--fold must be a whole number >= 0 (the run's fold to explain with), got {shown}" if shown else
            "--fold must be >= 0 (the run's fold to explain with), got -1")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        explain_file(source, data, tmp_path / "r.html", fold=fold, erasure_k=0)


def test_a_missing_cuda_device_is_said_before_the_input_is_read(regression_run, tmp_path, monkeypatch):
    """--device cuda without CUDA failed only once the file was read and tokenised and the model loaded."""
    run, data = regression_run

    def reached(*args, **kwargs):
        raise AssertionError("the input was read before the device was checked")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(files, "_run_inputs", reached)
    monkeypatch.setattr(files, "_load_model", reached)
    with pytest.raises(ValueError, match=re.escape("--device cuda: no CUDA device here")):
        explain_file(run, data, tmp_path / "r.html", device="cuda", erasure_k=0)
