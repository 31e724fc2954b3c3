"""Which PPPM recipe techniques pay on real data: a fold-0 ablation of attnpool's options against the notebook recipe.

Issue #18. On fold 0 of 4 (grouped by anchor) of the real PPPM ``train.csv`` (``--data-dir``, by default
``../shared/data/pppm``), with the offline all-MiniLM-L6-v2 on the CPU, it trains one run per (row, seed) through
the public API (``attnpool.train``) and prints an ablation table: technique, fold-0 Pearson (mean over seeds and
per seed), the difference to the baseline (paired per seed, then averaged) and the training time. It writes the
table as markdown to ``docs/pppm_quality.md`` (``--docs``: this run's section replaces the one an earlier run of the
same command wrote, or goes first; the file's other sections and notes are kept) and the raw results as JSON next
to the runs.

Rows (each a dict of :class:`~attnpool.config.TrainConfig` overrides on top of the baseline; ``--list`` prints them):

* ``baseline``: the PPPM preset with the README's CPU recipe, the one that reached Pearson 0.687 after one epoch
  (batch 32, ``max_length`` 96, encoder lr 5e-5, head lr 1e-3, attention pooling with ``attn_size=128``), here for
  ``--epochs`` (default 3) epochs;
* one row per technique alone (:data:`TECHNIQUES`: grouped-target context, Pearson loss, EMA, FGM, AWP, a BiLSTM
  before the pooler, frozen embeddings, re-initialised top layer, layer-wise lr decay, multi-sample dropout);
* ``combo``: several techniques together, ``--combo NAME+NAME+...`` (default :data:`DEFAULT_COMBO`); two that set
  the same option differently (``fgm+awp``) are refused;
* rows of your own, ``--row NAME ITEM ...`` (repeatable): techniques and ``KEY=VALUE`` options together, e.g. an
  encoder learning rate (``--row lr1e4 lr=1e-4``) or a combination at another rate (``--row best msd pearson
  lr=1e-4``);
* ensembles, ``--ensemble NAME ROW ROW ...`` (repeatable): no training of their own; per seed, the mean of the
  member rows' out-of-fold predictions, each standardised first (a Pearson-loss row predicts on its own scale), e.g.
  a run with the grouped-target context and one without (``--ensemble blend best context_best``). Their time is
  the members' summed; they are never the "best" row, whose targets speak of one model;
* views, ``--views NAME ROW`` (repeatable): no training of their own; per seed, the ROW run's fold-0 model (trained
  with ``group_context``, e.g. ``group_context_dropout=0.5``) predicting its validation rows through
  ``attnpool.predict``, once with the grouped context and once without (``context_view`` ``with`` and ``without``):
  the mean of the two, what ``context_view="both"`` predicts.
  One model, so it may be the best row;
* ``notebook``: the public PPPM notebook's recipe at equal epochs, ``references.notebook_scores`` (its model, loop,
  optimiser and schedule transcribed; the head of ``notebook_recipe.py``; its own batch of 16), trained on exactly
  the rows of the same seed's fold 0 (the baseline run's ``folds.csv`` when it exists, else the same
  ``make_folds`` call that ``train`` makes), so that it pairs row by row with every attnpool row.

The folds, the initialisation and the data order all follow the seed (``TrainConfig.seed``): seed ``s`` gives every
row the same fold 0, and rows are compared per seed. Runs go seed by seed (every row of the first seed, then of the
next), so an interrupted benchmark already has a complete one-seed table; the table is rewritten after each seed.

Training time: the fold's ``train_seconds`` recorded by the run (``Trainer.train``, so the per-epoch evaluations
are in, the model loading and the final prediction are not); the notebook's is the wall time of its training
function (its model loading and per-epoch evaluations included). A resumed run records only its resumed part; the
table marks it.

Significance (2 seeds or more): a paired bootstrap over the validation anchors (``attnpool.comparison.
paired_bootstrap`` with the anchors as clusters: whole anchors resampled, one draw for all seeds, the difference
averaged over seeds) of the best row against the baseline and against the notebook: the difference in Pearson, its 95%
percentile interval and p-value. The rows of one anchor share its targets and their errors, so resampling rows one
by one (``--bootstrap-by row``, the rule of the tables dated before 2026-12-05 12:00 UTC) gives too narrow intervals.
``--versus ROW ...`` tests it against those rows instead, from one seed on (e.g. one technique's variants).

Resumable: runs live in ``--work-dir`` (default ``runs/pppm_quality``) under a folder named after the model, epochs,
rows (``--anchors`` and ``--first-seed`` with anchors) and, for data other than the default folder, a hash of
``--data-dir``; a (row, seed) whose fold 0 is done is read back, not retrained; an interrupted one continues from its
last checkpoint (``resume=True``); the notebook's predictions are kept as ``.npz`` with the data and options they
were trained with. A run (or notebook cache) whose saved options differ from the row's (the row was redefined) is
refused with its path. Without ``train.csv`` in the default ``--data-dir`` it prints ``skipped: ...`` and exits 0; a
``--data-dir`` given without one is an error (a mistyped path must not pass as a clean skip). Before anything trains,
a plan says for each
(row, seed) whether it trains, resumes or is read back, and names the rows that run only because an ``--ensemble``
needs them; ``--plan`` prints it and exits.

Usage (from the repository root)::

    .venv/bin/python benchmarks/pppm_quality.py                        # every row, 2 seeds, 3 epochs (many hours)
    .venv/bin/python benchmarks/pppm_quality.py --quick                # smoke run: 200 rows, 1 epoch, 1 seed
    .venv/bin/python benchmarks/pppm_quality.py --only baseline context notebook --seeds 1
    .venv/bin/python benchmarks/pppm_quality.py --combo context+pearson+ema+llrd+msd --only combo
    .venv/bin/python benchmarks/pppm_quality.py --anchors 100 --epochs 2   # every row of 100 random anchors
    .venv/bin/python benchmarks/pppm_quality.py --row lr1e4 lr=1e-4 --only baseline lr1e4 --seeds 1
    .venv/bin/python benchmarks/pppm_quality.py --row best msd pearson lr=1e-4 --row context_best context msd \
        pearson lr=1e-4 --ensemble blend best context_best --only blend --seeds 1   # the two runs, then their mean
    .venv/bin/python benchmarks/pppm_quality.py --list                 # the rows and their options
    .venv/bin/python benchmarks/pppm_quality.py --only best --seeds 2 --plan   # what would train, then exit

Targets (issue #18): the best row reaches Pearson >= 0.78 within 3 epochs (the baseline recipe reached 0.687 after
one), and beats the notebook recipe by >= +0.03 at equal epochs. ``benchmarks/pppm_deberta.py`` trains the best
combination on DeBERTa-v3-large on a GPU (4 folds, CV).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import hashlib
import json
import logging
import math
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

import attnpool
from attnpool.comparison import paired_bootstrap, run_predictions
from attnpool.comparison.stats import metric_function
from attnpool.config import ConfigError, TrainConfig, default_model, make_config
from attnpool.data.task import load_task
from attnpool.options import parse_options
from attnpool.runs.files import atomic_write_json, atomic_write_text
from attnpool.runs.run import Run

logger = logging.getLogger("attnpool.pppm_quality")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data" / "pppm"
DEFAULT_DOCS = ROOT / "docs" / "pppm_quality.md"
TARGET_PEARSON = 0.78  # MiniLM fold 0 within TARGET_EPOCHS epochs
TARGET_EPOCHS = 3
TARGET_OVER_NOTEBOOK = 0.03
FOLDS = 4  # fold 0 of 4, grouped by anchor: --anchors needs one anchor per fold at least
NOTEBOOK_BATCH_SIZE = 16  # the notebook's CFG.batch_size
CONTEXT_MAX_LENGTH = 256  # grouped-target texts: median ~85 words, 99th percentile ~280 (the baseline's longest: 84)
QUICK_ROWS = 200
QUICK_ONLY = ("baseline", "llrd", "notebook")
BASELINE = "baseline"
COMBO = "combo"
NOTEBOOK = "notebook"

# The README's CPU recipe (it reached Pearson 0.687 on fold 0 after one epoch): the ablation's baseline. It trains the
# word embeddings, as every figure in docs/pppm_quality.md did; attnpool's default freezes them since 2026-12-02 (the
# ``freeze_words`` row).
CPU_RECIPE: dict[str, Any] = {"batch_size": 32, "max_length": 96, "lr": 5e-5, "head_lr": 1e-3, "pooling": "attention",
                              "pooling_options": {"attn_size": 128}, "freeze_word_embeddings": False}


@dataclasses.dataclass(frozen=True)
class Technique:
    """One ablation row: the options it sets over the baseline, and where the technique comes from."""

    name: str
    options: Mapping[str, Any]
    source: str


TECHNIQUES: dict[str, Technique] = {t.name: t for t in (
    Technique("context", {"group_context": "target", "max_length": CONTEXT_MAX_LENGTH},
              "the other targets of the same anchor and context appended to the text (PPPM top solutions)"),
    Technique("pearson", {"loss": "pearson"}, "1 - Pearson correlation of the batch as the loss (PPPM solutions)"),
    Technique("ema", {"ema_decay": 0.999}, "evaluate and save an exponential moving average of the weights"),
    Technique("fgm", {"adversarial": "fgm", "adversarial_start": 1.0},
              "fast gradient method on the embeddings from epoch 1 (Miyato et al. 2017, arXiv:1605.07725)"),
    Technique("awp", {"adversarial": "awp", "adversarial_start": 1.0},
              "adversarial weight perturbation from epoch 1 (Wu et al. 2020, arXiv:2004.05884)"),
    Technique("lstm", {"recurrent": "lstm"}, "a BiLSTM between the encoder and the pooler"),
    Technique("freeze", {"freeze_layers": 0, "freeze_word_embeddings": None}, "frozen embedding layer (PPPM 1st "
              "place)"),
    Technique("freeze_words", {"freeze_word_embeddings": True}, "frozen word embeddings (attnpool's default)"),
    Technique("reinit", {"reinit_layers": 1}, "the top encoder layer re-initialised (Zhang et al. 2021, "
              "arXiv:2006.05987)"),
    Technique("llrd", {"llrd": 0.8}, "layer-wise learning-rate decay 0.8 (Howard & Ruder 2018, arXiv:1801.06146)"),
    Technique("msd", {"multi_sample_dropout": 5}, "multi-sample dropout, 5 masks (Inoue 2019, arXiv:1905.09788)"),
)}
# The best combination measured on the CPU slice (--anchors 100 --epochs 2, 2 seeds; docs/pppm_quality.md): the two
# single rows that gained, multi-sample dropout and the Pearson loss.
DEFAULT_COMBO = "msd+pearson"


# --------------------------------------------------------------------------------------------------- rows


def parse_combo(text: str) -> list[str]:
    """``"a+b"`` -> ``["a", "b"]``, each a name of :data:`TECHNIQUES`; a clear error otherwise."""
    names = [n.strip() for n in text.split("+") if n.strip()]
    unknown = [n for n in names if n not in TECHNIQUES]
    if unknown or not names:
        raise ValueError(f"--combo {text!r}: unknown technique(s) {', '.join(unknown) or '(none given)'}; "
                         f"join names of {', '.join(TECHNIQUES)} with +")
    return list(dict.fromkeys(names))


def combine(names: Sequence[str]) -> dict[str, Any]:
    """The options of several techniques together; two that set one option to different values are refused."""
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for name in names:
        for key, value in TECHNIQUES[name].options.items():
            if key in merged and merged[key] != value:
                raise ValueError(f"--combo: {owner[key]} and {name} both set {key} ({merged[key]!r} vs {value!r}); "
                                 "keep one of them")
            merged[key], owner[key] = value, name
    return merged


def parse_row(tokens: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``--row NAME ITEM ...``: a row of its own, each item a technique's name or a ``KEY=VALUE`` option.

    ``["lr1e4", "lr=1e-4"]`` -> ``("lr1e4", {"lr": 1e-4})``; ``["best", "msd", "pearson", "lr=1e-4"]`` joins the two
    techniques' options (as ``--combo`` does) and sets ``lr``. Values are read as ``attnpool train``'s ``KEY=VALUE``
    options are (JSON when it parses: ``1e-4`` a number, ``true`` a bool, ``{"init": "xavier"}`` a mapping; else the
    text); the options must build a valid ``TrainConfig``, checked before any training.
    """
    if len(tokens) < 2:
        raise ValueError(f"--row {' '.join(tokens)}: give a name and at least one technique or KEY=VALUE, e.g. "
                         "--row lr1e4 lr=1e-4")
    name, items = tokens[0], tokens[1:]
    if "=" in name or name in TECHNIQUES or name in (BASELINE, COMBO, NOTEBOOK):
        raise ValueError(f"--row {name!r}: the first item is the row's name, and it must not be a technique's or "
                         f"a built-in row's name ({', '.join([BASELINE, *TECHNIQUES, COMBO, NOTEBOOK])})")
    techniques = [t for t in items if "=" not in t]
    options = combine(parse_combo("+".join(techniques))) if techniques else {}
    options.update(parse_options([t for t in items if "=" in t], where=f"--row {name}"))
    return name, options


def row_options(combo: str = DEFAULT_COMBO, ema_decay: float | None = None,
                extra: Sequence[Sequence[str]] = ()) -> dict[str, dict[str, Any]]:
    """Every attnpool row of the ablation: its name and its options over the baseline, in table order.

    ``ema_decay`` replaces the ``ema`` technique's decay (in its row and in the combo): 0.999 averages over about
    1,000 optimizer steps, right for the full data, far too slow for a slice of a few hundred steps. ``extra``: the
    ``--row`` rows (:func:`parse_row`), after the combo.
    """
    singles = {name: dict(t.options) for name, t in TECHNIQUES.items()}
    combined = combine(parse_combo(combo))
    if ema_decay is not None:
        if not 0.0 < ema_decay < 1.0:
            raise ValueError(f"--ema-decay must be in (0, 1), got {ema_decay}")
        for options in (singles["ema"], combined):
            if "ema_decay" in options:
                options["ema_decay"] = ema_decay
    rows = {BASELINE: {}, **singles, COMBO: combined}
    for tokens in extra:
        name, options = parse_row(tokens)
        if name in rows:
            raise ValueError(f"--row {name}: two rows of that name; give each --row its own name")
        rows[name] = options
    return rows


def pppm_options(data_dir: str | Path, model: str, epochs: float, limit: int | None) -> dict[str, Any]:
    """What every row shares: the PPPM preset, fold 0 of 4 grouped by anchor, the model, the budget."""
    return {"preset": "pppm", "data_dir": str(data_dir), "model": model, "folds": FOLDS, "only_folds": [0],
            "epochs": epochs, "limit": limit}


def anchor_subset(data_dir: Path, anchors: int, seed: int) -> tuple[Path, int]:
    """A PPPM folder holding every row of ``anchors`` anchors drawn at random (seeded), and its number of rows.

    Unlike ``--rows`` (a random subset of rows), whole anchors keep every target of an anchor, so that the
    grouped-target context of a row is as long as on the full data. The folder is written outside the project, under
    the system's temporary directory (it is derived data, rebuilt identically when missing), in a folder named after
    the draw and a hash of the source folder's path (two sources never share one), and rewritten when its rows are
    not the draw's (the source changed). Its :data:`SUBSET_FILE` says what it holds (:func:`subset_of`).
    """
    frame = pd.read_csv(data_dir / "train.csv", dtype=str, keep_default_na=False)
    names = sorted(frame["anchor"].unique())
    if not 0 < anchors <= len(names):
        raise SystemExit(f"--anchors must be in 1..{len(names)} (the anchors of {data_dir / 'train.csv'})")
    chosen = set(np.random.default_rng(seed).choice(names, size=anchors, replace=False))
    subset = frame[frame["anchor"].isin(chosen)]
    folder = subset_root() / f"{anchors}anchors_seed{seed}_{path_hash(data_dir)}"
    text = subset.to_csv(index=False)
    train = folder / "train.csv"
    if not train.is_file() or train.read_text(encoding="utf-8") != text:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / "cpc_texts.csv", (data_dir / "cpc_texts.csv").read_text(encoding="utf-8"))
        atomic_write_text(train, text)
    source = {"source": str(Path(data_dir).expanduser().resolve()), "anchors": anchors, "seed": seed,
              "rows": len(subset)}
    if subset_of(folder) != source:
        atomic_write_json(folder / SUBSET_FILE, source)
    return folder, len(subset)


SUBSET_FILE = "subset.json"  # in an anchor subset's folder: its source folder, anchors, seed and rows


def subset_root() -> Path:
    """Where :func:`anchor_subset` writes its folders."""
    return Path(tempfile.gettempdir()) / "attnpool_pppm_quality"


def subset_of(data_dir: str | Path) -> dict[str, Any] | None:
    """What an anchor subset's folder holds (``source``, ``anchors``, ``seed``, ``rows``); ``None`` for another folder.

    A folder under :func:`subset_root` without its :data:`SUBSET_FILE` (written before there was one) gives
    ``{"anchors": None}``: a subset of unknown size.
    """
    folder = Path(data_dir).expanduser()
    marker = folder / SUBSET_FILE
    if marker.is_file():
        return json.loads(marker.read_text(encoding="utf-8"))
    return {"anchors": None} if folder.resolve().parent == subset_root().resolve() else None


def path_hash(path: str | Path) -> str:
    """A short hash of a folder's absolute path, for names of folders derived from it."""
    return hashlib.sha256(str(Path(path).expanduser().resolve()).encode()).hexdigest()[:8]


def baseline_options(data_dir: str | Path, model: str, epochs: float, limit: int | None = None) -> dict[str, Any]:
    """The baseline row's options: :func:`pppm_options` and the CPU recipe."""
    return {**pppm_options(data_dir, model, epochs, limit), **CPU_RECIPE}


def row_config(base: Mapping[str, Any], options: Mapping[str, Any], seed: int, output_dir: str | Path) -> TrainConfig:
    """One (row, seed)'s validated config (``make_config``: ``pooling_options`` merged key by key).

    The base's ``pooling_options`` belong to its pooler: a row that names another ``pooling`` starts from none
    (``attn_size`` means nothing to ``mean``), plus its own ``pooling_options``.
    """
    base = dict(base)
    if options.get("pooling", base.get("pooling")) != base.get("pooling"):
        base.pop("pooling_options", None)
    return make_config(base, **options, seed=seed, output_dir=str(output_dir)).validate()


def check_rows(base: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]]) -> None:
    """Build every row's config before training anything: an option this attnpool lacks is named with its rows."""
    problems = []
    for name, options in rows.items():
        try:
            row_config(base, options, seed=0, output_dir="unused")
        except (ConfigError, ValueError, TypeError) as err:
            problems.append(f"{name}: {err}")
    if problems:
        raise SystemExit("rows that do not build a valid TrainConfig (leave them out with --only):\n  "
                         + "\n  ".join(problems))


def describe(options: Mapping[str, Any]) -> str:
    """``key=value, ...`` for the table (the baseline: ``-``)."""
    return ", ".join(f"{k}={_value(v)}" for k, v in options.items()) or "-"


def _value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------------------------------- training


def run_row(name: str, cfg: TrainConfig, checked: Mapping[str, Any]) -> dict[str, Any]:
    """Train one (row, seed) unless its fold 0 is done; its result from the run (``Run``), never from raw files.

    Args:
        name: The row's name.
        cfg: Its config; ``cfg.output_dir`` is the run.
        checked: The options a finished or interrupted run must have been started with (else it is refused).
    """
    run = Run(cfg.output_dir)
    status = row_status(run.path)
    if status != "trained":
        _check_saved_options(run, checked)
    record_file = run.path.with_suffix(".json")
    wall = None
    if status != "reused":
        logger.info("%s, seed %d: %s %s", name, cfg.seed, "resuming" if status == "resumed" else "training", run.path)
        started = time.perf_counter()
        attnpool.train(cfg, resume=status == "resumed")
        wall = time.perf_counter() - started
        gc.collect()
    elif record_file.is_file():
        wall = json.loads(record_file.read_text(encoding="utf-8")).get("wall_seconds")
    metrics = run.fold_metrics(0)
    record = {"row": name, "seed": cfg.seed, "pearson": float(metrics["pearson"]),
              "train_seconds": metrics.get("train_seconds"), "wall_seconds": wall, "run_dir": str(run.path),
              "status": status, "n_train": metrics.get("n_train"), "n_valid": metrics.get("n_valid"),
              "precision": run_precision(run)}
    if status != "reused":
        atomic_write_json(record_file, record)
    return record


def run_precision(run: Run) -> str:
    """The precision ``run`` trained in, from its ``run.json`` (resolved where it trained), e.g. ``bf16 (auto)``.

    The table's label came from the machine that printed it: runs trained on another machine, or read back after a
    default changed, were labelled with this one's precision.
    """
    resolved = run.info().get("precision")
    asked = run.config().precision if run.config_file.is_file() else None
    if resolved is None:  # a run.json written before it recorded the precision
        return f"{asked or 'unknown'} (resolved precision not recorded)"
    return f"{resolved} ({asked})" if asked and asked != resolved else resolved


def precision_label(results: Sequence[Mapping[str, Any]]) -> str:
    """The attnpool rows' precision for the table, from their runs (:func:`run_precision`); per seed where it differs.

    One precision: ``bf16 (auto)``. Else each seed's, ``bf16 (auto) for seed 42, fp32 (auto) for seed 43``, and a
    seed whose rows differ names them: ``fp32 (auto) for baseline, seed 42``.
    """
    by_seed: dict[int, dict[str, str]] = {}
    for r in results:
        if r.get("precision"):
            by_seed.setdefault(int(r["seed"]), {})[r["row"]] = r["precision"]
    labels = {label for rows in by_seed.values() for label in rows.values()}
    if len(labels) <= 1:
        return next(iter(labels), "-")
    parts = []
    for seed, rows in sorted(by_seed.items()):
        if len(set(rows.values())) == 1:
            parts.append(f"{next(iter(rows.values()))} for seed {seed}")
        else:
            parts += [f"{label} for {row}, seed {seed}" for row, label in rows.items()]
    return ", ".join(parts)


def row_status(path: Path) -> str:
    """What :func:`run_row` does with the run at ``path``: ``trained`` (new), ``resumed``, ``reused`` (fold 0 done)."""
    if not Run.is_run(path):
        return "trained"
    return "reused" if Run(path).fold_done(0) else "resumed"


def notebook_files(folder: Path, seed: int) -> tuple[Path, Path]:
    """The notebook row's cached predictions (``.npz``) and record (``.json``) for ``seed``; both make it done."""
    cache = folder / f"seed_{seed}.npz"
    return cache, cache.with_suffix(".json")


def checked_options(cfg: TrainConfig, base: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """What a row's earlier run must have been started with: the options the base or the row sets, and the seed.

    Their values are the row's config's (a row naming another pooler has its own ``pooling_options``, not the base's).
    """
    values = cfg.to_dict()
    return {k: values[k] for k in (*base, *options, "seed")}


def _check_saved_options(run: Run, checked: Mapping[str, Any]) -> None:
    saved = run.config().to_dict()
    wanted = TrainConfig(**{**TrainConfig().to_dict(), **checked}).to_dict()  # normalised as the run saved them
    differ = [k for k in checked if saved.get(k) != wanted[k]]
    if differ:
        changes = "; ".join(f"{k}: run {saved.get(k)!r}, row {wanted[k]!r}" for k in differ)
        raise SystemExit(f"{run.path} was trained with other options than its row now has ({changes}); delete it or "
                         "choose another --work-dir")


def run_notebook(base: Mapping[str, Any], seed: int, folder: Path, baseline_run: Path) -> dict[str, Any]:
    """The notebook recipe on the seed's fold 0 (the rows the attnpool rows validate on), cached as ``.npz``."""
    from references import notebook_scores  # the benchmarks folder: on sys.path when run as a script

    cache, record_file = notebook_files(folder, seed)
    cfg = row_config(base, {"batch_size": NOTEBOOK_BATCH_SIZE}, seed, folder / "unused")
    recipe = notebook_recipe(cfg)
    if cache.is_file() and record_file.is_file():
        record = json.loads(record_file.read_text(encoding="utf-8"))
        _check_notebook_recipe(record_file, record.get("recipe"), recipe)
        return {**record, "status": "reused"}
    data = load_task(cfg, log=logger)  # resolves the preset into cfg; the same seeded rows as the runs
    folds = Run(baseline_run).read_fold_assignment() if Run.is_run(baseline_run) else None
    if folds is None or len(folds) != data.num_rows:
        folds = data.make_folds(cfg)  # what train() saves as folds.csv
    train_idx, valid_idx = data.split(folds, 0)
    logger.info("notebook, seed %d: %d train / %d valid rows", seed, len(train_idx), len(valid_idx))
    started = time.perf_counter()
    scores = np.asarray(notebook_scores(cfg, data, train_idx, valid_idx, seed), dtype=np.float64)
    seconds = time.perf_counter() - started
    target = np.asarray(data.labels[valid_idx], dtype=np.float64)
    folder.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".tmp.npz")
    np.savez(partial, rows=valid_idx, target=target, scores=scores)
    partial.replace(cache)
    record = {"row": NOTEBOOK, "seed": seed, "pearson": metric_function("regression", "pearson")(target, scores),
              "train_seconds": seconds, "wall_seconds": seconds, "run_dir": str(cache), "status": "trained",
              "n_train": len(train_idx), "n_valid": len(valid_idx), "recipe": recipe}
    atomic_write_json(record_file, record)
    del data
    gc.collect()
    return record


NOTEBOOK_KEYS = ("preset", "data_dir", "model", "limit", "split_seed", "folds", "epochs", "max_length", "batch_size",
                 "eval_batch_size", "seed")  # what the notebook row's data, split and training follow


def notebook_recipe(cfg: TrainConfig) -> dict[str, Any]:
    """What defines the notebook row's predictions: its config's :data:`NOTEBOOK_KEYS`, paths made absolute."""
    values = cfg.to_dict()
    recipe = {k: values[k] for k in NOTEBOOK_KEYS}
    for key in ("data_dir", "model"):
        if recipe[key] and Path(recipe[key]).expanduser().exists():  # a hub model name stays a name
            recipe[key] = str(Path(recipe[key]).expanduser().resolve())
    return recipe


def _check_notebook_recipe(record_file: Path, saved: Mapping[str, Any] | None, recipe: Mapping[str, Any]) -> None:
    """Refuse the notebook row's cached predictions when they were made for other data or options."""
    if saved is None:
        raise SystemExit(f"{record_file} does not say which data and options its notebook predictions were trained "
                         "with (it predates that check); delete it and its .npz to train it again, or choose another "
                         "--work-dir")
    differ = [k for k in recipe if saved.get(k) != recipe[k]]
    if differ:
        changes = "; ".join(f"{k}: cached {saved.get(k)!r}, now {recipe[k]!r}" for k in differ)
        raise SystemExit(f"{record_file} holds the notebook's predictions for other data or options ({changes}); "
                         "delete it and its .npz to train it again, or choose another --work-dir")


def predictions(record: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, target, scores)`` of a result, sorted by row: the run's out-of-fold file, or the notebook's cache."""
    path = Path(record["run_dir"])
    if path.suffix == ".npz":
        with np.load(path) as f:
            order = np.argsort(f["rows"], kind="stable")
            return f["rows"][order], f["target"][order], f["scores"][order]
    return run_predictions(path, "regression")


def run_ensemble(name: str, members: Sequence[str], seed: int, results: Sequence[Mapping[str, Any]],
                 folder: Path) -> dict[str, Any] | None:
    """The ``name`` ensemble of the ``members`` rows for ``seed``, cached as ``.npz``; ``None`` if one is missing.

    Each member's out-of-fold predictions are standardised (mean 0, standard deviation 1 over the validation rows)
    and averaged, row by row: rows trained with a Pearson loss predict on a scale of their own, so a plain mean would
    weigh the members by their spread. The members must have validated on the same rows.
    """
    found = {r["row"]: r for r in results if int(r["seed"]) == seed and r["row"] in members}
    if len(found) != len(members):
        return None
    rows, target, total = None, None, None
    for member in members:
        r, t, scores = predictions(found[member])
        if rows is None:
            rows, target, total = r, t, np.zeros(len(r))
        elif not np.array_equal(r, rows):
            raise SystemExit(f"--ensemble {name}: {member} validated on other rows than {members[0]} for seed "
                             f"{seed}; an ensemble needs the same fold 0 (rows trained with the same seed)")
        scores = np.asarray(scores, dtype=np.float64)
        total += (scores - scores.mean()) / (scores.std() or 1.0)
    scores = total / len(members)
    path = folder / f"seed_{seed}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, rows=rows, target=target, scores=scores)
    os.replace(tmp, path)
    seconds = [found[m].get("train_seconds") for m in members]
    return {"row": name, "seed": seed, "pearson": float(metric_function("regression", "pearson")(target, scores)),
            "train_seconds": sum(seconds) if None not in seconds else None, "run_dir": str(path),
            "status": "ensemble", "members": list(members), "n_valid": len(rows)}


def run_views(name: str, row: str, seed: int, results: Sequence[Mapping[str, Any]], folder: Path) -> dict[str, Any]:
    """The ``row`` run of ``seed`` predicting its validation rows with ``context_view="both"``, as a row of its own.

    The validation rows are the run's out-of-fold rows, written to a CSV in ``folder`` and read by ``attnpool.predict``
    as any file is (each row's context from the file's rows: the validation rows, as in training), once per view
    (``with`` and ``without``), and averaged as ``context_view="both"`` averages them; the predictions are kept as
    ``.npz`` like an ensemble's. The record also holds the run's score with the context only (its
    out-of-fold file) and without it.
    """
    found = next(r for r in results if r["row"] == row and int(r["seed"]) == seed)
    run = Run(found["run_dir"])
    cfg = run.config()
    if not cfg.group_context:
        raise SystemExit(f"--views {name}: {row} trains without --group-context, so its rows have one view only")
    rows, target, with_context = predictions(found)
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder / f"seed_{seed}_valid.csv"
    atomic_write_text(inputs, load_task(cfg, log=logger).frame.iloc[rows].to_csv(index=False))
    score = metric_function("regression", "pearson")
    views = {}
    for view in ("with", "without"):  # each view once; "both" is their mean, as predict(context_view="both") takes it
        out = folder / f"seed_{seed}_{view}.csv"
        attnpool.predict(run.path, inputs, out, folds=[0], context_view=view, progress=False, precision=cfg.precision)
        views[view] = pd.read_csv(out)["prediction"].to_numpy(dtype=np.float64)
    views["both"] = (views["with"] + views["without"]) / 2
    path = folder / f"seed_{seed}.npz"
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, rows=rows, target=target, scores=views["both"])
    os.replace(tmp, path)
    record = {"row": name, "seed": seed, "pearson": float(score(target, views["both"])),
              "pearson_with": float(score(target, with_context)), "pearson_without": float(score(target,
                                                                                               views["without"])),
              "train_seconds": found.get("train_seconds"), "run_dir": str(path), "status": "views", "views_of": row,
              "n_valid": len(rows)}
    logger.info("%s, seed %d: Pearson %.4f with both views (with the context %.4f, without %.4f)", name, seed,
                record["pearson"], record["pearson_with"], record["pearson_without"])
    return record


# --------------------------------------------------------------------------------------------------- summary


def summarise(results: Sequence[Mapping[str, Any]], order: Sequence[str]) -> dict[str, Any]:
    """The table's numbers from result records (``row``, ``seed``, ``pearson``, ``train_seconds``, ``status``).

    Pearson is averaged over a row's seeds; the difference to the baseline is taken per seed (the seeds both have)
    and averaged; the best row is the attnpool row (not the notebook or an ensemble) with the highest mean Pearson
    on the seeds all those rows have (on its own seeds where they share none).
    """
    by_row: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in results:
        by_row.setdefault(r["row"], {})[int(r["seed"])] = r
    base = by_row.get(BASELINE, {})
    rows = []
    for name in [n for n in order if n in by_row] + sorted(set(by_row) - set(order)):
        seeds = by_row[name]
        per_seed = {s: float(seeds[s]["pearson"]) for s in sorted(seeds)}
        paired = {s: per_seed[s] - float(base[s]["pearson"]) for s in per_seed if s in base and name != BASELINE}
        times = [seeds[s]["train_seconds"] for s in seeds if seeds[s].get("train_seconds") is not None]
        rows.append({"name": name, "pearson": float(np.mean(list(per_seed.values()))), "per_seed": per_seed,
                     "delta": float(np.mean(list(paired.values()))) if paired else None, "delta_per_seed": paired,
                     "seconds": float(np.mean(times)) if times else None,
                     "resumed": any(seeds[s].get("status") == "resumed" for s in seeds),
                     "members": next((seeds[s]["members"] for s in seeds if seeds[s].get("members")), None),
                     "views_of": next((seeds[s]["views_of"] for s in seeds if seeds[s].get("views_of")), None)})
    ensembles = {r["row"] for r in results if r.get("members")}
    ours = [r for r in rows if r["name"] != NOTEBOOK and r["name"] not in ensembles and not math.isnan(r["pearson"])]
    # compared on the seeds they all have: a row of one lucky seed is not above one measured on two
    shared = set.intersection(*(set(r["per_seed"]) for r in ours)) if ours else set()
    def score(r: dict[str, Any]) -> float:
        return float(np.mean([r["per_seed"][s] for s in shared])) if shared else r["pearson"]
    best = max(ours, key=score)["name"] if ours else None
    return {"rows": rows, "best": best, "seeds": sorted({int(r["seed"]) for r in results})}


def significance(results: Sequence[Mapping[str, Any]], best: str, versus: Sequence[str], bootstrap: int,
                 seed: int = 0, anchors: np.ndarray | None = None, rows_per_seed: bool = False
                 ) -> dict[str, dict[str, Any]]:
    """Paired bootstrap of ``best`` against each of ``versus``, over the seeds both have.

    ``anchors``: the anchor of every row of the training file, by row number: whole anchors are resampled (the
    validation rows of one anchor share its targets and errors, and the folds are grouped by it); ``None``: rows
    one by one. Either is drawn once for all seeds (a row or anchor two seeds validated on counts once), except the
    rows of ``rows_per_seed`` (``--rows``: each seed drew its own rows, so a row number is the seed's own).
    """
    score = metric_function("regression", "pearson")
    by_key = {(r["row"], int(r["seed"])): r for r in results}
    out = {}
    for other in versus:
        if other == best:
            continue
        groups, clusters = [], []
        for s in sorted({s for row, s in by_key if row == best}):
            if (other, s) not in by_key:
                continue
            rows_a, target, a = predictions(by_key[best, s])
            rows_b, _, b = predictions(by_key[other, s])
            common = np.intersect1d(rows_a, rows_b)
            if len(common) != len(rows_a) or len(common) != len(rows_b):
                logger.warning("%s and %s validate on different rows for seed %d; paired on the %d they share",
                               best, other, s, len(common))
            ia, ib = np.searchsorted(rows_a, common), np.searchsorted(rows_b, common)
            groups.append((target[ia], a[ia], b[ib]))
            keys = common.astype(str) if not rows_per_seed else np.char.add(f"seed {s} row ", common.astype(str))
            clusters.append(anchors[common] if anchors is not None else keys)  # a row shared by seeds: one draw
        if groups:
            test = paired_bootstrap(groups, score, num_samples=bootstrap, seed=seed, clusters=clusters)
            out[other] = {"diff": test.diff, "low": test.low, "high": test.high, "p": test.p, "seeds": len(groups),
                          "by": "anchor" if anchors is not None else "row"}
    return out


def versus_rows(versus: Sequence[str] | None, seeds: int) -> list[str]:
    """The rows the best row is tested against: ``--versus`` (from one seed on), else baseline and notebook (from 2)."""
    if versus:
        return list(versus)
    return [BASELINE, NOTEBOOK] if seeds >= 2 else []


def check_targets(summary: Mapping[str, Any], epochs: float, full_data: bool) -> dict[str, bool | None]:
    """Issue #18's targets; ``None`` where they do not apply (a row subset, more epochs, no notebook row)."""
    rows = {r["name"]: r for r in summary["rows"]}
    best = rows.get(summary["best"])
    if best is None:
        return {}
    reach = best["pearson"] >= TARGET_PEARSON if full_data and epochs <= TARGET_EPOCHS else None
    ahead = None
    if NOTEBOOK in rows and full_data:
        notebook = rows[NOTEBOOK]["per_seed"]
        paired = [best["per_seed"][s] - notebook[s] for s in best["per_seed"] if s in notebook]
        ahead = bool(np.mean(paired) >= TARGET_OVER_NOTEBOOK) if paired else None
    return {f"best Pearson >= {TARGET_PEARSON} within {TARGET_EPOCHS} epochs (here {epochs:g})": reach,
            f"best - notebook >= +{TARGET_OVER_NOTEBOOK} at equal epochs": ahead}


def _f(value: float | None, digits: int = 4, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "n/a" if math.isnan(value) else ("<0.001" if value < 0.001 else f"{value:.3f}")


def markdown(summary: Mapping[str, Any], meta: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]],
             tests: Mapping[str, Mapping[str, float]] | None = None,
             targets: Mapping[str, bool | None] | None = None) -> str:
    """The ablation table, its setting, the significance tests and the targets, as markdown."""
    seeds = summary["seeds"]
    untested = "" if tests else ", no significance test"
    note = "" if len(seeds) >= 2 else f" (1 seed only: no seed-to-seed spread{untested})"
    epochs = f"{meta['epochs']:g} epoch{'s' if meta['epochs'] != 1 else ''}"
    lines = [f"## PPPM fold 0 of 4 (grouped by anchor), {meta['model']}, {epochs}, "
             f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}{note}", "",
             f"- command: `{meta['command']}`",
             f"- date: {meta['date']}; machine: {meta['machine']}",
             f"- data: {meta['rows']}; seeds {', '.join(map(str, seeds))}; combo = {meta['combo']}; attnpool rows: "
             f"precision {meta.get('precision', 'auto')}; the notebook: fp32",
             "- Pearson of fold 0's validation rows at the run's best evaluation; Δ: paired per seed, then averaged; "
             "time: the fold's training seconds (the notebook: its training call)", "",
             "| technique | options | Pearson (mean) | per seed | Δ vs baseline | training time (s) |",
             "|---|---|---:|---|---:|---:|"]
    for row in summary["rows"]:
        name, best = row["name"], row["name"] == summary["best"]
        label = f"{name} ({meta['combo']})" if name == COMBO else name
        per_seed = " / ".join(_f(v) for v in row["per_seed"].values())
        delta = _f(row["delta"], sign=True)
        if len(row["delta_per_seed"]) >= 2:
            delta += " (" + " / ".join(_f(v, sign=True) for v in row["delta_per_seed"].values()) + ")"
        elif len(row["delta_per_seed"]) == 1 and len(summary["seeds"]) > 1:  # paired on one seed of several
            delta += f" (seed {next(iter(row['delta_per_seed']))})"
        opts = "notebook recipe (references.notebook_scores)" if name == NOTEBOOK else describe(options.get(name, {}))
        if row.get("members"):
            opts = "ensemble: standardised mean of " + " + ".join(row["members"])
        if row.get("views_of"):
            opts = f"{row['views_of']}'s model, predicted with --context-view both (with and without the context)"
        seconds = _f(row["seconds"], 0) + (" (resumed)" if row["resumed"] else "")
        seconds += " (summed)" if row.get("members") else ""
        pearson = f"**{_f(row['pearson'])}** (best)" if best else _f(row["pearson"])
        lines.append(f"| {'**' + label + '**' if best else label} | {opts} | {pearson} | {per_seed} | {delta} | "
                     f"{seconds} |")
    if tests:
        by_anchor = all(t.get("by") == "anchor" for t in tests.values())
        over = "anchors (whole anchors resampled)" if by_anchor else "rows"
        lines += ["", f"Paired bootstrap over the validation {over} ({meta.get('bootstrap', '?')} replicates), "
                  f"{summary['best']} minus:", "", "| versus | Δ Pearson | 95% interval | p | seeds |",
                  "|---|---:|---|---:|---:|"]
        for other, t in tests.items():
            lines.append(f"| {other} | {_f(t['diff'], sign=True)} | [{_f(t['low'], sign=True)}, "
                         f"{_f(t['high'], sign=True)}] | {_p(t['p'])} | {t['seeds']} |")
    if targets:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}
        lines += ["", "Targets: " + "; ".join(f"{k}: {verdict[v]}" for k, v in targets.items())]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None, help="PPPM folder (train.csv, cpc_texts.csv; default "
                   f"{DEFAULT_DATA_DIR}, skipped when missing)")
    p.add_argument("--model", default=None, help="encoder (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--epochs", type=float, default=None, help="training epochs (default: 3; --quick: 1)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: 2; --quick: 1)")
    p.add_argument("--first-seed", type=int, default=42)
    p.add_argument("--rows", type=int, default=None, help="a seeded random subset of this many rows (limit)")
    p.add_argument("--anchors", type=int, default=None, help="every row of this many anchors drawn at random "
                   "(seeded by --first-seed): a smaller set whose grouped contexts stay whole")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME", help="run only these rows, in this order (see "
                   "--list; the table keeps its own order)")
    p.add_argument("--combo", default=DEFAULT_COMBO, help=f"the combo row: techniques joined by + (default "
                   f"{DEFAULT_COMBO})")
    p.add_argument("--ema-decay", type=float, default=None, help="the ema row's (and combo's) decay (default "
                   f"{TECHNIQUES['ema'].options['ema_decay']}: about 1,000 steps; a slice of a few hundred steps "
                   "needs less, e.g. 0.98)")
    p.add_argument("--row", action="append", nargs="+", default=[], metavar="ITEM", help="a row of your own: "
                   "NAME, then techniques and/or KEY=VALUE options (TrainConfig fields, JSON values), e.g. --row "
                   "lr1e4 lr=1e-4 or --row best msd pearson lr=1e-4; repeat for more rows; run them with --only")
    p.add_argument("--ensemble", action="append", nargs="+", default=[], metavar="ITEM", help="an ensemble row: "
                   "NAME, then two or more rows whose out-of-fold predictions it averages (standardised), e.g. "
                   "--ensemble blend best context_best; the members run when not done (the plan says so); repeat for "
                   "more")
    p.add_argument("--views", action="append", nargs=2, default=[], metavar=("NAME", "ROW"), help="a row of "
                   "ROW's model (trained with a group context) predicting with and without it, averaged "
                   "(attnpool predict --context-view both), e.g. --views cd05_both cd05; repeat for more")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_ROWS} rows, 1 epoch, 1 seed, rows "
                   f"{' '.join(QUICK_ONLY)} (each unless given)")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs" / "pppm_quality", help="where the runs are kept")
    p.add_argument("--docs", default=None, help="the markdown file (default: docs/pppm_quality.md; none with "
                   "--quick); '-' for none")
    p.add_argument("--versus", nargs="+", default=None, metavar="NAME", help="test the best row against these rows "
                   "(paired bootstrap over the validation anchors, --bootstrap-by, on the seeds both have; also with "
                   "one seed) "
                   "(default: the baseline and the notebook, from 2 seeds on)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (2 seeds or more)")
    p.add_argument("--bootstrap-by", choices=("anchor", "row"), default="anchor", help="resample whole anchors "
                   "(the validation rows of an anchor are not independent) or rows one by one (the figures of "
                   "docs/pppm_quality.md dated before 2026-12-05 12:00 UTC); with --rows, always rows")
    p.add_argument("--list", action="store_true", help="print the rows and their options, then exit")
    p.add_argument("--plan", action="store_true", help="print what each (row, seed) would do (train, resume or "
                   "read back), then exit")
    return p


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The arguments, checked; ``args.data_dir_given`` says whether ``--data-dir`` was given (see :func:`main`)."""
    p = parser or build_parser()
    args = p.parse_args(argv)
    args.data_dir_given = args.data_dir is not None
    args.data_dir = args.data_dir if args.data_dir_given else DEFAULT_DATA_DIR
    if args.anchors is not None and args.anchors < FOLDS:  # 0 read as "no --anchors" and trained on the full data
        p.error(f"--anchors {args.anchors}: fold 0 of {FOLDS} grouped by anchor needs {FOLDS} anchors or more")
    if args.quick:
        args.epochs, args.seeds = args.epochs or 1.0, args.seeds or 1
        args.rows = args.rows or QUICK_ROWS
        args.only = args.only or list(QUICK_ONLY)
    args.epochs, args.seeds = args.epochs or 3.0, args.seeds or 2
    args.model = args.model or default_model()
    if args.docs is None:
        args.docs = "-" if args.quick else str(DEFAULT_DOCS)
    try:
        args.options = row_options(args.combo, args.ema_decay, args.row)
    except ValueError as err:
        p.error(str(err))
    known = [*args.options, NOTEBOOK]
    try:
        args.ensembles = parse_ensembles(args.ensemble, known)
    except ValueError as err:
        p.error(str(err))
    args.views = dict(args.views)
    for name, row in args.views.items():
        if name in known or name in args.ensembles or row not in args.options:
            p.error(f"--views {name} {row}: give a new name and a row that trains (rows: {', '.join(args.options)})")
    for flag, names in (("--only", args.only), ("--versus", args.versus)):
        unknown = [n for n in names or [] if n not in known and n not in args.ensembles and n not in args.views]
        if unknown:
            p.error(f"{flag}: unknown row(s) {', '.join(unknown)}; rows: {', '.join(known)}")
    wanted = known if args.only is None else [n for n in args.only if n not in args.ensembles and n not in args.views]
    members = [m for ms in [*args.ensembles.values(), *([r] for r in args.views.values())] for m in ms]
    args.wanted = list(dict.fromkeys([*wanted, *members]))  # run in the order given, then the members not named
    needs = [*((f"a member of --ensemble {e}", ms) for e, ms in args.ensembles.items()),
             *((f"the model of --views {v}", [r]) for v, r in args.views.items())]
    args.added = {m: why for why, ms in reversed(needs) for m in ms if m not in wanted}
    return args


def parse_ensembles(items: Sequence[Sequence[str]], known: Sequence[str]) -> dict[str, list[str]]:
    """``--ensemble NAME ROW ROW ...`` arguments as ``{name: [rows]}``; a ValueError says which one is wrong."""
    out: dict[str, list[str]] = {}
    for name, *members in items:
        if name in known or name in out:
            raise ValueError(f"--ensemble {name}: that name is taken by a row; give the ensemble its own name")
        if len(set(members)) < 2:
            raise ValueError(f"--ensemble {name}: needs two different rows or more, got {' '.join(members) or 'none'}")
        unknown = [m for m in members if m not in known]
        if unknown:
            raise ValueError(f"--ensemble {name}: unknown row(s) {', '.join(unknown)}; rows: {', '.join(known)} "
                             "(define your own with --row)")
        out[name] = list(dict.fromkeys(members))
    return out


def model_tag(model: str) -> str:
    """A short name of the model for folder names and the table (the package's for ``.../package/model``)."""
    path = Path(model)
    return path.parent.name if path.name == "model" and path.parent.name else path.name


def work_tag(args: argparse.Namespace) -> str:
    """The work folder's name: what the rows' data and budget follow (model, epochs, rows, anchors and their seed).

    Data other than the default folder adds a hash of its path, so that runs on two copies or versions of PPPM never
    share a folder (the notebook row's cached predictions included).
    """
    tag = f"{model_tag(args.model)}_{args.epochs:g}ep_{args.rows or 'all'}rows"
    if args.anchors is not None:  # --first-seed draws the anchors
        tag += f"_{args.anchors}anchors_seed{args.first_seed}"
    if Path(args.data_dir).expanduser().resolve() != DEFAULT_DATA_DIR.resolve():
        tag += f"_data{path_hash(args.data_dir)}"
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    if not args.list and not (args.data_dir / "train.csv").is_file():
        if args.data_dir_given:  # a mistyped path: an error, not a clean skip that trained nothing
            parser.error(f"--data-dir {args.data_dir}: no train.csv there (see ../shared/data/pppm/README.md)")
        print(f"skipped: no PPPM train.csv in {args.data_dir}; give --data-dir (see ../shared/data/pppm/README.md)")
        return 0
    data_dir, described = args.data_dir, f"{args.rows:,} random rows of train.csv" if args.rows else None
    if args.anchors is not None and not args.list:
        data_dir, count = anchor_subset(args.data_dir, args.anchors, args.first_seed)
        described = f"{count:,} rows of {args.anchors} anchors drawn at random (seed {args.first_seed}), whole"
    base = baseline_options(data_dir, args.model, args.epochs, args.rows)
    if args.list:
        for name, options in args.options.items():
            print(f"{name:<9} {describe(options)}")
        for name, members in args.ensembles.items():
            print(f"{name:<9} ensemble: standardised mean of {' + '.join(members)}")
        print(f"{NOTEBOOK:<9} the notebook recipe, batch {NOTEBOOK_BATCH_SIZE}\nbaseline  {describe(base)}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = {n: o for n, o in args.options.items() if n in args.wanted}
    check_rows(base, rows)
    work = args.work_dir / work_tag(args)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    command = " ".join(["python benchmarks/pppm_quality.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    meta = {"command": command, "model": model_tag(args.model), "epochs": args.epochs, "combo": args.combo,
            "rows": described or "every row of train.csv",
            "machine": f"{os.cpu_count()} CPUs ({platform.machine()}, {platform.system()})"
                       + (f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""),
            "bootstrap": args.bootstrap, "work_dir": str(work),
            "data_dir": str(data_dir)}
    steps = plan(args.wanted, seeds, work, args.added)
    print("plan:\n" + "\n".join(f"  {line}" for line in steps), flush=True)
    if args.plan:
        return 0
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    order = [*args.options, *args.ensembles, *args.views, NOTEBOOK]
    for seed in seeds:
        for name in args.wanted:
            if name == NOTEBOOK:
                results.append(run_notebook(base, seed, work / NOTEBOOK, work / BASELINE / f"seed_{seed}"))
                continue
            cfg = row_config(base, rows[name], seed, work / name / f"seed_{seed}")
            results.append(run_row(name, cfg, checked_options(cfg, base, rows[name])))
        for name, members in args.ensembles.items():
            record = run_ensemble(name, members, seed, results, work / "ensembles" / name)
            if record is not None:
                results.append(record)
        for name, row in args.views.items():
            results.append(run_views(name, row, seed, results, work / "views" / name))
        report(results, order, args, meta, work, final=seed == seeds[-1])
    print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


def plan(names: Sequence[str], seeds: Sequence[int], work: Path, added: Mapping[str, str]) -> list[str]:
    """One line per (row, seed): whether it trains, resumes or is read back from ``work``, and why it runs.

    ``added`` maps a row that runs only because an ``--ensemble`` or ``--views`` row needs it to why (``a member of
    --ensemble blend``), so that a member trained for another row (possibly for an hour) is never a surprise.
    """
    actions = {"trained": "train", "resumed": "resume", "reused": "read back"}
    lines = []
    for seed in seeds:
        for name in names:
            if name == NOTEBOOK:
                done = all(f.is_file() for f in notebook_files(work / NOTEBOOK, seed))
                action = "read back" if done else "train"
            else:
                action = actions[row_status(work / name / f"seed_{seed}")]
            why = f" ({added[name]}, not in --only)" if name in added else ""
            lines.append(f"{name}, seed {seed}: {action}{why}")
    return lines


def report(results: list[dict[str, Any]], order: Sequence[str], args: argparse.Namespace, meta: dict[str, Any],
           work: Path, final: bool) -> None:
    """Print the table and write the JSON (and the markdown, when asked) of what is done so far."""
    meta = {**meta, "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "precision": precision_label(results)}  # the runs', not this machine's
    summary = summarise(results, order)
    versus = versus_rows(args.versus, len(summary["seeds"]))
    anchors = None
    if args.bootstrap_by == "anchor" and not args.rows:  # with --rows, run rows are not the file's rows
        anchors = pd.read_csv(Path(meta["data_dir"]) / "train.csv", dtype=str, keep_default_na=False)["anchor"]
        anchors = anchors.to_numpy()
    tests = (significance(results, summary["best"], versus, args.bootstrap, anchors=anchors,
                          rows_per_seed=bool(args.rows))
             if summary["best"] and versus else None)
    targets = check_targets(summary, args.epochs, full_data=args.rows is None and args.anchors is None)
    text = markdown(summary, meta, args.options, tests, targets)
    print("\n" + text, flush=True)
    atomic_write_json(work / "results.json", {"meta": meta, "results": results, "summary": summary,
                                              "significance": tests, "targets": targets, "final": final})
    if args.docs != "-":
        path = Path(args.docs)
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        atomic_write_text(path, merge_docs(old, text))  # a temporary file, then renamed
        print(f"written: {args.docs}")


DOCS_HEADER = ("# PPPM recipe techniques: fold-0 ablation\n\nWritten by `benchmarks/pppm_quality.py` (see its "
               "docstring for the rows, the notebook reference and the tests).\n")


def merge_docs(old: str, section: str) -> str:
    """The docs file with this run's ``section`` in it, every other section (and its notes) kept as it was.

    Sections start at ``## `` headings. The one from an earlier run of the same command (its ``- command:`` line)
    is replaced, notes and all, since they described its figures; a new command's section goes first.
    """
    preamble, *sections = re.split(r"(?m)^(?=## )", old) if old else [DOCS_HEADER]
    command = next((line for line in section.splitlines() if line.startswith("- command: ")), None)
    same = [i for i, part in enumerate(sections) if command is not None and command in part.splitlines()]
    if same:
        sections[same[0]] = section.rstrip("\n") + "\n\n"
    else:
        sections.insert(0, section.rstrip("\n") + "\n\n")
    return (preamble.rstrip("\n") + "\n\n" + "".join(sections)).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.exit(main())
