"""A run's folds: the fold of every training row, read back checked, and the one rule for which folds a command uses.

:class:`~attnpool.runs.Run` names the files and calls these; this module reads what it is given.
"""

from __future__ import annotations

import logging
import numbers
import operator
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.runs.lock import RunError

logger = logging.getLogger(__name__)

FINISH = "`attnpool train --resume` on the run finishes it"


def read_fold_ids(path: Path, fix: str) -> np.ndarray:
    """The fold of every row (``-1``: a training row of a run with a validation file) from a fold file.

    The file holds ``row`` (``0..n-1``, in order) and ``fold`` (a whole number from ``-1``). A damaged one (empty,
    its header edited, cut short, a value edited) is a :class:`RunError` naming it, what is wrong and ``fix``: read
    as it was, a cut file's fewer rows were taken for data that changed since the run started.
    """
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        what = "empty" if isinstance(err, pd.errors.EmptyDataError) else " ".join(str(err).split())
        raise RunError(f"{path} is damaged ({what}); {fix}") from err
    if missing := [c for c in ("row", "fold") if c not in frame]:
        raise RunError(f"{path} is damaged (no {' or '.join(missing)} column: its header was edited or cut); {fix}")
    rows = pd.to_numeric(frame["row"], errors="coerce").to_numpy(np.float64)
    folds = pd.to_numeric(frame["fold"], errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(folds) | (folds % 1 != 0) | (folds < -1)
    if bad.any():
        lines = [int(i) + 2 for i in np.flatnonzero(bad)[:3]]  # +2: the header, lines from 1
        raise RunError(f"{path} is damaged (no fold number in its fold column on line{'s' if len(lines) > 1 else ''} "
                       f"{', '.join(map(str, lines))}: cut short or edited); {fix}")
    if (off := np.flatnonzero(rows != np.arange(len(rows)))).size:
        value = frame["row"].iloc[off[0]]
        raise RunError(f"{path} is damaged (line {int(off[0]) + 2} holds row {'nothing' if pd.isna(value) else value}"
                       f", not {int(off[0])}: its rows are not 0 to {len(rows) - 1} in order; edited or cut); {fix}")
    return folds.astype(np.int64)


def choose_folds(where: Path, trained: Sequence[int], unfinished: Mapping[int, str],
                 folds: int | Sequence[int] | None = None) -> list[int]:
    """The folds a command uses: ``None`` for every finished fold, else the given ones (each must be finished).

    ``trained``: the folds with a saved model; ``unfinished``: those of them whose training did not finish (killed
    after the model was saved, before its results were written), each with what shows it. Such a fold is left out
    with a warning, and refused when asked for by number: its model may not be the one its training chose.
    """
    finished = [f for f in trained if f not in unfinished]
    if folds is not None:
        wanted = fold_numbers(folds)
        if asked := [f for f in wanted if f in unfinished]:
            raise RunError(f"{where}: fold {asked[0]} did not finish training ({unfinished[asked[0]]}); {FINISH}, or "
                           f"leave it out{_finished_list(finished)}")
        if not wanted:
            raise RunError(f"{where}: --folds (folds) names no fold; name one or more of its trained folds "
                           f"({', '.join(map(str, finished)) or 'none'}), or leave --folds out to use all of them")
        missing = [f for f in wanted if f not in finished]
        if missing:
            raise RunError(f"{where} has no trained fold {', '.join(map(str, missing))}; "
                           f"trained folds: {', '.join(map(str, finished)) or 'none'}")
        return list(dict.fromkeys(wanted))
    if not finished:
        why = "; ".join(f"fold {f}: {unfinished[f]}" for f in unfinished)
        raise RunError(f"{where} has no trained fold that finished training ({why}); {FINISH}")
    for fold, why in unfinished.items():
        logger.warning("%s: leaving out fold %d: it did not finish training (%s); %s", where, fold, why, FINISH)
    return finished


def _finished_list(finished: Sequence[int]) -> str:
    return f" (finished folds: {', '.join(map(str, finished))})" if finished else ""


def fold_numbers(folds: object) -> list[int]:
    """One fold number (a Python or NumPy integer) or an iterable of them, as ints; anything else refused."""
    try:
        items = [folds] if isinstance(folds, numbers.Integral | str | bytes) else list(folds)  # "10": not 1 and 0
    except TypeError:  # not iterable: 1.0
        items = [folds]
    if bad := [f for f in items if isinstance(f, bool) or not isinstance(f, numbers.Integral)]:
        raise ValueError(f"folds {folds!r}: {bad[0]!r} is not a fold number; give a fold number or a list of fold "
                         "numbers, e.g. 0 or [0, 2]")
    return [operator.index(f) for f in items]
