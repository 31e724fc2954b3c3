"""serve --backend onnx [--quantize int8]: the served scores through ONNX Runtime, int8 checked at start-up."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("onnxruntime")

from attnpool.runs import RunError  # noqa: E402
from attnpool.serving.service import Service  # noqa: E402
from model_helpers import make_run, save_tiny_encoder, write_toy_csv  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_onnx")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=40, seed=1)
    run = make_run(folder / "run", encoder, train_file=str(folder / "train.csv"))
    rows = pd.read_csv(folder / "train.csv").head(9)[["first", "second"]].to_dict("records")
    return folder, run, rows


def scores(service, rows):
    return np.concatenate([a.scores for a in service.run([service.encode(rows)], batch_size=4)])


def test_onnx_scores_match_torch(setup):
    _, run, rows = setup
    torch_service = Service.load(run, precision="fp32")
    onnx_service = Service.load(run, backend="onnx")
    assert onnx_service.info()["backend"] == "onnx" and torch_service.info()["backend"] == "torch"
    assert np.abs(scores(onnx_service, rows) - scores(torch_service, rows)).max() < 1e-5


def test_int8_is_checked_on_the_runs_training_rows(setup, caplog):
    folder, run, rows = setup
    with caplog.at_level("INFO", logger="attnpool"):
        service = Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0)
    assert service.info()["backend"] == "onnx-int8" and "int8 ONNX models agree with float32 to" in caplog.text
    assert np.isfinite(scores(service, rows)).all()
    with pytest.raises(RunError, match=r"depart from the float32 models by up to .* above the tolerance of 1e-09"):
        Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1e-9)


def test_a_bad_int8_tolerance_is_refused_before_any_graph_is_quantized(setup, monkeypatch):
    """A NaN tolerance reached the check only after the folds' graphs were exported and quantized."""
    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    _, run, _ = setup
    monkeypatch.setattr(OnnxFoldEnsemble, "load", classmethod(lambda cls, *a, **k: pytest.fail("graphs loaded")))
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match=r"--int8-tolerance \(int8_tolerance\) must be a finite number >= 0"):
            Service.load(run, backend="onnx", quantize="int8", int8_tolerance=bad)


def test_int8_without_calibration_rows_says_how_to_give_them(setup, tmp_path):
    folder, _, _ = setup
    write_toy_csv(tmp_path / "gone.csv", n=8)
    run = make_run(tmp_path / "run", str(folder / "encoder"), train_file=str(tmp_path / "gone.csv"))
    (tmp_path / "gone.csv").unlink()
    with pytest.raises(RunError, match=r"the run's training file .*gone.csv is not there: give --calibration-file"):
        Service.load(run, backend="onnx", quantize="int8")
    service = Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0,
                           calibration_file=folder / "train.csv")
    assert service.backend == "onnx-int8"


def test_bad_backend_options(setup, tmp_path):
    folder, run, _ = setup
    with pytest.raises(ValueError, match="--quantize int8 needs --backend onnx"):
        Service.load(run, quantize="int8")
    with pytest.raises(ValueError, match="backend must be 'torch' or 'onnx', got 'tf'"):
        Service.load(run, backend="tf")
    model = Service.load(run, precision="fp32").ensemble.models[0]
    model.save_pretrained(tmp_path / "model")
    Service.load(run).ensemble.tokenizer.save_pretrained(tmp_path / "model")
    with pytest.raises(RunError, match="--backend onnx serves a train run .* is a model folder: serve it with "
                                       "--backend torch"):
        Service.load(tmp_path / "model", backend="onnx")
