"""`predict --output` inside a run folder (each run of a blend) is refused before anything is written: predictions
written over the run's out-of-fold file, or its fold assignment, broke the run (a later --resume refused it as
damaged). Other spellings of the path and links to the folder count."""

from __future__ import annotations

import functools
import re

import pytest

from attnpool.data import DataError, writers
from attnpool.prediction import predict
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False, threads=1)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


def _input(path):
    write_toy_csv(path.with_name("toy.csv"), n=8).drop(columns=["label"]).to_csv(path, index=False)
    return path


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["oof.csv", "folds.csv", "predictions.csv", "sub/../oof.csv"])
def test_predict_refuses_an_output_inside_the_run(tmp_path, encoder, name):
    run = make_run(tmp_path / "r7", encoder, folds=1)
    add_oof(run)
    source = _input(tmp_path / "in.csv")
    (run / "sub").mkdir()
    before = _snapshot(run)
    output = run / name
    with pytest.raises(DataError, match=re.escape(f"--output {output}: is inside the run folder {run}")) as err:
        predict(run, source, output)
    assert "write the predictions outside it" in str(err.value)
    assert _snapshot(run) == before, "nothing of the run replaced or added"


def test_each_run_of_a_blend_is_refused_as_output_folder(tmp_path, encoder):
    runs = [make_run(tmp_path / name, encoder, folds=1) for name in ("a", "b")]
    for run in runs:
        add_oof(run)
    source = _input(tmp_path / "in.csv")
    with pytest.raises(DataError, match=re.escape(f"is inside the run folder {runs[1]}")):
        predict([runs[0], runs[1]], source, runs[1] / "blend.csv")


def test_links_and_spellings_count(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "link").symlink_to(run)  # another name of the run folder
    (run / "oof.csv").write_text("x\n")
    (tmp_path / "to_oof.csv").symlink_to(run / "oof.csv")  # a link outside, to a file of the run
    (run / "out.csv").symlink_to(tmp_path / "elsewhere.csv")  # a link inside the run: the written file replaces it
    for output in (tmp_path / "link" / "oof.csv", tmp_path / "to_oof.csv", run / "out.csv",
                   tmp_path / "x" / ".." / "run" / "new.csv"):
        with pytest.raises(DataError, match="is inside the run folder"):
            writers.refuse_output_in_folder([run], output)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="is inside the run folder run"):
        writers.refuse_output_in_folder(["run"], "run/oof.csv")
    writers.refuse_output_in_folder(["run"], "runs.csv")  # a name that begins like the folder is outside it
    writers.refuse_output_in_folder([run], tmp_path / "predictions.csv")
