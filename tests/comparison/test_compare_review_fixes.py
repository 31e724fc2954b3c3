"""Review fixes of `attnpool compare`: bootstrap ties, the multilabel score, n/a cells, the flags and metric named.

The summaries are built from readers replaced by known numbers (no training), as in test_stats.py.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from attnpool.comparison import PoolerSpec, scores, stats, summary
from attnpool.comparison.specs import contenders
from attnpool.metrics import task_metrics

N = 200


def _summarise(tmp_path, monkeypatch, correct: dict, seeds: list[int], *, task: str = "binary",
               diverged: tuple[str, int] | None = None, cost: tuple[float, float] = (10.0, 1e9),
               standardised: bool = False):
    """The table of poolers with ``correct[(pooler, seed)]`` of N rows right (``diverged``: NaN on that run).

    ``task="regression"``: the first ``correct`` rows are predicted exactly, the others by a constant.
    """
    def key(run_dir):
        return run_dir.parent.name, int(run_dir.name.removeprefix("seed_"))

    def predictions(run_dir, task):
        right = np.arange(N) < correct[key(run_dir)]
        if task == "regression":
            target = (np.arange(N) % 7).astype(float)
            scores = np.where(right, target, 3.0 + (np.arange(N) % 2))
        else:
            target = np.arange(N) % 2
            scores = np.eye(2)[np.where(right, target, 1 - target)] * 0.8 + 0.1
        return np.arange(N), target, scores * np.nan if key(run_dir) == diverged else scores

    monkeypatch.setattr(summary, "run_score",
                        lambda run_dir, task: math.nan if key(run_dir) == diverged else correct[key(run_dir)] / N)
    monkeypatch.setattr(summary, "run_predictions", predictions)
    monkeypatch.setattr(summary, "_cost", lambda run_dir: cost)
    monkeypatch.setattr(summary, "_standardised", lambda run_dir: standardised)
    monkeypatch.setattr(summary, "_pooling_stats", lambda run_dir: {})
    monkeypatch.setattr(summary, "_parameter_count", lambda run_dir: 1000)
    monkeypatch.setattr(summary, "shared_bootstrap_keys",
                        lambda runs, **kw: ({key: np.arange(N).astype(str) for key in runs}, False))
    specs = [PoolerSpec.parse(name) for name in dict.fromkeys(pooler for pooler, _ in correct)]
    return summary.summarise(tmp_path, task, specs, specs[0], seeds, bootstrap=50)


def _line(markdown: str, pooler: str) -> str:
    return next(row for row in markdown.splitlines() if row.startswith(f"| `{pooler}`"))


# ---------------------------------------------------------------- 1. bootstrap ties


def test_bootstrap_replicates_that_tie_in_exact_arithmetic_are_exactly_zero():
    """Seed 1's +k/61 and seed 2's -k/61 summed to +-1e-17: a tie counted on one side only, p 0.066 instead of
    0.098 (98/1001: 48 of 1000 replicates at or below 0, the ties included)."""
    n, target = 61, np.arange(61) % 2
    rng = np.random.default_rng(0)
    groups = []
    for win, lose in [((0, 1, 2), ()), ((), (0, 1, 2)), ((5, 6, 7), ())]:  # seeds 1 and 2 cancel; seed 3: a wins
        a = rng.random(n) < 0.7
        b = a.copy()
        a[list(win)], b[list(win)] = True, False
        a[list(lose)], b[list(lose)] = False, True
        groups.append((target, np.eye(2)[np.where(a, target, 1 - target)], np.eye(2)[np.where(b, target, 1 - target)]))
    accuracy, keys = stats.metric_function("binary", "accuracy"), [np.arange(n).astype(str)] * 3
    observed, replicates = stats.bootstrap_replicates(groups, accuracy, num_samples=1000, clusters=keys)
    assert not np.any((replicates != 0) & (np.abs(replicates) < 1e-12))  # no tie left at 1e-17
    exact = np.round(replicates * 3 * n) / (3 * n)  # every replicate is a whole number of 1/(3n)
    assert np.count_nonzero(exact == 0) == np.count_nonzero(replicates == 0) > 0
    test = stats.paired_bootstrap(groups, accuracy, num_samples=1000, clusters=keys)
    assert test.p == stats.percentile_test(exact)[2] == 2 * 49 / 1001
    assert test.low == 0.0 and test.high == pytest.approx(2 / 61)
    assert observed == pytest.approx(1 / 61)


# ---------------------------------------------------------------- 2. the multilabel score, and the bootstrap said


def test_the_bootstraps_multilabel_macro_f1_is_the_runs_without_computing_every_metric(monkeypatch):
    """It went through task_metrics (accuracy, F1 and ROC AUC by scikit-learn) on every replicate: 20 minutes."""
    rng = np.random.default_rng(3)
    cases = []
    for rows, labels in [(40, 5), (7, 3), (1, 3), (25, 4), (60, 6), *[(int(r), 3) for r in rng.integers(1, 30, 40)]]:
        target = (rng.random((rows, labels)) < rng.random(labels)).astype(int)
        target[:, 0] = 0  # a label no row has
        prediction = rng.random((rows, labels)) * rng.random(labels)
        prediction[:, 1] = 0.1  # a label never predicted
        prediction[: rows // 2, 2] = 0.5  # predicted at exactly 0.5
        cases.append((target, prediction, task_metrics("multilabel", target, prediction)["macro_f1"]))
    nothing = np.zeros((10, 3), dtype=int)
    cases += [(nothing, np.full((10, 3), 0.2), 1.0), (nothing, np.full((10, 3), np.nan), math.nan)]

    def refuse(task, *_):
        raise AssertionError(f"task_metrics({task!r}) called")

    monkeypatch.setattr(scores, "task_metrics", refuse)
    macro_f1 = scores.metric_function("multilabel", "macro_f1")
    for target, prediction, expected in cases:
        got = macro_f1(target, prediction)
        assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_the_comparison_says_how_much_bootstrap_it_is_about_to_run(tmp_path, monkeypatch, caplog):
    correct = {(pooler, seed): 150 + i for i, pooler in enumerate(("mean", "attention", "max")) for seed in (1, 2)}
    with caplog.at_level(logging.INFO, logger="attnpool.comparison"):
        _summarise(tmp_path, monkeypatch, correct, [1, 2])
    assert "compare: bootstrap: 50 replicates x 2 seeds x 2 contenders" in caplog.messages


# ---------------------------------------------------------------- 3. which side has no score


def test_a_baseline_without_a_score_is_named_in_every_difference(tmp_path, monkeypatch):
    """Every contender's Δ said "n/a (no score on seed 1: diverged?)", as if the contender had diverged."""
    correct = {(pooler, seed): 150 for pooler in ("mean", "attention") for seed in (1, 2)}
    table = _summarise(tmp_path, monkeypatch, correct, [1, 2], diverged=("mean", 1)).markdown
    line = _line(table, "attention")
    assert "| n/a (baseline has no score on seed 1) |" in line and "diverged?" not in line, line
    assert "| n/a (no score on seed 1: diverged?) |" in _line(table, "mean")  # the baseline's own interval
    row = {"diff": math.nan, "per_seed": {"1": math.nan, "2": 0.5, "3": 0.6},
           "diff_per_seed": {"1": math.nan, "2": math.nan, "3": math.nan}}
    assert summary._delta(row) == "n/a (no score on seed 1: diverged?; baseline has no score on seeds 2, 3)"


# ---------------------------------------------------------------- 4. the note on too few seeds, costs, --baseline


def test_the_too_few_seeds_note_never_gives_a_p_value_above_one(tmp_path, monkeypatch):
    """1 seed and 2 poolers read "2 x 1 = 2"; 2 seeds and 3 poolers "3 x 0.5 = 1.5"."""
    one = {(pooler, 1): 150 + i for i, pooler in enumerate(("mean", "attention", "max"))}
    table = _summarise(tmp_path / "one", monkeypatch, one, [1]).markdown
    assert ("**1 seed(s) are too few to test a difference over seeds**: one seed allows no test (the test over "
            "seeds needs two at least); 7 seeds are needed for p < 0.05 after Holm.") in table
    assert "2 x 1 = 2" not in table
    two = {(pooler, seed): 150 + i for i, pooler in enumerate(("mean", "attention", "max", "cls")) for seed in (1, 2)}
    table = _summarise(tmp_path / "two", monkeypatch, two, [1, 2]).markdown
    assert ("the smallest p-value they allow is 0.5, and after Holm's correction over the 3 poolers compared to the "
            "baseline 3 x 0.5 = 1 (Holm's p-values stop at 1); 7 seeds are needed") in table


def test_a_cost_not_measured_reads_n_a_not_n_a_x(tmp_path, monkeypatch):
    correct = {(pooler, seed): 150 for pooler in ("mean", "attention") for seed in (1, 2)}
    table = _summarise(tmp_path, monkeypatch, correct, [1, 2], cost=(math.nan, math.nan)).markdown
    assert _line(table, "attention").endswith("| n/a | n/a |") and "n/ax" not in table


def test_an_unknown_baseline_names_the_baseline_flag():
    with pytest.raises(ValueError, match=r"^--baseline nope: Unknown pooler 'nope'\. Available poolers: "):
        contenders(["attention"], "nope")
    with pytest.raises(ValueError, match=r"^--poolings atention: Unknown pooler 'atention'\. Did you mean "):
        contenders(["atention"], "mean")


# ---------------------------------------------------------------- 5. the metric compared, in every file


def test_compare_json_and_png_name_the_per_fold_standardised_pearson(tmp_path, monkeypatch):
    """compare.json and compare.png said "pearson" for --loss pearson runs scored pearson_folds_standardised."""
    labels = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (labels.append(fig.axes[0].get_xlabel()),
                                                                  save(fig, *a, **k))[1])
    correct = {(pooler, seed): 120 + 10 * i for i, pooler in enumerate(("mean", "attention")) for seed in (1, 2)}
    result = _summarise(tmp_path, monkeypatch, correct, [1, 2], task="regression", standardised=True)
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["metric"] == result.metric == "pearson_folds_standardised"
    assert {r["metric"] for r in saved["poolers"]} == {"pearson_folds_standardised"}
    assert saved["metric_range"] == [-1.0, 1.0]  # still a correlation's range
    assert labels == ["pearson_folds_standardised (mean over seeds, 95% CI; x: single seeds)"]
    plain = _summarise(tmp_path / "plain", monkeypatch, correct, [1, 2], task="regression")
    assert json.loads((tmp_path / "plain" / "compare.json").read_text())["metric"] == plain.metric == "pearson"
