"""``predict``: ensemble a run's fold models over a file of any size, chunk by chunk, resumable.

Files larger than memory stream through in chunks of rows: each chunk is read, tokenised, predicted in
length-sorted batches (:mod:`attnpool.prediction.engine`) and written as one part of the output
(:mod:`attnpool.prediction.parts`), and the parts are joined at the end, so memory is bounded by the chunk size and
an interrupted prediction resumes at the first unfinished chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnpool.data import SUPPORTED_EXTENSIONS, DataError
from attnpool.data.parquet import require_pyarrow
from attnpool.data.prediction import PredictionInputs, context_views
from attnpool.data.writers import refuse_input_as_output, refuse_output_in_folder
from attnpool.model.encoders import position_limit
from attnpool.options import file_path, whole_number
from attnpool.precision import inference_device, precision_reason, resolve_precision
from attnpool.prediction.blend import LONE_WEIGHTS, RunBlend, refuse_repeated_runs
from attnpool.prediction.engine import FoldEnsemble
from attnpool.prediction.onnx_engine import (
    CALIBRATION_ROWS,
    INT8_TOLERANCE,
    OnnxFoldEnsemble,
    check_scores,
    check_tolerance,
)
from attnpool.prediction.parts import Parts, manifest
from attnpool.prediction.positions import cap_max_length, saved_position_limit
from attnpool.prediction.progress import progress_bar, redirect_logging
from attnpool.runs.files import check_writable
from attnpool.runs.lock import RunLock, live_holder
from attnpool.runs.run import Run, RunError
from attnpool.runs.tables import prediction_columns
from attnpool.threads import restores_threads, set_threads
from attnpool.training.console_logging import SUMMARY  # the line --quiet keeps

logger = logging.getLogger("attnpool.predict")


class ScoresNotFinite(RunError):
    """The models' scores of some input rows are NaN or infinite (a precision that overflows, a diverged model)."""


@dataclass(frozen=True)
class PredictionSummary:
    """What :func:`predict` wrote; the predictions themselves are in the file (read it back with pandas)."""

    output: Path  # the predictions file
    rows: int  # rows predicted, = rows of the input
    chunks: int  # chunks the input was read in
    resumed_chunks: int = 0  # chunks taken from an interrupted prediction instead of being predicted again


@restores_threads
def predict(run_dir: str | Path | Sequence[str | Path], input_file: str | Path, output_file: str | Path, *,
            batch_size: int = 128, ensemble: str = "mean", device: str | None = None, progress: bool = True,
            chunk_rows: int = 100_000, resume: bool = False, precision: str = "auto",
            folds: int | Sequence[int] | None = None, backend: str = "torch", quantize: str = "none",
            int8_tolerance: float = INT8_TOLERANCE, threads: int | None = None,
            blend_weights: Sequence[float] | None = None, context_view: str = "with") -> PredictionSummary:
    """Predict a file with every fold model of a run, ensemble, and write the output atomically, chunk by chunk.

    Given several runs, each predicts as its folds' ensemble and the runs are blended into one prediction
    (:class:`attnpool.prediction.blend.RunBlend`: class probabilities averaged; regression scores standardised by
    each run's out-of-fold predictions, averaged, and put back on the runs' mean scale). The runs must share the
    task (and classes); each reads the file with its own text construction and tokenizer. The blend's out-of-fold
    score, on the rows every run validated on, is logged next to each run's.

    The output keeps the input's order and its id column (the training file's, else the config's ``id_col``, as
    serve and explain take it; in every chunk, empty where rows lack it; integers in a Parquet or JSONL file stay
    integers; an input without it is predicted with a warning, its rows matched by their order); regression writes
    ``prediction`` (one column per target), classification writes the predicted label and one probability column
    per class.

    The input is read ``chunk_rows`` rows at a time, so memory is bounded by the chunk size whatever the file size.
    Each chunk is tokenised, predicted in length-sorted batches and written as a part,
    ``OUTPUT.parts/part-00000.csv`` (the output's format), next to a ``manifest.json`` that records what the parts
    were computed from (input file, its size and modification time, ``chunk_rows``, the run's fold models, the
    SHA-256 of its config, run info, fold metrics and, where they scale the scores, out-of-fold files, ``ensemble``,
    the resolved ``precision``), and a ``chunk-00000.json`` with the count and a hash of the chunk's input rows.
    Rows whose scores are not finite stop the prediction (:class:`ScoresNotFinite`) before their part is written.
    A run's ``max_length`` over its encoder's position embeddings is capped with a warning, as ``serve`` does. At
    the end the parts are joined in order into a temporary file that is renamed to ``output_file``, and the parts
    folder is deleted. An existing ``output_file`` is replaced.

    If the prediction is interrupted (killed, out of memory...), ``resume=True`` keeps the finished parts and
    predicts only the rest; it refuses when anything in the manifest changed, or a finished chunk's input rows now
    read otherwise (another attnpool's reader). Without ``resume``, finished parts
    of an interrupted prediction are never deleted: the call refuses. When the input turns out to be bad
    (a ``DataError`` in some chunk), the parts this call started (none were finished before it, resume or not)
    are deleted, since the input has to be edited, which makes them stale.

    Args:
        run_dir: The ``--output-dir`` of ``attnpool train``, or several of them to blend (a list of one is that
            run alone).
        input_file: CSV, TSV, JSONL or Parquet with the text columns the run was trained on (``~``: the home
            folder, in ``output_file`` too).
        output_file: Where to write (format by extension); written to a temporary name, then renamed.
        batch_size: Rows per forward pass.
        ensemble: ``mean`` or ``score`` (weights proportional to each fold's validation metric,
            clipped at 0; a fold without one weighs 0, and the folds weigh equally, with a warning, when none
            scored above 0).
        device: ``cpu``, ``cuda``...; default: CUDA when available.
        progress: Show a progress bar over the rows. Its total is exact for Parquet; for CSV/TSV and JSONL it is
            the count of lines (extrapolated from the first 64 MiB of larger files), an estimate when quoted fields
            hold line breaks or lines are blank.
        chunk_rows: Rows read, tokenised and predicted at a time.
        resume: Continue an interrupted prediction to the same ``output_file``.
        precision: ``auto`` (bf16 where it is native: a GPU of compute capability 8.0 on, or a CPU with AMX or
            AVX512-BF16; else fp32; see :func:`attnpool.precision.resolve_precision`), ``fp32``, ``bf16`` or
            ``fp16``: the forward pass runs under ``torch.autocast`` with that dtype (on a CPU, over copies of the
            models whose linear weights are stored in it: the same outputs). bf16 or fp16 asked for on a CPU that
            only emulates it is predicted, with a warning: it is several times slower than fp32 there.
        folds: Which trained folds to ensemble (one or several fold ids); default: all of them.
        backend: ``torch`` (default), or ``onnx``: ONNX Runtime on each fold's graph, exported once into the run
            (``fold_K/onnx/``) and reused (the graphs are float32 or int8: ``precision`` bf16 or fp16 is refused).
        quantize: With ``backend="onnx"``: ``none`` or ``int8`` (dynamic quantization; refused, with the figure,
            when the scores written (a blend's, blended) depart from float32's by more than ``int8_tolerance`` on
            the first 128 rows of the input, whatever ``chunk_rows``).
        int8_tolerance: The largest |int8 - float32| difference of a score accepted on the calibration rows.
        threads: CPU threads of the model (PyTorch's or ONNX Runtime's intra-op pool); default: one per physical
            core (:func:`attnpool.threads.set_threads`).
        blend_weights: With several runs, one non-negative weight per run (normalised); default: equal.
        context_view: For a run trained with ``group_context``: ``with`` (each row's context from the file),
            ``without`` (every context left empty) or ``both`` (the mean of the two views' scores: test-time
            augmentation for a run trained with ``group_context_dropout``). Runs without a context read the rows as
            they were trained.

    Returns:
        A :class:`PredictionSummary` (output path, rows, chunks), not the predictions: they may not fit in memory.

    Raises:
        RunError: Not a run, no such trained fold, a corrupt fold model; runs that cannot be blended (another task,
            other classes, a fold without its out-of-fold file); parts of an interrupted prediction without
            ``resume``; with ``resume``, parts computed from another input, run or options, or from other rows of
            the input; another process writing the same output; ``ensemble="score"`` with a fold that has no
            validation metric; :class:`ScoresNotFinite`, rows whose scores are NaN or infinite.
        attnpool.data.DataError: A bad input file (missing columns, unseen labels, not UTF-8...), an output
            extension other than .csv, .tsv, .jsonl or .parquet, an output that is the input file or in a run folder;
            a Parquet input or output without pyarrow (``pip install 'attnpool[parquet]'``).
        TypeError: ``input_file`` or ``output_file`` is not a path (a DataFrame: write it to a file first).
        ValueError: Bad ``ensemble``, ``precision``, ``chunk_rows``, ``batch_size`` (a whole number >= 1, checked
            before the models load) or ``context_view`` (or one other than ``with`` for runs trained without a group
            context); ``precision`` bf16 or fp16 with ``backend="onnx"``.
    """
    sources = [run_dir] if isinstance(run_dir, (str, Path)) else list(run_dir)
    blended = len(sources) > 1  # a list of one run is that run alone, as in serve()
    input_file, output_file = file_path(input_file, "input_file"), file_path(output_file, "output_file")
    runs = [Run.open(r) for r in sources]
    refuse_repeated_runs(sources)  # one run twice would weigh double in the blend (named as the user wrote it)
    refuse_input_as_output(input_file, output_file)  # before the lock and the parts: nothing written
    refuse_output_in_folder([run.path for run in runs], output_file)  # its oof/folds files replaced: a broken run
    check_writable(output_file)  # under a file, or a folder not writable: now, not at the lock or the end
    if not runs:
        raise ValueError("give a run to predict with (or several to blend)")
    if blend_weights is not None and not blended:
        raise ValueError(LONE_WEIGHTS)
    # the runs' configs are read for another view only: an incomplete run is refused below, after the output's lock
    has_context = context_view == "with" or any(run.config().group_context for run in runs)
    views = context_views(context_view, has_context, ", ".join(str(run.path) for run in runs))
    device = inference_device(device)
    threads = set_threads(threads)
    if backend == "torch":
        logger.info("precision: %s; %d CPU threads", precision_reason(precision, device), threads)
    elif backend == "onnx" and precision not in ("auto", "fp32"):  # ONNX Runtime would run float32 without a word
        raise ValueError(f"--precision {precision} needs --backend torch (ONNX Runtime runs the float32 graph, or "
                         "the int8 one with --quantize int8); drop --precision or use --backend torch")
    precision = resolve_precision(precision, device)
    chunk_rows = whole_number(chunk_rows, "--chunk-rows", 1, " (rows read at a time)")  # numpy's integers too
    batch_size = whole_number(batch_size, "--batch-size", 1, " (rows per forward pass, e.g. 128)")  # before loading
    if output_file.suffix.lower() not in SUPPORTED_EXTENSIONS:  # else CSV bytes under another format's name
        raise DataError(f"{output_file}: unsupported output extension {output_file.suffix or '(none)'!r}; the "
                        f"output's format follows its extension: {', '.join(SUPPORTED_EXTENSIONS)}")
    if output_file.suffix.lower() == ".parquet":  # pyarrow, an optional extra: now, not when the first part is written
        _require_parquet_writer(output_file)
    if quantize != "none":
        check_tolerance(int8_tolerance)  # now, not after the folds' graphs are exported and quantized
    with RunLock.for_file(output_file, purpose="predict"):  # before anything is read: a second writer stops at once
        members = [_load_ensemble(run, folds, ensemble, backend, quantize, threads) for run in runs]
        chosen = [m.folds for m in members]
        blend = RunBlend.read(runs, chosen, blend_weights) if blended else None
        info = runs[0].info()
        inputs = [[PredictionInputs(run.config(), run.info(), input_file, m.tokenizer, log=logger,
                                    with_context=v, typed_ids=True, run_name=str(run.path))
                   for v in (views if run.config().group_context else (True,))]
                  for run, m in zip(runs, members, strict=True)]
        for run, member, member_inputs in zip(runs, members, inputs, strict=True):
            # as serve: a run's max_length capped at its encoder's positions (ONNX: read from the fold's config)
            limit = (position_limit(member.models[0]) if isinstance(member, FoldEnsemble)
                     else saved_position_limit(run.model_dir(member.folds[0]), log=logger))
            capped = cap_max_length(member_inputs[0].cfg.max_length, limit, run.path, command="predict", log=logger)
            for view_inputs in member_inputs:
                view_inputs.cfg.max_length = capped
        streams = [i[0].chunks(chunk_rows) for i in inputs]  # check the path now; read lazily
        computed_as = precision if backend == "torch" else f"{backend}-{quantize}"
        parts = Parts(output_file, manifest(input_file, runs if blended else runs[0], chosen if blended else chosen[0],
                                            chunk_rows, ensemble, computed_as,
                                            None if blend is None else blend.weights.tolist(), context_view))
        finished = parts.open(resume)
        # the id column, as serve and explain take it: the training file's, else the configured one (default "id")
        id_col = info.get("id_col") or inputs[0][0].cfg.id_col
        forward = {"batch_size": batch_size, "device": device, "precision": precision}
        tolerance = int8_tolerance if quantize != "none" else None  # checked before the first chunk predicted
        bar = progress_bar(input_file, progress)
        rows = count = 0
        try:
            with bar, redirect_logging(progress):
                while (chunks := _next_chunks(streams)) is not None:
                    index, rows, count = count, rows + len(chunks[0]), count + 1
                    if index == 0:  # every part has the columns of the first (the reader gives every chunk the id)
                        id_col = (id_col if id_col in chunks[0]
                                  else _warn_no_id(input_file, id_col, chunks[0].columns, bool(info.get("id_col"))))
                    if index in finished:  # the same rows as when it was predicted, else a refusal
                        parts.check(index, chunks[0])
                        bar.update(len(chunks[0]))
                    else:
                        if tolerance is not None:  # on the input's first rows, whatever the chunk size
                            _check_int8(members, inputs, blend, tolerance, batch_size)
                            tolerance = None
                        parts.write(index, _chunk_output(chunks, members, inputs, blend, id_col, bar, forward,
                                                         rows - len(chunks[0])), source=chunks[0])
                    del chunks  # before the next chunk is read: one chunk (of each run) in memory
                bar.total = bar.n  # the counted lines were an estimate
        except (DataError, ScoresNotFinite):
            if not finished:  # this call's own parts (of a bad input that has to be edited): they would block a retry
                parts.discard()
            raise
        parts.finish(count)
    for member_inputs in inputs:
        for view_inputs in member_inputs:
            view_inputs.log_summary()
    resumed = len([i for i in finished if i < count])
    how = precision if backend == "torch" else f"onnxruntime, {'float32' if quantize == 'none' else quantize}"
    models = sum(len(m.folds) for m in members)
    logger.log(SUMMARY, "wrote %d predictions of %d fold model%s%s (%s ensemble, %s) to %s in %d chunk(s)%s", rows,
                models, "s" * (models != 1), f" of {len(runs)} runs, blended" if blended else "", ensemble, how,
                output_file, count, f", {resumed} of them resumed from {parts.folder}" if resumed else "")
    return PredictionSummary(output=output_file, rows=rows, chunks=count, resumed_chunks=resumed)


def _require_parquet_writer(output_file: Path) -> None:
    """Refuse a Parquet output where pyarrow (``attnpool[parquet]``) is not installed, saying how to get it."""
    try:
        require_pyarrow(output_file)
    except DataError:
        raise DataError(f"{output_file}: writing Parquet needs the pyarrow package; install it (`pip install "
                        "'attnpool[parquet]'`) or write a .csv, .tsv or .jsonl output") from None


def _warn_no_id(input_file: Path, id_col: str | None, columns, trained_with_ids: bool) -> None:
    """Warn that the input lacks the run's id column (``None``: the predictions are written without ids).

    Only where the training file had one, or the input has it in another case: a run trained without ids (the
    config's default ``id`` never found) predicts files without them as it was trained, silently.
    """
    names = [str(c) for c in columns]
    near = [c for c in names if id_col and c.lower() == id_col.lower()]
    if id_col and (trained_with_ids or near):
        logger.warning("%s: no id column %r (the run's id column)%s; the columns present: %s. The predictions are "
                       "written without ids: match them to the input rows by their order (output row N is data row N "
                       "of the input)%s", input_file, id_col, f", but {near[0]!r} differs only in case" if near else "",
                       ", ".join(names), f"; to keep the ids, rename {near[0]!r} to {id_col!r}" if near else "")


def _load_ensemble(run: Run, folds: int | Sequence[int] | None, how: str, backend: str,
                   quantize: str, threads: int) -> FoldEnsemble | OnnxFoldEnsemble:
    if backend == "torch":
        if quantize != "none":
            raise ValueError(f"--quantize {quantize} needs --backend onnx (the torch backend runs the saved weights)")
        member = FoldEnsemble.load(run, folds, how)
    elif backend == "onnx":
        logger.info("ONNX Runtime (%s); %d CPU threads", "float32" if quantize == "none" else quantize, threads)
        member = OnnxFoldEnsemble.load(run, folds, how, quantize, threads=threads)
    else:
        raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")
    if folds is None:
        _warn_incomplete(run, member.folds)
    if how == "score":
        logger.info("--ensemble score: fold weights of %s: %s", run.path,
                    ", ".join(f"fold {f} {w:.3f}" for f, w in zip(member.folds, member.weights, strict=True)))
    return member


def _warn_incomplete(run: Run, used: list[int]) -> None:
    """Warn that ``run`` has fewer fold models than folds (no ``folds`` given): one still training, or partial."""
    if not (missing := [str(f) for f in range(run.info().get("num_folds") or 0) if f not in used]):
        return
    holder = live_holder(run.path) or {}  # the train writing it, if one does
    now = f"; its lock held by attnpool {holder.get('purpose')}, PID {holder.get('pid')} on host {holder.get('host')}"
    now = now if holder else ""
    logger.warning("%s: using %d of its %d folds: the run is incomplete (fold(s) %s not trained yet%s); predict "
                   "again once they are (attnpool train --output-dir %s --resume), or choose folds with --folds",
                   run.path, len(used), len(used) + len(missing), ", ".join(missing), now, run.path)


def _next_chunks(streams: list) -> list | None:
    """The next chunk of each run's stream (the same rows, read with each run's columns), or ``None`` at the end.

    A new list each time, read after the caller dropped the last one (``zip`` and ``enumerate`` would keep the
    chunks of the previous step alive while reading the next).
    """
    chunks = [next(stream, None) for stream in streams]
    return None if chunks[0] is None else chunks


def _check_int8(members: list, inputs: list, blend: RunBlend | None, tolerance: float, batch_size: int) -> None:
    """Refuse int8 whose written scores depart from float32's by more than ``tolerance`` on the input's first rows.

    The first :data:`CALIBRATION_ROWS` rows of the input (read apart from the chunks: whatever ``chunk_rows``), each
    run's views averaged and the runs blended as :func:`_chunk_output` does: a blend rescales each run's scores, so
    a run's error that passes alone can be magnified in what is written. Each run's own figure is in the message.
    """
    references, quantized = [], []
    for member, member_inputs in zip(members, inputs, strict=True):
        calibration = next(iter(member_inputs[0].chunks(CALIBRATION_ROWS)), None)
        if calibration is None:
            return
        views = [member.compare(_encode_apart(v, calibration), batch_size=batch_size) for v in member_inputs]
        references.append(sum(reference for reference, _ in views) / len(views))
        quantized.append({size: sum(q[size] for _, q in views) / len(views) for size in views[0][1]})
    if blend is None:
        check_scores(references[0], quantized[0], tolerance=tolerance, quantize=members[0].quantize)
        return
    alone = ", ".join(f"{max(float(np.max(np.abs(s - r), initial=0.0)) for s in q.values()):.3g}"
                      for r, q in zip(references, quantized, strict=True))
    blended = {size: blend.combine([q[size] for q in quantized]) for size in quantized[0]}
    check_scores(blend.combine(references), blended, tolerance=tolerance, quantize=members[0].quantize,
                 what=f", blended as written (each of the {len(members)} runs alone: {alone})")


def _encode_apart(view_inputs: PredictionInputs, chunk) -> dict[str, list]:
    """``chunk``'s token lists, left out of the counts the inputs log (its rows are counted when predicted)."""
    counts = dict(view_inputs.counts)
    try:
        return view_inputs.encode(chunk)[1]
    finally:
        view_inputs.counts = counts


def _chunk_output(chunks: list, members: list, inputs: list, blend: RunBlend | None, id_col: str | None,
                  bar, forward: dict, offset: int = 0):
    """The written columns of one chunk: every run's fold ensemble over each of its views, blended.

    In a function of its own so that the chunk's frames and token lists are freed when it returns. ``offset``: the
    input rows before this chunk, which name the rows whose scores are not finite (:class:`ScoresNotFinite`).
    """
    frame, scores = None, []
    for j, (member, member_inputs) in enumerate(zip(members, inputs, strict=True)):
        seen = []  # the member's scores of each view of the rows (one but with context_view both)
        for k, view_inputs in enumerate(member_inputs):
            member_frame, encodings = view_inputs.encode(chunks[j])
            frame = member_frame if frame is None else frame
            # the bar counts each row once, when its last run's last view is done
            last = j == len(members) - 1 and k == len(member_inputs) - 1
            seen.append(member.scores(encodings, on_batch=bar.update if last else None, **forward))
            del member_frame, encodings
        scores.append(seen[0] if len(seen) == 1 else sum(seen) / len(seen))
    combined = scores[0] if blend is None else blend.combine(scores)
    _check_finite(combined, offset, forward["precision"])
    return _output_frame(members[0].task, inputs[0][0].info, id_col, frame, combined)


def _check_finite(scores, offset: int, precision: str) -> None:
    """Raise :class:`ScoresNotFinite` naming the input rows (data rows, from 1) whose scores are NaN or infinite.

    Unchecked, a NaN was written as an empty value and a class picked for it (the argmax of a NaN row is the first).
    """
    values = np.asarray(scores, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
    if not len(bad):
        return
    rows = ", ".join(str(offset + i + 1) for i in bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
    fix = ("predict with --precision fp32 or bf16 (float16 overflows where they do not); if that does not help, "
           "check the models" if precision == "fp16" else "predict with --precision fp32; if that does not help, "
           "check the models: their weights may hold NaN (a diverged training)")
    raise ScoresNotFinite(f"predict: the models' scores of data rows {rows} of the input are not finite (NaN or "
                          f"infinity; precision {precision}), so they have no prediction; nothing was written for "
                          f"them: {fix}")


def _output_frame(task: str, info: dict, id_col: str | None, frame, scores):
    """The written columns of a chunk: the id (empty where the chunk lacks it), then predictions, probabilities."""
    out = frame.iloc[:, :0].copy()
    if id_col:
        out[id_col] = frame[id_col] if id_col in frame else None
    out = out.reset_index(drop=True)
    for name, column in prediction_columns(task, info.get("classes"), scores, with_labels=True).items():
        out[name] = column
    return out
