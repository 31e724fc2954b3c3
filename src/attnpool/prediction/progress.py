"""The progress bar of ``predict`` over the rows of its input, and the log lines printed above it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from attnpool.data.parquet import require_pyarrow


def progress_bar(input_file: Path, progress: bool):
    """A bar over the rows of ``input_file`` (its total :func:`count_rows`), or a silent one without ``progress``."""
    # disable=None: no bar when stderr is not a terminal (a log file or CI gets the summary line, not redraws).
    return tqdm(total=count_rows(input_file) if progress else None, desc="predict", unit="rows",
                disable=None if progress else True, dynamic_ncols=True)


def redirect_logging(progress: bool):
    """Log lines printed above the progress bar instead of through it."""
    if not progress:
        return contextlib.nullcontext()
    return logging_redirect_tqdm()


def count_rows(path: Path, sample: int = 1 << 26) -> int | None:
    """The rows of a file, cheaply: Parquet metadata, else its line breaks (CSV/TSV: less the header).

    Line breaks are counted in the first ``sample`` bytes (64 MiB) and extrapolated to the file's size beyond.
    """
    try:
        if path.suffix.lower() == ".parquet":
            return require_pyarrow(path).ParquetFile(path).metadata.num_rows  # pyarrow missing: a DataError
        size, lines, done, last = path.stat().st_size, 0, 0, b"\n"
        with path.open("rb") as f:
            while done < sample and (block := f.read(1 << 22)):
                lines, done, last = lines + block.count(b"\n"), done + len(block), block[-1:]
        lines = round(lines * size / done) if done < size else lines + (last != b"\n")
        return max(lines - (path.suffix.lower() != ".jsonl"), 0)
    except Exception:  # noqa: BLE001 - only a progress bar's total: unknown rather than an error here
        return None
