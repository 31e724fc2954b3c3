"""benchmarks/pppm_throughput.py and predict_backends.py without training: step filtering, verdicts, long texts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_throughput as pt  # noqa: E402
import predict_backends as pb  # noqa: E402
from model_helpers import tiny_tokenizer  # noqa: E402


def test_a_load_spike_drops_the_steps_on_both_sides_of_it():
    ours = [(16, 20 + i % 5, 0.1 * (20 + i % 5) / 20) for i in range(12)]  # time follows padded size
    probe = [(16, 84, 0.5)] * 12
    probe[6] = (16, 84, 2.0)  # notebook step 6 ran during a spike: attnpool steps 6 and 7 are suspect
    ours[9] = (16, 20, 1.0)  # attnpool's step 9 is slow for its size
    section = pt.Section.of("attnpool bf16", ours, probe, warmup=2)
    assert section.timed == list(range(2, 12))
    assert section.quiet == [2, 3, 4, 5, 8, 10, 11]
    rows = 16 * len(section.quiet)
    assert section.rate == pytest.approx(rows / sum(ours[i][2] for i in section.quiet))
    assert section.probe == pytest.approx(rows / (0.5 * len(section.quiet)))
    assert section.vs_probe == pytest.approx(section.rate / section.probe)
    assert section.rate_all < section.rate  # the slow steps count in the unfiltered rate
    with pytest.raises(SystemExit, match="no timed training step"):
        pt.Section.of("x", ours[:2], probe[:2], warmup=2)


def test_the_prediction_verdict_takes_the_fastest_accurate_path():
    rng = np.random.default_rng(0)
    target = rng.random(500)
    fp32 = target + rng.normal(0, 0.3, 500)
    preds = {"notebook fp32": target.copy(), "torch fp32": fp32, "torch bf16": fp32 + rng.normal(0, 1e-3, 500),
             "onnx int8": fp32 + rng.normal(0, 0.5, 500)}  # fastest, but far from fp32
    rates = {"notebook fp32": 1000.0, "torch fp32": 10.0, "torch bf16": 20.0, "onnx int8": 40.0}
    assert abs(pt.pearson(preds["onnx int8"], target) - pt.pearson(fp32, target)) > pt.PEARSON_TOLERANCE
    assert pt.best_accurate_path(rates, preds, target) == "torch bf16"  # the notebook is never a candidate
    stats = pt.pearson_diff(fp32, preds["onnx int8"], target, resamples=200, seed=1)
    assert stats["diff"] == pytest.approx(stats["a"] - stats["b"]) and stats["se"] > 0
    assert pt.compare_line("x", stats).endswith("PASS")


def test_arguments_and_the_quick_mode():
    args = pt.parse_args(["--quick", "--no-cross-encoder", "--precision", "fp32"])
    assert (args.rows, args.predict_rows, args.predict_repeats) == (96, 64, 1)
    assert (args.cross_encoder, args.fp32_reference, args.precision) == (False, True, "fp32")
    assert pt.parse_args([]).precision == "auto"
    with pytest.raises(SystemExit):
        pt.parse_args(["--precision", "fp8"])


def test_long_texts_reach_the_token_count_with_other_rows_phrases():
    tok = tiny_tokenizer()
    frame = pd.DataFrame({"anchor": ["the cat", "a dog", "red tree"], "target": ["sat", "ran fast", "big house"],
                          "context": ["A01"] * 3})
    long = pb.lengthen(frame, tok, tokens=12)
    for i, text in enumerate(long["target"]):
        assert text.startswith(frame["target"][i])  # the row's own phrase first, then the next rows'
        assert len(tok(f"{frame['anchor'][i]} {text}", add_special_tokens=False)["input_ids"]) >= 12
    assert long["target"][2].split()[2:4] == ["the", "cat"]  # wraps around to the first row
    assert list(long["anchor"]) == list(frame["anchor"])
    assert len(tok(pb.lengthen(frame, tok, tokens=100)["target"][0])["input_ids"]) >= 100  # the rows repeat
    with pytest.raises(SystemExit, match="no anchor or target tokens"):
        pb.lengthen(frame.assign(anchor="", target=""), tok, tokens=5)
    assert (pb.parse_args(["--long"]).rows, pb.parse_args(["--long"]).batch_size) == (256, 16)
    assert (pb.parse_args([]).rows, pb.parse_args([]).batch_size) == (2048, 64)
