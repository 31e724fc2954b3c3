"""Review fixes of predict: an --output that is a folder refused before anything is written, a text column missing
from the input named as the run's, sigmoid runs blended within [0, 1], and --threads / --folds named in errors."""

from __future__ import annotations

import functools
import shutil

import numpy as np
import pytest

from attnpool.data import DataError
from attnpool.prediction import predict
from attnpool.prediction.blend import RunBlend, out_of_fold
from attnpool.prediction.engine import FoldEnsemble
from attnpool.runs import Run, RunError
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False, threads=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("review")
    encoder = save_tiny_encoder(root / "encoder")
    reg = add_oof(make_run(root / "reg", encoder), seed=1)
    r3 = add_oof(make_run(root / "r3", encoder, seed=5, text_cols=["first", "third"]), seed=2)
    sig_a = add_oof(make_run(root / "sig_a", encoder, output_activation="sigmoid"), center=0.5, scale=0.1, seed=3)
    sig_b = add_oof(make_run(root / "sig_b", encoder, seed=7, output_activation="sigmoid"), center=0.5, scale=0.3,
                    seed=4)
    return {"reg": reg, "r3": r3, "sig_a": sig_a, "sig_b": sig_b}


def no_load(*args, **kwargs):
    raise AssertionError("the fold models loaded before the output was checked")


def test_an_output_that_is_a_folder_is_refused_before_the_models_load(runs, tmp_path, monkeypatch):
    """Was: every row predicted, then `[Errno 21] Is a directory` and a dir.csv.parts/ that blocked a rerun."""
    write_toy_csv(tmp_path / "in.csv", n=4)
    (tmp_path / "dir.csv").mkdir()
    monkeypatch.setattr(FoldEnsemble, "load", no_load)
    for resume in (False, True):
        with pytest.raises(ValueError) as caught:
            predict(runs["reg"], tmp_path / "in.csv", tmp_path / "dir.csv", resume=resume)
        assert str(caught.value) == (f"--output {tmp_path / 'dir.csv'} is a folder; give a file path such as "
                                     f"{tmp_path / 'dir.csv' / 'predictions.csv'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.csv", "in.csv"]
    assert list((tmp_path / "dir.csv").iterdir()) == []


def test_a_missing_text_column_names_the_run_trained_on_it(runs, tmp_path):
    """Was: "Fix the column names in the options or in the file header", naming no run of the blend."""
    data = write_toy_csv(tmp_path / "in.csv", n=6)
    assert "third" not in data.columns
    with pytest.raises(DataError) as caught:
        predict([runs["reg"], runs["r3"]], tmp_path / "in.csv", tmp_path / "out.csv")
    assert str(caught.value) == (
        f"{tmp_path / 'in.csv'}: missing column(s) 'third'; the columns present are: {', '.join(data.columns)}; run "
        f"{runs['r3']} was trained on columns first, third: add or rename them in the input file's header")
    assert not (tmp_path / "out.csv").exists()


def test_sigmoid_runs_blend_within_zero_and_one(runs):
    """Was: Σw·center + Σw·scale·z wrote 1.1 and -0.1 for two runs that both predicted 0.95 and 0.05."""
    members = [Run(runs["sig_a"]), Run(runs["sig_b"])]
    blend = RunBlend.from_runs(members, out_of_fold(members, [[0, 1], [0, 1]]))
    assert blend.bounded
    scores = [np.array([0.95, 0.5, 0.05]), np.array([0.95, 0.5, 0.05])]  # both runs' sigmoids: within (0, 1)
    rebuilt = RunBlend("regression", None, blend.paths, blend.weights, blend.center, blend.scale).combine(scores)
    assert rebuilt[0] > 1 and rebuilt[2] < 0 and 0 < rebuilt[1] < 1  # unclipped, as before
    np.testing.assert_allclose(blend.combine(scores), [1.0, rebuilt[1], 0.0])
    fixed = RunBlend("regression", None, ["A", "B"], np.array([0.5, 0.5]), np.array([[0.5], [0.5]]),
                     np.array([[0.1], [0.3]]), bounded=True)
    np.testing.assert_allclose(fixed.combine([np.array([0.95, 0.05]), np.array([0.95, 0.05])]), [1.0, 0.0])
    # a run without the sigmoid: its scores are not bounded, nothing clipped
    mixed = [Run(runs["sig_a"]), Run(runs["reg"])]
    assert not RunBlend.from_runs(mixed, out_of_fold(mixed, [[0, 1], [0, 1]])).bounded


def test_threads_and_an_empty_folds_are_named_by_their_flags(runs, tmp_path, monkeypatch):
    write_toy_csv(tmp_path / "in.csv", n=4)
    with pytest.raises(ValueError) as caught:
        predict(runs["reg"], tmp_path / "in.csv", tmp_path / "a.csv", threads=0)
    assert str(caught.value) == ("--threads must be a positive number of threads, got 0: give 1 or more, or leave "
                                 "--threads out (threads=None) for the default")
    with pytest.raises(RunError) as caught:
        predict(runs["reg"], tmp_path / "in.csv", tmp_path / "b.csv", folds=[])
    assert str(caught.value) == (f"{runs['reg']}: --folds (folds) names no fold; name one or more of its trained "
                                 "folds (0, 1), or leave --folds out to use all of them")


def test_one_run_given_twice_is_refused_not_weighed_double(runs, tmp_path):
    """`--run A A/` (or a link to A) blended A with itself at twice its weight, silently."""
    write_toy_csv(tmp_path / "in.csv", n=4)
    (tmp_path / "link").symlink_to(runs["reg"], target_is_directory=True)
    for again in (f"{runs['reg']}/", tmp_path / "link"):
        with pytest.raises(RunError) as caught:
            predict([runs["reg"], runs["sig_a"], again], tmp_path / "in.csv", tmp_path / "out.csv")
        assert str(caught.value) == (f"--run names one run twice, as {runs['reg']} and as {again}: it "
                                     "would count twice in the blend; give each run once (--blend-weights gives a "
                                     "run more weight)")
    assert not (tmp_path / "out.csv").exists()


def test_a_run_path_reads_a_tilde_as_the_home_folder(runs, home):
    """`predict --run=~/runs/x` (a tilde the shell leaves) said the folder is not a run; explain read it."""
    shutil.copytree(runs["reg"], home / "reg")
    write_toy_csv(home / "in.csv", n=4)
    assert predict("~/reg", "~/in.csv", "~/out.csv").rows == 4
    assert (home / "out.csv").is_file()
