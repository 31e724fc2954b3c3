"""serve --backend onnx --quantize int8: the calibration rows are read as the served ones, at the max_length the
service caps at the encoder's positions, and in the context view it was started with."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

pytest.importorskip("onnxruntime")

from attnpool.prediction.engine import FoldEnsemble  # noqa: E402
from attnpool.runs import Run  # noqa: E402
from attnpool.serving import onnx_backend  # noqa: E402
from attnpool.serving.service import Service  # noqa: E402
from model_helpers import WORDS, make_run, save_tiny_encoder  # noqa: E402


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("serve_onnx_calibration") / "encoder")


def _calibration(path):
    pd.DataFrame({"id": ["long", "short"], "first": [" ".join(WORDS * 6), "the cat"], "second": ["dog", "red"],
                  "label": [0.5, 0.1]}).to_csv(path, index=False)
    return path


def test_int8_calibration_rows_are_read_at_the_capped_max_length(encoder, tmp_path, caplog):
    """A run's max_length 128 over its BERT's 64 positions: served rows were capped, the calibration rows not, and
    the encoder failed on the long one at start-up."""
    run = make_run(tmp_path / "run", encoder, folds=1)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["max_length"] = 128  # over the encoder's 64 positions
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    with caplog.at_level("INFO", logger="attnpool"):
        service = Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0, precision="fp32",
                               calibration_file=_calibration(tmp_path / "calib.csv"), threads=1, max_batch=2)
    assert service.max_length == 64 and service.scorer.quantize == "int8"
    assert "int8 ONNX models agree with float32" in caplog.text


def test_int8_calibration_rows_are_read_in_the_services_context_view(encoder, tmp_path, monkeypatch):
    """The check read the rows with their group context, whatever --context-view the service scored them in."""
    run = make_run(tmp_path / "run", encoder, folds=1, group_context="second", group_context_by=["first"])
    calibration = _calibration(tmp_path / "calib.csv")
    views, inputs = [], onnx_backend.PredictionInputs

    def spy(*args, with_context=True, **kwargs):
        views.append(with_context)
        return inputs(*args, with_context=with_context, **kwargs)

    monkeypatch.setattr(onnx_backend, "PredictionInputs", spy)
    models = FoldEnsemble.load(Run(run))
    for view, read in (("without", [False]), ("both", [True, False]), ("with", [True])):
        views.clear()
        scorer = onnx_backend.onnx_scorer(Run(run), models, "mean", "int8", 1, 1.0, calibration, batch_size=2,
                                          context_view=view)
        assert views == read and scorer.quantize == "int8"


def test_the_service_calibrates_in_the_context_view_it_serves(encoder, tmp_path, monkeypatch):
    """Service.load did not pass --context-view on to the int8 check, which then read every row with its context."""
    run = make_run(tmp_path / "run", encoder, folds=1, group_context="second", group_context_by=["first"])
    views, inputs = [], onnx_backend.PredictionInputs

    def spy(*args, with_context=True, **kwargs):
        views.append(with_context)
        return inputs(*args, with_context=with_context, **kwargs)

    monkeypatch.setattr(onnx_backend, "PredictionInputs", spy)
    Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0, precision="fp32", context_view="without",
                 calibration_file=_calibration(tmp_path / "calib.csv"), threads=1, max_batch=2)
    assert views == [False]
