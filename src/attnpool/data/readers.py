"""Read a table (CSV, TSV, JSONL, Parquet) into a ``pandas.DataFrame``, with errors that say how to fix the file.

Text stays text: ids such as ``"0001"`` are never turned into ``1``, and words such as ``"NA"`` or ``"null"`` are
never turned into missing values. A CSV/TSV column becomes numeric only when every non-empty value is written as a
plain number without leading zeros (``"0.5"``, ``"-3"``, ``"1e-3"``) or as ``nan``, ``inf`` or ``infinity`` (any
case; the infinities may be signed) beside at least one plain number: in such a column an empty field or ``nan``
is missing and ``inf`` infinite (a column of those words alone stays text). JSONL and Parquet keep the types the
file stores.

:func:`iter_table` reads the same files in chunks of rows, for files larger than memory, with the same checks and
messages.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnpool.data.delimited import MergedRows, RowShapes, check_fields, check_header, csv_error
from attnpool.data.errors import DataError
from attnpool.data.numbers import FLOAT_PATTERN, INT_PATTERN
from attnpool.data.parquet import iter_parquet, read_parquet, require_pyarrow
from attnpool.data.text_files import Utf8Stream, blank_edges, is_blank, not_utf8, read_utf8
from attnpool.json_values import is_missing

SUPPORTED_EXTENSIONS = (".csv", ".tsv", ".jsonl", ".parquet")

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
            gives the byte offset and line), a JSONL line is not a JSON object or names a key twice (the message
            gives the line), the CSV/TSV cannot be parsed, its header or a Parquet file's schema names a column
            twice, or Parquet support (``pyarrow``) is missing.
    """
    p = _checked_path(path)
    suffix = p.suffix.lower()
    keep_text = set(text_columns)
    if suffix == ".parquet":
        frame = read_parquet(p)
    elif is_blank(p):
        raise DataError(f"{p}: the file is empty; it needs a header line and at least one data row")
    elif suffix == ".jsonl":
        frame = _read_jsonl(read_utf8(p), p, keep_text)
    else:  # parsed as it is decoded, block by block: no copy of the file's text beside the frame
        [frame] = _iter_delimited(p, None, "\t" if suffix == ".tsv" else ",", keep_text)
    _text_as_str(frame, keep_text, p)
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
        chunks = iter_parquet(p, int(chunk_rows), require_pyarrow(p))
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
        frame.index = pd.RangeIndex(rows, rows + len(frame))
        _text_as_str(frame, keep_text, path)  # after the numbering: its errors give the row in the file
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


def _text_as_str(frame: pd.DataFrame, keep_text: set[str], path: Path) -> None:
    for name in keep_text.intersection(frame.columns):
        if not pd.api.types.is_string_dtype(frame[name]):  # Parquet/JSONL types: write the values as text
            values = pd.Series([_as_text(v, path, name, row) for row, v in frame[name].items()], index=frame.index,
                               dtype=object)
            # pandas 2's astype(str) writes a missing value as the text "nan" or "None": keep it missing
            frame[name] = values.astype(str).where(values.notna(), np.nan)


def _as_text(value: object, path: Path, name: str, row: int) -> object:
    """A value as text; bytes (Parquet strings stored as BYTE_ARRAY without their UTF-8 annotation) decoded."""
    if isinstance(value, str) or is_missing(value):
        return value
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = value[e.start : e.end].hex(" ")
        raise DataError(
            f"{path}: column {name!r}, data row {row + 1} holds bytes that are not UTF-8 text ({bad} at byte "
            f"{e.start}); store the column as UTF-8 strings, e.g. decoded from its encoding with "
            f"`df[{name!r}] = df[{name!r}].str.decode('cp1252')` before `df.to_parquet(...)`"
        ) from None


def _no_rows(path: Path, columns: Iterable) -> DataError:
    names = ", ".join(map(str, columns))
    columns_note = f" (columns: {names})" if names else ""
    return DataError(f"{path}: no data rows{columns_note}; the file needs at least one row below its header")


_CSV_OPTIONS = {"dtype": str, "keep_default_na": False, "na_values": [""]}  # every field text; only "" is missing


def _iter_delimited(path: Path, chunk_rows: int | None, sep: str, text_columns: set[str]) -> Iterator[pd.DataFrame]:
    """A CSV/TSV file chunk after chunk, or as one frame with ``chunk_rows=None``.

    In a file of one column a blank line is a row whose text is missing (pandas would skip it: a prediction file
    would lose the row), except the blank lines before the header and after the last row.
    """
    shapes = None
    try:
        with Utf8Stream(path) as header:
            names = check_header(header, path, sep)
        one_column = len(names) == 1
        start, end = blank_edges(path, b" \t".replace(sep.encode(), b"")) if one_column else (0, None)
        merged = MergedRows(path, sep, lambda: Utf8Stream(path))
        shapes = RowShapes(path, sep, names, lambda: Utf8Stream(path, start=start, end=end),
                           first_line=_line_at(path, start), one_column=one_column)
        options = {**_CSV_OPTIONS, "sep": sep, "skip_blank_lines": not one_column, "quoting": shapes.check_quotes()}
        with Utf8Stream(path, start=start, end=end) as stream:
            if chunk_rows is None:
                frame = pd.read_csv(stream, **options)
                check_fields(frame, path, sep)
                shapes.check(frame)
                yield _with_numbers(merged.check(frame, 0), text_columns)
                return
            with pd.read_csv(stream, chunksize=chunk_rows, **options) as reader:
                first = 0  # the chunk's first row; no enumerate(): its cached tuple would hold the last chunk
                for frame in reader:
                    check_fields(frame, path, sep)
                    shapes.check(frame)
                    yield _with_numbers(merged.check(frame, first), text_columns)
                    first += chunk_rows
                    del frame  # before the next chunk is read
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise csv_error(path, sep, e, shapes) from None


def _line_at(path: Path, offset: int) -> int:
    """The line starting at byte ``offset`` (a line's start, after blank lines only)."""
    with path.open("rb") as f:
        head = f.read(offset)
    return 1 + head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n")


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
    """The column as int64 or float64 when every non-empty value is a plain number (or nan/inf), else ``None``."""
    values = column.dropna().str.strip()
    special = values.str.lower().isin(_SPECIAL)
    ordinary = values[~special]
    if ordinary.empty or not ordinary.str.fullmatch(FLOAT_PATTERN).all():
        return None  # an all-empty column, or text: keep as strings
    if not special.any() and len(values) == len(column) and ordinary.str.fullmatch(INT_PATTERN).all():
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
                line = raw[bom:].removesuffix(b"\n").decode("utf-8")  # as split: an error's column the same
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


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a \u escape of half a UTF-16 pair (paired or not)


def _check_surrogates(record: dict, lineno: int, path: Path) -> None:
    """A DataError for the escape of a lone surrogate (half a UTF-16 pair): no character, UTF-8 cannot hold it."""
    for name, value in record.items():
        text = json.dumps([name, value], ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DataError(
                f"{path}: line {lineno}, key {name!r}: the escape \\u{ord(text[e.start]):04x} is half of a UTF-16 "
                "surrogate pair without its other half: no character, and not writable as UTF-8; write the character "
                "itself, or both halves of its pair (e.g. \\ud83d\\ude00 for one emoji), or remove the escape"
            ) from None


class _RepeatedKey(Exception):
    """A JSON object naming a key twice: ``(key, first position, second position)``, 1-based among its keys."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; :class:`_RepeatedKey` if a key is named twice (``json`` keeps the last)."""
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: dict[str, int] = {}
        for position, (name, _) in enumerate(pairs, 1):
            if name in seen:
                raise _RepeatedKey(name, seen[name], position)
            seen[name] = position
    return record


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)  # one for every line: json.loads(hook=) makes one a call
# numbers as the text they are written as (1e5, 0.10, -0): the values of text columns, e.g. ids to join on
_AS_WRITTEN = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_float=str, parse_int=str, parse_constant=str)


def _jsonl_record(line: str, lineno: int, path: Path, text_columns: set[str]) -> dict | None:
    """One line's object (``None`` for a blank line), with ``text_columns`` values as written in the file."""
    if not line.strip():
        return None
    try:
        record = _DECODER.decode(line)
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}: line {lineno} is not valid JSON ({e.msg}{'' if e.msg.endswith(' at') else ' at'} column "
            f"{e.colno}); a .jsonl file holds one JSON object per line (a file holding one JSON array must be "
            "converted first, e.g. `pd.read_json(path).to_json(out, orient='records', lines=True)`)"
        ) from None
    except _RepeatedKey as e:
        name, first, second = e.args
        raise DataError(
            f"{path}: line {lineno} names key {name!r} twice in one object (its keys {first} and {second}); which "
            "value holds the data is ambiguous. Rename or drop one of them") from None
    if not isinstance(record, dict):
        raise DataError(
            f"{path}: line {lineno} holds a JSON {type(record).__name__}, not an object; a .jsonl file holds one "
            'JSON object per line, e.g. {"text": "...", "label": 1}'
        )
    if _SURROGATE_ESCAPE.search(line):
        _check_surrogates(record, lineno, path)
    written = None
    for name in text_columns.intersection(record):
        value = record[name]
        if isinstance(value, int | float) and not isinstance(value, bool):  # 1e5 -> "1e5", not "100000.0"
            written = written or _AS_WRITTEN.decode(line)
            record[name] = written[name]
        elif value is not None and not isinstance(value, str):
            record[name] = json.dumps(value, ensure_ascii=False)  # true -> "true", [1, 2] -> "[1, 2]"
    return record
