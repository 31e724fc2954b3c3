"""predict --backend onnx on a run whose fold folder cannot be written, through the real export_onnx: the refusal is
the ONNX backend's own (the run must be writable, and the ways out), not export's "choose another --output"."""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("onnxruntime")

from attnpool.prediction import onnx_engine  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import make_run, save_tiny_encoder  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ro")
    return Run(make_run(folder / "run", save_tiny_encoder(folder / "encoder")))


def test_a_fold_folder_that_cannot_be_written_is_refused_with_the_runs_ways_out(run, monkeypatch):
    """export_onnx's own check said "cannot write --output RUN/fold_0/onnx/model.onnx ...; choose another --output"."""
    fold = run.fold_dir(0)
    access = os.access
    # root writes through a chmod: the folder is also reported unwritable, as it is to another user
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path) == str(fold) else access(path, mode))
    fold.chmod(0o555)
    try:
        with pytest.raises(RunError) as caught:
            onnx_engine.graph_file(run, 0)
    finally:
        fold.chmod(0o755)
    assert str(caught.value) == (
        f"fold 0: the ONNX backend makes the graph {run.onnx_file(0)} once, in the run, but the run folder {run.path} "
        f"is not writable ({fold} takes no new file: read-only or no permission); predict with --backend torch, "
        "or from a writable copy of the "
        f"run (cp -r {run.path} COPY, then --run COPY), or ask whoever can write it to run predict --backend onnx once "
        f"(the graph is then reused); `attnpool export --model {run.path} --fold 0 --output FILE.onnx` makes the graph "
        "elsewhere, to serve with onnxruntime")
    assert not run.onnx_file(0).parent.exists()


def test_a_fold_folder_that_takes_no_file_is_refused_before_the_int8_graph(run, monkeypatch):
    """A read-only mount passes os.access for root: a file is tried in the folder (here: the probe fails)."""
    monkeypatch.setattr(onnx_engine, "_stale", lambda graph, model_dir: graph.name != "model.onnx")

    def no_file(**kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_file)
    monkeypatch.setattr(onnx_engine, "_quantize", lambda source, target: pytest.fail("quantized in a read-only run"))
    with pytest.raises(RunError, match=rf"fold 1: the ONNX backend makes the graph .*model\.int8\.onnx once, in the "
                                       rf"run, but the run folder .* is not writable \({run.fold_dir(1)} takes no new "
                                       r"file: read-only or no permission\); serve with --backend torch"):
        onnx_engine.graph_file(run, 1, "int8", "serve")
