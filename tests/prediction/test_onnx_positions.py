"""predict --backend onnx caps a run's max_length at its encoder's positions as --backend torch does, and an
onnxruntime failure is one clear RunError, not a traceback."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

ort = pytest.importorskip("onnxruntime")

from attnpool.cli import main  # noqa: E402
from attnpool.model import AttnPoolForSequenceClassification  # noqa: E402
from attnpool.model.encoders import position_limit  # noqa: E402
from attnpool.prediction import predict  # noqa: E402
from attnpool.prediction.onnx_engine import OnnxFoldEnsemble  # noqa: E402
from attnpool.runs import Run, RunError  # noqa: E402
from model_helpers import WORDS, make_run, save_tiny_encoder  # noqa: E402


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A run whose config.yaml says max_length 128 on a BERT of 64 positions, and a file with a row of 96 words."""
    folder = tmp_path_factory.mktemp("onnx_positions")
    run = make_run(folder / "run", save_tiny_encoder(folder / "encoder"), folds=1)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["max_length"] = 128  # over the encoder's 64 positions
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    pd.DataFrame({"id": ["long", "short"], "first": [" ".join(WORDS * 6), "the cat"],
                  "second": ["dog", "red"]}).to_csv(folder / "test.csv", index=False)
    return folder, run


def test_onnx_backend_caps_max_length_at_the_encoder_positions_as_torch(long_run, tmp_path, caplog):
    folder, run = long_run
    outputs = {}
    for backend in ("torch", "onnx"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="attnpool"):
            predict(run, folder / "test.csv", tmp_path / f"{backend}.csv", progress=False, backend=backend,
                    precision="fp32")
        assert "has max_length 128 (its config.yaml), over the 64 tokens its encoder reads: rows are truncated " \
               "at 64 tokens" in caplog.text, backend
        outputs[backend] = pd.read_csv(tmp_path / f"{backend}.csv")
    assert list(outputs["torch"]["id"]) == list(outputs["onnx"]["id"]) == ["long", "short"]
    assert (outputs["torch"]["prediction"] - outputs["onnx"]["prediction"]).abs().max() < 1e-5


@pytest.mark.parametrize("family", ["bert", "roberta", "deberta-v3"])
def test_saved_position_limit_is_the_loaded_models_without_loading_it(tmp_path, family):
    from attnpool.prediction.positions import saved_position_limit

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder", family), folds=1)
    folder = Run(run).model_dir(0)
    expected = {"bert": 64, "roberta": 68, "deberta-v3": None}[family]  # RoBERTa: 70 - pad_token_id - 1
    assert position_limit(AttnPoolForSequenceClassification.from_pretrained(folder)) == expected
    assert saved_position_limit(folder) == expected


def _failing_run(self, *args, **kwargs):
    raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Attempting to broadcast an axis")


def test_an_onnxruntime_failure_is_a_run_error_naming_the_fold_and_the_batch(long_run, monkeypatch):
    _, run = long_run
    ensemble = OnnxFoldEnsemble.load(Run(run))
    encodings = {"input_ids": [[2, 5, 6, 3], [2, 7, 3]], "attention_mask": [[1, 1, 1, 1], [1, 1, 1]]}
    assert ensemble.scores(encodings, batch_size=2).shape[0] == 2
    monkeypatch.setattr(ort.InferenceSession, "run", _failing_run)
    with pytest.raises(RunError, match=r"fold 0: onnxruntime failed on a batch of 2 rows x 4 tokens "
                                       r"\(.*Attempting to broadcast an axis\); predict with --backend torch") as info:
        ensemble.scores(encodings, batch_size=2)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_the_cli_prints_an_onnxruntime_failure_on_one_line_exit_2(long_run, tmp_path, monkeypatch, capsys):
    folder, run = long_run
    monkeypatch.setattr(ort.InferenceSession, "run", _failing_run)
    code = main(["predict", "--run", str(run), "--input", str(folder / "test.csv"), "--output",
                 str(tmp_path / "p.csv"), "--backend", "onnx", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("attnpool predict: error: fold 0: onnxruntime failed on a batch of ")
    assert "predict with --backend torch" in err[-1]
    assert not any("Traceback" in line for line in err)
