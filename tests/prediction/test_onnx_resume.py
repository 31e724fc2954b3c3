"""predict --resume with another backend than the interrupted prediction: the refusal names options the CLI takes."""

from __future__ import annotations

import pytest

from attnpool.prediction.parts import _changes


def _manifest(precision):
    return {"format": 1, "input": "in.csv", "input_size": 10, "input_mtime_ns": 1, "run": "run", "models": [],
            "chunk_rows": 5, "ensemble": "mean", "precision": precision, "weights": None}


@pytest.mark.parametrize(("was", "now", "advice"), [
    ("onnx-none", "fp32", "--backend onnx --quantize none"),
    ("onnx-int8", "onnx-none", "--backend onnx --quantize int8"),
    ("fp32", "onnx-none", "--backend torch --precision fp32"),
    ("bf16", "fp32", "--backend torch --precision bf16"),
])
def test_a_changed_backend_is_told_as_the_options_that_resume_it(was, now, advice):
    """The manifest's precision holds onnx-none / onnx-int8: "pass the same value" led to --precision onnx-none."""
    changes = _changes(_manifest(was), _manifest(now))
    assert changes == [f"precision is now {now} (was {was}; resume with {advice})"]
    assert "pass the same value" not in changes[0]

