"""The score a comparison's bootstrap recomputes thousands of times: ``score(target, prediction)`` per metric."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnpool.metrics import multilabel_macro_f1, task_metrics

ScoreFn = Callable[[np.ndarray, np.ndarray], float]


def _pearson(target: np.ndarray, prediction: np.ndarray) -> float:
    """The Pearson of :func:`attnpool.metrics.regression_metrics`, all target columns at once (no SciPy call).

    Averaged over the target columns that vary among the rows (a column constant in a bootstrap draw, e.g. a sparse
    one whose non-zero rows were not drawn, has no correlation to score and is left out, not NaN); NaN when none
    varies, or when a prediction column is constant or not finite where its target varies (a collapsed model).
    """
    t = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    p = np.asarray(prediction, dtype=np.float64).reshape(len(prediction), -1)
    if len(t) == 0:
        return float("nan")
    varying = np.ptp(t, axis=0) > 0  # as regression_metrics: a column with a NaN target does not vary either
    if not varying.any():
        return float("nan")
    t, p = t[:, varying], p[:, varying]
    if not np.isfinite(p).all() or (np.ptp(p, axis=0) == 0).any():
        return float("nan")
    tc, pc = t - t.mean(axis=0), p - p.mean(axis=0)
    tc /= np.abs(tc).max(axis=0)  # scaled as scipy.stats.pearsonr: no overflow of the squares
    pc /= np.abs(pc).max(axis=0)
    r = np.clip(np.sum(tc * pc, axis=0) / np.sqrt(np.sum(tc * tc, axis=0) * np.sum(pc * pc, axis=0)), -1.0, 1.0)
    return float(np.mean(np.round(r) if len(t) == 2 else r))  # pearsonr gives exactly +-1 on two rows


def metric_function(task: str, metric: str) -> ScoreFn:
    """``score(target, prediction)`` for one metric of :func:`attnpool.metrics.task_metrics`.

    Pearson, single-label accuracy and multilabel macro-F1 (the primary metrics, evaluated thousands of times by
    the bootstrap) are computed directly: the same values as :func:`~attnpool.metrics.task_metrics`, which also
    computes every other metric of the task (macro-F1 and ROC AUC through scikit-learn) at each call. Every other
    metric (Spearman, RMSE, single-label macro-F1, AUC) is taken from :func:`~attnpool.metrics.task_metrics` itself.
    """
    if task == "regression" and metric == "pearson":
        return _pearson

    if task in ("binary", "multiclass") and metric == "accuracy":

        def accuracy(target: np.ndarray, prediction: np.ndarray) -> float:
            prediction = np.asarray(prediction)
            if not np.isfinite(prediction).all():  # a diverged run: argmax of NaN is 0, "always class 0"
                return float("nan")
            return float(np.mean(prediction.argmax(axis=1) == np.asarray(target)))

        return accuracy

    def from_task_metrics(target: np.ndarray, prediction: np.ndarray) -> float:
        return float(task_metrics(task, target, prediction).get(metric, float("nan")))

    if task == "multilabel" and metric == "macro_f1":
        return multilabel_macro_f1  # the run's own, at numpy speed (not every other metric with it)

    return from_task_metrics
