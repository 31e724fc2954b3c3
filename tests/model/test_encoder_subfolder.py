"""from_encoder with a ``subfolder`` option on a local folder: a missing one is named with what the folder holds."""

from __future__ import annotations

import re

import pytest

from attnpool.model import AttnPoolForSequenceClassification
from model_helpers import save_tiny_encoder


def test_a_subfolder_the_folder_lacks_is_named_with_the_folders_entries(tmp_path):
    """transformers said "Unrecognized model ... Should have a `model_type` key", naming neither."""
    folder = save_tiny_encoder(tmp_path / "enc")
    (tmp_path / "enc" / "extra").mkdir()
    with pytest.raises(FileNotFoundError) as error:
        AttnPoolForSequenceClassification.from_encoder(folder, encoder_kwargs={"subfolder": "nope"})
    message = str(error.value)
    assert message.startswith(f"subfolder 'nope' is not in {tmp_path / 'enc'} (it contains: "), message
    assert re.search(r"config\.json, extra/, .*model\.safetensors", message), message
    assert "Unrecognized model" not in message


def test_an_existing_subfolder_still_loads(tmp_path):
    save_tiny_encoder(tmp_path / "outer" / "enc")
    model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path / "outer"), encoder_kwargs={"subfolder": "enc"},
                                                           num_labels=2)
    assert model.config.num_labels == 2
