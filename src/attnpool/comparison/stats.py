"""Statistics of a pooler comparison: intervals over seeds, paired tests, the paired bootstrap, Holm's correction.

All comparisons are *paired*: for a given seed, two poolers saw the same folds, data order and recipe, so the
per-seed differences (and the per-example differences within a seed) are what the tests look at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnpool.metrics import task_metrics

ScoreFn = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class Interval:
    """A mean with its standard deviation and a two-sided confidence interval."""

    mean: float
    std: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class PairedTest:
    """A difference ``a - b`` with its confidence interval and two-sided p-value."""

    diff: float
    low: float
    high: float
    p: float


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean, sample standard deviation and Student-t confidence interval of ``values`` (e.g. one score per seed).

    With one value the standard deviation and the interval are NaN: one seed says nothing about seed noise.
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, float("nan"), float("nan"), float("nan"), 1)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df=x.size - 1)) * std / np.sqrt(x.size)
    return Interval(mean, std, mean - half, mean + half, int(x.size))


def paired_t_test(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> PairedTest:
    """Paired Student t-test of ``a - b`` over seeds (``scipy.stats.ttest_rel``), with the interval of the mean.

    Identical pairs give ``p = 1``; a constant non-zero difference gives ``p = 0``; fewer than two pairs give NaN.
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_t_test needs one value per seed on both sides, got {a.size} and {b.size}")
    d = a - b
    interval = t_interval(d, confidence)
    if d.size < 2:
        p = float("nan")
    elif np.ptp(d) == 0:  # no spread: the t statistic is 0/0 or x/0
        p = 1.0 if d[0] == 0 else 0.0
    else:
        p = float(stats.ttest_rel(a, b).pvalue)
    return PairedTest(interval.mean, interval.low, interval.high, p)


def paired_bootstrap(groups: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], score: ScoreFn, *,
                     num_samples: int = 1000, confidence: float = 0.95, seed: int = 0) -> PairedTest:
    """Paired bootstrap over examples of ``score(a) - score(b)``, averaged over groups (seeds).

    Each replicate draws the examples of every group with replacement (the same draw for ``a`` and ``b``: paired),
    scores both predictions on the draw, and averages the difference over the groups. Groups are resampled
    separately because different seeds may hold different rows (a seeded ``--limit`` subset).

    Args:
        groups: One ``(target, prediction_a, prediction_b)`` per seed; rows aligned.
        score: ``score(target, prediction) -> float`` (the task's primary metric; greater is better or not, the
            difference is reported as is).
        num_samples: Bootstrap replicates.
        confidence: Of the percentile interval.
        seed: Of the resampling.

    Returns:
        The observed difference, the percentile interval and the two-sided bootstrap p-value
        ``min(1, 2 * (1 + #replicates on the far side of 0) / (1 + num_samples))``.
    """
    if not groups:
        raise ValueError("paired_bootstrap needs at least one group of predictions")
    rng = np.random.default_rng(seed)
    observed = float(np.mean([score(t, a) - score(t, b) for t, a, b in groups]))
    replicates = np.zeros(num_samples)
    for t, a, b in groups:
        n = len(t)
        for r in range(num_samples):
            idx = rng.integers(0, n, n)
            replicates[r] += score(t[idx], a[idx]) - score(t[idx], b[idx])
    replicates /= len(groups)
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return PairedTest(observed, float("nan"), float("nan"), float("nan"))
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    far = min(np.sum(replicates <= 0), np.sum(replicates >= 0))
    p = min(1.0, 2 * (1 + far) / (1 + replicates.size))
    return PairedTest(observed, float(low), float(high), float(p))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down correction for multiple comparisons (controls the family-wise error rate).

    NaN p-values (tests that could not be run) stay NaN and do not count as tests.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    running = 0.0
    for rank, i in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))  # adjusted p-values never decrease
        out[i] = running
    return [float(v) for v in out]


def metric_function(task: str, metric: str) -> ScoreFn:
    """``score(target, prediction)`` for one metric of :func:`attnpool.metrics.task_metrics`.

    Pearson (the common case, evaluated thousands of times by the bootstrap) is computed directly.
    """
    if task == "regression" and metric == "pearson":

        def pearson(target: np.ndarray, prediction: np.ndarray) -> float:
            t = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
            p = np.asarray(prediction, dtype=np.float64).reshape(len(prediction), -1)
            values = []
            for j in range(t.shape[1]):
                tc, pc = t[:, j] - t[:, j].mean(), p[:, j] - p[:, j].mean()
                denominator = np.sqrt((tc @ tc) * (pc @ pc))
                values.append(float(tc @ pc / denominator) if denominator > 0 else float("nan"))
            return float(np.mean(values))

        return pearson

    def from_task_metrics(target: np.ndarray, prediction: np.ndarray) -> float:
        return float(task_metrics(task, target, prediction).get(metric, float("nan")))

    return from_task_metrics
