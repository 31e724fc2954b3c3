"""Read a table (CSV, TSV, JSONL, Parquet) into a ``pandas.DataFrame``, with errors that say how to fix the file.

Text stays text: ids such as ``"0001"`` are never turned into ``1``, and words such as ``"NA"`` or ``"null"`` are
never turned into missing values (only an empty field is missing). A CSV/TSV column becomes numeric only when
every non-empty value is written as a plain number without leading zeros (``"0.5"``, ``"-3"``, ``"1e-3"``); JSONL
and Parquet keep the types the file stores.

:func:`iter_table` reads the same files in chunks of rows, for files larger than memory, with the same checks and
messages.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.data.delimited import MergedRows, check_fields, check_header, csv_error
from attnpool.data.errors import DataError
from attnpool.data.text_files import Utf8Stream, is_blank, not_utf8, read_utf8

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
            CSV/TSV cannot be parsed or its header names a column twice, or Parquet support (``pyarrow``) is
            missing.
    """
    p = _checked_path(path)
    suffix = p.suffix.lower()
    keep_text = set(text_columns)
    if suffix == ".parquet":
        frame = _read_parquet(p)
    else:
        text = read_utf8(p)
        if not text.strip():
            raise DataError(f"{p}: the file is empty; it needs a header line and at least one data row")
        if suffix == ".jsonl":
            frame = _read_jsonl(text, p, keep_text)
        else:
            frame = _read_delimited(text, p, "\t" if suffix == ".tsv" else ",", keep_text)
    _text_as_str(frame, keep_text)
    if len(frame) == 0:
        raise _no_rows(p, frame.columns)
    return frame


def iter_table(path: str | os.PathLike[str], chunk_rows: int, *, text_columns: Iterable[str] = (),
               columns: Iterable[str] = ()) -> Iterator[pd.DataFrame]:
    """Read a table like :func:`read_table`, in chunks of ``chunk_rows`` rows, never holding the whole file.

    CSV/TSV go through pandas' chunked parser, JSONL is read line by line, Parquet batch by batch
    (``pyarrow.parquet.ParquetFile.iter_batches``). Every chunk but the last has exactly ``chunk_rows`` rows, and
    its index holds the rows' 0-based positions in the file, so the chunks concatenate to the file's rows in order.

    Column types are decided per chunk, by the rules of :func:`read_table`: a CSV column of plain numbers in one
    chunk may be text in another. Name the columns whose values must stay text in ``text_columns`` (ids, texts).
    A JSONL chunk has every key seen so far (missing values for those its lines lack), and every key of ``columns``
    that some line of the file has, but not other keys that appear only in later lines. A pandas index stored in a
    Parquet file becomes columns, as with :func:`read_table`.

    Args:
        path: The file; the extension picks the reader, as in :func:`read_table`.
        chunk_rows: Rows per chunk (>= 1).
        text_columns: Columns always read as strings (absent ones are ignored).
        columns: Columns the caller reads: with JSONL, every chunk has each of them that some line of the file has
            (missing values where its lines lack it), so that the chunks' columns do not depend on ``chunk_rows``.
            The file is scanned for their keys once, only when the first chunk lacks one.

    Returns:
        An iterator over the chunks (``pandas.DataFrame``).

    Raises:
        DataError: As :func:`read_table`: a missing file, a folder, an unsupported extension or a blank file when
            called; while iterating, bytes that are not UTF-8 (byte offset and line), a bad JSONL line, a CSV/TSV
            parse error, a corrupt Parquet file, or no data rows at all. Parquet without ``pyarrow`` when called.
        ValueError: ``chunk_rows`` < 1.
    """
    p = _checked_path(path)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int | np.integer) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows!r}")
    suffix = p.suffix.lower()
    keep_text = set(text_columns)
    if suffix == ".parquet":
        chunks = _iter_parquet(p, int(chunk_rows), _require_pyarrow(p))
    elif is_blank(p):
        raise DataError(f"{p}: the file is empty; it needs a header line and at least one data row")
    elif suffix == ".jsonl":
        chunks = _iter_jsonl(p, int(chunk_rows), keep_text, list(columns))
    else:
        chunks = _iter_delimited(p, int(chunk_rows), "\t" if suffix == ".tsv" else ",", keep_text)
    return _numbered(p, chunks, keep_text)


def table_columns(path: str | os.PathLike[str]) -> list[str]:
    """The column names of a table file, read from its header (its first row for JSONL), not its whole contents.

    Raises:
        DataError: As :func:`iter_table`: the file is missing, unreadable or has no data rows.
    """
    return [str(c) for c in next(iter_table(path, 1)).columns]


def _numbered(path: Path, chunks: Iterator[pd.DataFrame], keep_text: set[str]) -> Iterator[pd.DataFrame]:
    """The non-empty chunks with their text columns as strings and file row positions as index."""
    rows, columns = 0, pd.Index([])
    for frame in chunks:
        columns = frame.columns
        if len(frame) == 0:
            continue
        _text_as_str(frame, keep_text)
        frame.index = pd.RangeIndex(rows, rows + len(frame))
        rows += len(frame)
        yield frame
        del frame  # before the next chunk is read: the caller may have let go of this one
    if rows == 0:
        raise _no_rows(path, columns)


def _checked_path(path: str | os.PathLike[str]) -> Path:
    """The path, if it is an existing file with a supported extension."""
    p = Path(path)
    suffix = p.suffix.lower()
    if not p.exists():
        raise DataError(f"{p}: no such file (resolved to {p.resolve()}); check the path and the working directory")
    if p.is_dir():
        raise DataError(f"{p}: is a folder, not a file; give the path of a {'/'.join(SUPPORTED_EXTENSIONS)} file")
    if suffix not in SUPPORTED_EXTENSIONS:
        raise DataError(
            f"{p}: unsupported file extension {suffix or '(none)'!r}; supported extensions: "
            f"{', '.join(SUPPORTED_EXTENSIONS)}. Convert the file or rename it if it already is one of those formats"
        )
    return p


def _text_as_str(frame: pd.DataFrame, keep_text: set[str]) -> None:
    for name in keep_text.intersection(frame.columns):
        if not pd.api.types.is_string_dtype(frame[name]):  # Parquet/JSONL types: write the values as text
            values = frame[name].map(lambda v: v if isinstance(v, str) or _missing(v) else str(v))
            # pandas 2's astype(str) writes a missing value as the text "nan" or "None": keep it missing
            frame[name] = values.astype(str).where(values.notna(), np.nan)


def _no_rows(path: Path, columns: Iterable) -> DataError:
    names = ", ".join(map(str, columns))
    columns_note = f" (columns: {names})" if names else ""
    return DataError(f"{path}: no data rows{columns_note}; the file needs at least one row below its header")


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


_CSV_OPTIONS = {"dtype": str, "keep_default_na": False, "na_values": [""]}  # every field text; only "" is missing


def _read_delimited(text: str, path: Path, sep: str, text_columns: set[str]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, **_CSV_OPTIONS)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise csv_error(path, sep, e) from None
    check_header(io.StringIO(text), path, sep)
    check_fields(frame, path, sep)
    return _with_numbers(MergedRows(path, sep, lambda: io.StringIO(text)).check(frame, 0), text_columns)


def _iter_delimited(path: Path, chunk_rows: int, sep: str, text_columns: set[str]) -> Iterator[pd.DataFrame]:
    with Utf8Stream(path) as stream:
        try:
            with Utf8Stream(path) as header:
                check_header(header, path, sep)
            merged = MergedRows(path, sep, lambda: Utf8Stream(path))
            with pd.read_csv(stream, sep=sep, chunksize=chunk_rows, **_CSV_OPTIONS) as reader:
                first = 0  # the chunk's first row; no enumerate(): its cached tuple would hold the last chunk
                for frame in reader:
                    check_fields(frame, path, sep)
                    yield _with_numbers(merged.check(frame, first), text_columns)
                    first += chunk_rows
                    del frame  # before the next chunk is read
        except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
            raise csv_error(path, sep, e) from None


def _with_numbers(frame: pd.DataFrame, text_columns: set[str]) -> pd.DataFrame:
    """Turn the columns written as plain numbers (outside ``text_columns``) into numbers."""
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
        record = _jsonl_record(line, lineno, path, text_columns)
        if record is not None:
            records.append(record)
    return pd.DataFrame.from_records(records)


def _iter_jsonl(path: Path, chunk_rows: int, text_columns: set[str], wanted: list[str]) -> Iterator[pd.DataFrame]:
    """Line by line, as :func:`_read_jsonl`; every chunk has the ``wanted`` keys that some line of the file has."""
    records: list[dict] = []
    columns: dict[str, None] = {}  # every key seen so far: a later chunk keeps the columns of the earlier ones
    for lineno, line in _jsonl_lines(path):
        record = _jsonl_record(line, lineno, path, text_columns)
        if record is not None:
            records.append(record)
        if len(records) == chunk_rows:
            yield _union_frame(records, columns, path, wanted)
            records = []
            wanted = []  # settled by the first chunk
    if records:
        yield _union_frame(records, columns, path, wanted)


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The numbered, decoded lines of a JSONL file (ending at line feeds only, as :func:`_read_jsonl` splits)."""
    offset = 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            bom = len(codecs.BOM_UTF8) if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                line = raw[bom:].decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8(path, raw[bom + e.start : bom + e.end], offset + bom + e.start, lineno) from None
            offset += len(raw)
            yield lineno, line


def _union_frame(records: list[dict], columns: dict[str, None], path: Path, wanted: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records)
    columns.update(dict.fromkeys(frame.columns))
    if any(c not in columns for c in wanted):
        # A key first met in a later line would be a column of the later chunks only: whether the first chunk
        # lacks it (and the caller refuses the file) would depend on chunk_rows.
        columns.update(dict.fromkeys(_jsonl_keys(path, [c for c in wanted if c not in columns])))
    return frame if len(frame.columns) == len(columns) else frame.reindex(columns=list(columns))


def _jsonl_keys(path: Path, keys: list[str]) -> list[str]:
    """Those of ``keys`` that some line of a JSONL file has (read until all are found)."""
    missing, found = set(keys), set()
    for lineno, line in _jsonl_lines(path):
        record = _jsonl_record(line, lineno, path, set())
        found.update(missing.intersection(record or ()))
        if found == missing:
            break
    return [k for k in keys if k in found]


def _jsonl_record(line: str, lineno: int, path: Path, text_columns: set[str]) -> dict | None:
    """One line's object (``None`` for a blank line), with ``text_columns`` values as written in the file."""
    if not line.strip():
        return None
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
    return record


def _require_pyarrow(path: Path):
    """``pyarrow.parquet`` (pandas' Parquet engine), or a DataError saying how to get it."""
    try:
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs the pyarrow package; install it (`pip install 'attnpool[parquet]'`) "
            "or convert the file to CSV"
        ) from None
    return pyarrow.parquet


def _parquet_error(path: Path, error: Exception) -> DataError:
    return DataError(
        f"{path}: could not be read as Parquet ({type(error).__name__}: {error}); check that it is a complete "
        "Parquet file, or rename it if it is another format"
    )


# Integers with nulls stay Python ints (and None), not floats: an id 4112 is "4112" as text, as in CSV, not "4112.0".
_TO_PANDAS = {"integer_object_nulls": True}


def _frame(table) -> pd.DataFrame:
    """A pyarrow table as a frame, with the levels of a pandas index stored in it as columns, the unnamed dropped.

    ``df.set_index("id").to_parquet(...)`` stores the ids as the index: a column, as in CSV, for ``--id-col``
    (:func:`iter_table` numbers the rows in the index, where the ids would be lost). A level named like a column
    (``set_index("id", drop=False)``) is dropped: the column holds it already.
    """
    frame = table.to_pandas(**_TO_PANDAS)
    named = [name for name in frame.index.names if name is not None and name not in frame.columns]
    return (frame.reset_index(level=named) if named else frame).reset_index(drop=True)


def _read_parquet(path: Path) -> pd.DataFrame:
    pq = _require_pyarrow(path)
    try:
        return _frame(pq.read_table(path))
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise _parquet_error(path, e) from e


def _iter_parquet(path: Path, chunk_rows: int, pq) -> Iterator[pd.DataFrame]:
    """Batches regrouped into chunks of exactly ``chunk_rows`` rows (pyarrow's batches may stop at row groups)."""
    import pyarrow as pa

    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
        if file.metadata.num_rows == 0:
            yield _frame(schema.empty_table())
            return
        pending: list = []
        rows = 0
        for batch in file.iter_batches(batch_size=chunk_rows):
            pending.append(batch)
            rows += batch.num_rows
            while rows >= chunk_rows:
                table = pa.Table.from_batches(pending, schema=batch.schema)
                yield _frame(table.slice(0, chunk_rows))
                pending, rows = table.slice(chunk_rows).to_batches(), rows - chunk_rows
        if rows:
            yield _frame(pa.Table.from_batches(pending, schema=schema))
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise _parquet_error(path, e) from e
