"""serve --backend onnx: int8 checked at the served --max-batch; /info and the non-finite 500 name what computes
the scores (ONNX Runtime, float32 or int8), --precision applying to the word weights only."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("onnxruntime")

from serve_helpers import asgi_call, lifespan  # noqa: E402

from attnpool.serving import server  # noqa: E402
from attnpool.serving.app import ScoresNotFinite, Settings, check_finite, create_app  # noqa: E402
from attnpool.serving.service import Answer, Service  # noqa: E402
from model_helpers import make_run, save_tiny_encoder, write_toy_csv  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_onnx_precision")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=40, seed=1)
    run = make_run(folder / "run", encoder, train_file=str(folder / "train.csv"))
    rows = pd.read_csv(folder / "train.csv").head(3)[["first", "second"]].to_dict("records")
    return run, rows


def test_int8_is_checked_at_the_served_max_batch(setup, caplog):
    """The check ran at batch sizes 1 and 64 only, whatever --max-batch the server then scored at."""
    run, _ = setup
    with caplog.at_level("INFO", logger="attnpool"):
        Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0, precision="fp32", max_batch=7)
    assert "scored in batches of 1, 7, 64" in caplog.text, caplog.text


def test_run_server_loads_with_its_max_batch(monkeypatch):
    """run_server gave load_service no max_batch, so serve --max-batch never reached the int8 check."""
    seen = {}

    class Stop(Exception):
        pass

    def spy(source, **options):
        seen.update(options)
        raise Stop

    monkeypatch.setattr(server, "load_service", spy)
    with pytest.raises(Stop):
        server.run_server("somewhere", port=0, max_batch=200, precision="fp32", backend="onnx", quantize="int8")
    assert seen["max_batch"] == 200 and seen["quantize"] == "int8"


def test_info_names_the_precision_the_scores_are_computed_in(setup, caplog):
    """/info said precision bf16 with --backend onnx, whose ONNX Runtime scores are float32 or int8."""
    run, _ = setup
    with caplog.at_level("INFO", logger="attnpool"):
        service = Service.load(run, backend="onnx", precision="bf16", device="cpu")
    info = service.info()
    assert (info["precision"], info["word_weights_precision"], info["backend"]) == ("float32", "bf16", "onnx")
    assert "--precision bf16 applies only to the word weights with --backend onnx" in caplog.text
    int8 = Service.load(run, backend="onnx", quantize="int8", int8_tolerance=1.0, precision="bf16", device="cpu")
    assert (int8.info()["precision"], int8.info()["word_weights_precision"]) == ("int8", "bf16")
    caplog.clear()
    with caplog.at_level("INFO", logger="attnpool"):
        torch_service = Service.load(run, precision="bf16", device="cpu")
    assert (torch_service.info()["precision"], torch_service.info()["word_weights_precision"]) == ("bf16", "bf16")
    assert "applies only to the word weights" not in caplog.text


def test_non_finite_scores_advice_fits_the_onnx_backend(setup, monkeypatch):
    """The 500 of NaN ONNX scores said 'serve with --precision fp32', which does not change them."""
    run, rows = setup
    service = Service.load(run, backend="onnx", precision="bf16", device="cpu")
    scores = service.scorer.scores
    monkeypatch.setattr(service.scorer, "scores", lambda encodings, **options: scores(encodings, **options) * np.nan)
    app = create_app(service, Settings(max_wait_ms=0))

    async def main():
        async with lifespan(app):
            return await asgi_call(app, "POST", "/predict", json.dumps({"rows": rows}).encode())

    status, _, body, _ = asyncio.run(main())
    error = json.loads(body)["error"]
    assert status == 500 and "scores by ONNX Runtime in float32" in error, error
    assert "--precision" not in error and error.endswith("check the model: its weights may hold NaN"), error

    nan = Answer(np.array([[0.2, np.nan]]))
    with pytest.raises(ScoresNotFinite, match=r"\(scores by ONNX Runtime in int8\): serve with --quantize none"):
        check_finite(nan, "bf16", "onnx-int8")
    words = Answer(np.array([[0.2, 0.8]]), [[{"weights": [np.nan]}]])
    with pytest.raises(ScoresNotFinite, match=r"word weights by PyTorch in precision bf16\): serve with --precision "
                                              r"fp32 \(with --backend onnx it applies to the word weights only\)"):
        check_finite(words, "bf16", "onnx")
    with pytest.raises(ScoresNotFinite, match=r"\(precision bf16\): serve with --precision fp32 \(float16"):
        check_finite(words, "bf16")  # the torch backend: as before
