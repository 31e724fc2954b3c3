"""The true labels given to ``explain``: one per text, missing ones as ``None``, and each example's label and error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from attnpool.data.columns import label_sets
from attnpool.data.errors import DataError
from attnpool.data.numbers import class_key
from attnpool.json_values import is_missing, json_value
from attnpool.tasks import label_text


def label_list(labels: Any, texts: list[str], one_text: bool, several_outputs: bool = False,
               multi_label: bool = False) -> list[Any] | None:
    """One label per text, by position (a Series' index is not), every missing one (:func:`is_missing`) as ``None``.

    For a ``multi_label`` model a missing label is ``[]``, the empty set of classes, as training reads a blank or
    missing cell (:func:`attnpool.data.columns.label_sets`): such a row has an error, as ``[]`` has; when every
    label is missing there are none (``None``): training refuses a column without any label.

    With one text (``texts`` given as a string), a single label may be given as it is: ``"c1"``, ``0.5``; for a
    model of ``several_outputs`` (regression of several values, multi-label classification) a list is that text's
    label (``[0.1, 0.2]``, ``["a", "c"]``) unless it holds one item (``[[0.1, 0.2]]``). A DataFrame gives one label
    a row (``df[["y1", "y2"]]``: a list of two numbers; a one-column frame: the cells).

    Raises:
        ValueError: A single label for several texts, or not one label per text.
    """
    if labels is None:
        return None
    if isinstance(labels, pd.DataFrame):  # iterating a frame gives its column names, not its rows
        labels = labels.iloc[:, 0].tolist() if labels.shape[1] == 1 else labels.to_numpy().tolist()
    single = isinstance(labels, str | bytes) or not isinstance(labels, Iterable) or (
        isinstance(labels, np.ndarray) and labels.ndim == 0)
    if single and not one_text:
        raise ValueError(f"explain: labels={labels!r} is one label, for {len(texts)} texts; give a list with one "
                         "label per text")
    values = [labels] if single else list(labels)
    if one_text and several_outputs and len(values) != 1:  # [0.1, 0.2]: the one text's label of two outputs
        values = [labels]
    if len(values) != len(texts):
        hint = (" (a label of several outputs is a list: labels=[[0.1, 0.2], ...] or [['a', 'c'], ...], one per "
                "text)" if several_outputs else "")
        raise ValueError(f"explain: {len(texts)} texts but {len(values)} labels; give one per text{hint}")
    missing = [is_missing(v) for v in values]
    if multi_label and all(missing):  # an unlabelled file (a blank label column), not rows of no class
        return None
    return [([] if multi_label else None) if gone else v for v, gone in zip(values, missing, strict=True)]


def check_numeric(labels: list[Any] | None, num_labels: int) -> None:
    """Refuse, before the model runs, a label that is not ``num_labels`` numbers (a regression model's labels).

    A label of another size would be broadcast against the prediction (one value for two outputs: a made-up error)
    or fail in numpy after every forward and erasure pass.

    Raises:
        ValueError: Which label, and what to give instead.
    """
    for index, value in enumerate(labels or []):
        if value is None:
            continue
        try:
            target = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            target = None
        if target is None or target.size == 0:
            raise ValueError(f"explain: labels[{index}] is {value!r}, not a number; this model predicts values "
                             "(regression), so its labels are numbers: fix the label, or give None where it is "
                             "missing") from None
        if target.size != num_labels:
            want = "one number" if num_labels == 1 else f"a list of {num_labels} numbers, one per output"
            raise ValueError(f"explain: labels[{index}] is {value!r}, {target.size} value(s), but this regression "
                             f"model predicts {num_labels} value(s) (config.num_labels); give {want}, or None "
                             "where it is missing")


def label_and_error(label: Any, problem_type: str, prediction: np.ndarray, names: list[str] | None,
                    config: Any) -> tuple[Any, float | None]:
    """The label as the report shows it and the example's error (``None`` where it has none).

    The error is the absolute error (mean over the outputs whose value is given: not NaN; ``None`` when none is)
    for regression, 0 or 1 for a single-label class, and for
    multi-label classification the Hamming loss: the share of the classes (the model's, and any other the label
    names) that the prediction (probability >= 0.5) gets wrong. It is 0 exactly when the predicted set is the
    label's (what the metrics' multilabel accuracy counts), so ``error > 0`` marks the example misclassified.
    """
    if label is None:
        return None, None
    if problem_type == "regression":
        target = np.asarray(label, dtype=np.float64).ravel()
        present = ~np.isnan(target)  # an output whose value is missing (NaN) counts for no error
        if not present.any():
            return None, None
        shown = json_value(target.tolist()) if target.size > 1 else float(target[0])
        return shown, float(np.abs(prediction.ravel()[present] - target[present]).mean())
    if problem_type == "single_label_classification":
        # one key per class however it is written: 5, 5.0 and "5.0" are the class "5" (data.numbers.class_key)
        label2id = {class_key(k): int(v) for k, v in (getattr(config, "label2id", None) or {}).items()}
        index = label2id.get(class_key(label))  # 1.0 (a label column with a blank cell) is the class 1
        # an integer that names no class is the output's index, unless the classes are numbers (2, 5, 7: 1 is none)
        numbered = any(k.lstrip("-").isdigit() for k in label2id)
        position = _as_index(label)
        if index is None and not numbered and position is not None and position < len(names or []):
            index = position
        if index is None:
            return label_text(label), None
        return (names[index] if names else index), float(index != int(np.argmax(prediction)))
    shown = json_value(label.tolist() if isinstance(label, np.ndarray) else label)
    return shown, _hamming(label, prediction, names)


def _hamming(label: Any, prediction: np.ndarray, names: list[str] | None) -> float | None:
    """The share of classes a multi-label prediction gets wrong; ``None`` for a label that is no set of classes.

    The label is read as training reads a multilabel cell (:func:`attnpool.data.columns.label_sets`): ``"a|b"``, a
    list of class names, or a list written as text; ``""`` is a row without classes. A multi-hot row of 0s and 1s,
    one per output (``[1, 0, 1]``), names the classes whose value is 1, unless the classes are numbered.
    """
    scores = np.asarray(prediction, dtype=np.float64).ravel()
    classes = [str(n) for n in (names or range(len(scores)))]
    values = np.asarray(label) if isinstance(label, list | tuple | np.ndarray) else None
    if (values is not None and values.shape == scores.shape and values.dtype.kind in "biuf"
            and np.isin(values, (0, 1)).all() and not all(c.lstrip("-").isdigit() for c in classes)):
        wanted = {c for c, v in zip(classes, values, strict=True) if v == 1}
    else:
        try:
            (wanted,) = label_sets(pd.Series([label], dtype=object, name="labels"))
        except DataError:
            return None
    predicted = {c for c, p in zip(classes, scores, strict=True) if p >= 0.5}
    return len(predicted ^ wanted) / max(len(set(classes) | wanted), 1)


def _as_index(label: Any) -> int | None:
    """A label that is a whole number >= 0 as an int: ``1``, ``1.0`` (read from a column with a blank cell), ``"1"``."""
    if isinstance(label, float | np.floating):
        return int(label) if float(label).is_integer() and label >= 0 else None
    if isinstance(label, int | np.integer):
        return int(label) if label >= 0 else None
    text = label.strip() if isinstance(label, str) else ""
    return int(text) if text.isascii() and text.isdigit() else None
