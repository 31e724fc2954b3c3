"""``print(attnpool.train(...))`` in a notebook: the out-of-fold rows are counted, not printed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from attnpool.api import TrainResult


def _result(rows: int = 30_000) -> TrainResult:
    oof = pd.DataFrame({"row": np.arange(rows), "fold": np.arange(rows) % 5, "prediction": np.linspace(0, 1, rows)})
    metrics = {"folds": [{"fold": f, "pearson": 0.8} for f in range(5)], "overall": {"pearson": 0.81, "n": rows},
               "complete": True, "seconds": 12.3}
    return TrainResult(run_dir=Path("runs/attnpool"), metrics=metrics, oof=oof, seconds=12.34)


def test_train_result_repr_counts_the_out_of_fold_rows_instead_of_printing_them():
    result = _result()
    shown = repr(result)
    assert shown == (f"TrainResult(run_dir={Path('runs/attnpool')!r}, overall={{'pearson': 0.81, 'n': 30000}}, "
                     "complete=True, oof=<30000 rows>, seconds=12.3)")
    assert str(result) == shown and "\n" not in shown and len(shown) < 200
    assert "prediction" not in shown and "0.000033" not in shown  # nothing of the DataFrame


def test_train_result_keeps_its_fields():
    result = _result(3)
    assert [f.name for f in dataclasses.fields(TrainResult)] == ["run_dir", "metrics", "oof", "seconds"]
    assert len(result.oof) == 3 and result.complete and result.metrics["overall"]["n"] == 3
    assert "oof=<0 rows>" in repr(dataclasses.replace(result, oof=pd.DataFrame(), metrics={}))


def test_the_overall_scores_the_repr_shows_are_an_attribute():
    """The repr showed overall=... as if a field, and result.overall raised AttributeError."""
    result = _result(3)
    assert result.overall == {"pearson": 0.81, "n": 3}
    assert dataclasses.replace(result, metrics={}).overall == {}
