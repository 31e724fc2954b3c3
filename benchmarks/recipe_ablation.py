"""Does a change to the recipe hold its quality? attention with and without it, paired over seeds, on real data.

A speed-up that changes what is trained (frozen embeddings, another precision...) may become a default only when
it keeps the validation score. This script trains attnpool's default recipe (``attention`` pooling) and the same
recipe with ``--set KEY=VALUE ...`` (``TrainConfig`` fields) through ``attnpool compare``, on the sets and the
protocol of ``benchmarks/quality.py`` (its recipes, fold 0, one split for every seed, ``--split-seed``), with the
same seeds, so that each seed gives a paired difference (same folds, initialisation of the new layers, data order).
It prints per set: both scores per seed, mean ± std, the paired difference, a paired t-test and an exact sign-flip
test over seeds, a paired bootstrap over the validation examples (95% CI of the difference), the training time of
each side, and whether the change is "within noise" (the bootstrap CI of the difference contains 0 or lies above
it; the mean difference is above minus the baseline's seed std; with one seed, which has no std, the CI alone judges
and the line says so). A ``--set`` that does not apply (an unknown field, a value the config refuses) is refused
before anything trains.

Usage::

    .venv/bin/python benchmarks/recipe_ablation.py --set freeze_word_embeddings=true --seeds 4 --set-seeds pppm=8
    .venv/bin/python benchmarks/recipe_ablation.py --set precision=fp32 --sets cr --seeds 4

Runs are kept in ``--output-dir`` (default ``runs/recipe_ablation``; one folder per change): a second call reuses
them, once it has checked that they ran the same recipe (its defaults resolved: a default changed since is caught),
and a speed ratio of sides timed in different calls says so. Each side's folder also records the attnpool that
trained it (``attnpool_version.json``: ``attnpool.__version__`` and the git commit of its source, when it is a
checkout): a side kept from another version, or from a commit whose ``src/attnpool`` differs from this one's, is
refused (delete that folder to retrain it), so that a default trained before a behaviour change is not paired with a
changed side trained after it; a commit that changed only docs, tests or benchmarks keeps it. The training time of a
side is its folds' ``train_seconds``, as ``attnpool compare`` reports it (not the process's wall time). Sets whose
data is missing under the default ``--data-root`` (``../shared/data``) are skipped (``skipped: ...``, exit 0 when
none is left: CI has no data); under a ``--data-root`` given, a set asked for whose data is missing there is a usage
error (exit 2, naming the root and the file: a mistyped path must not pass as a clean skip), as in
``benchmarks/quality.py``. The results go to ``--output-dir``/``CHANGE.json``, one entry per set: a call replaces
its sets' entries and keeps the others'; a call that measured nothing writes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import attnpool
from attnpool.comparison import (
    PoolerSpec,
    paired_bootstrap,
    paired_t_test,
    run_predictions,
    shared_bootstrap_keys,
    t_interval,
)
from attnpool.comparison.runner import _check_recipe, _run_one, _wanted_folds
from attnpool.comparison.stats import metric_function, sign_flip_test
from attnpool.comparison.summary import _cost, run_score
from attnpool.config import TrainConfig
from attnpool.options import ConfigError, parse_options
from attnpool.runs import RunError
from attnpool.tasks import primary_metric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import DEFAULT_DATA_ROOT, _seeds, data_sets, missing_data, recipe, write_results  # noqa: E402

POOLER = "attention"
VERSION_FILE = "attnpool_version.json"


def source_dir() -> Path:
    """The folder of attnpool's source: the package itself."""
    return Path(attnpool.__file__).resolve().parent


def _git(*args: str) -> subprocess.CompletedProcess | None:
    """``git ARGS`` run in :func:`source_dir`; None without git."""
    try:
        return subprocess.run(["git", *args], cwd=source_dir(), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):  # no git
        return None


def attnpool_version() -> dict[str, str | None]:
    """This attnpool's ``version`` and, when its source is a git checkout, its ``commit`` (HEAD; else None)."""
    done = _git("rev-parse", "HEAD")
    commit = (done.stdout.strip() or None) if done is not None and done.returncode == 0 else None
    return {"version": attnpool.__version__, "commit": commit}


def same_source(was: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Whether the attnpool recorded in ``was`` trains what this one trains.

    The same stamp, or the same version at a commit whose package source (``src/attnpool``) git finds identical to
    this one's: a commit that changed only docs, tests or benchmarks.
    """
    if was == now:
        return True
    if was is None or was.get("version") != now["version"] or not was.get("commit") or not now["commit"]:
        return False
    done = _git("diff", "--quiet", str(was["commit"]), now["commit"], "--", ".")  # rc 1: differs; 128: unknown
    return done is not None and done.returncode == 0


def _describe(stamp: dict[str, Any] | None) -> str:
    if stamp is None:
        return "an unrecorded version"
    commit = stamp.get("commit")
    return f"{stamp.get('version')}" + (f" (commit {commit[:12]})" if commit else " (no git commit)")


def check_version(out: Path) -> None:
    """Refuse the runs kept in ``out`` when another attnpool (version, or source) trained them; record this one.

    The default side was stored once and reused by every later ``--set``, checked only for its recipe (config
    fields): a default trained before a change of attnpool's behaviour was paired with a changed side trained after
    it, and the difference credited to the ``--set``.
    """
    now, stamp = attnpool_version(), out / VERSION_FILE
    kept = [p for p in (out / "runs").glob("*/seed_*") if p.is_dir()]
    if kept:
        was = json.loads(stamp.read_text()) if stamp.is_file() else None
        if not same_source(was, now):
            raise SystemExit(f"{out} holds runs trained by attnpool {_describe(was)}, and this is attnpool "
                             f"{_describe(now)}, whose source differs: they must not be paired with runs trained now "
                             "(a change of behaviour in between would read as the --set's effect); delete that folder "
                             "to retrain it")
        return
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(now, indent=2) + "\n")


def check_changes(cfg: TrainConfig, changes: dict[str, Any]) -> str | None:
    """Why ``changes`` cannot apply to ``cfg`` (an unknown field, a value ``validate`` refuses), or None.

    :func:`main` checks every set's before anything trains: the changed side was only built after the default side
    had trained all its seeds (hours), so a mistyped ``--set`` failed at the end of them.
    """
    try:
        replace(cfg, **changes).validate()
    except (TypeError, ValueError) as err:  # unknown field: TypeError; a value of another type may raise either
        return str(err)
    return None


def slug(changes: dict[str, Any]) -> str:
    return "_".join(f"{k}-{v}" for k, v in sorted(changes.items())).replace("/", "-")


def train_side(cfg, out: Path, seeds: list[int]) -> dict[str, Any]:
    """The attention pooler trained once per seed; its per-seed scores, predictions and training seconds.

    Each run is trained as ``attnpool compare`` trains one: in a process of its own, resumed when interrupted,
    kept when finished.
    """
    spec = PoolerSpec.parse(POOLER)
    runs = {s: out / "runs" / spec.slug / f"seed_{s}" for s in seeds}
    try:  # kept runs of another recipe (other epochs, another default since) must not be paired with new ones
        _check_recipe(out, replace(cfg, freeze_word_embeddings=cfg.resolved_freeze_word_embeddings()), overwrite=False)
    except RunError as err:
        raise SystemExit(str(err).replace("--overwrite to start it again", "delete that folder")) from None
    check_version(out)
    trained = 0
    for s, run in runs.items():
        if not _wanted_folds(run, cfg.only_folds):
            logging.getLogger(__name__).info("training %s, seed %d", out, s)
            _run_one(cfg, spec, s, run)
            trained += 1
    predictions = {s: run_predictions(runs[s], cfg.task) for s in seeds}
    # the folds' training seconds, as `attnpool compare` times a run (not the process's start-up, tokenising and
    # final prediction in .cost.json's wall_seconds, which weigh more on the faster side)
    seconds = {s: _cost(run)[0] for s, run in runs.items()}
    keys, _ = shared_bootstrap_keys({s: (runs[s], s) for s in seeds},  # whole groups of grouped folds, else ids/rows
                                    per_seed_rows=cfg.limit is not None and cfg.split_seed is None)
    return {"scores": [run_score(runs[s], cfg.task) for s in seeds], "predictions": predictions, "keys": keys,
            "seconds": seconds, "all_trained_now": trained == len(seeds)}


def evaluate(name: str, cfg, changes: dict[str, Any], out: Path, seeds: list[int], bootstrap: int) -> dict[str, Any]:
    base = train_side(cfg, out / "default", seeds)
    changed = train_side(replace(cfg, **changes).validate(), out / slug(changes), seeds)
    metric = primary_metric(cfg.task)[0]
    score_fn = metric_function(cfg.task, metric)
    t = paired_t_test(changed["scores"], base["scores"])
    exact = sign_flip_test(changed["scores"], base["scores"])
    groups, units = [], []
    for s in seeds:
        rows_a, target, pred_a = base["predictions"][s]
        rows_b, _, pred_b = changed["predictions"][s]
        if list(rows_a) != list(rows_b):
            raise SystemExit(f"{name}, seed {s}: the two sides validated on different rows; same split expected")
        groups.append((target, pred_b, pred_a))
        units.append(base["keys"][s])
    boot = paired_bootstrap(groups, score_fn, num_samples=bootstrap, seed=0, clusters=units)
    base_stats, changed_stats = t_interval(base["scores"]), t_interval(changed["scores"])
    within, basis = verdict(t.diff, base_stats.std, boot.low, boot.high)
    return {"set": name, "metric": metric, "seeds": seeds, "changes": changes,
            "default": base["scores"], "changed": changed["scores"],
            "mean": [base_stats.mean, changed_stats.mean], "std": [base_stats.std, changed_stats.std],
            "diff": t.diff, "p_ttest": t.p, "p_signflip": exact.p, "boot": [boot.low, boot.high],
            "p_bootstrap": boot.p, "within_noise": within, "verdict_basis": basis,
            "seconds": [sum(base["seconds"].values()), sum(changed["seconds"].values())],
            "timed_together": base["all_trained_now"] and changed["all_trained_now"]}


def verdict(diff: float, base_std: float, boot_low: float, boot_high: float) -> tuple[bool | None, str]:
    """Whether the change is within noise or better, and what that was judged on.

    Within noise: the bootstrap CI of the difference does not lie below 0 and the mean difference is above minus the
    default's seed std. With one seed there is no std (NaN, which no comparison passes: a clear win read "WORSE than
    the noise"): the bootstrap CI alone judges, and the basis says so. An n/a bootstrap (NaN) is no evidence of a
    loss; with neither a std nor a bootstrap there is no verdict (None).
    """
    boot_na = math.isnan(boot_low) or math.isnan(boot_high)
    if math.isnan(base_std) or math.isnan(diff):
        if boot_na:
            return None, "no verdict: one seed, so no seed std, and no bootstrap CI"
        return bool(not boot_high < 0), "judged on the bootstrap CI alone: one seed, so no seed std"
    return bool(not boot_high < 0 and diff >= -base_std), ("judged on the seed std: no bootstrap CI" if boot_na
                                                           else "judged on the bootstrap CI and the seed std")


def _num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4f}"


def markdown(r: dict[str, Any]) -> str:
    change = ", ".join(f"{k}={v}" for k, v in r["changes"].items())
    speed = r["seconds"][0] / r["seconds"][1]
    together = "" if r.get("timed_together", True) else " (timed in different calls, not side by side)"
    lines = [f"### {r['set']}: {change}", "",
             f"{r['metric']} on fold 0, seeds {', '.join(map(str, r['seeds']))}", "",
             "| recipe | mean ± std | per seed | training s (sum) |", "|---|---|---|---:|",
             f"| default | {r['mean'][0]:.4f} ± {_num(r['std'][0])} | {' / '.join(f'{v:.4f}' for v in r['default'])} "
             f"| {r['seconds'][0]:.0f} |",
             f"| {change} | {r['mean'][1]:.4f} ± {_num(r['std'][1])} | "
             f"{' / '.join(f'{v:.4f}' for v in r['changed'])} | {r['seconds'][1]:.0f} |", "",
             f"Δ (changed − default) {r['diff']:+.4f}; p t-test {r['p_ttest']:.3f}, exact sign-flip "
             f"{r['p_signflip']:.3f}, bootstrap {r['p_bootstrap']:.3f} (95% CI [{r['boot'][0]:+.4f}, "
             f"{r['boot'][1]:+.4f}]); training {speed:.2f}x as fast{together}; "
             f"{_verdict_text(r)}.", ""]
    return "\n".join(lines)


def _verdict_text(r: dict[str, Any]) -> str:
    within, basis = r["within_noise"], r.get("verdict_basis")
    text = "n/a" if within is None else "within noise or better" if within else "WORSE than the noise"
    usual = basis is None or basis == "judged on the bootstrap CI and the seed std"
    return text if usual else f"{text} ({basis})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", dest="changes", nargs="+", required=True, metavar="KEY=VALUE",
                   help="the change: TrainConfig fields, e.g. freeze_word_embeddings=true")
    p.add_argument("--sets", nargs="+", default=None, choices=["pppm", "cr", "mpqa"],
               help="the sets to measure (default: pppm cr mpqa, those whose data is there)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--set-seeds", nargs="+", default=[], metavar="SET=N", help="e.g. pppm=8")
    p.add_argument("--first-seed", type=int, default=42)
    p.add_argument("--split-seed", type=int, default=42)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--pppm-rows", type=int, default=5000)
    p.add_argument("--rows", nargs="+", default=["mpqa=5000"], metavar="SET=N",
                   help="a seeded random N rows of a set (default: mpqa=5000, as the quality tables)")
    p.add_argument("--model", default=None)
    p.add_argument("--data-root", type=Path, default=None, help="the folder of the sets' folders (default: "
                   "../shared/data)")
    p.add_argument("--output-dir", type=Path, default=Path("runs/recipe_ablation"))
    p.add_argument("--bootstrap", type=int, default=1000)
    return p


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    p = parser or build_parser()
    args = p.parse_args(argv)
    args.data_root_given = args.data_root is not None  # see quality.missing_data
    args.sets_given = args.sets is not None  # see quality.missing_data
    args.sets = args.sets or ["pppm", "cr", "mpqa"]
    args.data_root = args.data_root if args.data_root_given else DEFAULT_DATA_ROOT
    args.per_seed_split = False
    for option, example in (("rows", "mpqa=5000"), ("set_seeds", "pppm=8")):
        items = getattr(args, option)
        try:  # "--rows mpqa" or "--set-seeds pppm" ended in a ValueError traceback; refused as quality.py does
            setattr(args, option, {k: int(v) for k, _, v in (item.partition("=") for item in items)})
        except ValueError:
            p.error(f"--{option.replace('_', '-')} takes SET=N items, e.g. {example}; got {items}")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    try:
        changes = parse_options(args.changes, where="--set")
    except ConfigError as err:
        parser.error(f"{err} (TrainConfig fields, e.g. freeze_word_embeddings=true)")
    unknown = sorted(set(changes) - set(TrainConfig.__dataclass_fields__))
    if unknown:  # refused even when no set's data is here
        parser.error(f"--set {', '.join(unknown)}: not a TrainConfig field (e.g. freeze_word_embeddings=true)")
    sets = data_sets(args.pppm_rows)
    missing = missing_data(sets, args, parser)  # skipped under the default root; a --data-root given: an error
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    work = args.output_dir / "data"
    configs = {}
    for name in [n for n in args.sets if n not in missing]:  # every set's change checked before anything trains
        work.mkdir(parents=True, exist_ok=True)
        configs[name] = recipe(sets[name], args.data_root, work, args)
        problem = check_changes(configs[name], changes)
        if problem:
            parser.error(f"--set {' '.join(args.changes)} on {name}: {problem}")
    results = []
    for name, cfg in configs.items():
        result = evaluate(name, cfg, changes, args.output_dir / name, _seeds(args, name), args.bootstrap)
        results.append(result)
        print(markdown(result), flush=True)
        write_results(args.output_dir / f"{slug(changes)}.json", [result])  # each set as soon as it is measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
