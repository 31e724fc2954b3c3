"""Task metrics: Pearson, Spearman and RMSE for regression; accuracy, macro-F1 and AUC for classification."""

from __future__ import annotations

import numpy as np


def check_rows(target: np.ndarray, what: str) -> None:
    """Refuse an empty set of rows: no metric is defined on it (numpy's or sklearn's own error said so obscurely)."""
    if len(target) == 0:
        raise ValueError(f"{what}: no rows to score (the targets are empty); score a set with at least one labelled "
                         "row, e.g. a validation fold that is not empty")


def regression_metrics(target: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """Pearson (the PPPM metric), Spearman and RMSE.

    With several targets the correlations are averaged over the targets that vary among the rows: a target constant
    in a fold's validation rows has no correlation to score, and made the whole metric NaN at every evaluation (so
    the best checkpoint was never chosen). A prediction that is constant where its target varies scores NaN
    (undefined, not 0: a model that collapsed), as does a single constant target.

    Raises:
        ValueError: No rows.
    """
    from scipy import stats

    check_rows(target, "regression_metrics")
    target = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    prediction = np.asarray(prediction, dtype=np.float64).reshape(len(prediction), -1)
    varying = [j for j in range(target.shape[1]) if len(target) and np.ptp(target[:, j]) > 0]
    pearson, spearman = [], []
    for j in varying:
        t, p = target[:, j], prediction[:, j]
        constant = np.ptp(p) == 0 or not np.isfinite(p).all()
        pearson.append(float("nan") if constant else float(stats.pearsonr(t, p)[0]))
        spearman.append(float("nan") if constant else float(stats.spearmanr(t, p)[0]))
    return {
        "pearson": float(np.mean(pearson)) if varying else float("nan"),
        "spearman": float(np.mean(spearman)) if varying else float("nan"),
        "rmse": float(np.sqrt(np.mean((target - prediction) ** 2))),
    }


def classification_metrics(target: np.ndarray, scores: np.ndarray, task: str) -> dict[str, float]:
    """Accuracy and macro-F1 always; ROC AUC where defined (both classes present).

    Args:
        target: Class ids ``(N,)``, or a multi-hot ``(N, C)`` matrix for ``multilabel``.
        scores: Probabilities ``(N, C)`` (softmax for single-label, sigmoid for multi-label).
        task: ``binary``, ``multiclass`` or ``multilabel``.

    Raises:
        ValueError: No rows.
    """
    from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

    scores = np.asarray(scores, dtype=np.float64)
    target = np.asarray(target)
    check_rows(target, f"classification_metrics ({task})")
    if not np.isfinite(scores).all():  # a diverged model: no score, as a regression run's NaN Pearson
        return {"accuracy": float("nan"), "macro_f1": float("nan")}
    if task == "multilabel":
        predicted = (scores >= 0.5).astype(int)
        out = {
            "accuracy": float(accuracy_score(target, predicted)),  # exact match of the whole label set
            "macro_f1": multilabel_macro_f1(target, scores),
        }
        present = [j for j in range(target.shape[1]) if 0 < target[:, j].sum() < len(target)]
        if present:
            out["auc"] = float(roc_auc_score(target[:, present], scores[:, present], average="macro"))
        return out
    predicted = scores.argmax(axis=1)
    out = {
        "accuracy": float(accuracy_score(target, predicted)),
        "macro_f1": float(f1_score(target, predicted, average="macro", zero_division=0)),
    }
    classes = np.unique(target)
    if len(classes) > 1:
        if scores.shape[1] == 2:
            out["auc"] = float(roc_auc_score(target, scores[:, 1]))
        else:  # one-vs-rest over the classes the rows have (a class absent from a fold left the fold without AUC)
            out["auc"] = float(np.mean([roc_auc_score(target == c, scores[:, int(c)]) for c in classes]))
    return out


def multilabel_macro_f1(target: np.ndarray, scores: np.ndarray) -> float:
    """Macro-F1 of a multi-hot ``target`` ``(N, C)`` and sigmoid ``scores``: each label's, averaged.

    Labels at probability 0.5 or more are predicted; each label's F1 is ``2 TP / (2 TP + FP + FN)``, averaged over
    the labels the rows have or are predicted, as for multiclass (a label absent from a fold, and rightly never
    predicted, scored 0 and capped a perfect fold's macro-F1); 1.0 when there is none; NaN for a score not finite.
    Each label column on its own: scikit-learn's ``f1_score`` read a single label column as a binary target and
    scored its 0s, "label absent".

    Raises:
        ValueError: No rows.
    """
    check_rows(target, "classification_metrics (multilabel)")
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():  # a diverged run
        return float("nan")
    truth = np.asarray(target)
    if truth.shape != scores.shape and truth.shape + (1,) != scores.shape:  # (N,) for one label column: as (N, 1)
        raise ValueError(f"multilabel_macro_f1: target {truth.shape} and scores {scores.shape} differ in shape")
    truth, predicted = truth.reshape(scores.shape) != 0, scores >= 0.5
    true_sum, pred_sum = truth.sum(axis=0), predicted.sum(axis=0)
    seen = (true_sum > 0) | (pred_sum > 0)
    if not seen.any():
        return 1.0
    tp = (truth & predicted).sum(axis=0)[seen]
    return float(np.mean(2.0 * tp / (true_sum[seen] + pred_sum[seen])))  # as f1_score: (1 + beta^2) TP / (...)


def task_metrics(task: str, target: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """The metrics of ``task`` (see :data:`attnpool.tasks.TASKS`)."""
    if task == "regression":
        return regression_metrics(target, prediction)
    return classification_metrics(target, prediction, task)


def standardised_per_group(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each group's scores as z-scores (population standard deviation; a constant group stays 0).

    What makes the folds of a ``--loss pearson`` run comparable: the loss leaves each fold model its own scale and
    offset.
    """
    scores, groups = np.asarray(scores, dtype=np.float64), np.asarray(groups)
    out = np.zeros_like(scores)
    for group in np.unique(groups):
        part = scores[groups == group]
        out[groups == group] = (part - part.mean()) / (part.std() or 1.0)
    return out
