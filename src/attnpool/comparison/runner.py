"""``compare``: train several poolers with the same recipe over paired seeds, and say which wins, with significance.

Layout of a comparison folder::

    OUT/
      compare_config.yaml        the shared recipe (everything but the pooler and the seed; its paths absolute)
      runs/<pooler>/seed_<S>/    one full train run per (pooler, seed), kept
      runs/<pooler>/seed_<S>.log its output;  seed_<S>.cost.json: wall time and peak memory of its process
      compare.md  compare.csv  compare.json  compare.png

Each (pooler, seed) run trains in a process of its own (:mod:`attnpool.comparison.worker`, through
:func:`attnpool.train`): a failure stays in its log, the peak memory of the process is the run's own, and an
interrupted or extended comparison only trains what is missing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import numbers
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from attnpool.comparison.saved_recipe import same_value, saved_paths
from attnpool.comparison.seeds import seed_list
from attnpool.comparison.specs import PoolerSpec, contenders, worker_imports
from attnpool.comparison.summary import CompareResult, run_score, summarise
from attnpool.config import TrainConfig, load_yaml
from attnpool.config_checks import check_overwrite_inputs
from attnpool.runs.files import atomic_write_json, atomic_write_text
from attnpool.runs.lock import LOCK_NAME, RunLock
from attnpool.runs.run import Run, RunError
from attnpool.tasks import primary_metric
from attnpool.training.saved_paths import PATH_OPTIONS, absolute_paths

logger = logging.getLogger("attnpool.comparison")

CONFIG_FILE = "compare_config.yaml"
# Exit statuses of a worker (attnpool.comparison.worker, which imports them: the runner never imports the worker, so
# that `python -m attnpool.comparison.worker` runs a module not yet imported by its package).
INCOMPLETE = 3  # the run left folds untrained (only_folds)
BAD_INPUT = 2  # bad data or options, said in one line, as the CLI does
# Options that differ between the runs of a comparison, or that say where and how to run rather than what.
PER_RUN_KEYS = ("pooling", "pooling_options", "seed", "output_dir", "overwrite", "resume", "only_folds", "report_to")


def _shared_recipe(cfg: TrainConfig) -> dict[str, Any]:
    values = cfg.to_dict()
    for key in PER_RUN_KEYS:
        values.pop(key, None)
    return values


def _refuse_foreign(out: Path) -> None:
    """Refuse a folder holding files but no comparison, or a file (before anything, the lock included, is written)."""
    if (file := next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)) is not None:
        where = f"--output-dir {out}" + (f": {file}" if file != out else "")
        raise RunError(f"{where} is a file, not a folder; choose another --output-dir")
    if out.is_dir() and any(p.name != LOCK_NAME for p in out.iterdir()) and not (out / CONFIG_FILE).is_file():
        raise RunError(f"{out} exists and is not an attnpool comparison (no {CONFIG_FILE}); choose another "
                       "--output-dir")


def _check_recipe(out: Path, cfg: TrainConfig, overwrite: bool, config_file: str | os.PathLike | None = None) -> None:
    """Save the shared recipe, or check that an existing comparison used the same one (``out`` is locked).

    Data paths and a local model folder are saved absolute (as a run saves them), so that the same file named
    otherwise (``data/x.csv``, ``./data/x.csv``, ``/home/me/data/x.csv``) is the same recipe, and the same name from
    another working directory, another file, is not. A recipe saved relative by an earlier attnpool is read as
    :func:`~attnpool.comparison.saved_recipe.saved_paths` says, and saved absolute once it matches. Another recipe
    replaces one whose runs all stopped before recording their run info, on bad options or data: there is none to
    pair with, nor to resume.

    ``overwrite`` first takes the lock of every run inside, as ``train --overwrite`` does of its run: a run another
    process is training (a worker left by a killed compare, a ``train --resume`` by hand) is refused, not deleted;
    so are this call's inputs inside ``out`` (``config_file``, the recipe read; the data; a local model), which
    would be deleted before they are read (:func:`~attnpool.config_checks.check_overwrite_inputs`).
    """
    path = out / CONFIG_FILE
    recipe = absolute_paths(_shared_recipe(cfg))
    if path.is_file() and overwrite:
        own = config_file is not None and Path(config_file).resolve() == path.resolve()  # read, and written anew
        check_overwrite_inputs(cfg, None if own else config_file, output_dir=out, folder="comparison folder")
        with contextlib.ExitStack() as held:  # all of them before anything is deleted; LockedError names the holder
            for run_dir in sorted(p for p in out.glob("runs/*/seed_*") if p.is_dir()):
                held.enter_context(Run(run_dir).lock("compare --overwrite"))
            for child in out.iterdir():
                if child.name != LOCK_NAME:  # the lock this process holds stays
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
    elif path.is_file():
        written = load_yaml(path)  # a field it lacks is one added to attnpool since: it ran at that field's default
        saved = saved_paths(out, {**_shared_recipe(TrainConfig()), **written})
        changed = sorted(k for k in set(saved) | set(recipe) if not same_value(k, saved.get(k), recipe.get(k)))
        if changed and (not (out / "runs").is_dir() or any(Run.is_run(d) for d in out.glob("runs/*/seed_*"))):
            detail = "; ".join(f"{k}: {saved.get(k)!r} -> {recipe.get(k)!r}" for k in changed[:6])
            raise RunError(f"{out} holds a comparison with another recipe ({detail}); its runs would not be paired "
                           "with new ones. Use another --output-dir, or --overwrite to start it again")
        upgraded = {k: saved[k] for k in PATH_OPTIONS if k in written and written[k] != saved[k]}
        if upgraded and not changed:  # saved relative by an earlier attnpool: absolute from now on, wherever run
            atomic_write_text(path, yaml.safe_dump({**written, **upgraded}, sort_keys=False))
        if not changed:
            return
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(recipe, sort_keys=False))


def _wanted_folds(run_dir: Path, only_folds: list[int] | None) -> bool:
    """Whether the run has finished the folds it was asked for (all of them, or ``only_folds``)."""
    run = Run(run_dir)
    if not run.has_metrics():
        return False
    metrics = run.metrics()
    if metrics.get("complete"):
        return True
    done = {f["fold"] for f in metrics.get("folds", [])}
    return only_folds is not None and set(only_folds) <= done


def _check_folds(out: Path, only_folds: list[int] | None, specs: list[PoolerSpec], seeds: list[int]) -> None:
    """Refuse, before anything trains, ``only_folds`` that would leave the runs of a seed with different folds.

    Their out-of-fold rows would not pair (a full comparison, then a new pooler with ``--only-folds 0``). Without
    ``only_folds`` every run is trained to the end, so all hold every fold.
    """
    if only_folds is None:
        return
    for seed in seeds:
        after: dict[frozenset[int], list[str]] = {}  # the folds each run will hold after this call
        for spec in specs:
            run_dir = out / "runs" / spec.slug / f"seed_{seed}"
            run = Run(run_dir)
            if _wanted_folds(run_dir, only_folds):  # kept as it is: the folds of its out-of-fold file
                folds = {f["fold"] for f in run.metrics()["folds"]}
            else:  # resumed (or started): the folds it finished, and those of this call
                folds = {f for f in run.trained_folds() if run.fold_done(f)} | set(only_folds)
            after.setdefault(frozenset(folds), []).append(spec.label)
        if len(after) > 1:
            groups = "; ".join(f"{', '.join(labels)}: fold(s) {', '.join(map(str, sorted(folds)))}"
                               for folds, labels in after.items())
            every = " ".join(map(str, sorted(set().union(*after))))
            raise RunError(f"--only-folds {' '.join(map(str, only_folds))}: the runs of seed {seed} in {out} would "
                           f"hold different folds ({groups}), so their out-of-fold rows would not be paired. Give "
                           f"--only-folds {every} (the folds of every run of the seed), or leave --only-folds out "
                           "to train every fold")


def _run_one(cfg: TrainConfig, spec: PoolerSpec, seed: int, run_dir: Path) -> dict[str, float]:
    """Train one (pooler, seed) run in a process of its own; returns its wall time and peak RSS (when known).

    The process is :mod:`attnpool.comparison.worker`, which calls :func:`attnpool.train` (not the console script)
    and writes its own peak memory to ``seed_<S>.peak`` (its ``VmHWM``: see :func:`~attnpool.allocator.own_peak_bytes`).
    """
    values = cfg.to_dict()
    values.update({"pooling": spec.pooling, "pooling_options": spec.options, "seed": seed,
                   "output_dir": str(run_dir), "overwrite": False, "resume": False})
    request = run_dir.parent / f"seed_{seed}.yaml"
    atomic_write_text(request, yaml.safe_dump(values, sort_keys=False))
    peak_path = run_dir.parent / f"seed_{seed}.peak"
    peak_path.unlink(missing_ok=True)  # an earlier call's: never this call's peak
    imports, env = worker_imports(spec)  # a user's poolers: their modules, imported by the worker first
    # absolute: a relative --output-dir such as "-cmp" would read as an option to the worker's parser
    command = [sys.executable, "-m", "attnpool.comparison.worker", str(request.absolute()), *imports, "--peak-file",
               str(peak_path.absolute())]
    if Run.is_run(run_dir):  # not a start that stopped before it recorded its run (bad data): never resumable
        command.append("--resume")
    log_path = run_dir.parent / f"seed_{seed}.log"
    started = time.perf_counter()
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        usage = None
        if hasattr(os, "wait4"):  # Unix: the process's rusage with its status; elsewhere its peak file alone
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
        else:
            process.wait()
    seconds = time.perf_counter() - started
    if process.returncode not in (0, INCOMPLETE) or not _wanted_folds(run_dir, cfg.only_folds):
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-8:]
        raise RunError(f"training {spec.label} with seed {seed} failed (exit {process.returncode}); the end of "
                       f"{log_path}:\n  " + "\n  ".join(tail))
    cost_path = run_dir.parent / f"seed_{seed}.cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.is_file() else {"wall_seconds": 0.0}
    cost["wall_seconds"] += seconds  # a resumed run adds its calls up
    # Without the worker's own figure, ru_maxrss (bytes on macOS, KiB on Linux), which on Linux also counts this
    # process's peak before the worker's exec: a caller that trained a model gave every run its memory. Without
    # either (no wait4: Windows) none is recorded: the run's memory reads NaN.
    peak = (int(peak_path.read_text()) if peak_path.is_file()
            else None if usage is None else usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024))
    if peak is not None:
        cost["peak_rss_bytes"] = max(cost.get("peak_rss_bytes", 0), peak)
    atomic_write_json(cost_path, cost)
    return cost


def _format_eta(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def compare(cfg: TrainConfig, poolings: list[str], seeds: int | list[int] = 3, *, baseline: str = "mean",
            output_dir: str | Path = "runs/compare", bootstrap: int = 1000, overwrite: bool = False,
            config_file: str | os.PathLike | None = None) -> CompareResult:
    """Train every pooler with every seed on the same recipe, then compare each to the baseline.

    For a given seed every pooler gets the same folds (or validation split), data order and recipe: the differences
    are paired. Runs already finished in ``output_dir`` are kept, so an interrupted call resumes and a call with
    one more pooler trains only that one.

    Args:
        cfg: The shared recipe (``attnpool train`` options); its ``pooling``, ``seed`` and ``output_dir`` are
            replaced per run.
        poolings: Pooler specs, ``NAME`` or ``NAME:key=value,...`` (e.g. ``attention:attn_size=128``); one string
            is one spec.
        seeds: The seeds, or their number (that many from ``cfg.seed`` on, at most 20: a larger single number is
            refused, as a seed meant as a count); each pooler is trained once per seed.
        baseline: The spec every other pooler is compared to; added to ``poolings`` when missing (a spec there of
            the same pooler and options, spelled otherwise as ``mean_pooling`` for ``mean``, is the baseline).
        output_dir: The comparison folder.
        bootstrap: Replicates of the paired bootstrap over examples (at least 1).
        overwrite: Delete an existing comparison in ``output_dir`` first (refused when one of this call's inputs,
            ``config_file`` included, lies inside it).
        config_file: The file ``cfg`` was read from, if any: with ``overwrite``, refused inside ``output_dir``.

    Returns:
        A :class:`CompareResult`; ``compare.md``, ``compare.csv``, ``compare.json`` and ``compare.png`` are written.

    Raises:
        RunError: A run failed (the end of its log is quoted), ``output_dir`` holds another comparison, or another
            process is writing it; ``overwrite`` would delete one of this call's inputs.
        ValueError: Bad pooler specs (values included; one pooler listed twice, however spelled), seeds or
            bootstrap, before anything trains.
    """
    seeds = seed_list(seeds, cfg.seed)
    specs, base = contenders(poolings, baseline)
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, numbers.Integral) or bootstrap < 1:
        raise ValueError(f"--bootstrap is a number of replicates and must be >= 1 (e.g. 1000), got {bootstrap!r}")
    if len(specs) < 2:
        raise ValueError("compare needs at least one pooler besides the baseline: --poolings attention ...")
    if cfg.pooling != TrainConfig.pooling or cfg.pooling_options:  # e.g. a train config reused: say they go
        logger.warning("compare: the recipe's pooling=%s and pooling_options=%s are replaced by each --poolings spec",
                       cfg.pooling, cfg.pooling_options)
    cfg.validate()
    for spec in specs:  # a bad value fails here, not in its run after the others trained
        spec.check(cfg)
        worker_imports(spec)  # a pooler of __main__, which no worker can import, is refused here
    out = Path(output_dir)
    _refuse_foreign(out)
    with RunLock(out, purpose="compare"):  # held while the runs are read back too: no --overwrite from elsewhere
        _check_recipe(out, cfg, overwrite, config_file)
        _check_folds(out, cfg.only_folds, specs, seeds)
        trained = _train_missing(out, cfg, specs, seeds)  # checks each seed's data after its first new run
        _check_same_data(out, specs, seeds)
        _check_seeds_same_data(out, cfg, specs, seeds)
        base_runs = [out / "runs" / base.slug / f"seed_{seed}" for seed in seeds]
        result = summarise(out, cfg.task, specs, base, seeds, bootstrap=bootstrap, split_seed=cfg.split_seed,
                           per_seed_rows=draws_rows_per_seed(cfg, *base_runs), valid_file=bool(cfg.valid_file))
    result.trained = trained
    return result


def _check_same_data(out: Path, specs: list[PoolerSpec], seeds: list[int], *, precisions: bool = True) -> None:
    """Refuse pairing runs of one seed that trained on different data (texts edited between two compare calls).

    The rows and labels are checked when the runs are paired, the texts by the runs' data fingerprints. Runs of one
    seed in different precisions (``precision: auto`` resumed elsewhere) are paired with a warning (``precisions``):
    bf16 against fp32 moves a score as much as a small pooler effect. Runs not started yet are left out.
    """
    for seed in seeds:
        trained_on: list[tuple[str, dict]] = []
        precision_of: dict[str, list[str]] = {}
        for spec in specs:
            run = Run(out / "runs" / spec.slug / f"seed_{seed}")
            if not run.has_info():
                continue
            info = run.info()
            if info.get("data_sha256") is not None:
                trained_on.append((spec.label, info))
            if info.get("precision") is not None:
                precision_of.setdefault(info["precision"], []).append(spec.label)
        if precisions and len(precision_of) > 1:
            groups = "; ".join(f"{', '.join(labels)}: {p}" for p, labels in precision_of.items())
            logger.warning("compare: the runs of seed %d trained in different precisions (%s), so their differences "
                           "mix the poolers' with the precisions'. Set --precision explicitly and re-run the "
                           "comparison with --overwrite to compare like with like", seed, groups)
        _refuse_mixed_data(trained_on, f"runs of seed {seed}", "pooler")


def _check_seeds_same_data(out: Path, cfg: TrainConfig, specs: list[PoolerSpec], seeds: list[int]) -> None:
    """Refuse seeds trained on different data (new seeds after a data edit: each is paired, but the data sets mix).

    Only a ``limit`` each seed draws (no ``split_seed``) gives seeds rows of their own. One run stands for its seed.
    """
    if cfg.limit is None or cfg.split_seed is not None:
        infos = [next((run.info() for spec in specs if (run := Run(out / "runs" / spec.slug / f"seed_{seed}"))
                       .has_info() and run.info().get("data_sha256")), None) for seed in seeds]
        _refuse_mixed_data([(f"seed {s}", i) for s, i in zip(seeds, infos, strict=True) if i], "seeds", "seed")


def _refuse_mixed_data(trained_on: list[tuple[str, dict]], whose: str, each: str) -> None:
    """A RunError when runs (label, info) trained on other rows and labels, or other texts where both say which."""
    # Runs from before 2026-12-06 recorded no texts fingerprint: they go with any texts of their rows.
    texts_of = {i["data_sha256"]: i["texts_sha256"] for _, i in reversed(trained_on) if i.get("texts_sha256")}
    groups: dict[tuple, list[str]] = {}
    for label, info in trained_on:
        key = (info["data_sha256"], info.get("texts_sha256") or texts_of.get(info["data_sha256"]))
        groups.setdefault(key, []).append(label)
    if len(groups) > 1:
        shown = "; ".join(", ".join(labels) for labels in groups.values())
        raise RunError(f"the {whose} trained on different data ({shown}: each group on its own): the data changed "
                       f"between compare calls. Re-run the comparison with --overwrite so that every {each} trains on "
                       "the same data")


def _train_missing(out: Path, cfg: TrainConfig, specs: list[PoolerSpec], seeds: list[int]) -> int:
    """Train the (pooler, seed) runs not finished in ``out``, seed by seed; returns how many were trained.

    Seeds with runs kept from earlier calls come first, and each seed's data is checked against them
    (:func:`_check_same_data`) as soon as its first new run finishes: after a data edit one run is trained, not all
    of them, before the comparison is refused.
    """
    jobs = [(spec, seed) for seed in seeds for spec in specs]  # seed-major: every finished seed is a complete pair
    todo = [(s, seed) for s, seed in jobs if not _wanted_folds(out / "runs" / s.slug / f"seed_{seed}", cfg.only_folds)]
    kept = {seed for s, seed in jobs if Run(out / "runs" / s.slug / f"seed_{seed}").has_info()}
    todo.sort(key=lambda job: job[1] not in kept)  # stable: still seed-major
    checked: set[int] = set()
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
        if seed not in checked:  # its first new run: on the data of the runs kept, or refused now
            checked.add(seed)
            _check_same_data(out, specs, [seed], precisions=False)
            _check_seeds_same_data(out, cfg, specs, seeds)
        score = run_score(run_dir, cfg.task)
        logger.info("compare: run %d of %d: %s, seed %d: %s %.4f in %s", i, len(todo), spec.label, seed,
                    primary_metric(cfg.task)[0], score, _format_eta(spent[-1]))
    return len(todo)


def draws_rows_per_seed(cfg: TrainConfig, *run_dirs: Path) -> bool:
    """Whether each seed validated on rows of its own: a ``limit`` drawn by the seed (no ``split_seed``).

    A ``valid_file`` is read whole, so its rows are the same examples in every seed (the limit draws training rows),
    and so is a file of no more rows than the limit. ``run_dirs``, one run per seed, say which: their data
    fingerprints differ between seeds only when the seeds drew. Without them (one seed, runs from before the
    fingerprints) the first run's row count decides, though a file of exactly ``limit`` rows then counts as drawn.
    """
    if cfg.limit is None or cfg.split_seed is not None or cfg.valid_file:
        return False
    fingerprints = [Run(run_dir).info().get("data_sha256") for run_dir in run_dirs if Run.is_run(run_dir)]
    if len(fingerprints) == len(run_dirs) > 1 and None not in fingerprints:
        return len(set(fingerprints)) > 1
    folds = Run(run_dirs[0]).read_fold_assignment() if run_dirs else None
    return folds is None or len(folds) >= cfg.limit  # fewer rows than the limit: nothing was drawn
