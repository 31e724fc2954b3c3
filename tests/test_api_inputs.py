"""What the API takes as Python gives it: ``~`` in paths, one callback alone, numpy's integers.

``~/recipe.yaml`` was a file named ``~`` in the working directory (not found), where the CLI's shell expands it; a
single ``TrainerCallback`` failed when fold 0 started ("object is not iterable"), its run begun, which blocked a
retry; ``poolers(np.int64(768))`` was refused as a hidden size below 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import EarlyStoppingCallback, TrainerCallback

import attnpool
import attnpool.api as api
from attnpool import options
from attnpool.config import make_config


@pytest.fixture
def home(home):
    """conftest's ``home``, holding a recipe."""
    (home / "recipe.yaml").write_text("epochs: 7\ntrain_file: train.csv\n")
    return home


def test_options_read_a_tilde_as_the_home_folder(home):
    assert options.file_path("~/data.csv", "input_file") == home / "data.csv"
    assert options.load_yaml("~/recipe.yaml") == {"epochs": 7, "train_file": "train.csv"}
    assert make_config("~/recipe.yaml").epochs == 7


def test_train_and_compare_read_their_config_file_under_a_tilde(home, monkeypatch, tmp_path):
    called = {}
    monkeypatch.setattr(api, "_train", lambda cfg, callbacks=None, given=None: called.setdefault("train", cfg))
    monkeypatch.setattr(api, "_compare", lambda cfg, specs, seeds, **kw: called.setdefault("compare", cfg))
    attnpool.train("~/recipe.yaml", output_dir=str(tmp_path / "run"))
    attnpool.compare("~/recipe.yaml", poolings=["mean"], output_dir=tmp_path / "cmp")
    assert called["train"].epochs == 7 and called["compare"].epochs == 7


@pytest.mark.parametrize("given", [EarlyStoppingCallback(), EarlyStoppingCallback, TrainerCallback()])
def test_train_takes_one_callback_alone_as_a_list_of_one(given, monkeypatch, tmp_path):
    called = {}
    monkeypatch.setattr(api, "_train", lambda cfg, callbacks=None, given=None: called.setdefault("cb", callbacks))
    attnpool.train({"train_file": "train.csv"}, callbacks=given, output_dir=str(tmp_path / "run"))
    assert called["cb"] == [given]


@pytest.mark.parametrize(("given", "shown"), [
    ("early", "str 'early'"), ([EarlyStoppingCallback(), print], "builtin_function_or_method <built-in function print> "
                                                                   "in the list"), (object, "type <class 'object'>")])
def test_train_refuses_callbacks_that_are_not_trainer_callbacks_before_anything_is_written(given, shown, monkeypatch,
                                                                                           tmp_path):
    monkeypatch.setattr(api, "_train", lambda *a, **k: pytest.fail("trained with bad callbacks"))
    with pytest.raises(TypeError) as caught:
        attnpool.train({"train_file": str(tmp_path / "train.csv")}, callbacks=given, output_dir=str(tmp_path / "run"))
    assert str(caught.value) == ("callbacks must be a list of transformers.TrainerCallback instances or classes (or "
                                 f"one of them), got {shown}: pass [callback, ...]")
    assert list(tmp_path.iterdir()) == []


def test_poolers_take_numpys_integers_as_the_hidden_size():
    assert attnpool.poolers(np.int64(64)) == attnpool.poolers(64)
    with pytest.raises(ValueError, match=r"--hidden-size must be >= 1 .*got True"):
        attnpool.poolers(True)
    with pytest.raises(ValueError, match=r"--hidden-size must be >= 1 .*got 0$"):
        attnpool.poolers(np.int64(0))
