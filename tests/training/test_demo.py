from __future__ import annotations

from attnpool.training.demo import KEYS, make_key_token_data, run_demo
from model_helpers import save_tiny_encoder


def test_each_text_holds_one_key_word_whose_score_is_the_label():
    frame = make_key_token_data(60, seed=0, min_words=5, max_words=30)
    for text, label in zip(frame["text"], frame["label"], strict=True):
        words = text.split()
        assert 5 <= len(words) <= 30
        keys = [w for w in words if w in KEYS]
        assert len(keys) == 1 and KEYS[keys[0]] == label
    assert set(frame["label"]) == set(KEYS.values())


def test_demo_runs_end_to_end_on_a_tiny_encoder(tmp_path, capsys):
    scores = run_demo(output_dir=tmp_path / "demo", model=save_tiny_encoder(tmp_path / "enc"), n_train=32, n_valid=16)
    assert set(scores) == {"mean", "attention"}
    out = capsys.readouterr().out
    assert "validation Pearson:" in out and "tokens the attention pooler weighs most" in out
