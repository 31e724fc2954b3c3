"""Writing tables in the formats attnpool reads (CSV, TSV, JSONL, Parquet), chosen by extension."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def write_table(frame, path: str | Path, like: str | Path | None = None, *, header: bool = True) -> None:
    """Write a frame as CSV, TSV, JSONL or Parquet, by the extension of ``like`` (or ``path``).

    ``header=False`` leaves out the header line of CSV/TSV, for parts appended to a file that has one. JSONL is
    UTF-8, one object per row, numbers in full: a probability of ``3e-11`` is not written as ``0.0``.
    """
    suffix = Path(like or path).suffix.lower()
    if suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False, header=header)
    elif suffix == ".jsonl":
        _write_jsonl(frame, Path(path))
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, header=header)


def _write_jsonl(frame: pd.DataFrame, path: Path) -> None:
    """``json.dumps`` per row: pandas' ``to_json`` rounds floats to 10 decimals (15 at most), so 3e-11 became 0.0."""
    names = [str(name) for name in frame.columns]
    # numpy floats keep their precision (float32); the rest as Python objects: Int64's 1 not 1.0, Timestamps
    columns = [column.to_numpy() if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f"
               else column.astype(object).to_numpy() for _, column in frame.items()]
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in zip(*columns, strict=True):
            record = dict(zip(names, map(_json_value, row), strict=True))
            f.write(json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n")


def _json_value(value: Any) -> Any:
    """A cell as a JSON value: missing, NaN and infinite as ``null`` (as pandas writes them), arrays as lists."""
    if isinstance(value, np.ndarray | list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, np.floating):
        value = float(str(value))  # the shortest digits of its own precision: a float32 0.1 stays 0.1
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, datetime.date | datetime.time | pd.Timedelta):
        return value.isoformat()
    return value if isinstance(value, str | int | float | bool) else str(value)
