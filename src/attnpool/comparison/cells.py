"""The cells of ``compare.md``: numbers, p-values, ratios, and why an interval or a difference is n/a."""

from __future__ import annotations

from typing import Any

from attnpool.json_values import is_missing


def _num(value: Any, digits: int = 4) -> str:
    if is_missing(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _ratio(value: Any) -> str:
    return "n/a" if is_missing(value) else f"{value:.2f}x"


def _p(value: Any) -> str:
    if is_missing(value):
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _missing(per_seed: dict[str, Any] | None) -> list[str]:
    """The seeds without a score (a diverged run's Pearson is NaN), or without a difference."""
    return [seed for seed, value in (per_seed or {}).items() if is_missing(value)]


def _seeds(seeds: list[str]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"


def _ci(r: dict[str, Any]) -> str:
    if not is_missing(r["ci_low"]):
        return f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
    if missing := _missing(r.get("per_seed")):
        return f"n/a (no score on {_seeds(missing)}: diverged?)"
    return "n/a (1 seed)" if r["seeds"] < 2 else "n/a (no spread over seeds)"


def _delta(r: dict[str, Any]) -> str:
    """The difference over seeds: its sign-flip interval at the family's level, else the seeds' own differences.

    n/a where a seed has no score, the pooler's own or the baseline's (a seed without a difference but with a score).
    """
    if is_missing(r["diff"]):
        own = _missing(r.get("per_seed"))
        base = [seed for seed in _missing(r.get("diff_per_seed")) if seed not in own]
        said = [f"no score on {_seeds(own)}: diverged?"] * bool(own) + [
            f"baseline has no score on {_seeds(base)}"] * bool(base)
        return f"n/a ({'; '.join(said)})" if said else "n/a"
    if not is_missing(r.get("diff_low_family")):
        return f"{r['diff']:+.4f} [{_num(r['diff_low_family'])}, {_num(r['diff_high_family'])}]"
    if r["diff_equal_over_seeds"] and r["seeds"] > 1:
        return f"{r['diff']:+.4f} (the same on all {r['seeds']} seeds)"
    return f"{r['diff']:+.4f} (per seed: {', '.join(f'{d:+.4f}' for d in r['diff_per_seed'].values())})"


def _bootstrap(r: dict[str, Any]) -> str:
    if is_missing(r["boot_diff"]):
        return "n/a"
    low, high = r.get("boot_low_family"), r.get("boot_high_family")
    if is_missing(r["boot_low"]) and is_missing(r["p_bootstrap"]):
        return f"{r['boot_diff']:+.4f} (n/a)"
    if is_missing(low):  # replicates, but too few for an interval at the family's level
        return f"{r['boot_diff']:+.4f} (n/a: more resamples needed at this level)"
    if low == high:  # e.g. identical predictions: a zero-width interval says nothing
        return f"{r['boot_diff']:+.4f} (no spread over the resamples)"
    return f"{r['boot_diff']:+.4f} [{_num(low)}, {_num(high)}]"
