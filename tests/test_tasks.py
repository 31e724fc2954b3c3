"""attnpool.tasks: the one map between task names, problem types, losses, outputs and metrics."""

from __future__ import annotations

import numpy as np
import pytest

from attnpool.tasks import (
    TASKS,
    check_task,
    default_loss,
    num_labels,
    primary_metric,
    problem_type,
    scores_from_logits,
    task_of,
)


@pytest.mark.parametrize("task", TASKS)
def test_problem_type_and_back(task):
    assert task_of(problem_type(task), 2 if task == "binary" else 3) == task


def test_unknown_task_names_the_valid_ones():
    with pytest.raises(ValueError, match="task must be one of regression, binary, multiclass, multilabel, got 'reg'"):
        check_task("reg")


def test_task_of_unset_problem_type_follows_transformers():
    assert task_of(None, 1) == "regression" and task_of(None, 2) == "binary" and task_of(None, 5) == "multiclass"


def test_scores_from_logits():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    probs = scores_from_logits("multiclass", logits)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    np.testing.assert_allclose(probs[1], 1 / 3)
    assert probs[0].argmax() == 0
    np.testing.assert_allclose(scores_from_logits("multilabel", logits), 1 / (1 + np.exp(-logits)))
    assert scores_from_logits("regression", np.array([[0.5], [0.2]])).shape == (2,)
    assert scores_from_logits("regression", logits).shape == (2, 3)  # several targets stay 2-D


def test_defaults():
    assert default_loss("regression") == "mse" and default_loss("regression", "sigmoid") == "bce"
    assert default_loss("single_label_classification") == "cross_entropy"
    assert default_loss("multi_label_classification") == "bce"
    assert num_labels("regression", 0) == 1 and num_labels("multiclass", 4) == 4
    assert primary_metric("regression") == ("pearson", True) and primary_metric("binary") == ("accuracy", True)
    assert primary_metric("multiclass") == ("accuracy", True) and primary_metric("multilabel") == ("macro_f1", True)
