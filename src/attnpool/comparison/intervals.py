"""The intervals ``compare.md`` prints beside Holm-corrected p-values, at the family-wise (Bonferroni) level.

Over ``m`` poolers compared to one baseline, Holm's p-value is at most ``m`` times the raw one. An interval at level
``1 - 0.05 / m`` built from the *same* test as the p-value (its inversion) excludes 0 only when the raw p-value is
under ``0.05 / m``, hence only when Holm's is under 0.05. The reverse need not hold (Holm can reject where
Bonferroni does not): an interval may contain 0 beside a Holm p under 0.05, never exclude it beside one of 0.05 or
more.

Over seeds the test is the sign-flip test (:func:`~attnpool.comparison.stats.sign_flip_test`); its inversion, the
shifts ``delta`` whose differences ``d - delta`` it does not reject, is :func:`sign_flip_interval`. Over examples it is
the bootstrap's percentile test, whose interval at that level is :func:`~attnpool.comparison.stats.replicate_test`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnpool.comparison.stats import SIGN_FLIP_SAMPLES, _no_spread, replicate_test, sign_flip_floor, sign_flip_test

FAMILY_ALPHA = 0.05  # the family-wise error rate the intervals and Holm's p-values are read at
# Up to this many seeds the sign-flip test is inverted exactly (its p at every mean of a subset of the differences,
# 2 ** n - 1 of them); beyond, by bisection on each side (see :func:`sign_flip_interval`).
MAX_INVERTED_SEEDS = 12
_CHUNK = 256  # shifts per matrix product


def family_confidence(family: int, alpha: float = FAMILY_ALPHA) -> float:
    """The Bonferroni level ``1 - alpha / m`` of an interval over a family of ``m`` comparisons (at least one)."""
    return 1.0 - alpha / max(1, family)


def _exact_p(d: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """The exact sign-flip p-value of ``d - shift`` for every shift, counted as :func:`sign_flip_test` counts."""
    n = d.size
    half = 1 << (n - 1)
    signs = 1.0 - 2.0 * ((np.arange(half)[:, None] >> np.arange(n - 1)) & 1)  # the first seed's sign fixed
    p = np.empty(shifts.size)
    for start in range(0, shifts.size, _CHUNK):
        x = d[None, :] - shifts[start:start + _CHUNK, None]  # (shifts, n)
        sums = x[:, 0][None, :] + signs @ x[:, 1:].T  # (patterns, shifts)
        threshold = np.abs(x.sum(1)) - 1e-12 * np.abs(x).sum(1)
        chunk = np.count_nonzero(np.abs(sums) >= threshold[None, :], axis=0) / half
        chunk[np.abs(x.mean(1)) <= 1e-12 * np.abs(x).max(1)] = 1.0  # no difference left: p = 1, as the test says
        p[start:start + _CHUNK] = np.minimum(1.0, chunk)
    return p


def subset_means(d: np.ndarray) -> np.ndarray:
    """The means of the ``2 ** n - 1`` non-empty subsets of ``d``, sorted and distinct."""
    members = (np.arange(1, 1 << d.size)[:, None] >> np.arange(d.size)) & 1
    return np.unique((members @ d) / members.sum(1))


def sign_flip_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, *,
                       num_samples: int = SIGN_FLIP_SAMPLES, seed: int = 0) -> tuple[float, float, str]:
    """The interval of the mean difference ``a - b`` that inverts :func:`sign_flip_test`, and how it was found.

    The shifts ``delta`` at which the test of ``d - delta`` gives ``p >= 1 - confidence``, from the smallest to the
    largest (the set's hull). Its p-value is constant between the means of subsets of ``d`` (where a sign pattern's
    sum ties the observed one) and no smaller at them, so up to :data:`MAX_INVERTED_SEEDS` seeds it is evaluated at
    every such mean (``"exact"``). With more, the edge on each side is found by bisection between the mean (p = 1)
    and the farthest difference, with the test itself (enumerated, or sampled beyond 20 seeds: ``"bisection"``); the
    outer end of the last step is kept. Either way 0 is inside whenever ``sign_flip_test(a, b)`` gives
    ``p >= 1 - confidence``: an interval that excludes 0 implies ``p < 1 - confidence``.

    NaN and ``"none"`` when there is no such interval: fewer than two seeds, a seed without a score, differences
    that are all equal (no interval of zero width), or too few seeds for the test to reach the level at all
    (``2 ** (1 - n) >= 1 - confidence``: every shift is accepted).
    """
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    alpha = 1.0 - confidence
    none = float("nan"), float("nan"), "none"
    if d.size < 2 or not np.all(np.isfinite(d)) or _no_spread(d) or sign_flip_floor(d.size, num_samples) >= alpha:
        return none

    def p_at(shift: float) -> float:
        return sign_flip_test(d - shift, np.zeros(d.size), num_samples=num_samples, seed=seed).p

    if d.size <= MAX_INVERTED_SEEDS:
        candidates = subset_means(d)
        accepted = candidates[_exact_p(d, candidates) >= alpha]
        low, high, method = float(accepted.min()), float(accepted.max()), "exact"
    else:
        centre, spread = float(d.mean()), float(np.ptp(d))
        ends = []
        for far in (float(d.min()) - spread, float(d.max()) + spread):
            if p_at(far) >= alpha:  # the sampled test's floor can lie above the level: no bounded interval
                return none
            inner, outer = centre, far
            while abs(outer - inner) > 1e-6 * spread:
                mid = (inner + outer) / 2
                inner, outer = (mid, outer) if p_at(mid) >= alpha else (inner, mid)
            ends.append(outer)
        low, high, method = ends[0], ends[1], "bisection"
    if sign_flip_test(a, b, num_samples=num_samples, seed=seed).p >= alpha:  # 0 is accepted: inside, whatever
        low, high = min(low, 0.0), max(high, 0.0)  # the rounding at a subset mean of exactly 0
    return low, high, method


def family_intervals(values: Sequence[float], base: Sequence[float], observed: float,
                     replicates: np.ndarray | None, family: int) -> dict[str, Any]:
    """The intervals at the family's Bonferroni level, as the keys of a row of ``compare.json``.

    ``diff_low_family``/``diff_high_family``: :func:`sign_flip_interval` over seeds (``diff_family_method``);
    ``boot_low_family``/``boot_high_family``: the bootstrap's percentile interval of ``replicates``.
    """
    confidence = family_confidence(family)
    low, high, method = sign_flip_interval(values, base, confidence)
    boot = replicate_test(observed, replicates, confidence)
    return {"family_confidence": confidence, "diff_low_family": low, "diff_high_family": high,
            "diff_family_method": method, "boot_low_family": boot.low, "boot_high_family": boot.high}


def level(confidence: float) -> str:
    """``95%``, ``97.5%``, ``98.33%``: a confidence level as a percentage, to 0.01."""
    return f"{100 * confidence:.2f}".rstrip("0").rstrip(".") + "%"
