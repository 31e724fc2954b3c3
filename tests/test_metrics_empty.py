"""Metrics of no rows: a clear error, not numpy's reshape or sklearn's own message."""

from __future__ import annotations

import numpy as np
import pytest

from attnpool.metrics import classification_metrics, regression_metrics, task_metrics


def test_regression_metrics_of_no_rows_say_so():
    with pytest.raises(ValueError, match="^regression_metrics: no rows to score \\(the targets are empty\\)"):
        regression_metrics(np.zeros(0), np.zeros(0))


@pytest.mark.parametrize(("task", "target", "scores"), [
    ("binary", np.zeros(0, int), np.zeros((0, 2))),
    ("multiclass", np.zeros(0, int), np.zeros((0, 3))),
    ("multilabel", np.zeros((0, 2), int), np.zeros((0, 2))),
])
def test_classification_metrics_of_no_rows_say_so(task, target, scores):
    with pytest.raises(ValueError, match=f"^classification_metrics \\({task}\\): no rows to score"):
        classification_metrics(target, scores, task)
    with pytest.raises(ValueError, match="no rows to score"):
        task_metrics(task, target, scores)
