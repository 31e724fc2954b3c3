"""What `predict` refuses or corrects instead of writing wrong predictions silently: non-finite scores, resumed parts
of another config or other input rows, a max_length over the encoder's positions, a blend of other targets, and a
score ensemble with a fold that has no metric.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from attnpool.prediction import ensemble_weights, predict
from attnpool.prediction.parts import PARTS_FORMAT
from attnpool.runs import Run, RunError
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False, threads=1)
engine = importlib.import_module("attnpool.prediction.engine")  # where the ensemble finds predict_encoded
prediction_inputs = importlib.import_module("attnpool.data.prediction")  # where the chunks are read


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


def _input(path, n=12):
    write_toy_csv(path.with_name("toy.csv"), n=n).drop(columns=["label"]).to_csv(path, index=False)
    return path


def _killed_at(monkeypatch, call: int):
    """Make the ``call``-th forward pass of the ensemble raise KeyboardInterrupt (a killed prediction)."""
    real, calls = engine.predict_encoded, {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "predict_encoded", dying)
    return lambda: monkeypatch.setattr(engine, "predict_encoded", real)


def test_non_finite_scores_are_refused_naming_the_input_rows(encoder, tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", encoder, task="binary", classes=["neg", "pos"], folds=1)
    data, out = _input(tmp_path / "in.csv", n=9), tmp_path / "out.csv"
    real, calls = engine.predict_encoded, {"n": 0}

    def overflowing(*args, **kwargs):  # the second chunk's second row overflows, as fp16 does on large activations
        calls["n"] += 1
        logits = real(*args, **kwargs)
        if calls["n"] == 2:
            logits[0][1] = np.nan
        return logits

    monkeypatch.setattr(engine, "predict_encoded", overflowing)
    with pytest.raises(RunError, match=r"data rows 5 of the input are not finite.*--precision fp32"):
        predict(run, data, out, chunk_rows=3)
    assert not out.exists()
    assert not out.with_name(out.name + ".parts").exists()  # no part of the bad chunk, nor the call's earlier ones


def test_resume_refuses_parts_of_an_edited_config(encoder, tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", encoder)
    data, out = _input(tmp_path / "in.csv"), tmp_path / "out.csv"
    restore = _killed_at(monkeypatch, 3)  # 2 folds: chunk 0 done, killed in chunk 1
    with pytest.raises(KeyboardInterrupt):
        predict(run, data, out, chunk_rows=4)
    restore()
    config = Run(run).config_file
    saved = config.read_text()
    config.write_text(yaml.safe_dump({**yaml.safe_load(saved), "max_length": 6}, sort_keys=False))
    with pytest.raises(RunError, match=r"config\.yaml .*changed"):
        predict(run, data, out, chunk_rows=4, resume=True)
    config.write_text(saved)
    folder = Run(run).fold_dir(1)
    metrics = next(p for p in folder.iterdir() if p.suffix == ".json" and "metrics" in p.name)
    metrics.write_text(json.dumps({"pearson": 0.123}))
    with pytest.raises(RunError, match=r"validation metrics .* fold\(s\) 1 of"):
        predict(run, data, out, chunk_rows=4, ensemble="mean", resume=True)


def test_resume_refuses_chunks_its_reader_now_reads_otherwise(encoder, tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", encoder, text_cols=["text"], folds=1)
    data, out = tmp_path / "in.csv", tmp_path / "out.csv"
    data.write_text("text\nthe cat\na dog ran\n\nred house\nbig tree\nfast dog\nsmall mat\n")
    real_reader = prediction_inputs.iter_table

    def skipping_blank_lines(path, chunk_rows, **kwargs):  # another version's reader: blank lines are no rows
        rows = pd.concat(list(real_reader(path, chunk_rows, **kwargs)), ignore_index=True)
        rows = rows[rows["text"].fillna("").astype(str).str.strip() != ""].reset_index(drop=True)
        for start in range(0, len(rows), chunk_rows):
            yield rows.iloc[start:start + chunk_rows]

    monkeypatch.setattr(prediction_inputs, "iter_table", skipping_blank_lines)
    restore = _killed_at(monkeypatch, 2)  # chunk 0 done, killed in chunk 1
    with pytest.raises(KeyboardInterrupt):
        predict(run, data, out, chunk_rows=3)
    restore()
    manifest = json.loads((out.with_name(out.name + ".parts") / "manifest.json").read_text())
    assert manifest["format"] == PARTS_FORMAT >= 2 and manifest["attnpool_version"]
    monkeypatch.setattr(prediction_inputs, "iter_table", real_reader)  # resumed after an upgrade
    with pytest.raises(RunError, match=r"chunk 0 of the unchanged input .* without --resume"):
        predict(run, data, out, chunk_rows=3, resume=True)
    assert not out.exists()
    predict(run, data, tmp_path / "fresh.csv", chunk_rows=3)
    assert len(pd.read_csv(tmp_path / "fresh.csv", skip_blank_lines=False)) == 7


def test_resume_keeps_the_parts_of_the_same_rows(encoder, tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", encoder, folds=1)
    data, out = _input(tmp_path / "in.csv", n=7), tmp_path / "out.csv"
    restore = _killed_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        predict(run, data, out, chunk_rows=3)
    restore()
    summary = predict(run, data, out, chunk_rows=3, resume=True)
    assert summary.resumed_chunks == 1 and summary.rows == 7
    fresh = predict(run, data, tmp_path / "fresh.csv", chunk_rows=3)
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(fresh.output))


def test_max_length_over_the_encoders_positions_is_capped(encoder, tmp_path, caplog):
    run = make_run(tmp_path / "run", encoder, folds=1)
    config = Run(run).config_file
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "max_length": 200}, sort_keys=False))
    frame = write_toy_csv(tmp_path / "toy.csv", n=6).drop(columns=["label"])
    frame.loc[4, "first"] = " ".join(["cat"] * 80)  # over the tiny encoder's 64 positions
    frame.to_csv(tmp_path / "in.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        summary = predict(run, tmp_path / "in.csv", tmp_path / "out.csv", chunk_rows=3)
    assert summary.rows == 6 and pd.read_csv(summary.output)["prediction"].notna().all()
    assert "over the 64 tokens its encoder reads" in caplog.text
    capped = make_run(tmp_path / "capped", encoder, folds=1)  # the same model, read at 64 tokens
    config = Run(capped).config_file
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "max_length": 64}, sort_keys=False))
    same = predict(capped, tmp_path / "in.csv", tmp_path / "capped.csv", chunk_rows=3)
    pd.testing.assert_frame_equal(pd.read_csv(summary.output), pd.read_csv(same.output))


def test_a_blend_refuses_runs_of_other_label_columns(encoder, tmp_path):
    a = add_oof(make_run(tmp_path / "a", encoder, seed=0), seed=1)
    b = add_oof(make_run(tmp_path / "b", encoder, seed=10), center=300.0, scale=80.0, seed=2)
    Run(b).write_info({**Run(b).info(), "label": "price"})  # b was trained on another column
    data = _input(tmp_path / "in.csv", n=4)
    with pytest.raises(RunError, match=r"\(label 'label'\) with .* \(label 'price'\): blend runs of one target"):
        predict([a, b], data, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_a_score_ensemble_refuses_folds_without_a_metric_and_logs_its_weights(encoder, tmp_path, caplog):
    run = make_run(tmp_path / "run", encoder, folds=3)
    folder = Run(run).fold_dir(2)
    next(p for p in folder.iterdir() if p.suffix == ".json" and "metrics" in p.name).unlink()  # killed before it
    data = _input(tmp_path / "in.csv", n=5)
    with pytest.raises(RunError, match=r"fold\(s\) 2 of .* no pearson .*--folds.*--ensemble mean"):
        predict(run, data, tmp_path / "score.csv", ensemble="score")
    with caplog.at_level(logging.INFO, logger="attnpool.predict"):
        predict(run, data, tmp_path / "score.csv", ensemble="score", folds=[0, 1])
    assert re.search(r"--ensemble score: fold weights of .*: fold 0 \d\.\d{3}, fold 1 \d\.\d{3}", caplog.text)
    with pytest.raises(RunError, match="fold"):
        ensemble_weights([{"pearson": 0.5}, {}], "pearson", "score")
    caplog.clear()  # a fold that finished its validation with no score (NaN, saved as null): weight 0, said
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        weights = ensemble_weights([{"pearson": 0.5}, {"pearson": None}, {"pearson": float("nan")}], "pearson",
                                   "score", [0, 1, 2], "RUN")
    assert weights.tolist() == [1.0, 0.0, 0.0]
    assert "fold(s) 1, 2 of RUN scored no pearson on validation" in caplog.text
    assert ensemble_weights([{"pearson": 0.5}, {}], "pearson", "mean").tolist() == [0.5, 0.5]
