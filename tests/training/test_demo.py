from __future__ import annotations

import numpy as np

from attnpool.training.demo import NEGATIVE, POSITIVE, make_key_token_data, run_demo
from model_helpers import save_tiny_encoder


def test_key_token_data_label_counts_the_key_words():
    frame = make_key_token_data(50, seed=0, length=20)
    for text, label in zip(frame["text"], frame["label"], strict=True):
        words = text.split()
        assert len(words) == 20
        n_pos = sum(w in POSITIVE for w in words)
        n_neg = sum(w in NEGATIVE for w in words)
        assert n_pos + n_neg >= 1
        assert label == (n_pos - n_neg + 2) / 4
    assert set(np.unique(frame["label"])) <= {0.0, 0.25, 0.5, 0.75, 1.0}


def test_demo_runs_end_to_end_on_a_tiny_encoder(tmp_path, capsys):
    scores = run_demo(output_dir=tmp_path / "demo", model=save_tiny_encoder(tmp_path / "enc"), n_train=32, n_valid=16)
    assert set(scores) == {"mean", "attention"}
    out = capsys.readouterr().out
    assert "validation Pearson:" in out and "tokens the attention pooler weighs most" in out
