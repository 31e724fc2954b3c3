"""json_value: the one rule that turns Python, NumPy and pandas values into valid JSON for every file written."""

from __future__ import annotations

import datetime
import json
import math

import numpy as np
import pandas as pd
import pytest

from attnpool.comparison.stats import paired_bootstrap
from attnpool.json_values import is_missing, json_value
from attnpool.runs import atomic_write_json


def test_missing_and_non_finite_values_are_null_at_any_depth():
    data = {"a": float("nan"), "b": [np.float32("inf"), -math.inf, None], "c": (pd.NA, pd.NaT), 1: {"d": np.nan}}
    assert json_value(data) == {"a": None, "b": [None, None, None], "c": [None, None], "1": {"d": None}}


@pytest.mark.parametrize("value", [None, pd.NA, pd.NaT, float("nan"), np.float32("nan"), np.nan])
def test_is_missing_holds_every_kind_of_missing_cell(value):
    assert is_missing(value)


@pytest.mark.parametrize("value", ["", "nan", "NA", 0, 0.0, np.float32(0.5), float("inf"), False])
def test_is_missing_leaves_text_numbers_and_infinity_present(value):
    assert not is_missing(value)


@pytest.mark.parametrize("key", [pd.NaT, np.float32("nan")])
def test_every_reader_of_cells_uses_the_one_rule_e_g_the_bootstrap_cluster_keys(key):
    # the cluster keys once had their own narrower test: NaT or a float32 NaN became a cluster named "NaT"/"nan"
    with pytest.raises(ValueError, match=r"cluster keys are missing at rows \[1\]"):
        target = np.array([1.0, 2.0, 3.0])
        paired_bootstrap([(target, target + 0.1, target)], lambda t, p: float(np.mean(t - p)),
                         clusters=[np.array(["a", key, "b"], dtype=object)])


def test_numpy_values_become_python_numbers_in_their_own_shortest_digits():
    value = json_value({"f32": np.float32(0.1), "i": np.int64(3), "b": np.bool_(True), "arr": np.array([1.5, 2])})
    assert value == {"f32": 0.1, "i": 3, "b": True, "arr": [1.5, 2.0]}
    assert type(value["i"]) is int and type(value["b"]) is bool
    assert json.dumps(value, allow_nan=False) == '{"f32": 0.1, "i": 3, "b": true, "arr": [1.5, 2.0]}'


def test_dates_are_iso_text_and_unknown_objects_are_left_for_json_to_name_unless_as_text():
    assert json_value([datetime.date(2026, 12, 6), pd.Timedelta(seconds=90)]) == ["2026-12-06", "P0DT0H1M30S"]
    thing = object()
    assert json_value([thing]) == [thing]
    assert json_value([thing], as_text=True) == [str(thing)]


def test_run_files_never_hold_infinity_or_numpy_values(tmp_path):
    """Python's json writes inf as Infinity, which JSON readers (browsers, jq) refuse: a run's files must parse."""
    data = {"loss": np.float32(np.inf), "pearson": np.float64(0.5), "n": np.int64(2)}
    path = atomic_write_json(tmp_path / "m.json", data)
    assert json.loads(path.read_text(), parse_constant=pytest.fail) == {"loss": None, "pearson": 0.5, "n": 2}
