"""The finished chunks of a streamed prediction, ``OUTPUT.parts/``: written one by one, resumed, joined at the end.

Each chunk's predictions are written as ``OUTPUT.parts/part-00000.csv`` (the output's format) next to a
``manifest.json`` that records what the parts were computed from; resuming needs every entry unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from attnpool.data.writers import write_table
from attnpool.runs.files import atomic_write, atomic_write_json
from attnpool.runs.run import Run, RunError

logger = logging.getLogger("attnpool.predict")

PARTS_FORMAT = 1  # bumped when the layout of OUTPUT.parts/ changes


def manifest(input_file: Path, runs: Run | list[Run], folds: list[int] | list[list[int]], chunk_rows: int,
             ensemble: str, precision: str, weights: list[float] | None = None,
             context_view: str = "with") -> dict[str, Any]:
    """What the parts of a prediction are computed from; resuming needs every entry unchanged.

    One run (and its folds), or a blend: a list of runs, the folds of each, and the blend's ``weights``; the
    ``context_view`` when it is not the default ``with`` (so that older manifests still resume).
    """
    stat = input_file.stat() if input_file.is_file() else None

    def models(run: Run, chosen: list[int]) -> dict[str, list[int]]:
        found = {}
        for fold in chosen:
            files = [f.stat() for f in run.model_dir(fold).iterdir() if f.is_file()]
            found[f"fold_{fold}"] = [sum(f.st_size for f in files), max((f.st_mtime_ns for f in files), default=0)]
        return found

    if isinstance(runs, Run):
        where: dict[str, Any] = {"run": str(runs.path.resolve()), "models": models(runs, folds)}
    else:
        where = {"run": [str(r.path.resolve()) for r in runs],
                 "models": [models(r, f) for r, f in zip(runs, folds, strict=True)], "weights": weights}
    return {"format": PARTS_FORMAT, "input": str(input_file.resolve()), "input_size": stat.st_size if stat else None,
            "input_mtime_ns": stat.st_mtime_ns if stat else None, "chunk_rows": chunk_rows, **where,
            "ensemble": ensemble, "precision": precision,
            **({"context_view": context_view} if context_view != "with" else {})}


def _folds(models: Any) -> str:
    """The folds of a manifest's ``models`` (one run's dict, or one per blended run), e.g. ``0 1`` or ``0 1; 0 2``."""
    runs = models if isinstance(models, list) else [models or {}]
    return "; ".join(" ".join(name.removeprefix("fold_") for name in run) for run in runs)


def _changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two manifests, in words."""
    changes = []
    if saved.get("format") != now["format"]:
        return [f"it was written in parts format {saved.get('format')} (this attnpool writes {now['format']})"]
    if saved.get("input") != now["input"]:
        changes.append(f"the input is now {now['input']} (was {saved.get('input')})")
    elif (saved.get("input_size"), saved.get("input_mtime_ns")) != (now["input_size"], now["input_mtime_ns"]):
        changes.append(f"the input file {now['input']} changed (size {saved.get('input_size')} -> "
                       f"{now['input_size']} bytes, modification time {saved.get('input_mtime_ns')} -> "
                       f"{now['input_mtime_ns']} ns)")
    if saved.get("run") != now["run"]:
        what = "the runs are" if isinstance(now["run"], list) else "the run is"
        changes.append(f"{what} now {now['run']} (was {saved.get('run')})")
    elif saved.get("models") != now["models"]:
        was, is_ = _folds(saved.get("models")), _folds(now["models"])
        if was != is_:  # e.g. training finished another fold since: the parts used the folds they used
            changes.append(f"the folds are now {is_} (were {was}); pass --folds with the earlier ones to resume")
        else:
            changes.append(f"the fold models of {now['run']} changed (retrained or replaced)")
    for key in ("chunk_rows", "ensemble", "precision", "weights", "context_view"):
        default = "with" if key == "context_view" else None  # a manifest leaves the default view out
        was, value = saved.get(key, default), now.get(key, default)
        if was != value and key == "precision" and was is not None:  # a backend's name: --precision onnx-none fails
            changes.append(f"precision is now {value} (was {was}; resume with {_options(was)})")
        elif was != value:
            changes.append(f"{key} is now {value} (was {was}; pass the same value to resume)")
    return changes


def _options(computed_as: str) -> str:
    """The predict options that compute as ``computed_as`` (a manifest's ``precision``: ``fp32``, ``onnx-int8``...)."""
    backend, _, quantize = str(computed_as).partition("-")
    if backend == "onnx" and quantize:
        return f"--backend onnx --quantize {quantize}"
    return f"--backend torch --precision {computed_as}"


class Parts:
    """The finished chunks of one prediction: ``OUTPUT.parts/manifest.json`` and ``part-00000.csv``..."""

    def __init__(self, output: Path, manifest: dict[str, Any]) -> None:
        self.output = output
        self.folder = output.with_name(output.name + ".parts")
        self.manifest = manifest
        self._manifest_written = False  # by this call: a manifest left without parts may be stale
        suffix = output.suffix.lower()
        self.suffix = suffix if suffix in (".tsv", ".jsonl", ".parquet") else ".csv"  # write_table's formats

    def path(self, index: int) -> Path:
        """The part of chunk ``index``."""
        return self.folder / f"part-{index:05d}{self.suffix}"

    def finished(self) -> set[int]:
        """Indices of the chunks whose part is written (a part is complete once it has its name)."""
        if not self.folder.is_dir():
            return set()
        names = (p.name for p in self.folder.glob(f"part-*{self.suffix}"))
        return {int(n[5:-len(self.suffix)]) for n in names if n[5:-len(self.suffix)].isdigit()}

    def open(self, resume: bool) -> set[int]:
        """The chunks to skip; refuses stale or unexpected parts."""
        finished = self.finished()
        if not resume:
            if finished:
                raise RunError(f"{self.folder} holds {len(finished)} finished chunk(s) of an interrupted prediction "
                               f"to {self.output}; pass --resume to continue it, or delete the folder to start over")
            return set()
        if not finished:
            logger.info("--resume: no finished chunks in %s; predicting from the first chunk", self.folder)
            return set()
        try:
            saved = json.loads((self.folder / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise RunError(f"cannot resume: {self.folder / 'manifest.json'} is missing or corrupt ({err}); delete "
                           f"{self.folder} to start over") from err
        changes = _changes(saved, self.manifest)
        if changes:
            raise RunError(f"cannot resume the prediction in {self.folder}: {'; '.join(changes)} since it started. "
                           f"Restore what changed, or delete {self.folder} to start over")
        logger.info("--resume: %d finished chunk(s) in %s are kept", len(finished), self.folder)
        self._manifest_written = True
        return finished

    def write(self, index: int, frame: Any) -> None:
        """Write chunk ``index``'s predictions atomically (CSV/TSV: the header only in the first part)."""
        if not self._manifest_written:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.folder / "manifest.json", self.manifest)
            self._manifest_written = True
        atomic_write(self.path(index), lambda tmp: write_table(frame, tmp, like=self.path(index), header=index == 0))

    def finish(self, count: int) -> None:
        """Join parts ``0..count-1`` in order into the output, then delete the folder.

        The joined file is written in the folder and renamed out: a kill during the join leaves it in the folder,
        which a resumed prediction deletes at its end, not beside the output, where nothing would.
        """
        paths = [self.path(i) for i in range(count)]
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            raise RunError(f"{self.folder} lacks {', '.join(missing[:5])}; delete the folder and predict again")
        if count == 1:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            os.replace(paths[0], self.output)
        elif self.suffix == ".parquet":
            atomic_write(self.output, lambda tmp: _join_parquet(paths, tmp), tmp_dir=self.folder)
        else:
            atomic_write(self.output, lambda tmp: _join_text(paths, tmp), tmp_dir=self.folder)
        self.discard()

    def discard(self) -> None:
        """Delete the parts folder."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _join_text(paths: list[Path], out: Path) -> None:
    """Append the parts' bytes (CSV/TSV parts after the first have no header; JSONL parts end with a newline)."""
    with out.open("wb") as dest:
        for path in paths:
            with path.open("rb") as src:
                shutil.copyfileobj(src, dest, 1 << 20)


def _join_parquet(paths: list[Path], out: Path) -> None:
    """One row group per part; column types unified (a part whose id column is all missing has type null).

    A part without one of the columns (parts written before every chunk had the id column) gets it empty, rather
    than failing the join after every chunk was predicted.
    """
    schema = pa.unify_schemas([pq.read_schema(p) for p in paths])
    with pq.ParquetWriter(out, schema) as writer:
        for path in paths:
            table = pq.read_table(path)
            columns = [table[f.name] if f.name in table.column_names else pa.nulls(len(table), f.type) for f in schema]
            writer.write_table(pa.Table.from_arrays(columns, names=schema.names).cast(schema))
