"""Out-of-fold files read back as they were written: ids and class labels stay the text they were trained as."""

from __future__ import annotations

import numpy as np
import pytest

from attnpool.runs.tables import oof_frame, oof_scores, oof_targets, read_oof


@pytest.mark.parametrize("classes", [["01", "02", "NA"], ["None", "nan", "1.0"]])
def test_class_labels_that_look_like_numbers_or_missing_values_round_trip(tmp_path, classes):
    scores = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.2, 0.6, 0.2]])
    frame = oof_frame("multiclass", classes, np.array([2, 0, 1]), np.array(["007", "", "10"]), np.array([0, 2, 1]),
                      scores, fold=1)
    frame.to_csv(tmp_path / "oof.csv", index=False)
    back = read_oof(tmp_path / "oof.csv")
    assert back["target"].tolist() == [classes[2], classes[1], classes[0]]  # sorted by row
    assert back["prediction"].tolist() == [classes[2], classes[1], classes[0]]
    assert back["id"].tolist() == ["", "10", "007"]
    np.testing.assert_array_equal(oof_targets(back, "multiclass", classes), [2, 1, 0])
    np.testing.assert_allclose(oof_scores(back, "multiclass", classes), scores[[1, 2, 0]])


def test_regression_files_read_numbers(tmp_path):
    oof_frame("regression", None, np.arange(3), None, np.array([0.5, 1.0, 0.0]), np.array([0.4, 0.9, 0.1]),
              fold=0).to_csv(tmp_path / "oof.csv", index=False)
    back = read_oof(tmp_path / "oof.csv")
    np.testing.assert_allclose(oof_targets(back, "regression", None), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(oof_scores(back, "regression", None), [0.4, 0.9, 0.1])


def test_group_keys_and_ids_that_look_missing_stay_distinct(tmp_path):
    """The folds kept the groups NA, None and "" apart; the bootstrap over groups must too."""
    groups = np.array(["NA", "None", "", "nan", "null", "abc"])
    oof_frame("regression", None, np.arange(6), np.array(["NA", "1", "", "002", "x", "y"]), np.linspace(0, 1, 6),
              np.linspace(0, 1, 6), fold=0, groups=groups).to_csv(tmp_path / "oof.csv", index=False)
    back = read_oof(tmp_path / "oof.csv")
    assert back["group"].tolist() == groups.tolist()
    assert back["id"].tolist() == ["NA", "1", "", "002", "x", "y"]
    np.testing.assert_allclose(oof_scores(back, "regression", None), np.linspace(0, 1, 6))


def test_a_diverged_fold_s_nan_probabilities_read_back_as_nan(tmp_path):
    """Written as empty cells; read as text "" they made every later read of the run fail (summary, resume, blend)."""
    scores = np.array([[np.nan, np.nan], [0.3, 0.7]])
    oof_frame("binary", ["NA", "b"], np.array([0, 1]), None, np.array([0, 1]), scores, fold=0).to_csv(
        tmp_path / "oof.csv", index=False)
    back = read_oof(tmp_path / "oof.csv")
    assert back["target"].tolist() == ["NA", "b"]  # a class named NA stays a class
    got = oof_scores(back, "binary", ["NA", "b"])
    assert np.isnan(got[0]).all() and got[1].tolist() == [0.3, 0.7]
