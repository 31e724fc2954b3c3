"""``predict``: ensemble a run's fold models over a file, fast (length-sorted, dynamically padded batches).

The notebook recipe pads every batch to the data set's maximum length and runs the batches in file order. Here the
rows are sorted by token length so that each batch pads only to its own longest row, batches are larger, and
the output is put back in the input order.

Files larger than memory stream through in chunks of rows: each chunk is read, tokenised, predicted and written as
one part of the output (``OUTPUT.parts/part-00000.csv``...), and the parts are joined at the end, so memory is
bounded by the chunk size and an interrupted prediction resumes at the first unfinished chunk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnpool.training.config import PRECISIONS
from attnpool.training.runs import RunError, atomic_write, atomic_write_json, fold_model_dirs, read_run_info

logger = logging.getLogger("attnpool.predict")

PARTS_FORMAT = 1  # bumped when the layout of OUTPUT.parts/ changes
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision that ``precision`` means on ``device``: ``fp32``, ``bf16`` or ``fp16``.

    ``auto`` is bf16 on a CUDA device that supports it, else fp32. bf16 and fp16 run the forward pass under
    ``torch.autocast`` (on a CPU too, when asked); the weights stay float32.

    Raises:
        ValueError: ``precision`` is not one of ``auto``, ``fp32``, ``bf16``, ``fp16``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision
    device = torch.device(device)
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row indices grouped into batches of similar length (longest first, so memory peaks at the start)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def predict_encoded(models: Sequence[torch.nn.Module], encodings: dict[str, list], rows: np.ndarray | None,
                    batch_size: int, tokenizer: Any, device: str | torch.device | None = None,
                    progress: bool = False, *, precision: str = "fp32",
                    on_batch: Callable[[int], object] | None = None) -> list[np.ndarray]:
    """Logits of each model for the given rows of pre-tokenised inputs, in the order of ``rows``.

    Args:
        models: Models returning ``.logits``.
        encodings: ``{"input_ids": [...], "attention_mask": [...], ...}`` lists of token lists (unpadded).
        rows: Which rows (default: all).
        batch_size: Rows per forward pass.
        tokenizer: Pads the batches (``tokenizer.pad``).
        device: Where to run; default: CUDA when available.
        progress: Show a progress bar over the batches.
        precision: ``fp32`` (default), ``bf16``, ``fp16`` (``torch.autocast``) or ``auto`` (see
            :func:`resolve_precision`).
        on_batch: Called with the number of rows of each batch once it is predicted (a progress bar's ``update``).

    Returns:
        One ``(len(rows), num_labels)`` float32 array per model.
    """
    rows = np.arange(len(encodings["input_ids"])) if rows is None else np.asarray(rows)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = _AUTOCAST.get(resolve_precision(precision, device))
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    lengths = [len(encodings["input_ids"][i]) for i in rows]
    batches = length_sorted_batches(lengths, batch_size)
    outputs = [np.zeros((len(rows), 0), dtype=np.float32) for _ in models]
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encodings]
    for m in models:
        m.eval().to(device)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    for batch in batches:
        features = tokenizer.pad([{k: encodings[k][rows[i]] for k in keys} for i in batch], return_tensors="pt")
        features = {k: v.to(device) for k, v in features.items()}
        for j, m in enumerate(models):
            with autocast:
                logits = m(**features).logits
            logits = logits.float().cpu().numpy()
            if outputs[j].shape[1] == 0:
                outputs[j] = np.zeros((len(rows), logits.shape[1]), dtype=np.float32)
            outputs[j][batch] = logits
        if on_batch is not None:
            on_batch(len(batch))
    return outputs


def load_run_models(run_dir: str | Path) -> tuple[dict[str, Any], list[torch.nn.Module], Any, list[dict]]:
    """The run's info, every finished fold's model, the tokenizer and the fold metrics.

    Raises:
        RunError: Not a run, another run format, no finished fold, or a model folder that cannot be loaded.
    """
    import json

    from transformers import AutoTokenizer

    from attnpool.model import AttnPoolForSequenceClassification

    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    model_dirs = fold_model_dirs(run_dir)
    if not model_dirs:
        raise RunError(f"{run_dir} has no trained fold (no fold_K/model/); finish training with --resume first")
    models, fold_metrics = [], []
    for folder in model_dirs:
        try:
            models.append(AttnPoolForSequenceClassification.from_pretrained(folder))
        except Exception as err:  # noqa: BLE001 - any failure to load means a corrupt checkpoint
            raise RunError(f"cannot load the fold model in {folder}: {err}. The checkpoint is corrupt or incomplete; "
                           "re-train that fold (delete the fold folder and run train --resume)") from err
        metrics_file = folder.parent / "metrics.json"
        fold_metrics.append(json.loads(metrics_file.read_text()) if metrics_file.is_file() else {})
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[0])
    return info, models, tokenizer, fold_metrics


def ensemble_weights(fold_metrics: list[dict], metric: str, how: str) -> np.ndarray:
    """``mean``: equal weights. ``score``: weights proportional to each fold's validation ``metric`` (clipped at 0)."""
    n = len(fold_metrics)
    if how == "mean":
        return np.full(n, 1.0 / n)
    if how != "score":
        raise ValueError(f"ensemble must be 'mean' or 'score', got {how!r}")
    scores = np.array([max(float(m.get(metric) or 0.0), 0.0) for m in fold_metrics])
    if scores.sum() == 0:
        return np.full(n, 1.0 / n)
    return scores / scores.sum()


@dataclass(frozen=True)
class PredictionSummary:
    """What :func:`predict` wrote; the predictions themselves are in the file (read it back with pandas)."""

    output: Path  # the predictions file
    rows: int  # rows predicted, = rows of the input
    chunks: int  # chunks the input was read in
    resumed_chunks: int = 0  # chunks taken from an interrupted prediction instead of being predicted again


def predict(run_dir: str | Path, input_file: str | Path, output_file: str | Path, *, batch_size: int = 128,
            ensemble: str = "mean", device: str | None = None, progress: bool = True, chunk_rows: int = 100_000,
            resume: bool = False, precision: str = "auto") -> PredictionSummary:
    """Predict a file with every fold model of a run, ensemble, and write the output atomically, chunk by chunk.

    The output keeps the input's order and its id column; regression writes ``prediction`` (one column per
    target), classification writes the predicted label and one probability column per class.

    The input is read ``chunk_rows`` rows at a time, so memory is bounded by the chunk size whatever the file size.
    Each chunk is tokenised, predicted in length-sorted batches and written as a part,
    ``OUTPUT.parts/part-00000.csv`` (the output's format), next to a ``manifest.json`` that records what the parts
    were computed from (input file, its size and modification time, ``chunk_rows``, the run's fold models,
    ``ensemble``, the resolved ``precision``). At the end the parts are joined in order into a temporary file that
    is renamed to ``output_file``, and the parts folder is deleted. An existing ``output_file`` is replaced.

    If the prediction is interrupted (killed, out of memory...), ``resume=True`` keeps the finished parts and
    predicts only the rest; it refuses when anything in the manifest changed. Without ``resume``, finished parts
    of an interrupted prediction are never deleted: the call refuses. When the input turns out to be bad
    (a ``DataError`` in some chunk), the parts of a fresh (not resumed) prediction are deleted, since the
    input has to be edited, which makes them stale.

    Args:
        run_dir: The ``--output-dir`` of ``attnpool train``.
        input_file: CSV, TSV, JSONL or Parquet with the text columns the run was trained on.
        output_file: Where to write (format by extension); written to a temporary name, then renamed.
        batch_size: Rows per forward pass.
        ensemble: ``mean`` or ``score`` (weights proportional to each fold's validation metric).
        device: ``cpu``, ``cuda``...; default: CUDA when available.
        progress: Show a progress bar over the rows. Its total is exact for Parquet; for CSV/TSV and JSONL it is
            the count of lines (extrapolated from the first 64 MiB of larger files), an estimate when quoted fields
            hold line breaks or lines are blank.
        chunk_rows: Rows read, tokenised and predicted at a time.
        resume: Continue an interrupted prediction to the same ``output_file``.
        precision: ``auto`` (bf16 on a CUDA device that supports it, else fp32), ``fp32``, ``bf16`` or ``fp16``:
            the forward pass runs under ``torch.autocast`` with that dtype.

    Returns:
        A :class:`PredictionSummary` (output path, rows, chunks), not the predictions: they may not fit in memory.

    Raises:
        RunError: Not a run, a corrupt fold model; parts of an interrupted prediction without ``resume``; with
            ``resume``, parts computed from another input, run or options.
        attnpool.data.DataError: A bad input file (missing columns, unseen labels, not UTF-8...).
        ValueError: Bad ``ensemble``, ``precision`` or ``chunk_rows``.
    """
    from attnpool.data import DataError
    from attnpool.training.config import TrainConfig, load_yaml
    from attnpool.training.inputs import PredictionInputs
    from attnpool.training.metrics import primary_metric
    from attnpool.training.recipe import scores_from_logits
    from attnpool.training.runs import CONFIG_FILE

    run_dir, input_file, output_file = Path(run_dir), Path(input_file), Path(output_file)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    precision = resolve_precision(precision, device)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive number of rows, got {chunk_rows!r}")
    info, models, tokenizer, fold_metrics = load_run_models(run_dir)
    cfg = TrainConfig.from_dict(load_yaml(run_dir / CONFIG_FILE), where=str(run_dir / CONFIG_FILE))
    weights = ensemble_weights(fold_metrics, primary_metric(cfg.task)[0], ensemble)
    inputs = PredictionInputs(cfg, info, input_file, tokenizer, log=logger)
    chunks = inputs.chunks(chunk_rows)  # checks the path now; reads lazily
    parts = _Parts(output_file, _manifest(input_file, run_dir, chunk_rows, ensemble, precision))
    finished = parts.open(resume)
    bar = _progress_bar(input_file, progress)
    rows = count = 0
    try:
        with bar, _redirect_logging(progress):
            for index, chunk in enumerate(chunks):
                rows, count = rows + len(chunk), index + 1
                if index in finished:
                    bar.update(len(chunk))
                    continue
                frame, encodings = inputs.encode(chunk)
                logits = predict_encoded(models, encodings, None, batch_size, tokenizer, device,
                                         precision=precision, on_batch=bar.update)
                scores = sum(w * scores_from_logits(cfg.task, lg) for w, lg in zip(weights, logits, strict=True))
                parts.write(index, _output_frame(cfg, info, frame, scores))
                del chunk, frame, encodings, logits, scores  # before the next chunk is read: one chunk in memory
            bar.total = bar.n  # the counted lines were an estimate
    except DataError:
        if not resume:
            parts.discard()
        raise
    parts.finish(count)
    inputs.log_summary()
    resumed = len([i for i in finished if i < count])
    logger.info("wrote %d predictions of %d fold models (%s ensemble, %s) to %s in %d chunk(s)%s", rows,
                len(models), ensemble, precision, output_file, count,
                f", {resumed} of them resumed from {parts.folder}" if resumed else "")
    return PredictionSummary(output=output_file, rows=rows, chunks=count, resumed_chunks=resumed)


def _output_frame(cfg: Any, info: dict[str, Any], frame: Any, scores: np.ndarray):
    """The written columns of a chunk: the id (when the run has one), then the prediction(s) and probabilities."""
    out = frame[[info["id_col"]]].copy() if info.get("id_col") and info["id_col"] in frame else frame.iloc[:, :0].copy()
    out = out.reset_index(drop=True)
    if cfg.task == "regression":
        scores = np.asarray(scores).reshape(len(frame), -1)
        names = ["prediction"] if scores.shape[1] == 1 else [f"prediction_{j}" for j in range(scores.shape[1])]
        for j, name in enumerate(names):
            out[name] = scores[:, j]
    else:
        classes = info["classes"]
        if cfg.task == "multilabel":
            out["prediction"] = ["|".join(str(c) for c, on in zip(classes, row >= 0.5, strict=True) if on)
                                 for row in scores]
        else:
            out["prediction"] = [classes[i] for i in np.argmax(scores, axis=1)]
        for j, c in enumerate(classes):
            out[f"prob_{c}"] = scores[:, j]
    return out


def _manifest(input_file: Path, run_dir: Path, chunk_rows: int, ensemble: str, precision: str) -> dict[str, Any]:
    """What the parts of a prediction are computed from; resuming needs every entry unchanged."""
    stat = input_file.stat() if input_file.is_file() else None
    models = {}
    for folder in fold_model_dirs(run_dir):
        files = [f.stat() for f in folder.iterdir() if f.is_file()]
        models[folder.parent.name] = [sum(f.st_size for f in files), max((f.st_mtime_ns for f in files), default=0)]
    return {"format": PARTS_FORMAT, "input": str(input_file.resolve()), "input_size": stat.st_size if stat else None,
            "input_mtime_ns": stat.st_mtime_ns if stat else None, "chunk_rows": chunk_rows,
            "run": str(run_dir.resolve()), "models": models, "ensemble": ensemble, "precision": precision}


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
        changes.append(f"the run is now {now['run']} (was {saved.get('run')})")
    elif saved.get("models") != now["models"]:
        changes.append(f"the fold models of the run {now['run']} changed (retrained or replaced)")
    for key in ("chunk_rows", "ensemble", "precision"):
        if saved.get(key) != now[key]:
            changes.append(f"{key} is now {now[key]} (was {saved.get(key)}; pass the same value to resume)")
    return changes


class _Parts:
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
        from attnpool.training.inputs import write_table

        if not self._manifest_written:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.folder / "manifest.json", self.manifest)
            self._manifest_written = True
        atomic_write(self.path(index), lambda tmp: write_table(frame, tmp, like=self.path(index), header=index == 0))

    def finish(self, count: int) -> None:
        """Join parts ``0..count-1`` in order into the output (through a temporary file), then delete the folder."""
        paths = [self.path(i) for i in range(count)]
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            raise RunError(f"{self.folder} lacks {', '.join(missing[:5])}; delete the folder and predict again")
        if count == 1:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            os.replace(paths[0], self.output)
        elif self.suffix == ".parquet":
            atomic_write(self.output, lambda tmp: _join_parquet(paths, tmp))
        else:
            atomic_write(self.output, lambda tmp: _join_text(paths, tmp))
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
    """One row group per part; column types unified (a part whose id column is all missing has type null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.unify_schemas([pq.read_schema(p) for p in paths])
    with pq.ParquetWriter(out, schema) as writer:
        for path in paths:
            writer.write_table(pq.read_table(path).cast(schema))


def _progress_bar(input_file: Path, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=_count_rows(input_file) if progress else None, desc="predict", unit="rows",
                disable=not progress, dynamic_ncols=True)


def _redirect_logging(progress: bool):
    """Log lines printed above the progress bar instead of through it."""
    if not progress:
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


def _count_rows(path: Path, sample: int = 1 << 26) -> int | None:
    """The rows of a file, cheaply: Parquet metadata, else its line breaks (CSV/TSV: less the header).

    Line breaks are counted in the first ``sample`` bytes (64 MiB) and extrapolated to the file's size beyond.
    """
    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        size, lines, done, last = path.stat().st_size, 0, 0, b"\n"
        with path.open("rb") as f:
            while done < sample and (block := f.read(1 << 22)):
                lines, done, last = lines + block.count(b"\n"), done + len(block), block[-1:]
        lines = round(lines * size / done) if done < size else lines + (last != b"\n")
        return max(lines - (path.suffix.lower() != ".jsonl"), 0)
    except Exception:  # noqa: BLE001 - only a progress bar's total: unknown rather than an error here
        return None
