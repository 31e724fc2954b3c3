"""Checks of a CSV or TSV file as pandas reads it, each a DataError saying where and how to fix it.

A header naming a column twice, a first row longer than the header, a TSV field that a stray quote ran over the next
rows, and pandas' parser errors as one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.data.errors import DataError


def check_header(source, path: Path, sep: str) -> None:
    """Refuse a header that names a column twice: pandas would rename the second ``name.1`` and read the first."""
    header = pd.read_csv(source, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()
    first: dict[str, int] = {}
    for position, name in enumerate(header, 1):
        if name.strip() and name in first:
            raise DataError(
                f"{path}: the header names column {name!r} twice (columns {first[name]} and {position}); which one "
                f"holds the data is ambiguous. Rename or drop one of them")
        first.setdefault(name, position)


def check_fields(frame: pd.DataFrame, path: Path, sep: str) -> None:
    """Refuse a first data row with more fields than the header: pandas made the first column the index.

    An unquoted delimiter inside a text, or a delimiter ending every line, shifted every column one to the right
    (the ids became the index, the text's second half was read as the label) without an error.
    """
    if isinstance(frame.index, pd.RangeIndex):
        return
    extra = frame.index.nlevels
    raise DataError(
        f"{path}: the first data row has {len(frame.columns) + extra} fields and the header {len(frame.columns)} "
        f"({', '.join(map(str, frame.columns))}); every column would be read one place off. Enclose fields that "
        f"hold the delimiter ({sep!r}) in double quotes, and remove a delimiter ending each line (or name that "
        "column in the header)")


def check_tsv(frame: pd.DataFrame, path: Path, sep: str, first_row: int) -> pd.DataFrame:
    """Refuse a TSV field holding a tab and a line break: a double quote opening a field ran it over the next rows.

    TSV is read with CSV quoting, as pandas writes it (a quoted field may hold a tab, or a line break); a file
    without quoting (GLUE style) whose text starts with ``"`` would otherwise lose rows silently, merged into one
    field that holds both.
    """
    if sep != "\t":
        return frame
    for name in frame.columns:
        column = frame[name]
        if column.dtype == object or pd.api.types.is_string_dtype(column):
            found = (column.str.contains("\t", regex=False, na=False)
                     & column.str.contains("\n", regex=False, na=False))
            if found.any():
                row = first_row + int(np.flatnonzero(found.to_numpy())[0]) + 1  # 1-based, as data rows are named
                raise DataError(
                    f"{path}: column {name!r}, data row {row} holds a tab and a line break: a double quote at the "
                    "start of a field opened a quoted section that ran over the next rows. TSV is read with CSV "
                    'quoting (as pandas writes it): enclose such fields in double quotes and double the quotes inside '
                    '("" for "), or convert the file to CSV or JSONL')
    return frame


def csv_error(path: Path, sep: str, error: Exception) -> DataError:
    """The error pandas raised reading a CSV or TSV file, as a DataError saying what to check (delimiter, quoting)."""
    if isinstance(error, pd.errors.EmptyDataError):
        return DataError(f"{path}: the file is empty; it needs a header line and at least one data row")
    kind = "TSV" if sep == "\t" else "CSV"
    return DataError(
        f"{path}: could not be parsed as {kind}: {str(error).strip()}. Check the delimiter ({sep!r}) and the "
        "quoting: a field holding the delimiter, a double quote or a line break must be enclosed in double quotes"
    )
