"""task_metrics: the numbers every fold, run and comparison reports, checked against their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

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


def test_a_target_constant_in_the_rows_is_left_out_of_the_mean_correlation():
    """One constant target column made the mean Pearson NaN at every evaluation: no best checkpoint was chosen."""
    target = np.array([[0.0, 1.0], [0.5, 1.0], [1.0, 1.0]])
    prediction = np.array([[0.1, 0.3], [0.4, 0.9], [0.9, 0.2]])
    got = task_metrics("regression", target, prediction)
    assert math.isclose(got["pearson"], np.corrcoef(target[:, 0], prediction[:, 0])[0, 1])
    assert math.isclose(got["spearman"], 1.0)
    collapsed = prediction.copy()
    collapsed[:, 0] = 0.5  # constant where its target varies: undefined, whatever the other target
    assert math.isnan(task_metrics("regression", target, collapsed)["pearson"])
    assert math.isnan(task_metrics("regression", np.ones(3), np.arange(3.0))["pearson"])  # a single constant target


def test_classification():
    target = np.array([0, 1, 1, 0])
    scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    got = task_metrics("binary", target, scores)
    assert got["accuracy"] == 0.5 and math.isclose(got["auc"], 0.75)  # positive-negative pairs ordered right: 3 of 4
    multi = task_metrics("multiclass", np.array([0, 1, 2]), np.eye(3))
    assert multi["accuracy"] == 1.0 and multi["macro_f1"] == 1.0


def test_multilabel_macro_f1_averages_the_labels_the_rows_have_or_are_predicted():
    """A label no row of the fold has, rightly never predicted, scored F1 0: a perfect fold had macro-F1 0.5."""
    perfect = task_metrics("multilabel", np.array([[1, 0], [0, 0], [1, 0]]),
                           np.array([[0.9, 0.1], [0.1, 0.1], [0.8, 0.2]]))
    assert perfect["macro_f1"] == 1.0 and perfect["accuracy"] == 1.0
    wrong = task_metrics("multilabel", np.array([[1, 0], [0, 0]]), np.array([[0.9, 0.7], [0.1, 0.1]]))
    assert wrong["macro_f1"] == 0.5  # a label predicted but absent is a false positive, still counted


def test_multilabel_macro_f1_scores_a_single_label_column_as_that_label():
    """One label column: scikit-learn read it as a binary target and scored its 0s ("label absent"), so a perfect
    model scored 0 and checkpoints were chosen by the wrong class."""
    perfect = task_metrics("multilabel", np.array([[1], [1], [1], [1]]), np.full((4, 1), 0.9))
    assert perfect["macro_f1"] == 1.0
    target, scores = np.array([[1], [1], [1], [0], [0]]), np.array([[.9], [.2], [.3], [.1], [.1]])
    assert task_metrics("multilabel", target, scores)["macro_f1"] == 0.5  # the label's F1: 1 of 3 found, no FP


def test_multilabel_macro_f1_is_scikit_learns_over_two_labels_or_more():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    for _ in range(30):
        rows, labels = int(rng.integers(2, 40)), int(rng.integers(2, 6))
        target = (rng.random((rows, labels)) < rng.random(labels)).astype(int)
        scores = rng.random((rows, labels)) * rng.random(labels)
        predicted = (scores >= 0.5).astype(int)
        seen = [j for j in range(labels) if target[:, j].any() or predicted[:, j].any()]
        if seen:
            expected = f1_score(target, predicted, labels=seen, average="macro", zero_division=0)
            assert math.isclose(task_metrics("multilabel", target, scores)["macro_f1"], expected, abs_tol=1e-12)


def test_a_diverged_classifier_scores_nan_instead_of_stopping_the_run():
    """NaN probabilities raised in scikit-learn ('Input contains NaN') where a regression run records NaN."""
    nan = np.full((3, 2), np.nan)
    for task, target in (("binary", np.array([0, 1, 1])), ("multiclass", np.array([0, 1, 1])),
                         ("multilabel", np.array([[1, 0], [0, 1], [1, 1]]))):
        out = task_metrics(task, target, nan)
        assert math.isnan(out["accuracy"]) and math.isnan(out["macro_f1"]) and "auc" not in out, task


def test_multiclass_auc_is_one_vs_rest_over_the_classes_present():
    """A class missing from a fold dropped its AUC: some folds had one, others none."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    scores = rng.dirichlet(np.ones(3), size=40)
    full = rng.integers(0, 3, 40)
    assert task_metrics("multiclass", full, scores)["auc"] == np.float64(
        roc_auc_score(full, scores, multi_class="ovr", average="macro")).item()  # as scikit-learn's, all present
    two = np.where(full == 2, 0, full)  # class 2 absent
    expected = np.mean([roc_auc_score(two == c, scores[:, c]) for c in (0, 1)])
    assert task_metrics("multiclass", two, scores)["auc"] == expected.item()


def test_multilabel_macro_f1_refuses_a_target_of_another_shape():
    """A transposed target of the same size was reshaped and scored."""
    from attnpool.metrics import multilabel_macro_f1

    with pytest.raises(ValueError, match=r"target \(2, 3\) and scores \(3, 2\) differ in shape"):
        multilabel_macro_f1(np.ones((2, 3)), np.ones((3, 2)))
    assert multilabel_macro_f1(np.array([1, 0, 1]), np.array([[0.9], [0.1], [0.8]])) == 1.0  # (N,): one label
