"""predict --backend onnx [--quantize int8]: the same predictions through ONNX Runtime, graphs exported once, int8
checked against float32 and refused with the figure when it departs."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

pytest.importorskip("onnxruntime")

from attnpool.prediction import FoldEnsemble, predict  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import make_run, save_tiny_encoder, write_toy_csv  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    encoder = save_tiny_encoder(folder / "encoder")
    run = make_run(folder / "run", encoder)
    write_toy_csv(folder / "test.csv", n=21, seed=3)
    return folder, run


def test_onnx_backend_matches_torch_and_exports_once(setup, tmp_path):
    folder, run = setup
    predict(run, folder / "test.csv", tmp_path / "torch.csv", progress=False, precision="fp32")
    predict(run, folder / "test.csv", tmp_path / "onnx.csv", progress=False, backend="onnx", batch_size=4)
    graph = Run(run).onnx_file(0)
    assert graph.is_file() and Run(run).onnx_file(1).is_file()
    stamp = graph.stat().st_mtime_ns
    torch_out, onnx_out = pd.read_csv(tmp_path / "torch.csv"), pd.read_csv(tmp_path / "onnx.csv")
    assert list(torch_out["id"]) == list(onnx_out["id"])
    assert (torch_out["prediction"] - onnx_out["prediction"]).abs().max() < 1e-5
    predict(run, folder / "test.csv", tmp_path / "again.csv", progress=False, backend="onnx")
    assert graph.stat().st_mtime_ns == stamp  # reused, not exported again


def test_int8_is_checked_against_float32(setup, tmp_path, caplog):
    folder, run = setup
    with caplog.at_level("INFO", logger="attnpool"):
        predict(run, folder / "test.csv", tmp_path / "int8.csv", progress=False, backend="onnx", quantize="int8",
                int8_tolerance=1.0)
    assert Run(run).onnx_file(0, "int8").is_file()
    assert "int8 ONNX models agree with float32 to" in caplog.text
    with pytest.raises(RunError, match=r"int8 ONNX models depart from the float32 models by up to [0-9.e-]+ .*above "
                                       r"the tolerance of 1e-09; predict with --quantize none"):
        predict(run, folder / "test.csv", tmp_path / "refused.csv", progress=False, backend="onnx", quantize="int8",
                int8_tolerance=1e-9)
    assert not (tmp_path / "refused.csv").exists()


def test_bad_backend_options(setup, tmp_path):
    folder, run = setup
    with pytest.raises(ValueError, match="--quantize int8 needs --backend onnx"):
        predict(run, folder / "test.csv", tmp_path / "x.csv", progress=False, quantize="int8")
    with pytest.raises(ValueError, match="backend must be 'torch' or 'onnx', got 'tf'"):
        predict(run, folder / "test.csv", tmp_path / "x.csv", progress=False, backend="tf")
    # the ONNX graph runs in float32 (or int8): --precision fp16 ran it in float32 without a word
    for precision in ("fp16", "bf16"):
        with pytest.raises(ValueError, match=f"--precision {precision} needs --backend torch"):
            predict(run, folder / "test.csv", tmp_path / "x.csv", progress=False, backend="onnx", precision=precision)
    assert not (tmp_path / "x.csv").exists()


def test_the_int8_check_runs_the_float32_models_where_they_are(setup, tmp_path, monkeypatch):
    """Serve keeps those models on --device for the word weights: the check names their device, never the default."""
    folder, run = setup
    devices, scores = [], FoldEnsemble.scores

    def spy(self, encodings, **options):
        devices.append(options.get("device"))
        return scores(self, encodings, **options)

    monkeypatch.setattr(FoldEnsemble, "scores", spy)
    predict(run, folder / "test.csv", tmp_path / "int8.csv", progress=False, backend="onnx", quantize="int8",
            int8_tolerance=1.0)
    assert devices == [torch.device("cpu")]  # the check's float32 pass, on the models' device


def test_int8_of_a_graph_with_external_weights_prepares_it_with_external_weights(setup, tmp_path, monkeypatch):
    """Past 1.5 GB the export keeps the weights in GRAPH.data; the prepared float32 copy must too (2 GB protobufs)."""
    import onnxruntime

    from attnpool.exporters import export_onnx
    from attnpool.prediction import onnx_engine

    folder, run = setup
    source = tmp_path / "big.onnx"
    export_onnx(Run(run).model_dir(0), source, external_data=True)  # as a large model's graph is written
    assert source.with_name("big.onnx.data").is_file()
    seen, prepare, quantize = [], onnx_engine.quant_pre_process, onnx_engine.quantize_dynamic

    def spy(*args, **options):
        seen.append(options["save_as_external_data"])
        return prepare(*args, **options)

    def quantize_spy(*args, **options):
        seen.append(options["use_external_data_format"])  # an int8 graph of a 1.5B model passes 2 GB too
        return quantize(*args, **options)

    monkeypatch.setattr(onnx_engine, "quant_pre_process", spy)
    monkeypatch.setattr(onnx_engine, "quantize_dynamic", quantize_spy)
    onnx_engine._quantize(source, tmp_path / "big.int8.onnx")
    onnx_engine._quantize(onnx_engine.graph_file(Run(run), 0), tmp_path / "small.int8.onnx")  # exported if missing
    assert seen == [True, True, False, False]
    assert (tmp_path / "big.int8.onnx.data").is_file() and not (tmp_path / "small.int8.onnx.data").exists()
    names = {i.name for i in onnxruntime.InferenceSession(str(tmp_path / "big.int8.onnx")).get_inputs()}
    assert "input_ids" in names and not list(tmp_path.glob(".int8.*")), "no temporary folder left"


def test_a_graph_that_fails_its_check_says_how_to_export_it_from_predict(tmp_path, monkeypatch):
    """The exporter's advice names export's options (--no-verify); predict has none: say which command takes them."""
    from attnpool.exporters import ExportError, VerificationError
    from attnpool.prediction import onnx_engine

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)

    def disagrees(*args, **kwargs):
        raise VerificationError("the exported graph disagrees with PyTorch on 'logits' by up to 0.01 (tolerance "
                                "0.0001)")

    monkeypatch.setattr(onnx_engine, "export_onnx", disagrees)
    with pytest.raises(ExportError) as caught:
        onnx_engine.graph_file(Run.open(tmp_path / "run"), 0)
    message = str(caught.value)
    assert message.startswith("fold 0: the exported graph disagrees with PyTorch")
    assert f"attnpool export --model {run} --fold 0 --output {Run.open(run).onnx_file(0)}" in message
    assert "--no-verify" in message and "--backend torch" in message


def test_a_graph_is_made_again_when_its_fold_model_is_not_the_one_it_was_made_from(tmp_path):
    """Freshness was 'the graph is newer than the model files': a fold copied in with older times kept its old graph."""
    import os
    import shutil

    from attnpool.exporters.models import source_stamp
    from attnpool.prediction import onnx_engine

    encoder = save_tiny_encoder(tmp_path / "encoder")
    run = Run.open(make_run(tmp_path / "run", encoder, folds=1))
    other = make_run(tmp_path / "other", encoder, folds=1, seed=7)  # another model for the same fold
    graph = onnx_engine.graph_file(run, 0)
    int8 = onnx_engine.graph_file(run, 0, "int8")
    made, made_int8 = graph.stat().st_mtime_ns, int8.stat().st_mtime_ns
    assert onnx_engine.graph_file(run, 0, "int8") == int8 and int8.stat().st_mtime_ns == made_int8  # reused
    assert graph.stat().st_mtime_ns == made
    old = graph.stat().st_mtime_ns - 10**12  # 1000 s before the graph was made
    weights = run.model_dir(0) / "model.safetensors"
    shutil.copyfile(other / "fold_0" / "model" / "model.safetensors", weights)
    os.utime(weights, ns=(old, old))  # as rsync -a or cp -p leave an older model
    assert onnx_engine._stale(graph, run.model_dir(0)) and onnx_engine._stale(int8, run.model_dir(0))
    onnx_engine.graph_file(run, 0, "int8")
    assert not onnx_engine._stale(graph, run.model_dir(0)) and not onnx_engine._stale(int8, run.model_dir(0))
    import onnx

    props = {p.key: p.value for p in onnx.load(str(int8), load_external_data=False).metadata_props}
    assert props["attnpool_source"] == source_stamp(run.model_dir(0))


def test_a_graph_made_by_another_attnpool_version_is_made_again(tmp_path, monkeypatch):
    from attnpool.prediction import onnx_engine

    run = Run.open(make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1))
    graph = onnx_engine.graph_file(run, 0)
    assert not onnx_engine._stale(graph, run.model_dir(0))
    monkeypatch.setattr(onnx_engine, "__version__", "99.0")
    assert onnx_engine._stale(graph, run.model_dir(0))
    graph.write_bytes(b"cut short")
    monkeypatch.undo()
    assert onnx_engine._stale(graph, run.model_dir(0))  # a damaged graph too


def test_a_model_the_exporter_refuses_gets_no_advice_that_cannot_work(tmp_path):
    """A recurrent layer cannot be traced: 'attnpool export ... --no-verify' was advised, and failed the same way."""
    from attnpool.exporters import ExportError
    from attnpool.prediction import onnx_engine

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)
    from attnpool.model import AttnPoolForSequenceClassification

    model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path / "encoder"), recurrent="lstm",
                                                           pooling_options={"attn_size": 8})
    model.save_pretrained(Run(run).model_dir(0))
    with pytest.raises(ExportError) as caught:
        onnx_engine.graph_file(Run.open(run), 0)
    assert str(caught.value).startswith("fold 0: ") and str(caught.value).endswith("; use --backend torch")
    assert "--no-verify" not in str(caught.value)


def test_a_graph_onnxruntime_cannot_load_is_named_with_the_way_out(setup, tmp_path, monkeypatch):
    from attnpool.prediction import onnx_engine

    def broken(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed: model.onnx.data not found")

    monkeypatch.setattr(onnx_engine.ort, "InferenceSession", broken)
    with pytest.raises(RunError, match=r"fold 0: onnxruntime cannot load .*model.onnx \(\[ONNXRuntimeError\].*\); "
                                       r"delete .*onnx to export it again, or use --backend torch"):
        onnx_engine.OnnxFoldEnsemble.load(Run(setup[1]), folds=[0])


def test_a_fold_model_that_does_not_load_is_a_run_error_as_with_torch(tmp_path):
    """A cut-short model.safetensors escaped the export as a SafetensorError (not a ValueError): a CLI traceback."""
    from attnpool.prediction import onnx_engine

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)
    weights = Run(run).model_dir(0) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(RunError, match=r"^fold 0: cannot load the model in .*: SafetensorError: .*re-train") as caught:
        onnx_engine.graph_file(Run.open(run), 0)
    assert "--backend torch" not in str(caught.value)  # it fails the same way


def test_an_exporter_failure_gives_no_option_predict_lacks(setup, tmp_path, monkeypatch):
    """The exporter's 'try another opset (--opset 18)' was repeated by predict, which has no --opset."""
    import shutil

    from torch.onnx._internal.exporter._errors import ConversionError

    from attnpool.exporters import ExportError
    from attnpool.prediction import onnx_engine

    def failing(*args, **kwargs):
        raise ConversionError("\x1b[96mThis is step 3/3\x1b[0m") from ValueError("No ONNX function for aten::x")

    run = tmp_path / "run"
    shutil.copytree(setup[1], run, ignore=shutil.ignore_patterns("onnx"))  # no graph: exported now
    monkeypatch.setattr(torch.onnx, "export", failing)
    with pytest.raises(ExportError) as caught:
        onnx_engine.graph_file(Run.open(run), 0)
    assert str(caught.value) == ("fold 0: torch.onnx.export (dynamo) could not convert this model to ONNX: ValueError: "
                                 "No ONNX function for aten::x; use --backend torch")


def test_an_int8_ensemble_frees_the_float32_models_it_loaded_for_the_check(setup, monkeypatch):
    """They served check() once, on 128 rows, and stayed beside the graphs that replace them for the whole prediction.
    The caller's (serve's, for the word weights) are kept."""
    import gc
    import weakref

    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    run, loaded, load = Run(setup[1]), [], FoldEnsemble.load.__func__

    def spy(cls, *args, **kwargs):
        ensemble = load(cls, *args, **kwargs)
        loaded.extend(weakref.ref(model) for model in ensemble.models)
        return ensemble

    monkeypatch.setattr(FoldEnsemble, "load", classmethod(spy))
    ensemble = OnnxFoldEnsemble.load(run, quantize="int8")
    encodings = dict(ensemble.tokenizer(["the cat sat", "a dog"], ["on the mat", "ran fast"]))
    ensemble.check(encodings, tolerance=1.0)
    gc.collect()
    assert loaded and all(ref() is None for ref in loaded)
    given = FoldEnsemble.load(run)
    ensemble = OnnxFoldEnsemble.load(run, quantize="int8", reference=given)
    ensemble.check(encodings, tolerance=1.0)
    assert ensemble.reference is given


def test_without_onnx_the_onnx_backend_names_it_not_onnxruntime(monkeypatch):
    """A slim image with onnxruntime but not onnx was told to install onnxruntime."""
    import importlib
    import sys

    from attnpool.prediction import onnx_engine

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx fails, as when it is not installed
    try:
        importlib.reload(onnx_engine)
        with pytest.raises(ImportError, match=r"^predict --backend onnx needs onnx: pip install 'attnpool\[onnx\]'$"):
            onnx_engine.OnnxFoldEnsemble.load(None)
    finally:
        monkeypatch.undo()
        importlib.reload(onnx_engine)


def _int8_ensemble(setup):
    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    ensemble = OnnxFoldEnsemble.load(Run(setup[1]), quantize="int8")
    encodings = dict(ensemble.tokenizer(["the cat sat", "a dog", "it rained"], ["on the mat", "ran fast", "all day"]))
    return ensemble, encodings


def test_the_int8_check_is_measured_at_batch_size_1_and_the_predictions_one(setup, monkeypatch):
    """ORT quantizes each batch's activations with one scale: a check in batches of 64 alone passed, and predictions
    at --batch-size 1 departed from float32 by 2.5 times the tolerance."""
    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    ensemble, encodings = _int8_ensemble(setup)
    sizes, real = [], OnnxFoldEnsemble.scores

    def batch_dependent(self, encodings, *, batch_size, **options):
        sizes.append(batch_size)
        return real(self, encodings, batch_size=batch_size, **options) + (0.5 if batch_size == 1 else 0.0)

    monkeypatch.setattr(OnnxFoldEnsemble, "scores", batch_dependent)
    with pytest.raises(RunError, match=r"depart from the float32 models by up to 0\.5\d* \(largest \|difference\| of "
                                       r"a score over the first 3 rows scored in batches of 1, 5, 64\)"):
        ensemble.check(encodings, tolerance=0.1, batch_size=5)
    assert sorted(sizes) == [1, 5, 64]
    sizes.clear()
    with pytest.raises(RunError, match="in batches of 1, 64"):
        ensemble.check(encodings, tolerance=0.1)
    assert sorted(sizes) == [1, 64]


def test_a_nan_int8_score_or_a_nan_tolerance_does_not_pass_the_check(setup, tmp_path, monkeypatch):
    """`diff > tolerance` is False for NaN: a NaN score passed, and --int8-tolerance nan switched the check off."""
    import numpy as np

    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    ensemble, encodings = _int8_ensemble(setup)
    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError, match=r"--int8-tolerance \(int8_tolerance\) must be a finite number >= 0"):
            ensemble.check(encodings, tolerance=bad)
    folder, run = setup
    with pytest.raises(ValueError, match="--int8-tolerance"):
        predict(run, folder / "test.csv", tmp_path / "nan.csv", progress=False, backend="onnx", quantize="int8",
                int8_tolerance=float("nan"))
    assert not (tmp_path / "nan.csv").exists()
    real = OnnxFoldEnsemble.scores
    monkeypatch.setattr(OnnxFoldEnsemble, "scores", lambda self, e, **k: np.where(
        np.arange(len(e["input_ids"])) == 1, np.nan, real(self, e, **k)))
    with pytest.raises(RunError, match=r"differ from the float32 models' by nan \(a non-finite score\)"):
        ensemble.check(encodings, tolerance=1.0)


def test_quantizing_removes_what_a_killed_quantization_left_not_a_live_one(setup, tmp_path):
    """A SIGKILLed quantization left .int8.XXXX/ (a prepared float32 graph and a half-written int8 one), forever."""
    import socket
    import subprocess
    import sys

    from attnpool.prediction import onnx_engine

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    leftovers = {}
    for name, pid in (("dead", child.pid), ("live", os.getppid())):
        leftovers[name] = tmp_path / f".int8.{name}1234"
        leftovers[name].mkdir()
        (leftovers[name] / "prepared.onnx").write_bytes(b"half")
        (leftovers[name] / ".owner").write_text(f"{socket.gethostname()} {pid}\n")
    onnx_engine._quantize(onnx_engine.graph_file(Run(setup[1]), 0), tmp_path / "model.int8.onnx")
    assert (tmp_path / "model.int8.onnx").is_file()
    assert not leftovers["dead"].exists() and leftovers["live"].is_dir()
    assert [p.name for p in tmp_path.glob(".int8.*")] == [".int8.live1234"]


def test_predict_checks_int8_at_its_own_batch_size_and_refuses_a_bad_tolerance_before_exporting(setup, tmp_path,
                                                                                               monkeypatch):
    """The check scored in batches of 64 whatever --batch-size; a NaN tolerance was refused only after every fold's
    graph was exported and quantized."""
    import importlib

    # the class predict uses: a test above reloads onnx_engine, whose OnnxFoldEnsemble is then another class
    onnx_ensemble = importlib.import_module("attnpool.prediction.predict").OnnxFoldEnsemble
    folder, run = setup
    exports = []
    real_load = onnx_ensemble.load.__func__
    monkeypatch.setattr(onnx_ensemble, "load",
                        classmethod(lambda cls, *a, **k: exports.append(1) or real_load(cls, *a, **k)))
    with pytest.raises(ValueError, match="--int8-tolerance"):
        predict(run, folder / "test.csv", tmp_path / "nan.csv", progress=False, backend="onnx", quantize="int8",
                int8_tolerance=float("nan"))
    assert exports == []
    sizes = []
    real_compare = onnx_ensemble.compare  # what predict checks: the written scores (check() judges one run's alone)
    monkeypatch.setattr(onnx_ensemble, "compare",
                        lambda self, e, **k: sizes.append(k.get("batch_size")) or real_compare(self, e, **k))
    predict(run, folder / "test.csv", tmp_path / "int8.csv", progress=False, backend="onnx", quantize="int8",
            int8_tolerance=1.0, batch_size=3)
    assert sizes == [3]
