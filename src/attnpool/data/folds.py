"""k-fold assignment for cross-validation: stratified on the labels, grouped so that no group spans two folds."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnpool.data.columns import TASKS
from attnpool.data.errors import DataError

DEFAULT_MAX_BINS = 10  # regression labels: at most this many quantile bins unless n_bins is given


def make_folds(
    data: int | pd.DataFrame,
    k: int,
    *,
    labels: Sequence[Any] | np.ndarray | pd.Series | str | None = None,
    groups: Sequence[Hashable] | np.ndarray | pd.Series | str | None = None,
    task: str = "regression",
    n_bins: int | None = None,
    seed: int = 42,
) -> np.ndarray:
    """The validation fold (``0..k-1``) of every row, deterministic for a given seed.

    The scikit-learn splitter is chosen by what is given (all shuffle with ``seed``):

    ============================  ==========================
    labels and groups             ``StratifiedGroupKFold``
    labels only                   ``StratifiedKFold``
    groups only                   ``GroupKFold``
    neither                       ``KFold``
    ============================  ==========================

    Stratification: class labels (``binary``/``multiclass``, or any non-numeric labels) are used as they are.
    Regression labels are stratified on their distinct values when there are at most ``n_bins`` of them (PPPM's
    five scores), else on ``n_bins`` quantile bins; bins with fewer than ``k`` rows are merged into their
    neighbour, so that every stratum can appear in every fold. Two-dimensional labels (multi-hot multilabel,
    several regression targets) are stratified on their row mean, binned the same way.

    Groups (e.g. PPPM's ``anchor``): all rows of a group land in the same fold, so no group is seen in training
    and validation at once.

    The folds depend on the order of the rows, not only on the rows: the splitters shuffle positions, and groups
    are numbered in the order they first appear. The same file and seed always give the same folds, but the same
    rows in another order (a sorted or re-exported file) get other folds; keep the file as it was to reproduce a
    run's folds, or save them.

    Args:
        data: The number of rows, or the table (then ``labels`` and ``groups`` may be column names).
        k: Number of folds, at least 2.
        labels: One label per row (or a column name), to stratify on; ``None``: no stratification.
        groups: One group key per row (or a column name); ``None``: rows are independent.
        task: ``regression``, ``binary``, ``multiclass`` or ``multilabel``: how ``labels`` are stratified.
        n_bins: Most bins for regression labels; default ``min(10, distinct values)``.
        seed: Shuffling seed.

    Returns:
        ``(N,)`` int64 fold ids; every row is in exactly one fold and no fold is empty.

    Raises:
        DataError: ``k < 2``; fewer rows or groups than ``k`` (saying how many there are); a length mismatch;
            missing or non-numeric regression labels; an unknown task or column.
    """
    from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold

    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    n_rows = _num_rows(data)
    labels = _column(data, labels, "labels")
    groups = _column(data, groups, "groups")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise DataError(f"k (the number of folds) must be an integer >= 2, got {k!r}")
    if n_rows < k:
        raise DataError(f"cannot make {k} folds from {n_rows} rows: every fold needs a row; use k <= {n_rows}")

    strata = None if labels is None else _strata(labels, task, k, n_bins, n_rows)
    group_ids = None
    if groups is not None:
        group_ids = _group_ids(groups, n_rows)
        n_groups = int(group_ids.max()) + 1
        if n_groups < k:
            raise DataError(
                f"cannot make {k} grouped folds from {n_groups} distinct groups: a group never spans two folds, so "
                f"every fold needs its own group; use k <= {n_groups} (e.g. k={max(2, min(n_groups, 5))}), or group "
                "on a finer key"
            )

    if strata is not None and group_ids is not None:
        splitter: Any = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    elif strata is not None:
        splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    elif group_ids is not None:
        splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)  # shuffle: scikit-learn >= 1.6
    else:
        splitter = KFold(n_splits=k, shuffle=True, random_state=seed)

    folds = np.full(n_rows, -1, dtype=np.int64)
    for fold, (_, valid) in enumerate(splitter.split(np.zeros((n_rows, 1)), strata, group_ids)):
        if (folds[valid] != -1).any():
            raise RuntimeError(f"{type(splitter).__name__} put a row into two folds")  # a scikit-learn bug
        folds[valid] = fold
    sizes = np.bincount(folds[folds >= 0], minlength=k)
    if (folds == -1).any() or (sizes == 0).any():
        raise DataError(
            f"{type(splitter).__name__} left {int((folds == -1).sum())} rows without a fold and "
            f"{int((sizes == 0).sum())} empty folds (fold sizes {sizes.tolist()}); use a smaller k or fewer label "
            "bins (n_bins)"
        )
    return folds


def _num_rows(data: int | pd.DataFrame) -> int:
    if isinstance(data, pd.DataFrame):
        return len(data)
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool) and data >= 0:
        return int(data)
    raise DataError(f"make_folds needs a row count (int >= 0) or a DataFrame, got {type(data).__name__} {data!r}")


def _column(data: int | pd.DataFrame, values: Any, what: str) -> Any:
    """``values`` itself, or the column of ``data`` it names."""
    if not isinstance(values, str):
        return values
    if not isinstance(data, pd.DataFrame):
        raise DataError(f"{what}={values!r} names a column, so pass the DataFrame (not a row count) to make_folds")
    if values not in data.columns:
        raise DataError(
            f"{what} column {values!r} is not in the table; the columns present are: "
            f"{', '.join(map(str, data.columns))}"
        )
    return data[values]


def _group_ids(groups: Any, n_rows: int) -> np.ndarray:
    keys = groups.to_numpy() if isinstance(groups, pd.Series) else np.asarray(groups, dtype=object)
    if keys.ndim != 1 or len(keys) != n_rows:
        raise DataError(f"groups must hold one key per row: expected {n_rows}, got shape {keys.shape}")
    codes, _ = pd.factorize(keys, use_na_sentinel=False)  # missing keys form one group of their own
    return codes.astype(np.int64)


def _strata(labels: Any, task: str, k: int, n_bins: int | None, n_rows: int) -> np.ndarray:
    """One stratum id per row."""
    values = labels.to_numpy() if isinstance(labels, pd.Series) else np.asarray(labels)
    if len(values) != n_rows:
        raise DataError(f"labels must hold one label per row: expected {n_rows}, got {len(values)}")
    if values.ndim == 2:
        numbers = values.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(numbers).all(axis=1))
        if len(bad):
            rows = ", ".join(str(r + 1) for r in bad[:5])
            raise DataError(
                f"labels (one row of {numbers.shape[1]} values per row) must be finite numbers to stratify the "
                f"folds; rows {rows} ({len(bad)} in all) hold missing or infinite values: fill them in or drop "
                "those rows (run validate_labels first), or pass labels=None"
            )
        return _bins(numbers.mean(axis=1), k, n_bins)
    if values.ndim != 1:
        raise DataError(f"labels must be 1-D (one per row) or 2-D (multi-hot), got shape {values.shape}")
    if task == "regression":
        numbers = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(numbers))
        if len(bad):
            rows = ", ".join(str(r + 1) for r in bad[:5])
            raise DataError(
                f"regression labels must be finite numbers to stratify the folds; rows {rows} "
                f"({len(bad)} in all) are missing or not numbers: run validate_labels first, or pass labels=None"
            )
        return _bins(numbers, k, n_bins)
    codes, uniques = pd.factorize(values)
    if (codes < 0).any():
        rows = ", ".join(str(r + 1) for r in np.flatnonzero(codes < 0)[:5])
        raise DataError(f"labels are missing in rows {rows}; fill them in or drop those rows before making folds")
    counts = np.bincount(codes)
    if counts.max() < k:  # scikit-learn refuses; a class rarer than k alone only lacks in some folds (a warning)
        names = [u.item() if isinstance(u, np.generic) else u for u in uniques]
        shown = ", ".join(f"{names[i]!r}: {counts[i]}" for i in np.argsort(-counts, kind="stable")[:10])
        fix = (f"use k <= {int(counts.max())}, or more rows per class" if counts.max() >= 2 else
               "no stratified split exists with one row per class: give each class at least 2 rows")
        raise DataError(f"cannot stratify {k} folds: every class has fewer than {k} rows ({shown}); {fix}")
    return codes.astype(np.int64)


def _bins(values: np.ndarray, k: int, n_bins: int | None) -> np.ndarray:
    """Quantile bins of numeric labels (the distinct values when few), each holding at least ``k`` rows if possible."""
    distinct = np.unique(values)
    n_bins = min(DEFAULT_MAX_BINS, len(distinct)) if n_bins is None else n_bins
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise DataError(f"n_bins (label bins for stratification) must be an integer >= 1, got {n_bins!r}")
    if len(distinct) <= n_bins:
        codes = np.searchsorted(distinct, values)
    else:
        codes = pd.qcut(values, n_bins, labels=False, duplicates="drop").astype(np.int64)
    # Merge bins smaller than k into the next one (the last into the previous one), keeping bins contiguous.
    counts = np.bincount(codes)
    merged = np.empty(len(counts), dtype=np.int64)
    current, filled = 0, 0
    for b, count in enumerate(counts):
        merged[b] = current
        filled += count
        if filled >= k:
            current, filled = current + 1, 0
    if 0 < filled and current > 0:
        merged[merged == current] = current - 1
    return merged[codes]
