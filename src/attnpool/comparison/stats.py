"""Statistics of a pooler comparison: intervals over seeds, paired tests, the paired bootstrap, Holm's correction.

All comparisons are *paired*: for a given seed, two poolers saw the same folds, data order and recipe, so the
per-seed differences (and the per-example differences within a seed) are what the tests look at.

Intervals respect the metric's range (:func:`score_interval`: Fisher's z for a correlation, the logit for a
share), and the test over seeds is exact (:func:`sign_flip_test`): with ``n`` seeds no p-value goes below
``2 ** (1 - n)``, so two or three seeds can never be "significant", whatever a t-test on them says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnpool.json_values import is_missing
from attnpool.metrics import task_metrics

ScoreFn = Callable[[np.ndarray, np.ndarray], float]

# The values each metric of :func:`attnpool.metrics.task_metrics` can take; intervals stay inside them.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0),
    "accuracy": (0.0, 1.0), "macro_f1": (0.0, 1.0), "auc": (0.0, 1.0),
    "rmse": (0.0, math.inf),
}
# The fewest seeds with which the exact sign-flip test can reach p < 0.05 (2 ** (1 - 6) = 0.031).
MIN_SEEDS_FOR_5_PERCENT = 6
MIN_BOOTSTRAP_UNITS = 10  # fewer examples (or clusters) to draw: no bootstrap interval, p NaN


@dataclass(frozen=True)
class Interval:
    """A mean with its standard deviation and a two-sided confidence interval (NaN where none can be given).

    ``method`` says how the interval was made: ``"t"`` (Student t), ``"fisher_z"`` (t on ``atanh`` of the values,
    mapped back), ``"logit"`` (t on the logit), ``"log"`` (t on the log), ``"t_clipped"`` (t cut to the metric's
    range, when a value lies on its bound) or ``"none"`` (one value, or no spread).
    """

    mean: float
    std: float
    low: float
    high: float
    n: int
    method: str = "t"


@dataclass(frozen=True)
class PairedTest:
    """A difference ``a - b`` with its confidence interval and two-sided p-value."""

    diff: float
    low: float
    high: float
    p: float


@dataclass(frozen=True)
class ExactTest:
    """The exact sign-flip test of paired differences over seeds.

    Attributes:
        diff: The mean difference ``a - b``.
        p: Two-sided p-value over all ``2 ** n`` sign patterns (NaN for fewer than two pairs).
        min_p: The smallest p-value ``n`` seeds allow, ``2 ** (1 - n)``.
        n: Pairs (seeds).
        equal: Whether every pair differs by the same amount (no spread: a t-test would divide by zero).
    """

    diff: float
    p: float
    min_p: float
    n: int
    equal: bool


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


def _no_spread(x: np.ndarray) -> bool:
    """All values equal, up to the rounding of scores that are equal in exact arithmetic (4/1000 - 0/1000...)."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.abs(x).max())))


def metric_range(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take (``(-inf, inf)`` for one not in :data:`METRIC_RANGES`)."""
    return METRIC_RANGES.get(metric, (-math.inf, math.inf))


def _unbounded_scale(low: float, high: float) -> tuple[Callable, Callable, str]:
    """Maps from a range (one bound at least finite) onto the whole line and back, and the name of the scale."""
    if math.isfinite(low) and math.isfinite(high):
        # atanh of the value rescaled to (-1, 1): Fisher's z on (-1, 1), half the logit on (0, 1)
        def forward(v: np.ndarray) -> np.ndarray:
            return np.arctanh((2 * v - low - high) / (high - low))

        def back(z: np.ndarray) -> np.ndarray:
            return (np.tanh(z) * (high - low) + low + high) / 2

        return forward, back, "fisher_z" if (low, high) == (-1.0, 1.0) else "logit"
    sign, bound = (1.0, low) if math.isfinite(low) else (-1.0, high)
    return (lambda v: np.log(sign * (v - bound))), (lambda z: bound + sign * np.exp(z)), "log"


def score_interval(values: Sequence[float], bounds: tuple[float, float] = (-math.inf, math.inf),
                   confidence: float = 0.95) -> Interval:
    """Mean and standard deviation of ``values`` (one score per seed) with a confidence interval inside ``bounds``.

    The Student t interval is taken on a scale where the bounds are at infinity and mapped back, so it can never
    leave the metric's range: for ``(-1, 1)`` (a correlation) Fisher's z, ``atanh(x)``; for ``(0, 1)`` (accuracy,
    F1, AUC) the logit, ``log(x / (1 - x))``; for ``(0, inf)`` the log. Without bounds it is the plain t interval.
    A value on a bound (an accuracy of 1.0) has no image on that scale: the t interval cut to the range is given.
    ``mean`` and ``std`` are those of the values themselves.

    With one value, or when all values are equal, the interval is NaN: one seed, or seeds that agree to the last
    digit, say nothing about the seed-to-seed spread (a zero-width interval would claim there is none).
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("score_interval needs at least one value")
    mean = float(x.mean())
    if not np.all(np.isfinite(x)):  # a seed without a score (a constant prediction has no Pearson): no interval
        return Interval(mean, float("nan"), float("nan"), float("nan"), int(x.size), "none")
    if x.size < 2 or _no_spread(x):
        std = float(x.std(ddof=1)) if x.size > 1 else float("nan")
        return Interval(mean, std, float("nan"), float("nan"), int(x.size), "none")
    std = float(x.std(ddof=1))
    low, high = bounds
    t = float(stats.t.ppf(0.5 + confidence / 2, df=x.size - 1))
    finite_low, finite_high = math.isfinite(low), math.isfinite(high)
    inside = bool(np.all(x > low) and np.all(x < high))
    if not inside or not (finite_low or finite_high):
        half = t * std / np.sqrt(x.size)
        method = "t" if inside else "t_clipped"
        return Interval(mean, std, float(max(low, mean - half)), float(min(high, mean + half)), int(x.size), method)
    forward, back, method = _unbounded_scale(low, high)
    z = forward(x)
    half = t * float(z.std(ddof=1)) / np.sqrt(x.size)
    ends = sorted((float(back(z.mean() - half)), float(back(z.mean() + half))))
    return Interval(mean, std, ends[0], ends[1], int(x.size), method)


def paired_t_test(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, *,
                  bounds: tuple[float, float] = (-math.inf, math.inf)) -> PairedTest:
    """Paired Student t-test of ``a - b`` over seeds (``scipy.stats.ttest_rel``), with the interval of the mean.

    ``bounds`` is the range of the scores: the interval of the difference is kept inside the range a difference can
    take, ``[low - high, high - low]``. When the differences have no spread the t statistic is ``0/0`` or ``x/0``:
    identical pairs give ``p = 1``, a constant non-zero difference gives ``p = NaN`` (not 0: equal differences on
    a few seeds are no evidence; see :func:`sign_flip_test`), and the interval is NaN either way (never one of zero
    width). Fewer than two pairs give NaN.
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_t_test needs one value per seed on both sides, got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError("paired_t_test needs at least one pair")
    d = a - b
    diff = float(d.mean())
    if d.size < 2 or not np.all(np.isfinite(d)):  # one pair, or a seed without a score: nothing to test
        return PairedTest(diff, float("nan"), float("nan"), float("nan"))
    if _no_spread(d):
        return PairedTest(diff, float("nan"), float("nan"), 1.0 if not np.any(d) else float("nan"))
    width = bounds[1] - bounds[0]
    half = float(stats.t.ppf(0.5 + confidence / 2, df=d.size - 1)) * float(d.std(ddof=1)) / np.sqrt(d.size)
    p = float(stats.ttest_rel(a, b).pvalue)
    return PairedTest(diff, float(max(-width, diff - half)), float(min(width, diff + half)), p)


def sign_flip_test(a: Sequence[float], b: Sequence[float], *, num_samples: int = 100_000,
                   seed: int = 0) -> ExactTest:
    """Exact paired test over seeds: the sign-flip permutation test of the mean of ``a - b``.

    Under the null hypothesis (no difference between the two poolers) each seed's difference is as likely positive
    as negative. The p-value is the share of the ``2 ** n`` sign patterns whose mean difference is at least as far
    from 0 as the observed one (``scipy.stats.permutation_test``, two-sided); it makes no assumption of normality
    and can never go below ``2 ** (1 - n)``: 0.5 for two seeds, 0.25 for three, below 0.05 from six on. With more
    than ``log2(num_samples)`` seeds the patterns are sampled (``seed``) rather than enumerated.
    """
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"sign_flip_test needs one value per seed on both sides, got {a.size} and {b.size}")
    d = a - b
    n = int(d.size)
    if n == 0:
        raise ValueError("sign_flip_test needs at least one pair")
    min_p = float(2.0 ** (1 - n))
    if n < 2 or not np.all(np.isfinite(d)):  # one pair, or a seed without a score (NaN): no p-value, not 0
        return ExactTest(float(d.mean()), float("nan"), min_p, n, _no_spread(d))
    equal = _no_spread(d)
    if abs(d.mean()) <= 1e-12 * np.abs(d).max(initial=0.0):  # no difference, or differences that cancel out
        return ExactTest(float(d.mean()), 1.0, min_p, n, equal)
    result = stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="two-sided",
                                    n_resamples=num_samples, vectorized=True, rng=np.random.default_rng(seed))
    return ExactTest(float(d.mean()), float(min(1.0, result.pvalue)), min_p, n, equal)


def paired_bootstrap(groups: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], score: ScoreFn, *,
                     num_samples: int = 1000, confidence: float = 0.95, seed: int = 0,
                     clusters: Sequence[np.ndarray] | None = None) -> PairedTest:
    """Paired bootstrap over examples of ``score(a) - score(b)``, averaged over groups (seeds).

    Each replicate draws examples with replacement (the same draw for ``a`` and ``b``: paired), scores both
    predictions on the draw, and averages the difference over the groups.

    ``clusters`` names what is drawn: one key per row of every group. A replicate draws as many keys as there are
    (over all groups) and keeps, in every group, the rows of the drawn keys, as many times as each was drawn. Keys
    shared between groups are drawn once for all of them: seeds that validated on the same examples (the rows of a
    k-fold run, a fixed split) share one sample of examples, and drawing it separately per seed would shrink the
    interval by about the number of seeds. Give the row numbers as keys for a bootstrap over examples, or the rows'
    groups (PPPM's anchors) for a cluster bootstrap: rows of one group are not independent, and resampling them one
    by one makes the interval too narrow. Without ``clusters`` every group's rows are drawn on their own (groups of
    unrelated rows).

    No interval and a NaN p-value when there are fewer than :data:`MIN_BOOTSTRAP_UNITS` keys to draw (a bootstrap
    over two anchors is no evidence), or when the replicates do not vary while the observed difference is not 0.

    Args:
        groups: One ``(target, prediction_a, prediction_b)`` per seed; rows aligned.
        score: ``score(target, prediction) -> float`` (the task's primary metric; greater is better or not, the
            difference is reported as is).
        num_samples: Bootstrap replicates.
        confidence: Of the percentile interval.
        seed: Of the resampling.
        clusters: One array of keys per group, aligned with its rows; ``None``: each group's rows on their own.

    Returns:
        The observed difference, the percentile interval and the two-sided bootstrap p-value
        ``min(1, 2 * (1 + #replicates on the far side of 0) / (1 + num_samples))``.
    """
    if not groups:
        raise ValueError("paired_bootstrap needs at least one group of predictions")
    if clusters is not None:
        clusters = [_keys(keys) for keys in clusters]
        if len(clusters) != len(groups):
            raise ValueError(f"paired_bootstrap: {len(clusters)} cluster arrays for {len(groups)} groups; give one "
                             "per group")
        for keys, (t, _, _) in zip(clusters, groups, strict=True):
            if len(keys) != len(t):
                raise ValueError(f"paired_bootstrap: {len(keys)} cluster keys for {len(t)} rows; give one per row")
    rng = np.random.default_rng(seed)
    observed = float(np.mean([score(t, a) - score(t, b) for t, a, b in groups]))
    nan = PairedTest(observed, float("nan"), float("nan"), float("nan"))
    replicates = np.zeros(num_samples)
    if clusters is None:
        if min(len(t) for t, _, _ in groups) < MIN_BOOTSTRAP_UNITS:
            return nan
        for t, a, b in groups:
            n = len(t)
            for r in range(num_samples):
                idx = rng.integers(0, n, n)
                replicates[r] += score(t[idx], a[idx]) - score(t[idx], b[idx])
    else:
        keys, codes = np.unique(np.concatenate(clusters), return_inverse=True)
        if len(keys) < MIN_BOOTSTRAP_UNITS:
            return nan
        codes = np.split(codes.reshape(-1), np.cumsum([len(c) for c in clusters])[:-1])
        rows = [np.arange(len(t)) for t, _, _ in groups]
        for r in range(num_samples):
            drawn = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys))
            for (t, a, b), code, row in zip(groups, codes, rows, strict=True):
                idx = np.repeat(row, drawn[code])  # each row as many times as its key was drawn
                replicates[r] += score(t[idx], a[idx]) - score(t[idx], b[idx]) if len(idx) else np.nan
    replicates /= len(groups)
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return nan
    if _no_spread(replicates) and observed != 0:  # e.g. every drawn example favours a: no spread to test
        return nan
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    far = min(np.sum(replicates <= 0), np.sum(replicates >= 0))
    p = min(1.0, 2 * (1 + far) / (1 + replicates.size))
    return PairedTest(observed, float(low), float(high), float(p))


def _keys(keys: Any) -> np.ndarray:
    """Cluster keys as text (one type for all groups: 5 and "5" are one key), none of them missing."""
    values = np.asarray(keys, dtype=object).reshape(-1)
    missing = [i for i, v in enumerate(values) if is_missing(v)]
    if missing:
        raise ValueError(f"paired_bootstrap: cluster keys are missing at rows {missing[:5]}; every row needs a key")
    return values.astype(str)


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


def _pearson(target: np.ndarray, prediction: np.ndarray) -> float:
    """The Pearson of :func:`attnpool.metrics.regression_metrics`, all target columns at once (no SciPy call).

    Averaged over the target columns that vary among the rows (a column constant in a bootstrap draw, e.g. a sparse
    one whose non-zero rows were not drawn, has no correlation to score and is left out, not NaN); NaN when none
    varies, or when a prediction column is constant or not finite where its target varies (a collapsed model).
    """
    t = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    p = np.asarray(prediction, dtype=np.float64).reshape(len(prediction), -1)
    if len(t) == 0:
        return float("nan")
    varying = np.ptp(t, axis=0) > 0  # as regression_metrics: a column with a NaN target does not vary either
    if not varying.any():
        return float("nan")
    t, p = t[:, varying], p[:, varying]
    if not np.isfinite(p).all() or (np.ptp(p, axis=0) == 0).any():
        return float("nan")
    tc, pc = t - t.mean(axis=0), p - p.mean(axis=0)
    tc /= np.abs(tc).max(axis=0)  # scaled as scipy.stats.pearsonr: no overflow of the squares
    pc /= np.abs(pc).max(axis=0)
    r = np.clip(np.sum(tc * pc, axis=0) / np.sqrt(np.sum(tc * tc, axis=0) * np.sum(pc * pc, axis=0)), -1.0, 1.0)
    return float(np.mean(np.round(r) if len(t) == 2 else r))  # pearsonr gives exactly +-1 on two rows


def metric_function(task: str, metric: str) -> ScoreFn:
    """``score(target, prediction)`` for one metric of :func:`attnpool.metrics.task_metrics`.

    Pearson and single-label accuracy (the common cases, evaluated thousands of times by the bootstrap) are
    computed directly: the same values as :func:`~attnpool.metrics.task_metrics`, which also computes every other
    metric of the task (macro-F1 and ROC AUC through scikit-learn) at each call. Every other metric (Spearman,
    RMSE, macro-F1, AUC) is taken from :func:`~attnpool.metrics.task_metrics` itself.
    """
    if task == "regression" and metric == "pearson":
        return _pearson

    if task in ("binary", "multiclass") and metric == "accuracy":

        def accuracy(target: np.ndarray, prediction: np.ndarray) -> float:
            prediction = np.asarray(prediction)
            if not np.isfinite(prediction).all():  # a diverged run: argmax of NaN is 0, "always class 0"
                return float("nan")
            return float(np.mean(prediction.argmax(axis=1) == np.asarray(target)))

        return accuracy

    def from_task_metrics(target: np.ndarray, prediction: np.ndarray) -> float:
        return float(task_metrics(task, target, prediction).get(metric, float("nan")))

    return from_task_metrics
