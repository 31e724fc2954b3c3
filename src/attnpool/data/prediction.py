"""A file to predict, read and tokenised as the run's training data was (the same text construction and checks).

With ``group_context`` (:mod:`attnpool.data.context`) a row's context comes from the rows of the file predicted, all
of them, whatever the chunk the row is read in (or from the rows of one served request: ``context_from="chunk"``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnpool.config import TrainConfig
from attnpool.data.columns import check_columns, text_fields
from attnpool.data.context import add_group_context, context_text_spec, fit_context
from attnpool.data.errors import DataError
from attnpool.data.numbers import class_key
from attnpool.data.parquet import range_index, require_pyarrow
from attnpool.data.pppm import PPPM_FIELDS, cpc_titles, load_pppm
from attnpool.data.readers import iter_table
from attnpool.data.task import apply_preset, context_columns, encode_texts, frame_and_template, log_counts
from attnpool.json_values import is_missing
from attnpool.tasks import label_text

# how data.columns.check_columns ends its message: predict has no column options, so a run's error says what to do
COLUMNS_ADVICE = ". Fix the column names in the options or in the file header"
POOL_CHUNK_ROWS = 100_000  # rows read at a time for the group context's values of a whole file
CONTEXT_VIEWS = {"with": (True,), "without": (False,), "both": (True, False)}  # --context-view: with_context flags


def context_views(context_view: str, has_context: bool, where: str) -> tuple[bool, ...]:
    """The views of the rows a prediction averages, as ``with_context`` flags (``both``: with, then without).

    Raises:
        ValueError: An unknown view; a view other than ``with`` for ``where``, run(s) trained without a group context.
    """
    if context_view not in CONTEXT_VIEWS:
        raise ValueError(f"context_view must be one of {', '.join(CONTEXT_VIEWS)}, got {context_view!r}")
    if context_view != "with" and not has_context:
        raise ValueError(f"context_view {context_view}: {where} trained without a group context (--group-context), "
                         "so the rows have one view only; drop --context-view")
    return CONTEXT_VIEWS[context_view]


def load_prediction_inputs(cfg: TrainConfig, info: dict[str, Any], path: str | Path, tokenizer,
                           log: logging.Logger, label: str | None = None, command: str = "predict"):
    """Read and tokenise a file to predict, with the run's text construction; check labels it may carry.

    ``label``: the column of labels to check (default: the run's); ``command``: who reads the file (``predict``,
    ``explain``), for the error's advice.
    """
    cfg = apply_preset(cfg)
    # an unknown PPPM code is named as unknown to the run's titles, as PredictionInputs names it
    frame, template = frame_and_template(cfg, str(path), split="test", titles_name=run_titles_name(cfg))
    cfg.template = cfg.template or template
    frame = _with_context(cfg, frame, frame, path)
    _check_prediction_rows(cfg, info, frame, path, label, command)
    frame, shortened = _fit_context(cfg, tokenizer, frame)
    encodings, counts = encode_texts(tokenizer, frame, cfg, fitted=True)
    counts["truncated"] += shortened
    log_counts(log, str(path), counts, cfg.max_length)
    return frame, encodings


def run_titles_name(cfg: TrainConfig) -> str:
    """What a PPPM error calls the CPC titles of a run (its ``data_dir``'s, the copy it was trained with)."""
    return f"the CPC titles this run was trained with ({Path(cfg.data_dir or '', 'cpc_texts.csv')})"


def _fit_context(cfg: TrainConfig, tokenizer, frame) -> tuple[Any, int]:
    """``(frame, rows shortened)``: with ``group_context``, the rows' contexts fitted (:func:`fit_context`).

    Fitted in the rows returned, so that whoever rebuilds the texts from them (explain, the served word weights)
    gets the contexts tokenised.
    """
    if not cfg.group_context:
        return frame, 0
    frame, shortened = fit_context(tokenizer, frame, cfg.text_cols or None, cfg.template, cfg.max_length,
                                   sep=tokenizer.sep_token or "[SEP]")
    return frame, len(shortened)


def _with_context(cfg: TrainConfig, frame, pool, path: str | Path):
    """With ``group_context``, ``frame`` with each row's context from the ``pool`` rows; else ``frame``.

    ``cfg``'s text fields are made to name the context too, so that whoever rebuilds the texts from ``cfg`` and the
    rows (explain, the served word weights) gets the texts that were tokenised.
    """
    if not cfg.group_context:
        return frame
    check_columns(frame, context_columns(cfg), str(path))
    text_cols, cfg.template = context_text_spec(cfg.text_cols, cfg.template)
    cfg.text_cols = text_cols or []
    return add_group_context(frame, cfg.group_context, cfg.group_context_by, pool=pool)


def _check_prediction_rows(cfg: TrainConfig, info: dict[str, Any], frame, path: str | Path,
                           label: str | None = None, command: str = "predict", run_name: str | None = None) -> None:
    """The text columns are there; labels, if the file has them, are ones the run knows.

    ``label``: the column of labels (default: the run's, ``cfg.label``); ``command``: who reads the rows, for the
    advice: ``predict`` needs no labels, ``explain`` shows them (another column may be given with ``--label``).
    ``run_name``: the run whose columns these are (its folder): a missing text column is named as that run's, with
    the columns it was trained on and the file's header to fix (not options a prediction does not have).
    """
    try:
        check_columns(frame, list(cfg.text_cols or []), str(path))
    except DataError as err:
        if run_name is None:
            raise
        trained = ", ".join(map(str, cfg.text_cols))
        raise DataError(f"{str(err).removesuffix(COLUMNS_ADVICE)}; run {run_name} was trained on columns {trained}: "
                        "add or rename them in the input file's header") from None
    classes = info.get("classes")
    label = label or cfg.label
    if classes and cfg.task in ("binary", "multiclass") and label in frame.columns:
        known = {class_key(c) for c in classes}
        values = {label_text(v): class_key(v) for v in frame[label].dropna()}
        unseen = sorted(text for text, key in values.items() if key not in known and text)  # "": a blank label
        if unseen:
            advice = ("predict does not need the label column: remove or rename it, or fix those labels"
                      if command == "predict" else f"{command} shows them as the true labels: give the column "
                      "that holds them with --label, or fix those labels")
            raise DataError(f"{path}: column {label!r} has labels the model never saw in training: "
                            f"{', '.join(unseen[:10])} (data rows {_rows_holding(frame[label], known)}); "
                            f"known labels: {', '.join(sorted(map(label_text, classes)))}. {advice}")


def _rows_holding(labels, known: set[str], first: int = 5) -> str:
    """The data rows (1-based, in the file: the chunks' index holds the rows' positions) of the first unseen labels."""
    rows = [row + 1 for row, v in labels.dropna().items() if label_text(v) and class_key(v) not in known]
    return ", ".join(map(str, rows[:first])) + (f" and {len(rows) - first} more" if len(rows) > first else "")


class PredictionInputs:
    """A file to predict, read chunk by chunk and tokenised with the run's text construction.

    The streaming counterpart of :func:`load_prediction_inputs`: the same columns are read as text as in training
    (:func:`frame_and_template`), the same checks run on every chunk, and the warnings about empty and truncated
    texts are counted over all chunks and logged once, by :meth:`log_summary`.
    """

    encode_rows = 10_000  # rows tokenised at a time within a chunk

    def __init__(self, cfg: TrainConfig, info: dict[str, Any], path: str | Path, tokenizer,
                 log: logging.Logger, context_from: str = "file", with_context: bool = True,
                 typed_ids: bool = False, titles_name: str | None = None, label: str | None = None,
                 command: str = "predict", run_name: str | None = None) -> None:
        """Inputs of ``path`` with the run's ``cfg`` and ``info``.

        ``context_from``: with ``group_context``, the rows a context comes from: ``file``, every row of ``path``
        (read once, its context columns only); ``chunk``, the rows given to :meth:`encode` (a served request).
        ``with_context=False``: with ``group_context``, every row's context is left empty (the view of the rows
        ``--group-context-dropout`` trained without it).
        ``typed_ids``: integer ids of a Parquet or JSONL file are read as integers, not text (see :meth:`chunks`).
        ``titles_name``: PPPM: what its errors call the CPC titles that lack a row's code; default: the file read, as
        the titles the run was trained with (a served request's caller cannot see the server's files).
        ``label``, ``command``: the column of labels checked against the run's classes (default: the run's) and who
        reads the rows, for the error's advice (see :func:`load_prediction_inputs`).
        ``run_name``: the run predicting (its folder), named by the error for a text column the file lacks.
        """
        self.typed_ids = typed_ids
        self.label, self.command, self.run_name = label, command, run_name
        self._integer_ids: list[str] | None = None  # with typed_ids: the id columns read as integers, found once
        if context_from not in ("file", "chunk"):
            raise ValueError(f"context_from must be 'file' or 'chunk', got {context_from!r}")
        self.with_context = with_context
        self.cfg = apply_preset(cfg)
        self.info, self.path, self.tokenizer, self.log = info, Path(path), tokenizer, log
        self.counts = {"texts": 0, "empty": 0, "truncated": 0, "tokens": 0, "max_tokens": 0}
        self.context_from = context_from
        self._pool = None  # the whole file's context columns, read on first use
        self._titles: dict[str, str] | None = None  # PPPM: the CPC titles, read once
        self.titles_name = titles_name or run_titles_name(self.cfg)

    @property
    def text_columns(self) -> list[str]:
        """Columns read as strings: as training read them (PPPM: as ``load_pppm`` reads its files), plus the id."""
        return [c for c in dict.fromkeys([*self._id_columns(), *self._texts()]) if c]

    def _id_columns(self) -> list[str]:
        return [c for c in dict.fromkeys([self.cfg.id_col, self.info.get("id_col")]) if c]

    def _texts(self) -> list[str]:
        """The columns read as text other than the id (which may be read as text too)."""
        if self.cfg.preset == "pppm":
            keep = ["id", *PPPM_FIELDS]
        else:
            keep = [*(self.cfg.text_cols or []), *text_fields(None, self.cfg.template),
                    *([self.cfg.group_col] if self.cfg.group_col else [])]
        return [*keep, *context_columns(self.cfg)]

    def chunks(self, chunk_rows: int):
        """The raw rows, ``chunk_rows`` at a time (see :func:`attnpool.data.readers.iter_table`).

        Every chunk has the columns read (:attr:`text_columns`) that the file has, a JSONL key first met in a later
        line too: whether a file is accepted does not depend on ``chunk_rows``.

        With ``typed_ids``, an id column that holds integers only in a Parquet (its schema's type) or JSONL file
        (every value of the file) is given as integers (``int64``; ``Int64`` in a chunk with missing ones), so that
        predictions join back to the file on it.
        A CSV/TSV id, and any other id (text, mixed, fractions), is text (``"0001"`` stays ``"0001"``).
        """
        chunks = iter_table(self.path, chunk_rows, text_columns=self.text_columns, columns=self.text_columns)
        integers = self.integer_ids() if self.typed_ids else []
        return map(functools.partial(_as_integers, integers), chunks) if integers else chunks

    def integer_ids(self) -> list[str]:
        """The id columns (not read as text for another use) of a Parquet or JSONL file that hold integers only.

        Parquet: by the schema's types. JSONL: every line is read once, until a line holds another value (its key
        may hold 7 in one line, "a" in a later one: the chunks would be written with other types).
        """
        if self._integer_ids is None:
            ids = [c for c in self._id_columns() if c not in self._texts()]
            suffix = self.path.suffix.lower()
            if not ids or suffix not in (".parquet", ".jsonl") or not self.path.is_file():
                ids = []
            elif suffix == ".parquet":
                ids = _parquet_integers(self.path, ids)
            else:
                for chunk in iter_table(self.path, POOL_CHUNK_ROWS, columns=ids):
                    ids = [c for c in ids if c not in chunk or _integers_only(chunk[c])]
                    if not ids:
                        break
            self._integer_ids = ids
        return self._integer_ids

    def encode(self, chunk) -> tuple[Any, dict[str, list]]:
        """A chunk's rows (with the preset's added columns) and their token lists, after the checks."""
        frame = chunk
        if self.cfg.preset == "pppm":
            frame, template = load_pppm(self.cfg.data_dir, split="test", frame=chunk, titles=self.titles(),
                                        titles_name=self.titles_name)
            self.cfg.template = self.cfg.template or template
        if self.cfg.group_context:
            if not self.with_context:
                pool = frame.iloc[:0]  # no rows to take values from: every row's context is empty
            else:
                pool = frame if self.context_from == "chunk" else self.context_pool()
            frame = _with_context(self.cfg, frame, pool, self.path)
        _check_prediction_rows(self.cfg, self.info, frame, self.path, self.label, self.command, self.run_name)
        frame, shortened = _fit_context(self.cfg, self.tokenizer, frame)
        self.counts["truncated"] += shortened
        encodings: dict[str, list] = {}
        for start in range(0, len(frame), self.encode_rows):
            # In slices: a fast tokenizer's output for a whole chunk holds several times the memory of the token
            # lists kept from it (measured: 100k PPPM rows at once peak at +730 MB, in 10k slices at +145 MB).
            part, counts = encode_texts(self.tokenizer, frame.iloc[start : start + self.encode_rows], self.cfg,
                                        fitted=True)
            for key, values in part.items():
                encodings.setdefault(key, []).extend(values)
            for key, value in counts.items():
                self.counts[key] = max(self.counts[key], value) if key == "max_tokens" else self.counts[key] + value
        return frame, encodings

    def titles(self) -> dict[str, str] | None:
        """With the PPPM preset, the CPC titles of the run's ``data_dir``, read on first use; else ``None``."""
        if self.cfg.preset == "pppm" and self._titles is None:
            self._titles = cpc_titles(self.cfg.data_dir)
        return self._titles

    def context_pool(self):
        """The context columns (``group_context`` and its keys) of every row of the file, read once."""
        if self._pool is None:
            columns = context_columns(self.cfg)
            parts = []
            for chunk in iter_table(self.path, POOL_CHUNK_ROWS, text_columns=self.text_columns,
                                    columns=self.text_columns):
                if self.cfg.preset == "pppm":  # a key may be a column the preset adds (context_text), as in encode
                    chunk, _ = load_pppm(self.cfg.data_dir, split="test", frame=chunk, titles=self.titles(),
                                         titles_name=self.titles_name)
                check_columns(chunk, columns, str(self.path))
                parts.append(chunk[columns])
            self._pool = pd.concat(parts, ignore_index=True)
        return self._pool

    def log_summary(self) -> None:
        """Log the empty and truncated texts and the token counts of every chunk encoded so far."""
        log_counts(self.log, str(self.path), self.counts, self.cfg.max_length)


_INT64 = (-(2**63), 2**63 - 1)


def _integers_only(values: pd.Series) -> bool:
    """Whether a column read with the types a JSONL file stores holds integers (of int64) only, or nothing.

    Integers with missing values are read as floats (7.0): whole floats count (a JSON 7.0 becomes 7).
    """
    values = values.dropna()
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind == "empty":
        return True
    if kind not in ("integer", "floating", "mixed-integer-float"):  # text, booleans, lists, mixed
        return False
    numbers = values.astype(float) if kind != "integer" else values
    whole = kind == "integer" or bool(np.isfinite(numbers).all() and (numbers == np.floor(numbers)).all())
    return whole and _INT64[0] <= min(numbers) and max(numbers) <= _INT64[1]


def _parquet_integers(path: Path, ids: list[str]) -> list[str]:
    """Those of ``ids`` that a Parquet file stores as integers, or as floats that are all whole numbers.

    Integers: signed ones, or ones of up to 32 bits, by the schema. Floats: each such column is read once, and kept
    when its values are all whole and within int64 (pandas writes an integer column with a missing value as
    ``float64``: 7.0).
    """
    parquet = require_pyarrow(path)
    try:
        schema = parquet.read_schema(path)
        kinds = {name: str(schema.field(name).type) for name in ids if name in schema.names}
        if (index := range_index(schema)) is not None and index[0] in ids:  # a RangeIndex: no column, integers
            kinds[index[0]] = "int64"
        floats = [name for name, kind in kinds.items() if kind in ("halffloat", "float", "double")]
        whole = [name for name in floats if _integers_only(
            parquet.read_table(path, columns=[name]).column(name).to_pandas())]
    except Exception:  # noqa: BLE001 - pyarrow's many errors: the reader names a corrupt file when it reads it
        return []
    return [name for name, kind in kinds.items()
            if (kind.startswith(("int", "uint")) and kind != "uint64") or name in whole]


def _as_integers(names: list[str], chunk: pd.DataFrame) -> pd.DataFrame:
    """The chunk with the columns ``names`` (read as text: the digits of the file) as integers.

    ``int64``, or ``Int64`` where some are missing: either is written as a Parquet int64.
    """
    for name in names:
        if name in chunk:
            values = pd.array([None if is_missing(v) else _whole(v) for v in chunk[name]], dtype="Int64")
            chunk[name] = values if values.isna().any() else values.astype(np.int64)
    return chunk


def _whole(text: str) -> int:
    """A whole number written as text (``"7"``; ``"7.0"``, a JSON float) as an int, its digits exactly."""
    try:
        return int(text)
    except ValueError:
        return int(float(text))
