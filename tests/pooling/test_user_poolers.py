"""A user's pooler: what registration refuses, and how its config saves, names its module and reloads."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
from collections.abc import Iterator

import pytest
import torch

import attnpool
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.pooling import Pooler, available_poolers, build_pooler, get_pooler_class, registry
from model_helpers import batch, tiny_config


class TemperatureMean(Pooler):
    """A softmax over a learned score at a temperature, the option that must be saved."""

    name = "test_user_temperature"
    has_weights = True
    config_keys = ("temperature",)

    def __init__(self, hidden_size: int, temperature: float = 1.0) -> None:
        super().__init__(hidden_size)
        self.temperature = temperature
        self.score = torch.nn.Linear(hidden_size, 1)

    def pool(self, hidden_states, mask):
        scores = (self.score(hidden_states).squeeze(-1) / self.temperature).masked_fill(~mask, -1e4)
        weights = torch.softmax(scores, -1) * mask
        return torch.einsum("bt,bth->bh", weights, hidden_states), weights


@contextlib.contextmanager
def registered(cls: type[Pooler]) -> Iterator[type[Pooler]]:
    """``cls`` registered for the block only, so the contract suite never sees it."""
    attnpool.register_pooler(cls)
    try:
        yield cls
    finally:
        registry._REGISTRY.pop(registry._normalize(cls.name), None)


def test_every_built_in_saves_all_its_constructor_options():
    for name in available_poolers():
        cls = get_pooler_class(name)
        unsaved = set(registry._constructor_options(cls)) - set(cls.config_keys)
        assert unsaved == set(registry._UNSAVED_OPTIONS.get(cls.name, ())), name


def test_an_option_missing_from_config_keys_is_refused_at_registration():
    class Forgetful(TemperatureMean):
        name = "test_user_forgetful"
        config_keys = ()

    with pytest.raises(ValueError, match=r"^Forgetful: constructor option\(s\) temperature are not in its config_keys "
                       r"\(\), so get_config\(\) would not save them and a reloaded pooler would take their defaults; "
                       r"add them to config_keys \(each kept as an attribute of the same name\), e\.g\. "
                       r"config_keys = \('temperature',\)$"):
        attnpool.register_pooler(Forgetful)
    assert "test_user_forgetful" not in available_poolers()


def test_an_option_in_config_keys_is_saved_and_restored():
    with registered(TemperatureMean):
        pooler = build_pooler("test_user_temperature", 8, temperature=0.05)
        assert build_pooler(pooler.get_config()).temperature == 0.05


@pytest.mark.parametrize("name", ["my+pool", "my:pool", "my=pool", "my,pool", "_-_", "  "])
def test_names_that_specs_split_on_or_that_normalise_to_nothing_are_refused(name):
    class Named(TemperatureMean):
        pass

    Named.name = name
    with pytest.raises(ValueError, match="names must not contain"):
        attnpool.register_pooler(Named)


def test_a_name_taken_by_another_class_names_both_modules():
    class Other(TemperatureMean):
        pass

    with registered(TemperatureMean):
        with pytest.raises(ValueError, match=rf"^pooler name 'test_user_temperature' is already registered by "
                           rf"TemperatureMean \(module '{TemperatureMean.__module__}'\); .*Other \(module "
                           rf"'{Other.__module__}'\) needs another `name`, e.g. 'test_user_temperature_2'$"):
            attnpool.register_pooler(Other)
        assert get_pooler_class("test_user_temperature") is TemperatureMean


USERS_MODULE = '''
import torch
from attnpool import Pooler, register_pooler


@register_pooler
class ReloadedMean(Pooler):
    name = "test_user_reloaded"

    def pool(self, hidden_states, mask):
        return hidden_states.mean(1), None
'''


def test_a_reloaded_module_registers_its_class_again(tmp_path, monkeypatch):
    (tmp_path / "users_reloaded_pooler.py").write_text(textwrap.dedent(USERS_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("users_reloaded_pooler")
        first = module.ReloadedMean
        module = importlib.reload(module)  # a notebook cell run twice does the same
        assert module.ReloadedMean is not first
        assert get_pooler_class("test_user_reloaded") is module.ReloadedMean
    finally:
        sys.modules.pop("users_reloaded_pooler", None)
        registry._REGISTRY.pop("testuserreloaded", None)


def test_a_users_config_names_its_module_and_a_built_in_one_does_not():
    with registered(TemperatureMean):
        config = build_pooler("test_user_temperature", 8, temperature=0.5).get_config()
        assert config == {"type": "test_user_temperature", "hidden_size": 8, "temperature": 0.5,
                          "module": TemperatureMean.__module__}
        registry.check_pooler_options("test_user_temperature", {"temperature": 0.5, "module": config["module"]})
        assert type(build_pooler(config)) is TemperatureMean
        both = build_pooler({"type": "combined", "poolers": ["mean", "test_user_temperature"]}, 8)
        assert type(build_pooler(both.get_config()).parts[1]) is TemperatureMean
    assert "module" not in build_pooler("attention", 8).get_config()
    assert "module" not in build_pooler("attention+mean", 8).get_config()


def test_a_saved_users_pooler_says_which_module_to_import_and_reloads_once_imported(tmp_path):
    with registered(TemperatureMean):
        torch.manual_seed(0)
        model = AttnPoolForSequenceClassification.from_encoder(
            tiny_config("bert"), pooling="test_user_temperature", pooling_options={"temperature": 0.5}).eval()
        model.save_pretrained(tmp_path)
    module = TemperatureMean.__module__
    with pytest.raises(ValueError, match=rf"^Unknown pooler 'test_user_temperature': this model's pooler "
                       rf"'test_user_temperature' is defined in module '{module}' \(see its config\); import it "
                       rf"before loading \(CLI: --import {module}; run from the folder holding "
                       rf"{module.replace('.', '/')}\.py, or add that folder to PYTHONPATH\)$"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    with registered(TemperatureMean):
        loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path).eval()
        assert type(loaded.attnpool.pooler) is TemperatureMean and loaded.attnpool.pooler.temperature == 0.5
        assert loaded.config.pooling == model.config.pooling
        ids, mask = batch([5, 3])
        with torch.no_grad():
            torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).logits,
                                       model(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)


def test_a_poor_match_gets_no_did_you_mean():
    with pytest.raises(ValueError) as err:
        build_pooler("mine", 8)
    assert str(err.value).startswith("Unknown pooler 'mine'. Available poolers: ")
    with pytest.raises(ValueError, match=r"Unknown pooler 'meen'\. Did you mean 'mean'\?"):
        build_pooler("meen", 8)
