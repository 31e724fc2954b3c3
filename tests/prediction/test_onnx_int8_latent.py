"""--quantize int8 of a latent_attention run: its rank-3 latents stay float (ONNX Runtime's per-channel int8 MatMul
refuses them), and a quantized graph ONNX Runtime cannot run is deleted, not reused, with advice naming int8."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import yaml

pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from attnpool.config import TrainConfig  # noqa: E402
from attnpool.model import AttnPoolForSequenceClassification  # noqa: E402
from attnpool.prediction import onnx_engine, predict  # noqa: E402
from attnpool.prediction.onnx_engine import OnnxFoldEnsemble  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import save_tiny_encoder, write_toy_csv  # noqa: E402

LATENT = {"num_latents": 16, "num_heads": 4}


@pytest.fixture(scope="module")
def latent_run(tmp_path_factory):
    """A one-fold regression run pooled by latent_attention, and a file to predict."""
    folder = tmp_path_factory.mktemp("onnx_int8_latent")
    encoder = save_tiny_encoder(folder / "encoder")
    run = folder / "run"
    cfg = TrainConfig(label="label", task="regression", model=encoder, folds=1, max_length=16, train_file="train.csv",
                      text_cols=["first", "second"], pooling="latent_attention", pooling_options=LATENT)
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    Run(run).write_info({"task": "regression", "classes": None, "label": "label", "id_col": "id", "num_folds": 1})
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="latent_attention", pooling_options=LATENT)
    model.save_pretrained(run / "fold_0" / "model", tokenizer=AutoTokenizer.from_pretrained(encoder))
    (run / "fold_0" / "metrics.json").write_text(json.dumps({"pearson": 0.5}))
    write_toy_csv(folder / "test.csv", n=12, seed=3)
    return folder, run


def test_int8_predicts_a_latent_attention_run(latent_run, tmp_path):
    """DynamicQuantizeMatMul refused the [heads, head size, latents] weight's per-channel zero point at the first
    batch, so every int8 prediction of a latent_attention run failed."""
    folder, run = latent_run
    predict(run, folder / "test.csv", tmp_path / "fp32.csv", progress=False, backend="onnx")
    predict(run, folder / "test.csv", tmp_path / "int8.csv", progress=False, backend="onnx", quantize="int8",
            int8_tolerance=1.0)
    ops = {node.op_type for node in onnx.load(str(Run(run).onnx_file(0, "int8"))).graph.node}
    assert "DynamicQuantizeMatMul" in ops or "MatMulInteger" in ops  # the 2-D weights are int8 still
    fp32, int8 = pd.read_csv(tmp_path / "fp32.csv"), pd.read_csv(tmp_path / "int8.csv")
    assert len(int8) == 12 and (fp32["prediction"] - int8["prediction"]).abs().max() < 1.0


def test_a_quantized_graph_that_cannot_run_is_deleted_and_the_advice_names_quantize_none(latent_run, monkeypatch):
    """A broken model.int8.onnx stayed in the run and was reused, and the error said only 'predict with --backend
    torch', from serve too."""
    _, run = latent_run
    command = "serve"
    graph = Run(run).onnx_file(0, "int8")
    graph.unlink(missing_ok=True)
    with monkeypatch.context() as patch:
        patch.setattr(onnx_engine, "_not_2d_weights", lambda graph: [])  # quantized as before the fix: broken
        with pytest.raises(RunError, match=rf"fold 0: onnxruntime cannot run the quantized graph .*model\.int8\.onnx "
                                           rf"\(.*\); it was deleted .*; {command} with --quantize none$"):
            OnnxFoldEnsemble.load(Run(run), quantize="int8", command=command)
    assert not graph.exists()  # made again, working, at the next try
    ensemble = OnnxFoldEnsemble.load(Run(run), quantize="int8", command=command)
    assert graph.is_file()
    encodings = {"input_ids": [[2, 5, 6, 3], [2, 7, 3]], "attention_mask": [[1, 1, 1, 1], [1, 1, 1]]}
    assert ensemble.scores(encodings, batch_size=2).shape[0] == 2

    def failing(self, *args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : some kernel")

    monkeypatch.setattr(onnx_engine.ort.InferenceSession, "run", failing)
    with pytest.raises(RunError, match=rf"fold 0: onnxruntime failed on a batch of 2 rows x 4 tokens \(.*some "
                                       rf"kernel\); {command} with --quantize none$"):
        ensemble.scores(encodings, batch_size=2)


def test_without_onnx_the_message_names_the_command_that_needs_it(monkeypatch):
    monkeypatch.setattr(onnx_engine, "ort", None)
    monkeypatch.setattr(onnx_engine, "_MISSING", "onnxruntime")
    with pytest.raises(ImportError, match=r"^serve --backend onnx needs onnxruntime: pip install 'attnpool\[onnx\]'$"):
        OnnxFoldEnsemble.load(Run("nowhere"), command="serve")
