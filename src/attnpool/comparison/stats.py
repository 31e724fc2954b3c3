"""Statistics of a pooler comparison: intervals over seeds, paired tests, the paired bootstrap, Holm's correction.

All comparisons are *paired*: for a given seed, two poolers saw the same folds, data order and recipe, so the
per-seed differences (and the per-example differences within a seed) are what the tests look at.

Intervals respect the metric's range (:func:`score_interval`), and the test over seeds is exact
(:func:`sign_flip_test`): with ``n`` seeds no p-value goes below ``2 ** (1 - n)``, whatever a t-test says.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnpool.comparison.scores import ScoreFn
from attnpool.comparison.scores import metric_function as metric_function  # re-exported: stats.metric_function
from attnpool.json_values import is_missing

# The values each metric of :func:`attnpool.metrics.task_metrics` can take; intervals stay inside them.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0),
    "accuracy": (0.0, 1.0), "macro_f1": (0.0, 1.0), "auc": (0.0, 1.0),
    "rmse": (0.0, math.inf),
}
# The fewest seeds with which the exact sign-flip test can reach p < 0.05 (2 ** (1 - 6) = 0.031).
MIN_SEEDS_FOR_5_PERCENT = 6
MIN_BOOTSTRAP_UNITS = 10  # fewer examples (or clusters) to draw: no bootstrap interval, p NaN
# Up to this many seeds the sign-flip test enumerates every pattern (2 ** 19 sums, in chunks); beyond, it samples.
MAX_EXACT_SEEDS = 20
SIGN_FLIP_SAMPLES = 100_000  # the patterns drawn beyond MAX_EXACT_SEEDS seeds
_CHUNK = 1 << 15  # sign patterns per matrix product


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
        p: Two-sided p-value over all ``2 ** n`` sign patterns, or over sampled ones (``sampled``); NaN for fewer
            than two pairs.
        min_p: The smallest p-value the test can give (:func:`sign_flip_floor`): ``2 ** (1 - n)`` when exact,
            ``1 / (1 + num_samples)`` when sampled.
        n: Pairs (seeds).
        equal: Whether every pair differs by the same amount (no spread: a t-test would divide by zero).
        sampled: Whether the patterns were sampled (more than :data:`MAX_EXACT_SEEDS` seeds), not all enumerated.
    """

    diff: float
    p: float
    min_p: float
    n: int
    equal: bool
    sampled: bool = False


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


def sign_flip_floor(n: int, num_samples: int = SIGN_FLIP_SAMPLES) -> float:
    """The smallest p-value :func:`sign_flip_test` can give over ``n`` seeds.

    ``2 ** (1 - n)`` up to :data:`MAX_EXACT_SEEDS` seeds; beyond (sampled), ``1 / (1 + num_samples)`` (or
    ``2 ** (1 - n)``, if larger). ``n`` below 2: 1.0 (no test).
    """
    exact = float(2.0 ** (1 - n)) if n >= 1 else 1.0
    return exact if n <= MAX_EXACT_SEEDS else max(exact, 1.0 / (1 + num_samples))


def seeds_needed(family: int = 1, alpha: float = 0.05) -> int | None:
    """The fewest seeds with which :func:`sign_flip_test` can reach ``p < alpha`` after Holm's correction.

    The smallest Holm p-value over ``family`` poolers is ``family`` times :func:`sign_flip_floor`: 6 seeds for one
    pooler, 7 for two or three, 8 for four or five. ``None`` when no number of seeds reaches it.
    """
    for n in range(2, 64):
        if max(1, family) * sign_flip_floor(n) < alpha:
            return n
    return None


def sign_flip_test(a: Sequence[float], b: Sequence[float], *, num_samples: int = SIGN_FLIP_SAMPLES,
                   seed: int = 0) -> ExactTest:
    """Exact paired test over seeds: the sign-flip permutation test of the mean of ``a - b``.

    Under the null hypothesis (no difference between the two poolers) each seed's difference is as likely positive
    as negative. The p-value is the share of the ``2 ** n`` sign patterns whose mean difference is at least as far
    from 0 as the observed one (two-sided), never below ``2 ** (1 - n)``. Up to :data:`MAX_EXACT_SEEDS` seeds every
    pattern is enumerated; with more, ``num_samples`` random patterns (``seed``) are drawn and the p-value is
    ``(1 + #as extreme) / (1 + num_samples)`` (``sampled`` and ``min_p`` say so).
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"sign_flip_test needs one value per seed on both sides, got {a.size} and {b.size}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1:
        raise ValueError(f"sign_flip_test: num_samples is a number of sign patterns and must be >= 1, got "
                         f"{num_samples!r}")
    d = a - b
    n = int(d.size)
    if n == 0:
        raise ValueError("sign_flip_test needs at least one pair")
    sampled = n > MAX_EXACT_SEEDS
    min_p = sign_flip_floor(n, num_samples)
    if n < 2 or not np.all(np.isfinite(d)):  # one pair, or a seed without a score (NaN): no p-value, not 0
        return ExactTest(float(d.mean()), float("nan"), min_p, n, _no_spread(d), sampled)
    equal = _no_spread(d)
    if abs(d.mean()) <= 1e-12 * np.abs(d).max(initial=0.0):  # no difference, or differences that cancel out
        return ExactTest(float(d.mean()), 1.0, min_p, n, equal, sampled)
    # a pattern as extreme as the observed one up to rounding (sums of the same values in another order) counts
    threshold = abs(float(d.sum())) - 1e-12 * float(np.abs(d).sum())
    if sampled:
        rng, extreme, num_samples = np.random.default_rng(seed), 0, int(num_samples)
        for start in range(0, num_samples, _CHUNK):
            signs = 1.0 - 2.0 * rng.integers(0, 2, (min(_CHUNK, num_samples - start), n))
            extreme += int(np.count_nonzero(np.abs(signs @ d) >= threshold))
        p = (1 + extreme) / (1 + num_samples)
    else:  # the first seed's sign fixed: the other half of the patterns are these negated, as extreme
        half, bits = 1 << (n - 1), np.arange(n - 1)
        extreme = 0
        for start in range(0, half, _CHUNK):
            codes = np.arange(start, min(start + _CHUNK, half))
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            extreme += int(np.count_nonzero(np.abs(d[0] + signs @ d[1:]) >= threshold))
        p = extreme / half
    return ExactTest(float(d.mean()), float(min(1.0, p)), min_p, n, equal, sampled)


def paired_bootstrap(groups: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], score: ScoreFn, *,
                     num_samples: int = 1000, confidence: float = 0.95, seed: int = 0,
                     clusters: Sequence[np.ndarray] | None = None) -> PairedTest:
    """:func:`bootstrap_replicates` and their :func:`replicate_test` at ``confidence``."""
    observed, replicates = bootstrap_replicates(groups, score, num_samples=num_samples, seed=seed, clusters=clusters)
    return replicate_test(observed, replicates, confidence)


def replicate_test(observed: float, replicates: np.ndarray | None, confidence: float = 0.95) -> PairedTest:
    """The observed difference with the :func:`percentile_test` of its replicates (all NaN but it without them)."""
    if replicates is None:
        return PairedTest(observed, float("nan"), float("nan"), float("nan"))
    return PairedTest(observed, *percentile_test(replicates, confidence))


def bootstrap_replicates(groups: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], score: ScoreFn, *,
                         num_samples: int = 1000, seed: int = 0, clusters: Sequence[np.ndarray] | None = None
                         ) -> tuple[float, np.ndarray | None]:
    """The observed ``score(a) - score(b)`` averaged over groups (seeds), and its paired bootstrap replicates.

    Each replicate draws examples with replacement (the same draw for ``a`` and ``b``: paired), scores both
    predictions on the draw, and averages the difference over the groups.

    ``clusters`` names what is drawn: one key per row of every group. A replicate draws as many keys as there are
    (over all groups) and keeps, in every group, the rows of the drawn keys, as many times as each was drawn. Keys
    shared between groups are drawn once for all of them (seeds that validated on the same examples share one
    sample: drawing it per seed would shrink the interval). Give the row numbers as keys for a bootstrap over
    examples, or the rows' groups (PPPM's anchors) for a cluster bootstrap: rows of one group are not independent.
    Without ``clusters`` every group's rows are drawn on their own.

    No replicates (``None``) with fewer than :data:`MIN_BOOTSTRAP_UNITS` keys to draw, or when the replicates do
    not vary while the observed difference is not 0. A difference within ``1e-12`` times its largest summed term
    of 0 is 0: a tie in exact arithmetic (rounded to 1e-17), which :func:`percentile_test` counts on both sides.

    Args:
        groups: One ``(target, prediction_a, prediction_b)`` per seed; rows aligned.
        score: ``score(target, prediction) -> float`` (the task's primary metric; greater is better or not, the
            difference is reported as is).
        num_samples: Bootstrap replicates.
        seed: Of the resampling.
        clusters: One array of keys per group, aligned with its rows; ``None``: each group's rows on their own.

    Returns:
        The observed difference and the finite replicates (``None`` where there is no test, as above), for
        :func:`replicate_test`: its interval excludes 0 exactly when ``p < 1 - confidence``.
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
    rng, per_group = np.random.default_rng(seed), np.array([score(t, a) - score(t, b) for t, a, b in groups])
    terms = np.zeros((len(groups), num_samples))  # each group's difference on each replicate
    if clusters is None:
        if min(len(t) for t, _, _ in groups) < MIN_BOOTSTRAP_UNITS:
            return float(np.mean(per_group)), None
        for g, (t, a, b) in enumerate(groups):
            for r in range(num_samples):
                idx = rng.integers(0, len(t), len(t))
                terms[g, r] = score(t[idx], a[idx]) - score(t[idx], b[idx])
    else:
        keys, codes = np.unique(np.concatenate(clusters), return_inverse=True)
        if len(keys) < MIN_BOOTSTRAP_UNITS:
            return float(np.mean(per_group)), None
        codes = np.split(codes.reshape(-1), np.cumsum([len(c) for c in clusters])[:-1])
        rows = [np.arange(len(t)) for t, _, _ in groups]
        for r in range(num_samples):
            drawn = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys))
            for g, ((t, a, b), code, row) in enumerate(zip(groups, codes, rows, strict=True)):
                idx = np.repeat(row, drawn[code])  # each row as many times as its key was drawn
                terms[g, r] = score(t[idx], a[idx]) - score(t[idx], b[idx]) if len(idx) else np.nan
    # one seed's +1/61 and another's -1/61 sum to 1e-17, not 0: a tie, which the test counts on both sides
    tie = 1e-12 * np.abs(np.append(per_group, terms)[np.isfinite(np.append(per_group, terms))]).max(initial=0.0)
    observed = float(np.mean(per_group))
    observed = 0.0 if abs(observed) <= tie else observed
    replicates = terms.mean(axis=0)
    replicates = np.where(np.abs(replicates) <= tie, 0.0, replicates)[np.isfinite(replicates)]
    if replicates.size == 0 or (_no_spread(replicates) and observed != 0):  # e.g. every drawn example favours a
        return observed, None
    return observed, replicates


def percentile_test(replicates: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """The percentile interval of bootstrap replicates and their two-sided p-value against 0, made to agree.

    ``p = min(1, 2 * (1 + far) / (1 + R))`` over ``R`` replicates, ``far`` those on the far side of 0 (``<= 0`` or
    ``>= 0``, whichever are fewer; a replicate at exactly 0 counts on both sides: it is no evidence either way).
    The interval is the ``k``-th smallest and the ``k``-th largest replicate, ``k = ceil((R + 1) * (1 -
    confidence) / 2) - 1`` (25 of 1000 at 95%): that is the rule under which it excludes 0 exactly when
    ``p < 1 - confidence`` (interpolated quantiles do not). With too few replicates for any such ``k`` (fewer than
    40 at 95%) p cannot fall below ``1 - confidence`` either, and the interval is NaN.
    """
    r = np.sort(np.asarray(replicates, dtype=np.float64))
    far = min(np.count_nonzero(r <= 0), np.count_nonzero(r >= 0))
    p = min(1.0, 2 * (1 + far) / (1 + r.size))
    k = math.ceil((r.size + 1) * (1 - confidence) / 2 - 1e-9) - 1  # 1e-9: 1 - 0.95 is 0.05000000000000004
    if k < 1:
        return float("nan"), float("nan"), float(p)
    return float(r[k - 1]), float(r[r.size - k]), float(p)


def _keys(keys: Any) -> np.ndarray:
    """Cluster keys as text (one type for all groups: 5 and "5" are one key), none of them missing."""
    values = np.asarray(keys, dtype=object).reshape(-1)
    missing = [i for i, v in enumerate(values) if is_missing(v)]
    if missing:
        raise ValueError(f"paired_bootstrap: cluster keys are missing at rows {missing[:5]}; every row needs a key")
    return values.astype(str)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down correction for multiple comparisons (controls the family-wise error rate).

    Every value counts in the family, ``m = len(pvalues)``. A NaN p-value (a test that could not be run: a seed
    without a score) counts as p = 1, never rejected, and stays NaN: leaving it out would shrink the family and
    lower every other adjusted p-value, as if fewer poolers had been compared.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    untested = np.isnan(p)
    filled = np.where(untested, 1.0, p)
    out = np.empty(p.shape)
    running = 0.0
    for rank, i in enumerate(np.argsort(filled, kind="stable")):
        running = max(running, min(1.0, (p.size - rank) * filled[i]))  # adjusted p-values never decrease
        out[i] = running
    out[untested] = np.nan
    return [float(v) for v in out]
