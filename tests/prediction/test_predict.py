"""Streaming `predict`: chunked == unchunked in every format, resume without recomputing, autocast precision,
and `iter_table`, the chunked reader under it. Runs are built in code from a tiny random encoder (no training).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
import weakref

import numpy as np
import pandas as pd
import pytest
import torch

from attnpool.cli import main
from attnpool.data import DataError, read_table
from attnpool.data.prediction import PredictionInputs
from attnpool.data.readers import iter_table
from attnpool.precision import resolve_precision
from attnpool.prediction import FoldEnsemble, PredictionSummary, predict, predict_encoded
from attnpool.runs import Run, RunError
from model_helpers import WORDS, make_run, save_tiny_encoder, tiny_config, write_toy_csv

# Exact comparisons: float32 unless a test asks for another precision (auto is bf16 on a CPU with native bf16).
predict = functools.partial(predict, precision="fp32")

predict_module = importlib.import_module("attnpool.prediction.engine")  # where the ensemble finds it
predict_progress = importlib.import_module("attnpool.prediction.progress")  # the bar's total
prediction_inputs = importlib.import_module("attnpool.data.prediction")
readers = importlib.import_module("attnpool.data.readers")
parts_module = importlib.import_module("attnpool.prediction.parts")
ROWS, CHUNK = 23, 5  # 5 chunks, the last one short


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def run(encoder, tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs") / "regression", encoder)


@pytest.fixture(scope="module")
def binary_run(encoder, tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs") / "binary", encoder, task="binary", classes=["neg", "pos"])


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return write_toy_csv(tmp_path_factory.mktemp("toy") / "toy.csv", n=ROWS, seed=1).drop(columns=["label"])


@pytest.fixture(scope="module")
def unchunked(run, frame, tmp_path_factory):
    """The predictions of the toy rows in one chunk, per input format (computed once)."""
    folder, cache = tmp_path_factory.mktemp("unchunked"), {}

    def get(suffix):
        if suffix not in cache:
            data = write(frame, folder / f"test{suffix}")
            summary = predict(run, data, folder / f"pred{suffix}", chunk_rows=1000, progress=False)
            assert summary == PredictionSummary(folder / f"pred{suffix}", rows=ROWS, chunks=1)
            cache[suffix] = read(summary.output)
        return cache[suffix]

    return get


def write(frame, path):
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def read(path):
    return read_table(path, text_columns=["id"])


class CountCalls:
    """Wraps predict_encoded: counts the chunks predicted, and raises on call number `fail_on` (an interruption)."""

    def __init__(self, fail_on=None):
        self.calls, self.fail_on = 0, fail_on

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.fail_on:
            raise KeyboardInterrupt("simulated interruption")
        return predict_encoded(*args, **kwargs)


def test_the_callers_thread_count_is_given_back(run, frame, tmp_path):
    """predict sized torch's pool for itself (one thread per core) and left the notebook's process at that size."""
    import torch

    data = write(frame, tmp_path / "test.csv")
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        predict(run, data, tmp_path / "out.csv", progress=False, threads=1)
        assert torch.get_num_threads() == before + 1
        with pytest.raises(ValueError, match=r"--chunk-rows must be >= 1 \(rows read at a time\), got 0"):
            predict(run, data, tmp_path / "bad.csv", progress=False, threads=1, chunk_rows=0)
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


# --- chunked prediction -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_chunked_output_equals_unchunked_in_input_order(run, frame, unchunked, tmp_path, monkeypatch, suffix):
    monkeypatch.setattr(PredictionInputs, "encode_rows", 2)  # chunks are tokenised in slices too
    data = write(frame, tmp_path / f"test{suffix}")
    chunked = predict(run, data, tmp_path / f"chunked{suffix}", chunk_rows=CHUNK, progress=False, batch_size=2)
    assert chunked == PredictionSummary(tmp_path / f"chunked{suffix}", rows=ROWS, chunks=5)
    a, b = unchunked(suffix), read(chunked.output)
    assert list(a.columns) == list(b.columns) == ["id", "prediction"]
    assert list(b["id"]) == list(a["id"]) == list(frame["id"])  # input order, ids with leading zeros
    assert a["prediction"].std() > 0  # the fold models are not constant
    np.testing.assert_allclose(b["prediction"], a["prediction"], atol=1e-6)
    assert not (tmp_path / f"chunked{suffix}.parts").exists(), "the parts folder is deleted at the end"
    assert not list(tmp_path.glob(".*tmp")), "no temporary file is left behind"


def test_classification_parquet_keeps_labels_and_column_types_across_chunks(binary_run, frame, tmp_path):
    data = write(frame, tmp_path / "test.parquet")
    predict(binary_run, data, tmp_path / "whole.parquet", chunk_rows=ROWS, progress=False, ensemble="score")
    predict(binary_run, data, tmp_path / "chunked.parquet", chunk_rows=CHUNK, progress=False, ensemble="score")
    a, b = pd.read_parquet(tmp_path / "whole.parquet"), pd.read_parquet(tmp_path / "chunked.parquet")
    assert list(b.columns) == ["id", "prediction", "prob_neg", "prob_pos"]
    assert list(b.dtypes) == list(a.dtypes) and list(b["prediction"]) == list(a["prediction"])
    np.testing.assert_allclose(b[["prob_neg", "prob_pos"]], a[["prob_neg", "prob_pos"]], atol=1e-6)
    np.testing.assert_allclose(b["prob_neg"] + b["prob_pos"], 1.0, atol=1e-6)


def test_cli_flags_progress_and_tsv(run, frame, tmp_path, capsys):
    data = tmp_path / "test.tsv"
    frame.to_csv(data, sep="\t", index=False)
    out = tmp_path / "pred.tsv"
    argv = ["predict", "--run", str(run), "--input", str(data), "--output", str(out), "--chunk-rows", str(CHUNK),
            "--precision", "fp32"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "wrote" not in captured.out  # the logged line alone says it (it was printed twice)
    assert "\r" not in captured.err and f"wrote {ROWS} predictions of 2 fold models" in captured.err  # no bar off a TTY
    assert predict_progress.count_rows(data) == ROWS  # the bar's total on a terminal: the counted lines
    pred = pd.read_csv(out, sep="\t", dtype={"id": str})
    assert list(pred["id"]) == list(frame["id"]) and out.read_text().count("id\t") == 1  # one header


@pytest.mark.parametrize("resume", [False, True])
def test_a_bad_chunk_leaves_no_output_and_no_parts(binary_run, frame, tmp_path, resume):
    """--resume on a fresh output kept this call's own parts, which then blocked every retry with the fixed input
    ("the input file changed"; without --resume: "holds 4 finished chunk(s)")."""
    bad = frame.assign(label="neg")
    bad.loc[ROWS - 2, "label"] = "maybe"  # in the last chunk: the first four are written before it fails
    data = write(bad, tmp_path / "test.csv")
    with pytest.raises(DataError, match="labels the model never saw in training: maybe"):
        predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=CHUNK, progress=False, resume=resume)
    assert not (tmp_path / "pred.csv").exists() and not (tmp_path / "pred.csv.parts").exists()
    write(bad.assign(label="pos"), data)  # the input fixed
    summary = predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=CHUNK, progress=False, resume=resume)
    assert (summary.rows, summary.resumed_chunks) == (ROWS, 0)


def jsonl_lacking(frame, key, first_rows, path):
    """The rows as JSONL, the first ``first_rows`` lines without ``key``."""
    rows = frame.to_dict("records")
    for row in rows[:first_rows]:
        del row[key]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def without_the_key_scan(path, chunk_rows, *, text_columns=(), columns=()):
    """iter_table as it read JSONL before: a key first met in a later line is missing from the earlier chunks."""
    return iter_table(path, chunk_rows, text_columns=text_columns)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
@pytest.mark.parametrize("scan", [True, False])
def test_an_id_first_met_in_a_later_jsonl_chunk_is_in_every_part(run, frame, tmp_path, monkeypatch, suffix, scan):
    """The id column was written by the chunks that had it only: CSV parts with other headers were joined into a
    misaligned file, Parquet failed in the join after every chunk was predicted. Every part has the columns of the
    first (the reader gives every chunk the id; without that, no part has it)."""
    data = jsonl_lacking(frame.iloc[:6], "id", 2, tmp_path / "in.jsonl")
    whole = read(predict(run, data, tmp_path / f"whole{suffix}", chunk_rows=100, progress=False).output)
    if not scan:
        monkeypatch.setattr(prediction_inputs, "iter_table", without_the_key_scan)
    chunked = read(predict(run, data, tmp_path / f"chunked{suffix}", chunk_rows=2, progress=False).output)
    if scan:
        assert list(chunked.columns) == ["id", "prediction"]
        assert chunked["id"].isna().tolist() == [True, True, False, False, False, False]
        assert list(chunked["id"][2:]) == list(frame["id"][2:6])
    else:
        assert list(chunked.columns) == ["prediction"]
    np.testing.assert_allclose(chunked["prediction"], whole["prediction"], atol=1e-6)
    assert not (tmp_path / f"chunked{suffix}.parts").exists()


def test_parquet_parts_lacking_a_column_are_joined_with_it_empty(tmp_path):
    pd.DataFrame({"prediction": [0.1, 0.2]}).to_parquet(tmp_path / "a.parquet", index=False)
    pd.DataFrame({"id": ["7"], "prediction": [0.3]}).to_parquet(tmp_path / "b.parquet", index=False)
    parts_module._join_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out.parquet")
    joined = pd.read_parquet(tmp_path / "out.parquet")
    assert joined["prediction"].tolist() == [0.1, 0.2, 0.3] and joined["id"].isna().tolist() == [True, True, False]


def test_the_id_column_is_kept_when_the_training_file_had_none(encoder, frame, tmp_path):
    """run.json's id_col is None: predict read the file's "id" (the config's id_col) and dropped it, where serve
    and explain fall back to the config's."""
    path = make_run(tmp_path / "run", encoder)
    Run(path).write_info({**Run(path).info(), "id_col": None})
    data = write(frame, tmp_path / "test.csv")
    out = read(predict(path, data, tmp_path / "pred.csv", chunk_rows=CHUNK, progress=False).output)
    assert list(out.columns) == ["id", "prediction"] and list(out["id"]) == list(frame["id"])


def test_a_jsonl_text_key_is_accepted_or_refused_whatever_chunk_rows(run, frame, tmp_path):
    """A key missing from every line of the first chunk was refused with chunk_rows=2 and accepted with 100."""
    data = jsonl_lacking(frame.iloc[:6], "second", 2, tmp_path / "in.jsonl")
    whole = read(predict(run, data, tmp_path / "whole.csv", chunk_rows=100, progress=False).output)
    chunked = read(predict(run, data, tmp_path / "chunked.csv", chunk_rows=2, progress=False).output)
    np.testing.assert_allclose(chunked["prediction"], whole["prediction"], atol=1e-6)
    jsonl_lacking(frame.iloc[:6], "second", 6, data)  # in no line: refused, as before, whatever the chunks
    for chunk_rows in (2, 100):
        with pytest.raises(DataError, match=re.escape("in.jsonl: missing column(s) 'second'; the columns present "
                                                      "are: id, first")):
            predict(run, data, tmp_path / "refused.csv", chunk_rows=chunk_rows, progress=False)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_chunk_is_freed_before_the_next_one_is_read(run, frame, tmp_path, monkeypatch, suffix):
    """Loop variables (zip's and enumerate's tuples, the last run's chunk and frame, the reader's own) kept up to
    three chunks alive while the next one was read."""
    data = write(frame, tmp_path / f"test{suffix}")
    chunks, alive = [], []
    encode = PredictionInputs.encode

    def tracked_encode(self, chunk):
        chunks.append(weakref.ref(chunk))
        return encode(self, chunk)

    def read_hook(real):
        def hook(*args, **kwargs):
            result = real(*args, **kwargs)
            alive.append(sum(ref() is not None for ref in chunks))  # the chunks before, while this one is read
            return result
        return hook

    monkeypatch.setattr(PredictionInputs, "encode", tracked_encode)
    name = "_union_frame" if suffix == ".jsonl" else "check_fields"
    monkeypatch.setattr(readers, name, read_hook(getattr(readers, name)))
    predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK, progress=False)
    assert len(chunks) == 5 and alive == [0] * len(alive)  # JSONL: one more read first, of the ids' types


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_kill_during_the_join_leaves_nothing_beside_the_output(run, frame, tmp_path, monkeypatch, suffix):
    """The joined file was written beside the output, where a kill left it (full size) for good: it is written in
    the parts folder, which the resumed prediction deletes."""
    data = write(frame, tmp_path / f"test{suffix}")
    out = tmp_path / f"pred{suffix}"
    name = "_join_parquet" if suffix == ".parquet" else "_join_text"
    join, left = getattr(parts_module, name), []

    def killed(paths, tmp):
        join(paths, tmp)
        left.append(tmp)
        raise KeyboardInterrupt("killed during the join")

    monkeypatch.setattr(parts_module, name, killed)
    with pytest.raises(KeyboardInterrupt):
        predict(run, data, out, chunk_rows=CHUNK, progress=False)
    left[0].write_text("a whole joined file, as a kill leaves it (an exception lets atomic_write delete it)")
    monkeypatch.setattr(parts_module, name, join)
    predict(run, data, out, chunk_rows=CHUNK, progress=False, resume=True)
    assert not left[0].exists() and not list(tmp_path.glob(f".{out.name}.*"))
    assert list(read(out)["id"]) == list(frame["id"])


def test_integer_labels_with_a_blank_cell_are_the_labels_the_run_knows(encoder, tmp_path):
    """A blank cell makes the reader take the column as floats: 1.0 is still the class 1."""
    run = make_run(tmp_path / "run", encoder, task="binary", classes=[0, 1])
    labelled = write_toy_csv(tmp_path / "toy.csv", n=6, seed=2).assign(label=[1, 0, None, 1, 0, 0])
    data = write(labelled, tmp_path / "test.csv")
    assert read_table(data)["label"].dtype.kind == "f"  # what the check sees
    predict(run, data, tmp_path / "pred.csv", progress=False)
    write(labelled.assign(label=[1, 0, None, 2, 0, 0]), data)
    with pytest.raises(DataError, match=r"labels the model never saw in training: 2 \(data rows 4\); known labels: "
                                        r"0, 1\. predict does not need the label column"):
        predict(run, data, tmp_path / "again.csv", progress=False)


def test_pppm_preset_chunks_get_their_context_titles(encoder, tmp_path, monkeypatch):
    pppm = tmp_path / "pppm"
    pppm.mkdir()
    pd.DataFrame({"context": ["A01", "B02"], "text": ["red house", "fast dog"]}).to_csv(pppm / "cpc_texts.csv",
                                                                                        index=False)
    rng = np.random.default_rng(0)
    test = pd.DataFrame({"id": [f"{i}0" for i in range(9)], "anchor": rng.choice(["cat", "tree", "mat"], 9),
                         "target": rng.choice(["big cat", "a tree", "on mat"], 9),
                         "context": ["A01", "B02", "A01"] * 3})
    test.to_csv(tmp_path / "test.csv", index=False)
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    whole = read(predict(run, tmp_path / "test.csv", tmp_path / "whole.csv", progress=False).output)
    reads = []
    titles = prediction_inputs.cpc_titles
    monkeypatch.setattr(prediction_inputs, "cpc_titles", lambda folder: reads.append(folder) or titles(folder))
    chunked = read(predict(run, tmp_path / "test.csv", tmp_path / "chunked.csv", chunk_rows=2, progress=False).output)
    assert list(chunked["id"]) == list(test["id"])  # "10", "20"... stay text in every chunk
    np.testing.assert_allclose(chunked["prediction"], whole["prediction"], atol=1e-6)
    assert reads == [str(pppm)]  # cpc_texts.csv read once, not once a chunk


def test_a_pppm_run_without_its_data_folder_fails_to_serve_at_start_up(encoder, tmp_path):
    """serve said ready, then answered every request 422 ("PPPM data folder ... does not exist"), the client's
    fault, and read cpc_texts.csv again for each request while holding the tokenizer's lock."""
    from attnpool.serving.service import Service

    pppm = tmp_path / "pppm"
    pppm.mkdir()
    pd.DataFrame({"context": ["A01"], "text": ["red house"]}).to_csv(pppm / "cpc_texts.csv", index=False)
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    assert Service.load(run, precision="fp32").folds
    (pppm / "cpc_texts.csv").rename(tmp_path / "elsewhere.csv")
    with pytest.raises(DataError, match=re.escape(f"{pppm / 'cpc_texts.csv'} not found in the PPPM data folder")):
        Service.load(run, precision="fp32")


# --- resume -----------------------------------------------------------------------------------------------------


def interrupt_after_two_chunks(run, data, out, monkeypatch):
    monkeypatch.setattr(predict_module, "predict_encoded", CountCalls(fail_on=3))
    with pytest.raises(KeyboardInterrupt):
        predict(run, data, out, chunk_rows=CHUNK, progress=False)
    parts = out.with_name(out.name + ".parts")
    assert sorted(p.name for p in parts.glob("part-*")) == [f"part-0000{i}{out.suffix}" for i in (0, 1)]
    assert not out.exists()
    return parts


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_resume_predicts_only_the_unfinished_chunks(run, frame, unchunked, tmp_path, monkeypatch, suffix):
    data = write(frame, tmp_path / f"test{suffix}")
    out = tmp_path / f"pred{suffix}"
    parts = interrupt_after_two_chunks(run, data, out, monkeypatch)
    (parts / f".part-00002{suffix}.k1x2.tmp").write_text("half a part, as a kill mid-write leaves it")
    counter = CountCalls()
    monkeypatch.setattr(predict_module, "predict_encoded", counter)
    summary = predict(run, data, out, chunk_rows=CHUNK, progress=False, resume=True)
    assert counter.calls == 3, "chunks 0 and 1 were finished and are not predicted again"
    assert (summary.rows, summary.chunks, summary.resumed_chunks) == (ROWS, 5, 2)
    pd.testing.assert_frame_equal(read(out), unchunked(suffix), atol=1e-6)
    assert not parts.exists()


def test_interrupted_parts_are_kept_unless_resumed_and_the_cli_resumes(run, frame, tmp_path, monkeypatch, capsys):
    data = write(frame, tmp_path / "test.csv")
    out = tmp_path / "pred.csv"
    interrupt_after_two_chunks(run, data, out, monkeypatch)
    monkeypatch.setattr(predict_module, "predict_encoded", predict_encoded)
    argv = ["predict", "--run", str(run), "--input", str(data), "--output", str(out), "--chunk-rows", str(CHUNK),
            "--precision", "fp32"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pred.csv.parts holds 2 finished chunk(s) of an interrupted prediction" in err
    assert "pass --resume to continue it, or delete the folder to start over" in err
    assert main([*argv, "--resume"]) == 0
    assert list(read(out)["id"]) == list(frame["id"])


def test_resume_refuses_when_the_input_or_options_changed(run, frame, tmp_path, monkeypatch, capsys):
    data = write(frame, tmp_path / "test.csv")
    out = tmp_path / "pred.csv"
    parts = interrupt_after_two_chunks(run, data, out, monkeypatch)
    with pytest.raises(RunError, match=re.escape("chunk_rows is now 7 (was 5; pass the same value to resume)")):
        predict(run, data, out, chunk_rows=7, progress=False, resume=True)
    with pytest.raises(RunError, match="precision is now bf16 \\(was fp32"):
        predict(run, data, out, chunk_rows=CHUNK, progress=False, resume=True, precision="bf16")
    write(pd.concat([frame, frame.iloc[:1]]), data)  # one more row
    argv = ["predict", "--run", str(run), "--input", str(data), "--output", str(out), "--chunk-rows", str(CHUNK),
            "--resume", "--precision", "fp32"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot resume the prediction in {parts}: the input file {data.resolve()} changed (size" in err
    assert f"since it started. Restore what changed, or delete {parts} to start over" in err
    assert sorted(p.name for p in parts.glob("part-*")) == ["part-00000.csv", "part-00001.csv"], "parts are kept"


def test_a_changed_context_view_is_named_by_the_value_to_pass():
    """The manifest leaves the default view out, and the refusal still names it: ``with``, not ``None``."""
    from attnpool.prediction.parts import PARTS_FORMAT, _changes

    same = {"format": PARTS_FORMAT, "input": "in.csv", "input_size": 1, "input_mtime_ns": 1, "run": "run",
            "models": {}, "chunk_rows": CHUNK, "ensemble": "mean", "precision": "fp32"}
    assert _changes({**same, "context_view": "both"}, same) == [
        "context_view is now with (was both; pass the same value to resume)"]
    assert _changes(same, {**same, "context_view": "without"}) == [
        "context_view is now without (was with; pass the same value to resume)"]
    assert _changes(same, same) == []
    # training finished another fold since: say which folds, not "retrained"
    assert _changes({**same, "models": {"fold_0": [1, 2], "fold_1": [3, 4]}},
                    {**same, "models": {"fold_0": [1, 2], "fold_1": [3, 4], "fold_2": [5, 6]}}) == [
        "the folds are now 0 1 2 (were 0 1); pass --folds with the earlier ones to resume"]
    assert _changes({**same, "models": {"fold_0": [1, 2]}}, {**same, "models": {"fold_0": [1, 3]}}) == [
        "the fold models of run changed (retrained or replaced)"]


def test_resume_without_parts_starts_from_the_first_chunk(run, frame, tmp_path):
    data = write(frame, tmp_path / "test.csv")
    summary = predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK, progress=False, resume=True)
    assert (summary.chunks, summary.resumed_chunks) == (5, 0)


# --- precision ----------------------------------------------------------------------------------------------------


def test_bf16_autocast_on_cpu_is_finite_and_close_to_fp32(run, frame, unchunked, tmp_path):
    data = write(frame, tmp_path / "test.csv")
    fp32 = unchunked(".csv")
    bf16 = read(predict(run, data, tmp_path / "bf16.csv", progress=False, precision="bf16").output)
    assert np.isfinite(bf16["prediction"]).all()
    assert not np.array_equal(bf16["prediction"], fp32["prediction"]), "autocast ran in bfloat16"
    np.testing.assert_allclose(bf16["prediction"], fp32["prediction"], atol=0.05 * fp32["prediction"].abs().max())


def test_cpu_bf16_runs_copies_with_bf16_linear_weights_and_keeps_the_float32_models(run):
    ensemble = FoldEnsemble.load(Run(run))
    encodings = dict(ensemble.tokenizer([f"row {i} " * (1 + i % 5) for i in range(9)]))
    fp32 = ensemble.scores(encodings, batch_size=4, device="cpu", precision="fp32")
    bf16 = ensemble.scores(encodings, batch_size=4, device="cpu", precision="bf16")
    lowered = ensemble.models_for("bf16", "cpu")
    assert lowered is ensemble.models_for("bf16", "cpu"), "made once, then reused"
    for low, model in zip(lowered, ensemble.models, strict=True):
        linear = {p.dtype for m in low.attnpool.encoder.modules() if isinstance(m, torch.nn.Linear)
                  for p in m.parameters()}
        norms = {p.dtype for m in low.attnpool.encoder.modules()
                 if isinstance(m, torch.nn.LayerNorm | torch.nn.Embedding) for p in m.parameters()}
        assert linear == {torch.bfloat16} and norms == {torch.float32}
        assert {p.dtype for p in low.attnpool.pooler.parameters()} | {p.dtype for p in low.head.parameters()} == {
            torch.float32}
        assert {p.dtype for p in model.parameters()} == {torch.float32}, "the loaded models are not changed"
    assert ensemble.models_for("fp32", "cpu") is ensemble.models
    assert np.isfinite(bf16).all() and not np.array_equal(bf16, fp32)
    np.testing.assert_allclose(bf16, fp32, atol=0.05 * np.abs(fp32).max())
    np.testing.assert_array_equal(ensemble.scores(encodings, batch_size=4, device="cpu", precision="fp32"), fp32)


def test_resolve_precision():
    assert [resolve_precision(p, "cpu") for p in ("fp32", "bf16", "fp16")] == ["fp32", "bf16", "fp16"]
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, fp16, got 'half'"):
        resolve_precision("half", "cpu")


# --- iter_table ---------------------------------------------------------------------------------------------------

TABLE = pd.DataFrame({"id": [f"{i:04d}" for i in range(11)], "text": ["a, b", 'say "hi"\nthere', "NA", "caf\u00e9"] * 2
                      + ["x", "y", "z"], "score": np.linspace(0, 1, 11)})


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.jsonl", "t.parquet"])
def test_iter_table_chunks_concatenate_to_read_table(tmp_path, name):
    path = tmp_path / name
    if path.suffix == ".tsv":
        TABLE.to_csv(path, sep="\t", index=False)
    else:
        write(TABLE, path)
    chunks = list(iter_table(path, 4, text_columns=["id"]))
    assert [len(c) for c in chunks] == [4, 4, 3]
    assert [list(c.index) for c in chunks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]  # rows of the file
    pd.testing.assert_frame_equal(pd.concat(chunks), read_table(path, text_columns=["id"]))


def test_iter_table_jsonl_chunks_keep_the_keys_seen_before(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n{"a": 3}\n')
    last = list(iter_table(path, 2))[-1]
    assert list(last.columns) == ["a", "b"] and last["b"].isna().all()


def test_iter_table_jsonl_chunks_have_the_wanted_keys_of_later_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3, "b": "x", "c": 0}\n')
    first, last = iter_table(path, 2, columns=["b", "z"])
    assert list(first.columns) == ["a", "b"] and first["b"].isna().all()  # not "z": in no line
    assert list(last.columns) == ["a", "b", "c"] and list(last["b"]) == ["x"]
    assert [list(c.columns) for c in iter_table(path, 2)] == [["a"], ["a", "b", "c"]]  # no scan when not asked


def test_iter_table_errors_name_the_file_and_where(tmp_path):
    with pytest.raises(DataError, match=r"nope\.csv: no such file"):
        iter_table(tmp_path / "nope.csv", 2)  # when called, not when first iterated
    (tmp_path / "blank.jsonl").write_text("\n \n")
    with pytest.raises(DataError, match=r"blank\.jsonl: the file is empty"):
        iter_table(tmp_path / "blank.jsonl", 2)
    with pytest.raises(ValueError, match="chunk_rows must be a positive number of rows, got 0"):
        iter_table(tmp_path / "blank.jsonl", 0)
    (tmp_path / "header.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=re.escape("header.csv: no data rows (columns: a, b)")):
        list(iter_table(tmp_path / "header.csv", 2))
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3,}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 3 is not valid JSON"):
        list(iter_table(tmp_path / "bad.jsonl", 1))
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n3,4\n5,6,7\n")
    with pytest.raises(DataError, match=r"bad\.csv: could not be parsed as CSV: .*Check the delimiter"):
        list(iter_table(tmp_path / "bad.csv", 1))
    (tmp_path / "bad.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: could not be read as Parquet"):
        list(iter_table(tmp_path / "bad.parquet", 2))
    TABLE.iloc[:0].to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(DataError, match=re.escape("empty.parquet: no data rows (columns: id, text, score)")):
        list(iter_table(tmp_path / "empty.parquet", 2))


def test_iter_table_without_pyarrow_says_how_to_get_it(tmp_path, monkeypatch):
    write(TABLE, tmp_path / "t.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if pyarrow were not installed
    with pytest.raises(DataError, match=r"t\.parquet: reading Parquet needs the pyarrow package; install it "
                                        r"\(`pip install 'attnpool\[parquet\]'`\)"):
        iter_table(tmp_path / "t.parquet", 2)


@pytest.mark.parametrize("name", ["latin.csv", "latin.jsonl"])
def test_iter_table_non_utf8_gives_the_offset_and_line_of_read_table(tmp_path, name):
    rows = "".join(f'{{"id": {i}, "text": "ok"}}\n' if name.endswith("jsonl") else f"{i},ok\n" for i in range(3000))
    head = "" if name.endswith("jsonl") else "id,text\n"
    bad = '{"id": 1, "text": "caf\u00e9"}\n' if name.endswith("jsonl") else "1,caf\u00e9\n"
    data = (head + rows).encode() + bad.encode("latin-1")  # the bad byte lies beyond the first block and chunk
    path = tmp_path / name
    path.write_bytes(data)
    offset = data.index(b"\xe9")
    msg = f"{name}: not valid UTF-8: byte(s) e9 at byte offset {offset} (line {3001 + bool(head)})"
    with pytest.raises(DataError, match=re.escape(msg)):
        read_table(path)
    with pytest.raises(DataError, match=re.escape(msg)):
        list(iter_table(path, 100))


def test_iter_table_decodes_characters_cut_by_block_ends(tmp_path):
    from attnpool.data.text_files import Utf8Stream as _Utf8Stream

    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffa,b\n1,caf\u00e9 \u2603\n".encode())
    with _Utf8Stream(path, block=1) as stream:
        assert stream.read() == "a,b\n1,caf\u00e9 \u2603\n"


def test_a_fold_that_reads_but_does_not_build_is_not_called_corrupt(run, monkeypatch):
    """An unknown model type or a missing package says what to check, not 'delete the fold and re-train'."""
    from attnpool.model import AttnPoolForSequenceClassification
    from attnpool.prediction.engine import load_fold_models

    def unknown(*args, **kwargs):
        raise ValueError("model type 'newbert' is not recognised")

    monkeypatch.setattr(AttnPoolForSequenceClassification, "from_pretrained", unknown)
    with pytest.raises(RunError, match="ValueError: model type 'newbert' is not recognised. Its files are readable, "
                                       "so keep them: check that this environment can build it") as caught:
        load_fold_models(Run.open(run))
    assert "delete" not in str(caught.value) and "corrupt" not in str(caught.value)

    def truncated(*args, **kwargs):
        raise OSError("Unable to load weights from model.safetensors")

    monkeypatch.setattr(AttnPoolForSequenceClassification, "from_pretrained", truncated)
    with pytest.raises(RunError, match="The checkpoint is corrupt or incomplete; re-train that fold"):
        load_fold_models(Run.open(run))



@pytest.mark.parametrize("damage", ["deleted", "cut short"])
def test_a_damaged_fold_tokenizer_or_metrics_file_is_named(encoder, tmp_path, damage):
    """A missing tokenizer.json said "install sentencepiece or tiktoken", a cut-short one or a cut-short
    metrics.json only "Expecting value: line 1 column 1": neither named the file."""
    from attnpool.prediction.engine import load_fold_models

    path = make_run(tmp_path / "run", encoder, folds=1)
    tokenizer, metrics = path / "fold_0" / "model" / "tokenizer.json", path / "fold_0" / "metrics.json"
    tokenizer.unlink() if damage == "deleted" else tokenizer.write_text(tokenizer.read_text()[:1000])
    with pytest.raises(RunError, match=re.escape(f"cannot load the tokenizer saved in {path / 'fold_0' / 'model'}: ")):
        load_fold_models(Run.open(path))
    metrics.write_text('{"pearson": 0.')
    with pytest.raises(RunError, match=re.escape(f"{metrics} is corrupt (")):
        Run.open(path).fold_metrics(0)


@pytest.mark.parametrize("name", ["predictions.xlsx", "predictions"])
def test_an_output_whose_format_is_unknown_is_refused_before_anything_runs(run, frame, tmp_path, name):
    source = write(frame, tmp_path / "in.csv")
    with pytest.raises(DataError, match=r"unsupported output extension '(\.xlsx|\(none\))'; the output's format "
                                        r"follows its extension: \.csv, \.tsv, \.jsonl, \.parquet"):
        predict(run, source, tmp_path / name, progress=False)
    assert list(tmp_path.iterdir()) == [source]


def test_an_output_that_is_the_input_is_refused_and_the_input_kept(run, frame, tmp_path, capsys):
    """predict(run, "in.csv", "in.csv") replaced the input with the predictions (the final rename), without a word."""
    source = write(frame, tmp_path / "in.csv")
    (tmp_path / "sub").mkdir()
    os.link(source, tmp_path / "linked.csv")
    before = source.read_bytes()
    message = r"--output .*: is the input file \(.*in\.csv\).*; write the predictions to another file"
    for output in [source, tmp_path / "sub" / ".." / "in.csv", tmp_path / "linked.csv"]:
        with pytest.raises(DataError, match=message):
            predict(run, source, output, progress=False)
    argv = ["predict", "--run", str(run), "--input", str(source), "--output", str(source), "--precision", "fp32"]
    assert main(argv) != 0
    assert "is the input file" in capsys.readouterr().err
    assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "linked.csv", "sub"]  # no lock, no parts


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """A run of a tiny GPT-2-like encoder whose tokenizer adds no special tokens: an empty text is no token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("gpt2")).save_pretrained(folder / "encoder")
    words = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}},
                                       unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(
        folder / "encoder")
    return make_run(folder / "run", str(folder / "encoder"), text_cols=["first"], folds=1)


def test_a_batch_of_only_empty_texts_is_predicted_as_beside_longer_ones(gpt2_run, tmp_path):
    """Without special tokens an empty text is 0 tokens; sorted by length, the empty rows made a last batch of
    shape (rows, 0), on which both engines crashed ("cannot reshape tensor of 0 elements"). ONNX Runtime's padding
    (NumPy batches) is checked in tests/data/test_batching.py, without exporting a graph."""
    source = tmp_path / "in.csv"
    pd.DataFrame({"id": ["1", "2", "3"], "first": ["cat dog", "", ""]}).to_csv(source, index=False)
    outputs = [read(predict(gpt2_run, source, tmp_path / f"{size}.csv", progress=False, batch_size=size).output)
               for size in (8, 1)]
    pd.testing.assert_frame_equal(outputs[1], outputs[0], atol=1e-6)
    assert outputs[0]["id"].tolist() == ["1", "2", "3"] and outputs[0]["prediction"].notna().all()


def test_parquet_texts_and_ids_stored_as_bytes_are_predicted_as_the_same_strings(run, frame, tmp_path):
    """Un-annotated BYTE_ARRAY columns read as bytes: the model read the text "b'cat dog'", wrote the id "b'0001'"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    as_bytes = pa.table({name: pa.array([v.encode() for v in frame[name]], pa.binary()) for name in frame.columns})
    pq.write_table(as_bytes, tmp_path / "bytes.parquet")
    strings = write(frame, tmp_path / "strings.parquet")
    expected = read(predict(run, strings, tmp_path / "expected.csv", progress=False).output)
    got = read(predict(run, tmp_path / "bytes.parquet", tmp_path / "got.csv", progress=False, chunk_rows=CHUNK).output)
    assert got["id"].tolist() == frame["id"].tolist()
    pd.testing.assert_frame_equal(got, expected, atol=1e-6)


def test_a_pppm_run_copied_away_from_its_data_folder_predicts_with_its_own_titles(encoder, tmp_path):
    """config.yaml names the data folder the run trained from: a run copied to another machine lost its titles."""
    from attnpool.runs import Run
    from attnpool.training.recipe import keep_context_titles

    pppm = tmp_path / "pppm"
    pppm.mkdir()
    pd.DataFrame({"context": ["A01"], "text": ["red house"]}).to_csv(pppm / "cpc_texts.csv", index=False)
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    keep_context_titles(Run(run), Run(run).config())  # as train does
    pd.DataFrame({"id": ["a", "b"], "anchor": ["cat", "mat"], "target": ["big cat", "on mat"],
                  "context": ["A01", "A01"]}).to_csv(tmp_path / "test.csv", index=False)
    before = read(predict(run, tmp_path / "test.csv", tmp_path / "before.csv", progress=False).output)
    (pppm / "cpc_texts.csv").unlink()  # the data folder is not where the run now is
    assert Run(run).config().data_dir == str(run)
    after = read(predict(run, tmp_path / "test.csv", tmp_path / "after.csv", progress=False).output)
    pd.testing.assert_frame_equal(before, after)
