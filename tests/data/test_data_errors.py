"""DataError is the ValueError of attnpool.data, and the package exports its public API."""

from __future__ import annotations

import pytest

import attnpool.data
from attnpool.data import DataError


def test_data_error_is_a_value_error(tmp_path):
    assert issubclass(DataError, ValueError)
    with pytest.raises(ValueError, match="no such file"):
        attnpool.data.read_table(tmp_path / "missing.csv")


def test_public_api():
    assert sorted(attnpool.data.__all__) == sorted(
        [
            "PPPM_TEMPLATE",
            "SUPPORTED_EXTENSIONS",
            "DataError",
            "LengthGroupedSampler",
            "Labels",
            "Texts",
            "build_texts",
            "check_columns",
            "iter_table",
            "length_sorted_batches",
            "load_pppm",
            "make_folds",
            "read_table",
            "table_columns",
            "validate_labels",
            "write_table",
        ]
    )
    for name in attnpool.data.__all__:
        assert getattr(attnpool.data, name) is not None


def test_a_validation_file_is_checked_on_its_own(tmp_path):
    """Joined to the training rows first, a missing column came back as blank texts and its rows were misnumbered."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    (tmp_path / "train.csv").write_text("text,label\nthe cat,0.5\na dog,0.1\nred mat,0.9\n")
    (tmp_path / "valid.csv").write_text("sentence,label\nthe cat,0.5\na dog,0.1\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"], model=encoder)
    with pytest.raises(DataError, match=r"valid.csv.*'text'"):
        load_task(cfg, logging.getLogger("test"))
    (tmp_path / "valid.csv").write_text("text,label\nthe cat,0.5\na dog,\nred,0.2\n")
    with pytest.raises(DataError, match=r"valid.csv: column 'label' has missing labels in data rows 2; every "
                                        "validation row needs its label"):
        load_task(cfg, logging.getLogger("test"))
