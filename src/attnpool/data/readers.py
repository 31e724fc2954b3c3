"""Read a table (CSV, TSV, JSONL, Parquet) into a ``pandas.DataFrame``, with errors that say how to fix the file.

Text stays text: ids such as ``"0001"`` are never turned into ``1``, and words such as ``"NA"`` or ``"null"`` are
never turned into missing values (only an empty field is missing). A CSV/TSV column becomes numeric only when
every non-empty value is written as a plain number without leading zeros (``"0.5"``, ``"-3"``, ``"1e-3"``); JSONL
and Parquet keep the types the file stores.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.data.errors import DataError

SUPPORTED_EXTENSIONS = (".csv", ".tsv", ".jsonl", ".parquet")

# Numbers as written by people and by pandas' `to_csv`: no leading zeros (those are ids or codes, kept as text).
_INT = r"[+-]?(?:0|[1-9]\d*)"
_FLOAT = r"[+-]?(?:(?:0|[1-9]\d*)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SPECIAL = {"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
_INT64_MAX_DIGITS = 18  # shorter integers always fit in int64; longer ones are checked


def read_table(path: str | os.PathLike[str], *, text_columns: Iterable[str] = ()) -> pd.DataFrame:
    """Read a CSV, TSV, JSONL (one JSON object per line) or Parquet file, chosen by its extension.

    Args:
        path: The file. The extension (case ignored) picks the reader: ``.csv``, ``.tsv``, ``.jsonl``, ``.parquet``.
        text_columns: Columns always read as strings, even when every value looks like a number (ids such as
            ``"4112"`` or ``"1e5"`` in a small file); absent ones are ignored.

    Returns:
        The rows, with text columns as strings (missing values as ``NaN``) and numeric columns as numbers.

    Raises:
        DataError: The file is missing, has an unsupported extension, has no data rows, is not UTF-8 (the message
            gives the byte offset and line), a JSONL line is not a JSON object (the message gives the line), the
            CSV/TSV cannot be parsed, or Parquet support (``pyarrow``) is missing.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    keep_text = set(text_columns)
    if not p.exists():
        raise DataError(f"{p}: no such file (resolved to {p.resolve()}); check the path and the working directory")
    if p.is_dir():
        raise DataError(f"{p}: is a folder, not a file; give the path of a {'/'.join(SUPPORTED_EXTENSIONS)} file")
    if suffix not in SUPPORTED_EXTENSIONS:
        raise DataError(
            f"{p}: unsupported file extension {suffix or '(none)'!r}; supported extensions: "
            f"{', '.join(SUPPORTED_EXTENSIONS)}. Convert the file or rename it if it already is one of those formats"
        )
    if suffix == ".parquet":
        frame = _read_parquet(p)
    else:
        text = _read_utf8(p)
        if not text.strip():
            raise DataError(f"{p}: the file is empty; it needs a header line and at least one data row")
        if suffix == ".jsonl":
            frame = _read_jsonl(text, p, keep_text)
        else:
            frame = _read_delimited(text, p, "\t" if suffix == ".tsv" else ",", keep_text)
    for name in keep_text.intersection(frame.columns):
        if not pd.api.types.is_string_dtype(frame[name]):  # Parquet/JSONL types: write the values as text
            frame[name] = frame[name].map(lambda v: v if isinstance(v, str) or _missing(v) else str(v)).astype(str)
    if len(frame) == 0:
        columns = f" (columns: {', '.join(map(str, frame.columns))})" if len(frame.columns) else ""
        raise DataError(f"{p}: no data rows{columns}; the file needs at least one row below its header")
    return frame


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _read_utf8(path: Path) -> str:
    """The file's text; a UTF-8 byte-order mark is dropped."""
    raw = path.read_bytes()
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = bom + e.start
        line = raw.count(b"\n", 0, offset) + 1
        bad = raw[offset : bom + e.end].hex(" ")
        raise DataError(
            f"{path}: not valid UTF-8: byte(s) {bad} at byte offset {offset} (line {line}); re-encode the file as "
            "UTF-8, e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv` or, in pandas, "
            "`pd.read_csv(path, encoding='latin-1').to_csv(out, index=False)`"
        ) from None


def _read_delimited(text: str, path: Path, sep: str, text_columns: set[str]) -> pd.DataFrame:
    kind = "TSV" if sep == "\t" else "CSV"
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty; it needs a header line and at least one data row") from None
    except pd.errors.ParserError as e:
        raise DataError(
            f"{path}: could not be parsed as {kind}: {str(e).strip()}. Check the delimiter ({sep!r}) and the "
            "quoting: a field holding the delimiter, a double quote or a line break must be enclosed in double quotes"
        ) from None
    for name in frame.columns:
        if name in text_columns:
            continue
        numeric = _as_numeric(frame[name])
        if numeric is not None:
            frame[name] = numeric
    return frame


def _as_numeric(column: pd.Series) -> pd.Series | None:
    """The column as int64 or float64 when every non-empty value is written as a plain number, else ``None``."""
    values = column.dropna().str.strip()
    special = values.str.lower().isin(_SPECIAL)
    ordinary = values[~special]
    if ordinary.empty or not ordinary.str.fullmatch(_FLOAT).all():
        return None  # an all-empty column, or text: keep as strings
    if not special.any() and len(values) == len(column) and ordinary.str.fullmatch(_INT).all():
        if ordinary.str.lstrip("+-").str.len().max() > _INT64_MAX_DIGITS:
            as_int = [int(v) for v in ordinary]
            if min(as_int) < np.iinfo(np.int64).min or max(as_int) > np.iinfo(np.int64).max:
                return None  # would not fit in int64: keep the exact digits as text
        return values.astype(np.int64)
    out = pd.Series(np.nan, index=column.index, dtype=np.float64)
    out[values.index] = values.astype(np.float64)
    return out


def _read_jsonl(text: str, path: Path, text_columns: set[str]) -> pd.DataFrame:
    records = []
    # Split on "\n" only: `str.splitlines` would also split on U+2028 and friends, which JSON strings may hold.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path}: line {lineno} is not valid JSON ({e.msg} at column {e.colno}); a .jsonl file holds one "
                "JSON object per line (a file holding one JSON array must be converted first, e.g. "
                "`pd.read_json(path).to_json(out, orient='records', lines=True)`)"
            ) from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: line {lineno} holds a JSON {type(record).__name__}, not an object; a .jsonl file holds one "
                'JSON object per line, e.g. {"text": "...", "label": 1}'
            )
        for name in text_columns.intersection(record):
            value = record[name]
            if value is not None and not isinstance(value, str):
                record[name] = json.dumps(value, ensure_ascii=False)  # 4112 -> "4112", as written in the file
        records.append(record)
    return pd.DataFrame.from_records(records)


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        import pyarrow  # noqa: F401  (pandas' Parquet engine)
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs the pyarrow package; install it (`pip install pyarrow`) or convert the "
            "file to CSV"
        ) from None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise DataError(
            f"{path}: could not be read as Parquet ({type(e).__name__}: {e}); check that it is a complete Parquet "
            "file, or rename it if it is another format"
        ) from e
