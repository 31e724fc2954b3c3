"""benchmarks/pppm_throughput.py's report, with every training and prediction stubbed: which way its ratios go."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_throughput as pt  # noqa: E402


def _section(name: str, rate: float, probe: float) -> pt.Section:
    """A section whose steady steps run ``rate`` samples/s, beside notebook probe steps at ``probe``."""
    return pt.Section.of(name, [(16, 20, 16 / rate)] * 6, [(16, 84, 16 / probe)] * 6, warmup=1)


def _table_row(out: str, side: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(side + " "))
    return line[len(side):].split()


@pytest.fixture
def report(tmp_path, monkeypatch, capsys):
    """main()'s printout with attnpool at fp16 and 200 samples/s, its fp32 copy at 100 and a CrossEncoder at 400,
    every section probed by a notebook at 100 samples/s."""
    (tmp_path / "train.csv").write_text("id\n")
    rng = np.random.default_rng(0)
    target = rng.random(60)
    data = SimpleNamespace(train_idx=np.arange(100), held_idx=np.arange(60), max_len=84, precision="fp16",
                           cfg=SimpleNamespace(resolved_freeze_word_embeddings=lambda: True),
                           task=SimpleNamespace(labels=target))
    noisy = lambda scale: target + rng.normal(0, scale, 60)  # noqa: E731
    preds = {"notebook fp32": noisy(0.3), "torch fp32": noisy(0.2)}
    stub = {
        "drop_missing_peers": lambda args: None,
        "load_data": lambda args: data,
        "build_models": lambda args, data: ([], []),
        "train_both": lambda args, data, ours, theirs, tmp: (_section("attnpool fp16", 200, 100), None),
        "one_fold_run": lambda folder, data, model: None,
        "prediction_paths": lambda args, data, run, theirs: {},
        "predict_all": lambda paths, repeats: ({"notebook fp32": 100.0, "torch fp32": 300.0}, preds),
        "train_fp32_reference": lambda args, data, model, notebook, tmp: _section("attnpool fp32", 100, 100),
        "predict_saved": lambda run, data, batch_size: noisy(0.2),
        "train_cross_encoder": lambda args, data, notebook, tmp: (_section("CrossEncoder fp32", 400, 100),
                                                                   noisy(0.25), 500.0),
        "padded_tokens": lambda data, batch_size: 20.0,
    }
    for name, fake in stub.items():
        monkeypatch.setattr(pt, name, fake)
    # main() sets up a script's logging (the root logger, transformers' verbosity): not this test process's
    monkeypatch.setattr(pt.logging, "basicConfig", lambda **kwargs: None)
    monkeypatch.setattr(transformers.logging, "set_verbosity_error", lambda: None)
    assert pt.main(["--data-dir", str(tmp_path), "--precision", "fp16", "--bootstrap", "50"]) == 0
    return capsys.readouterr().out


def test_a_peers_ratios_to_attnpool_go_the_way_of_its_ratio_to_the_notebook(report):
    """On a peer's row "vs notebook" was peer/notebook but "vs attnpool" attnpool/peer: a CrossEncoder twice as fast
    as attnpool read 0.50x, as if it were half as fast."""
    assert _table_row(report, "notebook fp32")[2] == "1.00x"  # no probe column of its own
    attnpool = _table_row(report, "attnpool fp16")
    assert attnpool[3:6] == ["2.00x", "1.00x", "1.00x"]  # vs notebook, vs attnpool (probe), (direct)
    cross = _table_row(report, "CrossEncoder fp32")
    assert cross[3:6] == ["4.00x", "2.00x", "2.00x"]  # twice attnpool's speed, on both ratios
    fp32 = _table_row(report, "attnpool fp32")
    assert fp32[3:6] == ["1.00x", "0.50x", "0.50x"]  # half attnpool fp16's
    # the verdict lines name their ratio attnpool/peer, and say so
    assert "train   attnpool fp16/CrossEncoder fp32   0.50x (probe-corrected; direct 0.50x" in report


def test_the_precision_speed_line_names_the_runs_precision(report):
    """It said "bf16/fp32 training speed" whatever precision attnpool trained at."""
    line = next(line for line in report.splitlines() if line.startswith("Pearson attnpool fp16 - attnpool fp32"))
    assert "(fp16/fp32 training speed 2.00x, probe-corrected)" in line and "bf16" not in line


def test_a_data_dir_given_without_train_csv_is_an_error(tmp_path, monkeypatch, capsys):
    """Without data in the default folder: skipped, exit 0 (CI has no data). A --data-dir given without train.csv (a
    mistyped path) printed the same "skipped" and exited 0, having measured nothing: now a usage error."""
    monkeypatch.setattr(pt, "load_data", lambda args: pytest.fail("nothing may load without data"))
    monkeypatch.setattr(pt.logging, "basicConfig", lambda **kwargs: None)
    monkeypatch.setattr(transformers.logging, "set_verbosity_error", lambda: None)
    monkeypatch.setattr(pt, "DEFAULT_DATA_DIR", str(tmp_path / "no_default"))
    assert pt.main(["--quick"]) == 0
    assert f"skipped: no PPPM train.csv in {tmp_path / 'no_default'}" in capsys.readouterr().out
    (tmp_path / "typo").mkdir()
    with pytest.raises(SystemExit) as exit_:
        pt.main(["--data-dir", str(tmp_path / "typo"), "--quick"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and "skipped" not in captured.out
    assert f"--data-dir {tmp_path / 'typo'}: no train.csv there" in captured.err


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_build_models_runs_on_an_encoder_whose_own_pooler_attnpool_drops(tmp_path, family):
    """build_models looked every key of the notebook encoder's state_dict() up in attnpool's encoder, which no longer
    holds the encoder's own (unused) pooler: KeyError 'pooler.dense.weight' before any training, in every mode."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from model_helpers import save_tiny_encoder

    folder = save_tiny_encoder(tmp_path / "enc", family=family)
    cfg = SimpleNamespace(pooling_options=dict(pt.NOTEBOOK_POOLER), head_dropout=0.1,
                          resolved_freeze_word_embeddings=lambda: False)
    args = SimpleNamespace(model=folder, seed=0)
    ours, theirs = pt.build_models(args, SimpleNamespace(cfg=cfg))
    assert "pooler.dense.weight" in theirs.encoder.state_dict()  # the notebook keeps it: the case that failed
    assert not any(k.startswith("pooler.") for k in ours.attnpool.encoder.state_dict())


def test_the_encoder_check_still_catches_a_weight_missing_or_different(tmp_path):
    """Skipping the dropped pooler must not hide any other difference between the two encoders."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from model_helpers import save_tiny_encoder

    folder = save_tiny_encoder(tmp_path / "enc")
    ours, theirs = pt.build_models(SimpleNamespace(model=folder, seed=0), SimpleNamespace(cfg=SimpleNamespace(
        pooling_options=dict(pt.NOTEBOOK_POOLER), head_dropout=0.1, resolved_freeze_word_embeddings=lambda: False)))
    with torch.no_grad():
        theirs.encoder.embeddings.word_embeddings.weight[0, 0] += 1.0
    with pytest.raises(AssertionError, match="embeddings.word_embeddings.weight"):
        pt.check_same_encoder(ours.attnpool.encoder, theirs.encoder)
    theirs.encoder.extra = torch.nn.Linear(2, 2)
    with pytest.raises(AssertionError, match="only the notebook's"):
        pt.check_same_encoder(ours.attnpool.encoder, theirs.encoder)
