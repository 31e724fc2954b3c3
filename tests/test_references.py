"""The reference recipes of benchmarks/references.py on a tiny random BERT and the toy data."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import numpy as np
import pytest

from attnpool.config import TrainConfig
from attnpool.data.task import load_task
from model_helpers import save_tiny_encoder, write_toy_csv
from references import cross_encoder_scores, notebook_scores, pair_texts

ROWS = 32


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("enc"))


def _task(tmp_path, encoder, task="regression"):
    csv = tmp_path / f"{task}.csv"
    frame = write_toy_csv(csv, n=ROWS, task="regression" if task == "regression" else "binary")
    if task == "multiclass":  # three classes from the toy words
        frame["label"] = ["x" if "cat" in f else ("y" if "dog" in s else "z")
                          for f, s in zip(frame["first"], frame["second"], strict=True)]
        frame.to_csv(csv, index=False)
    cfg = TrainConfig(train_file=str(csv), text_cols=["first", "second"], model=encoder, task=task, epochs=1,
                      batch_size=8, eval_batch_size=8, max_length=16)
    return cfg, load_task(cfg, logging.getLogger("t"))


SPLIT = (np.arange(0, 24), np.array([31, 24, 30, 25, 29, 26, 28, 27]))  # validation rows out of order


def test_notebook_regression_shape_range_and_seed(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    train, valid = SPLIT
    a = notebook_scores(cfg, data, train, valid, seed=3)
    assert a.shape == (len(valid),)
    assert np.all((a > 0) & (a < 1))  # sigmoid outputs
    np.testing.assert_array_equal(a, notebook_scores(cfg, data, train, valid, seed=3))
    assert not np.array_equal(a, notebook_scores(cfg, data, train, valid, seed=4))


def test_notebook_row_order_follows_valid_idx(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    train, valid = SPLIT
    a = notebook_scores(cfg, data, train, valid, seed=0)
    b = notebook_scores(cfg, data, train, valid[::-1], seed=0)  # same training, validation rows reversed
    np.testing.assert_allclose(b, a[::-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("task, classes", [("binary", 2), ("multiclass", 3)])
def test_notebook_classification_probabilities(tmp_path, encoder, task, classes):
    cfg, data = _task(tmp_path, encoder, task)
    assert len(data.classes) == classes
    train, valid = SPLIT
    p = notebook_scores(cfg, data, train, valid, seed=0)
    assert p.shape == (len(valid), classes)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)


def test_notebook_fractional_epochs_evaluates_each_epoch(tmp_path, encoder, caplog):
    cfg, data = _task(tmp_path, encoder)
    cfg.epochs = 1.5  # 3 steps per epoch -> 5 steps: one full epoch and a partial one, each evaluated
    train, valid = SPLIT
    with caplog.at_level(logging.INFO, logger="references"):
        notebook_scores(cfg, data, train, valid, seed=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "references"]
    assert len(lines) == 2
    assert "epoch 1/2 (3 steps)" in lines[0] and "epoch 2/2 (5 steps)" in lines[1]


def test_pair_texts_two_columns(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    first, second = pair_texts(cfg, data)
    assert first == data.frame["first"].tolist()
    assert second == data.frame["second"].tolist()


def test_pair_texts_pppm(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    data.frame = data.frame.assign(anchor=["a b"] * ROWS, target=["t"] * ROWS, context_text=["ctx x"] * ROWS)
    cfg.preset, cfg.text_cols = "pppm", []
    first, second = pair_texts(cfg, data)
    assert first[0] == "a b" and second[0] == "t [SEP] ctx x"


def test_pair_texts_refuses_other_constructions(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    cfg.text_cols = ["first"]
    with pytest.raises(ValueError, match="two text_cols"):
        pair_texts(cfg, data)


def test_cross_encoder_regression_shape_and_seed(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    train, valid = SPLIT
    a = cross_encoder_scores(cfg, data, train, valid, seed=1)
    assert a.shape == (len(valid),)
    assert np.all((a > 0) & (a < 1))
    np.testing.assert_array_equal(a, cross_encoder_scores(cfg, data, train, valid, seed=1))


def test_cross_encoder_refuses_classification(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder, "binary")
    with pytest.raises(ValueError, match="regression"):
        cross_encoder_scores(cfg, data, *SPLIT, seed=0)


def test_targets_outside_unit_interval_refused(tmp_path, encoder):
    cfg, data = _task(tmp_path, encoder)
    data.labels = data.labels * 5
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        notebook_scores(cfg, data, *SPLIT, seed=0)
