"""Where a save writes (one process only) and where a load is pointed when given a train run or one of its folds;
the card's data size with a validation file of its own."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from attnpool.config import TrainConfig
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE, TrainingFacts, model_card
from attnpool.training.fold import training_facts
from model_helpers import tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def model():
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="mean")


# ---------------------------------------------------------------- finding 2: only the saving process writes


def test_a_process_that_must_not_save_writes_neither_tokenizer_nor_card(model, tmp_path, monkeypatch):
    """Rank 1 under torch.distributed wrote README.md and the tokenizer's files (the weights it did not)."""
    monkeypatch.setattr(model, "should_save_on_this_rank", lambda is_main_process: False)
    model.save_pretrained(tmp_path / "rank1", tokenizer=tiny_tokenizer())
    written = sorted(p.name for p in (tmp_path / "rank1").iterdir()) if (tmp_path / "rank1").exists() else []
    assert not [name for name in written if name == CARD_FILE or name.startswith("tokenizer")], written


def test_is_main_process_false_writes_no_tokenizer(model, tmp_path):
    model.save_pretrained(tmp_path / "other", tokenizer=tiny_tokenizer(), is_main_process=False)
    written = sorted(p.name for p in (tmp_path / "other").iterdir()) if (tmp_path / "other").exists() else []
    assert not [name for name in written if name == CARD_FILE or name.startswith("tokenizer")], written


def test_the_main_process_still_writes_tokenizer_and_card(model, tmp_path):
    model.save_pretrained(tmp_path / "main", tokenizer=tiny_tokenizer())
    assert {CARD_FILE, "tokenizer.json", "config.json", "model.safetensors"} <= {
        p.name for p in (tmp_path / "main").iterdir()}


# ---------------------------------------------------------------- finding 4: a run or a fold folder given


def _run_like(root: Path, model, folds=(0, 1)) -> Path:
    for fold in folds:
        model.save_pretrained(root / f"fold_{fold}" / "model")
    return root


def test_from_pretrained_on_a_run_names_a_folds_model_and_the_trained_folds(model, tmp_path):
    run = _run_like(tmp_path / "run", model)
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(run)
    message = str(err.value)
    assert "it is a train run: load one fold's model, e.g. " in message
    assert str(run / "fold_0" / "model") in message and "(trained folds: 0, 1)" in message


def test_from_pretrained_on_a_fold_folder_names_its_model(model, tmp_path):
    run = _run_like(tmp_path / "run", model, folds=(1,))
    with pytest.raises(FileNotFoundError, match=re.escape(f"the model is in {run / 'fold_1' / 'model'}")):
        AttnPoolForSequenceClassification.from_pretrained(run / "fold_1")


def test_from_pretrained_on_another_folder_says_only_that_it_is_no_model_folder(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(tmp_path / "x")
    assert str(err.value).endswith("it is not a saved attnpool model folder")


# ---------------------------------------------------------------- finding 5: rows with a validation file


def test_a_valid_file_runs_card_counts_the_data_files_rows_and_gives_the_validation_files_its_own_line(tmp_path):
    """A 32-row train.csv with a 12-row valid.csv said "Size: 44 rows (32 for training, 12 for validation)"."""
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"])
    data = SimpleNamespace(num_rows=44, label_name="label")
    run = SimpleNamespace(path=tmp_path / "run")
    facts = training_facts(cfg, data, 0, np.arange(32), np.arange(32, 44), run)
    assert (facts.rows, facts.train_rows, facts.valid_rows) == (32, 32, 12)
    card = model_card(tiny_config_model().config, training=facts)
    assert "dataset_size:32" in card and "dataset_size:44" not in card
    assert "- **Size:** 32 rows\n" in card
    assert f"- **Validation file:** `{tmp_path / 'valid.csv'}` (12 rows)" in card


def test_a_folds_card_keeps_the_split_on_the_size_line():
    facts = TrainingFacts(data_file="train.csv", rows=40, train_rows=32, valid_rows=8, fold=0, folds=5)
    card = model_card(tiny_config_model().config, training=facts)
    assert "- **Size:** 40 rows (32 for training, 8 for validation)" in card and "dataset_size:40" in card


def tiny_config_model():
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="mean")
