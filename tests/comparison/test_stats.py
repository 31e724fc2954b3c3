"""Honest statistics of `attnpool compare`: intervals inside the metric's range, exact p-values over few seeds.

Two seeds are the hard case: a Student t interval over two correlations can run past [-1, 1], and two equal
paired differences make a t-test report p = 0 with an interval of zero width. Here the summary is built from
readers replaced by known numbers (no training), so every figure in the table is known.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from attnpool.comparison import PoolerSpec, stats, summary
from attnpool.comparison.stats import (
    MIN_SEEDS_FOR_5_PERCENT,
    metric_function,
    metric_range,
    paired_bootstrap,
    paired_t_test,
    score_interval,
    sign_flip_test,
)
from attnpool.metrics import task_metrics

# ---------------------------------------------------------------- intervals


def test_two_correlations_get_a_fisher_z_interval_inside_minus_one_one():
    from scipy import stats

    values = [0.2, 0.9]  # a plain t interval over these two is [-3.9, 5.0]
    plain = stats.t.interval(0.95, df=1, loc=np.mean(values), scale=stats.sem(values))
    assert plain[0] < -1 and plain[1] > 1
    interval = score_interval(values, metric_range("pearson"))
    assert interval.method == "fisher_z"
    assert -1 <= interval.low < min(values) and max(values) < interval.high <= 1
    assert interval.mean == pytest.approx(0.55) and interval.std == pytest.approx(np.std(values, ddof=1))
    # closed form: t interval of atanh(values), mapped back with tanh
    z = np.arctanh(values)
    half = stats.t.ppf(0.975, df=1) * z.std(ddof=1) / np.sqrt(2)
    assert (interval.low, interval.high) == pytest.approx((np.tanh(z.mean() - half), np.tanh(z.mean() + half)))


def test_accuracies_get_a_logit_interval_inside_zero_one():
    from scipy import stats

    values = [0.95, 0.99]
    interval = score_interval(values, metric_range("accuracy"))
    assert interval.method == "logit" and 0 <= interval.low < 0.95 and 0.99 < interval.high <= 1
    logit = np.log(np.array(values) / (1 - np.array(values)))
    half = stats.t.ppf(0.975, df=1) * logit.std(ddof=1) / np.sqrt(2)
    expit = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    assert (interval.low, interval.high) == pytest.approx((expit(logit.mean() - half), expit(logit.mean() + half)))


def test_a_score_on_the_bound_falls_back_to_a_clipped_t_interval():
    interval = score_interval([0.9, 1.0], metric_range("accuracy"))
    assert interval.method == "t_clipped" and interval.high == 1.0 and 0 <= interval.low < 0.9


def test_no_spread_or_one_seed_gives_no_interval_rather_than_one_of_zero_width():
    for values in ([0.8, 0.8], [0.8], [0.804 - 0.8, 0.904 - 0.9]):  # the last: equal up to rounding
        interval = score_interval(values, metric_range("accuracy"))
        assert math.isnan(interval.low) and math.isnan(interval.high) and interval.method == "none"


@pytest.mark.parametrize("metric", ["pearson", "spearman", "accuracy", "macro_f1", "auc", "rmse"])
def test_intervals_never_leave_the_metric_range(metric):
    low, high = metric_range(metric)
    rng = np.random.default_rng(0)
    for n in (2, 3, 5):
        for _ in range(50):
            span = (max(low, -1.0), min(high, 1.0))
            values = rng.uniform(*span, size=n)
            interval = score_interval(values, (low, high))
            assert low <= interval.low <= interval.high <= high, (values, interval)


# ---------------------------------------------------------------- tests over seeds


def test_sign_flip_test_is_exact_and_cannot_go_below_two_to_the_one_minus_n():
    rng = np.random.default_rng(1)
    for n in range(2, 9):
        d = rng.normal(0.01, 0.01, n)
        test = sign_flip_test(d, np.zeros(n))
        flips = np.array(list(itertools.product([-1, 1], repeat=n)))
        by_hand = np.mean(np.abs((flips * d).mean(axis=1)) >= abs(d.mean()) - 1e-15)
        assert test.p == pytest.approx(by_hand) and test.p >= 2.0 ** (1 - n) == test.min_p
    # all positive on 6 seeds: the smallest p 6 seeds allow, under 5%
    assert sign_flip_test([0.02] * MIN_SEEDS_FOR_5_PERCENT, [0.0] * MIN_SEEDS_FOR_5_PERCENT).p == pytest.approx(
        2.0 ** (1 - MIN_SEEDS_FOR_5_PERCENT))
    assert 2.0 ** (1 - MIN_SEEDS_FOR_5_PERCENT) < 0.05 <= 2.0 ** (2 - MIN_SEEDS_FOR_5_PERCENT)


def test_two_seeds_with_equal_paired_differences():
    # the question-classification case of issue #15: +0.004 accuracy on both seeds
    a, b = [0.804, 0.904], [0.800, 0.900]
    exact = sign_flip_test(a, b)
    assert exact.p == 0.5 and exact.min_p == 0.5 and exact.equal and exact.diff == pytest.approx(0.004)
    t = paired_t_test(a, b, bounds=(0, 1))
    assert t.diff == pytest.approx(0.004)
    assert math.isnan(t.p) and math.isnan(t.low) and math.isnan(t.high)  # not p = 0 with [0.004, 0.004]


def test_identical_and_single_seeds():
    same = sign_flip_test([0.8, 0.9], [0.8, 0.9])
    assert same.p == 1.0 and same.diff == 0
    assert paired_t_test([0.8, 0.9], [0.8, 0.9]).p == 1.0
    one = sign_flip_test([0.8], [0.7])
    assert math.isnan(one.p) and one.min_p == 1.0
    with pytest.raises(ValueError, match="one value per seed on both sides, got 2 and 3"):
        sign_flip_test([0.1, 0.2], [0.1, 0.2, 0.3])


def test_the_t_interval_of_a_difference_stays_inside_what_a_difference_can_be():
    t = paired_t_test([0.9, -0.9], [-0.9, 0.9], bounds=(-1, 1))
    assert -2 <= t.low and t.high <= 2


# ---------------------------------------------------------------- the table of a two-seed comparison

SEEDS = [42, 43]
N = 1000


def _predictions(correct: int, seed: int):
    """Binary probabilities over N rows, the first ``correct`` of them right."""
    target = np.arange(N) % 2
    predicted = np.where(np.arange(N) < correct, target, 1 - target)
    probs = np.stack([1.0 - predicted, predicted], axis=1) * 0.8 + 0.1
    return np.arange(N), target, probs


@pytest.fixture
def two_seeds(tmp_path, monkeypatch):
    """mean: 800 and 900 of 1000 right; attention: 4 more right on both seeds (+0.004 twice); cls: mixed."""
    correct = {("mean", 42): 800, ("mean", 43): 900, ("attention", 42): 804, ("attention", 43): 904,
               ("cls", 42): 790, ("cls", 43): 930}

    def key(run_dir):
        return run_dir.parent.name, int(run_dir.name.removeprefix("seed_"))

    monkeypatch.setattr(summary, "run_score", lambda run_dir, task: correct[key(run_dir)] / N)
    monkeypatch.setattr(summary, "run_predictions", lambda run_dir, task: _predictions(correct[key(run_dir)], 0))
    monkeypatch.setattr(summary, "_cost", lambda run_dir: (10.0, 1e9))
    monkeypatch.setattr(summary, "_standardised", lambda run_dir: False)
    monkeypatch.setattr(summary, "_pooling_stats", lambda run_dir: {})
    monkeypatch.setattr(summary, "_parameter_count", lambda run_dir: 1000)
    monkeypatch.setattr(summary, "shared_bootstrap_keys",  # ungrouped folds: the rows are drawn
                        lambda runs, **kw: ({key: np.arange(N).astype(str) for key in runs}, False))
    specs = [PoolerSpec.parse(name) for name in ("mean", "attention", "cls")]
    result = summary.summarise(tmp_path, "binary", specs, specs[0], SEEDS, bootstrap=200)
    return result, tmp_path


def test_the_table_says_when_one_split_served_every_seed():
    rows = [{"pooler": "mean", "baseline": True, "mean": 0.9, "std": 0.01, "ci_low": 0.88, "ci_high": 0.92,
             "ci_method": "logit", "parameters_added": 0, "time_ratio": 1.0, "memory_ratio": 1.0}]
    table = summary._markdown(rows, "accuracy", "mean", [1, 2, 3], 100, split_seed=7)
    assert "One split for every seed (split_seed 7): the seeds vary the training only" in table
    assert "Each seed drew its own split" not in table


def test_equal_paired_differences_on_two_seeds_are_not_evidence(two_seeds):
    result, out = two_seeds
    rows = {r["pooler"]: r for r in result.rows}
    attention = rows["attention"]
    assert attention["diff"] == pytest.approx(0.004) and attention["diff_equal_over_seeds"]
    assert attention["p_signflip"] == 0.5 and attention["p_signflip_min"] == 0.5
    # Holm over attention (p 0.5) and cls (p 1.0): the smaller p doubles, the larger keeps the running maximum
    assert attention["p_signflip_holm"] == 1.0 and rows["cls"]["p_signflip_holm"] == 1.0
    # the bootstrap pairs each run with the baseline of its own seed: +4 rows right on both seeds, none wrong
    assert attention["boot_diff"] == pytest.approx(0.004) and 0 <= attention["boot_low"] <= 0.004
    assert rows["cls"]["boot_diff"] == pytest.approx(0.01)  # -0.01 and +0.03 over the two seeds
    assert math.isnan(attention["p_ttest"]) and math.isnan(attention["diff_low"])
    saved = {r["pooler"]: r for r in json.loads((out / "compare.json").read_text())["poolers"]}
    for name in ("attention", "cls"):  # the old keys are all still there, with the new ones beside them
        for k in ("diff", "diff_low", "diff_high", "p_ttest", "p_ttest_holm", "boot_diff", "boot_low", "boot_high",
                  "p_bootstrap", "p_bootstrap_holm", "p_signflip", "p_signflip_holm", "p_signflip_min"):
            assert k in saved[name], k
    assert saved["attention"]["p_ttest"] is None and saved["attention"]["diff_low"] is None  # not 0 and [d, d]
    table = (out / "compare.md").read_text()
    assert "+0.0040 (the same on all 2 seeds)" in table
    assert "[0.0040, 0.0040]" not in table and "<0.001" not in table.split("\n\n")[1]
    assert "2 seed(s) are too few to test a difference over seeds" in table
    assert "Each seed drew its own split" in table and "One split for every seed" not in table
    assert "the exact test gives p = 0.500" in table
    assert "Fisher" not in table and "on the logit" in table  # accuracy: the logit scale is the one named
    cls = rows["cls"]
    assert "per seed: -0.0100, +0.0300" in table and cls["p_signflip"] == 1.0  # one up, one down


def test_every_interval_and_the_plot_axis_stay_in_zero_one(two_seeds):
    result, out = two_seeds
    for r in result.rows:
        assert 0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 1, r
        assert r["ci_method"] == "logit"
        for p in ("p_signflip", "p_signflip_holm", "p_bootstrap", "p_bootstrap_holm"):
            if p in r:
                assert 0 < r[p] <= 1
    low, high = summary.plot_limits(result.rows, metric_range("accuracy"))
    assert 0 <= low < high <= 1
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_the_plot_axis_of_wide_correlation_intervals_stops_at_minus_one_and_one():
    rows = [{"mean": 0.55, "ci_low": -0.99999, "ci_high": 0.99999, "per_seed": {"1": 0.2, "2": 0.9}},
            {"mean": 0.1, "ci_low": float("nan"), "ci_high": float("nan"), "per_seed": {"1": -1.0, "2": 1.0}}]
    low, high = summary.plot_limits(rows, metric_range("pearson"))
    assert low == -1.0 and high == 1.0


def test_a_seed_without_a_score_gives_no_p_value_and_no_interval():
    """A run that predicted a constant has a NaN Pearson: no test may call that significant (p 0) or bound it."""
    a, b = [0.81, math.nan, 0.79], [0.8, 0.8, 0.8]
    exact, paired, interval = sign_flip_test(a, b), paired_t_test(a, b, bounds=(-1, 1)), score_interval(a, (-1, 1))
    assert math.isnan(exact.p) and math.isnan(paired.p) and math.isnan(paired.low) and math.isnan(paired.high)
    assert math.isnan(interval.low) and math.isnan(interval.high) and interval.method == "none"


def test_differences_that_cancel_out_are_no_difference():
    """Per-seed differences of +0.1, -0.1, +0.1, -0.1 have mean ~1e-17 in floating point, not a signed effect."""
    test = sign_flip_test([0.3, 0.1, 0.3, 0.1], [0.2] * 4)
    assert test.p == 1.0 and abs(test.diff) < 1e-12


def test_a_diverged_run_scores_nan_instead_of_stopping_the_comparison(tmp_path):
    """A run that predicted NaN has a Pearson of NaN, saved as null: float(None) stopped every later call."""
    from attnpool.runs import Run

    Run(tmp_path).write_metrics({"folds": [], "overall": {"pearson": float("nan")}, "complete": True})
    assert np.isnan(summary.run_score(tmp_path, "regression"))


def test_runs_scored_against_other_labels_are_not_paired(two_seeds, monkeypatch, tmp_path):
    """Labels fixed between two calls (same row count): the old baseline was paired with the new pooler."""
    from attnpool.runs import RunError

    def predictions(run_dir, task):
        rows, target, probs = _predictions(900, 0)
        return rows, (1 - target if run_dir.parent.name == "cls" else target), probs

    monkeypatch.setattr(summary, "run_predictions", predictions)
    specs = [PoolerSpec.parse(name) for name in ("mean", "cls")]
    with pytest.raises(RunError, match="cls and mean with seed 42 were scored against different labels on the same "
                                       "rows: the data changed between their runs"):
        summary.summarise(tmp_path, "binary", specs, specs[0], SEEDS, bootstrap=20)


def test_seeds_draw_their_own_rows_only_from_a_limit_of_the_training_file():
    from attnpool.comparison.runner import draws_rows_per_seed
    from attnpool.config import TrainConfig

    assert draws_rows_per_seed(TrainConfig(limit=100))
    assert not draws_rows_per_seed(TrainConfig(limit=100, split_seed=7))
    assert not draws_rows_per_seed(TrainConfig(limit=100, valid_file="v.csv"))  # the same rows in every seed
    assert not draws_rows_per_seed(TrainConfig())


def test_a_limit_above_the_files_rows_draws_nothing(tmp_path):
    """--limit 5000 on a file of 3,775 rows: every seed trained on the whole file, the same examples."""
    from attnpool.comparison.runner import draws_rows_per_seed
    from attnpool.config import TrainConfig
    from attnpool.runs import Run

    Run.create(tmp_path / "small").write_fold_assignment(np.arange(40) % 2)
    Run.create(tmp_path / "big").write_fold_assignment(np.arange(100) % 2)
    assert not draws_rows_per_seed(TrainConfig(limit=100), tmp_path / "small")
    assert draws_rows_per_seed(TrainConfig(limit=100), tmp_path / "big")


def test_the_table_names_the_seed_that_has_no_score(tmp_path, monkeypatch):
    """A diverged seed: its cells said "no spread over seeds" and "+nan (per seed: +nan, ...)"."""
    correct = {(pooler, seed): 800 for pooler in ("mean", "attention") for seed in SEEDS}
    table = _summarise(tmp_path, monkeypatch, correct, SEEDS, diverged=("attention", 43)).markdown
    line = next(row for row in table.splitlines() if row.startswith("| `attention`"))
    assert line.count("n/a (no score on seed 43: diverged?)") == 2, line  # its interval and its difference
    assert "nan" not in line and "no spread" not in line


# ---------------------------------------------------------------- the bootstrap's score is the run's score


def _regression_case(rng, n: int):
    """Three targets: one that varies, one of zeros and a sparse one (two non-zero rows), with noisy predictions."""
    sparse = np.zeros(n)
    sparse[rng.choice(n, 2, replace=False)] = 1.0
    target = np.stack([rng.random(n), np.zeros(n), sparse], axis=1)
    return target, target + rng.normal(0, 0.3, target.shape)


def _cases(rng):
    """Whole rows and bootstrap draws of them (many draws miss the sparse column's non-zero rows)."""
    for n in (2, 3, 12, 60):
        target, prediction = _regression_case(rng, n)
        yield target, prediction
        for _ in range(8):
            idx = rng.integers(0, n, n)
            yield target[idx], prediction[idx]


def test_the_bootstraps_pearson_is_the_runs_pearson_when_a_target_column_is_constant():
    """A constant target column made the fast Pearson NaN where the run's metric leaves the column out."""
    pearson, rng = metric_function("regression", "pearson"), np.random.default_rng(0)
    sparse_left_out = 0
    for target, prediction in _cases(rng):
        expected = task_metrics("regression", target, prediction)["pearson"]
        assert pearson(target, prediction) == pytest.approx(expected, nan_ok=True)
        sparse_left_out += len(target) > 2 and not target[:, 2].any() and math.isfinite(expected)
    assert sparse_left_out  # some draws had the sparse column constant, and still a score
    target, prediction = _regression_case(rng, 30)
    collapsed, diverged = prediction.copy(), prediction.copy()
    collapsed[:, 0], diverged[5, 0] = 0.4, np.nan  # where the target varies: NaN, as the run's metric
    unused = prediction.copy()
    unused[:, 1], unused[3, 1] = 0.4, np.inf  # in the constant column: ignored, as the run's metric
    for predicted in (collapsed, diverged, unused):
        expected = task_metrics("regression", target, predicted)["pearson"]
        assert pearson(target, predicted) == pytest.approx(expected, nan_ok=True)
    assert math.isnan(pearson(target, collapsed)) and math.isfinite(pearson(target, unused))
    assert math.isnan(pearson(np.zeros((30, 2)), prediction[:, :2]))  # no column varies: no score


@pytest.mark.parametrize(("task", "metric"), [("regression", "spearman"), ("regression", "rmse"),
                                              ("binary", "accuracy"), ("multiclass", "accuracy"),
                                              ("multiclass", "macro_f1")])
def test_every_bootstrap_metric_is_the_runs_metric(task, metric):
    score, rng = metric_function(task, metric), np.random.default_rng(1)
    for case, (target, prediction) in enumerate(_cases(rng)):
        if task != "regression":
            classes = 2 if task == "binary" else 3
            target = (target[:, 0] * classes).astype(int) % classes
            prediction = rng.dirichlet(np.ones(classes), len(target))
            if case % 5 == 0:
                prediction[0] = np.nan  # a diverged run
        expected = task_metrics(task, target, prediction)[metric]
        assert score(target, prediction) == pytest.approx(expected, nan_ok=True)


def test_a_constant_or_sparse_target_column_leaves_the_bootstrap_a_finite_difference():
    """The observed difference was NaN (compare.md: n/a), and draws without the sparse rows were dropped."""
    rng = np.random.default_rng(2)
    target, _ = _regression_case(rng, 200)
    a, b = target + rng.normal(0, 0.2, target.shape), target + rng.normal(0, 0.5, target.shape)
    test = paired_bootstrap([(target, a, b)], metric_function("regression", "pearson"), num_samples=200,
                            clusters=[np.arange(len(target)).astype(str)])
    expected = task_metrics("regression", target, a)["pearson"] - task_metrics("regression", target, b)["pearson"]
    assert test.diff == pytest.approx(expected) and test.diff > 0
    assert all(math.isfinite(v) for v in (test.low, test.high, test.p)) and test.low <= test.diff <= test.high


# ---------------------------------------------------------------- what the tests can claim: floors, Holm, agreement


def _summarise(tmp_path, monkeypatch, correct: dict, seeds: list[int], *, bootstrap: int = 50,
               diverged: tuple[str, int] | None = None):
    """The table of poolers that got ``correct[(pooler, seed)]`` of N rows right (``diverged``: NaN on that run)."""
    def key(run_dir):
        return run_dir.parent.name, int(run_dir.name.removeprefix("seed_"))

    def predictions(run_dir, task):
        rows, target, probs = _predictions(correct[key(run_dir)], 0)
        return rows, target, probs * np.nan if key(run_dir) == diverged else probs

    monkeypatch.setattr(summary, "run_score",
                        lambda run_dir, task: math.nan if key(run_dir) == diverged else correct[key(run_dir)] / N)
    monkeypatch.setattr(summary, "run_predictions", predictions)
    monkeypatch.setattr(summary, "_cost", lambda run_dir: (10.0, 1e9))
    monkeypatch.setattr(summary, "_standardised", lambda run_dir: False)
    monkeypatch.setattr(summary, "_pooling_stats", lambda run_dir: {})
    monkeypatch.setattr(summary, "_parameter_count", lambda run_dir: 1000)
    monkeypatch.setattr(summary, "shared_bootstrap_keys",
                        lambda runs, **kw: ({key: np.arange(N).astype(str) for key in runs}, False))
    names = list(dict.fromkeys(pooler for pooler, _ in correct))
    specs = [PoolerSpec.parse(name) for name in names]
    return summary.summarise(tmp_path, "binary", specs, specs[0], seeds, bootstrap=bootstrap)


def _better_on_every_seed(poolers: list[str], seeds: list[int]) -> dict:
    correct = {("mean", s): 800 + 5 * (s % 7) for s in seeds}
    for i, pooler in enumerate(poolers):
        correct.update({(pooler, s): 830 + i + 4 * (s % 5) for s in seeds})
    return correct


def test_the_too_few_seeds_warning_counts_holm_s_correction(tmp_path, monkeypatch):
    """6 seeds and two poolers better on every seed: each exact p is 2^-5 = 0.031, Holm's 0.0625, and the table said
    nothing (the warning looked at 6 seeds alone)."""
    seeds = [1, 2, 3, 4, 5, 6]
    result = _summarise(tmp_path / "two", monkeypatch, _better_on_every_seed(["attention", "max"], seeds), seeds)
    others = [r for r in result.rows if not r["baseline"]]
    assert [r["p_signflip"] for r in others] == [2.0 ** -5] * 2 and [r["p_signflip_holm"] for r in others] == [
        2.0 ** -4] * 2
    assert ("**6 seed(s) are too few to test a difference over seeds**: the smallest p-value they allow is 0.0312, "
            "and after Holm's correction over the 2 poolers compared to the baseline 2 x 0.0312 = 0.0625; 7 seeds are "
            "needed for p < 0.05 after Holm.") in result.markdown
    seeds = [1, 2, 3, 4, 5, 6, 7]  # 2 x 2^-6 = 0.031: Holm can pass
    assert "too few" not in _summarise(tmp_path / "seven", monkeypatch,
                                       _better_on_every_seed(["attention", "max"], seeds), seeds).markdown
    seeds = [1, 2, 3, 4, 5, 6]  # one pooler: 2^-5 alone
    assert "too few" not in _summarise(tmp_path / "one", monkeypatch, _better_on_every_seed(["attention"], seeds),
                                       seeds).markdown
    seeds = [1, 2, 3]
    table = _summarise(tmp_path / "three", monkeypatch, _better_on_every_seed(["attention"], seeds), seeds).markdown
    assert "the smallest p-value they allow is 0.25; 6 seeds are needed for p < 0.05. Until then" in table
    assert [stats.seeds_needed(m) for m in (1, 2, 3, 4, 5)] == [6, 7, 7, 8, 8]


def test_a_pooler_without_a_p_value_stays_in_holm_s_family(tmp_path, monkeypatch):
    """max diverged on one seed (no p-value): it left the family, and attention's Holm p was its raw 0.031."""
    seeds = [1, 2, 3, 4, 5, 6]
    result = _summarise(tmp_path, monkeypatch, _better_on_every_seed(["attention", "max"], seeds), seeds,
                        diverged=("max", 4))
    rows = {r["pooler"]: r for r in result.rows}
    assert math.isnan(rows["max"]["p_signflip"]) and math.isnan(rows["max"]["p_signflip_holm"])
    assert rows["attention"]["p_signflip"] == 2.0 ** -5 and rows["attention"]["p_signflip_holm"] == 2.0 ** -4
    assert rows["attention"]["p_bootstrap_holm"] == pytest.approx(min(1.0, 2 * rows["attention"]["p_bootstrap"]))
    assert json.loads((tmp_path / "compare.json").read_text())["holm_family"] == 2
    assert ("p-values are Holm-corrected over the 2 pooler(s) compared to the baseline (one without a p-value, e.g. "
            "with a seed without a score, counts as p = 1: the family does not shrink)") in result.markdown
    line = next(row for row in result.markdown.splitlines() if row.startswith("| `attention`"))
    assert "| 0.062 |" in line


def test_holm_counts_an_untested_p_value_as_one():
    # sorted 0.01, 0.02, 0.04 and NaN as 1: 4 * 0.01, 3 * 0.02, 2 * 0.04; NaN stays NaN but the family is 4
    assert stats.holm([0.04, 0.01, float("nan"), 0.02]) == pytest.approx([0.08, 0.04, float("nan"), 0.06],
                                                                         nan_ok=True)
    assert stats.holm([0.01, float("nan")]) == pytest.approx([0.02, float("nan")], nan_ok=True)
    assert stats.holm([float("nan")]) == pytest.approx([float("nan")], nan_ok=True)


def test_the_sign_flip_test_enumerates_every_pattern_up_to_twenty_seeds():
    """From 17 seeds on scipy's 100,000 resamples were fewer than 2^n: a Monte Carlo p (6e-05 where the exact one is
    1.5e-05 at 17 seeds) in a column that says exact, next to p_signflip_min = 2^(1-n)."""
    for n in (17, 20):
        test = sign_flip_test([0.01] * n, [0.0] * n)
        assert test.p == 2.0 ** (1 - n) == test.min_p and not test.sampled
    n, rng = 18, np.random.default_rng(4)
    d = rng.normal(0.005, 0.01, n)
    signs = 1.0 - 2.0 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
    by_hand = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)
    assert sign_flip_test(d, np.zeros(n)).p == pytest.approx(by_hand, rel=1e-12)


def test_beyond_twenty_seeds_the_sign_flip_test_samples_and_says_its_true_floor(tmp_path, monkeypatch):
    test = sign_flip_test([0.01] * 22, [0.0] * 22, num_samples=1000)
    assert test.sampled and test.min_p == pytest.approx(1 / 1001) and test.p == pytest.approx(1 / 1001)
    assert stats.sign_flip_floor(21) == pytest.approx(1 / 100_001) and stats.sign_flip_floor(20) == 2.0 ** -19
    seeds = list(range(1, 22))
    result = _summarise(tmp_path, monkeypatch, _better_on_every_seed(["attention"], seeds), seeds, bootstrap=20)
    attention = result.rows[1]
    assert attention["p_signflip_sampled"] and attention["p_signflip_min"] == pytest.approx(1 / 100_001)
    assert attention["p_signflip"] >= attention["p_signflip_min"]
    assert "| p over seeds (sampled, Holm) |" in result.markdown and "all 2^n sign patterns" not in result.markdown
    assert ("the sign-flip permutation test of the paired differences on 100,000 sampled sign patterns (more than 20 "
            "seeds: the 2^n patterns are sampled, not enumerated; no normality assumed); it cannot go below "
            "1/(1+100,000), here 1e-05.") in result.markdown


def test_the_bootstrap_interval_excludes_0_exactly_when_its_p_value_is_below_5_percent():
    """Two seeds of 30 examples: the 95% interval [0.017, 0.333] excluded 0 beside p = 0.052 (linear interpolation for
    the interval, 2 (1 + far) / (1 + R) for p: two counting rules)."""
    accuracy = metric_function("binary", "accuracy")

    def probs(right):
        return np.stack([1 - right, right], 1)

    rng = np.random.default_rng(3)
    t = rng.integers(0, 2, 30)
    pairs = [(probs(((rng.random(30) < 0.7) ^ (t == 0)) * 1.0), probs(((rng.random(30) < 0.6) ^ (t == 0)) * 1.0))
             for _ in range(2)]
    cases = [([(t, a, b) for a, b in pairs], 500, 5)]
    for seed in range(30):
        r = np.random.default_rng(100 + seed)
        target = r.integers(0, 2, 40)
        cases.append(([(target, probs(((r.random(40) < 0.75) ^ (target == 0)) * 1.0),
                        probs(((r.random(40) < 0.6) ^ (target == 0)) * 1.0))], 200 + 37 * seed, seed))
    agreements = set()
    for groups, samples, seed in cases:
        clusters = [np.arange(len(target)).astype(str) for target, _, _ in groups]
        test = paired_bootstrap(groups, accuracy, num_samples=samples, seed=seed, clusters=clusters)
        excludes = test.low > 0 or test.high < 0
        assert excludes == (test.p < 0.05), (samples, seed, test)
        agreements.add(excludes)
    assert agreements == {True, False}  # both kinds of case were met


def test_the_percentile_interval_and_p_value_follow_one_counting_rule():
    rng = np.random.default_rng(0)
    for size in (39, 40, 199, 500, 999, 1000):
        for shift in np.linspace(-0.2, 0.2, 41):
            replicates = np.round(rng.normal(shift, 0.1, size), 2)  # rounded: some replicates exactly 0
            for confidence in (0.9, 0.95, 0.99):
                low, high, p = stats.percentile_test(replicates, confidence)
                alpha = round(1 - confidence, 12)  # 0.05, not 1 - 0.95 = 0.05000000000000004
                if math.isnan(low):
                    assert p >= alpha
                    continue
                assert (low > 0 or high < 0) == (p < alpha), (size, shift, confidence, low, high, p)
    low, high, p = stats.percentile_test(np.arange(1000) - 20.0)  # 21 of 1000 at or below 0
    assert (low, high, p) == (4.0, 955.0, pytest.approx(2 * 22 / 1001))  # the 25th smallest and the 25th largest
    low, high, p = stats.percentile_test(np.arange(38) + 1.0)  # too few for a 95% interval: none, and p >= 0.05
    assert math.isnan(low) and math.isnan(high) and p == pytest.approx(2 / 39)
    assert math.isnan(stats.percentile_test(np.arange(39) + 1.0)[0])
    assert stats.percentile_test(np.arange(40) + 1.0) == (1.0, 40.0, pytest.approx(2 / 41))  # 40: the extremes
