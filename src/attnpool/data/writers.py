"""Writing tables in the formats attnpool reads (CSV, TSV, JSONL, Parquet), chosen by extension."""

from __future__ import annotations

import json
import os
from json.encoder import encode_basestring  # C-accelerated; ensure_ascii=False's string encoder
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.data.errors import DataError
from attnpool.json_values import json_value


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


def refuse_input_as_output(input_file: str | Path, output_file: str | Path, option: str = "--output",
                           what: str = "predictions") -> None:
    """Refuse to write ``what`` over the input file: a command's output that is its input would replace it.

    The same path, another spelling of it (``sub/../in.csv``) and a hard or symbolic link to it all count.

    Args:
        input_file: The file read.
        output_file: The file to be written.
        option: The option that named ``output_file``, for the message (``--output``, ``--json``).
        what: What would be written there, for the message (``predictions``, ``report``).

    Raises:
        DataError: ``output_file`` is ``input_file``.
    """
    input_file, output_file = Path(input_file), Path(output_file)
    same = input_file.resolve() == output_file.resolve()
    if not same and input_file.exists() and output_file.exists():
        same = os.path.samefile(input_file, output_file)  # a hard or symbolic link, another spelling of the name
    if same:
        raise DataError(f"{option} {output_file}: is the input file ({input_file}), which the {what} would "
                        f"replace; write the {what} to another file")


def refuse_output_in_folder(folders, output_file: str | Path, option: str = "--output",
                            what: str = "predictions", owner: str = "run") -> None:
    """Refuse to write ``what`` inside one of ``folders`` (a run's): it would replace or add to the run's own files.

    A run's out-of-fold file replaced by predictions, or a file of its own made unreadable, breaks the run (a later
    ``--resume`` refuses it as damaged). As :func:`refuse_input_as_output`, another spelling of the path
    (``sub/../run/x.csv``) and links count: a linked folder's target, a linked output's target, and a link inside
    the folder (which the written file replaces).

    Args:
        folders: The folders nothing may be written into (each run of a blend).
        output_file: The file to be written.
        option: The option that named ``output_file``, for the message.
        what: What would be written there, for the message.
        owner: What each folder is, for the message.

    Raises:
        DataError: ``output_file`` lies inside one of ``folders``.
    """
    output_file = Path(output_file)
    written = Path(os.path.abspath(output_file.expanduser()))
    places = (written.parent.resolve() / written.name, written.resolve())  # the link itself, and its target
    for folder in folders:
        root = Path(folder).expanduser().resolve()
        if any(place.is_relative_to(root) for place in places):
            raise DataError(f"{option} {output_file}: is inside the {owner} folder {folder}, whose own files the "
                            f"{what} would replace or mix with; write the {what} outside it, e.g. "
                            f"{option} {root.parent / written.name}")


def _write_jsonl(frame: pd.DataFrame, path: Path) -> None:
    """Each column encoded at once, then joined per row: pandas' ``to_json`` rounds floats (3e-11 became 0.0)."""
    keys = [json.dumps(str(name), ensure_ascii=False) + ":" for name in frame.columns]
    columns = [_json_column(column) for _, column in frame.items()]
    # %-formatting fills the values in as they are; only the keys are read as a template, hence the escaped %
    line = "{" + ",".join(key.replace("%", "%%") + "%s" for key in keys) + "}\n"
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.writelines(map(line.__mod__, zip(*columns, strict=True)))


def _json_column(column: pd.Series) -> list[str]:
    """A column as JSON texts: floats in their shortest digits that read back exactly, missing as ``null``."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        values = column.to_numpy()
        # repr: the shortest digits that read back exactly. A float32 in the shortest of its own precision (numpy's
        # str, as 0.1 or 1.2345679e+08), not as the float64 it widens to (0.10000000149011612)
        texts = list(map(repr, values.tolist())) if dtype == np.float64 else values.astype(str).tolist()
        return _with_nulls(texts, ~np.isfinite(values))  # NaN and infinite, as pandas writes them
    if dtype.kind == "b" and not column.hasnans:
        return np.where(column.to_numpy(dtype=bool), "true", "false").tolist()
    if pd.api.types.is_integer_dtype(dtype):  # Int64 with missing values too: 1, not 1.0
        return _with_nulls(column.astype(str).tolist(), column.isna().to_numpy())
    if pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        strings = column.to_numpy(dtype=object, na_value="").tolist()
        return _with_nulls(list(map(encode_basestring, strings)), column.isna().to_numpy())
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    return [encode(json_value(value, as_text=True)) for value in column.astype(object).tolist()]


def _with_nulls(texts: list[str], missing: np.ndarray) -> list[str]:
    """``texts`` with ``null`` in the rows where ``missing`` is true."""
    for row in np.flatnonzero(missing).tolist():
        texts[row] = "null"
    return texts
