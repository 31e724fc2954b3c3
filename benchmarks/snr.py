"""Accuracy of poolers against the share of signal vectors in a set: mean pooling collapses, attention holds.

The synthetic study of "Robust Noise Attenuation via Adaptive Pooling of Transformer Outputs" (Brothers, 2025,
arXiv:2506.09215), as a classification task (:mod:`attnpool.synthetic`): each set holds ``k`` signal vectors that
carry the class and ``N - k`` distractors; the paper's signal-to-noise ratio is ``k / N``. Every pooler is trained
with a linear classifier directly on the vectors, for each set size, signal count and seed, and tested on fresh
sets of the same task. The table prints test accuracy (mean +- std over seeds) next to two closed-form limits:
``mean bound``, the best any classifier of the set's mean can do, and ``oracle``, the best for the centroid of
the signal vectors (what a pooler that found them can reach).

Usage::

    .venv/bin/python benchmarks/snr.py                        # default sweep, about 2-3 minutes on 2 CPU cores
    .venv/bin/python benchmarks/snr.py --quick                # smoke test, seconds
    .venv/bin/python benchmarks/snr.py --poolers mean,attention --set-sizes 256 --num-signals 1,2,4,8 --seeds 0,1

It writes ``snr.csv`` (one row per run) and ``snr.png`` (accuracy against ``k / N``, log axis) to
``--output-dir`` (default ``runs/snr``). The runs are small, so one thread is the default: with the cores shared,
OpenMP threads waiting on each other made a run up to 100x slower than one thread.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

import attnpool
from attnpool.pooling import get_pooler_class
from attnpool.runs import atomic_write
from attnpool.synthetic import snr_sweep

DEFAULT_POOLERS = ("mean", "max", "attention", "gated_attention", "adaptive")
DEFAULT_SET_SIZES = (64, 256)
DEFAULT_NUM_SIGNALS = (1, 4, 16)
DEFAULT_SEEDS = (0, 1, 2)
# The sweep's size when neither given nor --quick, and --quick's (a few seconds).
DEFAULTS: dict[str, Any] = {"set_sizes": list(DEFAULT_SET_SIZES), "num_signals": list(DEFAULT_NUM_SIGNALS),
                            "seeds": list(DEFAULT_SEEDS), "num_train": 2048, "num_test": 1024, "epochs": 20}
QUICK: dict[str, Any] = {"set_sizes": [64], "num_signals": [1, 16], "seeds": [0], "num_train": 1024,
                         "num_test": 512, "epochs": 15}
# Scorer width of the MLP-scored poolers: the vectors have only --dim channels.
ATTN_SIZE = 16
MLP_SCORED = ("attention", "gated_attention", "multihead_attention")
# What "collapses" and "holds" mean in the verdict: accuracy at the rarest signal.
COLLAPSED_BELOW = 0.7
HOLDS_ABOVE = 0.9


def int_list(text: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``, non-negative integers only."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,4,16") from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r} holds a negative number")
    return values


def list_text(values: Any) -> str:
    """``[1, 4, 16]`` -> ``"1,4,16"``, as the flag takes it."""
    return ",".join(str(value) for value in values)


def mean_std(values: list[float]) -> str:
    """``"0.98+-0.01"``; the std is omitted for a single value."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.2f}+-{statistics.stdev(values):.2f}"


def summarise(rows: list[dict[str, Any]], poolers: list[str]) -> None:
    """Print accuracy and signal weight per (set size, signal count) and pooler, averaged over seeds."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["set_size"], row["num_signal"])].append(row)
    width = max(12, *(len(name) + 1 for name in poolers))
    print("\ntest accuracy, mean+-std over seeds (chance 0.50)")
    print(f"{'N':>5} {'k':>4} {'k/N':>8} {'mean bound':>11} {'oracle':>7}" + "".join(f"{p:>{width}}" for p in poolers))
    for (set_size, num_signal), group in sorted(groups.items(), key=lambda item: (item[0][1] / item[0][0], item[0])):
        by_pooler = defaultdict(list)
        for row in group:
            by_pooler[row["pooler"]].append(row["accuracy"])
        line = f"{set_size:>5} {num_signal:>4} {num_signal / set_size:>8.4f}"
        line += f" {statistics.mean(r['mean_bound'] for r in group):>11.3f}"
        line += f" {statistics.mean(r['signal_mean_bound'] for r in group):>7.3f}"
        print(line + "".join(f"{mean_std(by_pooler[p]):>{width}}" for p in poolers))

    weighted = [p for p in poolers if all(r["signal_weight"] is not None for r in rows if r["pooler"] == p)]
    if weighted:
        print(
            "\nshare of the pooling weight on the signal vectors, mean over seeds (mean pooling: k/L; about 0.5 in a "
            "run: the pooler\nfinds the signal of one class only and tells the other class by its absence)"
        )
        print(f"{'N':>5} {'k':>4}" + "".join(f"{p:>{width}}" for p in weighted))
        for (set_size, num_signal), group in sorted(groups.items(), key=lambda item: item[0][1] / item[0][0]):
            cells = [statistics.mean(r["signal_weight"] for r in group if r["pooler"] == p) for p in weighted]
            print(f"{set_size:>5} {num_signal:>4}" + "".join(f"{c:>{width}.3f}" for c in cells))


def verdict(rows: list[dict[str, Any]], poolers: list[str]) -> str:
    """One line from the numbers: accuracy at the rarest and at the most common signal, and whether the claim held."""
    fractions = sorted({(r["num_signal"] / r["set_size"], r["set_size"], r["num_signal"]) for r in rows})
    (_, rare_n, rare_k), (_, common_n, common_k) = fractions[0], fractions[-1]

    def accuracy(pooler: str, set_size: int, num_signal: int) -> float:
        values = [
            r["accuracy"]
            for r in rows
            if (r["pooler"], r["set_size"], r["num_signal"]) == (pooler, set_size, num_signal)
        ]
        return statistics.mean(values)

    rare = ", ".join(f"{p} {accuracy(p, rare_n, rare_k):.2f}" for p in poolers)
    common = ", ".join(f"{p} {accuracy(p, common_n, common_k):.2f}" for p in poolers)
    line = f"at k/N = {rare_k}/{rare_n}: {rare}\nat k/N = {common_k}/{common_n}: {common}"
    if "mean" in poolers and "attention" in poolers:
        mean_rare, attention_rare = accuracy("mean", rare_n, rare_k), accuracy("attention", rare_n, rare_k)
        holds = mean_rare < COLLAPSED_BELOW and attention_rare > HOLDS_ABOVE
        line += (
            f"\nclaim 'mean pooling collapses as the signal becomes rare while attention pooling holds': "
            f"{'HOLDS' if holds else 'NOT SHOWN'} (at {rare_k}/{rare_n} mean {mean_rare:.2f} < {COLLAPSED_BELOW}, "
            f"attention {attention_rare:.2f} > {HOLDS_ABOVE} required)"
        )
    return line


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """All rows, one per (pooler, set size, signal count, seed), written whole or not at all."""

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def plot(rows: list[dict[str, Any]], poolers: list[str], path: Path) -> None:
    """Accuracy against k/N (log axis), one panel per set size, with the two closed-form limits dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    set_sizes = sorted({r["set_size"] for r in rows})
    fig, axes = plt.subplots(1, len(set_sizes), figsize=(5 * len(set_sizes), 4), sharey=True, squeeze=False)
    for ax, set_size in zip(axes[0], set_sizes, strict=True):
        part = [r for r in rows if r["set_size"] == set_size]
        signals = sorted({r["num_signal"] for r in part})
        x = [k / set_size for k in signals]
        for pooler in poolers:
            accs = [[r["accuracy"] for r in part if r["pooler"] == pooler and r["num_signal"] == k] for k in signals]
            means = [statistics.mean(a) for a in accs]
            stds = [statistics.stdev(a) if len(a) > 1 else 0.0 for a in accs]
            ax.errorbar(x, means, yerr=stds, marker="o", capsize=3, label=pooler)
        for key, label in (("mean_bound", "bound of any mean classifier"), ("signal_mean_bound", "oracle centroid")):
            bound = [statistics.mean(r[key] for r in part if r["num_signal"] == k) for k in signals]
            ax.plot(x, bound, linestyle="--", color="grey" if key == "mean_bound" else "black", label=label)
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{k}/{set_size}" for k in signals])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("signal fraction k/N")
        ax.set_title(f"sets of up to N = {set_size} vectors")
        ax.axhline(0.5, color="lightgrey", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle("Pooling rare signal among distractors (Brothers, 2025, arXiv:2506.09215)")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--poolers", default=",".join(DEFAULT_POOLERS),
                        help=f"comma-separated pooler names (default: {','.join(DEFAULT_POOLERS)})")
    parser.add_argument("--set-sizes", type=int_list, default=None,
                        help=f"largest set sizes N (default: {list_text(DEFAULT_SET_SIZES)}; --quick: "
                        f"{list_text(QUICK['set_sizes'])})")
    parser.add_argument("--num-signals", type=int_list, default=None,
                        help=f"signal vectors k (default: {list_text(DEFAULT_NUM_SIGNALS)}; --quick: "
                        f"{list_text(QUICK['num_signals'])})")
    parser.add_argument("--seeds", type=int_list, default=None,
                        help=f"seeds of task, data and training (default: {list_text(DEFAULT_SEEDS)}; --quick: "
                        f"{list_text(QUICK['seeds'])})")
    parser.add_argument("--dim", type=int, default=16, help="vector size D (default: 16)")
    parser.add_argument("--strength", type=float, default=4.0, help="signal strength in noise std (default: 4)")
    parser.add_argument("--num-train", type=int, default=None,
                        help=f"training sets per task (default: {DEFAULTS['num_train']}; --quick: "
                        f"{QUICK['num_train']})")
    parser.add_argument("--num-test", type=int, default=None,
                        help=f"test sets per task (default: {DEFAULTS['num_test']}; --quick: {QUICK['num_test']})")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"training epochs (default: {DEFAULTS['epochs']}; --quick: {QUICK['epochs']})")
    parser.add_argument("--lr", type=float, default=1e-2, help="peak AdamW learning rate (default: 1e-2)")
    parser.add_argument("--batch-size", type=int, default=128, help="sets per step (default: 128)")
    parser.add_argument("--quick", action="store_true",
                        help="a few seconds: --set-sizes, --num-signals, --seeds, --num-train, --num-test and "
                        "--epochs take their --quick values (each unless given)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/snr"), help="where snr.csv and snr.png go")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1, see the docstring)")
    args = parser.parse_args(argv)

    for key, value in (QUICK if args.quick else DEFAULTS).items():  # --quick's values, each unless given
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.set_sizes or min(args.set_sizes) < 1 or not args.num_signals or min(args.num_signals) < 1:
        parser.error("--set-sizes and --num-signals must be positive integers")
    if not any(k <= n for k in args.num_signals for n in args.set_sizes):
        parser.error("every --num-signals value exceeds every --set-sizes value; nothing to run")
    try:  # validates and canonicalises the names
        poolers = [get_pooler_class(name.strip()).name for name in args.poolers.split(",")]
    except ValueError as err:
        parser.error(f"--poolers {args.poolers!r}: {err}; give comma-separated registered names, e.g. mean,attention")
    if args.threads < 1:
        parser.error(f"--threads must be a positive integer, got {args.threads}")
    torch.set_num_threads(args.threads)
    # Only the swept poolers: snr_sweep refuses options for a pooler it does not train.
    options = {name: {"attn_size": ATTN_SIZE} for name in poolers if name in MLP_SCORED}

    print(
        f"torch {torch.__version__}, attnpool {attnpool.__version__}, {args.threads} thread(s); poolers: "
        f"{', '.join(poolers)}\nD={args.dim}, strength={args.strength}, {args.num_train} train / {args.num_test} "
        f"test sets per task, {args.epochs} epochs, lr {args.lr}, seeds {args.seeds}; set lengths uniform in "
        f"[N/2, N], so k/L is up to twice k/N"
    )
    start = time.perf_counter()

    def progress(row: dict[str, Any]) -> None:
        weight = "" if row["signal_weight"] is None else f"  weight on signal {row['signal_weight']:.2f}"
        print(
            f"  N={row['set_size']:<4} k={row['num_signal']:<3} seed={row['seed']} {row['pooler']:<18} "
            f"acc {row['accuracy']:.3f}{weight}  ({row['seconds']:.1f} s)",
            flush=True,
        )

    rows = snr_sweep(
        poolers,
        args.set_sizes,
        args.num_signals,
        seeds=args.seeds,
        dim=args.dim,
        strength=args.strength,
        num_train=args.num_train,
        num_test=args.num_test,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        pooling_options=options,
        progress=progress,
    )
    summarise(rows, poolers)
    print("\n" + verdict(rows, poolers))

    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.output_dir / "snr.csv")
    written = [str(args.output_dir / "snr.csv")]
    if not args.no_plot:
        plot(rows, poolers, args.output_dir / "snr.png")
        written.append(str(args.output_dir / "snr.png"))
    print(f"\ntotal {time.perf_counter() - start:.0f} s; wrote {', '.join(written)}")


if __name__ == "__main__":
    main()
