"""``--limit`` with a group context draws whole groups, so the contexts trained on are those predict gives a file of
whole groups; without a group context it draws rows, as it always did."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from attnpool.config import TrainConfig
from attnpool.data.task import load_task
from model_helpers import tiny_tokenizer

LOG = logging.getLogger("test_limit_groups")


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    folder = tmp_path_factory.mktemp("limit")
    rng = np.random.default_rng(0)
    sizes = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 3, 4]
    anchors = [f"a{g}" for g, n in enumerate(sizes) for _ in range(n)]
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(len(anchors))], "anchor": anchors,
                          "context": ["B27"] * len(anchors), "target": [f"t{i % 7}" for i in range(len(anchors))],
                          "label": rng.random(len(anchors)).round(2)})
    frame.loc[3, "anchor"] = None  # a row without a key: a group of its own
    frame.to_csv(folder / "rows.csv", index=False)
    tiny_tokenizer().save_pretrained(folder / "tok")
    return folder, frame


def _load(folder, **options):
    cfg = TrainConfig(train_file=str(folder / "rows.csv"), template="{anchor} [SEP] {target}",
                      model=str(folder / "tok"), folds=2, **options)
    return load_task(cfg, LOG).frame


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_limit_with_a_group_context_draws_whole_groups(grouped, seed):
    folder, full = grouped
    drawn = _load(folder, limit=20, split_seed=seed, group_context="target", group_context_by=["anchor", "context"])
    sizes = full.groupby("anchor", dropna=False).size()
    assert 0 < len(drawn) <= 20
    for anchor, n in drawn.groupby("anchor", dropna=False).size().items():
        assert n == (1 if pd.isna(anchor) else sizes[anchor]), f"group {anchor} drawn in part"
    again = _load(folder, limit=20, split_seed=seed, group_context="target", group_context_by=["anchor", "context"])
    assert again["id"].tolist() == drawn["id"].tolist()  # seeded
    one = _load(folder, limit=1, split_seed=seed, group_context="target", group_context_by=["anchor", "context"])
    assert one["anchor"].nunique(dropna=False) == 1  # one group at least, even one larger than the limit


def test_seeds_draw_other_groups_and_without_a_group_context_rows_are_drawn_as_before(grouped):
    folder, full = grouped
    draws = {tuple(_load(folder, limit=20, split_seed=seed, group_context="target",
                         group_context_by=["anchor", "context"])["id"]) for seed in range(4)}
    assert len(draws) > 1
    rows = _load(folder, limit=20, split_seed=5)
    expected = pd.read_csv(folder / "rows.csv", dtype=str, keep_default_na=False).sample(n=20, random_state=5)
    assert rows["id"].tolist() == expected["id"].tolist()


@pytest.mark.parametrize("seed", range(6))
def test_a_group_too_large_for_the_room_left_is_passed_over_not_the_end_of_the_draw(seed):
    """The first group that did not fit stopped the draw (17 of 100 rows asked), and a group of 900 was drawn whole
    when it came first."""
    from attnpool.data.context import sample_groups

    frame = pd.DataFrame({"anchor": ["big"] * 900 + [f"s{i}" for i in range(100)], "context": "B27"})
    drawn = sample_groups(frame, ["anchor", "context"], 100, seed)
    assert len(drawn) == 100 and "big" not in set(drawn["anchor"])
    alone = sample_groups(frame.iloc[:900], ["anchor", "context"], 100, seed)
    assert len(alone) == 900  # none fits: the smallest group, whole
