"""``explain_file``: explain a train run (or a saved model) on a data file and write the report, as the CLI does."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from attnpool.data import DataError, build_texts, check_columns, read_table
from attnpool.data.context import is_context_pair, tokenize_rows
from attnpool.data.prediction import PredictionInputs, load_prediction_inputs
from attnpool.data.writers import refuse_input_as_output, refuse_output_in_folder
from attnpool.explanations.core import Explanation, explain
from attnpool.explanations.page import report_paths, write_report
from attnpool.json_values import is_missing
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.options import file_path, whole_number
from attnpool.pooling.registry import unknown_pooler_in
from attnpool.precision import inference_device
from attnpool.prediction.positions import check_max_length, model_max_length, run_max_length
from attnpool.runs.run import RUN_FILE, Run, RunError
from attnpool.training.console_logging import SUMMARY  # the line --quiet keeps

logger = logging.getLogger("attnpool.explain")


def _load_model(folder: Path):
    try:
        model = AttnPoolForSequenceClassification.from_pretrained(folder)
    except ValueError as err:  # a user's pooler not imported: the registry's message, with the folder it is in
        if (unknown := unknown_pooler_in(err)) is None:
            raise
        raise RunError(f"cannot load the model in {folder}: {unknown}") from err
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"{folder} holds no tokenizer ({err}); save the model with "
                                "model.save_pretrained(folder, tokenizer=tokenizer)") from err
    return model, tokenizer


def _column_values(frame, column: str | None, n: int) -> list[Any] | None:
    if not column or column not in frame.columns:
        return None
    return [None if is_missing(v) else v for v in frame[column].iloc[:n].tolist()]


def _check_numeric(labels: list[Any], column: str, path: str | Path) -> None:
    """Refuse the first label that is not a number (a regression model's labels are numbers)."""
    for row, value in enumerate(labels):
        try:
            if value is not None:
                float(value)
        except (TypeError, ValueError):
            raise DataError(f"{path}: column {column!r}, data row {row + 1}: {value!r} is not a number; this model's "
                            "labels are numbers: fix the value, leave the cell empty, or give another --label"
                            ) from None


def explain_file(
    source: str | Path,
    input_file: str | Path,
    html_path: str | Path,
    *,
    json_path: str | Path | None = None,
    limit: int | None = None,
    erasure_k: int = 5,
    text_cols: list[str] | str | None = None,
    label: str | None = None,
    max_length: int | None = None,
    fold: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    device: str | None = None,
) -> Explanation:
    """Explain the rows of a file with a run's model (or a saved model) and write the HTML and JSON reports.

    Args:
        source: A train run directory (``attnpool.explain_file`` also takes an opened :class:`~attnpool.Run` or any
            path object) (its first trained fold's model, or ``fold``; texts built from its
            ``config.yaml`` as in training, labels from its label column when the file has it), one ``fold_K``
            folder of it (that fold of the run), or a model folder saved with ``save_pretrained`` together with its
            tokenizer (then ``text_cols`` says where the text is).
        input_file: CSV, TSV, JSONL or Parquet.
        html_path: The HTML report (``~`` is the home folder, here and in the other paths).
        json_path: The JSON file; default: ``html_path`` with ``.json``.
        limit: Explain only the first ``limit`` rows, ``>= 1``.
        erasure_k: ``K`` of the erasure test, ``>= 0``.
        text_cols: For a model folder: one text column (a name alone is that column), two for a pair, more to
            join with the separator.
        label: The label column (default: the run's; for a model folder ``label`` when present).
        max_length: Truncation (default: the run's ``max_length``; 128 for a model folder), at most what the
            encoder reads (its position embeddings): a longer run's ``max_length`` is capped, with a warning.
        fold: Which fold's model of a run, a whole number ``>= 0`` (refused with a model folder, which holds one model).
        seed: Seed of the random erasure, ``>= 0``.
        batch_size: Rows per forward pass, ``>= 1``.
        device: ``cpu``, ``cuda``...; default: CUDA when available.

    Returns:
        The :class:`~attnpool.explanations.Explanation` that was written.

    Raises:
        FileNotFoundError: ``source`` is neither a run nor a model folder, or a file is missing.
        TypeError: ``input_file`` is not a path (a DataFrame: write it to a file first).
        ValueError: Options that do not fit the source (``text_cols`` with a run; none, or ``fold``, with a model
            folder, or another fold than a ``fold_K`` folder's), a ``max_length`` below 1 or over what the encoder
            reads, a ``limit``, ``erasure_k``, ``fold``, ``seed`` or ``batch_size`` that is no whole number or out of
            range, a ``device`` torch does not know or this machine lacks, a
            report path that is the input file or lies in the run's folder, bad data
            (:class:`~attnpool.data.DataError`), or a pooler without token weights.
    """
    limit = None if limit is None else whole_number(limit, "--limit", 1, " (rows explained)")
    input_file = file_path(input_file, "input_file").expanduser()  # "~/data.csv": in the home folder, as a shell
    text_cols = [text_cols] if isinstance(text_cols, str) else text_cols  # one column, not its letters
    check_max_length(max_length)
    erasure_k, batch_size, seed = _check_options(erasure_k, batch_size, seed)  # before the model loads
    fold = None if fold is None else whole_number(fold, "--fold", 0, " (the run's fold to explain with)")
    device = inference_device(device)  # a missing CUDA device said now, not once the input is read and the model loaded
    source, fold = _fold_folder(Path(source).expanduser(), fold)
    html_path, json_path = report_paths(html_path, json_path)  # a wrong output path fails now, not after the run
    refuse_input_as_output(input_file, html_path, "--output", "HTML report")
    refuse_input_as_output(input_file, json_path, "--json", "JSON report")
    if Run.is_run(source):  # a report inside the run could replace its own files, as predict refuses too
        for path, option, what in ((html_path, "--output", "HTML report"), (json_path, "--json", "JSON report")):
            if path is not None:
                refuse_output_in_folder([source], path, option, what)
        if text_cols:
            raise ValueError("--text-cols is for a model folder; a run builds its texts as in training (config.yaml)")
        model_dir, frame, first, second, label_col, id_col, length, context_pairs = _run_inputs(
            source, input_file, fold, label, max_length, limit)
        model, tokenizer = _load_model(model_dir)
        length = _run_max_length(model, model_dir, max_length, length)
    elif (source / "config.json").is_file():
        if not text_cols:
            raise ValueError(f"{source} is a model folder: say which columns hold the text with --text-cols COL "
                             "[COL ...] (one, two for a text pair, more to join with the separator)")
        if fold is not None:  # a folder holds one model: explaining it as "fold N" would mislabel the report
            raise ValueError(f"--fold {fold} picks a fold of a train run directory; {source} is one model folder "
                             "(saved with save_pretrained): drop --fold, or give the run directory as --run")
        model_dir = source
        model, tokenizer = _load_model(source)
        frame = read_table(input_file, text_columns=[*text_cols, "id"])
        check_columns(frame, [*text_cols, label], str(input_file))
        first, second, _ = build_texts(frame, text_cols, None, sep_token=tokenizer.sep_token or "[SEP]")
        label_col, id_col, context_pairs = label or "label", "id", False
        length = model_max_length(max_length, model, source)  # 128, or less when the encoder reads less
    else:
        raise FileNotFoundError(f"{source} is neither a train run directory (no {RUN_FILE}) nor a saved model folder "
                                "(no config.json); give the --output-dir of attnpool train (with --fold K for one "
                                "fold), one fold_K folder of it, or a save_pretrained folder")
    n = len(first) if limit is None else min(limit, len(first))
    model.to(device)
    ids = _column_values(frame, id_col, n)
    if label is not None:  # asked for by name: a typo must not silently explain without labels
        check_columns(frame, [label], str(input_file))
    labels = _column_values(frame, label_col, n)
    if labels is not None and model.config.problem_type == "regression":
        _check_numeric(labels, label_col, input_file)  # before the forward and erasure passes, not after
    explanation = explain(model, tokenizer, first[:n], text_pairs=None if second is None else second[:n],
                          labels=labels, max_length=length, erasure_k=erasure_k,
                          seed=seed, batch_size=batch_size, context_pairs=context_pairs)
    explanation.source = str(model_dir)
    for example, row_id in zip(explanation.examples, ids or [None] * n, strict=True):
        example.id = None if row_id is None else str(row_id)
    html_path, json_path = write_report(explanation, html_path, json_path)
    logger.log(SUMMARY, "explained %d examples with %s: wrote %s and %s", n, model_dir, html_path, json_path)
    return explanation


def _check_options(erasure_k: int, batch_size: int, seed: int) -> tuple[int, int, int]:
    """The numbers as ints; bad ones (no whole number, out of range) refused by the CLI flags that give them."""
    return (whole_number(erasure_k, "--erasure-k", 0, " (0 skips the erasure test)"),
            whole_number(batch_size, "--batch-size", 1), whole_number(seed, "--seed", 0))


def _fold_folder(source: Path, fold: int | None) -> tuple[Path, int | None]:
    """A run's ``fold_K`` folder as its run and fold ``K`` (as ``attnpool export`` takes it); else as given.

    A ``fold_K``-like folder outside a run stands for the model folder in it.
    """
    if Run.is_run(source) or (source / "config.json").is_file() or not (source / "model" / "config.json").is_file():
        return source, fold
    match = re.fullmatch(r"fold_(\d+)", source.name)
    if match is None or not Run.is_run(source.parent):
        if fold is not None:
            raise ValueError(f"--fold {fold} picks a fold of a train run directory; {source} holds one model (in "
                             f"{source / 'model'}): drop --fold")
        return source / "model", None
    chosen = int(match.group(1))
    if fold is not None and fold != chosen:
        raise ValueError(f"--fold {fold} disagrees with {source}, the folder of fold {chosen}; drop --fold, or give "
                         f"the run directory {source.parent} with --fold {fold}")
    return source.parent, chosen


def _run_inputs(run_dir: Path, input_file: str | Path, fold: int | None, label: str | None,
                max_length: int | None, limit: int | None):
    """A run's texts for a file, built exactly as in training, checked against the run's own tokenisation."""
    run = Run.open(run_dir)
    info, cfg = run.info(), run.config()
    model_dir = run.model_dir(run.select_fold(fold))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # Both read the rows, check them, and apply the run's preset and template to cfg; with a limit only the
    # first `limit` rows are read and tokenised, however large the file.
    # the labels checked against the run's classes are those explain reads: --label's column, else the run's
    if limit is None:
        frame, encodings = load_prediction_inputs(cfg, info, input_file, tokenizer, log=logger, label=label,
                                                  command="explain")
    else:
        inputs = PredictionInputs(cfg, info, input_file, tokenizer, log=logger, label=label, command="explain")
        frame, encodings = inputs.encode(next(iter(inputs.chunks(limit))))
        inputs.log_summary()
        cfg = inputs.cfg
    first, second, _ = build_texts(frame, cfg.text_cols or None, cfg.template, sep_token=tokenizer.sep_token or "[SEP]")
    n = len(first) if limit is None else min(limit, len(first))
    context_pairs = is_context_pair(cfg.group_context, cfg.text_cols, cfg.template)
    ours = tokenize_rows(tokenizer, first[:n], None if second is None else second[:n], cfg.max_length,
                         context_pair=context_pairs)["input_ids"]
    if [list(x) for x in ours] != [list(x) for x in encodings["input_ids"][:n]]:
        raise ValueError(f"{run_dir}: the texts rebuilt for explain differ from the ones prediction builds; this is "
                         "a bug in attnpool, please report it")
    return (model_dir, frame, first, second, label or cfg.label, info.get("id_col") or cfg.id_col,
            cfg.max_length if max_length is None else max_length, context_pairs)


def _run_max_length(model: Any, model_dir: Path, asked: int | None, length: int) -> int:
    """A run's ``max_length``: ``--max-length`` refused over what the encoder reads, the run's own capped there."""
    if asked is not None:
        return model_max_length(asked, model, model_dir)
    return run_max_length(length, model, model_dir, "explain", logger)
