"""What the paired bootstrap of a comparison draws: one key per out-of-fold row, of one kind for every run.

A key names an example (or a group of examples) so that the seeds that validated on it share one draw of it. The
kind is chosen once for all the runs compared: keys of two kinds never match, so an example one seed names by its
id and another by its row number would be drawn twice, independently (an interval too narrow).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnpool.runs.run import Run


def _groups(oof: pd.DataFrame) -> np.ndarray | None:
    """The ``group`` of every row of an out-of-fold frame, or ``None`` when a row has none."""
    if "group" not in oof.columns or oof["group"].isna().any() or (oof["group"].astype(str) == "").any():
        return None
    return oof["group"].astype(str).to_numpy()


def run_groups(run_dir: Path) -> np.ndarray | None:
    """The group key of every row of a run's out-of-fold file (sorted by row), or ``None`` for ungrouped folds.

    Runs with grouped folds (``group_col``, e.g. PPPM's anchor) record each row's group; older runs did not, nor
    the folds of a run finished before and resumed after they started to (their rows have no group: ``None``).
    """
    return _groups(Run.open(run_dir).oof())


def ids_name_examples(oofs: Mapping[Any, pd.DataFrame], seeds: Mapping[Any, int] | None = None) -> bool:
    """Whether the ids of every out-of-fold frame can stand for its examples in all of them at once.

    Only if every frame has ids, none missing, and ids and rows are one-to-one over the union of the frames: one id
    for every row and one row for every id, whichever run holds them. Else an id that two rows share (a duplicate in
    the file, seen by one seed and not by another) would merge two examples into one key. ``seeds`` (by the keys of
    ``oofs``): each seed numbers rows of its own (a ``limit`` drawn per seed), so rows are matched within a seed only.
    """
    frames = []
    for key, oof in oofs.items():
        if "id" not in oof.columns or oof["id"].isna().any():
            return False
        space = "" if seeds is None else str(seeds[key])
        frames.append(pd.DataFrame({"space": space, "id": oof["id"].astype(str).to_numpy(),
                                    "row": oof["row"].astype(str).to_numpy()}))
    if not frames:
        return False
    pairs = pd.concat(frames, ignore_index=True).drop_duplicates()
    return not (pairs.duplicated(["space", "id"]).any() or pairs.duplicated(["space", "row"]).any())


def _keys(oof: pd.DataFrame, seed: int, groups: bool, ids: bool, per_seed_rows: bool) -> tuple[np.ndarray, str]:
    found = _groups(oof) if groups else None
    if found is not None:
        return found, "group"
    if ids:
        return ("id:" + oof["id"].astype(str)).to_numpy(), "id"
    prefix = f"seed {seed} row:" if per_seed_rows else "row:"
    return (prefix + oof["row"].astype(str)).to_numpy(), "row"


def bootstrap_keys(run_dir: Path, seed: int, *, groups: bool = True, per_seed_rows: bool = False
                   ) -> tuple[np.ndarray, str]:
    """What the paired bootstrap draws for a run's out-of-fold rows, and which kind: ``group``, ``id`` or ``row``.

    Its groups (``groups`` and grouped folds: rows of one group are not independent); else its ids, when they and
    its rows are one-to-one (they name an example whatever rows a seed drew); else its row numbers, which name the
    same example in every seed unless each seed drew its own rows (``per_seed_rows``: a ``limit`` without
    ``split_seed``), and are then the seed's own. Keys are text. For several runs use
    :func:`shared_bootstrap_keys`, which picks one kind for all of them.
    """
    oof = Run.open(run_dir).oof()
    return _keys(oof, seed, groups, ids_name_examples({0: oof}), per_seed_rows)


def shared_bootstrap_keys(runs: Mapping[Any, tuple[Path, int]], *, per_seed_rows: bool = False
                          ) -> tuple[dict[Any, np.ndarray], bool]:
    """:func:`bootstrap_keys` of several ``(run_dir, seed)``, of one kind for all, so that seeds share examples.

    Groups only if every run has them; else ids only if :func:`ids_name_examples` holds over all the runs; else row
    numbers everywhere. Returns the keys by the same keys as ``runs``, and whether they are groups. Each out-of-fold
    file is read once.
    """
    oofs = {key: Run.open(path).oof() for key, (path, _) in runs.items()}
    by_group = all(_groups(oof) is not None for oof in oofs.values())
    seeds = {key: seed for key, (_, seed) in runs.items()} if per_seed_rows else None
    ids = not by_group and ids_name_examples(oofs, seeds)
    keys = {key: _keys(oofs[key], seed, by_group, ids, per_seed_rows)[0] for key, (_, seed) in runs.items()}
    return keys, by_group
