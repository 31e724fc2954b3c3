"""make_folds: every row in exactly one fold, stratified label distributions, unsplit groups, seeded determinism."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from attnpool.data import DataError, make_folds


def assert_partition(folds: np.ndarray, n_rows: int, k: int) -> None:
    assert folds.shape == (n_rows,) and folds.dtype == np.int64
    assert set(folds.tolist()) == set(range(k))  # every fold used, every row given one fold in 0..k-1
    sizes = np.bincount(folds, minlength=k)
    assert sizes.sum() == n_rows


def assert_groups_unsplit(folds: np.ndarray, groups) -> None:
    per_group = pd.Series(folds).groupby(np.asarray(groups)).nunique()
    assert (per_group == 1).all()


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    n = 600
    # Skewed PPPM-like scores and ~100 groups of uneven size.
    score = rng.choice([0, 0.25, 0.5, 0.75, 1.0], size=n, p=[0.2, 0.32, 0.34, 0.11, 0.03])
    group = rng.integers(0, 100, size=n) ** 2 % 97
    return pd.DataFrame({"score": score, "group": group.astype(str), "cls": rng.choice(["a", "b", "c"], n)})


def test_kfold_without_labels_or_groups():
    folds = make_folds(103, 5, seed=1)
    assert_partition(folds, 103, 5)
    assert np.bincount(folds).tolist() == [21, 21, 21, 20, 20]


def test_stratified_regression_keeps_fold_means_close(data):
    folds = make_folds(data, 5, labels="score")
    assert_partition(folds, len(data), 5)
    means = data.groupby(folds)["score"].mean()
    assert np.abs(means - data["score"].mean()).max() < 0.01
    # The distinct scores are the strata: each one is spread evenly (to within one row) over the folds.
    counts = pd.crosstab(data["score"], folds)
    assert (counts.max(axis=1) - counts.min(axis=1)).max() <= 1


def test_stratified_regression_with_many_values_uses_quantile_bins():
    y = np.random.default_rng(1).lognormal(size=1000)
    folds = make_folds(1000, 4, labels=y, n_bins=8, seed=3)
    assert_partition(folds, 1000, 4)
    # Each of the 8 quantile bins (125 rows) is spread evenly over the 4 folds: 31 or 32 rows per fold.
    counts = pd.crosstab(pd.qcut(y, 8, labels=False), folds)
    assert counts.min().min() >= 31 and counts.max().max() <= 32
    medians = pd.Series(y).groupby(folds).median()
    assert np.abs(medians - np.median(y)).max() < 0.1 * np.median(y)


def test_rare_values_are_merged_into_a_neighbouring_bin_without_warnings():
    y = np.r_[np.zeros(50), np.ones(50), [5.0, 7.0]]  # two values rarer than k
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        folds = make_folds(len(y), 5, labels=y, seed=0)
    assert_partition(folds, len(y), 5)


def test_stratified_classes(data):
    folds = make_folds(data, 4, labels=data["cls"], task="multiclass")
    assert_partition(folds, len(data), 4)
    shares = pd.crosstab(folds, data["cls"], normalize="index")
    overall = data["cls"].value_counts(normalize=True)
    assert (shares - overall).abs().max().max() < 0.01


def test_multi_hot_labels_are_stratified_on_their_row_mean():
    rng = np.random.default_rng(2)
    multi_hot = (rng.random((300, 4)) < 0.3).astype(np.float32)
    folds = make_folds(300, 3, labels=multi_hot, task="multilabel")
    assert_partition(folds, 300, 3)
    assert np.abs(pd.Series(multi_hot.sum(1)).groupby(folds).mean() - multi_hot.sum(1).mean()).max() < 0.05


def test_groups_are_never_split(data):
    folds = make_folds(data, 5, groups="group")
    assert_partition(folds, len(data), 5)
    assert_groups_unsplit(folds, data["group"])


def test_stratified_groups_are_never_split_and_stay_stratified(data):
    folds = make_folds(len(data), 4, labels=data["score"].to_numpy(), groups=data["group"].to_numpy())
    assert_partition(folds, len(data), 4)
    assert_groups_unsplit(folds, data["group"])
    means = data.groupby(folds)["score"].mean()
    assert np.abs(means - data["score"].mean()).max() < 0.05


@pytest.mark.parametrize(
    "options",
    [{}, {"labels": "score"}, {"groups": "group"}, {"labels": "score", "groups": "group"}],
    ids=["kfold", "stratified", "group", "stratified_group"],
)
def test_deterministic_per_seed_and_different_across_seeds(data, options):
    a = make_folds(data, 5, seed=7, **options)
    assert np.array_equal(a, make_folds(data, 5, seed=7, **options))
    assert not np.array_equal(a, make_folds(data, 5, seed=8, **options))


def test_missing_groups_form_one_group():
    groups = ["a", None, "b", None, "c", "a"]
    folds = make_folds(6, 3, groups=groups)
    assert_partition(folds, 6, 3)
    assert folds[1] == folds[3] and folds[0] == folds[5]


@pytest.mark.parametrize("k", [1, 0, -2, 2.5, True])
def test_k_must_be_at_least_two(k):
    with pytest.raises(DataError, match=re.escape(f"k (the number of folds) must be an integer >= 2, got {k!r}")):
        make_folds(10, k)


def test_fewer_rows_than_folds():
    msg = "cannot make 5 folds from 3 rows: every fold needs a row; use k <= 3"
    with pytest.raises(DataError, match=re.escape(msg)):
        make_folds(3, 5)


def test_classes_all_rarer_than_the_folds_say_so():
    with pytest.raises(DataError, match=re.escape("cannot stratify 3 folds: every class has fewer than 3 rows "
                                                  "('a': 2, 'b': 2, 'c': 2); use k <= 2")):
        make_folds(6, 3, labels=["a", "a", "b", "b", "c", "c"], task="multiclass")
    assert len(set(make_folds(6, 2, labels=["a", "a", "b", "b", "c", "c"], task="multiclass"))) == 2
    with pytest.raises(DataError, match="no stratified split exists with one row per class"):
        make_folds(4, 2, labels=["a", "b", "c", "d"], task="multiclass")


def test_fewer_groups_than_folds():
    msg = "cannot make 5 grouped folds from 3 distinct groups: a group never spans two folds"
    with pytest.raises(DataError, match=re.escape(msg) + ".*use k <= 3"):
        make_folds(12, 5, groups=list("abc") * 4)


def test_length_mismatches():
    with pytest.raises(DataError, match="labels must hold one label per row: expected 10, got 9"):
        make_folds(10, 2, labels=np.zeros(9))
    with pytest.raises(DataError, match=re.escape("groups must hold one key per row: expected 10, got shape (4,)")):
        make_folds(10, 2, groups=[1, 2, 3, 4])


def test_bad_regression_labels_and_missing_classes():
    with pytest.raises(DataError, match="regression labels must be finite numbers to stratify the folds; rows 2, 4"):
        make_folds(4, 2, labels=[0.1, np.nan, 0.3, "x"])
    with pytest.raises(DataError, match="labels are missing in rows 3; fill them in"):
        make_folds(4, 2, labels=["a", "b", None, "a"], task="binary")


def test_column_names_need_the_frame_and_must_exist(data):
    with pytest.raises(DataError, match="pass the DataFrame"):
        make_folds(10, 2, labels="score")
    with pytest.raises(DataError, match=re.escape("groups column 'anchor' is not in the table; the columns present")):
        make_folds(data, 2, groups="anchor")


def test_other_bad_arguments():
    with pytest.raises(DataError, match="unknown task 'ranking'"):
        make_folds(10, 2, task="ranking")
    with pytest.raises(DataError, match="n_bins .* must be an integer >= 1, got 0"):
        make_folds(10, 2, labels=np.arange(10.0), n_bins=0)
    with pytest.raises(DataError, match="needs a row count"):
        make_folds([1, 2, 3], 2)
