"""Fixtures shared by the data tests."""

from __future__ import annotations

import pytest

from model_helpers import tiny_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """A tiny tokenizer's folder, as ``TrainConfig.model`` takes it."""
    folder = tmp_path_factory.mktemp("tok")
    tiny_tokenizer().save_pretrained(folder)
    return str(folder)
