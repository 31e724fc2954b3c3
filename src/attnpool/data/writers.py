"""Writing tables in the formats attnpool reads (CSV, TSV, JSONL, Parquet), chosen by extension."""

from __future__ import annotations

from pathlib import Path


def write_table(frame, path: str | Path, like: str | Path | None = None, *, header: bool = True) -> None:
    """Write a frame as CSV, TSV, JSONL or Parquet, by the extension of ``like`` (or ``path``).

    ``header=False`` leaves out the header line of CSV/TSV, for parts appended to a file that has one.
    """
    suffix = Path(like or path).suffix.lower()
    if suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False, header=header)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, header=header)
