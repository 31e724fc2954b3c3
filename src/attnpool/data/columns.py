"""From table columns to model inputs: required columns, the texts to tokenise, and validated labels."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from attnpool.data.errors import DataError
from attnpool.data.numbers import class_key, flags_and_numbers
from attnpool.data.templates import template_columns, template_parts
from attnpool.data.templates import template_fields as template_fields  # re-exported: imported from here
from attnpool.data.templates import text_fields as text_fields
from attnpool.json_values import is_missing
from attnpool.tasks import TASKS, label_text

_SHOW = 5  # offending rows / values named in an error message


def check_columns(df: pd.DataFrame, required: Iterable[str | None], where: str) -> None:
    """Raise unless every required column is in ``df``.

    Args:
        df: The table.
        required: Column names; ``None`` entries (an unset option) are skipped.
        where: What the table is, for the message (a file path, ``"PPPM train"``...).

    Raises:
        DataError: Naming the missing columns and the columns present.
    """
    present = [shown_column(c) for c in df.columns]
    missing = list(dict.fromkeys(c for c in required if c is not None and c not in df.columns))
    if missing:
        spaced = [repr(str(c)) for c in df.columns if str(c) != str(c).strip() and str(c).strip() in missing]
        hint = (f" ({', '.join(spaced)} in the header: the spaces around a name are part of it, e.g. after the "
                "commas of 'text, label'; remove them)" if spaced else "")
        raise DataError(
            f"{where}: missing column(s) {', '.join(map(repr, missing))}; the columns present are: "
            f"{', '.join(present) or '(none)'}{hint}. Fix the column names in the options or in the file header"
        )


def shown_column(name: Any) -> str:
    """A column name for a message: quoted when spaces around it or control characters (a tab) would not show."""
    text = str(name)
    return repr(text) if text != text.strip() or not text.isprintable() else text


class Texts(NamedTuple):
    """The texts to tokenise, one per row.

    Unpacks as ``first, second, num_empty = build_texts(...)``.
    """

    first: list[str]
    second: list[str] | None  # the second text of a pair (two ``text_cols``); None for single texts
    num_empty: int  # rows where a text field was missing or blank and was replaced by ""


def build_texts(
    df: pd.DataFrame,
    text_cols: str | Sequence[str] | None = None,
    template: str | None = None,
    sep_token: str = "[SEP]",
) -> Texts:
    """The text of each row: one column, a text pair, several columns joined by the separator, or a template.

    - one column: its values;
    - two columns: a text pair ``(first, second)``, for the tokenizer to join with its own special tokens;
    - more columns: the values joined by ``f" {sep_token} "``;
    - a template: placeholders naming columns, e.g. ``"{anchor} [SEP] {target} [SEP] {context}"``, each replaced by
      the cell as text; the name is the column's whole name (``{review.title}``), and ``str.format``'s conversions
      and format specs (``{price:.2f}``) are refused. The literal ``[SEP]`` in a template is replaced by
      ``sep_token``, so one template serves BERT (``[SEP]``) and RoBERTa (``</s>``) tokenizers. Braces meant
      literally are doubled: ``{{``, ``}}``.

    Missing (``NaN``/``None``) or blank values become ``""``; the rows that had one are counted, so the caller can
    log it. Non-string values are written with ``str``.

    Args:
        df: The table.
        text_cols: Column name(s). Give these or ``template``, not both.
        template: The row template.
        sep_token: The tokenizer's separator token.

    Returns:
        ``Texts(first, second, num_empty)``; ``second`` is ``None`` unless exactly two ``text_cols`` were given.

    Raises:
        DataError: Neither or both of ``text_cols`` and ``template``; a column or placeholder that is not a
            column of ``df`` (the message lists the columns); a placeholder without a name (``{}``, ``{0}``), a
            conversion or a format spec.
    """
    if isinstance(text_cols, str):
        text_cols = [text_cols]
    if text_cols and template:
        raise DataError(
            f"give the text columns or a template, not both (got text_cols={list(text_cols)!r} and "
            f"template={template!r})"
        )
    if not text_cols and not template:
        raise DataError(
            "no text: give text_cols (one column, two for a text pair, or more to join with the separator) or a "
            "template such as '{anchor} [SEP] {target}'"
        )
    if template:
        fields = template_columns(template, df.columns)
        cells, empty = _cells(df, fields)
        at = {name: i for i, name in enumerate(fields)}
        parts = [(literal.replace("[SEP]", sep_token), at.get(name)) for literal, name in template_parts(template)]
        first = ["".join(literal + ("" if i is None else row[i]) for literal, i in parts)
                 for row in zip(*cells, strict=True)]
        return Texts(first, None, int(empty.sum()))
    cols = list(text_cols or [])
    check_columns(df, cols, "text columns")
    cells, empty = _cells(df, cols)
    if len(cols) == 2:
        return Texts(cells[0], cells[1], int(empty.sum()))
    joiner = f" {sep_token} "
    first = cells[0] if len(cols) == 1 else [joiner.join(row) for row in zip(*cells, strict=True)]
    return Texts(first, None, int(empty.sum()))


def _cells(df: pd.DataFrame, cols: Sequence[str]) -> tuple[list[list[str]], np.ndarray]:
    """Each column's values as strings ("" for missing or blank), and a per-row mask of rows that had such a value."""
    empty = np.zeros(len(df), dtype=bool)
    out = []
    for col in cols:
        values = [_to_text(v) for v in df[col].tolist()]
        blank = np.fromiter((not v.strip() for v in values), dtype=bool, count=len(values))
        empty |= blank
        out.append(["" if b else v for v, b in zip(values, blank, strict=True)])
    return out, empty


def _to_text(value: Any) -> str:
    if is_missing(value):
        return ""
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Labels:
    """Validated labels of one column.

    Attributes:
        values: ``(N,)`` float64 for regression; ``(N,)`` int64 class ids for binary/multiclass (indices into
            ``classes``); ``(N, C)`` float32 multi-hot for multilabel.
        classes: The class names, sorted (``None`` for regression); ``values`` index into it.
    """

    values: np.ndarray
    classes: list[Any] | None = None

    @property
    def num_classes(self) -> int:
        """Number of classes (0 for regression)."""
        return len(self.classes or [])


def validate_labels(df: pd.DataFrame, label_col: str, task: str, *, delimiter: str = "|") -> Labels:
    """Check and encode the label column for a task.

    - ``regression``: numbers; missing, non-numeric or infinite values, and date or duration columns, are errors.
    - ``binary`` / ``multiclass``: any values (numbers or strings); classes are the sorted distinct values
      (integral floats such as ``1.0`` become ints; a column mixing numbers and strings is compared as strings;
      two spellings of one class, ``1`` and ``"1.0"``, are refused: predict would read them as one; so are
      JSON's ``true``/``false`` beside numbers, which predict reads as other classes than ``1``/``0``).
      Binary needs exactly two classes, multiclass at least two. Missing values, lists and objects are errors.
    - ``multilabel``: each cell a ``delimiter``-separated string (``"a|b"``), a list (JSONL, Parquet) or a list
      written as text (``"['a', 'b']"`` as pandas writes a list column to CSV, or ``'["a", "b"]'``); classes are
      the sorted distinct label strings. An empty or missing cell (or ``[]``) is a row with no labels. Object cells
      are errors, and so is a class ``"a,b"`` (or ``"a;b"``) whose parts are classes too: another delimiter.

    Row numbers in messages are 1-based data rows, as in the file (the header is not counted).

    Args:
        df: The table.
        label_col: The label column.
        task: One of ``regression``, ``binary``, ``multiclass``, ``multilabel``.
        delimiter: Separator of the labels in a multilabel string cell.

    Returns:
        The encoded :class:`Labels`.

    Raises:
        DataError: Unknown task or column, or bad label values (naming the first offending rows and the column).
    """
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    check_columns(df, [label_col], "labels")
    column = df[label_col]
    if task == "regression":
        return Labels(_regression_values(column, label_col))
    if task == "multilabel":
        return _multilabel(column, delimiter)
    # "cat " is the class "cat", and a label of spaces is a missing one (not a class of its own)
    column = column.map(lambda v: (v.strip() or None) if isinstance(v, str) else v)
    missing = np.flatnonzero(column.isna().to_numpy())
    if len(missing):
        raise DataError(
            f"column {label_col!r} has missing labels in data rows {_rows(missing)}; every row of a {task} task "
            "needs a class: fill them in or drop those rows"
        )
    values = [v.item() if isinstance(v, np.generic) else v for v in column.tolist()]
    _refuse_containers(values, label_col, task)
    flags, numbers = flags_and_numbers(values)
    if flags and numbers:  # JSONL's true and 1: one class to the writer, two to predict ("True" and "1")
        raise DataError(f"column {label_col!r} writes classes both as true/false ({_values(flags)}) and as numbers "
                        f"({_values(numbers)}); predict reads true and 1 as two classes: write each class one way, "
                        "all true/false or all numbers")
    classes, codes = _classes(values)
    spellings: dict[str, list[Any]] = {}
    for c in classes:
        spellings.setdefault(class_key(c), []).append(c)
    if clashes := [_values(names) for names in spellings.values() if len(names) > 1]:
        raise DataError(f"column {label_col!r} writes a class in several ways: {'; '.join(clashes[:_SHOW])}; predict "
                        "reads them as one class (5, 5.0 and '5.0' alike), training as two: write each class one way")
    if task == "binary" and len(classes) != 2:
        hint = "use task='multiclass'" if len(classes) > 2 else "a binary task needs both classes in the data"
        raise DataError(
            f"column {label_col!r}: task 'binary' needs exactly 2 classes, found {len(classes)}: "
            f"{_values(classes)}; {hint}"
        )
    if task == "multiclass" and len(classes) < 2:
        raise DataError(
            f"column {label_col!r}: task 'multiclass' needs at least 2 classes, found only {_values(classes)}; "
            "check that the right column and file are used"
        )
    return Labels(codes, classes)


def _refuse_containers(values: list[Any], name: str, task: str) -> None:
    """A JSONL list or object, or a Parquet list, is no class: its text (``"[1]"``, ``"{'x': 1}"``) would be one."""
    row = next((r for r, v in enumerate(values) if isinstance(v, list | tuple | dict | np.ndarray)), None)
    if row is not None:
        many = not isinstance(values[row], dict)
        raise DataError(
            f"column {name!r}, data row {row + 1}: the label {values[row]!r} is {'a list' if many else 'an object'}, "
            f"but a {task} label is one class per row (a number or a text): write the class itself"
            + (", or train with --task multilabel for rows with several labels" if many else ""))


def _regression_values(column: pd.Series, name: str) -> np.ndarray:
    dtype = column.dtype  # pd.to_numeric would read a time as nanoseconds (or another unit) since 1970
    if (pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)
            or isinstance(dtype, pd.PeriodDtype)):
        raise DataError(f"column {name!r} holds {dtype} values (dates or durations), not numbers; regression labels "
                        "must be finite numbers: convert the column to the numbers to predict (e.g. days), or choose "
                        "a classification task")
    if column.dtype == bool:
        column = column.astype(np.float64)
    numbers = pd.to_numeric(column, errors="coerce").astype(np.float64).to_numpy()
    missing = column.isna().to_numpy()
    problems = [
        ("missing values", missing),
        ("non-numeric values", np.isnan(numbers) & ~missing),
        ("infinite values", np.isinf(numbers)),
    ]
    found = []
    for what, mask in problems:  # every kind of problem at once: the user fixes the file in one go
        rows = np.flatnonzero(mask)
        if len(rows):
            examples = "" if what == "missing values" else f" ({_values(column.iloc[rows[:_SHOW]].tolist())})"
            found.append(f"{len(rows)} {what} in data rows {_rows(rows)}{examples}")
    if found:
        raise DataError(
            f"column {name!r} has {'; '.join(found)}; regression labels must be finite numbers: fix or drop those "
            "rows, or choose a classification task"
        )
    return numbers


def _classes(plain: list[Any]) -> tuple[list[Any], np.ndarray]:
    """Sorted distinct values (plain Python scalars, not numpy's), and each value's index among them."""
    if all(isinstance(v, bool) for v in plain):
        pass
    elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in plain):  # int(True) would be the class 1
        if all(float(v).is_integer() for v in plain):
            plain = [int(v) for v in plain]  # 0.0/1.0 (a column pandas read as float) -> 0/1
    elif not all(isinstance(v, str) for v in plain):
        plain = [label_text(v) for v in plain]  # mixed numbers and strings: as text, as predict reads them (1.0: "1")
    classes = sorted(set(plain))
    index = {c: i for i, c in enumerate(classes)}
    return classes, np.array([index[v] for v in plain], dtype=np.int64)


def label_sets(column: pd.Series, delimiter: str = "|") -> list[set[str]]:
    """Each multilabel cell's classes (an empty set for an empty or missing cell), every cell checked.

    Raises:
        DataError: A cell that is not a ``delimiter``-separated string or a list of labels, such as an object
            (naming its data row).
    """
    return [_label_set(_listed(v, column.name, row, delimiter), delimiter) for row, v in enumerate(column.tolist())]


def _multilabel(column: pd.Series, delimiter: str) -> Labels:
    cells = [_listed(v, column.name, row, delimiter) for row, v in enumerate(column.tolist())]
    sets = [_label_set(cell, delimiter) for cell in cells]
    classes = sorted(set().union(*sets))
    if not classes:
        raise DataError(
            f"column {column.name!r} has no labels in any row; multilabel cells are {delimiter!r}-separated strings "
            f"such as 'a{delimiter}b' or lists"
        )
    # a list cell's ["a|b"]: the prediction files join a row's classes with "|", and it would read back as two
    joined = [c for c in classes if delimiter in c or "|" in c]
    if joined:
        raise DataError(f"column {column.name!r} has class name(s) {_values(joined)} holding a label delimiter "
                        f"({delimiter!r}, or '|' that prediction files join a row's classes with): they would read "
                        "back as several classes; rename those classes")
    texts = [labels if not isinstance(cell, list | tuple | np.ndarray) else set() for labels, cell in
             zip(sets, cells, strict=True)]  # a list's "Arts, Culture" is one class: a comma cannot separate there
    _refuse_other_delimiters(texts, classes, column.name, delimiter)
    index = {c: i for i, c in enumerate(classes)}
    values = np.zeros((len(sets), len(classes)), dtype=np.float32)
    for row, labels in enumerate(sets):
        values[row, [index[c] for c in labels]] = 1.0
    return Labels(values, classes)


def _refuse_other_delimiters(sets: list[set[str]], classes: list[str], name: Any, delimiter: str) -> None:
    """A class ``"a,b"`` (or ``"a; b"``) of a text cell whose parts are classes too: another delimiter.

    ``sets``: the classes of each row's text cell (a list cell's: none, its items being classes as written).
    """
    known = set(classes)
    joined = {c: parts for c in set().union(*sets)
              if len(parts := [p.strip() for p in re.split("[,;]", c)]) > 1 and all(p in known for p in parts)}
    for row, labels in enumerate(sets):  # the first row holding such a class
        for c in sorted(labels & joined.keys()):
            raise DataError(
                f"column {name!r}, data row {row + 1}: {c!r} separates labels by {',' if ',' in c else ';'!r}, but "
                f"multilabel cells separate them by {delimiter!r}: it would train as a class of its own beside "
                f"{_values(joined[c])}; write {delimiter.join(joined[c])!r}, or, if {c!r} is one class, the row's "
                f"labels as a list ({[c]!r} in a CSV cell, a JSON list in JSONL, a list column in Parquet)")


def _listed(value: Any, name: Any, row: int, delimiter: str) -> Any:
    """A cell holding a list written as text (``"['a', 'b']"``, as pandas writes a list column to CSV) as the list.

    Split at the delimiter, such a cell would train on the label combinations (``"['a'"``) without an error. An
    object cell (JSONL's ``{"x": 1}``), or a list holding lists or objects, is refused: its text is no label.
    """
    nested = isinstance(value, list | tuple | np.ndarray) and any(
        isinstance(v, list | tuple | dict | np.ndarray) for v in value)
    if isinstance(value, dict) or nested:
        what = "a list holding lists or objects" if nested else "an object"
        raise DataError(f"column {name!r}, data row {row + 1}: {value!r} is {what}, not labels; write a row's labels "
                        f"as a list of texts or numbers (JSONL, Parquet) or separated by {delimiter!r} (e.g. "
                        f"'a{delimiter}b')")
    text = value.strip() if isinstance(value, str) else ""
    if not (text.startswith("[") and text.endswith("]")):
        return value
    try:
        listed = json.loads(text)
    except ValueError:
        try:
            listed = ast.literal_eval(text)  # Python's repr, as pandas writes it: single quotes
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            listed = None
    if isinstance(listed, list) and all(isinstance(v, str | int | float) for v in listed):
        return listed
    raise DataError(
        f"column {name!r}, data row {row + 1}: {value!r} looks like a list written as text but is not a list of "
        f"labels; write a row's labels separated by {delimiter!r} (e.g. 'a{delimiter}b'), or keep lists in a JSONL "
        "or Parquet file. A class whose name is in brackets must be renamed"
    )


def _label_set(value: Any, delimiter: str) -> set[str]:
    def text(v: Any) -> str:  # 1.0 is the label 1: a column of single numbers with a blank cell is read as floats
        return str(int(v)) if isinstance(v, float) and v.is_integer() else _to_text(v)

    if isinstance(value, (list, tuple, np.ndarray)):
        parts = [text(v) for v in value]
    else:
        parts = text(value).split(delimiter)
    return {p.strip() for p in parts if p.strip()}


def _rows(positions: np.ndarray) -> str:
    """``"3, 8, 9"`` (1-based), ``"... (12 rows)"`` when there are more than shown."""
    shown = ", ".join(str(int(p) + 1) for p in positions[:_SHOW])
    return shown + (f", ... ({len(positions)} rows)" if len(positions) > _SHOW else "")


def _values(values: Sequence[Any]) -> str:
    shown = ", ".join(repr(v) for v in list(values)[:_SHOW])
    return shown + (", ..." if len(values) > _SHOW else "")
