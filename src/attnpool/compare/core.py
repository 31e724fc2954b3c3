"""``compare``: train several poolers with the same recipe over paired seeds, and say which wins, with significance.

Layout of a comparison folder::

    OUT/
      compare_config.yaml        the shared recipe (everything but the pooler and the seed)
      runs/<pooler>/seed_<S>/    one full ``attnpool train`` run per (pooler, seed), kept
      runs/<pooler>/seed_<S>.log its output;  seed_<S>.cost.json: wall time and peak memory of its process
      compare.md  compare.csv  compare.json  compare.png

Each (pooler, seed) run is its own ``attnpool train`` process: a failure stays in its log, the peak memory of the
process is the run's own, and an interrupted or extended comparison only trains what is missing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnpool.compare.stats import holm, metric_function, paired_bootstrap, paired_t_test, t_interval
from attnpool.training.config import TrainConfig, load_yaml
from attnpool.training.metrics import primary_metric
from attnpool.training.runs import RunError, atomic_write, atomic_write_json, atomic_write_text, fold_model_dirs

logger = logging.getLogger("attnpool.compare")

CONFIG_FILE = "compare_config.yaml"
# Options that differ between the runs of a comparison, or that say where and how to run rather than what.
PER_RUN_KEYS = ("pooling", "pooling_options", "seed", "output_dir", "overwrite", "resume", "only_folds")


@dataclass(frozen=True)
class PoolerSpec:
    """One contender: a registered pooler name with its options, written ``NAME`` or ``NAME:key=value,key=value``."""

    label: str
    pooling: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> PoolerSpec:
        """Parse ``attention:attn_size=128,num_heads=2`` (values are JSON when they parse, else strings)."""
        from attnpool.pooling import get_pooler_class

        name, _, rest = text.partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"--poolings: empty pooler name in {text!r}; expected NAME or NAME:key=value,...")
        get_pooler_class(name)  # unknown names fail here, with the closest valid one
        options: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"--poolings: option {item!r} of {text!r} is not key=value; "
                                 "expected e.g. attention:attn_size=128")
            try:
                options[key.strip()] = json.loads(value)
            except json.JSONDecodeError:
                options[key.strip()] = value
        return cls(label=text.strip(), pooling=name, options=options)

    @property
    def slug(self) -> str:
        """A folder name for the label."""
        return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", self.label)


@dataclass
class CompareResult:
    """The comparison table (one row per pooler) and where its files are."""

    output_dir: Path
    metric: str
    rows: list[dict[str, Any]]
    trained: int  # runs trained by this call (the others were kept from earlier calls)
    markdown: str


def _shared_recipe(cfg: TrainConfig) -> dict[str, Any]:
    values = cfg.to_dict()
    for key in PER_RUN_KEYS:
        values.pop(key, None)
    return values


def _check_recipe(out: Path, cfg: TrainConfig, overwrite: bool) -> None:
    """Save the shared recipe, or check that an existing comparison used the same one."""
    import yaml

    path = out / CONFIG_FILE
    recipe = _shared_recipe(cfg)
    if path.is_file() and overwrite:
        shutil.rmtree(out)
    elif path.is_file():
        saved = load_yaml(path)
        changed = sorted(k for k in set(saved) | set(recipe) if saved.get(k) != recipe.get(k))
        if changed:
            detail = "; ".join(f"{k}: {saved.get(k)!r} -> {recipe.get(k)!r}" for k in changed[:6])
            raise RunError(f"{out} holds a comparison with another recipe ({detail}); its runs would not be paired "
                           "with new ones. Use another --output-dir, or --overwrite to start it again")
        return
    elif out.is_dir() and any(out.iterdir()):
        raise RunError(f"{out} exists and is not an attnpool comparison (no {CONFIG_FILE}); choose another "
                       "--output-dir")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(recipe, sort_keys=False))


def _wanted_folds(run_dir: Path, only_folds: list[int] | None) -> bool:
    """Whether the run has finished the folds it was asked for (all of them, or ``only_folds``)."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return False
    metrics = json.loads(path.read_text(encoding="utf-8"))
    if metrics.get("complete"):
        return True
    done = {f["fold"] for f in metrics.get("folds", [])}
    return only_folds is not None and set(only_folds) <= done


def _run_one(cfg: TrainConfig, spec: PoolerSpec, seed: int, run_dir: Path) -> dict[str, float]:
    """Train one (pooler, seed) run in its own ``attnpool train`` process; returns its wall time and peak RSS."""
    import yaml

    values = cfg.to_dict()
    values.update({"pooling": spec.pooling, "pooling_options": spec.options, "seed": seed,
                   "output_dir": str(run_dir), "overwrite": False, "resume": False})
    request = run_dir.parent / f"seed_{seed}.yaml"
    atomic_write_text(request, yaml.safe_dump(values, sort_keys=False))
    command = [sys.executable, "-m", "attnpool.cli", "train", "--config", str(request)]
    if run_dir.is_dir() and any(run_dir.iterdir()):
        command.append("--resume")
    log_path = run_dir.parent / f"seed_{seed}.log"
    started = time.perf_counter()
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        _, status, usage = os.wait4(process.pid, 0)  # rusage of this child alone: its own peak memory
        process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if process.returncode not in (0, 3) or not _wanted_folds(run_dir, cfg.only_folds):
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-8:]
        raise RunError(f"training {spec.label} with seed {seed} failed (exit {process.returncode}); the end of "
                       f"{log_path}:\n  " + "\n  ".join(tail))
    cost_path = run_dir.parent / f"seed_{seed}.cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.is_file() else {"wall_seconds": 0.0, "peak_rss_bytes": 0}
    cost["wall_seconds"] += seconds  # a resumed run adds its calls up
    cost["peak_rss_bytes"] = max(cost["peak_rss_bytes"], usage.ru_maxrss * 1024)  # Linux reports KiB
    atomic_write_json(cost_path, cost)
    return cost


def _format_eta(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def compare(cfg: TrainConfig, poolings: list[str], seeds: list[int], *, baseline: str = "mean",
            output_dir: str | Path = "runs/compare", bootstrap: int = 1000, overwrite: bool = False
            ) -> CompareResult:
    """Train every pooler with every seed on the same recipe, then compare each to the baseline.

    For a given seed every pooler gets the same folds (or validation split), data order and recipe: the differences
    are paired. Runs already finished in ``output_dir`` are kept, so an interrupted call resumes and a call with
    one more pooler trains only that one.

    Args:
        cfg: The shared recipe (``attnpool train`` options); its ``pooling``, ``seed`` and ``output_dir`` are
            replaced per run.
        poolings: Pooler specs, ``NAME`` or ``NAME:key=value,...`` (e.g. ``attention:attn_size=128``).
        seeds: The seeds; each pooler is trained once per seed.
        baseline: The spec every other pooler is compared to; added to ``poolings`` when missing.
        output_dir: The comparison folder.
        bootstrap: Replicates of the paired bootstrap over examples.
        overwrite: Delete an existing comparison in ``output_dir`` first.

    Returns:
        A :class:`CompareResult`; ``compare.md``, ``compare.csv``, ``compare.json`` and ``compare.png`` are written.

    Raises:
        RunError: A run failed (the end of its log is quoted), or ``output_dir`` holds another comparison.
        ValueError: Bad pooler specs or seeds.
    """
    specs = [PoolerSpec.parse(p) for p in poolings]
    base = PoolerSpec.parse(baseline)
    if base.label not in [s.label for s in specs]:
        specs.insert(0, base)
    labels = [s.label for s in specs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"--poolings names {', '.join(duplicates)} more than once")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be distinct seeds (or one count), got {seeds}")
    if len(specs) < 2:
        raise ValueError("compare needs at least one pooler besides the baseline: --poolings attention ...")
    cfg.validate()
    out = Path(output_dir)
    _check_recipe(out, cfg, overwrite)

    jobs = [(spec, seed) for seed in seeds for spec in specs]  # seed-major: every finished seed is a complete pair
    todo = [(s, seed) for s, seed in jobs if not _wanted_folds(out / "runs" / s.slug / f"seed_{seed}", cfg.only_folds)]
    logger.info("compare: %d poolers x %d seeds = %d runs; %d already done in %s", len(specs), len(seeds), len(jobs),
                len(jobs) - len(todo), out)
    spent: list[float] = []
    for i, (spec, seed) in enumerate(todo, 1):
        eta = f", about {_format_eta(np.mean(spent) * (len(todo) - i + 1))} left" if spent else ""
        logger.info("compare: run %d of %d: %s, seed %d%s", i, len(todo), spec.label, seed, eta)
        run_dir = out / "runs" / spec.slug / f"seed_{seed}"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        _run_one(cfg, spec, seed, run_dir)
        spent.append(time.perf_counter() - started)
        score = _run_score(run_dir, cfg.task)
        logger.info("compare: run %d of %d: %s, seed %d: %s %.4f in %s", i, len(todo), spec.label, seed,
                    primary_metric(cfg.task)[0], score, _format_eta(spent[-1]))
    result = summarise(out, cfg.task, specs, base, seeds, bootstrap=bootstrap)
    result.trained = len(todo)
    return result


def _run_score(run_dir: Path, task: str) -> float:
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    return float(metrics["overall"].get(primary_metric(task)[0], float("nan")))


def run_predictions(run_dir: Path, task: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, target, scores)`` of a finished run's out-of-fold file, sorted by row.

    ``scores`` are what the run predicted (regression values, or class probabilities in the run's class order) and
    ``target`` the true values (class indices for classification), ready for :func:`paired_bootstrap`.
    """
    import pandas as pd

    oof = pd.read_csv(run_dir / "oof.csv", dtype={"id": str}).sort_values("row")
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    classes = info.get("classes")
    if task == "regression":
        targets = ["target"] if "target" in oof else sorted(c for c in oof if c.startswith("target_"))
        preds = ["prediction"] if "prediction" in oof else sorted(c for c in oof if c.startswith("prediction_"))
        target = oof[targets].to_numpy(np.float64)
        scores = oof[preds].to_numpy(np.float64)
        return oof["row"].to_numpy(), target[:, 0] if target.shape[1] == 1 else target, (
            scores[:, 0] if scores.shape[1] == 1 else scores)
    scores = oof[[f"prob_{c}" for c in classes]].to_numpy(np.float64)
    if task == "multilabel":
        target = oof[[f"target_{c}" for c in classes]].to_numpy(np.int64)
    else:
        index = {str(c): i for i, c in enumerate(classes)}
        target = np.array([index[str(v)] for v in oof["target"]])
    return oof["row"].to_numpy(), target, scores


def _parameter_count(run_dir: Path) -> int | None:
    """Parameters of the run's first fold model, read from its safetensors header (no weights loaded)."""
    from safetensors import safe_open

    models = [d / "model.safetensors" for d in fold_model_dirs(run_dir) if (d / "model.safetensors").is_file()]
    if not models:
        return None
    with safe_open(str(models[0]), framework="pt") as f:
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()))


def _cost(run_dir: Path) -> tuple[float, float]:
    """Training seconds (the folds' own time when recorded, else the process wall time) and peak memory bytes."""
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
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
    folds = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")).get("folds", [])
    stats = {}
    for key in ("pooling_entropy", "pooling_special_share"):
        values = [f[key] for f in folds if f.get(key) is not None]
        if values:
            stats[key] = float(np.mean(values))
    return stats


def summarise(out: Path, task: str, specs: list[PoolerSpec], base: PoolerSpec, seeds: list[int], *,
              bootstrap: int = 1000) -> CompareResult:
    """Compute the comparison table from the finished runs in ``out`` and write its four files."""
    metric, _ = primary_metric(task)
    score_fn = metric_function(task, metric)
    runs = {(s.label, seed): out / "runs" / s.slug / f"seed_{seed}" for s in specs for seed in seeds}
    scores = {key: _run_score(path, task) for key, path in runs.items()}
    predictions = {key: run_predictions(path, task) for key, path in runs.items()}
    costs = {key: _cost(path) for key, path in runs.items()}
    pooling = {key: _pooling_stats(path) for key, path in runs.items()}
    params = {s.label: _parameter_count(runs[(s.label, seeds[0])]) for s in specs}

    base_scores = [scores[(base.label, seed)] for seed in seeds]
    base_seconds = np.mean([costs[(base.label, seed)][0] for seed in seeds])
    base_memory = np.mean([costs[(base.label, seed)][1] for seed in seeds])
    rows: list[dict[str, Any]] = []
    for spec in specs:
        values = [scores[(spec.label, seed)] for seed in seeds]
        interval = t_interval(values)
        row: dict[str, Any] = {
            "pooler": spec.label, "baseline": spec.label == base.label, "metric": metric,
            "mean": interval.mean, "std": interval.std, "ci_low": interval.low, "ci_high": interval.high,
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
            test = paired_t_test(values, base_scores)
            groups = []
            for seed in seeds:
                rows_a, target, a = predictions[(spec.label, seed)]
                rows_b, _, b = predictions[(base.label, seed)]
                if not np.array_equal(rows_a, rows_b):
                    raise RunError(f"{spec.label} and {base.label} with seed {seed} predicted different rows; the "
                                   "runs are not paired (was the data changed during the comparison?)")
                groups.append((target, a, b))
            boot = paired_bootstrap(groups, score_fn, num_samples=bootstrap, seed=0)
            row.update({"diff": test.diff, "diff_low": test.low, "diff_high": test.high, "p_ttest": test.p,
                        "boot_diff": boot.diff, "boot_low": boot.low, "boot_high": boot.high, "p_bootstrap": boot.p})
        rows.append(row)
    others = [r for r in rows if not r["baseline"]]
    for key in ("p_ttest", "p_bootstrap"):
        for r, adjusted in zip(others, holm([r[key] for r in others]), strict=True):
            r[f"{key}_holm"] = adjusted
    markdown = _markdown(rows, metric, base.label, seeds, bootstrap)
    _write_outputs(out, rows, markdown, metric, base.label, seeds, bootstrap)
    return CompareResult(output_dir=out, metric=metric, rows=rows, trained=0, markdown=markdown)


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _p(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _markdown(rows: list[dict[str, Any]], metric: str, baseline: str, seeds: list[int], bootstrap: int) -> str:
    lines = [
        f"# Pooler comparison: {metric}, {len(seeds)} seed(s) ({', '.join(map(str, seeds))}), baseline `{baseline}`",
        "",
        f"| pooler | {metric} mean ± std | 95% CI | Δ vs baseline [95% CI] | p (t, Holm) | Δ bootstrap [95% CI] "
        "| p (bootstrap, Holm) | weight entropy | on special tokens | params added | time | memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (not r["baseline"], -(r["mean"] if np.isfinite(r["mean"]) else -np.inf))):
        if r["baseline"]:
            delta = boot = p_t = p_b = "(baseline)"
        else:
            delta = f"{r['diff']:+.4f} [{_num(r['diff_low'])}, {_num(r['diff_high'])}]"
            boot = f"{r['boot_diff']:+.4f} [{_num(r['boot_low'])}, {_num(r['boot_high'])}]"
            p_t, p_b = _p(r["p_ttest_holm"]), _p(r["p_bootstrap_holm"])
        added = "n/a" if r["parameters_added"] is None else f"{r['parameters_added']:+,}"
        entropy = "-" if r.get("pooling_entropy") is None else _num(r["pooling_entropy"], 3)
        special = "-" if r.get("pooling_special_share") is None else f"{100 * r['pooling_special_share']:.1f}%"
        lines.append(f"| `{r['pooler']}` | {_num(r['mean'])} ± {_num(r['std'])} | [{_num(r['ci_low'])}, "
                     f"{_num(r['ci_high'])}] | {delta} | {p_t} | {boot} | {p_b} | {entropy} | {special} | {added} | "
                     f"{_num(r['time_ratio'], 2)}x | {_num(r['memory_ratio'], 2)}x |")
    lines += [
        "",
        f"Each pooler was trained once per seed with the same folds, data order and recipe (paired). CI: Student t "
        f"over seeds. p (t): paired t-test over seeds. Bootstrap: {bootstrap} paired resamples of the out-of-fold "
        "examples, per seed, averaged over seeds. p-values are Holm-corrected over the poolers compared to the "
        "baseline. Weight entropy: the normalised entropy of the pooling weights on the validation rows (1: mean "
        "pooling, 0: all weight on one token; '-': the pooler has no token weights), and the share of the weight on "
        "special tokens, averaged over folds and seeds. Time and memory: training time and peak memory relative to "
        "the baseline.",
    ]
    return "\n".join(lines) + "\n"


def _write_outputs(out: Path, rows: list[dict[str, Any]], markdown: str, metric: str, baseline: str,
                   seeds: list[int], bootstrap: int) -> None:
    import pandas as pd

    atomic_write_text(out / "compare.md", markdown)
    flat = pd.DataFrame([{k: v for k, v in r.items() if k != "per_seed"} for r in rows])
    atomic_write(out / "compare.csv", lambda tmp: flat.to_csv(tmp, index=False))
    atomic_write_json(out / "compare.json", {"metric": metric, "baseline": baseline, "seeds": seeds,
                                             "bootstrap": bootstrap, "poolers": rows})
    _plot(out / "compare.png", rows, metric)


def _plot(path: Path, rows: list[dict[str, Any]], metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.5), constrained_layout=True)
    ordered = sorted(rows, key=lambda r: r["mean"] if np.isfinite(r["mean"]) else -np.inf)
    for y, r in enumerate(ordered):
        color = "tab:gray" if r["baseline"] else "tab:blue"
        if np.isfinite(r["ci_low"]):
            ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2)
        ax.plot(r["mean"], y, "o", color=color)
        ax.plot(list(r["per_seed"].values()), [y] * len(r["per_seed"]), "x", color=color, alpha=0.5, ms=5)
    ax.set_yticks(range(len(ordered)), [r["pooler"] for r in ordered])
    ax.set_xlabel(f"{metric} (mean over seeds, 95% CI; x: single seeds)")
    ax.grid(axis="x", alpha=0.3)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
