"""The classes of a validation file (``--valid-file``) against those of the training file."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnpool.config import TrainConfig
from attnpool.data.columns import Labels, validate_labels
from attnpool.data.errors import DataError
from attnpool.data.numbers import flags_and_numbers
from attnpool.data.sampling import lost_to_limit


def refuse_flags_beside_numbers(train: pd.DataFrame, valid: pd.DataFrame, cfg: TrainConfig, train_name: str) -> None:
    """True/false classes in one file, numbers in the other: pandas would join them as int64, making True the 1."""
    if cfg.task not in ("binary", "multiclass"):
        return
    written = {}  # file -> ("true/false" or "numbers", its values); a file mixing both is left to its own check
    for name, frame in ((train_name, train), (str(cfg.valid_file), valid)):
        flags, numbers = flags_and_numbers([v.item() if isinstance(v, np.generic) else v
                                            for v in frame[cfg.label].dropna().tolist()])
        if bool(flags) != bool(numbers):
            written[name] = ("true/false", flags) if flags else ("numbers", numbers)
    if len({kind for kind, _ in written.values()}) == 2:
        (a, (kind_a, values_a)), (b, (kind_b, values_b)) = written.items()
        raise DataError(
            f"column {cfg.label!r} writes classes as {kind_a} in {a} ({', '.join(map(repr, values_a[:5]))}) but as "
            f"{kind_b} in {b} ({', '.join(map(repr, values_b[:5]))}); predict reads true and 1 as two classes: "
            "write each class one way in both files, all true/false or all numbers")


def refuse_validation_only_classes(frame: pd.DataFrame, valid_rows: np.ndarray, cfg: TrainConfig,
                                    whole: Labels | None = None) -> None:
    """A class that only the validation file has would be an output the model never trains on.

    ``whole``: the labels of the whole training file where ``--limit`` drew from it, to say it lost such a class.
    """
    if cfg.task == "regression":
        return
    try:  # binary as multiclass: a third class is named here, not counted as "3 classes, use multiclass"
        labels = validate_labels(frame, cfg.label, "multiclass" if cfg.task == "binary" else cfg.task)
    except DataError:
        return  # the task's own check says what is wrong
    values, classes, train = np.asarray(labels.values), labels.classes, np.ones(len(frame), dtype=bool)
    train[valid_rows] = False
    if values.ndim == 2:  # multilabel: one column per class
        unseen = np.flatnonzero(~values[train].any(axis=0) & values[valid_rows].any(axis=0))
        rows = np.flatnonzero(values[valid_rows][:, unseen].any(axis=1))
    else:
        unseen = np.setdiff1d(values[valid_rows], values[train])
        rows = np.flatnonzero(np.isin(values[valid_rows], unseen))
    if len(unseen):
        names = ", ".join(repr(classes[i]) for i in unseen[:10])
        lost = lost_to_limit([classes[i] for i in unseen], whole)
        absent = [classes[i] for i in unseen if classes[i] not in lost]
        drawn = len(frame) - len(valid_rows)  # whole groups with --group-context: may be fewer than --limit
        cause, fix = ((f"are not among the {drawn} rows that --limit {cfg.limit} drew from the training file",
                       f"Raise --limit (the training file has {', '.join(map(repr, lost[:10]))}"
                       + (f"; add training rows of {', '.join(repr(c) for c in absent[:10])})" if absent else ")"))
                      if lost else
                      ("are not in the training file", "Add training rows of those classes"))
        raise DataError(
            f"{cfg.valid_file}: class(es) {names} of column {cfg.label!r} {cause} (validation data rows "
            f"{', '.join(str(r + 1) for r in rows[:10])}{', ...' if len(rows) > 10 else ''}); the model would have "
            f"an output it never trains on. {fix}, or drop these rows")
