"""`attnpool explain` end to end: a tiny trained run (2 folds), then its report; and a saved model folder."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml

from attnpool.cli import main
from attnpool.data import DataError
from attnpool.explanations import explain_file
from attnpool.serving.service import Service
from model_helpers import make_run, save_tiny_encoder, write_toy_csv

FAST = ["--epochs", "1", "--batch-size", "8", "--eval-batch-size", "16", "--max-length", "16",
        "--pooling-opt", "attn_size=8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    write_toy_csv(folder / "test.csv", n=9, seed=1)  # with labels
    return folder


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    encoder = save_tiny_encoder(tmp_path_factory.mktemp("encoder"))
    out = tmp_path_factory.mktemp("runs") / "run"
    code = main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST])
    assert code == 0
    return out


def _weights_sum_to_one(example):
    np.testing.assert_allclose(np.asarray(example["token_weights"]).sum(axis=1), 1.0, atol=1e-5)


def test_explain_a_run(run, data, tmp_path, capsys):
    out = tmp_path / "report.html"
    code = main(["explain", "--run", str(run), "--input", str(data / "test.csv"), "--output", str(out),
                 "--limit", "5", "--erasure-k", "3"])
    assert code == 0
    captured = capsys.readouterr()
    said = captured.out
    assert "erasure AOPC of 5 examples: most-weighted " in said and "–" not in said  # the dash's legend: none
    # what it wrote: the API's logged line alone (the command printed it a second time)
    assert (captured.out + captured.err).count("wrote") == 1 and f"wrote {out} and {out.with_suffix('.json')}" in \
        captured.err
    assert main(["explain", "--run", str(run), "--input", str(data / "test.csv"), "--output", str(tmp_path / "0.html"),
                 "--limit", "2", "--erasure-k", "0"]) == 0
    assert "most-weighted –, random –, least-weighted – (–: no erasure test ran for it)" in capsys.readouterr().out
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    test = pd.read_csv(data / "test.csv", dtype={"id": str})
    examples = report["examples"]
    assert len(examples) == 5 and report["source"].endswith("fold_0/model")
    assert [x["id"] for x in examples] == list(test["id"][:5])
    assert [x["text"] for x in examples] == list(test["first"][:5])
    assert [x["text_pair"] for x in examples] == list(test["second"][:5])
    np.testing.assert_allclose([x["label"] for x in examples], test["label"][:5])
    for x in examples:
        _weights_sum_to_one(x)
        assert x["error"] == pytest.approx(abs(x["prediction"] - x["label"]))
        assert [w["segment"] for w in x["words"] if w["kind"] == "word"][-1] == 1, "the pair's words are kept"
    assert report["erasure"]["k"] == [1, 2, 3] and report["max_length"] == 16
    page = out.read_text(encoding="utf-8")
    assert page.count('<article class="ex"') == 5 and not list(tmp_path.glob(".*tmp"))


def test_explain_a_saved_model_folder_with_text_columns(run, data, tmp_path):
    out, json_out = tmp_path / "model.html", tmp_path / "numbers.json"
    code = main(["explain", "--run", str(run / "fold_1" / "model"), "--input", str(data / "test.csv"), "--output",
                 str(out), "--json", str(json_out), "--text-cols", "first", "second", "--erasure-k", "2"])
    assert code == 0 and out.is_file()
    report = json.loads(json_out.read_text(encoding="utf-8"))
    assert len(report["examples"]) == 9 and report["examples"][0]["label"] is not None
    assert report["examples"][0]["text_pair"] is not None
    for x in report["examples"]:
        _weights_sum_to_one(x)


def test_a_fold_can_be_chosen(run, data, tmp_path):
    out = tmp_path / "fold1.html"
    assert main(["explain", "--run", str(run), "--input", str(data / "test.csv"), "--output", str(out),
                 "--fold", "1", "--limit", "2", "--erasure-k", "1"]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["source"].endswith("fold_1/model")


def test_limit_reads_and_tokenises_only_the_first_rows(run, data, tmp_path, monkeypatch):
    import attnpool.data.prediction as inputs

    big = pd.concat([pd.read_csv(data / "test.csv", dtype={"id": str})] * 40, ignore_index=True)  # 360 rows
    big.to_csv(tmp_path / "big.csv", index=False)
    encoded = []
    real_encode = inputs.encode_texts
    monkeypatch.setattr(inputs, "encode_texts", lambda tok, frame, cfg, **kw: (
        encoded.append(len(frame)), real_encode(tok, frame, cfg, **kw))[1])
    assert main(["explain", "--run", str(run), "--input", str(tmp_path / "big.csv"), "--output",
                 str(tmp_path / "r.html"), "--limit", "3", "--erasure-k", "1"]) == 0
    assert sum(encoded) == 3


@pytest.mark.parametrize(("args", "message"), [
    (["--text-cols", "first"], "--text-cols is for a model folder"),
    (["--fold", "7"], "has no trained fold 7"),
    (["--limit", "0"], "limit must be >= 1"),
])
def test_run_errors_are_one_clear_line(run, data, tmp_path, capsys, args, message):
    code = main(["explain", "--run", str(run), "--input", str(data / "test.csv"), "--output",
                 str(tmp_path / "r.html"), *args])
    assert code == 2 and message in capsys.readouterr().err


def test_label_errors_come_before_the_model_runs(run, data, tmp_path, capsys, monkeypatch):
    from attnpool.explanations import files

    def never(*args, **kwargs):
        raise AssertionError("the model ran before the labels were checked")

    monkeypatch.setattr(files, "explain", never)
    common = ["explain", "--run", str(run), "--input", str(data / "test.csv"), "--output", str(tmp_path / "r.html")]
    assert main([*common, "--label", "lable"]) == 2  # a typo of an explicit --label: not silently no labels
    assert "lable" in capsys.readouterr().err
    bad = pd.read_csv(data / "test.csv")
    bad["label"] = bad["label"].astype(object)
    bad.loc[4, "label"] = "?"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    assert main([*common[:4], str(tmp_path / "bad.csv"), *common[5:]]) == 2
    assert "column 'label', data row 5: '?' is not a number" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_output_path_errors_come_before_the_model_runs(run, data, tmp_path, capsys, monkeypatch):
    """--output r.json (the JSON's default name too) and a folder failed after every forward pass."""
    from attnpool.explanations import files

    def never(*args, **kwargs):
        raise AssertionError("the model ran before the output paths were checked")

    monkeypatch.setattr(files, "explain", never)
    common = ["explain", "--run", str(run), "--input", str(data / "test.csv")]
    assert main([*common, "--output", str(tmp_path / "r.json")]) == 2
    assert "would both be written to" in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    assert main([*common, "--output", str(tmp_path / "out")]) == 2
    assert f"--output {tmp_path / 'out'} is a folder; give a file name, e.g. {tmp_path / 'out' / 'report.html'}" \
        in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    assert main([*common, "--output", str(tmp_path / "notes.txt" / "r.html")]) == 2  # was: [Errno 17], JSON written
    assert f"--output {tmp_path / 'notes.txt' / 'r.html'}: {tmp_path / 'notes.txt'} is a file, not a folder" \
        in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "out"]


def test_a_report_that_would_replace_the_input_file_is_refused(run, data, tmp_path, capsys, monkeypatch):
    """--output or --json equal to --input wrote the report over the data file, and exited 0."""
    from attnpool.explanations import files

    monkeypatch.setattr(files, "explain", lambda *a, **k: pytest.fail("the model ran before the paths were checked"))
    source = tmp_path / "rows.csv"
    source.write_bytes((data / "test.csv").read_bytes())
    os.link(source, tmp_path / "linked.csv")
    (tmp_path / "sub").mkdir()
    common = ["explain", "--run", str(run), "--input", str(source)]
    for output in (source, tmp_path / "sub" / ".." / "rows.csv", tmp_path / "linked.csv"):
        assert main([*common, "--output", str(output)]) == 2
        assert (f"--output {output}: is the input file ({source}), which the HTML report would replace; write the "
                "HTML report to another file") in capsys.readouterr().err
        assert main([*common, "--output", str(tmp_path / "r.html"), "--json", str(output)]) == 2
        assert (f"--json {output}: is the input file ({source}), which the JSON report would replace; write the "
                "JSON report to another file") in capsys.readouterr().err
    with pytest.raises(DataError, match=r"--json .*rows\.csv: is the input file"):
        explain_file(run, source, tmp_path / "r.html", json_path=source)
    assert source.read_bytes() == (data / "test.csv").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked.csv", "rows.csv", "sub"]


def test_a_report_inside_the_run_folder_is_refused(run, data, capsys, monkeypatch):
    """--output RUN/oof.csv wrote the report over the run's out-of-fold file (predict refuses it too)."""
    from attnpool.explanations import files

    monkeypatch.setattr(files, "explain", lambda *a, **k: pytest.fail("the model ran before the paths were checked"))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    common = ["explain", "--run", str(run), "--input", str(data / "test.csv")]
    assert main([*common, "--output", str(run / "oof.csv")]) == 2
    assert f"--output {run / 'oof.csv'}: is inside the run folder {run}, whose own files the HTML report would" \
        in capsys.readouterr().err
    assert main([*common, "--output", str(run.parent / "r.html"), "--json", str(run / "fold_0" / "r.json")]) == 2
    assert f"--json {run / 'fold_0' / 'r.json'}: is inside the run folder {run}" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_max_length_is_checked_against_the_encoders_positions(run, tmp_path, capsys, caplog):
    """The tiny BERT reads 64 positions: a model folder's default 128 and --max-length 100 crashed in torch."""
    long = " ".join(["the big red dog sat on the mat"] * 12)  # 96 words
    pd.DataFrame({"id": ["a"], "first": [long], "second": ["a cat"], "label": [0.5]}).to_csv(tmp_path / "rows.csv",
                                                                                          index=False)
    folder = run / "fold_0" / "model"
    common = ["--input", str(tmp_path / "rows.csv"), "--output", str(tmp_path / "r.html"), "--erasure-k", "1"]
    assert main(["explain", "--run", str(folder), "--text-cols", "first", "second", *common]) == 0
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["max_length"] == 64 and len(report["examples"][0]["tokens"]) == 64
    for source, extra in ((folder, ["--text-cols", "first", "second"]), (run, [])):
        assert main(["explain", "--run", str(source), *extra, *common, "--max-length", "100"]) == 2
        assert (f"--max-length 100 is over what the encoder of {folder} reads: 64 tokens (its position embeddings); "
                "give --max-length 64 or less") in capsys.readouterr().err
    long_run = tmp_path / "long_run"
    make_run(long_run, save_tiny_encoder(tmp_path / "encoder"), folds=1)
    config = yaml.safe_load((long_run / "config.yaml").read_text())
    (long_run / "config.yaml").write_text(yaml.safe_dump({**config, "max_length": 100}, sort_keys=False))
    explanation = explain_file(long_run, tmp_path / "rows.csv", tmp_path / "long.html", erasure_k=1, device="cpu")
    assert explanation.max_length == 64 and len(explanation.examples[0].tokens) == 64
    assert "max_length 100 (its config.yaml), over the 64 tokens its encoder reads" in caplog.text


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_max_length_below_one_is_refused(run, data, tmp_path, capsys, value):
    """--max-length 0 was read as "not given": the run's 16 or the folder's 128 were used without a word."""
    common = ["--input", str(data / "test.csv"), "--output", str(tmp_path / "r.html"), "--max-length", value]
    for source, extra in ((run, []), (run / "fold_0" / "model", ["--text-cols", "first", "second"])):
        assert main(["explain", "--run", str(source), *extra, *common]) == 2
        assert f"--max-length must be an integer >= 1 (tokens per row), got {value}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_max_length_within_the_special_tokens_is_one_line_not_a_traceback(run, tmp_path, capsys):
    """--max-length 1 was ignored by the tokenizer: a long row then failed in torch with a RuntimeError."""
    long = " ".join(["the big red dog sat on the mat"] * 12)  # 96 words
    pd.DataFrame({"id": ["a"], "first": [long], "second": ["a cat"], "label": [0.5]}).to_csv(tmp_path / "rows.csv",
                                                                                          index=False)
    common = ["--input", str(tmp_path / "rows.csv"), "--output", str(tmp_path / "out" / "r.html"), "--erasure-k", "1"]
    for value, cols in (("1", ["first"]), ("3", ["first", "second"])):
        folder = ["--run", str(run / "fold_0" / "model"), "--text-cols", *cols]
        assert main(["explain", *folder, *common, "--max-length", value]) == 2
        err = capsys.readouterr().err
        assert f"max_length {value} (--max-length) leaves no room for text: the tokenizer" in err
        assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_fold_of_a_model_folder_is_refused(run, data, tmp_path, capsys, monkeypatch):
    """--fold was silently ignored with a model folder: the report explained "fold 1" with the folder's one model."""
    from attnpool.explanations import files

    monkeypatch.setattr(files, "_load_model", lambda folder: pytest.fail("the model loaded before --fold was checked"))
    folder = run / "fold_0" / "model"
    assert main(["explain", "--run", str(folder), "--input", str(data / "test.csv"), "--output",
                 str(tmp_path / "r.html"), "--text-cols", "first", "second", "--fold", "1"]) == 2
    assert f"--fold 1 picks a fold of a train run directory; {folder} is one model folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_source_errors_are_one_clear_line(run, data, tmp_path, capsys):
    common = ["--input", str(data / "test.csv"), "--output", str(tmp_path / "r.html")]
    assert main(["explain", "--run", str(run / "fold_0" / "model"), *common]) == 2
    assert "is a model folder: say which columns hold the text with --text-cols" in capsys.readouterr().err
    assert main(["explain", "--run", str(tmp_path), *common]) == 2
    assert "neither a train run directory" in capsys.readouterr().err
    assert main(["explain", "--run", str(run / "fold_0" / "model"), *common, "--text-cols", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_a_one_column_group_context_run_is_explained_and_served_as_it_predicts(tmp_path):
    """Its rows are pairs (text, context) that lose their context first: explain and serve re-tokenise them so."""
    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), text_cols=["text"],
                   group_context="text", group_context_by=["q"])  # max_length 16
    rows = pd.DataFrame({"id": ["a", "b", "c", "d"], "q": ["g"] * 4,
                         "text": ["the cat sat on the mat", "a big red dog ran fast on the mat", "the small tree",
                                  " ".join(["the big house"] * 5)]})  # 15 words: 18 tokens with the pair's specials
    rows.to_csv(tmp_path / "rows.csv", index=False)
    explanation = explain_file(run, tmp_path / "rows.csv", tmp_path / "report.html", erasure_k=1, device="cpu")
    for x, text in zip(explanation.examples, rows.text, strict=True):
        own = [w.text for w in x.words if w.kind == "word" and w.segment == 0]
        assert own == text.split()[:13] and x.truncated and len(x.tokens) == 16  # the row's own text first
    assert [w.segment for w in explanation.examples[3].words if w.kind == "word"] == [0] * 13  # no context left
    service = Service.load(run, device="cpu", precision="fp32")
    job = service.encode(rows[service.fields].to_dict("records"), texts=True)
    served = service.run([job], batch_size=8)[0].words
    assert [[w["text"] for w in row] for row in served] == [[w.text for w in x.words] for x in explanation.examples]


@pytest.mark.parametrize(("args", "message"), [
    (["--erasure-k", "-1"], "--erasure-k must be >= 0 (0 skips the erasure test), got -1"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--seed", "-2"], "--seed must be >= 0, got -2"),
])
def test_bad_numbers_are_refused_by_their_flags_before_the_model_loads(run, data, tmp_path, capsys, monkeypatch,
                                                                       args, message):
    """They were checked only after the model loaded and the whole input was tokenised, named as Python arguments."""
    from attnpool.explanations import files

    monkeypatch.setattr(files, "_load_model", lambda folder: pytest.fail("the model loaded before the options"))
    monkeypatch.setattr(files, "read_table", lambda *a, **k: pytest.fail("the input was read before the options"))
    monkeypatch.setattr(files, "_run_inputs", lambda *a, **k: pytest.fail("the input was read before the options"))
    common = ["--input", str(data / "test.csv"), "--output", str(tmp_path / "r.html"), *args]
    for source, extra in ((run, []), (run / "fold_0" / "model", ["--text-cols", "first", "second"])):
        assert main(["explain", "--run", str(source), *extra, *common]) == 2
        err = capsys.readouterr().err
        assert message in err and "erasure_k" not in err and "batch_size" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_fold_folder_of_a_run_is_explained_as_that_fold(run, data, tmp_path, capsys):
    """``--run RUN/fold_1`` (which ``attnpool export`` takes) was refused as neither a run nor a model folder."""
    out = tmp_path / "fold1.html"
    assert main(["explain", "--run", str(run / "fold_1"), "--input", str(data / "test.csv"), "--output", str(out),
                 "--limit", "2", "--erasure-k", "1"]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["source"].endswith("fold_1/model") and len(report["examples"]) == 2
    assert main(["explain", "--run", str(run / "fold_1"), "--input", str(data / "test.csv"), "--output",
                 str(tmp_path / "r.html"), "--fold", "0"]) == 2
    assert "--fold 0 disagrees with" in capsys.readouterr().err and not (tmp_path / "r.html").exists()
