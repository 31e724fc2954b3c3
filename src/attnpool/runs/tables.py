"""The columns of attnpool's prediction tables, written and read back here only.

Out-of-fold files (of a run and of each of its folds) hold ``row`` (the row of the training data; with ``limit``, of
the drawn subset), ``id`` (when the data has an id column), the target and the prediction, and ``fold``. Prediction
files (``attnpool predict``) hold the id and the prediction. For both:

* regression: ``prediction`` (``prediction_0``, ``prediction_1``... for several targets; ``target``/``target_J``
  likewise in out-of-fold files);
* single-label classification: ``prediction`` (the predicted class) and ``prob_<class>`` per class; ``target``
  (the true class) in out-of-fold files;
* multi-label classification: ``prob_<class>`` per class (prediction files add ``prediction``, the classes at
  probability >= 0.5 joined by ``|``); ``target_<class>`` (0/1) in out-of-fold files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnpool.runs.lock import RunError


def _numbered(frame: pd.DataFrame, stem: str) -> list[str]:
    """``stem`` when the frame has it, else ``stem_0, stem_1, ...`` in numeric order (``_10`` after ``_9``)."""
    if stem in frame:
        return [stem]
    found = [c for c in frame if re.fullmatch(rf"{stem}_\d+", str(c))]
    return sorted(found, key=lambda c: int(str(c).rsplit("_", 1)[1]))


def _squeeze(values: np.ndarray) -> np.ndarray:
    return values[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values


def prediction_columns(task: str, classes: Sequence[Any] | None, scores: np.ndarray, *,
                       with_labels: bool) -> dict[str, Any]:
    """The prediction columns for ``scores`` (values, or probabilities in ``classes`` order).

    ``with_labels``: add ``prediction`` (the predicted class, or for multi-label the ``|``-joined classes) for
    classification; out-of-fold files of multi-label runs leave it out.
    """
    columns: dict[str, Any] = {}
    scores = np.asarray(scores)
    if task == "regression":
        values = scores.reshape(len(scores), -1)
        if values.shape[1] == 1:
            return {"prediction": values[:, 0]}
        return {f"prediction_{j}": values[:, j] for j in range(values.shape[1])}
    classes = list(classes or [])
    if with_labels and task == "multilabel":
        columns["prediction"] = ["|".join(str(c) for c, on in zip(classes, row >= 0.5, strict=True) if on)
                                 for row in scores]
    elif task != "multilabel":
        columns["prediction"] = [classes[i] for i in np.argmax(scores, axis=1)]
    columns.update({f"prob_{c}": scores[:, j] for j, c in enumerate(classes)})
    return columns


def oof_frame(task: str, classes: Sequence[Any] | None, rows: np.ndarray, ids: np.ndarray | None,
              target: np.ndarray, scores: np.ndarray, fold: int, groups: np.ndarray | None = None) -> pd.DataFrame:
    """Out-of-fold predictions of ``rows``: row, id, target(s), prediction(s) or probabilities, fold, group.

    ``groups``: the rows' keys of the grouped folds (``group_col``), kept so that a comparison can resample whole
    groups (:func:`attnpool.comparison.paired_bootstrap`); no ``group`` column without them.
    """
    out = pd.DataFrame({"row": np.asarray(rows)})
    if ids is not None:
        out["id"] = ids
    target = np.asarray(target)
    if task == "regression":
        values = target.reshape(len(out), -1)
        names = ["target"] if values.shape[1] == 1 else [f"target_{j}" for j in range(values.shape[1])]
        predictions = prediction_columns(task, classes, scores, with_labels=False)
        for j, (name, (key, column)) in enumerate(zip(names, predictions.items(), strict=True)):
            out[name], out[key] = values[:, j], column
    else:
        classes = list(classes or [])
        if task == "multilabel":
            for j, c in enumerate(classes):
                out[f"target_{c}"] = target[:, j]
        else:
            out["target"] = [classes[i] for i in target]
        for key, column in prediction_columns(task, classes, scores, with_labels=False).items():
            out[key] = column
    out["fold"] = fold
    if groups is not None:
        out["group"] = np.asarray(groups).astype(str)
    return out


def oof_scores(frame: pd.DataFrame, task: str, classes: Sequence[Any] | None) -> np.ndarray:
    """The predictions of an out-of-fold frame as the metrics take them: values, or class probabilities."""
    if task == "regression":
        return _squeeze(frame[_numbered(frame, "prediction")].to_numpy(np.float64))
    return frame[[f"prob_{c}" for c in classes or []]].to_numpy(np.float64)


def oof_targets(frame: pd.DataFrame, task: str, classes: Sequence[Any] | None) -> np.ndarray:
    """The true values of an out-of-fold frame: values, class indices (in ``classes`` order) or 0/1 per class."""
    if task == "regression":
        return _squeeze(frame[_numbered(frame, "target")].to_numpy(np.float64))
    if task == "multilabel":
        return frame[[f"target_{c}" for c in classes or []]].to_numpy(np.int64)
    index = {str(c): i for i, c in enumerate(classes or [])}
    return np.array([index[str(v)] for v in frame["target"]], dtype=np.int64)


def read_oof(path: Any, fix: str = "restore the file from a copy of the run, or re-train the run") -> pd.DataFrame:
    """Read an out-of-fold file back, sorted by row; ids and group keys stay strings (``0001`` is not the number 1).

    A classification file (``prob_*`` columns) keeps its labels as the text they were trained as, as the training
    data is read: the classes ``01`` and ``NA`` are not the number 1 and a missing value. A damaged file (empty, its
    header edited, its last line cut short) is a :class:`RunError` naming it, what is wrong and ``fix``.
    """
    try:
        header = pd.read_csv(path, nrows=0).columns
        text = ["id", "group"]  # as written: the id or group "NA", "null" or "" is not a missing value
        if any(str(c).startswith("prob_") for c in header):
            text += ["target", "prediction"]  # class labels
        numbers = {c: [""] for c in header if c not in text}  # a NaN (a diverged fold's score) is written ""
        frame = pd.read_csv(path, dtype={c: str for c in text if c in header}, keep_default_na=False,
                            na_values=numbers)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        what = "empty" if isinstance(err, pd.errors.EmptyDataError) else str(err).strip()
        raise RunError(f"{path} is corrupt ({what}); {fix}") from err
    if missing := [c for c in ("row", "fold") if c not in frame]:
        raise RunError(f"{path} is corrupt (no {' or '.join(missing)} column; its header was edited or cut); {fix}")
    for column in ("row", "fold"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if bad := [i + 2 for i in np.flatnonzero(values.isna() | (values % 1 != 0))[:3]]:  # +2: the header, from 1
            raise RunError(f"{path} is corrupt (no whole number in its {column} column on line"
                           f"{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}: cut short or edited); {fix}")
    return frame.sort_values("row").reset_index(drop=True)
