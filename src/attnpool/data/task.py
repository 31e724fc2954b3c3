"""From files to tokenised training inputs: the data set of a recipe, read, checked, tokenised and split into folds."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from transformers import AutoTokenizer

from attnpool.config import TrainConfig
from attnpool.config_checks import PRESET_SETS, check_preset
from attnpool.data.batching import ENCODING_KEYS
from attnpool.data.columns import Labels, build_texts, check_columns, label_sets, text_fields, validate_labels
from attnpool.data.context import (
    CONTEXT_FIELD,
    add_group_context,
    context_text_spec,
    fit_context,
    is_context_pair,
    split_groups,
    tokenize_rows,
)
from attnpool.data.datasets import ContextDropoutDataset, EncodedDataset
from attnpool.data.errors import DataError
from attnpool.data.folds import make_folds
from attnpool.data.pppm import PPPM_FIELDS, load_pppm
from attnpool.data.readers import read_table
from attnpool.data.sampling import limit_rows
from attnpool.data.valid_classes import refuse_flags_beside_numbers, refuse_validation_only_classes


@dataclass
class TaskData:
    """A loaded, validated and tokenised data set with everything the recipe needs to know about it."""

    frame: Any  # pandas.DataFrame of the training rows (then the validation rows, with a valid_file)
    encodings: dict[str, list]
    labels: np.ndarray
    classes: list | None
    label_name: str
    id_col: str | None
    tokenizer: Any
    task: str
    groups: np.ndarray | None = None
    valid_rows: np.ndarray | None = None  # with a fixed validation file: its rows in `frame`
    text_columns: tuple[str, ...] = ()  # the columns the texts and group contexts are built from

    @property
    def num_rows(self) -> int:
        """Rows in ``frame``."""
        return len(self.frame)

    @property
    def num_outputs(self) -> int:
        """Model outputs: 1 for a single regression target, else the number of classes or targets."""
        if self.task == "regression":
            return 1 if self.labels.ndim == 1 else self.labels.shape[1]
        return len(self.classes or [])

    def fingerprint(self) -> str:
        """A SHA-256 of the rows as trained on (their token ids and labels): a resumed run checks its data with it.

        With ``group_context`` the rows are tokenised fold by fold (``encodings`` is empty): this is the labels'
        alone, and :meth:`text_fingerprint` the texts'.
        """
        digest = hashlib.sha256()
        for ids in self.encodings.get("input_ids", []):
            digest.update(np.asarray(ids, dtype=np.int64).tobytes() + b"|")
        digest.update(np.ascontiguousarray(self.labels, dtype=np.float64).tobytes())
        return digest.hexdigest()

    def text_fingerprint(self) -> str:
        """A SHA-256 of the values of :attr:`text_columns` (those the texts and contexts are built from), as text."""
        values = self.frame[[c for c in dict.fromkeys(self.text_columns) if c in self.frame]].astype(str)
        return hashlib.sha256(pd.util.hash_pandas_object(values, index=False).to_numpy().tobytes()).hexdigest()

    def make_folds(self, cfg: TrainConfig) -> np.ndarray:
        """Fold id per row; with a validation file, -1 for training rows and 0 for validation rows."""
        if self.valid_rows is not None:
            folds = np.full(self.num_rows, -1)
            folds[self.valid_rows] = 0
            return folds
        return make_folds(self.num_rows, cfg.folds, labels=self.labels, groups=self.groups, task=self.task,
                          n_bins=cfg.label_bins, seed=cfg.resolved_split_seed())

    def split(self, folds: np.ndarray, fold: int) -> tuple[np.ndarray, np.ndarray]:
        """Training and validation row indices of one fold."""
        valid = np.flatnonzero(folds == fold)
        train = np.flatnonzero(folds == -1) if self.valid_rows is not None else np.flatnonzero(folds != fold)
        return train, valid

    def fold_encodings(self, cfg: TrainConfig, train_idx: np.ndarray, valid_idx: np.ndarray,
                       log: logging.Logger) -> dict[str, list]:
        """The token lists of one fold, indexed by row: ``encodings``, or with ``group_context`` fold-specific ones.

        With ``group_context`` a row's text depends on the fold (:mod:`attnpool.data.context`): the training rows
        are tokenised with the context of the training rows only and the validation rows with that of the validation
        rows only, so no validation value reaches a training text and validation sees what prediction will.
        Rows in neither split are ``None``.
        """
        if not cfg.group_context:
            return self.encodings
        if self.valid_rows is None:
            _warn_split_groups(self.frame, cfg, train_idx, valid_idx, log)
        encodings: dict[str, list] = {}
        for rows, side in ((train_idx, "training"), (valid_idx, "validation")):
            part = add_group_context(self.frame.iloc[rows], cfg.group_context, cfg.group_context_by)
            for key, values in tokenize(self.tokenizer, part, cfg, log, f"{side} rows with group context").items():
                column = encodings.setdefault(key, [None] * self.num_rows)
                for row, value in zip(rows, values, strict=True):
                    column[row] = value
        return encodings

    def training_set(self, cfg: TrainConfig, encodings: dict[str, list], train_idx: np.ndarray,
                     log: logging.Logger) -> EncodedDataset:
        """The training rows of a fold; with ``group_context_dropout`` a :class:`ContextDropoutDataset`."""
        if not cfg.group_context_dropout:
            return EncodedDataset(encodings, self.labels, train_idx)
        part = self.frame.iloc[train_idx].assign(**{CONTEXT_FIELD: ""})  # checked by fold_encodings, which ran first
        bare = {key: dict(zip(train_idx.tolist(), values, strict=True))
                for key, values in tokenize(self.tokenizer, part, cfg, log, "training rows without context").items()}
        return ContextDropoutDataset(encodings, bare, self.labels, train_idx, cfg.group_context_dropout, cfg.seed)


def frame_and_template(cfg: TrainConfig, path: str | None, split: str = "train", titles_name: str | None = None):
    """``(frame, template)`` of the rows (preset or file), text columns as strings; ``titles_name``: see load_pppm."""
    apply_preset(cfg)
    if cfg.preset == "pppm":
        if path is None:
            return load_pppm(cfg.data_dir, split=split)
        frame, template = load_pppm(cfg.data_dir, split=split,  # its text fields as text, as predict reads them
                                    frame=read_table(path, text_columns=["id", *PPPM_FIELDS, *context_columns(cfg)]),
                                    titles_name=titles_name)
        return frame, template
    if path is None:
        raise DataError("no training file: give --train-file FILE")
    keep_text = [c for c in (cfg.id_col, *(cfg.text_cols or []), *text_fields(None, cfg.template), cfg.group_col,
                             *context_columns(cfg)) if c]  # a template's "4" stays "4", not 4.0 in a chunk with a blank
    return read_table(path, text_columns=keep_text), cfg.template


def apply_preset(cfg: TrainConfig) -> TrainConfig:
    """Fill in what a preset implies, unless set explicitly; refuse an unknown preset or one without its data.

    PPPM: regression on [0, 1] with a sigmoid output and BCE, folds grouped by anchor, ``score`` as the label.
    """
    check_preset(cfg)
    if cfg.preset == "pppm":
        cfg.label = "score" if cfg.label == "label" else cfg.label
        for name, value in PRESET_SETS.items():
            setattr(cfg, name, getattr(cfg, name) or value)
        if cfg.group_context and not cfg.group_context_by:
            cfg.group_context_by = ["anchor", "context"]
    return cfg


def context_columns(cfg: TrainConfig) -> list[str]:
    """The columns ``group_context`` reads (its column and its keys), none without it."""
    return [cfg.group_context, *cfg.group_context_by] if cfg.group_context else []


def tokenize(tokenizer, texts, cfg: TrainConfig, log: logging.Logger, where: str) -> dict[str, list]:
    """The rows' token lists, with the empty and truncated texts logged."""
    encodings, counts = encode_texts(tokenizer, texts, cfg)
    log_counts(log, where, counts, cfg.max_length)
    return encodings


def encode_texts(tokenizer, texts, cfg: TrainConfig, *, fitted: bool = False) -> tuple[dict[str, list], dict[str, int]]:
    """The rows' token lists (truncated to ``max_length``) and counts: texts, empty, truncated, tokens, max_tokens.

    With ``group_context`` the rows must hold the context column (:func:`attnpool.data.context.add_group_context`);
    an empty context does not count as an empty text; a text pair with the context loses the context first.
    ``fitted``: the contexts were fitted to ``max_length`` already (:func:`~attnpool.data.context.fit_context`).
    """
    sep = tokenizer.sep_token or "[SEP]"
    text_cols, template, shortened = cfg.text_cols or None, cfg.template, []
    if cfg.group_context:  # the context's last values dropped where truncation would cut the row's own text
        text_cols, template = context_text_spec(text_cols, template)
        if not fitted:
            texts, shortened = fit_context(tokenizer, texts, text_cols, template, cfg.max_length, sep=sep)
        # The rows' own text fields only: a row alone in its group has an empty context, not an empty text (and
        # ``cfg`` may name the context already: prediction adds it to the template it rebuilds texts from).
        own = [f for f in text_fields(text_cols, template) if f != CONTEXT_FIELD]
        empty = build_texts(texts, own, sep_token=sep).num_empty if own else 0
    first, second, num_empty = build_texts(texts, text_cols, template, sep_token=sep)
    empty = empty if cfg.group_context else num_empty
    encodings = tokenize_rows(tokenizer, first, second, cfg.max_length,
                              context_pair=is_context_pair(cfg.group_context, text_cols, template))
    lengths = [len(ids) for ids in encodings["input_ids"]]
    # A truncated row: a fast tokenizer's Encoding holds what it cut (``overflowing``). A row of max_length tokens
    # without (a slow tokenizer's, one that fits exactly, a context pair's row whose context made way) is tokenised
    # again whole: tokenising every row whole to count them cost as much as the truncated pass, and its memory.
    cut = [bool(e.overflowing) for e in encodings.encodings] if encodings.encodings else [False] * len(lengths)
    check = [i for i, n in enumerate(lengths) if n >= cfg.max_length and not cut[i]]
    whole = tokenizer([first[i] for i in check], *([[second[i] for i in check]] if second is not None else []),
                      verbose=False)["input_ids"] if check else []
    truncated = sum(cut) + sum(len(ids) > cfg.max_length for ids in whole) + len(shortened)
    counts = {"texts": len(first), "empty": empty, "truncated": truncated, "tokens": sum(lengths),
              "max_tokens": max(lengths, default=0)}
    return {k: list(v) for k, v in encodings.items() if k in ENCODING_KEYS}, counts


def log_counts(log: logging.Logger, where: str, counts: dict[str, int], max_length: int) -> None:
    """Log the empty and truncated texts and the token counts of :func:`encode_texts`."""
    if counts["empty"]:
        log.warning("%s: %d rows have empty or missing text; they are kept and encoded as empty text", where,
                    counts["empty"])
    if counts["truncated"]:
        log.warning("%s: %d of %d texts are longer than max_length=%d tokens and were truncated", where,
                    counts["truncated"], counts["texts"], max_length)
    if counts["texts"]:
        log.info("%s: %d texts, tokens per text: mean %.1f, max %d", where, counts["texts"],
                 counts["tokens"] / counts["texts"], counts["max_tokens"])


def _warn_split_groups(frame: pd.DataFrame, cfg: TrainConfig, train: np.ndarray, valid: np.ndarray,
                       log: logging.Logger) -> None:
    shared, total = split_groups(frame, cfg.group_context_by, train, valid)
    if shared:
        log.warning("group context: %d of %d groups of the validation rows (by %s) also have training rows, so their "
                    "validation rows see only the validation side's values: shorter contexts than in training and in "
                    "prediction, and a validation score that does not measure what predict does. Keep each group in "
                    "one fold: --group-col %s", shared, total, ", ".join(cfg.group_context_by),
                    cfg.group_context_by[0])


def _refuse_label_as_input(cfg: TrainConfig) -> None:
    """The label column in the text or the group keys: the model would read its answer, absent at prediction."""
    for option, columns in (("--template" if cfg.template else "--text-cols", text_fields(cfg.text_cols, cfg.template)),
                            ("--group-context-by", cfg.group_context_by if cfg.group_context else [])):
        if cfg.label in columns:
            raise DataError(
                f"{option} uses {cfg.label!r}, the label column: the model would read the answer it is trained to "
                "give, and predict's rows have no label. Leave it out, or name the label column with --label")


def _warn_of_likely_mistakes(frame: pd.DataFrame, cfg: TrainConfig, labels: np.ndarray,
                             log: logging.Logger) -> None:
    """Warn of what trains without an error but is likely not what was meant.

    Two-valued whole-number labels trained as a regression (the default task), a text column of numbers only (an
    id or a score picked by mistake).
    """
    if cfg.task == "regression" and labels.ndim == 1 and len(labels):
        values = np.unique(labels[np.isfinite(labels)])
        if len(values) == 2 and np.all(values == np.round(values)):
            log.warning("label %r holds two values only (%s and %s): it trains as a regression (--task regression, "
                        "the default); for a classifier pass --task binary", cfg.label, f"{values[0]:g}",
                        f"{values[1]:g}")
    numeric = {}  # the text fields that hold numbers only; a template may mix one in on purpose ("{stars} stars")
    fields = list(dict.fromkeys(text_fields(cfg.text_cols, cfg.template)))
    for column in fields:
        texts = frame[column].dropna().astype(str).str.strip() if column in frame else pd.Series([], dtype=str)
        texts = texts[texts != ""]
        if len(texts) and pd.to_numeric(texts, errors="coerce").notna().all():
            numeric[column] = ", ".join(texts.head(3))
    if fields and len(numeric) == len(fields):  # no text at all to read
        log.warning("the text column(s) hold numbers only (%s): the model reads them as text; is that what you meant "
                    "(--text-cols / --template)?", "; ".join(f"{c!r}: e.g. {e}" for c, e in numeric.items()))


def _file_labels(frame: pd.DataFrame, cfg: TrainConfig, where: str) -> Labels:
    """``validate_labels`` of one file's rows: an error names the file, and its rows are that file's."""
    try:
        labels = validate_labels(frame, cfg.label, cfg.task)
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
    # a sigmoid output predicts in (0, 1): MSE or BCE cannot fit a label outside [0, 1] (BCE fails in the first step,
    # naming no row). A Pearson loss is scale-free, so the sigmoid's range does not bound what it fits.
    if cfg.task == "regression" and cfg.output_activation == "sigmoid" and cfg.loss != "pearson":
        values = np.asarray(labels.values, dtype=np.float64).reshape(len(frame), -1)
        rows = np.flatnonzero(((values < 0) | (values > 1)).any(axis=1))
        if len(rows):
            source, drop = (("--preset pppm", "train without the preset (--train-file, --template)")
                            if cfg.preset == "pppm" else ("--output-activation sigmoid", "drop that option"))
            raise DataError(
                f"{where}: column {cfg.label!r} has {len(rows)} label(s) outside [0, 1] in data rows "
                f"{', '.join(str(r + 1) for r in rows[:10])}{', ...' if len(rows) > 10 else ''} (the labels range from "
                f"{values.min():g} to {values.max():g}), but the sigmoid output of {source} predicts values in (0, 1) "
                f"only: rescale the labels to [0, 1], or {drop}")
    return labels


def _check_valid_labels(valid: pd.DataFrame, cfg: TrainConfig) -> None:
    """The validation file's labels on their own, so that an error names that file and its own row numbers."""
    if cfg.task == "regression":
        _file_labels(valid, cfg, str(cfg.valid_file))
        return
    if cfg.task == "multilabel":  # each cell checked; a blank one is a row without classes, all blank too
        try:
            label_sets(valid[cfg.label])
        except DataError as e:
            raise DataError(f"{cfg.valid_file}: {e}") from None
        return
    blank = valid[cfg.label].map(lambda v: v.strip() == "" if isinstance(v, str) else bool(pd.isna(v))).to_numpy()
    missing = np.flatnonzero(blank.astype(bool))
    if len(missing):
        raise DataError(f"{cfg.valid_file}: column {cfg.label!r} has missing labels in data rows "
                        f"{', '.join(str(r + 1) for r in missing[:10])}; every validation row needs its label")


def _tokenize_files(tokenizer, frame: pd.DataFrame, valid_rows: np.ndarray | None, cfg: TrainConfig,
                    log: logging.Logger, where: str) -> dict[str, list]:
    """:func:`tokenize` of the training rows, then of the validation file's: each file's counts under its name."""
    split = len(frame) - (0 if valid_rows is None else len(valid_rows))
    parts = [(frame.iloc[:split], where), *([(frame.iloc[split:], str(cfg.valid_file))] if split < len(frame) else [])]
    encoded = [tokenize(tokenizer, part.reset_index(drop=True), cfg, log, name) for part, name in parts]
    return {key: [row for part in encoded for row in part[key]] for key in encoded[0]}


def load_task(cfg: TrainConfig, log: logging.Logger) -> TaskData:
    """Read, validate and tokenise the training (and validation) data of ``cfg``."""
    cfg = apply_preset(cfg)
    frame, template = frame_and_template(cfg, cfg.train_file)
    cfg.template = cfg.template or template
    _refuse_label_as_input(cfg)
    valid_rows = whole = None
    needed = [cfg.label, *(cfg.text_cols or []), *([cfg.group_col] if cfg.group_col else []), *context_columns(cfg)]
    where = cfg.train_file or f"{cfg.data_dir} ({cfg.preset})"
    label_file = str(cfg.train_file or Path(cfg.data_dir) / "train.csv")  # where a bad training label is
    check_columns(frame, needed, where)
    if cfg.limit and cfg.limit < len(frame):  # of the training rows: a validation file is read whole
        whole = _file_labels(frame, cfg, label_file)  # first on the whole file: a bad label named by its row there
        frame = limit_rows(frame, whole, cfg, label_file, log)
    train_frame = frame
    if cfg.valid_file:  # checked on its own, before the join would fill a missing column with blanks
        valid_frame, _ = frame_and_template(cfg, cfg.valid_file)
        check_columns(valid_frame, needed, str(cfg.valid_file))
        _check_valid_labels(valid_frame, cfg)
        refuse_flags_beside_numbers(frame, valid_frame, cfg, label_file)
        valid_rows = np.arange(len(frame), len(frame) + len(valid_frame))
        frame = pd.concat([frame, valid_frame], ignore_index=True)
        refuse_validation_only_classes(frame, valid_rows, cfg, whole)
    labels = _file_labels(train_frame, cfg, label_file)  # the training rows on their own: numbered in their file
    if valid_rows is not None:  # both files are valid: the classes of both, in one encoding
        labels = validate_labels(frame, cfg.label, cfg.task)
    del train_frame  # the joined frame holds its rows
    _warn_of_likely_mistakes(frame, cfg, np.asarray(labels.values), log)
    id_col = cfg.id_col if cfg.id_col and cfg.id_col in frame.columns else None
    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    # with group_context the texts depend on the fold: each fold tokenises its rows (TaskData.fold_encodings)
    encodings = {} if cfg.group_context else _tokenize_files(tokenizer, frame, valid_rows, cfg, log, str(where))
    # stripped, as the group context compares its keys: "ga" and "ga " are one group on both counts
    groups = frame[cfg.group_col].astype(str).str.strip().to_numpy() if cfg.group_col else None
    values = np.asarray(labels.values)
    values = values.astype(np.float32) if cfg.task in ("regression", "multilabel") else values.astype(np.int64)
    text_columns = (*text_fields(cfg.text_cols, cfg.template), *context_columns(cfg))
    return TaskData(frame=frame, encodings=encodings, labels=values, classes=labels.classes, label_name=cfg.label,
                    id_col=id_col, tokenizer=tokenizer, task=cfg.task, groups=groups, valid_rows=valid_rows,
                    text_columns=text_columns)
