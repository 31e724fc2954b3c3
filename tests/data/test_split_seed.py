"""``split_seed``: one split (folds and ``limit`` draw) for every training seed, or the seed's own split."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from attnpool.config import TrainConfig
from attnpool.data.task import load_task
from model_helpers import tiny_tokenizer, write_toy_csv

LOG = logging.getLogger("test")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split")
    write_toy_csv(folder / "toy.csv", n=60)
    tiny_tokenizer().save_pretrained(folder / "tok")
    return folder


def _split(toy, **options) -> tuple[list[str], np.ndarray]:
    cfg = TrainConfig(train_file=str(toy / "toy.csv"), text_cols=["first", "second"], model=str(toy / "tok"),
                      limit=40, folds=4, **options)
    data = load_task(cfg, LOG)
    return data.frame["id"].astype(str).tolist(), data.make_folds(cfg)


def test_fixed_split_seed_keeps_rows_and_folds_across_training_seeds(toy):
    rows_a, folds_a = _split(toy, seed=1, split_seed=7)
    rows_b, folds_b = _split(toy, seed=2, split_seed=7)
    assert rows_a == rows_b
    np.testing.assert_array_equal(folds_a, folds_b)
    rows_c, folds_c = _split(toy, seed=7)
    assert (rows_a, folds_a.tolist()) == (rows_c, folds_c.tolist()), "split_seed=N draws the split seed=N alone draws"


def test_without_split_seed_each_training_seed_draws_its_own_split(toy):
    rows_a, _ = _split(toy, seed=1)
    rows_b, _ = _split(toy, seed=2)
    assert rows_a != rows_b
    assert TrainConfig(seed=5).resolved_split_seed() == 5
    assert TrainConfig(seed=5, split_seed=0).resolved_split_seed() == 0
