"""What ``predict`` checks before any model loads, and how it reads ``~`` and weighs a score ensemble of no score.

A ``--batch-size`` of 0 was refused only in the batching, after every fold model loaded (with ``--backend onnx``,
after the graphs were exported into the run), naming ``batch_size``; ``~/out.csv`` was a folder named ``~`` in the
working directory; ``--ensemble score`` over folds none of which scored above 0 fell back to equal weights silently.
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import pandas as pd
import pytest

from attnpool.prediction import ensemble_weights, predict
from attnpool.prediction.engine import FoldEnsemble
from model_helpers import make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False, threads=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("upfront")
    return make_run(root / "run", save_tiny_encoder(root / "encoder"))


@pytest.mark.parametrize(("batch_size", "said"), [
    (0, "must be >= 1 (rows per forward pass, e.g. 128), got 0"),
    (-5, "must be >= 1 (rows per forward pass, e.g. 128), got -5"),
    (True, "must be a whole number >= 1 (rows per forward pass, e.g. 128), got True"),
    (2.0, "must be a whole number >= 1 (rows per forward pass, e.g. 128), got 2.0; give 2"),
])
def test_a_bad_batch_size_is_refused_before_any_model_loads(run, tmp_path, monkeypatch, batch_size, said):
    def load(*args, **kwargs):
        raise AssertionError("the fold models loaded before --batch-size was checked")

    monkeypatch.setattr(FoldEnsemble, "load", load)
    write_toy_csv(tmp_path / "in.csv", n=4)
    with pytest.raises(ValueError) as caught:
        predict(run, tmp_path / "in.csv", tmp_path / "out.csv", batch_size=batch_size)
    assert str(caught.value) == f"--batch-size {said}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_predict_reads_a_tilde_as_the_home_folder(run, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    write_toy_csv(tmp_path / "home" / "in.csv", n=5)
    summary = predict(run, "~/in.csv", "~/out.csv")
    assert summary.output == tmp_path / "home" / "out.csv" and summary.rows == 5
    assert len(pd.read_csv(tmp_path / "home" / "out.csv")) == 5
    assert list((tmp_path / "cwd").iterdir()) == []


def test_a_score_ensemble_of_no_fold_above_zero_weighs_equally_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        weights = ensemble_weights([{"pearson": -0.2}, {"pearson": 0.0}], "pearson", "score", [0, 1], "RUN")
    assert weights.tolist() == [0.5, 0.5]
    assert ("--ensemble score: no fold of RUN scored above 0 on validation (fold 0 -0.2, fold 1 0.0): the folds are "
            "weighed equally, as --ensemble mean") in caplog.text


def test_numpy_integers_are_a_batch_size_and_a_chunk_size(run, tmp_path):
    """The up-front check refused `batch_size=np.int64(4)`, which predicted before it."""
    write_toy_csv(tmp_path / "in.csv", n=5)
    summary = predict(run, tmp_path / "in.csv", tmp_path / "out.csv", batch_size=np.int64(4), chunk_rows=np.int32(3))
    assert summary.rows == 5 and summary.chunks == 2 and len(pd.read_csv(tmp_path / "out.csv")) == 5
