"""benchmarks/recipe_ablation.py without training: kept runs of another recipe are refused, and a speed ratio of
runs timed in different calls says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import recipe_ablation as ra  # noqa: E402
from attnpool.config import TrainConfig  # noqa: E402


def test_kept_runs_of_another_recipe_are_not_paired_with_new_ones(tmp_path, monkeypatch):
    """The default side's folder was reused whatever its epochs, model or the defaults it ran with."""
    monkeypatch.setattr(ra, "_wanted_folds", lambda run, folds: True)  # every run kept: nothing trains
    monkeypatch.setattr(ra, "run_predictions", lambda run, task: None)
    monkeypatch.setattr(ra, "run_score", lambda run, task: 0.5)
    monkeypatch.setattr(ra, "shared_bootstrap_keys", lambda runs, **kw: ({}, False))
    for seed in (1, 2):
        _timed_run(tmp_path / "default" / "runs" / "attention" / f"seed_{seed}", [4.0], wall=10.0)
    _stamp(tmp_path / "default")
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], epochs=1)
    side = ra.train_side(cfg, tmp_path / "default", [1, 2])
    assert side["scores"] == [0.5, 0.5] and not side["all_trained_now"]  # reused: timed by earlier calls
    with pytest.raises(SystemExit, match=r"another recipe \(epochs: 1(\.0)? -> 2(\.0)?\).*delete that folder"):
        ra.train_side(TrainConfig(train_file="x.csv", text_cols=["a"], epochs=2), tmp_path / "default", [1, 2])


def test_a_speed_ratio_of_runs_timed_in_different_calls_says_so():
    result = {"set": "cr", "changes": {"lr": 1e-4}, "metric": "accuracy", "seeds": [1], "mean": [0.9, 0.9],
              "std": [0.0, 0.0], "default": [0.9], "changed": [0.9], "diff": 0.0, "p_ttest": 1.0, "p_signflip": 1.0,
              "p_bootstrap": 1.0, "boot": [0.0, 0.0], "within_noise": True, "seconds": [20.0, 10.0]}
    assert "2.00x as fast; " in ra.markdown({**result, "timed_together": True})
    assert "2.00x as fast (timed in different calls, not side by side)" in ra.markdown({**result,
                                                                                          "timed_together": False})


def _stamp(side, **stamp):
    """The attnpool_version.json of a side trained by this attnpool (or by ``stamp``'s version and commit)."""
    side.mkdir(parents=True, exist_ok=True)
    (side / ra.VERSION_FILE).write_text(json.dumps({**ra.attnpool_version(), **stamp}))


def _timed_run(run, fold_seconds, wall):
    """A run's metrics.json with its folds' train_seconds, and the .cost.json `attnpool compare` writes beside it."""
    run.mkdir(parents=True, exist_ok=True)
    folds = [{"fold": i, "train_seconds": s} for i, s in enumerate(fold_seconds)]
    (run / "metrics.json").write_text(json.dumps({"folds": folds}))
    (run / "run.json").write_text(json.dumps({"task": "regression", "classes": None}))  # a recorded run
    run.with_name(f"{run.name}.cost.json").write_text(json.dumps({"wall_seconds": wall}))


def test_the_speed_ratio_is_of_the_folds_training_seconds(tmp_path, monkeypatch):
    """The ratio took .cost.json's wall_seconds: start-up, tokenising and the final prediction weighed on both sides."""
    monkeypatch.setattr(ra, "_wanted_folds", lambda run, folds: True)
    monkeypatch.setattr(ra, "run_predictions", lambda run, task: None)
    monkeypatch.setattr(ra, "run_score", lambda run, task: 0.5)
    monkeypatch.setattr(ra, "shared_bootstrap_keys", lambda runs, **kw: ({}, False))
    for side, seconds in (("default", 20.0), ("lr-0.0001", 10.0)):
        for seed in (1, 2):
            _timed_run(tmp_path / side / "runs" / "attention" / f"seed_{seed}", [seconds / 2, seconds / 2], wall=60.0)
        _stamp(tmp_path / side)
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], epochs=1)
    assert ra.train_side(cfg, tmp_path / "default", [1, 2])["seconds"] == {1: 20.0, 2: 20.0}
    assert ra.train_side(cfg, tmp_path / "lr-0.0001", [1, 2])["seconds"] == {1: 10.0, 2: 10.0}  # not 60 and 60


@pytest.fixture(autouse=True)
def _no_script_logging(monkeypatch):
    """main() sets up a script's logging (the root logger's handler): not this test process's."""
    monkeypatch.setattr(ra.logging, "basicConfig", lambda **kwargs: None)


def test_no_data_writes_nothing_and_a_call_keeps_the_other_sets_results(tmp_path, capsys, monkeypatch):
    """Without data it wrote [] over earlier results; a --sets cr call replaced the PPPM and MPQA entries."""
    out = tmp_path / "out"
    monkeypatch.setattr(ra, "DEFAULT_DATA_ROOT", tmp_path / "none")  # no data under the default root: skipped
    assert ra.main(["--set", "lr=1e-4", "--output-dir", str(out)]) == 0
    assert "skipped: no data for pppm, cr, mpqa" in capsys.readouterr().out and not out.exists()
    path = out / "lr-0.0001.json"
    ra.write_results(path, [{"set": "pppm", "diff": 1}, {"set": "cr", "diff": 2}, {"set": "mpqa", "diff": 3}])
    ra.write_results(path, [{"set": "cr", "diff": 20}])
    assert json.loads(path.read_text()) == [{"set": "pppm", "diff": 1}, {"set": "cr", "diff": 20},
                                            {"set": "mpqa", "diff": 3}]
    ra.write_results(path, [])
    assert len(json.loads(path.read_text())) == 3


def _cr_data(root):
    (root / "cr").mkdir(parents=True)
    (root / "cr" / "custrev.all").write_text("1 a fine phone .\n0 it broke\n", encoding="latin-1")
    return root


@pytest.mark.parametrize("change, says", [
    ("precision=fp33", "precision must be one of"),
    ("lr=abc", "--set lr=abc on cr"),
    ("no_such_field=1", "no_such_field: not a TrainConfig field"),
])
def test_a_bad_change_is_refused_before_anything_trains(tmp_path, monkeypatch, capsys, change, says):
    """A bad --set was only refused when the changed side was built: after the default side trained every seed."""
    trained = []
    monkeypatch.setattr(ra, "train_side", lambda cfg, out, seeds: trained.append(out) or {})
    data = _cr_data(tmp_path / "data")
    with pytest.raises(SystemExit) as exit_:
        ra.main(["--set", change, "--sets", "cr", "--seeds", "2", "--data-root", str(data),
                 "--output-dir", str(tmp_path / "out")])
    assert exit_.value.code == 2 and trained == []  # a usage error, before the default side trained
    assert says in capsys.readouterr().err


def test_a_data_root_given_without_a_sets_data_is_an_error(tmp_path, monkeypatch, capsys):
    """A --data-root given without the data of a set asked for (a mistyped path) printed "skipped" and exited 0, having
    measured nothing (or only the sets it found): now a usage error naming the root and the missing file. Under the
    default root a missing set is still skipped, and the others run."""
    measured = []
    monkeypatch.setattr(ra, "evaluate", lambda name, *args: measured.append(name) or {"set": name})
    monkeypatch.setattr(ra, "markdown", lambda result: "table")
    data = _cr_data(tmp_path / "data")
    for root, sets, says in ((tmp_path / "typo", [], "no pppm/train.csv, cr/custrev.all, mpqa/mpqa.all there"),
                             (data, ["--sets", "cr", "mpqa"], "no mpqa/mpqa.all there")):
        with pytest.raises(SystemExit) as exit_:
            ra.main(["--set", "lr=1e-4", "--data-root", str(root), *sets, "--output-dir", str(tmp_path / "out")])
        captured = capsys.readouterr()
        assert exit_.value.code == 2 and f"--data-root {root}: {says}" in captured.err
        assert "skipped" not in captured.out and measured == [] and not (tmp_path / "out").exists()
    monkeypatch.setattr(ra, "DEFAULT_DATA_ROOT", data)
    assert ra.main(["--set", "lr=1e-4", "--sets", "cr", "mpqa", "--output-dir", str(tmp_path / "out")]) == 0
    assert f"skipped: no data for mpqa under {data}" in capsys.readouterr().out and measured == ["cr"]


@pytest.mark.parametrize("flags, says", [(["--rows", "mpqa"], "--rows takes SET=N items"),
                                         (["--set-seeds", "pppm"], "--set-seeds takes SET=N items")])
def test_set_n_options_without_a_number_are_a_usage_error(flags, says, capsys):
    """`--rows mpqa` and `--set-seeds pppm` ended in a ValueError traceback."""
    with pytest.raises(SystemExit) as exit_:
        ra.parse_args(["--set", "lr=1e-4", *flags])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_one_seed_is_judged_on_the_bootstrap_ci_alone(monkeypatch, tmp_path):
    """With one seed the std is NaN: `diff >= -NaN` is False, and a clear +0.12 win read "WORSE than the noise"."""
    import numpy as np

    rng = np.random.default_rng(0)
    target = rng.integers(0, 2, 400)

    def side(correct_share):
        labels = np.where(rng.random(400) < correct_share, target, 1 - target)
        return {"scores": [float(np.mean(labels == target))],
                "predictions": {42: (np.arange(400), target, np.eye(2)[labels] * 0.8 + 0.1)},
                "keys": {42: np.arange(400).astype(str)}, "seconds": {42: 10.0}, "all_trained_now": True}

    sides = iter([side(0.8), side(0.9), side(0.9), side(0.8)])
    monkeypatch.setattr(ra, "train_side", lambda cfg, out, seeds: next(sides))
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], task="binary", only_folds=[0])
    better = ra.evaluate("cr", cfg, {"lr": 1e-4}, tmp_path, [42], 200)
    assert better["diff"] > 0.05 and better["boot"][0] > 0 and better["within_noise"] is True
    text = ra.markdown(better)
    assert "within noise or better (judged on the bootstrap CI alone: one seed, so no seed std)" in text
    assert "WORSE" not in text and "± n/a" in text
    worse = ra.evaluate("cr", cfg, {"lr": 1e-4}, tmp_path, [42], 200)  # a clear loss is still one
    assert worse["boot"][1] < 0 and worse["within_noise"] is False and "WORSE than the noise" in ra.markdown(worse)


def test_the_verdict_and_its_basis():
    nan = float("nan")
    assert ra.verdict(0.01, 0.02, -0.01, 0.03) == (True, "judged on the bootstrap CI and the seed std")
    assert ra.verdict(-0.03, 0.02, -0.05, 0.01)[0] is False  # behind by more than the seed std
    assert ra.verdict(0.1, nan, 0.05, 0.15)[0] is True
    assert ra.verdict(0.1, nan, nan, nan) == (None, "no verdict: one seed, so no seed std, and no bootstrap CI")
    assert ra.verdict(0.0, 0.01, nan, nan)[0] is True  # an n/a bootstrap is no evidence of a loss


def test_a_side_kept_from_another_attnpool_is_not_paired_with_runs_trained_now(tmp_path, monkeypatch):
    """The default side was trained once per set and reused by every later --set, checked only for its config fields:
    a default trained before a change of attnpool's behaviour was paired with a changed side trained after it."""
    monkeypatch.setattr(ra, "_wanted_folds", lambda run, folds: True)  # every run kept: nothing trains
    monkeypatch.setattr(ra, "run_predictions", lambda run, task: None)
    monkeypatch.setattr(ra, "run_score", lambda run, task: 0.5)
    monkeypatch.setattr(ra, "shared_bootstrap_keys", lambda runs, **kw: ({}, False))
    now = {"version": "9.9.0", "commit": "b" * 40}
    monkeypatch.setattr(ra, "attnpool_version", lambda: dict(now))
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], epochs=1)
    side = tmp_path / "default"
    for seed in (1, 2):
        _timed_run(side / "runs" / "attention" / f"seed_{seed}", [4.0], wall=10.0)
    (side / ra.VERSION_FILE).write_text(json.dumps({"version": "9.9.0", "commit": "a" * 40}))
    with pytest.raises(SystemExit, match=r"attnpool 9\.9\.0 \(commit aaaaaaaaaaaa\).*this is attnpool 9\.9\.0 "
                                         r"\(commit bbbbbbbbbbbb\).*delete that folder to retrain it"):
        ra.train_side(cfg, side, [1, 2])
    (side / ra.VERSION_FILE).write_text(json.dumps({"version": "9.8.0", "commit": "b" * 40}))
    with pytest.raises(SystemExit, match=r"attnpool 9\.8\.0"):
        ra.train_side(cfg, side, [1, 2])
    (side / ra.VERSION_FILE).unlink()  # kept from before the version was recorded
    with pytest.raises(SystemExit, match="an unrecorded version"):
        ra.train_side(cfg, side, [1, 2])
    (side / ra.VERSION_FILE).write_text(json.dumps(now))  # the same attnpool: reused
    assert ra.train_side(cfg, side, [1, 2])["scores"] == [0.5, 0.5]


def test_a_new_side_records_the_attnpool_that_trains_it(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(ra, "_wanted_folds", lambda run, folds: run in trained)
    monkeypatch.setattr(ra, "_run_one", lambda cfg, spec, seed, run: trained.append(run))
    monkeypatch.setattr(ra, "run_predictions", lambda run, task: None)
    monkeypatch.setattr(ra, "run_score", lambda run, task: 0.5)
    monkeypatch.setattr(ra, "_cost", lambda run: (1.0, 1.0))
    monkeypatch.setattr(ra, "shared_bootstrap_keys", lambda runs, **kw: ({}, False))
    monkeypatch.setattr(ra, "attnpool_version", lambda: {"version": "9.9.0", "commit": None})
    side = tmp_path / "default"
    assert ra.train_side(TrainConfig(train_file="x.csv", text_cols=["a"], epochs=1), side, [1])["all_trained_now"]
    assert json.loads((side / ra.VERSION_FILE).read_text()) == {"version": "9.9.0", "commit": None}


def test_the_version_is_attnpools_with_its_commit_when_a_checkout(monkeypatch):
    import attnpool

    stamp = ra.attnpool_version()
    assert stamp["version"] == attnpool.__version__
    assert stamp["commit"] is None or len(stamp["commit"]) == 40
    monkeypatch.setattr(ra.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("git")))
    assert ra.attnpool_version() == {"version": attnpool.__version__, "commit": None}  # no git: tolerated


def test_a_side_kept_from_a_commit_with_the_same_source_is_reused(tmp_path, monkeypatch):
    """Any other commit was refused, even one that changed only docs: the default side had to be retrained."""
    repo = tmp_path / "checkout"
    package = repo / "src" / "attnpool"
    package.mkdir(parents=True)

    def commit(path, text):
        path.write_text(text)
        for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    first = commit(package / "model.py", "A = 1\n")
    docs_only = commit(repo / "README.md", "docs\n")
    source_change = commit(package / "model.py", "A = 2\n")
    monkeypatch.setattr(ra, "source_dir", lambda: package)
    version = ra.attnpool_version()["version"]
    stamp = {"version": version, "commit": first}
    assert ra.same_source(stamp, {"version": version, "commit": docs_only})
    assert not ra.same_source(stamp, {"version": version, "commit": source_change})
    assert not ra.same_source(stamp, {"version": "0.0.1", "commit": docs_only})  # another version
    assert not ra.same_source({"version": version, "commit": "a" * 40}, {"version": version, "commit": docs_only})
    side = tmp_path / "default"
    (side / "runs" / "attention" / "seed_1").mkdir(parents=True)
    (side / ra.VERSION_FILE).write_text(json.dumps(stamp))
    monkeypatch.setattr(ra, "attnpool_version", lambda: {"version": version, "commit": docs_only})
    ra.check_version(side)  # reused
    monkeypatch.setattr(ra, "attnpool_version", lambda: {"version": version, "commit": source_change})
    with pytest.raises(SystemExit, match="whose source differs"):
        ra.check_version(side)
