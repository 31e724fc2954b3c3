"""The comparison table: scores, paired tests, costs and pooling statistics of finished runs, and its four files."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from safetensors import safe_open

from attnpool.comparison.cells import _bootstrap, _ci, _delta, _num, _p, _ratio
from attnpool.comparison.intervals import MAX_INVERTED_SEEDS, family_confidence, family_intervals, level
from attnpool.comparison.keys import shared_bootstrap_keys
from attnpool.comparison.specs import PoolerSpec
from attnpool.comparison.stats import (
    MAX_EXACT_SEEDS,
    MIN_BOOTSTRAP_UNITS,
    SIGN_FLIP_SAMPLES,
    bootstrap_replicates,
    holm,
    metric_function,
    metric_range,
    paired_t_test,
    replicate_test,
    score_interval,
    seeds_needed,
    sign_flip_floor,
    sign_flip_test,
)
from attnpool.json_values import is_missing
from attnpool.metrics import standardised_per_group
from attnpool.runs.files import atomic_write, atomic_write_json, atomic_write_text
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import oof_scores, oof_targets
from attnpool.tasks import primary_metric

logger = logging.getLogger("attnpool.comparison")


@dataclass
class CompareResult:
    """The comparison table (one row per pooler) and where its files are."""

    output_dir: Path
    metric: str  # the score compared: the primary metric, or pearson_folds_standardised (--loss pearson runs)
    rows: list[dict[str, Any]]
    trained: int  # runs trained by this call (the others were kept from earlier calls)
    markdown: str = field(repr=False)  # the rows again, as compare.md: print(result.markdown) shows it


def run_score(run_dir: Path, task: str) -> float:
    """A finished run's overall primary metric (NaN when it has none: a diverged run's Pearson is saved as null).

    A ``--loss pearson`` run of several folds: ``pearson_folds_standardised`` (each fold model has its own scale).
    """
    overall = Run(run_dir).metrics()["overall"]
    value = overall.get("pearson_folds_standardised", overall.get(primary_metric(task)[0]))
    return float("nan") if value is None else float(value)


def _standardised(run_dir: Path) -> bool:
    """Whether :func:`run_score` is the run's ``pearson_folds_standardised``, not its primary metric."""
    return "pearson_folds_standardised" in Run(run_dir).metrics()["overall"]


def run_predictions(run_dir: Path, task: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, target, scores)`` of a finished run's out-of-fold file, sorted by row.

    ``scores`` are what the run predicted (regression values, or class probabilities in the run's class order) and
    ``target`` the true values (class indices for classification), ready for :func:`paired_bootstrap`.
    """
    run = Run.open(run_dir)
    oof, classes = run.oof(), run.info().get("classes")
    scores = oof_scores(oof, task, classes)
    if run.config().loss == "pearson" and oof["fold"].nunique() > 1 and np.ndim(scores) == 1:
        scores = standardised_per_group(scores, oof["fold"].to_numpy())  # as run_score: each fold on its own scale
    return oof["row"].to_numpy(), oof_targets(oof, task, classes), scores


def _parameter_count(run_dir: Path) -> int | None:
    """Parameters of the run's first fold model, read from its safetensors header (no weights loaded)."""
    run = Run(run_dir)
    models = [run.model_dir(f) / "model.safetensors" for f in run.trained_folds()]
    models = [m for m in models if m.is_file()]
    if not models:
        return None
    with safe_open(str(models[0]), framework="pt") as f:
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()))


def _cost(run_dir: Path) -> tuple[float, float]:
    """Training seconds (the folds' own time when recorded, else the process wall time) and peak memory bytes."""
    metrics = Run(run_dir).metrics()
    cost_path = run_dir.parent / f"{run_dir.name}.cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.is_file() else {}
    folds = metrics.get("folds", [])
    seconds = (sum(f["train_seconds"] for f in folds) if folds and all("train_seconds" in f for f in folds)
               else cost.get("wall_seconds", metrics.get("seconds", float("nan"))))
    gpu = [f["peak_memory_bytes"] for f in folds if f.get("peak_memory_bytes") and f.get("device") == "cuda"]
    memory = max(gpu) if gpu else cost.get("peak_rss_bytes", float("nan"))
    return float(seconds), float(memory)


def _pooling_stats(run_dir: Path) -> dict[str, float]:
    """Mean over the run's folds of the validation pooling-weight entropy and special-token share (when recorded)."""
    folds = Run(run_dir).metrics().get("folds", [])
    stats = {}
    for key in ("pooling_entropy", "pooling_special_share"):
        values = [f[key] for f in folds if f.get(key) is not None]
        if values:
            stats[key] = float(np.mean(values))
    return stats


def summarise(out: Path, task: str, specs: list[PoolerSpec], base: PoolerSpec, seeds: list[int], *,
              bootstrap: int = 1000, split_seed: int | None = None, per_seed_rows: bool = False,
              valid_file: bool = False) -> CompareResult:
    """Compute the comparison table from the finished runs in ``out`` and write its four files.

    ``split_seed`` and ``valid_file`` (whether set) are the recipe's: the table says when one split served all seeds.
    ``per_seed_rows``: each seed drew its own rows (a ``limit`` without ``split_seed``; see :func:`bootstrap_keys`).
    """
    metric, _ = primary_metric(task)
    score_fn = metric_function(task, metric)
    bounds = metric_range(metric)
    runs = {(s.label, seed): out / "runs" / s.slug / f"seed_{seed}" for s in specs for seed in seeds}
    scores = {key: run_score(path, task) for key, path in runs.items()}
    predictions = {key: run_predictions(path, task) for key, path in runs.items()}
    keys, by_group = shared_bootstrap_keys({key: (path, key[1]) for key, path in runs.items()},
                                           per_seed_rows=per_seed_rows)  # whole groups: not independent rows
    drawn = np.concatenate([np.unique(keys[(base.label, seed)]) for seed in seeds])  # no key in two seeds: none
    per_seed_keys = len(seeds) > 1 and np.unique(drawn).size == drawn.size  # is drawn once for several seeds
    family = sum(s.label != base.label for s in specs)  # the poolers Holm corrects over
    costs = {key: _cost(path) for key, path in runs.items()}
    pooling = {key: _pooling_stats(path) for key, path in runs.items()}
    params = {s.label: _parameter_count(runs[(s.label, seeds[0])]) for s in specs}
    standardised = any(map(_standardised, runs.values()))
    compared = "pearson_folds_standardised" if standardised else metric  # the name of what run_score read
    logger.info("compare: bootstrap: %d replicates x %d seeds x %d contenders", bootstrap, len(seeds), family)

    base_scores = [scores[(base.label, seed)] for seed in seeds]
    base_seconds = np.mean([costs[(base.label, seed)][0] for seed in seeds])
    base_memory = np.mean([costs[(base.label, seed)][1] for seed in seeds])
    rows: list[dict[str, Any]] = []
    for spec in specs:
        values = [scores[(spec.label, seed)] for seed in seeds]
        interval = score_interval(values, bounds)
        row: dict[str, Any] = {
            "pooler": spec.label, "baseline": spec.label == base.label, "metric": compared,
            "mean": interval.mean, "std": interval.std, "ci_low": interval.low, "ci_high": interval.high,
            "ci_method": interval.method,
            "seeds": len(seeds), "per_seed": dict(zip(map(str, seeds), values, strict=True)),
            "parameters": params[spec.label],
            "parameters_added": (None if params[spec.label] is None or params[base.label] is None
                                 else params[spec.label] - params[base.label]),
            "train_seconds": float(np.mean([costs[(spec.label, seed)][0] for seed in seeds])),
            "peak_memory_bytes": float(np.mean([costs[(spec.label, seed)][1] for seed in seeds])),
        }
        for key in ("pooling_entropy", "pooling_special_share"):  # poolers without token weights have none
            measured = [pooling[(spec.label, seed)][key] for seed in seeds if key in pooling[(spec.label, seed)]]
            row[key] = float(np.mean(measured)) if measured else None
        row["time_ratio"] = row["train_seconds"] / base_seconds if base_seconds else float("nan")
        row["memory_ratio"] = row["peak_memory_bytes"] / base_memory if base_memory else float("nan")
        if spec.label != base.label:
            test = paired_t_test(values, base_scores, bounds=bounds)
            exact = sign_flip_test(values, base_scores)
            groups, units = [], []
            for seed in seeds:
                rows_a, target, a = predictions[(spec.label, seed)]
                rows_b, target_b, b = predictions[(base.label, seed)]
                if not np.array_equal(rows_a, rows_b):
                    raise RunError(f"{spec.label} and {base.label} with seed {seed} predicted different rows; the "
                                   "runs are not paired (was the data changed during the comparison?)")
                if not np.array_equal(np.asarray(target, float), np.asarray(target_b, float), equal_nan=True):
                    raise RunError(f"{spec.label} and {base.label} with seed {seed} were scored against different "
                                   "labels on the same rows: the data changed between their runs. Re-run the "
                                   "comparison with --overwrite so that every pooler trains on the same data")
                groups.append((target, a, b))
                units.append(keys[(spec.label, seed)])  # what seeds share, drawn once for all of them
            observed, replicates = bootstrap_replicates(groups, score_fn, num_samples=bootstrap, seed=0,
                                                        clusters=units)
            boot = replicate_test(observed, replicates)
            row.update({"diff": test.diff, "diff_low": test.low, "diff_high": test.high, "p_ttest": test.p,
                        "p_signflip": exact.p, "p_signflip_min": exact.min_p, "p_signflip_sampled": exact.sampled,
                        "diff_equal_over_seeds": exact.equal,
                        "diff_per_seed": dict(zip(map(str, seeds), np.subtract(values, base_scores).tolist(),
                                                  strict=True)),
                        "boot_diff": boot.diff, "boot_low": boot.low, "boot_high": boot.high, "p_bootstrap": boot.p})
            row.update(family_intervals(values, base_scores, observed, replicates, family))
        rows.append(row)
    others = [r for r in rows if not r["baseline"]]
    for key in ("p_ttest", "p_signflip", "p_bootstrap"):  # every pooler in the family, an untested one as p = 1
        for r, adjusted in zip(others, holm([r[key] for r in others]), strict=True):
            r[f"{key}_holm"] = adjusted
    markdown = _markdown(rows, metric, base.label, seeds, bootstrap, split_seed, by_group, valid_file,
                         per_seed_keys=per_seed_keys, standardised=standardised)
    _write_outputs(out, rows, markdown, compared, base.label, seeds, bootstrap, bounds, by_group)
    return CompareResult(output_dir=out, metric=compared, rows=rows, trained=0, markdown=markdown)


_SCALES = {
    "fisher_z": "Student t over seeds on Fisher's z (atanh) of the per-seed scores, mapped back with tanh: it stays "
                "inside [-1, 1]",
    "logit": "Student t over seeds on the logit of the per-seed scores, mapped back: it stays inside [0, 1]",
    "log": "Student t over seeds on the log of the per-seed scores, mapped back: it stays above 0",
    "t": "Student t over seeds",
    "t_clipped": "Student t over seeds cut to the metric's range (a seed scored on its bound, where Fisher's z or "
                 "the logit is infinite)",
}


def _markdown(rows: list[dict[str, Any]], metric: str, baseline: str, seeds: list[int], bootstrap: int,
              split_seed: int | None = None, by_group: bool = False, valid_file: bool = False, *,
              per_seed_keys: bool = False, standardised: bool = False) -> str:
    """The text of ``compare.md``; ``standardised``: the scores are ``pearson_folds_standardised`` (``run_score``)."""
    shown = f"{metric} (each fold's predictions standardised, as --loss pearson needs)" if standardised else metric
    n, family = len(seeds), sum(not r["baseline"] for r in rows)  # family: the poolers Holm corrects over
    confidence = family_confidence(family)
    lvl, alpha = level(confidence), f"{1 - confidence:.3g}"
    exactness, min_p = "sampled" if n > MAX_EXACT_SEEDS else "exact", sign_flip_floor(n)
    resampled = ("whole groups of out-of-fold examples (the folds' group_col: the examples of a group are not "
                 "independent)" if by_group else "the out-of-fold examples")
    lines = [
        f"# Pooler comparison: {metric}, {n} seed(s) ({', '.join(map(str, seeds))}), baseline `{baseline}`",
        "",
        f"| pooler | {shown} mean ± std | 95% CI | Δ vs baseline over seeds [{lvl} CI] | p over seeds ({exactness}, "
        f"Holm) | Δ bootstrap [{lvl} CI] | p (bootstrap, Holm) | weight entropy | on special tokens | params added "
        "| time | memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (not r["baseline"], -(r["mean"] if np.isfinite(r["mean"]) else -np.inf))):
        if r["baseline"]:
            delta = boot = p_seeds = p_b = "(baseline)"
        else:
            delta, boot = _delta(r), _bootstrap(r)
            p_seeds, p_b = _p(r["p_signflip_holm"]), _p(r["p_bootstrap_holm"])
        added = "n/a" if r["parameters_added"] is None else f"{r['parameters_added']:+,}"
        entropy = "-" if r.get("pooling_entropy") is None else _num(r["pooling_entropy"], 3)
        special = "-" if r.get("pooling_special_share") is None else f"{100 * r['pooling_special_share']:.1f}%"
        lines.append(f"| `{r['pooler']}` | {_num(r['mean'])} ± {_num(r['std'])} | {_ci(r)} | {delta} | {p_seeds} | "
                     f"{boot} | {p_b} | {entropy} | {special} | {added} | {_ratio(r['time_ratio'])} | "
                     f"{_ratio(r['memory_ratio'])} |")
    methods = sorted({r["ci_method"] for r in rows if r["ci_method"] in _SCALES})
    scales = "; ".join(_SCALES[m] for m in methods) or "none (one seed, or no spread over seeds)"
    if any(m in ("fisher_z", "logit", "log") for m in methods):  # centred on the transformed mean, not the mean
        scales += (" (an interval of the mean on that scale: a seed far from the others, e.g. one that collapsed, "
                   "can leave the plain mean outside it)")
    lines += [
        "",
        "Each pooler was trained once per seed with the same folds, data order and recipe (paired). "
        + (f"One split for every seed (split_seed {split_seed}): the seeds vary the training only (initialisation, "
           "dropout, data order). " if split_seed is not None else
           "One validation file for every seed (valid_file): the seeds vary the training only (initialisation, "
           "dropout, data order, and the training rows a limit draws). " if valid_file else
           "Each seed drew its own split (folds, and the rows of a limit), so the spread over seeds includes the "
           "split's (split_seed keeps one). ")
        + f"95% CI of the score: {scales}. Δ over seeds: the mean of the per-seed paired differences to the baseline, "
        f"with the {lvl} interval of the sign-flip test below inverted (the shifts of the differences it does not "
        f"reject at {alpha}; " + ("exact: its p at every mean of a subset of the differences" if n <=
                                   MAX_INVERTED_SEEDS else "its ends found by bisection") + "); where the test "
        f"cannot reach p < {alpha} with {n} seeds the per-seed differences are listed instead. p over seeds: "
        + ("the exact sign-flip permutation test of the paired differences (all 2^n sign patterns, no normality "
           f"assumed); with n seeds it cannot go below 2^(1-n), here {min_p:.3g}. " if exactness == "exact" else
           f"the sign-flip permutation test of the paired differences on {SIGN_FLIP_SAMPLES:,} sampled sign patterns "
           f"(more than {MAX_EXACT_SEEDS} seeds: the 2^n patterns are sampled, not enumerated; no normality "
           f"assumed); it cannot go below 1/(1+{SIGN_FLIP_SAMPLES:,}), here {min_p:.3g}. ")
        + f"Bootstrap: {bootstrap} paired resamples of {resampled}, "
        + ("drawn for each seed on its own (no example is named alike in two seeds: each seed drew its own rows, "
           "e.g. a limit without split_seed, with no ids to match them) " if per_seed_keys else
           "drawn once for all seeds (an example two seeds validated on counts once) ")
        + f"and averaged over seeds; its {lvl} interval (the k-th smallest and largest resample, k = "
        f"ceil({(1 - confidence) / 2:.3g} (resamples + 1)) - 1) excludes 0 exactly when its unadjusted p < {alpha} "
        f"(n/a with so few resamples that k < 1); n/a with fewer than {MIN_BOOTSTRAP_UNITS} to draw or no spread "
        "over the resamples; it asks whether these trained runs differ on these examples, not whether a new seed "
        f"would. p-values are Holm-corrected over the {family} pooler(s) compared to the baseline (one without a "
        "p-value, e.g. with a seed without a score, counts as p = 1: the family does not shrink). Both Δ intervals "
        f"are at the Bonferroni level 1 - 0.05/{max(1, family)} = {lvl} of the p-value beside them, so one that "
        "excludes 0 implies a Holm p < 0.05; Holm's p can be < 0.05 while the interval still contains 0, never the "
        "reverse. The unadjusted 95% intervals (Student t over seeds, percentile bootstrap) are in compare.csv and "
        "compare.json (diff_low/diff_high, boot_low/boot_high; the ones shown: diff_low_family/diff_high_family, "
        "boot_low_family/boot_high_family). The paired t-test over seeds is in "
        "compare.csv and compare.json (p_ttest) for reference only: it assumes normal differences and can go far "
        "below what the seeds allow. Weight entropy: the normalised entropy of the pooling weights on the validation "
        "rows (1: mean pooling, 0: all weight on one token; '-': the pooler has no token weights), and the share of "
        "the weight on special tokens, averaged over folds and seeds. Time and memory: training time and peak memory "
        "relative to the baseline.",
    ]
    if max(1, family) * min_p >= 0.05:  # Holm multiplies the smallest p-value by the family's size
        needed = seeds_needed(family)
        capped = " (Holm's p-values stop at 1)" if family * min_p > 1 else ""
        holm_floor = (f", and after Holm's correction over the {family} poolers compared to the baseline {family} x "
                      f"{min_p:.3g} = {min(1.0, family * min_p):.3g}{capped}" if family > 1 else "")
        lines += ["", f"**{n} seed(s) are too few to test a difference over seeds**: "
                  + ("one seed allows no test (the test over seeds needs two at least); " if n < 2 else
                     f"the smallest p-value they allow is {min_p:.3g}{holm_floor}; ")
                  + (f"{needed} seeds are needed for p < 0.05{' after Holm' if family > 1 else ''}. " if needed else
                     "no number of seeds reaches p < 0.05 after Holm over so many poolers. ")
                  + "Until then only the bootstrap speaks, and only for these runs: add seeds (`--seeds`) to learn "
                  "whether a new seed can expect the gain."]
    for r in rows:
        if not r["baseline"] and r["diff_equal_over_seeds"] and n > 1 and r["diff"] != 0:
            lines += ["", f"`{r['pooler']}` differs from the baseline by the same {r['diff']:+.4f} on all {n} seeds. "
                      "That is no evidence of a gain free of seed noise: a t-test would divide by their zero spread "
                      "(a p-value of 0 and an interval of zero width); the exact test gives p = "
                      f"{_p(r['p_signflip'])} before Holm."]
    return "\n".join(lines) + "\n"


def _write_outputs(out: Path, rows: list[dict[str, Any]], markdown: str, metric: str, baseline: str,
                   seeds: list[int], bootstrap: int, bounds: tuple[float, float], by_group: bool) -> None:
    atomic_write_text(out / "compare.md", markdown)
    flat = pd.DataFrame([{k: v for k, v in r.items() if k not in ("per_seed", "diff_per_seed")} for r in rows])
    atomic_write(out / "compare.csv", lambda tmp: flat.to_csv(tmp, index=False))
    atomic_write_json(out / "compare.json", {"metric": metric, "baseline": baseline, "seeds": seeds,
                                             "bootstrap": bootstrap, "bootstrap_by": "group" if by_group else "example",
                                             "holm_family": sum(not r["baseline"] for r in rows),
                                             "metric_range": list(bounds), "poolers": rows})
    _plot(out / "compare.png", rows, metric, bounds)


def plot_limits(rows: list[dict[str, Any]], bounds: tuple[float, float]) -> tuple[float, float]:
    """The x-axis of the plot: every mean, interval and seed with a margin, never past the metric's range."""
    values = [v for r in rows for v in (r["mean"], r["ci_low"], r["ci_high"], *r["per_seed"].values())
              if not is_missing(v) and math.isfinite(v)]
    if not values:
        return (bounds[0], bounds[1]) if all(map(math.isfinite, bounds)) else (0.0, 1.0)
    low, high = min(values), max(values)
    margin = 0.05 * (high - low) or 0.01 * max(1.0, abs(high))
    return max(bounds[0], low - margin), min(bounds[1], high + margin)


def _plot(path: Path, rows: list[dict[str, Any]], metric: str, bounds: tuple[float, float]) -> None:
    from matplotlib.figure import Figure  # no pyplot: a file, never a window, whatever the user's backend

    fig = Figure(figsize=(7, 0.5 * len(rows) + 1.5), layout="constrained")
    ax = fig.subplots()
    ordered = sorted(rows, key=lambda r: r["mean"] if np.isfinite(r["mean"]) else -np.inf)
    for y, r in enumerate(ordered):
        color = "tab:gray" if r["baseline"] else "tab:blue"
        if not is_missing(r["ci_low"]):
            ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2)
        ax.plot(r["mean"], y, "o", color=color)
        ax.plot(list(r["per_seed"].values()), [y] * len(r["per_seed"]), "x", color=color, alpha=0.5, ms=5)
    ax.set_yticks(range(len(ordered)), [r["pooler"] for r in ordered])
    ax.set_xlim(*plot_limits(rows, bounds))
    ax.set_xlabel(f"{metric} (mean over seeds, 95% CI; x: single seeds)")
    ax.grid(axis="x", alpha=0.3)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
