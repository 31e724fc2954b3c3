"""The finished chunks of a streamed prediction, ``OUTPUT.parts/``: written one by one, resumed, joined at the end.

Each chunk's predictions are written as ``OUTPUT.parts/part-00000.csv`` (the output's format) next to a
``manifest.json`` that records what the parts were computed from; resuming needs every entry unchanged. Each part
has a ``chunk-00000.json`` beside it, the row count and a hash of the input rows it was predicted from, so that a
resumed prediction checks that its reader still reads the same rows into that chunk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from attnpool._version import __version__
from attnpool.data.parquet import require_pyarrow
from attnpool.data.writers import write_table
from attnpool.runs.files import atomic_write, atomic_write_json
from attnpool.runs.run import Run, RunError

logger = logging.getLogger("attnpool.predict")

PARTS_FORMAT = 2  # bumped when the layout of OUTPUT.parts/ changes (2: run files' hashes, each chunk's rows checked)


def manifest(input_file: Path, runs: Run | list[Run], folds: list[int] | list[list[int]], chunk_rows: int,
             ensemble: str, precision: str, weights: list[float] | None = None,
             context_view: str = "with") -> dict[str, Any]:
    """What the parts of a prediction are computed from; resuming needs every entry unchanged.

    One run (and its folds), or a blend: a list of runs, the folds of each, and the blend's ``weights``; the
    ``context_view`` when it is not the default ``with`` (so that older manifests still resume). ``run_files``: the
    SHA-256 of each run's config, run info and chosen folds' metrics (and, for a blend or a Pearson-loss run, their
    out-of-fold predictions), which the predictions depend on beside the models (:func:`run_digests`).
    """
    stat = input_file.stat() if input_file.is_file() else None
    blended = not isinstance(runs, Run)

    def models(run: Run, chosen: list[int]) -> dict[str, list[int]]:
        found = {}
        for fold in chosen:
            files = [f.stat() for f in run.model_dir(fold).iterdir() if f.is_file()]
            found[f"fold_{fold}"] = [sum(f.st_size for f in files), max((f.st_mtime_ns for f in files), default=0)]
        return found

    if isinstance(runs, Run):
        where: dict[str, Any] = {"run": str(runs.path.resolve()), "models": models(runs, folds),
                                 "run_files": run_digests(runs, folds, blended)}
    else:
        where = {"run": [str(r.path.resolve()) for r in runs],
                 "models": [models(r, f) for r, f in zip(runs, folds, strict=True)], "weights": weights,
                 "run_files": [run_digests(r, f, blended) for r, f in zip(runs, folds, strict=True)]}
    return {"format": PARTS_FORMAT, "attnpool_version": __version__, "input": str(input_file.resolve()),
            "input_size": stat.st_size if stat else None,
            "input_mtime_ns": stat.st_mtime_ns if stat else None, "chunk_rows": chunk_rows, **where,
            "ensemble": ensemble, "precision": precision,
            **({"context_view": context_view} if context_view != "with" else {})}


def run_digests(run: Run, folds: list[int], blended: bool = False) -> dict[str, Any]:
    """SHA-256 of what a run's predictions depend on beside its models, read through :class:`Run`.

    ``config``: its config.yaml (max_length, text columns, template...); ``info``: its run info (classes, label and
    id columns); ``metrics``: each chosen fold's validation metrics (``--ensemble score``'s weights); ``oof``: each
    chosen fold's out-of-fold predictions, for a blend (its scales) or a Pearson-loss run (its folds' scales) only.
    """
    config = run.config()
    digests: dict[str, Any] = {
        "config": hashlib.sha256(run.config_file.read_bytes()).hexdigest(),
        "info": _json_digest(run.info()),
        "metrics": {f"fold_{f}": _json_digest(run.fold_metrics(f)) for f in folds}}
    if blended or (config.task == "regression" and config.loss == "pearson"):
        digests["oof"] = {f"fold_{f}": frame_digest(run.fold_oof(f)) if run.fold_done(f) else None for f in folds}
    return digests


def _json_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def frame_digest(frame: pd.DataFrame) -> str:
    """A hash of a frame's column names and values, in row order (not its index)."""
    try:
        rows = pd.util.hash_pandas_object(frame, index=False)
    except TypeError:  # unhashable cells (lists read from JSONL): hashed as their text
        rows = pd.util.hash_pandas_object(frame.astype(str), index=False)
    digest = hashlib.sha256(json.dumps([str(c) for c in frame.columns]).encode("utf-8"))
    digest.update(rows.to_numpy().tobytes())
    return digest.hexdigest()


_RUN_FILES = {"config": ("config.yaml", "max_length, text columns, template..."),
              "info": ("run info", "task, classes, label and id columns")}


def _run_file_changes(saved: Any, now: Any, runs: Any) -> list[str]:
    """What changed in the runs' files (``run_files`` of two manifests), in words."""
    saved_list, now_list = (saved, now) if isinstance(runs, list) else ([saved], [now])
    paths = runs if isinstance(runs, list) else [runs]
    if not isinstance(saved_list, list) or not isinstance(now_list, list) or len(saved_list) != len(now_list):
        return [f"the runs' files changed (retrained or edited): {', '.join(map(str, paths))}"]
    changes = []
    for path, was, is_ in zip(paths, saved_list, now_list, strict=True):
        was, is_ = (was if isinstance(was, dict) else {}), (is_ if isinstance(is_, dict) else {})
        for key, (name, holds) in _RUN_FILES.items():
            if was.get(key) != is_.get(key):
                changes.append(f"the {name} of {path} ({holds}) changed")
        for key, what in (("metrics", "validation metrics (--ensemble score's weights)"),
                          ("oof", "out-of-fold predictions (the scales the folds or runs are put on)")):
            before, after = was.get(key) or {}, is_.get(key) or {}
            changed = [name.removeprefix("fold_") for name in sorted(set(before) | set(after))
                       if before.get(name) != after.get(name)]
            if changed:
                changes.append(f"the {what} of fold(s) {', '.join(changed)} of {path} changed")
    return changes


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
    if saved.get("run") == now["run"] and saved.get("run_files") != now.get("run_files"):
        changes.extend(_run_file_changes(saved.get("run_files"), now.get("run_files"), now["run"]))
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
        self._saved_version = __version__  # of the resumed parts
        self._resumed: set[int] = set()
        suffix = output.suffix.lower()
        self.suffix = suffix if suffix in (".tsv", ".jsonl", ".parquet") else ".csv"  # write_table's formats

    def path(self, index: int) -> Path:
        """The part of chunk ``index``."""
        return self.folder / f"part-{index:05d}{self.suffix}"

    def _rows_file(self, index: int) -> Path:
        """What chunk ``index``'s part was predicted from: its input rows' count and hash."""
        return self.folder / f"chunk-{index:05d}.json"

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
        self._saved_version = saved.get("attnpool_version", "?")
        self._resumed = finished
        return finished

    def write(self, index: int, frame: Any, source: pd.DataFrame | None = None) -> None:
        """Write chunk ``index``'s predictions atomically (CSV/TSV: the header only in the first part).

        ``source``: the chunk's input rows, whose count and hash are written first, for :meth:`check` to compare.
        """
        if not self._manifest_written:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.folder / "manifest.json", self.manifest)
            self._manifest_written = True
        if source is not None:  # before the part: a part never exists without it
            atomic_write_json(self._rows_file(index), {"rows": len(source), "hash": frame_digest(source)})
        atomic_write(self.path(index), lambda tmp: write_table(frame, tmp, like=self.path(index), header=index == 0))

    def check(self, index: int, source: pd.DataFrame) -> None:
        """Refuse to keep chunk ``index``'s part unless it was predicted from these input rows.

        The input file is unchanged (the manifest says so), but the rows read into a chunk also depend on the reader:
        an attnpool that reads blank lines or quoted fields otherwise would splice shifted rows in silently.
        """
        file = self._rows_file(index)
        try:
            saved = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise RunError(f"cannot resume: {file}, the input rows chunk {index} was predicted from, is missing or "
                           f"corrupt ({err}); delete {self.folder} and predict again without --resume") from err
        rows, digest = len(source), frame_digest(source)
        if saved.get("rows") != rows or saved.get("hash") != digest:
            how = (f"{saved.get('rows')} rows then, {rows} now" if saved.get("rows") != rows
                   else f"the same {rows} rows in number, not in content")
            raise RunError(f"cannot resume the prediction in {self.folder}: chunk {index} of the unchanged input "
                           f"{self.manifest['input']} reads other rows than when its part was predicted ({how}; the "
                           f"parts were written by attnpool {self._saved_version}, this is {__version__}, whose "
                           f"reader may differ); delete {self.folder} and predict again without --resume")

    def finish(self, count: int) -> None:
        """Join parts ``0..count-1`` in order into the output, then delete the folder.

        The joined file is written in the folder and renamed out: a kill during the join leaves it in the folder,
        which a resumed prediction deletes at its end, not beside the output, where nothing would.
        """
        paths = [self.path(i) for i in range(count)]
        beyond = sorted(i for i in self._resumed if i >= count)
        if beyond:  # the input reads into fewer chunks than when those parts were predicted
            raise RunError(f"cannot resume the prediction in {self.folder}: the input now reads into {count} chunk(s), "
                           f"but parts of chunk(s) {', '.join(map(str, beyond[:5]))} were predicted from it (by "
                           f"attnpool {self._saved_version}; this is {__version__}, whose reader may differ); delete "
                           f"{self.folder} and predict again without --resume")
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
    than failing the join after every chunk was predicted. pyarrow (an optional extra) is imported here only.
    """
    pq = require_pyarrow(out)
    import pyarrow as pa  # present: require_pyarrow imported pyarrow.parquet
    schema = pa.unify_schemas([pq.read_schema(p) for p in paths])
    with pq.ParquetWriter(out, schema) as writer:
        for path in paths:
            table = pq.read_table(path)
            columns = [table[f.name] if f.name in table.column_names else pa.nulls(len(table), f.type) for f in schema]
            writer.write_table(pa.Table.from_arrays(columns, names=schema.names).cast(schema))
