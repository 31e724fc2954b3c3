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


@pytest.mark.parametrize("script", [pt, pb], ids=["pppm_throughput", "predict_backends"])
def test_without_data_both_scripts_skip_cleanly(script, tmp_path, monkeypatch, capsys):
    """pppm_throughput.py raised a DataError traceback, predict_backends.py exited 1. Skipped cleanly without data in
    the default folder (CI has none); a --data-dir given without train.csv is a usage error: a mistyped path printed
    the same "skipped" and exited 0, having measured nothing."""
    monkeypatch.setattr(pt, "DEFAULT_DATA_DIR", str(tmp_path / "no_default"))  # each script's default folder
    monkeypatch.setattr(pb, "DATA", tmp_path / "no_default")
    monkeypatch.setattr(pb, "_train", lambda *args: pytest.fail("nothing may train without data"))
    flags = ["--quick"] if script is pt else ["--work-dir", str(tmp_path / "work")]
    assert script.main(flags) == 0
    assert f"skipped: no PPPM train.csv in {tmp_path / 'no_default'}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        script.main(["--data-dir", str(tmp_path / "none"), *flags])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and "skipped" not in captured.out
    assert f"--data-dir {tmp_path / 'none'}: no train.csv there" in captured.err
    assert not (tmp_path / "work").exists()


def test_missing_extras_drop_their_sides_before_anything_trains(monkeypatch, capsys):
    """Without sentence-transformers the CrossEncoder failed with ModuleNotFoundError after the other sides trained."""
    missing = {"datasets", "onnxruntime"}
    monkeypatch.setattr(pt, "missing_modules", lambda names: [n for n in names if n in missing])
    args = pt.parse_args(["--quick"])
    assert args.cross_encoder
    pt.drop_missing_peers(args)
    out = capsys.readouterr().out
    assert not args.cross_encoder and "CrossEncoder peer is skipped: datasets not installed" in out
    assert "ONNX prediction paths are skipped: onnxruntime not installed (pip install 'attnpool[onnx]')" in out
    args = pt.parse_args(["--quick", "--no-cross-encoder"])
    pt.drop_missing_peers(args)
    assert "CrossEncoder" not in capsys.readouterr().out  # not asked for: nothing to say


def _pppm(folder, rows=60, seed=0):
    rng = np.random.default_rng(seed)
    words = ["red", "blue", "green", "tree", "house", "river", "stone", "cloud"]
    folder.mkdir(parents=True)
    pd.DataFrame({"id": [f"r{i:03d}" for i in range(rows)], "anchor": [f"anchor {i % 10}" for i in range(rows)],
                  "target": [" ".join(rng.choice(words, 2)) for _ in range(rows)],
                  "context": rng.choice(["A01", "B02"], rows), "score": rng.choice([0.0, 0.25, 0.5, 1.0], rows)}
                 ).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"context": ["A01", "B02"], "text": ["HUMAN NECESSITIES", "PERFORMING OPERATIONS"]}).to_csv(
        folder / "cpc_texts.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A PPPM run of 30 of 60 rows (fold 0 of 2 trained) on a tiny encoder, as predict_backends trains its own."""
    import attnpool
    from model_helpers import save_tiny_encoder

    root = tmp_path_factory.mktemp("backends")
    data = _pppm(root / "pppm")
    attnpool.train(preset="pppm", data_dir=str(data), model=save_tiny_encoder(root / "encoder"), folds=2,
                   only_folds=[0], limit=30, epochs=1, batch_size=8, max_length=32, precision="fp32",
                   pooling_options={"attn_size": 8}, output_dir=str(root / "run"))
    return pb.Run.open(root / "run"), data


def test_the_held_out_rows_are_no_training_rows_of_the_run(tiny_run):
    """The rows were sampled from all of train.csv: about a tenth of them were the run's training rows."""
    from attnpool.data.task import load_task

    run, data = tiny_run
    task = load_task(run.config(), log=__import__("logging").getLogger("test"))
    folds = run.read_fold_assignment()
    ids = task.frame["id"].astype(str).to_numpy()
    learned = set(ids[folds != 0])  # fold 0's model trained on the other folds' rows
    frame = pb.held_out(run, data, rows=1000)
    assert len(frame) == 60 - len(learned) and not set(frame["id"]) & learned
    assert set(ids[folds == 0]) <= set(frame["id"])  # fold 0's validation rows: held out from its model
    assert set(pb.held_out(run, data, rows=5)["id"]) <= set(frame["id"])


def test_the_trained_run_is_kept_per_data_and_rows(tmp_path, monkeypatch):
    """The run in --work-dir was reused whatever --train-rows and --data-dir asked."""
    calls = []
    monkeypatch.setattr(pb.attnpool, "train", lambda **options: calls.append(options))
    runs = {pb._train(tmp_path, tmp_path / data, rows) for data, rows in (("a", 30), ("a", 40), ("b", 30))}
    assert len(runs) == 3 and [(c["data_dir"], c["limit"]) for c in calls] == [
        (str((tmp_path / d).resolve()), r) for d, r in (("a", 30), ("a", 40), ("b", 30))]


def test_predict_backends_leaves_out_onnx_when_its_extra_is_missing(tiny_run, tmp_path, monkeypatch, capsys):
    """onnx missing: ImportError after training (the default run); now a note, and the torch paths alone."""
    run, data = tiny_run
    monkeypatch.setattr(pb, "missing_modules", lambda names: ["onnxruntime"])
    assert pb.main(["--run", str(run.path), "--data-dir", str(data), "--rows", "20", "--repeats", "1",
                    "--work-dir", str(tmp_path / "work"), "--no-memory"]) == 0
    out = capsys.readouterr().out
    assert "the ONNX paths are skipped: onnxruntime not installed" in out
    assert "| torch fp32 |" in out and "| torch bf16 |" in out and "onnx" not in out.split("| path |")[1]
    assert "held-out PPPM rows (none a training row of the run)" in out


def test_predict_backends_measures_each_paths_memory_in_a_process_of_its_own(tiny_run, tmp_path, monkeypatch, capsys):
    """It printed one ru_maxrss of the whole process after every path had run in it, yet the README quoted a peak
    per backend. Now each path loads and predicts alone in a fresh process, and its own peak is printed."""
    import re

    run, data = tiny_run
    children = []
    real_run = pb.subprocess.run

    def spy(cmd, **kwargs):
        children.append(cmd)
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(pb.subprocess, "run", spy)
    assert pb.main(["--run", str(run.path), "--data-dir", str(data), "--rows", "20", "--repeats", "1",
                    "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    names = [line.split(" | ")[0].lstrip("| ") for line in out.split("| path |")[1].splitlines()[2:]
             if line.startswith("| ")]
    assert [cmd[cmd.index("--memory-child") + 1] for cmd in children] == names and len(names) >= 2
    line = next(line for line in out.splitlines() if line.startswith("peak resident memory"))
    assert "each path alone in a fresh process" in line and "of the process" not in out
    peaks = dict(re.findall(r"(torch fp32|torch bf16|onnx fp32|onnx int8) ([0-9.]+) GB", line))
    assert list(peaks) == names and all(0.05 < float(gb) < 20 for gb in peaks.values())


def test_a_memory_child_needs_a_known_path_a_run_and_rows(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        pb.main(["--memory-child", "onnx fp16", "--run", str(tmp_path), "--memory-sample", str(tmp_path / "x.csv")])
    assert exit_.value.code == 2
