"""Warnings that hold for the whole run print once: not once per fold, nor once per torchrun process."""

from __future__ import annotations

import logging
import types

import pytest

import attnpool
from attnpool.training import recipe as recipe_module
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("once")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=18, seed=0)
    values = {"train_file": str(folder / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "epochs": 1, "batch_size": 4, "pooling_options": {"attn_size": 8}, "precision": "fp32"}
    return folder, values


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged():
    """What attnpool logs (every record that reaches a console or train.log passes its package logger).

    Not caplog: a run turns transformers' handlers down to errors, and under pytest those include caplog's.
    """
    handler = _Lines()
    logging.getLogger("attnpool").addHandler(handler)
    yield lambda text: [line for line in handler.lines if text in line]
    logging.getLogger("attnpool").removeHandler(handler)


def test_the_accelerate_configs_precision_replaced_is_said_once_per_run_not_per_fold(data, logged, monkeypatch):
    folder, values = data
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # what `accelerate launch` exports from its config
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    result = attnpool.train(values | {"folds": 3, "max_length": 16}, output_dir=str(folder / "three_folds"))
    assert len(result.metrics["folds"]) == 3
    said = logged("mixed_precision fp16 is replaced by --precision fp32")
    assert said == ["precision: the accelerate config's mixed_precision fp16 is replaced by --precision fp32 (no); "
                    "pass --precision to choose"]


class _Stop(Exception):
    """Stands for the training that follows the data's loading (not needed here)."""


def _load_only(monkeypatch):
    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(recipe_module, "train_fold", stop)


@pytest.mark.parametrize("main", [True, False])
def test_the_datas_warnings_print_on_the_main_process_only(main, data, logged, monkeypatch):
    """Under torchrun every process reads and tokenises the data: its warnings came once per process."""
    folder, values = data
    _load_only(monkeypatch)
    if not main:  # what the recipe reads to know its rank: accelerate's PartialState
        monkeypatch.setattr(recipe_module, "process_state", lambda: types.SimpleNamespace(is_main_process=False))
    with pytest.raises(_Stop):
        attnpool.train(values | {"folds": 2, "max_length": 8}, output_dir=str(folder / f"rank_{int(not main)}"))
    truncated = logged("were truncated")
    assert bool(truncated) is main, truncated
