"""Parquet files (through pyarrow, pandas' Parquet engine), read whole or in chunks of rows.

The Parquet side of :mod:`attnpool.data.readers`, whose :func:`~attnpool.data.readers.read_table` and
:func:`~attnpool.data.readers.iter_table` turn the columns read as text into strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.data.errors import DataError


def require_pyarrow(path: Path):
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
    (:func:`~attnpool.data.readers.iter_table` numbers the rows in the index, where the ids would be lost). A level
    named like a column (``set_index("id", drop=False)``) is dropped: the column holds it already.
    """
    frame = table.to_pandas(**_TO_PANDAS)
    named = [name for name in frame.index.names if name is not None and name not in frame.columns]
    return (frame.reset_index(level=named) if named else frame).reset_index(drop=True)


def _check_names(path: Path, schema) -> None:
    """Refuse a schema naming a column twice: pyarrow would fail to read it, or pandas keep both under one name."""
    first: dict[str, int] = {}
    for position, name in enumerate(schema.names, 1):
        if name in first:
            raise DataError(
                f"{path}: the Parquet schema names column {name!r} twice (columns {first[name]} and {position}); "
                "which one holds the data is ambiguous. Rename or drop one of them, e.g. with pyarrow: `table = "
                "pq.ParquetFile(path).read(); pq.write_table(table.rename_columns([...new names...]), out)`")
        first[name] = position


def read_parquet(path: Path) -> pd.DataFrame:
    """The whole file as a frame; a DataError: pyarrow is missing, the file is not Parquet or names a column twice."""
    pq = require_pyarrow(path)
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise _parquet_error(path, e) from e
    _check_names(path, schema)
    try:
        return _frame(pq.read_table(path))
    except Exception as e:
        raise _parquet_error(path, e) from e


def range_index(schema) -> tuple[str, int, int] | None:
    """``(name, start, step)`` of a named pandas ``RangeIndex`` that a Parquet schema stores only in its metadata.

    ``df.set_index("id")`` with consecutive integer ids gives a ``RangeIndex``, which pandas writes as no column,
    only as its start, stop and step in the schema's ``pandas`` metadata; ``None`` when there is no such index (or
    it is unnamed, or a column holds it already).
    """
    try:
        stored = json.loads((schema.metadata or {}).get(b"pandas", b"{}"))
        for level in stored.get("index_columns", ()):
            if isinstance(level, dict) and level.get("kind") == "range":
                name = level.get("name")
                if name is not None and name not in schema.names:
                    return str(name), int(level.get("start", 0)), int(level.get("step", 1))
    except (ValueError, TypeError, AttributeError):
        return None  # metadata written by something else than pandas: no index to rebuild
    return None


def _with_range(frame: pd.DataFrame, index: tuple[str, int, int] | None, offset: int) -> pd.DataFrame:
    """The chunk of rows from ``offset`` on with the range index's column (pyarrow drops it from a slice)."""
    if index is not None:
        name, start, step = index
        values = start + step * (offset + np.arange(len(frame), dtype=np.int64))
        if name in frame.columns:  # the whole file in one chunk: pandas rebuilt it
            frame[name] = values
        else:
            frame.insert(0, name, values)
    return frame


def iter_parquet(path: Path, chunk_rows: int, pq) -> Iterator[pd.DataFrame]:
    """Batches regrouped into chunks of exactly ``chunk_rows`` rows (pyarrow's batches may stop at row groups).

    A named pandas ``RangeIndex`` (see :func:`range_index`) becomes the first column of every chunk, with the
    values it holds for those rows, as :func:`read_parquet` gives it for the whole file.
    """
    import pyarrow as pa

    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise _parquet_error(path, e) from e
    _check_names(path, schema)
    index = range_index(schema)
    try:
        if file.metadata.num_rows == 0:
            yield _with_range(_frame(schema.empty_table()), index, 0)
            return
        pending: list = []
        rows = offset = 0
        for batch in file.iter_batches(batch_size=chunk_rows):
            pending.append(batch)
            rows += batch.num_rows
            while rows >= chunk_rows:
                table = pa.Table.from_batches(pending, schema=batch.schema)
                yield _with_range(_frame(table.slice(0, chunk_rows)), index, offset)
                offset += chunk_rows
                pending, rows = table.slice(chunk_rows).to_batches(), rows - chunk_rows
        if rows:
            yield _with_range(_frame(pa.Table.from_batches(pending, schema=schema)), index, offset)
    except Exception as e:  # pyarrow raises several types for a corrupt or non-Parquet file
        raise _parquet_error(path, e) from e
