"""predict --backend onnx on a run that cannot be written (shared, read-only): the graph it would export into the run
is refused with the ways out, not a bare "[Errno 30] Read-only file system"."""

from __future__ import annotations

import errno

import pytest

pytest.importorskip("onnxruntime")

from attnpool.prediction import onnx_engine  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import make_run, save_tiny_encoder  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ro")
    return Run(make_run(folder / "run", save_tiny_encoder(folder / "encoder")))


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_graph_to_make_in_a_read_only_run_says_the_ways_out(run, monkeypatch, code):
    graph = run.onnx_file(1)

    def export_onnx(model, output, **kwargs):
        raise PermissionError(code, "Read-only file system", str(graph.parent))

    monkeypatch.setattr(onnx_engine, "export_onnx", export_onnx)
    with pytest.raises(RunError, match="fold 1: the ONNX backend makes the graph .*model.onnx once, in the run, but "
                                       f"the run folder {run.path} is not writable") as caught:
        onnx_engine.graph_file(run, 1)
    message = str(caught.value)
    assert "--backend torch" in message and f"cp -r {run.path} COPY" in message
    assert f"attnpool export --model {run.path} --fold 1 --output FILE.onnx" in message


def test_other_export_errors_pass_unchanged(run, monkeypatch):

    def export_onnx(model, output, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(onnx_engine, "export_onnx", export_onnx)
    with pytest.raises(OSError, match="Input/output error"):
        onnx_engine.graph_file(run, 0)


def test_an_int8_graph_to_make_for_serve_names_serve_and_int8(run, monkeypatch):
    """The ways out said "predict" under serve, and "predict --backend onnx once", which makes no int8 graph."""

    def quantize(source, target):
        raise PermissionError(errno.EROFS, "Read-only file system", str(target.parent))

    monkeypatch.setattr(onnx_engine, "_stale", lambda graph, model_dir: graph.name != "model.onnx")
    monkeypatch.setattr(onnx_engine, "_quantize", quantize)
    with pytest.raises(RunError) as caught:
        onnx_engine.graph_file(run, 1, "int8", "serve")
    message = str(caught.value)
    assert "serve with --backend torch" in message and "run serve --backend onnx --quantize int8 once" in message
    assert "predict" not in message and "attnpool export" not in message  # export makes no int8 graph


def test_a_broken_quantized_graph_that_cannot_be_deleted_is_refused_all_the_same(tmp_path, monkeypatch):
    """A run this process cannot write: deleting the graph raised a bare PermissionError over the refusal."""
    graph = tmp_path / "model.int8.onnx"
    graph.write_bytes(b"")

    class Session:
        def get_inputs(self):
            return []

        def run(self, names, feed):
            raise RuntimeError("b zero point is not valid")

    def unlink(self, missing_ok=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(onnx_engine.Path, "unlink", unlink)
    refusal = onnx_engine._try_quantized(Session(), graph, 0, lambda text: {"input_ids": [1, 2]}, "serve with x")
    assert isinstance(refusal, RunError) and graph.exists()
    assert str(refusal).endswith("it could not be deleted (Permission denied: delete it where the run can be "
                                 "written); serve with x")
