"""Loading a model whose user pooler is not imported: the registry's message alone, without the generic tail.

``load_for_export`` appended "Its files are readable, so keep them: check that this environment can build it
(transformers ... knows its encoder, the packages it needs are installed, ...)" after the registry's "import it
before loading (CLI: --import ...)", pointing a newcomer at transformers and packages instead of the one import.
"""

from __future__ import annotations

import pytest
import torch

import attnpool
from attnpool.exporters import load_for_export
from attnpool.exporters.models import ModelLoadError
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.pooling import Pooler, registry
from attnpool.pooling.registry import UnknownPoolerError
from model_helpers import tiny_config


class ExportUserMean(Pooler):
    """A user's masked mean, defined outside attnpool."""

    name = "test_export_user_mean"

    def pool(self, hidden_states, mask):
        m = mask.unsqueeze(-1).to(hidden_states.dtype)
        return (hidden_states * m).sum(1) / m.sum(1).clamp(min=1), None


def test_an_unimported_user_pooler_gives_only_the_registrys_message(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    attnpool.register_pooler(ExportUserMean)
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=ExportUserMean.name).save_pretrained(
        tmp_path)
    registry._REGISTRY.pop(registry._normalize(ExportUserMean.name))
    module = ExportUserMean.__module__
    with pytest.raises(ModelLoadError) as err:
        load_for_export(tmp_path)
    assert str(err.value) == (
        f"cannot load the model in {tmp_path}: Unknown pooler 'test_export_user_mean': this model's pooler "
        f"'test_export_user_mean' is defined in module {module!r} (see its config); import it before loading (CLI: "
        f"--import {module}; run from the folder holding {module.replace('.', '/')}.py, or add that folder to "
        "PYTHONPATH)")
    assert isinstance(err.value.__cause__, UnknownPoolerError)


def test_the_unknown_pooler_error_is_still_a_value_error():
    with pytest.raises(ValueError, match=r"^Unknown pooler 'atention'\. Did you mean 'attention'\?") as err:
        attnpool.build_pooler("atention", 8)
    assert type(err.value) is UnknownPoolerError
