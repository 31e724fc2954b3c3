"""A failed export removes the folders it made for its output (it said "Nothing was written to deep/a/b")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnpool.exporters import VerificationError, export_onnx
from attnpool.model import AttnPoolForSequenceClassification
from model_helpers import tiny_config, tiny_tokenizer

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=2)
    folder = tmp_path_factory.mktemp("saved") / "model"
    model.save_pretrained(folder, tokenizer=tiny_tokenizer())
    return folder


def _fake_exporter(monkeypatch):
    import attnpool.exporters.onnx as export_module

    program = SimpleNamespace(model=SimpleNamespace(metadata_props={}, opset_imports={"": 20}),
                              save=lambda p, **kwargs: Path(p).write_bytes(b"onnx"))
    monkeypatch.setattr(export_module, "_export_program", lambda *args: program)
    return program


def test_a_failed_export_leaves_no_folder_it_made(saved, tmp_path, monkeypatch):
    """The message said "Nothing was written to deep/a/b", and deep/a/b was left behind, empty."""
    import attnpool.exporters.onnx as export_module

    _fake_exporter(monkeypatch)

    def disagree(*args, **kwargs):
        raise VerificationError("the exported graph disagrees with PyTorch")

    monkeypatch.setattr(export_module, "verify_onnx", disagree)
    (tmp_path / "kept").mkdir()
    with pytest.raises(VerificationError, match=f"Nothing was written to {tmp_path / 'deep' / 'a' / 'b'}$"):
        export_onnx(saved, tmp_path / "deep" / "a" / "b" / "model.onnx")
    with pytest.raises(VerificationError):
        export_onnx(saved, tmp_path / "kept" / "new" / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # the folder that was there before stays
    assert list((tmp_path / "kept").iterdir()) == []
