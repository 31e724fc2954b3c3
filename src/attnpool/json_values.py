"""Cells of Python, NumPy and pandas data: one rule for a missing cell, one for every JSON value attnpool writes."""

from __future__ import annotations

import datetime
import math
from typing import Any

import numpy as np
import pandas as pd


def is_missing(value: Any) -> bool:
    """A missing cell, by one rule for every reader: ``None``, ``pd.NA``, ``NaT`` or a NaN float (NumPy's too).

    Text is never missing here (``""`` and ``"nan"`` are text: the readers decide what an empty field means).
    """
    return (value is None or value is pd.NA or value is pd.NaT
            or (isinstance(value, float | np.floating) and math.isnan(value)))


def json_value(value: Any, *, as_text: bool = False) -> Any:
    """``value`` as data ``json.dumps`` writes as valid JSON.

    Missing values (``None``, ``pd.NA``, ``NaT``) and NaN or infinite floats become ``null``: JSON has no NaN, and
    Python's ``Infinity`` is not JSON. Tuples, lists and arrays become lists, dictionary keys text, NumPy scalars
    Python numbers (a float32 in the shortest digits of its own precision: ``0.1`` stays ``0.1``), dates and times
    ISO text. Anything else is returned as it is, so that ``json.dumps`` names what it cannot write, or as its
    ``str`` with ``as_text=True`` (a table cell, which must be written whatever it holds).
    """
    if isinstance(value, dict):
        return {str(k): json_value(v, as_text=as_text) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_value(v, as_text=as_text) for v in value]
    if isinstance(value, np.floating):
        value = float(str(value))
    elif isinstance(value, np.generic):
        value = value.item()
    if is_missing(value) or (isinstance(value, float) and math.isinf(value)):
        return None
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime.date | datetime.time | pd.Timedelta):
        return value.isoformat()
    return str(value) if as_text else value
