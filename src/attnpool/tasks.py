"""The tasks attnpool trains: their names, Hugging Face ``problem_type``, default loss, outputs and primary metric.

This module is the one place that maps between the recipe's task names (``regression``, ``binary``,
``multiclass``, ``multilabel``) and transformers' ``problem_type`` terms, picks a loss, and turns a model's logits
into what is reported (values for regression, probabilities for classification).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

TASKS = ("regression", "binary", "multiclass", "multilabel")
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
# pearson: 1 - the batch's correlation of predictions and targets (regression only; model/losses.py)
LOSSES = ("mse", "bce", "cross_entropy", "pearson")


def check_task(task: str) -> str:
    """``task`` itself; ``ValueError`` naming the valid tasks when it is not one."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    return task


def problem_type(task: str) -> str:
    """Transformers' ``problem_type`` of a task."""
    check_task(task)
    if task == "regression":
        return "regression"
    return "multi_label_classification" if task == "multilabel" else "single_label_classification"


def task_of(problem: str | None, num_labels: int) -> str:
    """The task a model was built for, from its config's ``problem_type`` (unset: transformers' rule)."""
    if problem is None:
        problem = "regression" if num_labels == 1 else "single_label_classification"
    if problem not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem!r}")
    if problem == "regression":
        return "regression"
    if problem == "multi_label_classification":
        return "multilabel"
    return "binary" if num_labels == 2 else "multiclass"


def num_labels(task: str, num_outputs: int) -> int:
    """Outputs of the head: one per target (regression, at least one), one per class (classification)."""
    return max(num_outputs, 1) if check_task(task) == "regression" else num_outputs


def default_loss(problem: str, output_activation: str | None = None) -> str:
    """The loss when none is chosen.

    MSE for regression (BCE for a sigmoid output, as the PPPM recipe), cross-entropy for single-label and BCE for
    multi-label classification.
    """
    if problem == "regression":
        return "bce" if output_activation == "sigmoid" else "mse"
    return "cross_entropy" if problem == "single_label_classification" else "bce"


def scores_from_logits(task: str, logits: Any) -> np.ndarray:
    """What is reported for a model's ``logits``: values for regression, probabilities for classification.

    Regression with one target gives a ``(N,)`` vector (already in [0, 1] for a model with
    ``output_activation="sigmoid"``, which is for regression only), otherwise ``(N, num_labels)``.
    """
    logits = np.asarray(logits, dtype=np.float64)
    check_task(task)
    if task == "regression":
        return logits[..., 0] if logits.shape[-1] == 1 else logits
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def label_text(value: Any) -> str:
    """A class label as text as training reads it: ``1.0`` as ``1``, ``"cat "`` as ``cat``.

    A column of integer labels with a blank cell is read as floats; spaces around a class name are not part of it.
    """
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value).strip()


def class_names(id2label: Mapping[Any, Any] | None, num_labels: int) -> list[str]:
    """A model config's class names in output order (``id2label``, keys as ints or strings), ``LABEL_i`` where unset."""
    names = {int(k): str(v) for k, v in (id2label or {}).items()}
    return [names.get(i, f"LABEL_{i}") for i in range(num_labels)]


def primary_metric(task: str) -> tuple[str, bool]:
    """The metric that selects the best checkpoint and ranks poolers, and whether greater is better.

    Pearson for regression, accuracy for single-label classification, macro-F1 for multi-label (its accuracy is the
    exact match of the whole label set, which stays flat, often at 0, while the labels improve one by one).
    """
    task = check_task(task)
    if task == "regression":
        return "pearson", True
    return ("macro_f1", True) if task == "multilabel" else ("accuracy", True)
