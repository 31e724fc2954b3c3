"""The ``--limit`` draw of training rows: at random, keeping a row of each class for a classification task."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from attnpool.config import TrainConfig
from attnpool.data.columns import Labels, label_sets
from attnpool.data.context import sample_groups
from attnpool.data.errors import DataError
from attnpool.data.numbers import class_key

CLASS_TASKS = ("binary", "multiclass", "multilabel")
# A run of a class task begun with --limit before its draw kept a row of each class draws other rows on --resume.
_EARLIER_DRAW = ("; a run of a classification task started with --limit before --limit kept a row of each class "
                "(December 2026) draws other rows now, so its data reads as changed: start it anew (--overwrite)")


def earlier_draw(cfg: TrainConfig, rows: int) -> str:
    """What to add to a ``--resume`` "data changed" error where ``--limit`` drew ``rows`` class rows by another rule.

    Only a plain draw of a classification task changed (December 2026); a group-context draw, or a ``--limit`` that
    drew nothing (at or above the file's rows, so ``rows`` is fewer), did not.
    """
    drawn = bool(cfg.limit) and rows == cfg.limit and not cfg.group_context and cfg.task in CLASS_TASKS
    return _EARLIER_DRAW if drawn else ""


def limit_rows(frame: pd.DataFrame, labels: Labels, cfg: TrainConfig, where: str, log: logging.Logger) -> pd.DataFrame:
    """The ``--limit`` draw of ``cfg.limit`` training rows (``cfg.limit < len(frame)``), seeded by the split seed.

    With a group context, whole groups (:func:`~attnpool.data.context.sample_groups`): contexts as predict gives
    them, which may leave out a class (warned of, or refused as by :func:`sample_rows` when a binary or multiclass
    draw keeps fewer than 2); else :func:`sample_rows`, which keeps a row of each class. ``labels`` are those of
    ``frame``, ``where`` the training file.
    """
    seed = cfg.resolved_split_seed()
    if cfg.group_context:
        drawn = sample_groups(frame, cfg.group_context_by, cfg.limit, seed)
        _check_group_draw(drawn, labels, cfg, where, log)
        return drawn
    return sample_rows(frame, labels, cfg.task, cfg.limit, seed, label=cfg.label, where=where, log=log)


def sample_rows(frame: pd.DataFrame, labels: Labels, task: str, limit: int, seed: int, *, label: str, where: str,
                log: logging.Logger) -> pd.DataFrame:
    """``limit`` rows of ``frame`` (``limit < len(frame)``) in a random order, the same for the same ``seed``.

    A regression draws a plain random sample (``DataFrame.sample``). A classification task (binary, multiclass,
    multilabel) first takes one random row of each class (for multilabel: a row holding it, unless a row taken
    already does), then the rest at random, so that a rare class is not lost to the draw. When ``limit`` is below
    the number of classes, some are lost: a warning names them and ``--limit``.

    Args:
        frame: The training rows.
        labels: ``validate_labels`` of ``frame``'s rows (class ids, or multi-hot rows for multilabel).
        task: The task; labels, label and where matter for the classification tasks only.
        limit: The rows to draw.
        seed: The draw's seed.
        label: The label column, for the messages.
        where: The training file, for the messages.
        log: Where the warning of lost classes goes.

    Raises:
        DataError: A binary or multiclass draw of fewer than 2 classes (``limit`` < 2): the task cannot train.
    """
    if task not in CLASS_TASKS or not labels.classes:
        return frame.sample(n=limit, random_state=seed).reset_index(drop=True)
    rng = np.random.default_rng(seed)
    values = np.asarray(labels.values)
    hot = values.astype(bool) if values.ndim == 2 else np.eye(len(labels.classes), dtype=bool)[values]
    first: list[int] = []
    covered = np.zeros(hot.shape[1], dtype=bool)
    for c in rng.permutation(hot.shape[1]):
        if len(first) == limit:
            break
        if not covered[c] and hot[:, c].any():
            first.append(int(rng.choice(np.flatnonzero(hot[:, c]))))
            covered |= hot[first[-1]]
    taken = np.array(first, dtype=np.int64)
    rest = rng.choice(np.setdiff1d(np.arange(len(frame)), taken), size=limit - len(taken), replace=False)
    rows = rng.permutation(np.concatenate([taken, rest]))
    lost = np.flatnonzero(hot.any(axis=0) & ~hot[rows].any(axis=0))
    if len(lost):
        classes = len(labels.classes)
        names = ", ".join(repr(labels.classes[i]) for i in lost[:10]) + (", ..." if len(lost) > 10 else "")
        if task != "multilabel" and hot[rows].any(axis=0).sum() < 2:
            need = "both classes" if task == "binary" else "at least 2 classes"
            raise DataError(
                f"--limit {limit} draws {limit} row(s) of {where}, too few for the {classes} classes of column "
                f"{label!r}: a {task} task needs {need} among its training rows. Raise --limit to at least {classes}")
        log.warning("--limit %d draws fewer rows than the %d classes of column %r in %s: the model trains without "
                    "class(es) %s; raise --limit to at least %d to keep a row of each", limit, classes, label, where,
                    names, classes)
    return frame.iloc[rows].reset_index(drop=True)


def _keys(frame: pd.DataFrame, label: str, task: str) -> set[str]:
    """The classes (:func:`~attnpool.data.numbers.class_key`) that the rows of ``frame`` hold."""
    if task == "multilabel":
        return {class_key(c) for labels in label_sets(frame[label]) for c in labels}
    cells = [v.item() if isinstance(v, np.generic) else v for v in frame[label].dropna().tolist()]
    return {class_key(v.strip() if isinstance(v, str) else v) for v in cells}


def _check_group_draw(drawn: pd.DataFrame, labels: Labels, cfg: TrainConfig, where: str, log: logging.Logger) -> None:
    """The whole groups drawn lost a class: a warning, or an error where a binary or multiclass task keeps one."""
    if cfg.task not in CLASS_TASKS or not labels.classes:
        return
    kept = _keys(drawn, cfg.label, cfg.task)
    lost = [c for c in labels.classes if class_key(c) not in kept]
    if not lost:
        return
    classes, names = len(labels.classes), _names(lost)
    draw = (f"--limit {cfg.limit} draws {len(drawn)} row(s) of {where} in whole groups of --group-context-by "
            f"{', '.join(cfg.group_context_by)}")
    if cfg.task != "multilabel" and classes - len(lost) < 2:
        need = "both classes" if cfg.task == "binary" else "at least 2 classes"
        raise DataError(f"{draw}, holding {classes - len(lost)} of the {classes} classes of column {cfg.label!r} "
                        f"(not {names}): a {cfg.task} task needs {need} among its training rows. Raise --limit so "
                        "that the groups drawn hold rows of each class")
    log.warning("%s: the model trains without class(es) %s of column %r; raise --limit to keep rows of each class",
                draw, names, cfg.label)


def lost_to_limit(classes: list[Any], whole: Labels | None) -> list[Any]:
    """Those of ``classes`` (missing from the drawn training rows) that ``whole``, the whole file's labels, has.

    ``whole`` is ``None`` where ``--limit`` drew no rows (none given, or at or above the file's rows).
    """
    had = {class_key(c) for c in (whole.classes or [])} if whole is not None else set()
    return [c for c in classes if class_key(c) in had]


def _names(classes: list[Any]) -> str:
    return ", ".join(map(repr, classes[:10])) + (", ..." if len(classes) > 10 else "")
