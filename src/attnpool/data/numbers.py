"""Numbers written as text, as a CSV/TSV column of numbers is read, and the class a label names."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from attnpool.tasks import label_text

# Numbers as written by people and by pandas' `to_csv`: no leading zeros (those are ids or codes, kept as text).
INT_PATTERN = r"[+-]?(?:0|[1-9]\d*)"
FLOAT_PATTERN = r"[+-]?(?:(?:0|[1-9]\d*)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


def as_number(text: str) -> int | float | None:
    """``text`` as the number it is read as in a CSV/TSV column of numbers (``"5.0"``, ``" -3"``), else ``None``.

    Text that is not a plain number (``"0001"``, ``"5 stars"``, ``"1,5"``) is ``None``: a column holding it is text.
    """
    text = text.strip()
    return int(text) if re.fullmatch(INT_PATTERN, text) else float(text) if re.fullmatch(FLOAT_PATTERN, text) else None


def class_key(label: Any) -> str:
    """The class a label names, however its column was read: ``5``, ``5.0`` and ``"5.0"`` are one class.

    Training saves the classes of a column holding text (``"5.0"``, ``"unrated"``) as text, and a file to predict
    whose labels are all numbers is read as numbers (``5.0``, written ``"5"`` by ``label_text``).
    """
    number = as_number(label) if isinstance(label, str) else label
    if isinstance(number, int | np.integer) and not isinstance(number, bool):
        return str(int(number))
    return label_text(float(number)) if isinstance(number, float | np.floating) else label_text(label)


def flags_and_numbers(values: list[Any]) -> tuple[list[bool], list[int | float]]:
    """The distinct true/false values and the distinct numbers (not bools) among plain labels, each sorted.

    JSON's ``true`` and ``1`` are one class to Python (``True == 1``) but two to predict (``"True"``, ``"1"``): a
    label column, or the training and validation files together, must write its classes one way or the other.
    """
    flags = sorted({v for v in values if isinstance(v, bool)})
    numbers = sorted({v for v in values if isinstance(v, int | float) and not isinstance(v, bool)})
    return flags, numbers
