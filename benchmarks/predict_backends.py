"""Prediction rows/s of every backend and precision of ``attnpool predict``, side by side on the same rows.

One trained run (``--run``: the ``--output-dir`` of ``attnpool train``; by default a one-epoch MiniLM run on
``--train-rows`` random PPPM rows is trained first into ``--work-dir``, in a folder named after the rows and a hash of
``--data-dir``, and reused by later calls of the same two) predicts the same held-out PPPM rows with:

* ``torch fp32`` (the reference), ``torch bf16`` (``torch.autocast``; on CPUs with native bf16 it is faster),
* ``onnx fp32`` (ONNX Runtime on the graph ``predict --backend onnx`` exports into the run),
* ``onnx int8`` (dynamic quantization of that graph, ``--quantize int8``).

The ONNX paths need the ``onnx`` extra (``pip install 'attnpool[onnx]'``): without it they are left out, with a note,
before anything trains. Without ``train.csv`` in the default ``--data-dir`` (``../shared/data/pppm``) it prints
``skipped: ...`` and exits 0; a ``--data-dir`` given without one is a usage error (exit 2: a mistyped path must not
pass as a clean skip).

Held-out rows: ``--rows`` rows of ``train.csv`` drawn at random (seed 123) from those no trained fold model of the run
learned from: the rows outside the run's own (its ``--limit`` draw, read back through ``load_task`` with the run's
config), and, when a single fold is trained, that fold's validation rows. Their ``Pearson (labels)`` is thus a
held-out score.

Each is timed on the whole call of its ensemble's ``scores`` over the rows (tokenisation excluded: it is the same for
all), after an untimed warm-up, ``--repeats`` times alternating between the paths; the median is reported. Printed
per path: rows/s, the ratio to torch fp32, the Pearson correlation of its predictions with the labels, and the
largest |difference| and the Pearson correlation with the torch fp32 predictions. Threads: torch and ONNX
Runtime use their defaults (one per physical core); run it on a quiet machine.

``--long`` checks long inputs (sentence-transformers' docs report ONNX slower than torch on long texts): each row's
``target`` is followed by other rows' anchor and target phrases (the next rows of the sample, in turn) until the
row's anchor and target phrases hold ``--long-tokens`` tokens (default 470; with the special tokens and the
context title about 490-510, the count is printed), and the run's ``max_length`` is raised to
512 for these rows (MiniLM's limit). The labels then belong to texts padded with unrelated phrases, so ``Pearson
(labels)`` is low; the columns against torch fp32 are what compares the paths. Defaults with ``--long``: 256 rows,
batches of 16: at 64 rows of 512 tokens a single prediction pass peaked at 5.5 GB resident with ONNX Runtime fp32
(5.8 GB int8) against 1.2 GB with torch, and this process, holding both sessions, was killed at 17 GB on a 24 GB
machine. Memory: after the timing, each path runs once more in a fresh process of its own (this script, loading only
that path's models, one pass over the same rows at the same batch size), and its peak resident memory (``VmHWM``,
the high-water mark of that process alone) is printed per path; ``--no-memory`` leaves this out.

Usage::

    python benchmarks/predict_backends.py                       # trains a small MiniLM run on PPPM first
    python benchmarks/predict_backends.py --run runs/pppm --rows 2048
    python benchmarks/predict_backends.py --run runs/pppm --long  # ~500-token inputs, max_length 512
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import attnpool
from attnpool.allocator import own_peak_bytes
from attnpool.config import default_model
from attnpool.data.prediction import PredictionInputs
from attnpool.data.task import load_task
from attnpool.prediction.engine import FoldEnsemble
from attnpool.runs import Run
from attnpool.runs.files import atomic_write
from pppm_throughput import ONNX_MODULES, cpu_model, missing_modules, predict_all

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pppm"
LONG_MAX_LENGTH = 512  # MiniLM's (and BERT's) position limit
HELD_OUT_SEED = 123


def _train(work: Path, data_dir: Path, rows: int) -> Path:
    """The run of ``rows`` random rows of ``data_dir`` in ``work``: trained once, then reused (after a check)."""
    data_dir = data_dir.expanduser().resolve()
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:8]
    run = work / f"run_{rows}rows_{digest}"
    if (run / "run.json").is_file() and Run(run).trained_folds():
        cfg = Run(run).config()
        if (cfg.limit, Path(cfg.data_dir or "").resolve()) != (rows, data_dir):
            raise SystemExit(f"{run} holds a run of {cfg.limit} rows of {cfg.data_dir}, not {rows} of {data_dir}; "
                             "delete it")
        return run
    attnpool.train(preset="pppm", data_dir=str(data_dir), model=default_model(), folds=4, only_folds=[0],
                   limit=rows, epochs=1, output_dir=str(run), overwrite=True)
    return run


def held_out(run: Run, data_dir: Path, rows: int) -> pd.DataFrame:
    """``rows`` rows of ``data_dir``'s ``train.csv``, drawn at random, that no trained fold of ``run`` learned from.

    The run's rows are those of its config's data (its ``limit`` draw, as ``train`` drew them; from ``data_dir`` when
    the run's own data folder is not here); a row is held out when it is not one of them, or when it validates the
    run's only trained fold. Rows are matched by ``id``.
    """
    frame = pd.read_csv(data_dir / "train.csv", dtype=str)
    cfg = run.config()
    if not (Path(cfg.data_dir or "") / "train.csv").is_file():
        cfg.data_dir = str(data_dir)
    task = load_task(cfg, log=logging.getLogger("attnpool"))  # the run's rows, drawn as train drew them
    ids = task.frame["id"].astype(str).to_numpy()
    folds = run.read_fold_assignment()
    trained = run.trained_folds()
    if folds is None or len(folds) != len(ids):
        raise SystemExit(f"{run.path}: its folds.csv does not match the rows of its data ({cfg.data_dir})")
    learned = set(ids[folds != trained[0]]) if len(trained) == 1 else set(ids)
    candidates = frame[~frame["id"].astype(str).isin(learned)]
    if candidates.empty:
        raise SystemExit(f"every row of the data is a training row of {run.path}'s folds {trained}: no held-out rows")
    if len(candidates) < rows:
        print(f"note: {len(candidates)} held-out rows, fewer than --rows {rows}")
    return candidates.sample(n=min(rows, len(candidates)), random_state=HELD_OUT_SEED).reset_index(drop=True)


def lengthen(frame: pd.DataFrame, tokenizer, tokens: int) -> pd.DataFrame:
    """``frame`` with each ``target`` followed by the next rows' anchor and target phrases until ~``tokens`` tokens.

    The length is counted on the phrases alone (without special tokens and the context title), so a text ends a
    few tokens above ``tokens``; ``max_length`` truncates what passes it. Fewer rows than needed: they repeat.
    """
    phrases = (frame["anchor"].astype(str) + " " + frame["target"].astype(str)).tolist()
    counts = [len(ids) for ids in tokenizer(phrases, add_special_tokens=False)["input_ids"]]
    if not any(counts):
        raise SystemExit(f"--long: the {len(frame)} rows have no anchor or target tokens to lengthen the texts with")
    targets = []
    for i, target in enumerate(frame["target"].astype(str)):
        parts, total, j = [target], counts[i], i
        while total < tokens:
            j = (j + 1) % len(frame)
            parts.append(phrases[j])
            total += counts[j]
        targets.append(" ".join(parts))
    return frame.assign(target=targets)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=None, help="a trained run (default: train one into --work-dir)")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/attnpool_predict_backends"))
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the PPPM folder (train.csv, cpc_texts.csv; default: ../shared/data/pppm)")
    parser.add_argument("--train-rows", type=int, default=4000, help="rows of the run trained when --run is not given")
    parser.add_argument("--rows", type=int, default=None, help="held-out rows predicted (default 2048; --long: 256)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per forward pass (default 64; --long: 16)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", action="store_true", help="lengthen every text to ~--long-tokens, max_length 512")
    parser.add_argument("--long-tokens", type=int, default=470,
                        help="anchor and target tokens per text with --long (the template adds ~20: ~490-510 in all)")
    parser.add_argument("--no-memory", action="store_true",
                        help="do not measure each path's peak resident memory in a process of its own")
    # one path's memory, in a process of its own (see path_peaks)
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-sample", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The arguments; ``args.data_dir_given`` says whether ``--data-dir`` was given (see :func:`main`)."""
    args = (parser or build_parser()).parse_args(argv)
    args.data_dir_given = args.data_dir is not None
    args.data_dir = args.data_dir if args.data_dir_given else DATA
    if args.rows is None:
        args.rows = 256 if args.long else 2048
    if args.batch_size is None:  # 64 rows of 512 tokens: the two ONNX Runtime sessions' arenas held 17 GB here
        args.batch_size = 16 if args.long else 64
    if args.long and not 0 < args.long_tokens <= LONG_MAX_LENGTH:
        raise SystemExit(f"--long-tokens must be between 1 and {LONG_MAX_LENGTH}, got {args.long_tokens}")
    return args


PATHS = ("torch fp32", "torch bf16", "onnx fp32", "onnx int8")


def load_path(run: Run, name: str):
    """The ensemble of the prediction path ``name`` (one of :data:`PATHS`)."""
    if name.startswith("torch"):
        return FoldEnsemble.load(run)
    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    return OnnxFoldEnsemble.load(run, quantize="int8" if name == "onnx int8" else "none")


def path_scores(models, name: str, encodings, batch_size: int) -> np.ndarray:
    """The scores of path ``name`` (its ensemble ``models``) over ``encodings``."""
    if name.startswith("torch"):
        return models.scores(encodings, batch_size=batch_size, precision=name.split()[1])
    return models.scores(encodings, batch_size=batch_size)


def encode(run: Run, cfg, sample: Path, tokenizer, rows: int):
    """The encodings of the ``rows`` rows of ``sample``, as ``predict`` makes them."""
    inputs = PredictionInputs(cfg, run.info(), sample, tokenizer, log=logging.getLogger("attnpool"))
    return inputs.encode(next(iter(inputs.chunks(rows))))[1]


def memory_child(args: argparse.Namespace) -> int:
    """One pass of path ``args.memory_child`` over ``args.memory_sample``, alone in this process; prints its peak."""
    run = Run.open(args.run)
    cfg = run.config()
    if args.long:
        cfg.max_length = LONG_MAX_LENGTH
    models = load_path(run, args.memory_child)
    rows = len(pd.read_csv(args.memory_sample, dtype=str))
    encodings = encode(run, cfg, args.memory_sample, models.tokenizer, rows)
    path_scores(models, args.memory_child, encodings, args.batch_size)
    print(f"peak_bytes {own_peak_bytes()}", flush=True)
    return 0


def path_peaks(names: list[str], run: Run, sample: Path, args: argparse.Namespace) -> dict[str, float]:
    """Peak resident memory in bytes of each path, each measured in a fresh process that loads it alone."""
    peaks = {}
    for name in names:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", name, "--memory-sample", str(sample),
               "--run", str(run.path), "--batch-size", str(args.batch_size), *(["--long"] if args.long else [])]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        found = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("peak_bytes ")]
        if done.returncode != 0 or not found:
            raise SystemExit(f"the memory of {name} could not be measured (exit {done.returncode}):\n"
                             f"{(done.stdout + done.stderr)[-3000:]}")
        peaks[name] = int(found[0])
    return peaks


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    if args.memory_child is not None:
        if args.memory_child not in PATHS or args.run is None or args.memory_sample is None:
            parser.error(f"--memory-child takes one of {', '.join(PATHS)}, with --run and --memory-sample")
        return memory_child(args)
    if not (args.data_dir / "train.csv").is_file():
        if args.data_dir_given:  # a mistyped path: an error, not a clean skip that measured nothing
            parser.error(f"--data-dir {args.data_dir}: no train.csv there (see ../shared/data/pppm/README.md)")
        print(f"skipped: no PPPM train.csv in {args.data_dir} (give --data-dir: the benchmark needs real rows)")
        return 0
    onnx = not missing_modules(ONNX_MODULES)
    if not onnx:
        print(f"note: the ONNX paths are skipped: {', '.join(missing_modules(ONNX_MODULES))} not installed (pip "
              "install 'attnpool[onnx]')", flush=True)
    run = Run.open(args.run or _train(args.work_dir, args.data_dir, args.train_rows))
    cfg = run.config()
    frame = held_out(run, args.data_dir, args.rows)
    torch_models = FoldEnsemble.load(run)
    if args.long:
        frame = lengthen(frame, torch_models.tokenizer, args.long_tokens)
        cfg.max_length = LONG_MAX_LENGTH
    sample = args.work_dir / ("heldout_long.csv" if args.long else "heldout.csv")
    atomic_write(sample, lambda tmp: frame.to_csv(tmp, index=False))
    labels = frame["score"].astype(float).to_numpy()

    encodings = encode(run, cfg, sample, torch_models.tokenizer, len(frame))
    tokens = [len(ids) for ids in encodings["input_ids"]]
    paths = {
        "torch fp32": lambda: torch_models.scores(encodings, batch_size=args.batch_size, precision="fp32"),
        "torch bf16": lambda: torch_models.scores(encodings, batch_size=args.batch_size, precision="bf16"),
    }
    if onnx:
        from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

        onnx_fp32 = OnnxFoldEnsemble.load(run)
        onnx_int8 = OnnxFoldEnsemble.load(run, quantize="int8")
        paths["onnx fp32"] = lambda: onnx_fp32.scores(encodings, batch_size=args.batch_size)
        paths["onnx int8"] = lambda: onnx_int8.scores(encodings, batch_size=args.batch_size)

    rates, outputs = predict_all(paths, args.repeats)  # after a warm-up pass, whose predictions are compared
    reference, base = outputs["torch fp32"], rates["torch fp32"]
    print(f"{len(frame)} held-out PPPM rows (none a training row of the run)"
          f"{' lengthened (--long)' if args.long else ''}, tokens/row mean "
          f"{np.mean(tokens):.0f} (min {min(tokens)}, max {max(tokens)}; max_length {cfg.max_length}), batch "
          f"{args.batch_size}, run {run.path} (folds {run.trained_folds()}), median of {args.repeats}, "
          f"{torch.get_num_threads()} torch threads on {cpu_model()}")
    print("| path | rows/s | vs torch fp32 | Pearson (labels) | Pearson vs fp32 | max abs diff vs fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, out in outputs.items():
        rate = rates[name]
        print(f"| {name} | {rate:.{0 if rate >= 100 else 1}f} | {rate / base:.2f}x | "
              f"{np.corrcoef(out, labels)[0, 1]:.4f} | {np.corrcoef(out, reference)[0, 1]:.5f} | "
              f"{np.max(np.abs(out - reference)):.2e} |")
    if not args.no_memory:
        peaks = path_peaks(list(outputs), run, sample, args)
        print(f"peak resident memory, each path alone in a fresh process (load, one pass over the {len(frame)} rows "
              f"at batch {args.batch_size}): " + ", ".join(f"{name} {peak / 2**30:.2f} GB"
                                                         for name, peak in peaks.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
