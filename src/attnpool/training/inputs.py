"""From files to tokenised training inputs: the glue between ``attnpool.data`` and the ``Trainer``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnpool.training.config import TrainConfig


class EncodedDataset(torch.utils.data.Dataset):
    """Rows of pre-tokenised (unpadded) inputs with their labels; padding happens per batch in the collator."""

    def __init__(self, encodings: dict[str, list], labels: np.ndarray | None, rows: np.ndarray) -> None:
        self.encodings = encodings
        self.labels = labels
        self.rows = np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        item: dict[str, Any] = {k: v[row] for k, v in self.encodings.items()}
        if self.labels is not None:
            item["labels"] = self.labels[row]
        return item


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

    def make_folds(self, cfg: TrainConfig) -> np.ndarray:
        """Fold id per row; with a validation file, -1 for training rows and 0 for validation rows."""
        from attnpool.data import make_folds

        if self.valid_rows is not None:
            folds = np.full(self.num_rows, -1)
            folds[self.valid_rows] = 0
            return folds
        stratify = self.labels if self.task != "multilabel" else None
        return make_folds(self.num_rows, cfg.folds, labels=stratify, groups=self.groups, task=self.task,
                          n_bins=cfg.label_bins, seed=cfg.seed)

    def split(self, folds: np.ndarray, fold: int) -> tuple[np.ndarray, np.ndarray]:
        """Training and validation row indices of one fold."""
        valid = np.flatnonzero(folds == fold)
        train = np.flatnonzero(folds == -1) if self.valid_rows is not None else np.flatnonzero(folds != fold)
        return train, valid

    def oof_frame(self, rows: np.ndarray, scores: np.ndarray, fold: int):
        """Out-of-fold predictions: row, id, target, prediction(s), fold."""
        import pandas as pd

        out = pd.DataFrame({"row": rows})
        if self.id_col:
            out["id"] = self.frame[self.id_col].to_numpy()[rows]
        target = self.labels[rows]
        if self.task == "regression":
            scores2 = np.asarray(scores).reshape(len(rows), -1)
            target2 = np.asarray(target).reshape(len(rows), -1)
            if scores2.shape[1] == 1:
                out["target"], out["prediction"] = target2[:, 0], scores2[:, 0]
            else:
                for j in range(scores2.shape[1]):
                    out[f"target_{j}"], out[f"prediction_{j}"] = target2[:, j], scores2[:, j]
        else:
            classes = self.classes or []
            if self.task == "multilabel":
                for j, c in enumerate(classes):
                    out[f"target_{c}"] = target[:, j]
            else:
                out["target"] = [classes[i] for i in target]
                out["prediction"] = [classes[i] for i in np.argmax(scores, axis=1)]
            for j, c in enumerate(classes):
                out[f"prob_{c}"] = np.asarray(scores)[:, j]
        out["fold"] = fold
        return out

    def scores_of(self, oof) -> np.ndarray:
        """The prediction columns of an out-of-fold frame, as the metrics take them."""
        if self.task == "regression":
            cols = ["prediction"] if "prediction" in oof else sorted(c for c in oof if c.startswith("prediction_"))
            values = oof[cols].to_numpy(dtype=np.float64)
            return values[:, 0] if values.shape[1] == 1 else values
        return oof[[f"prob_{c}" for c in self.classes or []]].to_numpy(dtype=np.float64)


def _frame_and_template(cfg: TrainConfig, path: str | None, split: str = "train"):
    """Read the rows (preset or file) and return ``(frame, template)``."""
    from attnpool.data import DataError, load_pppm, read_table

    if cfg.preset == "pppm":
        if not cfg.data_dir:
            raise DataError("--preset pppm needs --data-dir DIR, the folder holding train.csv and cpc_texts.csv")
        if path is None:
            return load_pppm(cfg.data_dir, split=split)
        frame, template = load_pppm(cfg.data_dir, split=split, frame=read_table(path))
        return frame, template
    if cfg.preset is not None:
        raise DataError(f"unknown preset {cfg.preset!r}; available presets: pppm")
    if path is None:
        raise DataError("no training file: give --train-file FILE")
    keep_text = [c for c in (cfg.id_col, *(cfg.text_cols or []), cfg.group_col) if c]
    return read_table(path, text_columns=keep_text), cfg.template


def apply_preset(cfg: TrainConfig) -> TrainConfig:
    """Fill in what a preset implies, unless set explicitly.

    PPPM: regression on [0, 1] with a sigmoid output and BCE, folds grouped by anchor, ``score`` as the label.
    """
    if cfg.preset == "pppm":
        cfg.task = "regression"
        cfg.label = "score" if cfg.label == "label" else cfg.label
        cfg.group_col = cfg.group_col or "anchor"
        cfg.output_activation = cfg.output_activation or "sigmoid"
    return cfg


def _tokenize(tokenizer, texts, cfg: TrainConfig, log: logging.Logger, where: str) -> dict[str, list]:
    encodings, counts = _encode(tokenizer, texts, cfg)
    _log_counts(log, where, counts, cfg.max_length)
    return encodings


def _encode(tokenizer, texts, cfg: TrainConfig) -> tuple[dict[str, list], dict[str, int]]:
    """The rows' token lists (truncated to ``max_length``) and counts: texts, empty, truncated, tokens, max_tokens."""
    from attnpool.data import build_texts

    first, second, empty = build_texts(texts, cfg.text_cols or None, cfg.template, sep_token=tokenizer.sep_token
                                       or "[SEP]")
    kwargs: dict[str, Any] = {"truncation": True, "max_length": cfg.max_length}
    encodings = tokenizer(first, second, **kwargs) if second is not None else tokenizer(first, **kwargs)
    full = tokenizer(first, second, verbose=False) if second is not None else tokenizer(first, verbose=False)
    truncated = sum(len(ids) > cfg.max_length for ids in full["input_ids"])
    lengths = [len(ids) for ids in encodings["input_ids"]]
    counts = {"texts": len(first), "empty": empty, "truncated": truncated, "tokens": sum(lengths),
              "max_tokens": max(lengths, default=0)}
    return {k: list(v) for k, v in encodings.items() if k in ("input_ids", "attention_mask", "token_type_ids")}, counts


def _log_counts(log: logging.Logger, where: str, counts: dict[str, int], max_length: int) -> None:
    if counts["empty"]:
        log.warning("%s: %d rows have empty or missing text; they are kept and encoded as empty text", where,
                    counts["empty"])
    if counts["truncated"]:
        log.warning("%s: %d of %d texts are longer than max_length=%d tokens and were truncated", where,
                    counts["truncated"], counts["texts"], max_length)
    if counts["texts"]:
        log.info("%s: %d texts, tokens per text: mean %.1f, max %d", where, counts["texts"],
                 counts["tokens"] / counts["texts"], counts["max_tokens"])


def load_task(cfg: TrainConfig, log: logging.Logger) -> TaskData:
    """Read, validate and tokenise the training (and validation) data of ``cfg``."""
    import pandas as pd
    from transformers import AutoTokenizer

    from attnpool.data import check_columns, validate_labels

    cfg = apply_preset(cfg)
    frame, template = _frame_and_template(cfg, cfg.train_file)
    cfg.template = cfg.template or template
    valid_rows = None
    if cfg.valid_file:
        valid_frame, _ = _frame_and_template(cfg, cfg.valid_file)
        valid_rows = np.arange(len(frame), len(frame) + len(valid_frame))
        frame = pd.concat([frame, valid_frame], ignore_index=True)
    elif cfg.limit and cfg.limit < len(frame):
        frame = frame.sample(n=cfg.limit, random_state=cfg.seed).reset_index(drop=True)
    where = cfg.train_file or f"{cfg.data_dir} ({cfg.preset})"
    check_columns(frame, [cfg.label, *(cfg.text_cols or []), *([cfg.group_col] if cfg.group_col else [])], where)
    labels = validate_labels(frame, cfg.label, cfg.task)
    id_col = cfg.id_col if cfg.id_col and cfg.id_col in frame.columns else None
    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    encodings = _tokenize(tokenizer, frame, cfg, log, str(where))
    groups = frame[cfg.group_col].astype(str).to_numpy() if cfg.group_col else None
    values = np.asarray(labels.values)
    values = values.astype(np.float32) if cfg.task in ("regression", "multilabel") else values.astype(np.int64)
    return TaskData(frame=frame, encodings=encodings, labels=values, classes=labels.classes, label_name=cfg.label,
                    id_col=id_col, tokenizer=tokenizer, task=cfg.task, groups=groups, valid_rows=valid_rows)


def load_prediction_inputs(cfg: TrainConfig, info: dict[str, Any], path: str | Path, tokenizer,
                           log: logging.Logger):
    """Read and tokenise a file to predict, with the run's text construction; check labels it may carry."""
    cfg = apply_preset(cfg)
    frame, template = _frame_and_template(cfg, str(path), split="test")
    cfg.template = cfg.template or template
    _check_prediction_rows(cfg, info, frame, path)
    return frame, _tokenize(tokenizer, frame, cfg, log, str(path))


def _check_prediction_rows(cfg: TrainConfig, info: dict[str, Any], frame, path: str | Path) -> None:
    """The text columns are there; labels, if the file has them, are ones the run knows."""
    from attnpool.data import DataError, check_columns

    check_columns(frame, list(cfg.text_cols or []), str(path))
    classes = info.get("classes")
    if classes and cfg.task in ("binary", "multiclass") and cfg.label in frame.columns:
        known = {str(c) for c in classes}
        unseen = sorted({str(v) for v in frame[cfg.label].dropna()} - known)
        if unseen:
            raise DataError(f"{path}: column {cfg.label!r} has labels the model never saw in training: "
                            f"{', '.join(unseen[:10])}; known labels: {', '.join(sorted(known))}")


class PredictionInputs:
    """A file to predict, read chunk by chunk and tokenised with the run's text construction.

    The streaming counterpart of :func:`load_prediction_inputs`: the same columns are read as text as in training
    (:func:`_frame_and_template`), the same checks run on every chunk, and the warnings about empty and truncated
    texts are counted over all chunks and logged once, by :meth:`log_summary`.
    """

    encode_rows = 10_000  # rows tokenised at a time within a chunk

    def __init__(self, cfg: TrainConfig, info: dict[str, Any], path: str | Path, tokenizer,
                 log: logging.Logger) -> None:
        from attnpool.data import DataError

        self.cfg = apply_preset(cfg)
        if self.cfg.preset == "pppm" and not self.cfg.data_dir:
            raise DataError("--preset pppm needs --data-dir DIR, the folder holding train.csv and cpc_texts.csv")
        if self.cfg.preset not in (None, "pppm"):
            raise DataError(f"unknown preset {self.cfg.preset!r}; available presets: pppm")
        self.info, self.path, self.tokenizer, self.log = info, Path(path), tokenizer, log
        self.counts = {"texts": 0, "empty": 0, "truncated": 0, "tokens": 0, "max_tokens": 0}

    @property
    def text_columns(self) -> list[str]:
        """Columns read as strings: as training read them (PPPM: as ``load_pppm`` reads its files), plus the id."""
        if self.cfg.preset == "pppm":
            keep = ["id", "anchor", "target", "context"]
        else:
            keep = [*(self.cfg.text_cols or []), *([self.cfg.group_col] if self.cfg.group_col else [])]
        return [c for c in dict.fromkeys([self.cfg.id_col, self.info.get("id_col"), *keep]) if c]

    def chunks(self, chunk_rows: int):
        """The raw rows, ``chunk_rows`` at a time (see :func:`attnpool.data.readers.iter_table`)."""
        from attnpool.data.readers import iter_table

        return iter_table(self.path, chunk_rows, text_columns=self.text_columns)

    def encode(self, chunk) -> tuple[Any, dict[str, list]]:
        """A chunk's rows (with the preset's added columns) and their token lists, after the checks."""
        frame = chunk
        if self.cfg.preset == "pppm":
            from attnpool.data import load_pppm

            frame, template = load_pppm(self.cfg.data_dir, split="test", frame=chunk)
            self.cfg.template = self.cfg.template or template
        _check_prediction_rows(self.cfg, self.info, frame, self.path)
        encodings: dict[str, list] = {}
        for start in range(0, len(frame), self.encode_rows):
            # In slices: a fast tokenizer's output for a whole chunk holds several times the memory of the token
            # lists kept from it (measured: 100k PPPM rows at once peak at +730 MB, in 10k slices at +145 MB).
            part, counts = _encode(self.tokenizer, frame.iloc[start : start + self.encode_rows], self.cfg)
            for key, values in part.items():
                encodings.setdefault(key, []).extend(values)
            for key, value in counts.items():
                self.counts[key] = max(self.counts[key], value) if key == "max_tokens" else self.counts[key] + value
        return frame, encodings

    def log_summary(self) -> None:
        """Log the empty and truncated texts and the token counts of every chunk encoded so far."""
        _log_counts(self.log, str(self.path), self.counts, self.cfg.max_length)


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
