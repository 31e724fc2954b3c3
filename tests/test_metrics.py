"""task_metrics: the numbers every fold, run and comparison reports, checked against their definitions."""

from __future__ import annotations

import math

import numpy as np

from attnpool.metrics import task_metrics


def test_regression():
    target = np.array([0.0, 0.25, 0.5, 1.0])
    prediction = np.array([0.1, 0.2, 0.7, 0.9])
    got = task_metrics("regression", target, prediction)
    assert math.isclose(got["pearson"], np.corrcoef(target, prediction)[0, 1])
    assert math.isclose(got["rmse"], float(np.sqrt(np.mean((target - prediction) ** 2))))
    assert math.isclose(got["spearman"], 1.0)  # same order
    swapped = task_metrics("regression", target, np.array([0.2, 0.1, 0.7, 0.9]))  # one swapped pair of ranks
    assert math.isclose(swapped["spearman"], 1.0 - 6 * 2 / (4 * 15))
    assert math.isnan(task_metrics("regression", target, np.ones(4))["pearson"])  # constant: undefined, not 0


def test_classification():
    target = np.array([0, 1, 1, 0])
    scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    got = task_metrics("binary", target, scores)
    assert got["accuracy"] == 0.5 and math.isclose(got["auc"], 0.75)  # positive-negative pairs ordered right: 3 of 4
    multi = task_metrics("multiclass", np.array([0, 1, 2]), np.eye(3))
    assert multi["accuracy"] == 1.0 and multi["macro_f1"] == 1.0
