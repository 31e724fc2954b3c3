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
