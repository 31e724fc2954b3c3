"""Blending runs in `predict`: standardised by each run's out-of-fold predictions, chunk-independent, a run blended
with itself unchanged, classes averaged as probabilities, and the errors that say which run cannot be blended."""

from __future__ import annotations

import functools
import importlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from attnpool.cli import main
from attnpool.data import read_table
from attnpool.prediction import predict
from attnpool.prediction.blend import RunBlend, out_of_fold
from attnpool.runs import Run, RunError
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False)
ROWS = 17


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def runs(encoder, tmp_path_factory):
    """Two regression runs with different models and out-of-fold scales, and a binary run."""
    base = tmp_path_factory.mktemp("runs")
    a = add_oof(make_run(base / "a", encoder, seed=0), center=0.5, scale=0.1, seed=1)
    b = add_oof(make_run(base / "b", encoder, seed=10), center=0.2, scale=0.02, seed=2)
    binary = make_run(base / "binary", encoder, task="binary", classes=["neg", "pos"])
    add_oof(binary, "binary", ["neg", "pos"], seed=3)
    binary2 = make_run(base / "binary2", encoder, task="binary", classes=["neg", "pos"], seed=20)
    add_oof(binary2, "binary", ["neg", "pos"], seed=4)
    return {"a": a, "b": b, "binary": binary, "binary2": binary2}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "test.csv"
    write_toy_csv(path, n=ROWS, seed=1).drop(columns=["label"]).to_csv(path, index=False)
    return path


def read(path):
    return read_table(path, text_columns=["id"])


def alone(run, data, folder):
    return read(predict(run, data, folder / f"{run.name}.csv").output)


def oof_stats(run):
    values = pd.concat([Run(run).fold_oof(f) for f in Run(run).trained_folds()])["prediction"].to_numpy()
    return values.mean(), values.std()


def test_regression_blend_standardises_each_run_by_its_out_of_fold_predictions(runs, data, tmp_path):
    pa, pb = alone(runs["a"], data, tmp_path)["prediction"], alone(runs["b"], data, tmp_path)["prediction"]
    (ma, sa), (mb, sb) = oof_stats(runs["a"]), oof_stats(runs["b"])
    blended = read(predict([runs["a"], runs["b"]], data, tmp_path / "blend.csv", chunk_rows=5).output)
    z = 0.5 * (pa - ma) / sa + 0.5 * (pb - mb) / sb
    np.testing.assert_allclose(blended["prediction"], 0.5 * (ma + mb) + 0.5 * (sa + sb) * z, rtol=1e-5, atol=1e-6)
    assert list(blended["id"]) == list(alone(runs["a"], data, tmp_path)["id"])
    # weights: 3:1 towards b
    weighted = read(predict([runs["a"], runs["b"]], data, tmp_path / "w.csv", blend_weights=[1, 3]).output)
    z = 0.25 * (pa - ma) / sa + 0.75 * (pb - mb) / sb
    np.testing.assert_allclose(weighted["prediction"], 0.25 * ma + 0.75 * mb + (0.25 * sa + 0.75 * sb) * z,
                               rtol=1e-5, atol=1e-6)


def test_the_blend_of_a_row_does_not_depend_on_the_chunk_it_is_read_in(runs, data, tmp_path):
    whole = read(predict([runs["a"], runs["b"]], data, tmp_path / "whole.csv", chunk_rows=1000).output)
    chunked = read(predict([runs["a"], runs["b"]], data, tmp_path / "chunked.csv", chunk_rows=3).output)
    np.testing.assert_allclose(chunked["prediction"], whole["prediction"], rtol=1e-6)


def test_a_run_blended_with_a_copy_of_itself_predicts_what_it_predicts_alone(runs, data, tmp_path):
    for name in ("a", "binary"):
        copy = tmp_path / f"{name}_copy"
        shutil.copytree(runs[name], copy)
        single = alone(runs[name], data, tmp_path)
        both = read(predict([runs[name], copy], data, tmp_path / f"{name}_both.csv").output)
        pd.testing.assert_frame_equal(both, single, check_exact=False, rtol=1e-6)


def test_classification_blend_averages_the_probabilities(runs, data, tmp_path):
    p1, p2 = alone(runs["binary"], data, tmp_path), alone(runs["binary2"], data, tmp_path)
    blended = read(predict([runs["binary"], runs["binary2"]], data, tmp_path / "cls.csv").output)
    for column in ("prob_neg", "prob_pos"):
        np.testing.assert_allclose(blended[column], 0.5 * (p1[column] + p2[column]), rtol=1e-6)
    assert list(blended["prediction"]) == ["pos" if p >= 0.5 else "neg" for p in blended["prob_pos"]]
    assert not blended["prediction"].equals(p1["prediction"]) or not blended["prob_pos"].equals(p1["prob_pos"])


def test_the_out_of_fold_report_scores_the_blend_on_the_shared_rows(runs, caplog):
    members = [Run(runs["a"]), Run(runs["b"])]
    folds = [[0, 1], [0, 1]]
    blend = RunBlend.from_runs(members, out_of_fold(members, folds))
    report = blend.oof_report(out_of_fold(members, folds))
    frames = [m.oof() if (m.path / "oof.csv").is_file() else pd.concat([m.fold_oof(0), m.fold_oof(1)])
              .sort_values("row") for m in members]
    target = frames[0]["target"].to_numpy()
    pa, pb = (f["prediction"].to_numpy() for f in frames)
    assert report["rows"] == 40
    assert report[str(runs["a"])] == pytest.approx(np.corrcoef(target, pa)[0, 1])
    assert report["blend"] == pytest.approx(np.corrcoef(target, pa / pa.std() + pb / pb.std())[0, 1])
    # folds that share no row: nothing to report
    assert blend.oof_report(out_of_fold(members, [[0], [1]])) is None
    with caplog.at_level("INFO", logger="attnpool.predict"):
        blend.log_report(out_of_fold(members, folds))
    assert f"out-of-fold pearson {report['blend']:.4f} on the 40 rows they all validated on" in caplog.text


def test_runs_that_cannot_be_blended_are_named(runs, data, tmp_path):
    with pytest.raises(RunError, match=r"cannot blend .*a \(regression\) with .*binary \(binary\): blend runs of one"):
        predict([runs["a"], runs["binary"]], data, tmp_path / "x.csv")
    no_oof = tmp_path / "no_oof"
    shutil.copytree(runs["b"], no_oof)
    (no_oof / "fold_1" / "oof.csv").unlink()
    with pytest.raises(RunError, match=r"fold 1 has no out-of-fold file .*finish the fold with attnpool train "
                                       r"--resume, or leave it out with --folds"):
        predict([runs["a"], no_oof], data, tmp_path / "x.csv")
    constant = tmp_path / "constant"
    shutil.copytree(runs["b"], constant)
    for fold in (0, 1):
        frame = pd.read_csv(constant / f"fold_{fold}" / "oof.csv")
        frame.assign(prediction=0.3).to_csv(constant / f"fold_{fold}" / "oof.csv", index=False)
    with pytest.raises(RunError, match=r"out-of-fold predictions of .*constant are constant"):
        predict([runs["a"], constant], data, tmp_path / "x.csv")
    diverged = tmp_path / "diverged"  # NaN scores: named as such, not as "constant (standard deviation 0)"
    shutil.copytree(runs["b"], diverged)
    frame = pd.read_csv(diverged / "fold_1" / "oof.csv")
    frame.assign(prediction=np.nan).to_csv(diverged / "fold_1" / "oof.csv", index=False)
    with pytest.raises(RunError, match=rf"out-of-fold predictions of .*diverged hold {len(frame)} missing or "
                                       r"non-finite scores \(a fold diverged\?\)"):
        predict([runs["a"], diverged], data, tmp_path / "x.csv")
    with pytest.raises(ValueError, match=r"one non-negative number per run \(2 runs\)"):
        predict([runs["a"], runs["b"]], data, tmp_path / "x.csv", blend_weights=[1.0])
    with pytest.raises(ValueError, match=r"\(--blend-weights\) weighs the runs of a blend: give two or more runs"):
        predict(runs["a"], data, tmp_path / "x.csv", blend_weights=[1.0])
    with pytest.raises(ValueError, match=r"\(--blend-weights\) weighs the runs of a blend: give two or more runs"):
        predict([runs["a"]], data, tmp_path / "x.csv", blend_weights=[1.0])
    assert not (tmp_path / "x.csv").exists()
    alone = read(predict(runs["a"], data, tmp_path / "alone.csv").output)
    listed = read(predict([runs["a"]], data, tmp_path / "listed.csv").output)  # a list of one run is that run
    pd.testing.assert_frame_equal(listed, alone)


def test_cli_blends_several_runs_and_resume_refuses_other_weights(runs, data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "cli.csv"
    assert main(["predict", "--run", str(runs["a"]), str(runs["b"]), "--input", str(data), "--output", str(out),
                 "--precision", "fp32", "-q"]) == 0
    api = read(predict([runs["a"], runs["b"]], data, tmp_path / "api.csv").output)
    np.testing.assert_allclose(read(out)["prediction"], api["prediction"], rtol=1e-6)
    assert main(["predict", "--run", str(runs["a"]), "--input", str(data), "--output", str(out),
                 "--blend-weights", "1", "-q"]) == 2
    assert "(--blend-weights) weighs the runs of a blend: give two or more runs" in capsys.readouterr().err
    # an interrupted blend's parts record the weights: resuming with others refuses, naming them
    engine, calls = importlib.import_module("attnpool.prediction.engine"), {"n": 0}
    forward = engine.predict_encoded

    def killed_in_the_second_chunk(*args, **kwargs):  # two runs: calls 1 and 2 predict the first chunk
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return forward(*args, **kwargs)

    monkeypatch.setattr(engine, "predict_encoded", killed_in_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        predict([runs["a"], runs["b"]], data, out, chunk_rows=5)
    monkeypatch.setattr(engine, "predict_encoded", forward)
    saved = json.loads((out.with_name(out.name + ".parts") / "manifest.json").read_text())
    assert saved["weights"] == [0.5, 0.5]
    with pytest.raises(RunError, match=r"resume .*: weights is now \[0.25, 0.75\] \(was \[0.5, 0.5\];"):
        predict([runs["a"], runs["b"]], data, out, chunk_rows=5, blend_weights=[1, 3], resume=True)
    summary = predict([runs["a"], runs["b"]], data, out, chunk_rows=5, resume=True)
    assert summary.resumed_chunks == 1


@pytest.fixture(scope="module")
def pearson_run(encoder, tmp_path_factory):
    """A run trained with the Pearson loss whose two folds predict on very different scales."""
    from attnpool.runs.tables import oof_frame

    run = Run(make_run(tmp_path_factory.mktemp("pearson") / "p", encoder, loss="pearson", seed=30))
    rng = np.random.default_rng(5)
    for fold, (center, scale) in enumerate([(0.5, 0.1), (-3.0, 4.0)]):
        rows = np.arange(fold, 40, 2)
        oof_frame("regression", None, rows, None, rng.random(len(rows)), center + scale * rng.standard_normal(
            len(rows)), fold).to_csv(run.fold_dir(fold) / "oof.csv", index=False)
    return run


def test_a_pearson_loss_run_ensembles_its_folds_each_standardised_by_its_own_scale(pearson_run, data, tmp_path):
    """The Pearson loss leaves each fold model its own offset and scale: a plain mean weighed the folds by spread."""
    from attnpool.prediction.engine import FoldScales

    scales = FoldScales.of_run(pearson_run, [0, 1])
    each = [read(predict(pearson_run.path, data, tmp_path / f"f{f}.csv", folds=[f]).output)["prediction"].to_numpy()
            for f in (0, 1)]  # one fold alone predicts on its own scale, unchanged
    both = read(predict(pearson_run.path, data, tmp_path / "both.csv").output)["prediction"].to_numpy()
    z = sum(0.5 * (s - c) / d for s, c, d in zip(each, scales.center[:, 0], scales.scale[:, 0], strict=True))
    np.testing.assert_allclose(both, scales.center.mean() + scales.scale.mean() * z, rtol=1e-5, atol=1e-6)
    assert not np.allclose(both, (each[0] + each[1]) / 2, atol=1e-3)
    # its out-of-fold predictions, which a blend standardises it by, are put on that one scale too
    frame = out_of_fold([pearson_run], [[0, 1]])[0]
    for fold in (0, 1):
        values = frame.loc[frame["fold"] == fold, "prediction"]
        assert values.mean() == pytest.approx(scales.center.mean()) and values.std(ddof=0) == pytest.approx(
            scales.scale.mean())


def test_a_pearson_loss_fold_without_its_out_of_fold_file_is_named(pearson_run, tmp_path):
    from attnpool.prediction.engine import FoldScales

    copy = tmp_path / "copy"
    shutil.copytree(pearson_run.path, copy)
    (copy / "fold_1" / "oof.csv").unlink()
    with pytest.raises(RunError, match="fold 1 has no out-of-fold file .* Pearson loss puts its folds on one scale"):
        FoldScales.of_run(Run(copy), [0, 1])


def test_the_onnx_backend_and_serve_ensemble_a_pearson_run_by_its_fold_scales(pearson_run, data, tmp_path):
    pytest.importorskip("onnxruntime")
    from attnpool.serving.service import Service

    torch_out = read(predict(pearson_run.path, data, tmp_path / "torch.csv").output)["prediction"].to_numpy()
    onnx_out = read(predict(pearson_run.path, data, tmp_path / "onnx.csv", backend="onnx").output)
    np.testing.assert_allclose(onnx_out["prediction"].to_numpy(), torch_out, rtol=1e-4, atol=1e-5)
    service = Service.load(pearson_run.path, precision="fp32")
    assert service.ensemble.scales is not None and service.ensemble.scales.folds == [0, 1]
