"""Peak memory and throughput of ``attnpool predict`` on a 1,000,000-row file against a 100,000-row file.

Streaming prediction reads, tokenises and predicts ``--chunk-rows`` rows at a time and writes each chunk's output
as a part, so its memory should be bounded by the chunk size, not by the file: the peak resident set size (RSS)
for 1M rows should be about that for 100k rows. This script measures it.

Data: PPPM-like rows (``id, anchor, target, context``): anchors and targets drawn at random (seeded) from the real
``train.csv`` of ``--data-dir`` and their CPC context codes, new random 16-hex-digit ids; without the PPPM folder,
random phrases from a small word list and made-up codes. Written as CSV to a temporary folder with the
``cpc_texts.csv`` that the ``pppm`` preset joins in (the context title), so each row is tokenised from the preset's
template ``"{anchor} [SEP] {target} [SEP] {context_text}"``.

Run: nothing is trained. A run directory is written as ``attnpool train --preset pppm`` would leave it, with
``--folds`` fold models built around a tiny random BERT (``--hidden-size``, 2 layers; the real MiniLM tokenizer and
its 30,522-token vocabulary), so that the figures show the streaming machinery (reading, tokenising, padding,
writing) rather than an encoder's compute; a real encoder only adds time per row, not memory per row (its weights
and activations are per batch).

Measurement: each prediction is one ``attnpool.cli predict`` subprocess (run as ``python -m`` runs it, by
:data:`CHILD`), which writes at exit its own peak RSS (``attnpool.allocator.own_peak_bytes``: ``VmHWM`` of
``/proc/self/status``); not the ``ru_maxrss`` of ``os.wait4``, which on Linux also counts this script's own peak
before the child's ``exec`` (building the models and writing the 1M-row file: hundreds of MiB). Wall time is
measured around it (rows/s includes the start-up: imports and model loading, a few seconds). A 1,000-row file gives
the baseline (Python, torch, transformers, the models). ``--unchunked`` adds the 1M-row file in a single chunk
(``--chunk-rows 1000000``), i.e. the whole file in memory as before streaming, for contrast.

Usage::

    python benchmarks/predict_memory.py                     # 1k, 100k, 1M rows, chunks of 100k
    python benchmarks/predict_memory.py --unchunked         # plus 1M rows in one chunk
    python benchmarks/predict_memory.py --sizes 1000 20000 --chunk-rows 5000   # a quick look

A ``--workdir`` of an earlier call is reused: its run is written again, its rows files are read again (each written
whole or not at all, so an interrupted write is never reused). A rows file is named after everything that decides
its rows (:func:`rows_name`: the row count, ``--seed`` and where the phrases come from, ``--data-dir``'s PPPM or the
made-up ones), so that a call with another seed or data draws its own rows instead of measuring an earlier call's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

# The predict process: `attnpool.cli` as `python -m attnpool.cli` runs it (its arguments after argv[1]), and at
# exit its own peak resident memory in bytes (attnpool.allocator.own_peak_bytes: VmHWM, not the ru_maxrss that
# carries the parent's peak), written to the file argv[1]. Imported at exit, when the CLI has imported attnpool.
CHILD = '''\
import atexit, runpy, sys


def write_peak(path=sys.argv.pop(1)):
    from attnpool.allocator import own_peak_bytes

    with open(path, "w") as out:
        out.write(str(own_peak_bytes()))


atexit.register(write_peak)
runpy.run_module("attnpool.cli", run_name="__main__", alter_sys=True)
'''
DEFAULT_DATA_DIR = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pppm")
WORDS = ("adjustable gas flow drum valve photoconductor inorganic layer coating wheel sensor signal vehicle "
         "polymer bearing housing circuit optical fiber member locking seal pump motor ring plate").split()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000], help="rows of each file")
    p.add_argument("--chunk-rows", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--folds", type=int, default=2, help="fold models in the run (all predict every row)")
    p.add_argument("--hidden-size", type=int, default=32, help="of the tiny random encoder")
    p.add_argument("--threads", type=int, default=1,
                   help="OMP_NUM_THREADS of the predict processes (default 1: tiny ops lose to thread sync)")
    p.add_argument("--unchunked", action="store_true", help="also predict the largest file in one chunk")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="PPPM folder (train.csv, cpc_texts.csv)")
    p.add_argument("--workdir", default=None, help="where to write files (default: a temporary folder, deleted)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def has_pppm(data_dir: str | Path) -> bool:
    """Whether ``data_dir`` holds the PPPM files the rows are drawn from (else the phrases are made up)."""
    return (Path(data_dir) / "train.csv").is_file() and (Path(data_dir) / "cpc_texts.csv").is_file()


def rows_name(rows: int, seed: int, data_dir: str | Path) -> str:
    """The rows file's name, of every option that decides its content: ``rows_{rows}_seed{seed}_{source}.csv``.

    A reused ``--workdir`` must never hand one call's rows to another: a second call with another ``--seed`` (or
    ``--data-dir``) measured the first one's rows. The source is ``pppm`` and a hash of the resolved ``data_dir``
    when the phrases are drawn from its PPPM files, ``madeup`` when they are made up (they follow the seed alone).
    """
    if has_pppm(data_dir):
        source = "pppm" + hashlib.sha256(str(Path(data_dir).expanduser().resolve()).encode()).hexdigest()[:8]
    else:
        source = "madeup"
    return f"rows_{rows}_seed{seed}_{source}.csv"


def pppm_source(data_dir: str, rng: np.random.Generator):
    """``(anchors, targets, contexts, cpc_frame)``: the real PPPM phrases and titles when present, else made up."""
    root = Path(data_dir)
    if has_pppm(root):
        train = pd.read_csv(root / "train.csv", dtype=str, keep_default_na=False)
        cpc = pd.read_csv(root / "cpc_texts.csv", dtype=str, keep_default_na=False)
        return train["anchor"].to_numpy(), train["target"].to_numpy(), train["context"].to_numpy(), cpc
    print(f"(no PPPM data in {root}: made-up phrases)")
    phrases = np.array([" ".join(rng.choice(WORDS, size=rng.integers(1, 5))) for _ in range(5000)])
    codes = np.array([f"{c}{i:02d}" for c in "ABCDEFGH" for i in range(1, 11)])
    cpc = pd.DataFrame({"context": codes, "text": [" ".join(rng.choice(WORDS, size=8)).upper() for _ in codes]})
    return phrases, phrases[::-1].copy(), rng.choice(codes, size=len(phrases)), cpc


def write_rows(path: Path, rows: int, source, rng: np.random.Generator) -> None:
    """``rows`` random rows as a CSV at ``path``, written whole or not at all (atomically).

    :func:`main` reuses the file of an earlier call, so an interrupted write (a 1M-row file takes a while) must leave
    no half file under its name.
    """
    from attnpool.runs.files import atomic_write

    anchors, targets, contexts, _ = source
    i, j = rng.integers(0, len(anchors), rows), rng.integers(0, len(targets), rows)
    ids = [f"{v:016x}" for v in rng.integers(0, 2**63, rows, dtype=np.int64)]
    frame = pd.DataFrame({"id": ids, "anchor": anchors[i], "target": targets[j], "context": contexts[i]})
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


def build_run(folder: Path, data_dir: Path, folds: int, hidden_size: int) -> Path:
    """A run directory as ``attnpool train --preset pppm`` leaves it, with random tiny fold models."""
    import torch
    from transformers import AutoModel, AutoTokenizer, BertConfig

    from attnpool.config import TrainConfig, default_model
    from attnpool.data.task import apply_preset
    from attnpool.model import AttnPoolForSequenceClassification
    from attnpool.runs import Run

    tokenizer = AutoTokenizer.from_pretrained(default_model())
    encoder = folder / "encoder"
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden_size, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=2 * hidden_size, max_position_embeddings=128)
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    cfg = apply_preset(TrainConfig(preset="pppm", data_dir=str(data_dir), model=str(encoder), folds=folds,
                                   max_length=64, pooling_options={"attn_size": 16}))
    run = Run.create(folder / "run", overwrite=True).path  # a --workdir of an earlier call: its run, written again
    Run(run).write_config(cfg.to_dict())
    Run(run).write_info({"task": "regression", "classes": None, "label": "score", "id_col": "id",
                         "num_folds": folds})
    for fold in range(folds):
        torch.manual_seed(fold)
        model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention",
                                                               pooling_options={"attn_size": 16},
                                                               output_activation="sigmoid")
        model.save_pretrained(run / f"fold_{fold}" / "model", tokenizer=tokenizer)
        (run / f"fold_{fold}" / "metrics.json").write_text(json.dumps({"pearson": 0.5}))
    return run


def measure(run: Path, data: Path, out: Path, chunk_rows: int, args: argparse.Namespace,
            log: Path) -> tuple[float, float]:
    """``(peak RSS in MiB, wall seconds)`` of one ``attnpool predict`` subprocess, its own peak (see :data:`CHILD`)."""
    peak_path = log.with_suffix(".peak")
    peak_path.unlink(missing_ok=True)  # an earlier call's
    cmd = [sys.executable, "-c", CHILD, str(peak_path), "predict", "--run", str(run), "--input", str(data), "--output",
           str(out), "--chunk-rows", str(chunk_rows), "--batch-size", str(args.batch_size), "--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_MININTERVAL": "10", "OMP_NUM_THREADS": str(args.threads)}
    with log.open("w") as f:
        start = time.perf_counter()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - start
    if code != 0 or not peak_path.is_file():
        sys.exit(f"attnpool predict failed (exit {code}):\n{log.read_text()[-3000:]}")
    return int(peak_path.read_text()) / 2**20, wall


def main() -> None:
    args = parse_args()
    import torch

    import attnpool

    folder = Path(args.workdir or tempfile.mkdtemp(prefix="attnpool-predict-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        rng = np.random.default_rng(args.seed)
        source = pppm_source(args.data_dir, rng)
        data_dir = folder / "pppm"
        data_dir.mkdir(exist_ok=True)
        source[3].to_csv(data_dir / "cpc_texts.csv", index=False)
        run = build_run(folder, data_dir, args.folds, args.hidden_size)
        print(f"attnpool {attnpool.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs; run: {args.folds} "
              f"folds of a random BERT (2 layers, hidden {args.hidden_size}, MiniLM tokenizer), batch "
              f"{args.batch_size}, device cpu, {args.threads} thread(s)")
        jobs = [(rows, args.chunk_rows) for rows in sorted(args.sizes)]
        if args.unchunked:
            jobs.append((max(args.sizes), max(args.sizes)))
        results = []
        for rows, chunk_rows in jobs:
            data = folder / rows_name(rows, args.seed, args.data_dir)  # another seed or data: other rows, other file
            if not data.exists():
                start = time.perf_counter()
                write_rows(data, rows, source, np.random.default_rng(args.seed + rows))
                print(f"wrote {data.name}: {rows:,} rows, {data.stat().st_size / 2**20:.1f} MiB "
                      f"({time.perf_counter() - start:.1f} s)")
            out = folder / f"pred_{rows}_{chunk_rows}.csv"
            peak, wall = measure(run, data, out, chunk_rows, args, folder / f"log_{rows}_{chunk_rows}.txt")
            written = sum(1 for _ in out.open("rb")) - 1
            assert written == rows, f"{out} has {written} rows, expected {rows}"
            results.append((rows, chunk_rows, peak, wall))
            print(f"  {rows:>9,} rows, chunks of {chunk_rows:>9,}: peak RSS {peak:7.0f} MiB, {wall:6.1f} s, "
                  f"{rows / wall:8,.0f} rows/s")
            out.unlink()
        print()
        print("| rows | chunk rows | peak RSS (MiB) | wall (s) | rows/s |")
        print("|---:|---:|---:|---:|---:|")
        for rows, chunk_rows, peak, wall in results:
            print(f"| {rows:,} | {chunk_rows:,} | {peak:.0f} | {wall:.1f} | {rows / wall:,.0f} |")
        streamed = {rows: peak for rows, chunk_rows, peak, _ in results if chunk_rows == args.chunk_rows}
        if len(streamed) >= 2:
            small, large = sorted(streamed)[-2:]
            print(f"\npeak RSS {large:,} rows / {small:,} rows (chunks of {args.chunk_rows:,}): "
                  f"{streamed[large] / streamed[small]:.2f}x")
    finally:
        if args.workdir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
