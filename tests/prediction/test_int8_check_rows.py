"""predict --quantize int8 is checked on what it writes (a blend, blended) over the input's first 128 rows, whatever
--chunk-rows: each run of a blend was checked alone (a blend magnifies a small-spread run's error), and on the first
chunk only (5 rows with --chunk-rows 5)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from attnpool.prediction import onnx_engine, predict  # noqa: E402
from attnpool.prediction.blend import RunBlend, out_of_fold  # noqa: E402
from attnpool.prediction.onnx_engine import OnnxFoldEnsemble  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv  # noqa: E402

UNKNOWN = 1  # the tiny tokenizer's [UNK]: the id of a word it lacks, which marks a row


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Two one-fold regression runs whose out-of-fold spreads differ fivefold, and 30 rows with row 12 marked."""
    folder = tmp_path_factory.mktemp("int8")
    encoder = save_tiny_encoder(folder / "encoder")
    a = add_oof(make_run(folder / "a", encoder, folds=1), center=0.5, scale=0.1, seed=1)
    b = add_oof(make_run(folder / "b", encoder, folds=1, seed=10), center=0.2, scale=0.02, seed=2)
    frame = write_toy_csv(folder / "test.csv", n=30, seed=3)
    frame.loc[12, "first"] = "zebra " + frame.loc[12, "first"]
    frame.to_csv(folder / "marked.csv", index=False)
    write_toy_csv(folder / "long.csv", n=150, seed=4)
    return folder, a, b


@pytest.fixture
def int8_off_by(monkeypatch):
    """The 'int8' sessions run the float32 graphs (no quantization error of their own), plus ``offset(self, scores,
    encodings)``: a known int8 error, in the check and in what is written alike."""
    real_graph, real_scores = onnx_engine.graph_file, OnnxFoldEnsemble.scores
    monkeypatch.setattr(onnx_engine, "graph_file", lambda run, fold, quantize="none", command="predict":
                        real_graph(run, fold))

    def apply(offset):
        def scores(self, encodings, **options):
            values = real_scores(self, encodings, **options)
            return values + offset(self, values, encodings)

        monkeypatch.setattr(OnnxFoldEnsemble, "scores", scores)

    return apply


def _marked(self, values, encodings):
    shift = np.zeros_like(values)
    shift[[UNKNOWN in ids for ids in encodings["input_ids"]]] = 0.5
    return shift


def test_a_blend_is_checked_on_the_blended_scores(setup, int8_off_by, tmp_path, caplog):
    """Run b's int8 error of 0.01 passed a tolerance of 0.012, alone; the blend scales it by the runs' mean spread
    over b's (about 3x, half of it by b's weight), and wrote scores 0.015 from the float32 blend's."""
    folder, a, b = setup
    int8_off_by(lambda self, values, encodings: 0.01 if Path(self.run.path).name == "b" else 0.0)
    blend = RunBlend.from_runs([Run(a), Run(b)], out_of_fold([Run(a), Run(b)], [[0], [0]]))
    magnified = 0.01 * blend.weights[1] * blend.scale.mean() / blend.scale[1, 0]  # b's error in the blend
    assert magnified > 0.013  # above the tolerance below, which b's error alone is under
    with pytest.raises(RunError, match=r"int8 ONNX models depart from the float32 models by up to ([0-9.]+) \(largest "
                                       r"\|difference\| of a score over the first 30 rows scored in batches of 1, 64, "
                                       r"128, blended as written \(each of the 2 runs alone: [0-9.e+-]+, 0\.01\)\), "
                                       r"above the tolerance of 0\.012") as caught:
        predict([a, b], folder / "test.csv", tmp_path / "refused.csv", progress=False, backend="onnx",
                quantize="int8", int8_tolerance=0.012)
    assert float(re.search(r"by up to ([0-9.]+)", str(caught.value)).group(1)) == pytest.approx(magnified, abs=1e-4)
    assert not (tmp_path / "refused.csv").exists()
    with caplog.at_level("INFO", logger="attnpool"):
        predict([a, b], folder / "test.csv", tmp_path / "blend.csv", progress=False, backend="onnx",
                quantize="int8", int8_tolerance=0.02)
    assert "int8 ONNX models agree with float32 to 0.01" in caplog.text and "blended as written" in caplog.text


@pytest.mark.parametrize("chunk_rows", [1, 5, 100])
def test_the_int8_check_reads_the_first_rows_of_the_input_whatever_the_chunk_size(setup, int8_off_by, tmp_path,
                                                                                   chunk_rows):
    """Row 13's int8 score is 0.5 off: it was never compared with --chunk-rows 1 or 5 (a first chunk of 1 or 5 rows)."""
    folder, a, _ = setup
    int8_off_by(_marked)
    with pytest.raises(RunError, match=r"departs? from the float32 models by up to 0\.5\d* \(largest \|difference\| "
                                       r"of a score over the first 30 rows scored in batches of 1, 4, 64\)"):
        predict(a, folder / "marked.csv", tmp_path / "refused.csv", progress=False, backend="onnx", quantize="int8",
                int8_tolerance=0.1, chunk_rows=chunk_rows, batch_size=4)
    assert not (tmp_path / "refused.csv").exists()


@pytest.mark.parametrize("chunk_rows", [7, 1000])
def test_the_int8_check_takes_128_rows_of_a_longer_input(setup, int8_off_by, tmp_path, caplog, chunk_rows):
    """128 rows, not the first chunk's 7 (nor 1000), and read apart: not counted twice in the logged summary."""
    folder, a, _ = setup
    int8_off_by(lambda self, values, encodings: 0.0)
    with caplog.at_level("INFO", logger="attnpool"):
        summary = predict(a, folder / "long.csv", tmp_path / "long.csv", progress=False, backend="onnx",
                          quantize="int8", chunk_rows=chunk_rows)
    assert summary.rows == 150
    assert "over the first 128 rows scored in batches of 1, 64, 128;" in caplog.text
    assert "long.csv: 150 texts, tokens per text" in caplog.text
