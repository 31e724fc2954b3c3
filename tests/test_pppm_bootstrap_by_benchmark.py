"""benchmarks/pppm_bootstrap_by.py on kept rows written here: the notebook's .npz records, and which paths skip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_bootstrap_by as by  # noqa: E402
from attnpool.config import TrainConfig  # noqa: E402
from attnpool.runs import Run  # noqa: E402

ROWS = 60
RNG = np.random.default_rng(5)
ANCHORS = np.repeat([f"anchor {i}" for i in range(12)], 10)  # 120 rows in train.csv, 12 anchors
TARGET = RNG.random(ROWS)


def _data(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": range(len(ANCHORS)), "anchor": ANCHORS}).to_csv(folder / "train.csv", index=False)
    return folder


def _kept_run(runs: Path, row: str, seed: int, rows: np.ndarray, noise: float) -> None:
    """A finished attnpool row as pppm_quality keeps it: ROW/seed_S/ with its out-of-fold file (and anchors)."""
    run = Run.create(runs / row / f"seed_{seed}")
    run.write_info({"task": "regression"})
    run.write_config(TrainConfig(train_file="x.csv", text_cols=["a"]).to_dict())
    run.write_oof(pd.DataFrame({"row": rows, "id": rows, "target": TARGET, "prediction": TARGET + noise *
                                RNG.random(ROWS), "fold": 0, "group": ANCHORS[rows]}))


def _kept_notebook(runs: Path, seed: int, rows: np.ndarray, data_dir: Path, limit: int | None = None) -> None:
    """The notebook row as pppm_quality's run_notebook keeps it: notebook/seed_S.npz and its seed_S.json record."""
    folder = runs / "notebook"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / f"seed_{seed}.npz", rows=rows, target=TARGET, scores=TARGET + 0.9 * RNG.random(ROWS))
    recipe = {"data_dir": str(data_dir.resolve()), "limit": limit, "seed": seed}
    (folder / f"seed_{seed}.json").write_text(json.dumps({"row": "notebook", "seed": seed, "recipe": recipe}))


def test_the_notebook_row_is_read_back_and_paired(tmp_path, capsys):
    """Only ROW/seed_S/ folders with an oof.csv were collected: `--pair X notebook` said "no seed with both runs"."""
    runs, data = tmp_path / "runs", _data(tmp_path / "pppm")
    rows = np.arange(0, 120, 2)
    _kept_run(runs, "best", 42, rows, noise=0.1)
    _kept_notebook(runs, 42, rows, data)
    (runs / "notebook" / "seed_43.npz").write_bytes(b"")  # predictions without their record: not finished
    (runs / "notebook" / "seed_44.tmp.npz").write_bytes(b"")  # run_notebook's file before it is renamed
    records = by.kept_records(runs)
    assert [(r["row"], r["seed"]) for r in records] == [("best", 42), ("notebook", 42)]
    assert by.main(["--runs", str(runs), "--pair", "best", "notebook", "--bootstrap", "100"]) == 0
    out, err = capsys.readouterr()
    assert "| best − notebook | 1 | +" in out and "no seed with both runs kept" not in err


def test_the_notebooks_rows_outside_every_run_take_the_data_dirs_anchors(tmp_path, capsys):
    runs, data = tmp_path / "runs", _data(tmp_path / "pppm")
    _kept_run(runs, "best", 42, np.arange(0, 120, 2), noise=0.1)
    _kept_notebook(runs, 43, np.arange(1, 120, 2), data)  # another seed's rows: no run names their anchors
    records = by.kept_records(runs)
    with pytest.raises(SystemExit, match=r"seed_43.npz \(notebook, seed 43\): 60 of its rows .* give --data-dir"):
        by.run_anchors(records)
    anchors = by.run_anchors(records, data)
    assert list(anchors) == list(ANCHORS[:len(anchors)]) and len(anchors) == 120
    _kept_notebook(runs, 43, np.arange(1, 120, 2), data, limit=500)  # trained on a --rows draw: not train.csv's rows
    with pytest.raises(SystemExit, match="trained on other rows than .*train.csv"):
        by.run_anchors(by.kept_records(runs), data)


def test_only_the_default_paths_may_be_missing(tmp_path, capsys, monkeypatch):
    """A mistyped --data-dir or --runs printed "skipped" and exited 0, as a missing default folder does."""
    monkeypatch.setattr(by, "DEFAULT_RUNS", tmp_path / "no_default_runs")
    assert by.main(["--pair", "a", "b"]) == 0
    assert capsys.readouterr().out.startswith(f"skipped: no kept runs in {tmp_path / 'no_default_runs'}")
    for flags, says in ((["--runs", str(tmp_path / "typo")], "--runs .*typo: no such folder"),
                        (["--data-dir", str(tmp_path / "typo")], "--data-dir .*typo: no train.csv there")):
        with pytest.raises(SystemExit) as exit_:
            by.main([*flags, "--pair", "a", "b"])
        assert exit_.value.code == 2
        assert __import__("re").search(says, capsys.readouterr().err)
