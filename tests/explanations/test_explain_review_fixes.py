"""explain's labels (the column --label names, a multi-output label of one text, a missing output), its number
options, the summary of a large --erasure-k and ``~`` in its paths."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from explain_helpers import tiny_model, wordpiece_tokenizer

from attnpool import AttnPoolForSequenceClassification, explain
from attnpool.cli import main
from attnpool.explanations import explain_file, page
from attnpool.explanations.page import render_html
from attnpool.explanations.svg import svg_curves
from model_helpers import make_run, save_tiny_encoder, tiny_config, write_toy_csv


@pytest.fixture(scope="module")
def binary_run(tmp_path_factory):
    encoder = save_tiny_encoder(tmp_path_factory.mktemp("encoder"))
    return make_run(tmp_path_factory.mktemp("runs") / "binary", encoder, task="binary", classes=["neg", "pos"],
                    folds=1)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The run's label column holds numbers the model never saw; ``gold`` holds its classes."""
    path = tmp_path_factory.mktemp("data") / "mixed.csv"
    frame = write_toy_csv(path, n=5, seed=1, task="classification")
    frame.assign(gold=frame["label"], label=[0, 0.25, 0, 0.5, 0]).to_csv(path, index=False)
    return path


def _regression(num_labels: int = 2):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="attention", pooling_options={"attn_size": 8}, num_labels=num_labels,
        problem_type="regression").eval()


def _multilabel():
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="attention", pooling_options={"attn_size": 8}, num_labels=3,
        problem_type="multi_label_classification", id2label={0: "a", 1: "b", 2: "c"},
        label2id={"a": 0, "b": 1, "c": 2}).eval()


@pytest.mark.parametrize("limit", [[], ["--limit", "3"]])
def test_explain_checks_the_label_column_it_reads_not_the_runs(binary_run, mixed, tmp_path, capsys, limit):
    """--label gold was refused for the run's own label column, with predict's advice to remove it."""
    out = tmp_path / "r.html"
    common = ["explain", "--run", str(binary_run), "--input", str(mixed), "--output", str(out), "--erasure-k", "1",
              *limit]
    assert main([*common, "--label", "gold"]) == 0
    shown = [x["label"] for x in json.loads(out.with_suffix(".json").read_text())["examples"]]
    assert shown == pd.read_csv(mixed)["gold"].tolist()[: len(shown)]
    capsys.readouterr()
    assert main(common) == 2  # without --label: the run's column, whose numbers are no class
    err = capsys.readouterr().err
    unseen = "0, 0.25 (data rows 1, 2, 3)" if limit else "0, 0.25, 0.5 (data rows 1, 2, 3, 4, 5)"
    assert f"{mixed}: column 'label' has labels the model never saw in training: {unseen}" in err
    assert "explain shows them as the true labels: give the column that holds them with --label" in err
    assert "predict does not need" not in err
    bad = tmp_path / "bad.csv"
    pd.read_csv(mixed).assign(gold=["neg", "maybe", "pos", "neg", "pos"]).to_csv(bad, index=False)
    assert main([*common[:4], str(bad), *common[5:], "--label", "gold"]) == 2
    assert "column 'gold' has labels the model never saw in training: maybe (data rows 2)" in capsys.readouterr().err


def test_a_missing_output_of_a_multi_output_label_leaves_the_others_error():
    """[0.3, NaN] gave the error NaN, and the page's median of the errors was NaN: no example was above it."""
    model, tokenizer = _regression(), wordpiece_tokenizer()
    texts = ["the cat", "a dog", "red mat", "big"]
    labels = [[5.0, 5.0], [0.3, float("nan")], [0.0, 0.0], [float("nan"), float("nan")]]
    result = explain(model, tokenizer, texts, labels=labels, erasure_k=1)
    first = result.examples[1]
    assert first.error == pytest.approx(abs(first.prediction[0] - 0.3))
    assert result.examples[3].error is None and result.examples[3].label is None
    wrong = dict(re.findall(r'data-index="(\d+)" data-error="[^"]*" data-entropy="[^"]*" data-gap="[^"]*" '
                            r'data-wrong="(\d?)"', render_html(result)))
    assert wrong == {"0": "1", "1": "0", "2": "0", "3": ""}  # 5.0 is the largest error of three


@pytest.mark.parametrize(("make", "label", "shown"), [
    (_regression, [0.1, 0.2], [0.1, 0.2]),
    (_multilabel, ["a", "c"], ["a", "c"]),
    (_multilabel, [1, 0, 1], [1, 0, 1]),
    (_multilabel, [["a", "c"]], ["a", "c"]),
])
def test_one_texts_label_of_several_outputs_may_be_given_as_a_list(make, label, shown):
    """They were refused: "1 texts but 2 labels; give one per text"."""
    example = explain(make(), wordpiece_tokenizer(), "the cat", labels=label, erasure_k=0).examples[0]
    assert example.label == shown and example.error is not None


def test_too_few_labels_of_several_outputs_say_a_label_is_a_list():
    with pytest.raises(ValueError, match=re.escape("explain: 3 texts but 2 labels; give one per text (a label of "
                                                   "several outputs is a list: labels=[[0.1, 0.2], ...]")):
        explain(_regression(), wordpiece_tokenizer(), ["the cat", "a dog", "big"], labels=[0.1, 0.2])


def test_the_summary_stops_at_the_largest_k_an_example_reaches():
    """--erasure-k 30 on texts of 1 to 3 words: the table and chart ran on to k = 30 with rows of 0 examples."""
    result = explain(tiny_model(), wordpiece_tokenizer(), ["the cat sat", "a dog", "big"], erasure_k=30)
    assert len(result.erasure.k) == 30 and len(result.to_dict()["erasure"]["k"]) == 30  # the JSON keeps every k
    card = page._summary_card(result)
    assert re.findall(r"<tr><td>(\d+)</td>", card) == ["1", "2", "3"]
    assert re.findall(r'text-anchor="middle">(\d+)</text>', card) == ["1", "2", "3"]


def test_the_k_labels_of_a_long_chart_are_thinned():
    k = list(range(1, 41))
    svg = svg_curves(k, {"top": [0.1] * 40, "random": [0.05] * 40, "bottom": [0.0] * 40})
    ticks = [int(v) for v in re.findall(r'text-anchor="middle">(\d+)</text>', svg)]
    assert ticks[0] == 1 and ticks[-1] == 40 and len(ticks) <= 13
    assert min(b - a for a, b in zip(ticks, ticks[1:], strict=False)) >= 4  # no two labels side by side


@pytest.mark.parametrize(("option", "value", "message"), [
    ("erasure_k", 2.0, "explain: erasure_k must be a whole number >= 0 (0 skips the erasure test), got 2.0; give 2"),
    ("erasure_k", "3", "explain: erasure_k must be a whole number >= 0 (0 skips the erasure test), got '3'"),
    ("batch_size", 8.0, "explain: batch_size must be a whole number >= 1 (rows per forward pass), got 8.0; give 8"),
    ("seed", 1.5, "explain: seed must be a whole number >= 0, got 1.5"),
    ("seed", True, "explain: seed must be a whole number >= 0, got True"),
    ("seed", -1, "explain: seed must be >= 0, got -1"),
])
def test_number_options_are_checked_before_the_model_runs(monkeypatch, option, value, message):
    from attnpool.explanations import core

    monkeypatch.setattr(core, "_run", lambda *a, **k: pytest.fail("the model ran before the options were checked"))
    with pytest.raises(ValueError, match=re.escape(message)):
        explain(tiny_model(), wordpiece_tokenizer(), "the cat", **{option: value})


def test_numpy_integers_are_taken_and_written_as_numbers(tmp_path):
    result = explain(tiny_model(), wordpiece_tokenizer(), "the cat", erasure_k=np.int64(1), seed=np.int32(2),
                     batch_size=np.int64(4))
    assert result.erasure_k == 1 and type(result.erasure_k) is int and type(result.seed) is int
    page.write_report(result, tmp_path / "r.html")
    assert json.loads((tmp_path / "r.json").read_text())["seed"] == 2


def test_explain_file_names_its_flags(binary_run, mixed, tmp_path):
    with pytest.raises(ValueError, match=re.escape("--limit must be >= 1 (rows explained), got 0")):
        explain_file(binary_run, mixed, tmp_path / "r.html", limit=0)
    with pytest.raises(ValueError, match=re.escape("--erasure-k must be a whole number >= 0 (0 skips the erasure "
                                                   "test), got 2.0; give 2")):
        explain_file(binary_run, mixed, tmp_path / "r.html", erasure_k=2.0)
    with pytest.raises(ValueError, match=re.escape("--limit must be a whole number >= 1 (rows explained), got 1.5")):
        explain_file(binary_run, mixed, tmp_path / "r.html", limit=1.5)
    assert list(tmp_path.iterdir()) == []


def test_a_tilde_in_explain_files_paths_is_the_home_folder(binary_run, mixed, tmp_path, monkeypatch):
    """'~/r.html' wrote ./~/r.html and ./~/r.json."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir(), here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    (home / "in.csv").write_bytes(mixed.read_bytes())
    explain_file(binary_run, "~/in.csv", "~/r.html", limit=2, erasure_k=1, label="gold")
    assert sorted(p.name for p in home.iterdir()) == ["in.csv", "r.html", "r.json"]
    explain_file(binary_run, "~/in.csv", "~/a.html", json_path="~/b.json", limit=2, erasure_k=1, label="gold")
    assert {"a.html", "b.json"} <= {p.name for p in home.iterdir()} and list(here.iterdir()) == []
