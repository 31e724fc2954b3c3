"""load_task's token-count line and truncation warnings: each file's texts under that file's name."""

from __future__ import annotations

import logging

from attnpool.config import TrainConfig
from attnpool.data.task import load_task
from model_helpers import save_tiny_encoder


def test_the_token_counts_and_truncation_name_the_file_they_count(tmp_path, caplog):
    """The training file's name stood over the training and validation texts together (5 texts for 3 rows)."""
    encoder = save_tiny_encoder(tmp_path / "encoder")
    (tmp_path / "train.csv").write_text("text,label\nthe cat,0.5\na dog,0.1\nred mat,0.9\n")
    long = " ".join(["the cat sat on a red mat"] * 6)
    (tmp_path / "valid.csv").write_text(f"text,label\n{long},0.5\nthe dog,0.1\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"], model=encoder, max_length=8)
    with caplog.at_level(logging.INFO, logger="test"):
        task = load_task(cfg, logging.getLogger("test"))
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"{tmp_path / 'train.csv'}: 3 texts, tokens per text") for line in lines), lines
    assert any(line.startswith(f"{tmp_path / 'valid.csv'}: 2 texts, tokens per text") for line in lines), lines
    truncated = [line for line in lines if "were truncated" in line]
    assert truncated == [f"{tmp_path / 'valid.csv'}: 1 of 2 texts are longer than max_length=8 tokens and were "
                         "truncated"]
    assert len(task.encodings["input_ids"]) == 5  # both files' rows, in order: the long one is the fourth
    assert [len(ids) for ids in task.encodings["input_ids"]][3] == 8
