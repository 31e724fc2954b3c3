"""The intervals compare.md prints agree with the Holm p-values beside them; the seeds and poolings it takes."""

import re

import numpy as np
import pytest

from attnpool import api
from attnpool.comparison import summary
from attnpool.comparison.specs import PoolerSpec
from attnpool.comparison.stats import sign_flip_test


def _table(tmp_path, monkeypatch, seeds, poolers, scores, predictions, keys=None, bootstrap=200):
    """summarise() over mean and ``poolers``, scored ``scores(pooler, seed)``, predicting ``predictions(...)``."""
    def key(run_dir):
        return run_dir.parent.name, int(run_dir.name.removeprefix("seed_"))

    monkeypatch.setattr(summary, "run_score", lambda run_dir, task: scores(*key(run_dir)))
    monkeypatch.setattr(summary, "_standardised", lambda run_dir: False)
    monkeypatch.setattr(summary, "run_predictions", lambda run_dir, task: predictions(*key(run_dir)))
    monkeypatch.setattr(summary, "_cost", lambda run_dir: (1.0, 1.0))
    monkeypatch.setattr(summary, "_pooling_stats", lambda run_dir: {})
    monkeypatch.setattr(summary, "_parameter_count", lambda run_dir: 0)
    monkeypatch.setattr(summary, "shared_bootstrap_keys", lambda runs, **kw: (
        {k: (keys or (lambda seed, n: np.arange(n).astype(str)))(k[1], 200) for k in runs}, False))
    specs = [PoolerSpec.parse(n) for n in ["mean", *poolers]]
    return summary.summarise(tmp_path, "regression", specs, specs[0], seeds, bootstrap=bootstrap)


def _cells(markdown, pooler):
    """The Δ-over-seeds and bootstrap cells of ``pooler``'s row, as (low, high) or None where no interval is shown."""
    line = next(row for row in markdown.splitlines() if row.startswith(f"| `{pooler}`"))
    cells = [c.strip() for c in line.split("|")]
    found = [re.search(r"\[(-?[\d.]+), (-?[\d.]+)\]", cells[i]) for i in (4, 6)]
    return [(float(m[1]), float(m[2])) if m else None for m in found], (cells[5], cells[7])


def _p(text):
    return 0.0 if text == "<0.001" else float(text)


def _consistent(markdown, pooler):
    """An interval that excludes 0 never stands beside a Holm p-value of 0.05 or more."""
    intervals, ps = _cells(markdown, pooler)
    for interval, p in zip(intervals, ps, strict=True):
        if interval is not None and (interval[0] > 0 or interval[1] < 0):
            assert _p(p) < 0.05, (interval, p)


def test_the_interval_over_seeds_agrees_with_the_exact_p_value(tmp_path, monkeypatch):
    """6 seeds, +0.02 five times and -0.01 once: the t interval [0.0021, 0.0279] excluded 0 beside p = 0.062."""
    seeds = [1, 2, 3, 4, 5, 6]
    base = dict(zip(seeds, (0.50, 0.52, 0.48, 0.51, 0.49, 0.50), strict=True))
    diffs = dict(zip(seeds, (0.02, 0.02, 0.02, 0.02, 0.02, -0.01), strict=True))
    target = np.random.default_rng(0).random(200)

    def predictions(pooler, seed):
        return np.arange(200), target, target + np.random.default_rng(seed * 10 + (pooler == "attention")).normal(
            0, 1, 200)

    result = _table(tmp_path, monkeypatch, seeds, ["attention"],
                    lambda p, s: base[s] + (diffs[s] if p == "attention" else 0), predictions)
    row = result.rows[1]
    assert row["p_signflip_holm"] == pytest.approx(0.0625)
    assert row["diff_low"] > 0  # the t interval, still in compare.json, but not shown
    assert row["diff_low_family"] <= 0 <= row["diff_high_family"] and row["diff_family_method"] == "exact"
    assert "[0.0021, 0.0279]" not in result.markdown
    _consistent(result.markdown, "attention")


def test_the_bootstrap_interval_is_at_the_family_s_level(tmp_path, monkeypatch):
    """3 poolers: attention's 95% percentile interval excluded 0 beside a Holm p of 0.150 (raw 0.050)."""
    seeds = [0, 1, 2]
    rng = np.random.default_rng(1)
    target = rng.random(300)
    noise = {(p, s): rng.normal(0, 1, 300) for p in ("mean", "attention", "gem", "max") for s in seeds}
    scale = {"mean": 0.45, "attention": 0.41, "gem": 0.45, "max": 0.45}

    def predictions(pooler, seed):
        return np.arange(300), target, target + scale[pooler] * noise[(pooler, seed)]

    result = _table(tmp_path, monkeypatch, seeds, ["attention", "gem", "max"],
                    lambda p, s: float(np.corrcoef(*predictions(p, s)[1:])[0, 1]), predictions, bootstrap=400,
                    keys=lambda seed, n: np.arange(300).astype(str))
    row = result.rows[1]
    assert row["boot_low"] > 0 and row["p_bootstrap_holm"] >= 0.05  # the unadjusted 95% interval, kept in the json
    assert row["family_confidence"] == pytest.approx(1 - 0.05 / 3)
    assert row["boot_low_family"] <= 0 <= row["boot_high_family"]
    for pooler in ("attention", "gem", "max"):
        _consistent(result.markdown, pooler)
    assert "excludes 0 exactly when its p < 0.05" not in result.markdown
    assert ("Holm's p can be < 0.05 while the interval still contains 0, never the reverse") in result.markdown
    assert "Δ bootstrap [98.33% CI]" in result.markdown


def test_the_sign_flip_interval_is_the_inverted_test_by_brute_force():
    from attnpool.comparison.intervals import sign_flip_interval, subset_means  # a module new with the fix

    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(20):
        n, family = int(rng.integers(6, 10)), int(rng.integers(1, 4))
        alpha = 0.05 / family
        d = np.round(rng.normal(0.01, 0.02, n), 4)
        low, high, method = sign_flip_interval(d, np.zeros(n), 1 - alpha)
        if 2.0 ** (1 - n) >= alpha:  # the test cannot reach the level: no interval
            assert np.isnan(low) and method == "none"
            continue
        shifts = np.concatenate([np.linspace(d.min() - 0.01, d.max() + 0.01, 801), subset_means(d)])
        p = np.array([sign_flip_test(d - s, np.zeros(n)).p for s in shifts])
        accepted = shifts[p >= alpha]
        assert (low, high) == pytest.approx((accepted.min(), accepted.max()), abs=1e-12)
        if low > 0 or high < 0:
            assert sign_flip_test(d, np.zeros(n)).p < alpha
        checked += 1
    assert checked >= 10


def test_the_bootstrap_sentence_says_whether_seeds_share_the_draw(tmp_path, monkeypatch):
    seeds = [1, 2]
    target = np.random.default_rng(0).random(200)

    def predictions(pooler, seed):
        return np.arange(200), target, target + np.random.default_rng(seed + 5 * (pooler == "max")).normal(0, 1, 200)

    shared = _table(tmp_path / "shared", monkeypatch, seeds, ["max"], lambda p, s: 0.5, predictions).markdown
    assert "drawn once for all seeds (an example two seeds validated on counts once)" in shared
    own = _table(tmp_path / "own", monkeypatch, seeds, ["max"], lambda p, s: 0.5, predictions,
                 keys=lambda seed, n: np.array([f"seed {seed} row:{i}" for i in range(n)])).markdown
    assert "drawn once for all seeds" not in own
    assert "drawn for each seed on its own (no example is named alike in two seeds" in own


def test_compare_takes_one_string_as_one_pooler_and_refuses_a_float_count(tmp_path):
    with pytest.raises(ValueError, match="compare needs at least one pooler besides the baseline"):
        api.compare(poolings="attention", baseline="attention", seeds=2, output_dir=tmp_path / "a")  # not 'a', 't'...
    with pytest.raises(ValueError, match=r"--seeds must be integer seeds \(or one count\), got 3\.0"):
        api.compare(poolings=["max"], seeds=3.0, output_dir=tmp_path / "b")


def test_a_single_seeds_value_above_twenty_is_refused_as_a_likely_seed(tmp_path):
    with pytest.raises(ValueError, match=r"--seeds 42: a single value is a number of seeds, not a seed: .*"
                                         r"--seeds 42 43 44.*or a count of at most 20"):
        api.compare(poolings=["max"], seeds=42, output_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()
