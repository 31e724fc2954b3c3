"""`attnpool compare`: statistics with known answers, pairing, resume, and an end-to-end run on a tiny model."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from attnpool.cli import main
from attnpool.comparison import PoolerSpec, holm, paired_bootstrap, paired_t_test, runner, t_interval
from attnpool.comparison.stats import metric_function
from attnpool.config import TrainConfig
from attnpool.metrics import task_metrics
from attnpool.pooling import build_pooler
from attnpool.runs import LockedError, Run, RunError, RunLock
from attnpool.runs import lock as lock_mod
from attnpool.runs.tables import oof_frame
from model_helpers import save_tiny_encoder, write_toy_csv

# ---------------------------------------------------------------- statistics


def test_t_interval_matches_scipy():
    from scipy import stats

    values = [0.81, 0.84, 0.80, 0.86]
    interval = t_interval(values)
    low, high = stats.t.interval(0.95, df=3, loc=np.mean(values), scale=stats.sem(values))
    assert interval.mean == pytest.approx(np.mean(values))
    assert interval.std == pytest.approx(np.std(values, ddof=1))
    assert (interval.low, interval.high) == pytest.approx((low, high))
    one = t_interval([0.5])
    assert one.mean == 0.5 and np.isnan(one.std) and np.isnan(one.low)


def test_identical_poolers_are_not_significantly_different():
    scores = [0.80, 0.83, 0.79]
    test = paired_t_test(scores, scores)
    assert test.diff == 0 and test.p == 1.0
    rng = np.random.default_rng(0)
    target = rng.random(300)
    prediction = target + rng.normal(0, 0.5, 300)
    boot = paired_bootstrap([(target, prediction, prediction)] * 2, metric_function("regression", "pearson"),
                            num_samples=200)
    assert boot.diff == 0 and boot.p == 1.0 and boot.low == boot.high == 0


def test_a_planted_difference_is_found_and_noise_is_not():
    rng = np.random.default_rng(1)
    pearson = metric_function("regression", "pearson")
    groups_real, groups_noise = [], []
    for _ in range(3):
        target = rng.random(400)
        better = target + rng.normal(0, 0.2, 400)
        worse = target + rng.normal(0, 0.6, 400)
        same_quality = target + rng.normal(0, 0.6, 400)
        groups_real.append((target, better, worse))
        groups_noise.append((target, same_quality, worse))
    real = paired_bootstrap(groups_real, pearson, num_samples=500)
    assert real.diff > 0.2 and real.low > 0 and real.p < 0.01
    noise = paired_bootstrap(groups_noise, pearson, num_samples=500)
    assert noise.low < 0 < noise.high and noise.p > 0.05
    seeds_better = paired_t_test([0.85, 0.86, 0.84, 0.87], [0.80, 0.80, 0.79, 0.81])
    assert seeds_better.diff == pytest.approx(0.055) and seeds_better.p < 0.01 and seeds_better.low > 0


def test_the_cluster_bootstrap_widens_the_interval_when_rows_of_a_group_share_their_errors():
    """PPPM's rows of one anchor err together: resampled one by one they look like 25 times more evidence."""
    rng = np.random.default_rng(2)
    pearson = metric_function("regression", "pearson")
    clusters = np.repeat(np.arange(40), 25)
    target = rng.random(1000)
    a = target + rng.normal(0, 0.3, 40)[clusters] + rng.normal(0, 0.05, 1000)
    b = target + rng.normal(0, 0.3, 40)[clusters] + rng.normal(0, 0.05, 1000)
    by_row = paired_bootstrap([(target, a, b)], pearson, num_samples=400)
    by_group = paired_bootstrap([(target, a, b)], pearson, num_samples=400, clusters=[clusters.astype(str)])
    assert by_group.diff == by_row.diff
    assert by_group.high - by_group.low > 2 * (by_row.high - by_row.low)
    # one row per cluster is the example bootstrap again (the same kind of interval, not the same draws)
    alone = paired_bootstrap([(target, a, b)], pearson, num_samples=400, clusters=[np.arange(1000)])
    assert 0.7 < (alone.high - alone.low) / (by_row.high - by_row.low) < 1.4
    # seeds that validated on the same rows share one draw of them: 4 copies of a seed are no more evidence than one
    one = paired_bootstrap([(target, a, b)], pearson, num_samples=200, clusters=[np.arange(1000)])
    four = paired_bootstrap([(target, a, b)] * 4, pearson, num_samples=200, clusters=[np.arange(1000)] * 4)
    assert (four.low, four.high, four.p) == pytest.approx((one.low, one.high, one.p))
    # too few clusters to draw (here 1 and 2 anchors): no interval, no p-value, rather than p = 0.002
    for few in (np.zeros(1000), np.repeat([0, 1], 500)):
        test = paired_bootstrap([(target, a, b)], pearson, num_samples=200, clusters=[few])
        assert np.isnan(test.p) and np.isnan(test.low) and test.diff == by_row.diff
    with pytest.raises(ValueError, match="2 cluster arrays for 1 groups; give one per group"):
        paired_bootstrap([(target, a, b)], pearson, clusters=[clusters, clusters])
    with pytest.raises(ValueError, match="999 cluster keys for 1000 rows; give one per row"):
        paired_bootstrap([(target, a, b)], pearson, clusters=[clusters[1:]])


def test_paired_t_test_matches_scipy_and_needs_pairs():
    from scipy import stats

    a, b = [0.81, 0.84, 0.80], [0.80, 0.80, 0.81]
    assert paired_t_test(a, b).p == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert np.isnan(paired_t_test([0.8], [0.7]).p)
    with pytest.raises(ValueError, match="one value per seed on both sides, got 2 and 3"):
        paired_t_test([0.1, 0.2], [0.1, 0.2, 0.3])


def test_holm_step_down():
    # Holm by hand: sorted p 0.01, 0.02, 0.04 -> 3*0.01, 2*0.02, 1*0.04 (kept monotone)
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # an untested pooler (NaN) stays in the family as p = 1: 4*0.01, 3*0.02, 2*0.04, and its own p stays NaN
    assert holm([0.04, 0.01, float("nan"), 0.02]) == pytest.approx([0.08, 0.04, float("nan"), 0.06], nan_ok=True)
    assert holm([0.5, 0.6]) == [1.0, 1.0]


def test_accuracy_metric_function():
    score = metric_function("binary", "accuracy")
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    assert score(np.array([0, 1, 1]), probs) == pytest.approx(2 / 3)


@pytest.mark.parametrize("task,classes", [("binary", 2), ("multiclass", 4)])
def test_direct_accuracy_equals_task_metrics(task, classes):
    from attnpool.metrics import task_metrics

    rng = np.random.default_rng(3)
    target = rng.integers(0, classes, 200)
    probs = rng.dirichlet(np.ones(classes), 200)
    score = metric_function(task, "accuracy")
    for _ in range(5):
        idx = rng.integers(0, 200, 200)
        assert score(target[idx], probs[idx]) == task_metrics(task, target[idx], probs[idx])["accuracy"]
    assert score.__name__ == "accuracy", "the direct path, not every metric of the task at each bootstrap replicate"


def test_pooler_specs_parse_and_fail_clearly():
    spec = PoolerSpec.parse("attention:attn_size=128,temperature=0.5")
    assert (spec.pooling, spec.options) == ("attention", {"attn_size": 128, "temperature": 0.5})
    assert spec.slug == "attention_attn_size=128_temperature=0.5"
    with pytest.raises(ValueError, match="Did you mean 'attention'"):
        PoolerSpec.parse("atention")
    with pytest.raises(ValueError, match="option 'attn_size' of 'attention:attn_size' is not key=value"):
        PoolerSpec.parse("attention:attn_size")
    with pytest.raises(ValueError, match=r"^--baseline attention:attn_size=8, attn_size=16: option attn_size is given "
                                         r"twice; give it once, with the value you mean$"):  # the later one won
        PoolerSpec.parse("attention:attn_size=8, attn_size=16", flag="--baseline")
    nested = PoolerSpec.parse('weighted_layer:num_layers=4,pooler={"type":"attention","attn_size":64}')
    assert nested.options == {"num_layers": 4, "pooler": {"type": "attention", "attn_size": 64}}
    both = PoolerSpec.parse('combined:poolers=[{"type":"attention","cls_share":0.9},"mean"],combine=concat')
    assert both.options == {"poolers": [{"type": "attention", "cls_share": 0.9}, "mean"], "combine": "concat"}


def test_compare_has_no_resume_flag_since_it_keeps_finished_runs_by_itself(capsys):
    from attnpool.cli import main

    with pytest.raises(SystemExit):
        main(["compare", "--poolings", "mean", "attention", "--resume"])
    assert "unrecognized arguments: --resume" in capsys.readouterr().err


# ---------------------------------------------------------------- end to end

FAST = ["--epochs", "2", "--batch-size", "8", "--eval-batch-size", "16", "--lr", "1e-3", "--head-lr", "3e-3",
        "--max-length", "16", "--folds", "2", "--bootstrap", "200"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    encoder = save_tiny_encoder(root / "encoder")
    write_toy_csv(root / "train.csv", n=40, seed=0)
    return root, ["--train-file", str(root / "train.csv"), "--text-cols", "first", "second", "--model", encoder,
                  *FAST]


@pytest.fixture(scope="module")
def compared(setup):
    root, common = setup
    out = root / "cmp"
    code = main(["compare", *common, "--poolings", "attention:attn_size=8", "--seeds", "2", "--output-dir", str(out)])
    assert code == 0
    return out, common


def test_compare_writes_its_table_and_files(compared):
    out, _ = compared
    for name in ("compare.md", "compare.csv", "compare.json", "compare.png", "compare_config.yaml"):
        assert (out / name).is_file(), name
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    report = json.loads((out / "compare.json").read_text())
    assert report["baseline"] == "mean" and report["seeds"] == [42, 43]
    rows = {r["pooler"]: r for r in report["poolers"]}
    assert set(rows) == {"mean", "attention:attn_size=8"}
    attention = rows["attention:attn_size=8"]
    for seed in ("42", "43"):  # the per-seed scores are the runs' own overall metrics
        run = out / "runs" / "attention_attn_size=8" / f"seed_{seed}"
        assert attention["per_seed"][seed] == pytest.approx(json.loads((run / "metrics.json").read_text())[
            "overall"]["pearson"])
    assert attention["diff"] == pytest.approx(attention["mean"] - rows["mean"]["mean"])
    assert 0 <= attention["p_bootstrap_holm"] <= 1
    # two seeds: the exact test over seeds cannot go below 2^(1-2), and the intervals stay inside [-1, 1]
    assert attention["p_signflip_min"] == 0.5 and 0.5 <= attention["p_signflip"] <= attention["p_signflip_holm"] <= 1
    for r in rows.values():
        assert r["ci_method"] == "fisher_z" and -1 <= r["ci_low"] <= r["ci_high"] <= 1
    # read from the safetensors header: exactly the pooler's own parameters on top of mean pooling
    assert attention["parameters_added"] == sum(p.numel() for p in build_pooler("attention", 32, attn_size=8)
                                                .parameters())
    assert 0.0 < attention["pooling_entropy"] <= 1.0 and 0.0 < attention["pooling_special_share"] < 1.0
    assert rows["mean"]["pooling_entropy"] == pytest.approx(1.0)  # mean pooling's weights are uniform
    fold_entropies = [f["pooling_entropy"] for seed in ("42", "43") for f in json.loads(
        (out / "runs" / "attention_attn_size=8" / f"seed_{seed}" / "metrics.json").read_text())["folds"]]
    assert attention["pooling_entropy"] == pytest.approx(np.mean(fold_entropies))
    assert attention["time_ratio"] > 0 and attention["memory_ratio"] > 0
    table = (out / "compare.md").read_text()
    assert "| `mean` |" in table and "(baseline)" in table and "p (bootstrap, Holm)" in table
    assert "p over seeds (exact, Holm)" in table and "Fisher's z" in table and "too few to test" in table
    assert "| weight entropy | on special tokens |" in table
    assert f"| {attention['pooling_entropy']:.3f} | {100 * attention['pooling_special_share']:.1f}% |" in table
    frame = pd.read_csv(out / "compare.csv")
    assert list(frame["pooler"]) == ["mean", "attention:attn_size=8"]
    assert report["bootstrap_by"] == "example" and "resamples of the out-of-fold examples" in table


def test_grouped_folds_are_compared_by_resampling_whole_groups(setup, tmp_path):
    root, common = setup
    out = tmp_path / "grouped"
    code = main(["compare", *common, "--group-col", "first", "--poolings", "attention:attn_size=8", "--seeds", "1",
                 "--output-dir", str(out)])
    assert code == 0
    oof = pd.read_csv(out / "runs" / "mean" / "seed_42" / "oof.csv")
    train = pd.read_csv(root / "train.csv")
    assert list(oof["group"]) == list(train["first"].iloc[oof["row"]])  # each row's key of the grouped folds
    assert json.loads((out / "compare.json").read_text())["bootstrap_by"] == "group"
    assert "resamples of whole groups of out-of-fold examples" in (out / "compare.md").read_text()


def test_same_seed_gives_identical_folds_and_data_order_across_poolers(compared):
    out, _ = compared
    for seed in (42, 43):
        mean_run = out / "runs" / "mean" / f"seed_{seed}"
        attention_run = out / "runs" / "attention_attn_size=8" / f"seed_{seed}"
        assert (mean_run / "folds.csv").read_text() == (attention_run / "folds.csv").read_text()
        mean_cfg = (mean_run / "config.yaml").read_text().splitlines()
        attention_cfg = (attention_run / "config.yaml").read_text().splitlines()
        differ = {line.split(":")[0] for line in set(mean_cfg) ^ set(attention_cfg) if not line.startswith(" ")}
        assert differ <= {"pooling", "pooling_options", "output_dir"}, differ
    assert (out / "runs/mean/seed_42/folds.csv").read_text() != (out / "runs/mean/seed_43/folds.csv").read_text()


def test_a_second_call_trains_nothing_and_a_new_pooler_only_itself(compared, capsys):
    out, common = compared
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed_*/metrics.json")}
    assert main(["compare", *common, "--poolings", "attention:attn_size=8", "--seeds", "2",
                 "--output-dir", str(out)]) == 0
    assert "trained 0 run(s)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed_*/metrics.json")} == before
    assert main(["compare", *common, "--poolings", "attention:attn_size=8", "max", "--seeds", "2",
                 "--output-dir", str(out)]) == 0
    assert "trained 2 run(s)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in before} == before
    rows = json.loads((out / "compare.json").read_text())["poolers"]
    assert [r["pooler"] for r in rows] == ["mean", "attention:attn_size=8", "max"]


def test_a_pooler_in_the_recipe_is_said_to_be_replaced_by_the_specs(compared, tmp_path, caplog):
    """A train config reused for compare: its pooler would silently give way to each --poolings spec."""
    out, common = compared
    (tmp_path / "train.yaml").write_text("pooling: gem\npooling_options: {p: 2}\n")
    with caplog.at_level("WARNING", logger="attnpool"):
        assert main(["compare", "--config", str(tmp_path / "train.yaml"), *common, "--poolings",
                     "attention:attn_size=8", "--seeds", "2", "--output-dir", str(out)]) == 0
    assert "compare: the recipe's pooling=gem and pooling_options={'p': 2} are replaced by each --poolings spec" \
        in caplog.text


def test_compare_refuses_another_recipe_in_the_same_folder(compared, capsys):
    out, common = compared
    changed = [*common, "--lr", "5e-4"]
    assert main(["compare", *changed, "--poolings", "max", "--seeds", "2", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a comparison with another recipe (lr: 0.001 -> 0.0005)" in err and "--overwrite" in err


def test_a_comparison_saved_before_a_field_existed_still_pairs_with_that_field_s_default(compared, capsys):
    out, common = compared
    path = out / "compare_config.yaml"
    saved = yaml.safe_load(path.read_text())
    assert saved.pop("ema_decay") is None and saved.pop("adversarial_lr") == 1.0  # as if saved by an older attnpool
    path.write_text(yaml.safe_dump(saved))
    assert main(["compare", *common, "--poolings", "attention:attn_size=8", "--seeds", "2",
                 "--output-dir", str(out)]) == 0
    assert "trained 0 run(s)" in capsys.readouterr().out
    assert main(["compare", *common, "--ema-decay", "0.9", "--poolings", "attention:attn_size=8", "--seeds",
                 "2", "--output-dir", str(out)]) == 2  # a value other than the default is another recipe
    assert "another recipe (ema_decay: None -> 0.9)" in capsys.readouterr().err


def test_compare_bad_arguments(setup, tmp_path, capsys):
    _, common = setup
    assert main(["compare", *common, "--poolings", "mean", "--output-dir", str(tmp_path / "a")]) == 2
    assert "at least one pooler besides the baseline" in capsys.readouterr().err
    assert main(["compare", *common, "--poolings", "max", "--pooling-opt", "attn_size=8",
                 "--output-dir", str(tmp_path / "b")]) == 2
    assert "--poolings NAME[:key=value,...]" in capsys.readouterr().err
    assert main(["compare", *common, "--poolings", "max", "--seeds", "0", "--output-dir", str(tmp_path / "c")]) == 2
    assert "a single value is a number of seeds and must be >= 1" in capsys.readouterr().err
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    assert main(["compare", *common, "--poolings", "max", "--output-dir", str(tmp_path / "d")]) == 2
    assert "is not an attnpool comparison" in capsys.readouterr().err


def test_bad_baseline_errors_name_the_baseline_flag(setup, tmp_path, capsys):
    """--baseline mean:attn_size=3 said "--poolings mean:attn_size=3: ...", --baseline '' "--poolings: empty pooler
    name"."""
    _, common = setup
    assert main(["compare", *common, "--poolings", "max", "--baseline", "mean:attn_size=3",
                 "--output-dir", str(tmp_path / "a")]) == 2
    assert "--baseline mean:attn_size=3: pooler 'mean' got unknown option(s) attn_size" in capsys.readouterr().err
    assert main(["compare", *common, "--poolings", "max", "--baseline", "", "--output-dir", str(tmp_path / "b")]) == 2
    assert "--baseline: empty pooler name in ''" in capsys.readouterr().err


def test_an_output_dir_that_is_a_file_is_said_to_be_one(setup, tmp_path, capsys):
    """--output-dir naming a file said "[Errno 17] File exists"."""
    _, common = setup
    (tmp_path / "notes.txt").write_text("mine")
    for out, message in [(tmp_path / "notes.txt", f"--output-dir {tmp_path / 'notes.txt'} is a file, not a folder"),
                         (tmp_path / "notes.txt" / "cmp", f"--output-dir {tmp_path / 'notes.txt' / 'cmp'}: "
                                                          f"{tmp_path / 'notes.txt'} is a file, not a folder")]:
        assert main(["compare", *common, "--poolings", "max", "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Errno" not in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_numpy_integer_is_a_number_of_seeds(setup, tmp_path, monkeypatch):
    """api.compare(seeds=np.int64(2)) failed with "'numpy.int64' object is not iterable"."""
    from attnpool import api
    from attnpool.comparison import runner

    class Trained(Exception):
        pass

    def train_missing(out, cfg, specs, seeds):
        raise Trained(seeds)

    root, _ = setup
    monkeypatch.setattr(runner, "_train_missing", train_missing)
    with pytest.raises(Trained) as trained:
        api.compare(poolings=["max"], seeds=np.int64(2), output_dir=tmp_path / "c", train_file=str(root / "train.csv"),
                    text_cols=["first", "second"], seed=7)
    assert trained.value.args[0] == [7, 8] and all(type(seed) is int for seed in trained.value.args[0])
    with pytest.raises(ValueError, match="a single value is a number of seeds and must be >= 1, got 0"):
        api.compare(poolings=["max"], seeds=np.int64(0), output_dir=tmp_path / "d")
    # seeds=np.arange(7, 9): np.int64 seeds, which yaml.safe_dump cannot write in the runs' requests
    with pytest.raises(Trained) as trained:
        api.compare(poolings=["max"], seeds=np.arange(7, 9), output_dir=tmp_path / "e",
                    train_file=str(root / "train.csv"), text_cols=["first", "second"])
    assert trained.value.args[0] == [7, 8] and all(type(seed) is int for seed in trained.value.args[0])
    with pytest.raises(ValueError, match=r"--seeds must be integer seeds \(or one count\), got \[True, 2\]"):
        api.compare(poolings=["max"], seeds=[True, 2], output_dir=tmp_path / "f")


def test_specs_that_would_share_a_run_folder_are_refused(tmp_path):
    """combined:poolers=["mean","max"] and combined:poolers=[["mean"],"max"] both slug to combined_poolers=_mean_max_:
    the second reused the first's runs (delta 0, p 1)."""
    from attnpool import api

    with pytest.raises(ValueError, match=r"would share the run folder combined_poolers=_mean_max_: write one of them "
                                         r"differently"):
        api.compare(poolings=['combined:poolers=["mean","max"]', 'combined:poolers=[["mean"],"max"]'], seeds=1,
                    output_dir=tmp_path / "c")


def test_a_failed_run_is_reported_with_its_log(setup, tmp_path, capsys):
    _, common = setup
    bad = [a if a != "second" else "nothere" for a in common]  # only the training process reads the data
    assert main(["compare", *bad, "--poolings", "max", "--seeds", "1", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "training mean with seed 42 failed (exit 2)" in err and "seed_42.log" in err and "nothere" in err


def test_a_start_stopped_by_bad_data_is_started_again_not_resumed(tmp_path, monkeypatch):
    """A run folder left with only train.log (bad data, Ctrl-C while reading) was resumed: train --resume refuses a
    run that never started, so the comparison failed on it until the user deleted the folder."""
    run_dir = tmp_path / "runs" / "mean" / "seed_42"
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text("DataError: missing column(s) 'second'\n")
    commands = []

    class Started(Exception):
        pass

    def popen(command, **kwargs):
        commands.append(command)
        raise Started

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    cfg, spec = TrainConfig(train_file="x.csv", text_cols=["a"]), PoolerSpec.parse("mean")
    with pytest.raises(Started):
        runner._run_one(cfg, spec, 42, run_dir)
    Run(run_dir).write_info({"task": "regression"})  # a run that started: resumed
    with pytest.raises(Started):
        runner._run_one(cfg, spec, 42, run_dir)
    assert ["--resume" in command for command in commands] == [False, True]


def test_overwrite_refuses_to_delete_a_run_another_process_is_training(tmp_path, monkeypatch):
    """compare --overwrite held the comparison's lock only: it deleted a run a worker left by a killed compare (or a
    train --resume by hand) was training."""
    helpers = importlib.util.spec_from_file_location("lock_helpers", Path(__file__).parents[1] / "runs"
                                                     / "lock_helpers.py")
    lock_helpers = importlib.util.module_from_spec(helpers)
    helpers.loader.exec_module(lock_helpers)
    monkeypatch.setattr(runner, "_train_missing", lambda *args: pytest.fail("trained before the runs were locked"))
    out, cfg = tmp_path / "cmp", TrainConfig(train_file="x.csv", text_cols=["a"])
    with RunLock(out, purpose="compare"):
        runner._check_recipe(out, cfg, overwrite=False)  # an earlier comparison
    busy = out / "runs" / "mean" / "seed_42"
    Run.create(busy).write_info({"task": "regression"})
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", lock_helpers.HOLDER, lock_mod.__file__, str(busy), str(ready),
                               "-", "dir"], stderr=subprocess.PIPE, text=True)
    try:
        lock_helpers.wait_for(ready, holder)
        with pytest.raises(LockedError, match=rf"{re.escape(str(busy))} is in use by another attnpool process "
                                              rf"\(train, PID {holder.pid} on host"):
            runner.compare(cfg, ["max"], seeds=[42], output_dir=out, overwrite=True)
    finally:
        holder.kill()
        holder.wait()
        holder.stderr.close()
    assert Run.is_run(busy) and (out / "compare_config.yaml").is_file()  # nothing deleted


def fake_training(monkeypatch, rows: int = 40, fingerprint=lambda seed: "the same rows") -> list:
    """Replace the training process by one that writes a finished regression run of ``rows`` rows in 2 folds (only
    ``only_folds`` when given), with ``fingerprint(seed)`` as its data fingerprint; returns the (pooler, seed) trained.
    """
    trained = []

    def run_one(cfg, spec, seed, run_dir):
        trained.append((spec.label, seed))
        run = Run.create(run_dir, overwrite=True)
        run.write_info({"task": "regression", "classes": None, "data_sha256": fingerprint(seed)})
        run.write_config({**cfg.to_dict(), "pooling": spec.pooling, "pooling_options": spec.options, "seed": seed})
        run.write_fold_assignment(np.arange(rows) % 2)
        folds = cfg.only_folds if cfg.only_folds is not None else [0, 1]
        valid = np.flatnonzero(np.isin(np.arange(rows) % 2, folds))
        target = np.random.default_rng(seed).random(rows)[valid]
        predicted = target + np.random.default_rng(len(trained)).normal(0, 0.3, len(valid))
        run.write_oof(oof_frame("regression", None, valid, None, target, predicted, 0))
        run.write_metrics({"folds": [{"fold": f} for f in folds], "overall": task_metrics("regression", target,
                                                                                          predicted),
                           "complete": len(folds) == 2})

    monkeypatch.setattr(runner, "_run_one", run_one)
    return trained


def test_a_limit_of_exactly_the_files_rows_draws_nothing(tmp_path, monkeypatch):
    """--limit 40 on a file of 40 rows: every seed validated on the same rows, but the row count alone read as a draw,
    so the bootstrap counted each seed's rows as examples of their own (an interval too narrow)."""
    fake_training(monkeypatch, rows=40)
    drawn = []

    def summarise(*args, per_seed_rows, **kwargs):
        drawn.append(per_seed_rows)
        return real_summarise(*args, per_seed_rows=per_seed_rows, **kwargs)

    real_summarise = runner.summarise
    monkeypatch.setattr(runner, "summarise", summarise)
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2, limit=40)
    runner.compare(cfg, ["attention"], seeds=[1, 2], output_dir=tmp_path / "cmp", bootstrap=20)
    assert drawn == [False]  # the same fingerprint in every seed: the same rows, keys shared by the seeds
    runs = [tmp_path / "cmp" / "runs" / "mean" / f"seed_{seed}" for seed in (1, 2)]
    Run(runs[1]).write_info({**Run(runs[1]).info(), "data_sha256": "other rows"})  # each seed drew its own
    assert runner.draws_rows_per_seed(cfg, *runs)


def test_the_table_says_one_validation_file_served_every_seed(tmp_path, monkeypatch):
    """With a valid_file the notes said each seed drew its own split, though every seed validated on that file."""
    fake_training(monkeypatch)
    cfg = TrainConfig(train_file="x.csv", valid_file="v.csv", text_cols=["a"])
    result = runner.compare(cfg, ["attention"], seeds=[1, 2], output_dir=tmp_path / "cmp", bootstrap=20)
    assert "One validation file for every seed (valid_file): the seeds vary the training only" in result.markdown
    assert "Each seed drew its own split" not in result.markdown
    assert result.markdown == (tmp_path / "cmp" / "compare.md").read_text()


def test_only_folds_that_would_leave_a_seed_s_runs_unpaired_are_refused_before_anything_trains(tmp_path, monkeypatch):
    """A full comparison, then a new pooler with --only-folds 0: it trained, then the comparison failed with "predicted
    different rows ... was the data changed during the comparison?"."""
    trained = fake_training(monkeypatch)
    out = tmp_path / "cmp"
    runner.compare(TrainConfig(train_file="x.csv", text_cols=["a"], folds=2), ["attention"], seeds=[1, 2],
                   output_dir=out, bootstrap=20)
    assert len(trained) == 4
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2, only_folds=[0])
    with pytest.raises(RunError, match=re.escape(
            f"--only-folds 0: the runs of seed 1 in {out} would hold different folds (mean, attention: fold(s) 0, 1; "
            "gem: fold(s) 0), so their out-of-fold rows would not be paired. Give --only-folds 0 1 (the folds of "
            "every run of the seed), or leave --only-folds out to train every fold")):
        runner.compare(cfg, ["attention", "gem"], seeds=[1, 2], output_dir=out, bootstrap=20)
    assert len(trained) == 4 and not (out / "runs" / "gem").exists()
    # the same folds as the kept runs: only the new pooler trains, and it pairs
    other = tmp_path / "partial"
    runner.compare(cfg, ["attention"], seeds=[1, 2], output_dir=other, bootstrap=20)
    result = runner.compare(cfg, ["attention", "gem"], seeds=[1, 2], output_dir=other, bootstrap=20)
    assert trained[-2:] == [("gem", 1), ("gem", 2)] and [r["pooler"] for r in result.rows] == ["mean", "attention",
                                                                                                  "gem"]


def test_bootstrap_keys_name_the_same_example_in_every_seed(tmp_path):
    """Groups when every row has one; else ids (stable whatever rows a seed drew); else row numbers, which are a
    seed's own when each seed drew its own rows (a limit without split_seed)."""
    from attnpool.comparison import bootstrap_keys
    from attnpool.runs import Run
    from attnpool.runs.tables import oof_frame
    from model_helpers import make_run

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=2)

    def write(ids, groups):
        frame = oof_frame("regression", None, np.arange(4), ids, np.linspace(0, 1, 4), np.linspace(0, 1, 4), 0, groups)
        Run(run).write_oof(frame)

    write(np.array(["a", "b", "c", "d"]), np.array(["g1", "g1", "g2", "g2"]))
    keys, kind = bootstrap_keys(run, 42)
    assert kind == "group" and keys.tolist() == ["g1", "g1", "g2", "g2"]
    keys, kind = bootstrap_keys(run, 42, groups=False)
    assert kind == "id" and keys.tolist() == ["id:a", "id:b", "id:c", "id:d"]
    # a fold finished before groups were recorded (resumed across versions): no group column for its rows
    frame = oof_frame("regression", None, np.arange(4), None, np.linspace(0, 1, 4), np.linspace(0, 1, 4), 0)
    frame["group"] = ["g1", "g1", None, None]
    Run(run).write_oof(frame)
    keys, kind = bootstrap_keys(run, 42)
    assert kind == "row" and keys.tolist() == ["row:0", "row:1", "row:2", "row:3"]
    assert bootstrap_keys(run, 43, per_seed_rows=True)[0].tolist()[0] == "seed 43 row:0"
    with pytest.raises(ValueError, match="cluster keys are missing at rows \\[1\\]"):
        paired_bootstrap([(np.arange(12.0), np.arange(12.0), np.arange(12.0))], metric_function("regression",
                         "pearson"), clusters=[np.array(["a", None, *"bcdefghijk"], dtype=object)])


def test_a_diverged_classifier_has_no_accuracy_in_the_bootstrap_either():
    """argmax of a NaN row is 0: the fast path scored a diverged run as "always class 0" (0.5 here), not NaN."""
    score = metric_function("binary", "accuracy")
    assert np.isnan(score(np.array([0, 1]), np.full((2, 2), np.nan)))


def test_a_pearson_loss_run_is_compared_with_each_fold_on_its_own_scale(tmp_path):
    """The loss leaves each fold model its own scale: compare ranked poolers by the pooled Pearson, which the run's
    own metrics call misleading (pearson_folds_standardised)."""
    from attnpool.comparison.summary import run_predictions, run_score
    from attnpool.metrics import standardised_per_group, task_metrics
    from attnpool.runs import Run
    from attnpool.runs.tables import oof_frame
    from model_helpers import make_run

    run = Run(make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), loss="pearson"))
    rng = np.random.default_rng(0)
    target, fold = rng.random(40), np.arange(40) % 2
    scores = np.where(fold == 0, target, 10 * target - 8) + 0.05 * rng.standard_normal(40)  # fold 1: its own scale
    run.write_oof(pd.concat([oof_frame("regression", None, np.flatnonzero(fold == f), None, target[fold == f],
                                       scores[fold == f], f) for f in (0, 1)], ignore_index=True))
    standardised = task_metrics("regression", target, standardised_per_group(scores, fold))["pearson"]
    pooled = task_metrics("regression", target, scores)["pearson"]
    run.write_metrics({"folds": [], "overall": {"pearson": pooled, "pearson_folds_standardised": standardised},
                       "complete": True})
    assert pooled < 0.9 < standardised
    assert run_score(run.path, "regression") == pytest.approx(standardised)
    _, got_target, got_scores = run_predictions(run.path, "regression")
    assert metric_function("regression", "pearson")(got_target, got_scores) == pytest.approx(standardised)


def test_runs_of_one_seed_trained_on_other_texts_are_not_paired(tmp_path):
    """A compare resumed after the texts were edited paired the old baseline runs with new ones (same rows and
    labels, so the pairing checks passed)."""
    from attnpool.comparison import runner
    from attnpool.comparison.specs import PoolerSpec
    from attnpool.runs import Run, RunError
    from model_helpers import make_run

    encoder = save_tiny_encoder(tmp_path / "encoder")
    specs = [PoolerSpec.parse("mean"), PoolerSpec.parse("attention")]
    for spec, texts in zip(specs, ["old", "new"], strict=True):
        run = Run(make_run(tmp_path / "cmp" / "runs" / spec.slug / "seed_1", encoder, folds=1))
        run.write_info({**run.info(), "data_sha256": "labels", "texts_sha256": texts})
    with pytest.raises(RunError, match=r"the runs of seed 1 trained on different data \(mean; attention: each group "
                                       r"on its own\): the data changed between compare calls"):
        runner._check_same_data(tmp_path / "cmp", specs, [1])
    run.write_info({**run.info(), "texts_sha256": "old"})
    runner._check_same_data(tmp_path / "cmp", specs, [1])  # the same data: paired


def test_runs_of_one_seed_trained_in_different_precisions_are_paired_with_a_warning(tmp_path, caplog):
    """precision auto resolves per machine: a compare resumed elsewhere paired fp32 runs with bf16 ones silently."""
    from attnpool.comparison import runner
    from attnpool.comparison.specs import PoolerSpec
    from attnpool.runs import Run
    from model_helpers import make_run

    encoder = save_tiny_encoder(tmp_path / "encoder")
    specs = [PoolerSpec.parse("mean"), PoolerSpec.parse("attention")]
    for spec, precision in zip(specs, ["fp32", "bf16"], strict=True):
        run = Run(make_run(tmp_path / "cmp" / "runs" / spec.slug / "seed_1", encoder, folds=1))
        run.write_info({**run.info(), "precision": precision})
    with caplog.at_level("WARNING", logger="attnpool"):
        runner._check_same_data(tmp_path / "cmp", specs, [1])
    assert "the runs of seed 1 trained in different precisions (mean: fp32; attention: bf16)" in caplog.text
    caplog.clear()
    run.write_info({**run.info(), "precision": "fp32"})
    with caplog.at_level("WARNING", logger="attnpool"):
        runner._check_same_data(tmp_path / "cmp", specs, [1])
    assert "precisions" not in caplog.text


@pytest.mark.parametrize(("options", "message"), [
    ({"bootstrap": -1}, "--bootstrap is a number of replicates and must be >= 1 (e.g. 1000), got -1"),
    ({"bootstrap": 0}, "--bootstrap is a number of replicates and must be >= 1 (e.g. 1000), got 0"),
    ({"seeds": [-1, 3]}, "--seeds must be in [0, 2**32 - 1], the seeds numpy and torch take, got [-1, 3]"),
    ({"poolings": ["attention:attn_size=-3"]}, "--poolings attention:attn_size=-3: the pooler does not build"),
    ({"poolings": ["weighted_layer"], "recurrent": "lstm"}, "recurrent lstm runs over one sequence of token "
                                                           "states, but pooler 'weighted_layer' reads several"),
])
def test_bad_bootstrap_seeds_or_pooler_values_are_refused_before_anything_trains(setup, tmp_path, monkeypatch,
                                                                                   options, message):
    """--bootstrap -1 failed after every run had trained ("negative dimensions are not allowed"); 0 wrote n/a."""
    from attnpool import api
    from attnpool.comparison import runner

    def train_missing(out, cfg, specs, seeds):
        raise AssertionError("trained before the arguments were checked")

    root, _ = setup
    monkeypatch.setattr(runner, "_train_missing", train_missing)
    options = {"poolings": ["max"], "seeds": 1, **options}
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        api.compare(output_dir=tmp_path / "c", train_file=str(root / "train.csv"), text_cols=["first", "second"],
                    **options)
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------- one key kind, absolute paths, early data check


def _oof_run(path: Path, rows: np.ndarray, ids: np.ndarray | None, target: np.ndarray) -> tuple[Path, int]:
    run = Run.create(path)
    run.write_info({"task": "regression"})
    run.write_oof(oof_frame("regression", None, rows, None if ids is None else ids[rows], target[rows], target[rows],
                            0))
    return path, int(path.name.removeprefix("seed_"))


def test_bootstrap_keys_are_of_one_kind_for_every_seed(tmp_path):
    """The kind was chosen per run: a seed whose fold held both rows of a duplicated id got row keys, the other seed
    id keys, so the 100 examples they shared were drawn twice, independently; and two rows sharing an id in different
    seeds were merged into one key."""
    from attnpool.comparison import shared_bootstrap_keys

    n, target = 400, np.random.default_rng(0).random(400)
    ids = np.array([f"e{i}" for i in range(n)])
    ids[1] = "e0"  # one id on two rows of the file
    perm = np.random.default_rng(7).permutation(n)
    valid = {42: np.sort(np.r_[0, perm[perm > 1][:199]]), 43: np.sort(np.r_[0, 1, perm[perm > 1][100:298]])}
    runs = {("mean", seed): _oof_run(tmp_path / "a" / f"seed_{seed}", rows, ids, target) for seed, rows in
            valid.items()}
    keys, by_group = shared_bootstrap_keys(runs)
    assert not by_group and all(k.startswith("row:") for v in keys.values() for k in v)
    shared = set(keys[("mean", 42)]) & set(keys[("mean", 43)])
    assert len(shared) == len(np.intersect1d(valid[42], valid[43])) == 100
    # each seed's ids are unique, but e0 is row 0 in one seed and row 1 in the other: two examples, not one
    runs = {("mean", 42): _oof_run(tmp_path / "b" / "seed_42", np.r_[0, 2:50], ids, target),
            ("mean", 43): _oof_run(tmp_path / "b" / "seed_43", np.r_[1, 2:50], ids, target)}
    keys, _ = shared_bootstrap_keys(runs)
    assert "id:e0" not in keys[("mean", 42)] and keys[("mean", 43)][0] == "row:1"
    # ids one-to-one with rows over every run: ids, shared where the rows are
    unique = np.array([f"e{i}" for i in range(n)])
    runs = {("mean", seed): _oof_run(tmp_path / "c" / f"seed_{seed}", rows, unique, target) for seed, rows in
            valid.items()}
    keys, _ = shared_bootstrap_keys(runs)
    assert keys[("mean", 42)][0] == "id:e0" and len(set(keys[("mean", 42)]) & set(keys[("mean", 43)])) == 100
    # one run without ids (an older run): rows everywhere
    runs[("attention", 43)] = _oof_run(tmp_path / "c" / "attention" / "seed_43", valid[43], None, target)
    keys, _ = shared_bootstrap_keys(runs)
    assert all(k.startswith("row:") for v in keys.values() for k in v)
    # each seed drew its own rows (a limit): rows are the seed's own, ids name the examples across seeds
    runs = {("mean", 42): _oof_run(tmp_path / "d" / "seed_42", np.arange(20), unique, target),
            ("mean", 43): _oof_run(tmp_path / "d" / "seed_43", np.arange(20), unique[::-1].copy(), target)}
    keys, _ = shared_bootstrap_keys(runs, per_seed_rows=True)
    assert keys[("mean", 42)][0] == "id:e0" and keys[("mean", 43)][0] == "id:e399"


def _csv(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a,label\nx,1\n")
    return str(path.resolve())


def test_the_same_data_file_named_otherwise_is_the_same_recipe(tmp_path, monkeypatch):
    """compare_config.yaml kept train_file as typed: data/x.csv, then its absolute path, was refused as another
    recipe, and data/x.csv from another working directory (another file) was accepted."""
    here, elsewhere = _csv(tmp_path / "wd" / "data" / "x.csv"), _csv(tmp_path / "other" / "data" / "x.csv")
    (tmp_path / "wd" / "encoder").mkdir()
    out = tmp_path / "cmp"
    monkeypatch.chdir(tmp_path / "wd")

    def recipe(**values):
        return TrainConfig(text_cols=["a"], **values)

    runner._check_recipe(out, recipe(train_file="data/x.csv", model="encoder"), False)
    saved = yaml.safe_load((out / "compare_config.yaml").read_text())
    assert saved["train_file"] == here and saved["model"] == str((tmp_path / "wd" / "encoder").resolve())
    for same in (here, "./data/x.csv", "data/../data/x.csv"):
        runner._check_recipe(out, recipe(train_file=same, model="encoder"), False)
    monkeypatch.chdir(tmp_path / "other")
    with pytest.raises(RunError, match=re.escape(f"another recipe (train_file: {here!r} -> {elsewhere!r})")):
        runner._check_recipe(out, recipe(train_file="data/x.csv", model=str(tmp_path / "wd" / "encoder")), False)
    runner._check_recipe(out, recipe(train_file=here, model=str(tmp_path / "wd" / "encoder")), False)
    hub, name = tmp_path / "hub", "sentence-transformers/all-MiniLM-L6-v2"  # a hub name stays a name
    runner._check_recipe(hub, recipe(train_file=here, model=name), False)
    assert yaml.safe_load((hub / "compare_config.yaml").read_text())["model"] == name


def test_a_recipe_saved_with_relative_paths_still_pairs_with_the_same_file(tmp_path, monkeypatch):
    """Comparisons saved before the paths were made absolute: the same file is not refused, and the paths are saved
    absolute once it matches; a run inside tells which file a relative path meant."""
    here, elsewhere = _csv(tmp_path / "wd" / "data" / "x.csv"), _csv(tmp_path / "other" / "data" / "x.csv")
    cfg = TrainConfig(train_file="data/x.csv", text_cols=["a"])
    old = tmp_path / "old"
    old.mkdir()
    (old / "compare_config.yaml").write_text(yaml.safe_dump(runner._shared_recipe(cfg), sort_keys=False))
    monkeypatch.chdir(tmp_path / "wd")  # the folder it was made in: read from here
    runner._check_recipe(old, TrainConfig(train_file=here, text_cols=["a"]), False)
    assert yaml.safe_load((old / "compare_config.yaml").read_text())["train_file"] == here
    # from another folder: its runs (which save their paths absolute) say data/x.csv was wd's
    (old / "compare_config.yaml").write_text(yaml.safe_dump(runner._shared_recipe(cfg), sort_keys=False))
    kept = Run.create(old / "runs" / "mean" / "seed_42")
    kept.write_config({**cfg.to_dict(), "train_file": here})
    kept.write_info({"task": "regression", "classes": None})  # a recorded run: its recipe is not replaced
    monkeypatch.chdir(tmp_path / "other")
    with pytest.raises(RunError, match=re.escape(f"(train_file: {here!r} -> {elsewhere!r})")):
        runner._check_recipe(old, cfg, False)
    runner._check_recipe(old, TrainConfig(train_file=here, text_cols=["a"]), False)
    assert yaml.safe_load((old / "compare_config.yaml").read_text())["train_file"] == here


def test_new_seeds_trained_after_a_data_edit_are_refused_after_their_first_run(tmp_path, monkeypatch):
    """Seeds added after the data was edited paired well within each seed, so nothing refused averaging seeds of
    two data sets; a limit each seed draws (no split seed) gives seeds data of their own and stays allowed."""
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2)
    out = tmp_path / "cmp"
    fake_training(monkeypatch, fingerprint=lambda seed: "old data")
    runner.compare(cfg, ["attention"], seeds=[1, 2], output_dir=out, bootstrap=20)
    trained = fake_training(monkeypatch, fingerprint=lambda seed: "edited data")
    with pytest.raises(RunError, match=re.escape("the seeds trained on different data (seed 1, seed 2; seed 3: each "
                                                 "group on its own): the data changed between compare calls")):
        runner.compare(cfg, ["attention"], seeds=[1, 2, 3, 4], output_dir=out, bootstrap=20)
    assert trained == [("mean", 3)]
    drawn = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2, limit=30)
    fake_training(monkeypatch, fingerprint=lambda seed: f"rows drawn by seed {seed}")
    result = runner.compare(drawn, ["attention"], seeds=[1, 2], output_dir=tmp_path / "drawn", bootstrap=20)
    assert [r["pooler"] for r in result.rows] == ["mean", "attention"]


def test_runs_from_before_texts_fingerprints_pair_with_new_ones_on_the_same_rows(tmp_path):
    """Runs recorded before texts_sha256 existed have none: a new seed's run that has one was taken for other data."""
    specs = [PoolerSpec.parse("mean")]
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2)
    for seed, info in ((1, {"data_sha256": "rows"}), (2, {"data_sha256": "rows", "texts_sha256": "texts"})):
        Run.create(tmp_path / "runs" / "mean" / f"seed_{seed}").write_info({"task": "regression", **info})
    runner._check_seeds_same_data(tmp_path, cfg, specs, [1, 2])  # paired: the rows and labels agree
    Run(tmp_path / "runs" / "mean" / "seed_1").write_info({"task": "regression", "data_sha256": "other rows"})
    with pytest.raises(RunError, match=r"the seeds trained on different data \(seed 1; seed 2: each group"):
        runner._check_seeds_same_data(tmp_path, cfg, specs, [1, 2])
    Run(tmp_path / "runs" / "mean" / "seed_1").write_info({"task": "regression", "data_sha256": "rows",
                                                            "texts_sha256": "edited texts"})
    with pytest.raises(RunError, match="the seeds trained on different data"):  # both recorded: texts count
        runner._check_seeds_same_data(tmp_path, cfg, specs, [1, 2])
    # a run without a texts fingerprint beside two that disagree: the two are still told apart
    Run.create(tmp_path / "runs" / "mean" / "seed_3").write_info({"task": "regression", "data_sha256": "rows"})
    with pytest.raises(RunError, match=r"\(seed 1, seed 3; seed 2: each group"):
        runner._check_seeds_same_data(tmp_path, cfg, specs, [1, 2, 3])


def test_a_data_edit_is_refused_after_one_new_run_not_after_all_of_them(tmp_path, monkeypatch):
    """The data check ran after every missing run had trained: hours of runs, then the refusal."""
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], folds=2)
    out = tmp_path / "cmp"
    fake_training(monkeypatch, fingerprint=lambda seed: "old data")
    runner.compare(cfg, ["attention"], seeds=[1, 2, 3], output_dir=out, bootstrap=20)
    trained = fake_training(monkeypatch, fingerprint=lambda seed: "edited data")
    with pytest.raises(RunError, match=re.escape("the runs of seed 1 trained on different data (mean, attention; gem: "
                                                 "each group on its own)")):
        runner.compare(cfg, ["attention", "gem", "max"], seeds=[1, 2, 3], output_dir=out, bootstrap=20)
    assert trained == [("gem", 1)]
    # a new seed listed first: the seeds with runs kept from earlier calls train first, so the edit is found at once
    other = tmp_path / "other"
    fake_training(monkeypatch, fingerprint=lambda seed: "old data")
    runner.compare(cfg, ["attention"], seeds=[1], output_dir=other, bootstrap=20)
    trained = fake_training(monkeypatch, fingerprint=lambda seed: "edited data")
    with pytest.raises(RunError, match="the runs of seed 1 trained on different data"):
        runner.compare(cfg, ["attention", "gem"], seeds=[9, 1], output_dir=other, bootstrap=20)
    assert trained == [("gem", 1)]
    # unchanged data: every run trains and the comparison is written
    trained = fake_training(monkeypatch, fingerprint=lambda seed: "old data")
    result = runner.compare(cfg, ["attention", "max"], seeds=[9, 1], output_dir=tmp_path / "third", bootstrap=20)
    assert len(trained) == 6 and [r["pooler"] for r in result.rows] == ["mean", "attention", "max"]


def test_the_peak_memory_of_a_run_is_counted_in_bytes_on_linux_and_macos(tmp_path, monkeypatch):
    """ru_maxrss is KiB on Linux but bytes on macOS: multiplied by 1024 on both, a Mac's peak read 1024 times high."""
    from types import SimpleNamespace

    run_dir = tmp_path / "runs" / "mean" / "seed_1"
    Run.create(run_dir).write_metrics({"folds": [], "overall": {}, "complete": True})
    monkeypatch.setattr(runner.subprocess, "Popen", lambda command, **kwargs: SimpleNamespace(pid=4321))
    monkeypatch.setattr(runner.os, "wait4", lambda pid, options: (pid, 0, SimpleNamespace(ru_maxrss=2048)))
    cfg, spec = TrainConfig(train_file="x.csv", text_cols=["a"]), PoolerSpec.parse("mean")
    for platform, expected in (("linux", 2048 * 1024), ("darwin", 2048)):
        monkeypatch.setattr(runner.sys, "platform", platform)
        (run_dir.parent / "seed_1.cost.json").unlink(missing_ok=True)
        assert runner._run_one(cfg, spec, 1, run_dir)["peak_rss_bytes"] == expected


def _peak_this_process(size: int) -> None:
    """Raise this process's resident high-water mark by ``size`` bytes (every page touched), then free them."""
    block = bytearray(size)
    block[::4096] = b"\1" * len(range(0, size, 4096))
    del block


def test_the_peak_memory_of_a_run_is_its_worker_s_own_not_its_caller_s(tmp_path, monkeypatch):
    """The peak came from os.wait4's ru_maxrss, which on Linux also counts the caller's peak before the worker's exec:
    a compare called by a process that had trained a model (benchmarks/quality.py) gave every run that memory. The
    worker now writes its own (VmHWM); here a real worker process, its training replaced by a finished result."""
    run_dir = tmp_path / "runs" / "mean" / "seed_1"
    Run.create(run_dir).write_metrics({"folds": [], "overall": {}, "complete": True})
    popen = subprocess.Popen
    stub = ("import sys, types; from attnpool.comparison import worker; worker.make_config = lambda p, resume: p; "
            "worker.train = lambda cfg: types.SimpleNamespace(complete=True); sys.exit(worker.main())")

    def untrained_worker(command, **kwargs):  # [python, -m, worker, REQUEST, ...]: the worker's main, as -c
        return popen([command[0], "-c", stub, *command[3:]], **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", untrained_worker)
    _peak_this_process(1536 * 2**20)
    cfg, spec = TrainConfig(train_file="x.csv", text_cols=["a"]), PoolerSpec.parse("mean")
    peak = runner._run_one(cfg, spec, 1, run_dir)["peak_rss_bytes"]
    assert 0 < peak < 2**30  # ~0.5 GiB (Python, torch, attnpool); 2 GiB before (the caller's)


def test_a_worker_reads_its_request_in_an_output_dir_named_like_an_option(tmp_path, monkeypatch):
    """--output-dir=-cmp: the worker's parser took the relative request path -cmp/runs/... for an option and every
    run failed as bad input ("argument --peak-file: expected one argument")."""
    from attnpool.comparison import worker

    monkeypatch.chdir(tmp_path)
    run_dir = Path("-cmp") / "runs" / "mean" / "seed_1"
    Run.create(run_dir).write_metrics({"folds": [], "overall": {}, "complete": True})
    popen = subprocess.Popen
    stub = ("import sys, types; from attnpool.comparison import worker; worker.make_config = lambda p, resume: p; "
            "worker.train = lambda cfg: types.SimpleNamespace(complete=True); sys.exit(worker.main())")
    seen = []

    def untrained_worker(command, **kwargs):  # [python, -m, worker, REQUEST, ...]: the worker's main, as -c
        seen.append(worker.parse_args(command[3:]))
        return popen([command[0], "-c", stub, *command[3:]], **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", untrained_worker)
    cfg, spec = TrainConfig(train_file="x.csv", text_cols=["a"]), PoolerSpec.parse("mean")
    assert runner._run_one(cfg, spec, 1, run_dir)["peak_rss_bytes"] > 0
    assert Path(seen[0].request) == (tmp_path / "-cmp" / "runs" / "mean" / "seed_1.yaml").absolute()
