"""benchmarks/pppm_quality.py and pppm_deberta.py without training: the rows' configs, the table, the dry run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_deberta  # noqa: E402
import pppm_quality as pq  # noqa: E402
from attnpool.config import TrainConfig  # noqa: E402


def test_every_row_builds_a_valid_config(tmp_path):
    base = pq.baseline_options(tmp_path, "some/model", epochs=3)
    rows = pq.row_options()
    assert list(rows)[0] == pq.BASELINE and list(rows)[-1] == pq.COMBO
    assert set(rows) == {pq.BASELINE, pq.COMBO, *pq.TECHNIQUES}
    for name, options in rows.items():
        cfg = pq.row_config(base, options, seed=7, output_dir=tmp_path / name)
        assert isinstance(cfg, TrainConfig)
        assert (cfg.preset, cfg.folds, cfg.only_folds, cfg.epochs, cfg.seed) == ("pppm", 4, [0], 3, 7)
        assert cfg.pooling_options == {"attn_size": 128}  # merged, not replaced, by a row's options
        for key, value in options.items():  # each row sets what it says, over the baseline
            assert getattr(cfg, key) == value, (name, key)
    assert pq.row_config(base, rows[pq.COMBO], 1, tmp_path).loss == "pearson"


def test_combinations_are_checked():
    assert pq.parse_combo("context+pearson+context") == ["context", "pearson"]
    assert pq.combine(["pearson", "ema"]) == {"loss": "pearson", "ema_decay": 0.999}
    with pytest.raises(ValueError, match="fgm and awp both set adversarial"):
        pq.combine(["fgm", "awp"])
    with pytest.raises(ValueError, match="unknown technique.*nope"):
        pq.parse_combo("pearson+nope")


def test_ema_decay_replaces_the_rows_decay_and_leaves_the_technique_alone():
    rows = pq.row_options("ema+pearson", ema_decay=0.98)
    assert rows["ema"]["ema_decay"] == 0.98 and rows[pq.COMBO] == {"ema_decay": 0.98, "loss": "pearson"}
    assert pq.TECHNIQUES["ema"].options["ema_decay"] == 0.999  # the shared definition is not mutated
    assert "ema_decay" not in pq.row_options("msd+pearson", ema_decay=0.98)[pq.COMBO]
    assert pq.parse_args(["--ema-decay", "0.97"]).options["ema"]["ema_decay"] == 0.97
    with pytest.raises(SystemExit):
        pq.parse_args(["--ema-decay", "1.5"])


def test_own_rows_join_techniques_and_options(tmp_path):
    assert pq.parse_row(["lr1e4", "lr=1e-4"]) == ("lr1e4", {"lr": 1e-4})
    name, options = pq.parse_row(["best", "msd", "pearson", "lr=2e-4", 'pooling_options={"init": "xavier"}'])
    assert name == "best"
    assert options == {"multi_sample_dropout": 5, "loss": "pearson", "lr": 2e-4, "pooling_options": {"init": "xavier"}}
    rows = pq.parse_args(["--row", "a", "lr=1e-4", "--row", "b", "msd", "--only", "a", "b"]).options
    assert list(rows)[-2:] == ["a", "b"] and rows["b"] == {"multi_sample_dropout": 5}
    cfg = pq.row_config(pq.baseline_options(tmp_path, "m", epochs=1), options, seed=1, output_dir=tmp_path)
    assert (cfg.lr, cfg.loss, cfg.pooling_options) == (2e-4, "pearson", {"attn_size": 128, "init": "xavier"})
    for pooling, options in (("mean", {}), ("gem", {"p": 2.0})):  # another pooler: the baseline's options left
        cfg = pq.row_config(pq.baseline_options(tmp_path, "m", epochs=1), {"pooling": pooling, "pooling_options":
                                                                           options}, seed=1, output_dir=tmp_path)
        assert (cfg.pooling, cfg.pooling_options) == (pooling, options)
    with pytest.raises(SystemExit, match="mean-attn: pooling with pooling_options attn_size=64: pooler 'mean'"):
        pq.check_rows(pq.baseline_options(tmp_path, "m", epochs=1),
                      {"mean-attn": {"pooling": "mean", "pooling_options": {"attn_size": 64}}})
    with pytest.raises(ValueError, match="give a name and at least one"):
        pq.parse_row(["lonely"])
    with pytest.raises(ValueError, match="must not be a technique's or a built-in row's name"):
        pq.parse_row(["msd", "lr=1e-4"])
    with pytest.raises(ValueError, match="unknown technique.*nope"):
        pq.parse_row(["x", "nope"])
    with pytest.raises(ValueError, match="two rows of that name"):
        pq.row_options(extra=[["x", "lr=1e-4"], ["x", "msd"]])
    with pytest.raises(ValueError, match="'=1' of --row x is not key=value"):
        pq.parse_row(["x", "=1"])
    with pytest.raises(SystemExit):  # argparse's error, with the message above
        pq.parse_args(["--row", "x"])


def test_check_rows_names_the_broken_row(tmp_path):
    base = pq.baseline_options(tmp_path, "m", epochs=1)
    with pytest.raises(SystemExit, match="bad: .*no_such_option"):
        pq.check_rows(base, {"fine": {}, "bad": {"no_such_option": 1}})


def _records():
    # baseline, two techniques (one only on the first seed) and the notebook, 2 seeds
    values = {"baseline": [0.70, 0.72], "pearson": [0.74, 0.73], "ema": [0.71], "notebook": [0.69, 0.68]}
    return [{"row": row, "seed": 42 + i, "pearson": v, "train_seconds": 100.0 + 10 * i, "status": "trained"}
            for row, vs in values.items() for i, v in enumerate(vs)]


def test_the_summary_pairs_each_row_with_the_baseline_per_seed():
    summary = pq.summarise(_records(), [*pq.row_options(), pq.NOTEBOOK])
    rows = {r["name"]: r for r in summary["rows"]}
    assert [r["name"] for r in summary["rows"]] == ["baseline", "pearson", "ema", "notebook"]
    assert rows["pearson"]["pearson"] == pytest.approx(0.735)
    assert rows["pearson"]["delta_per_seed"] == pytest.approx({42: 0.04, 43: 0.01})
    assert rows["pearson"]["delta"] == pytest.approx(0.025)
    assert rows["ema"]["delta"] == pytest.approx(0.01)  # paired on the one seed it has
    assert rows["baseline"]["delta"] is None and rows["baseline"]["seconds"] == pytest.approx(105.0)
    assert summary["best"] == "pearson" and summary["seeds"] == [42, 43]  # the notebook is never "best"
    targets = pq.check_targets(summary, epochs=3, full_data=True)
    assert list(targets.values()) == [False, True]  # 0.735 < 0.78; pearson - notebook = +0.05 >= 0.03
    assert list(pq.check_targets(summary, epochs=3, full_data=False).values())[0] is None


def test_the_best_row_is_chosen_on_the_seeds_the_rows_share():
    """pearson 0.80 / 0.70 (mean 0.75) against ema's 0.76 on seed 42 alone: ema was 'best', on its one seed."""
    records = [{"row": row, "seed": 42 + i, "pearson": v, "train_seconds": 1.0, "status": "trained"}
               for row, vs in {"baseline": [0.75, 0.75], "pearson": [0.80, 0.70], "ema": [0.76]}.items()
               for i, v in enumerate(vs)]
    summary = pq.summarise(records, ["baseline", "pearson", "ema"])
    assert summary["best"] == "pearson"  # 0.80 against 0.76 on seed 42, the seed all three have
    meta = {"command": "x", "model": "m", "epochs": 3, "combo": pq.DEFAULT_COMBO, "rows": "every row",
            "machine": "2 CPUs", "date": "today", "bootstrap": 10}
    text = pq.markdown(summary, meta, pq.row_options(), {}, pq.check_targets(summary, 3, True))
    ema = next(line for line in text.splitlines() if line.startswith("| ema"))
    assert "+0.0100 (seed 42)" in ema  # its difference is one seed's


def test_the_table_marks_the_best_row_and_says_when_one_seed(tmp_path):
    meta = {"command": "python benchmarks/pppm_quality.py", "model": "m", "epochs": 3, "combo": pq.DEFAULT_COMBO,
            "rows": "every row", "machine": "2 CPUs", "date": "today", "bootstrap": 10}
    summary = pq.summarise(_records(), [*pq.row_options(), pq.NOTEBOOK])
    tests = {"baseline": {"diff": 0.025, "low": 0.001, "high": 0.05, "p": 0.04, "seeds": 2}}
    text = pq.markdown(summary, meta, pq.row_options(), tests, pq.check_targets(summary, 3, True))
    lines = text.splitlines()
    assert "2 seeds" in lines[0] and "1 seed only" not in text
    best = next(line for line in lines if line.startswith("| **pearson**"))
    assert "**0.7350** (best)" in best and "+0.0250 (+0.0400 / +0.0100)" in best and "loss=pearson" in best
    assert sum("(best)" in line for line in lines) == 1
    assert any(line.startswith("| baseline | - | 0.7100 | 0.7000 / 0.7200 | - | 105 |") for line in lines)
    assert "| baseline | +0.0250 | [+0.0010, +0.0500] | 0.040 | 2 |" in text
    assert "FAIL" in text and "PASS" in text
    one = pq.summarise([r for r in _records() if r["seed"] == 42], [*pq.row_options(), pq.NOTEBOOK])
    assert "1 seed only" in pq.markdown(one, meta, pq.row_options()).splitlines()[0]


def test_significance_pairs_the_validation_rows(tmp_path):
    rng = np.random.default_rng(0)
    rows, target = np.arange(60), rng.random(60)
    records = []
    for name, noise in (("baseline", 1.0), ("pearson", 0.05)):
        for seed in (1, 2):
            path = tmp_path / f"{name}_{seed}.npz"
            order = rng.permutation(60)  # the cache holds rows in any order; they are sorted on reading
            np.savez(path, rows=rows[order], target=target[order], scores=(target + noise * rng.random(60))[order])
            records.append({"row": name, "seed": seed, "run_dir": str(path)})
    out = pq.significance(records, "pearson", ["baseline", "pearson", "absent"], bootstrap=200)
    assert set(out) == {"baseline"}  # not against itself, nor a row without results
    test = out["baseline"]
    assert test["seeds"] == 2 and test["low"] <= test["diff"] <= test["high"]
    pearson = pq.metric_function("regression", "pearson")
    expected = np.mean([pearson(*pq.predictions(records[i + 2])[1:]) - pearson(*pq.predictions(records[i])[1:])
                        for i in (0, 1)])
    assert test["diff"] == pytest.approx(expected) and test["diff"] > 0 and test["p"] < 0.05
    assert test["by"] == "row"
    # resampled as whole anchors (5 of 12 rows; the widening is tested on paired_bootstrap itself)
    anchors = np.repeat([f"a{i}" for i in range(5)], 12)
    grouped = pq.significance(records, "pearson", ["baseline"], bootstrap=200, anchors=anchors)["baseline"]
    assert grouped["by"] == "anchor" and grouped["diff"] == pytest.approx(test["diff"])
    assert (grouped["low"], grouped["high"]) != (test["low"], test["high"])
    meta = {"command": "c", "model": "m", "epochs": 3, "combo": pq.DEFAULT_COMBO, "rows": "every row",
            "machine": "2 CPUs", "date": "today", "bootstrap": 200}
    summary = pq.summarise(_records(), [*pq.row_options(), pq.NOTEBOOK])
    assert "over the validation anchors (whole anchors resampled)" in pq.markdown(
        summary, meta, pq.row_options(), {"baseline": grouped})
    assert "over the validation rows (200" in pq.markdown(summary, meta, pq.row_options(), {"baseline": test})


def test_versus_names_the_rows_the_best_is_tested_against_even_on_one_seed(tmp_path):
    assert pq.versus_rows(None, 1) == [] and pq.versus_rows(None, 2) == ["baseline", "notebook"]
    assert pq.versus_rows(["ema"], 1) == ["ema"]
    assert pq.parse_args(["--versus", "ema", "baseline"]).versus == ["ema", "baseline"]
    with pytest.raises(SystemExit):
        pq.parse_args(["--versus", "nope"])
    meta = {"command": "c", "model": "m", "epochs": 3, "combo": pq.DEFAULT_COMBO, "rows": "every row",
            "machine": "2 CPUs", "date": "today", "bootstrap": 10}
    one = pq.summarise([r for r in _records() if r["seed"] == 42], [*pq.row_options(), pq.NOTEBOOK])
    tests = {"ema": {"diff": 0.01, "low": -0.002, "high": 0.02, "p": 0.1, "seeds": 1}}
    text = pq.markdown(one, meta, pq.row_options(), tests)
    assert "(1 seed only: no seed-to-seed spread)" in text.splitlines()[0]
    assert "| ema | +0.0100 | [-0.0020, +0.0200] | 0.100 | 1 |" in text


def test_an_ensemble_averages_standardised_predictions_of_the_same_rows(tmp_path):
    rng = np.random.default_rng(1)
    rows, target = np.arange(80), rng.random(80)
    a = target + 0.3 * rng.standard_normal(80)
    b = 100.0 * (target + 0.3 * rng.standard_normal(80)) + 7.0  # another scale: a plain mean would follow b alone
    records = []
    for name, scores in (("best", a), ("context_best", b)):
        path = tmp_path / f"{name}.npz"
        order = rng.permutation(80)
        np.savez(path, rows=rows[order], target=target[order], scores=scores[order])
        records.append({"row": name, "seed": 42, "pearson": 0.0, "train_seconds": 10.0, "run_dir": str(path)})
    out = pq.run_ensemble("blend", ["best", "context_best"], 42, records, tmp_path / "blend")
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    pearson = pq.metric_function("regression", "pearson")
    assert out["pearson"] == pytest.approx(pearson(target, z(a) + z(b)))
    assert out["pearson"] > max(pearson(target, a), pearson(target, b))  # independent errors average out
    assert out["train_seconds"] == 20.0 and out["members"] == ["best", "context_best"]
    assert pq.predictions(out)[0].tolist() == rows.tolist()  # the cache reads back like a notebook row's
    assert pq.run_ensemble("blend", ["best", "context_best"], 43, records, tmp_path / "blend") is None  # no seed 43
    summary = pq.summarise([*records, out], ["best", "context_best", "blend"])
    assert summary["best"] != "blend"  # the targets speak of one model
    np.savez(tmp_path / "context_best.npz", rows=rows[:70], target=target[:70], scores=b[:70])
    with pytest.raises(SystemExit, match="validated on other rows than best"):
        pq.run_ensemble("blend", ["best", "context_best"], 42, records, tmp_path / "blend")


def test_ensemble_arguments_are_checked():
    known = ["baseline", "best", "notebook"]
    assert pq.parse_ensembles([["blend", "best", "notebook", "best"]], known) == {"blend": ["best", "notebook"]}
    for items, message in (([["best", "baseline", "notebook"]], "name is taken"),
                           ([["blend", "best", "best"]], "two different rows"),
                           ([["blend", "best", "nope"]], "unknown row.s. nope")):
        with pytest.raises(ValueError, match=message):
            pq.parse_ensembles(items, known)
    args = pq.parse_args(["--row", "best", "msd", "lr=1e-4", "--ensemble", "blend", "baseline", "best",
                          "--only", "blend", "notebook"])
    assert args.wanted == ["notebook", "baseline", "best"] and args.ensembles == {"blend": ["baseline", "best"]}


def test_the_plan_says_what_trains_and_which_rows_an_ensemble_adds(tmp_path, capsys):
    args = pq.parse_args(["--row", "best", "msd", "--row", "ctx", "context", "--ensemble", "blend", "best", "ctx",
                          "--only", "best", "blend", "notebook"])
    assert args.added == {"ctx": "a member of --ensemble blend"}  # asked only through the ensemble
    work = tmp_path / "work"
    started = pq.Run(work / "best" / "seed_42")  # a run with a run.json but no finished fold: resumed
    started.path.mkdir(parents=True)
    started.write_info({"task": "regression"})
    (work / "notebook").mkdir()
    np.savez(work / "notebook" / "seed_42.npz", rows=[0])  # predictions without their record: trained again
    npz, record = pq.notebook_files(work / "notebook", 43)  # both: read back
    np.savez(npz, rows=[0])
    record.write_text("{}")
    lines = pq.plan(args.wanted, [42, 43], work, args.added)
    assert lines == ["best, seed 42: resume", "notebook, seed 42: train",
                     "ctx, seed 42: train (a member of --ensemble blend, not in --only)",
                     "best, seed 43: train", "notebook, seed 43: read back",
                     "ctx, seed 43: train (a member of --ensemble blend, not in --only)"]


def test_deberta_dry_run_builds_the_best_combination(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pppm_deberta, "check_model", lambda model: "model: not checked here")
    (tmp_path / "train.csv").write_text("")  # a --data-dir given must hold train.csv (a dry run does not read it)
    assert pppm_deberta.main(["--dry-run", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "dry run: the config is valid" in out and "microsoft/deberta-v3-large" in out and "bf16" in out
    args = pppm_deberta.parse_args(["--data-dir", str(tmp_path)])
    cfg = pppm_deberta.deberta_config(args)
    combo = pq.combine(pq.parse_combo(pq.DEFAULT_COMBO))  # the ablation's combo row, plus context and FGM
    for key, value in combo.items():
        assert getattr(cfg, key) == value
    assert cfg.group_context == "target" and (cfg.adversarial, cfg.adversarial_start) == ("fgm", 1.0)
    assert cfg.adversarial_eps == 0.5  # the best CPU run's size (it trained the default 1.0)
    assert (cfg.folds, cfg.only_folds, cfg.precision, cfg.max_length) == (4, None, "bf16", 512)  # GPU: longer inputs
    assert not (tmp_path / "run").exists()  # nothing written
    json.dumps(cfg.to_dict())  # a plain config


def test_the_cv_standardises_each_folds_predictions():
    """A Pearson-loss fold model predicts on a scale of its own: pooled as predicted, the CV understated the folds."""
    import pandas as pd

    from attnpool.metrics import standardised_per_group

    rng = np.random.default_rng(0)
    target = rng.random(400)
    prediction = target + rng.normal(0, 0.2, 400)
    fold = np.arange(400) % 4
    shifted = np.where(fold == 1, 2 * prediction + 0.3, prediction)
    def fold_standardised_cv(oof):  # what pppm_deberta.py judges: train's pearson_folds_standardised
        z = standardised_per_group(oof["prediction"].to_numpy(), oof["fold"].to_numpy())
        return float(np.corrcoef(z, oof["target"])[0, 1])

    same = fold_standardised_cv(pd.DataFrame({"fold": fold, "prediction": prediction, "target": target}))
    moved = fold_standardised_cv(pd.DataFrame({"fold": fold, "prediction": shifted, "target": target}))
    assert moved == pytest.approx(same, abs=0.01) and np.corrcoef(shifted, target)[0, 1] < same - 0.05


def test_deberta_rescales_llrd_to_24_layers(tmp_path):
    cfg = pppm_deberta.deberta_config(pppm_deberta.parse_args(["--data-dir", str(tmp_path), "--combo", "llrd"]))
    llrd = pq.TECHNIQUES["llrd"].options["llrd"]
    assert cfg.llrd == pytest.approx(llrd ** (5 / 23))
    assert cfg.llrd ** 23 == pytest.approx(llrd ** 5)  # the same bottom-to-top ratio as on MiniLM


def test_a_run_trained_with_other_options_is_refused(tmp_path):
    base = pq.baseline_options(tmp_path, "m", epochs=1)
    checked = {**base, "loss": "pearson", "seed": 3}
    run = pq.Run(tmp_path / "run")
    run.path.mkdir()
    run.write_info({"task": "regression"})
    run.write_config(TrainConfig(**checked).to_dict())
    pq._check_saved_options(run, checked)  # the same options: accepted
    with pytest.raises(SystemExit, match=r"other options.*loss: run 'pearson', row 'mse'.*--work-dir"):
        pq._check_saved_options(run, {**checked, "loss": "mse"})
    mean = pq.row_config(base, {"pooling": "mean"}, seed=3, output_dir=tmp_path / "mean")
    other = pq.Run(tmp_path / "mean")  # a row of another pooler: read back with its own (empty) pooling_options
    other.path.mkdir()
    other.write_info({"task": "regression"})
    other.write_config(mean.to_dict())
    pq._check_saved_options(other, pq.checked_options(mean, base, {"pooling": "mean"}))
    assert pq.checked_options(mean, base, {"pooling": "mean"})["pooling_options"] == {}


def test_an_anchor_subset_keeps_whole_anchors_and_is_rebuilt_identically(tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    rows = [{"id": f"{a}{t}", "anchor": f"anchor {a}", "target": f"target {t}", "context": "A01",
             "score": "0.5"} for a in range(6) for t in range(a + 1)]
    (tmp_path / "pppm").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "pppm" / "train.csv", index=False)
    (tmp_path / "pppm" / "cpc_texts.csv").write_text("context,text\nA01,HUMAN NECESSITIES\n", encoding="utf-8")
    folder, count = pq.anchor_subset(tmp_path / "pppm", anchors=3, seed=0)
    subset = pd.read_csv(folder / "train.csv")
    assert subset["anchor"].nunique() == 3 and len(subset) == count
    sizes = subset.groupby("anchor").size()
    assert all(sizes[a] == int(a.split()[1]) + 1 for a in sizes.index), "every row of a chosen anchor"
    assert (folder / "cpc_texts.csv").read_text(encoding="utf-8").startswith("context,text")
    (folder / "train.csv").unlink()
    again, _ = pq.anchor_subset(tmp_path / "pppm", anchors=3, seed=0)
    assert again == folder and pd.read_csv(again / "train.csv").equals(subset)
    with pytest.raises(SystemExit, match="--anchors must be in 1..6"):
        pq.anchor_subset(tmp_path / "pppm", anchors=7, seed=0)


def _tiny_pppm(folder, anchors=5, extra=2):
    import pandas as pd

    rows = [{"id": f"{a}{t}", "anchor": f"anchor {a}", "target": f"target {t}", "context": "A01",
             "score": "0.5"} for a in range(anchors) for t in range(a + extra)]
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "train.csv", index=False)
    (folder / "cpc_texts.csv").write_text("context,text\nA01,HUMAN NECESSITIES\n", encoding="utf-8")
    return rows


def test_deberta_smoke_run_on_anchors_uses_whole_anchors_of_the_data(tmp_path, monkeypatch, capsys):
    import pandas as pd

    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(pppm_deberta, "check_model", lambda model: "model: not checked here")
    run = ["--dry-run", "--output-dir", str(tmp_path / "run"), "--anchors", "4", "--seed", "3"]
    monkeypatch.setattr(pppm_deberta, "DATA_CANDIDATES", (tmp_path / "none", tmp_path / "empty"))
    for flags in (run, run[1:], ["--output-dir", str(tmp_path / "run")]):  # no data: skipped, also when training
        assert pppm_deberta.main(flags) == 0
        assert "skipped: no PPPM train.csv in" in capsys.readouterr().out
        with pytest.raises(SystemExit) as exit_:  # unless --data-dir names a folder: a mistyped path is an error
            pppm_deberta.main([*flags, "--data-dir", str(tmp_path / "empty")])
        assert exit_.value.code == 2 and "no train.csv there" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    rows = _tiny_pppm(tmp_path / "pppm", anchors=6)
    assert pppm_deberta.main([*run, "--data-dir", str(tmp_path / "pppm")]) == 0
    cfg = pppm_deberta.deberta_config(pppm_deberta.parse_args([*run, "--data-dir", str(tmp_path / "pppm")]))
    folder, count = pq.anchor_subset(tmp_path / "pppm", anchors=4, seed=3)  # the same draw as the run's
    assert Path(cfg.data_dir) == folder and cfg.group_context == "target"
    subset = pd.read_csv(folder / "train.csv")
    assert subset["anchor"].nunique() == 4 and len(subset) == count < len(rows)
    assert "dry run: the config is valid" in capsys.readouterr().out


def test_the_docs_keep_other_runs_sections_and_replace_the_same_commands(tmp_path):
    old = (pq.DOCS_HEADER + "\n## CPU slice, 2 seeds\n\n- command: `pppm_quality.py --seeds 2`\n\n| a |\n\n"
           "Notes (added by hand): seed 42 ran under load.\n\n## Full data\n\n- command: `pppm_quality.py "
           "--epochs 3`\n\n| b |\n")
    again = "## CPU slice, 2 seeds\n\n- command: `pppm_quality.py --seeds 2`\n\n| new |\n"
    merged = pq.merge_docs(old, again)
    assert merged.count("## ") == 2 and "| new |" in merged and "| a |" not in merged
    assert "seed 42 ran under load" not in merged  # its notes described the replaced figures
    assert merged.index("| new |") < merged.index("## Full data") and "| b |" in merged
    other = pq.merge_docs(merged, "## One seed\n\n- command: `pppm_quality.py --seeds 1`\n\n| c |\n")
    assert other.startswith(pq.DOCS_HEADER) and other.index("| c |") < other.index("| new |") < other.index("| b |")
    assert pq.merge_docs("", again) == pq.DOCS_HEADER + "\n" + again


def test_views_arguments_add_the_row_they_read_and_refuse_a_bad_one():
    args = pq.parse_args(["--row", "cd", "context", "group_context_dropout=0.5", "--views", "cd_both", "cd",
                          "--only", "cd_both"])
    assert args.views == {"cd_both": "cd"} and args.wanted == ["cd"]
    assert args.added == {"cd": "the model of --views cd_both"}
    for views in (["baseline", "cd"], ["x", "nope"], ["x", "notebook"]):
        with pytest.raises(SystemExit):
            pq.parse_args(["--row", "cd", "context", "--views", *views])


def test_views_predict_the_validation_rows_with_and_without_their_context(tmp_path, caplog):
    """A tiny run with a group context: the views row is the mean of its two views, each what predict writes."""
    import logging

    import pandas as pd

    import attnpool
    from model_helpers import save_tiny_encoder

    rng = np.random.default_rng(0)
    words = ["red", "blue", "green", "tree", "house", "river", "stone", "cloud"]
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(40)], "anchor": rng.choice(words[:3], 40),
                          "target": [f"{a} {b}" for a, b in rng.choice(words, (40, 2))],
                          "label": rng.random(40).round(2)})
    frame.to_csv(tmp_path / "train.csv", index=False)
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), template="{anchor} [SEP] {target}",
                      group_context="target", group_context_by=["anchor"], group_context_dropout=0.5, folds=2,
                      only_folds=[0], epochs=1, batch_size=8, max_length=32, precision="fp32",
                      model=save_tiny_encoder(tmp_path / "encoder"), output_dir=str(tmp_path / "run"),
                      pooling_options={"attn_size": 8})
    attnpool.train(cfg)
    record = pq.run_row("cd", cfg, pq.checked_options(cfg, {}, {}))  # read back: fold 0 is done
    with caplog.at_level(logging.INFO, logger="attnpool.pppm_quality"):
        out = pq.run_views("cd_both", "cd", 42, [record], tmp_path / "views")
    rows, target, scores = pq.predictions(out)
    assert rows.tolist() == pq.predictions(record)[0].tolist() and out["views_of"] == "cd"
    valid = pd.read_csv(tmp_path / "views" / "seed_42_valid.csv")
    assert valid["id"].tolist() == frame["id"].to_numpy()[rows].tolist()  # the run's validation rows, in order
    both = attnpool.predict(tmp_path / "run", tmp_path / "views" / "seed_42_valid.csv", tmp_path / "both.csv",
                            context_view="both", progress=False, precision="fp32").output  # the run's precision
    np.testing.assert_allclose(scores, pd.read_csv(both)["prediction"], atol=1e-6)  # what predict's "both" writes
    with_context = pd.read_csv(tmp_path / "views" / "seed_42_with.csv")["prediction"].to_numpy()
    np.testing.assert_allclose(with_context, pq.predictions(record)[2], atol=1e-5)  # the run's out-of-fold scores
    assert out["pearson_with"] == pytest.approx(record["pearson"], abs=1e-3)
    assert "cd_both, seed 42: Pearson" in caplog.text
    summary = pq.summarise([record, out], ["cd", "cd_both"])
    assert "cd's model, predicted with --context-view both" in pq.markdown(
        summary, {"epochs": 1, "model": "tiny", "command": "c", "date": "d", "machine": "m", "rows": "r",
                  "combo": "x"}, {"cd": {}})


def test_the_bootstrap_by_rows_and_anchors_table_reads_kept_runs(tmp_path, capsys):
    import pppm_bootstrap_by as by

    rng = np.random.default_rng(3)
    target, anchors = rng.random(80), np.repeat([f"a{i}" for i in range(8)], 10)
    records = []
    for name, noise in (("good", 0.1), ("bad", 0.8)):
        path = tmp_path / f"{name}.npz"
        np.savez(path, rows=np.arange(80), target=target, scores=target + noise * rng.random(80))
        records.append({"row": name, "seed": 42, "run_dir": str(path)})
    text = by.table(records, [("good", "bad"), ("good", "absent")], anchors, bootstrap=100)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| good − bad | 1 | +")
    assert "good and absent: no seed with both runs kept; left out" in capsys.readouterr().err
    for row, seed in (("good", 42), ("good", 43), ("bad", 42)):
        (tmp_path / "runs" / row / f"seed_{seed}").mkdir(parents=True)
        (tmp_path / "runs" / row / f"seed_{seed}" / "oof.csv").write_text("row\n")
    (tmp_path / "runs" / "bad" / "seed_43").mkdir()  # no out-of-fold file: not finished
    kept = by.kept_records(tmp_path / "runs")
    assert [(r["row"], r["seed"]) for r in kept] == [("bad", 42), ("good", 42), ("good", 43)]


def test_the_anchors_come_from_the_runs_and_runs_on_other_data_are_refused(tmp_path):
    """Anchors were read by row number from --data-dir's train.csv: a --rows or --anchors run got wrong ones."""
    import pandas as pd

    import pppm_bootstrap_by as by
    from attnpool.runs import Run

    def kept(name, groups):
        run = Run.create(tmp_path / name / "seed_42")
        run.write_oof(pd.DataFrame({"row": range(len(groups)), "id": range(len(groups)), "target": 0.5,
                                    "prediction": 0.5, "fold": 0, "group": groups}))
        return {"row": name, "seed": 42, "run_dir": str(run.path)}

    a, b = kept("a", ["x", "x", "y"]), kept("b", ["x", "x", "y"])
    assert list(by.run_anchors([a, b])) == ["x", "x", "y"]
    pd.DataFrame({"anchor": ["x", "x", "y", "z"]}).to_csv(tmp_path / "train.csv", index=False)
    assert list(by.run_anchors([a, b], tmp_path)) == ["x", "x", "y"]
    pd.DataFrame({"anchor": ["x", "y", "y"]}).to_csv(tmp_path / "train.csv", index=False)
    with pytest.raises(SystemExit, match="are not those of .*train.csv"):
        by.run_anchors([a, b], tmp_path)
    with pytest.raises(SystemExit, match="row 1 has anchor 'w', another kept run's 'x'"):
        by.run_anchors([a, kept("c", ["x", "w", "y"])])


def _saved_as_train_saves(cfg, run_dir):
    """A run folder holding ``cfg`` as ``attnpool.train`` saves it: the preset resolved, the data paths absolute."""
    import copy

    from attnpool.data.task import apply_preset
    from attnpool.training.saved_paths import absolute_paths

    run = pq.Run.create(run_dir)
    run.write_info({"task": "regression"})
    run.write_config(absolute_paths(apply_preset(copy.deepcopy(cfg)).to_dict()))
    return run


def test_deberta_refuses_to_resume_a_run_started_with_other_options(tmp_path, monkeypatch, capsys):
    """A kept smoke run (--anchors 4 --epochs 2) went on under a full run's flags, and was judged against the target."""
    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(pppm_deberta, "check_model", lambda model: "model: not checked here")
    _tiny_pppm(tmp_path / "pppm")
    out = str(tmp_path / "run")
    smoke = ["--data-dir", str(tmp_path / "pppm"), "--output-dir", out, "--anchors", "4", "--epochs", "2"]
    saved = _saved_as_train_saves(pppm_deberta.deberta_config(pppm_deberta.parse_args([*smoke, "--only-folds", "0"])),
                                  tmp_path / "run")
    assert pppm_deberta.main([*smoke, "--only-folds", "1", "--dry-run"]) == 0  # the same run, other folds now
    assert "resuming" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"other options than these flags give \(data_dir: run '.*4anchors_seed42_"
                                         r".*', flags '.*pppm'; epochs: run 2\.0, flags 5\.0\).*--output-dir"):
        pppm_deberta.main(["--data-dir", str(tmp_path / "pppm"), "--output-dir", out, "--dry-run"])
    with pytest.raises(SystemExit, match=r"lr: run 2e-05, flags 0\.0001"):
        pppm_deberta.main([*smoke, "--lr", "1e-4", "--dry-run"])
    # the verdict follows the run's saved config, whatever the flags: a smoke run is never judged against the target
    line = pppm_deberta.verdict(saved.config(), complete=True, cv=0.9, done=[0, 1, 2, 3])
    assert line.startswith("smoke run on 4 anchors") and "PASS" not in line
    full = _saved_as_train_saves(pppm_deberta.deberta_config(pppm_deberta.parse_args(
        ["--data-dir", str(tmp_path / "pppm"), "--output-dir", str(tmp_path / "full")])), tmp_path / "full")
    assert "target >= 0.85 PASS" in pppm_deberta.verdict(full.config(), complete=True, cv=0.9, done=[0, 1, 2, 3])
    assert "folds done: [0]" in pppm_deberta.verdict(full.config(), complete=False, cv=0.9, done=[0])


def test_deberta_dry_run_checks_that_the_tokenizer_loads(tmp_path, monkeypatch, capsys):
    """microsoft/deberta-v3-large ships spm.model and no tokenizer.json: transformers needs sentencepiece for it."""
    from model_helpers import save_tiny_encoder

    dry = ["--dry-run", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "run")]
    (tmp_path / "train.csv").write_text("")  # a --data-dir given must hold train.csv (a dry run does not read it)
    monkeypatch.setattr(pppm_deberta, "_here", lambda model: False)  # the hub model not downloaded (as here)
    # as if the Hub could be reached: offline, the dry run now stops there, before the tokenizer (tested apart)
    monkeypatch.setattr("attnpool.model.encoders.check_encoder_reachable", lambda model: None)
    monkeypatch.setattr(pppm_deberta, "missing_modules", lambda names=(): ["sentencepiece"])
    with pytest.raises(SystemExit, match=r"its tokenizer needs sentencepiece.*pip install 'attnpool\[sentencepiece\]'"):
        pppm_deberta.main(dry)
    monkeypatch.setattr(pppm_deberta, "missing_modules", lambda names=(): [])
    assert pppm_deberta.main(dry) == 0
    assert "not loaded (the model is not here" in capsys.readouterr().out
    monkeypatch.undo()
    encoder = save_tiny_encoder(tmp_path / "encoder")  # a local folder: its tokenizer is loaded
    assert pppm_deberta.check_tokenizer(encoder).startswith(f"tokenizer of {encoder}: loads (")
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(SystemExit, match="the tokenizer of .*nowhere does not load"):
        pppm_deberta.check_tokenizer(str(tmp_path / "nowhere"))


@pytest.mark.skipif(__import__("importlib").util.find_spec("sentencepiece") is not None,
                    reason="sentencepiece is installed")
def test_a_sentencepiece_only_tokenizer_without_sentencepiece_names_the_extra(tmp_path):
    """DeBERTa-v3's files (spm.model, no tokenizer.json): without sentencepiece transformers cannot convert them."""
    folder = tmp_path / "deberta"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "deberta-v2"}')
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "DebertaV2Tokenizer"}')
    (folder / "spm.model").write_bytes(b"\0" * 64)
    with pytest.raises(SystemExit, match=r"does not load .*sentencepiece.* pip install 'attnpool\[sentencepiece\]'"):
        pppm_deberta.check_tokenizer(str(folder))


@pytest.mark.parametrize("flags", [[], ["--anchors", "10"]])
def test_pppm_quality_without_data_is_skipped(tmp_path, capsys, monkeypatch, flags):
    """Without the default data folder: skipped cleanly. A --data-dir given without train.csv (a mistyped path) is a
    usage error: it printed the same "skipped" and exited 0, having trained nothing."""
    monkeypatch.setattr(pq, "DEFAULT_DATA_DIR", tmp_path / "no_default")
    args = ["--work-dir", str(tmp_path / "work"), "--docs", "-", *flags]
    assert pq.main(args) == 0
    assert f"skipped: no PPPM train.csv in {tmp_path / 'no_default'}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        pq.main(["--data-dir", str(tmp_path / "none"), *args])
    assert exit_.value.code == 2 and f"--data-dir {tmp_path / 'none'}: no train.csv there" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


def test_the_work_folder_names_the_anchor_draw_and_other_data(tmp_path):
    """--first-seed draws the --anchors subset, and --data-dir is the data: both name the folder, so they never mix."""
    default = pq.work_tag(pq.parse_args(["--epochs", "3"]))
    assert default.endswith("_3ep_allrows")  # the default data: the folder of the runs kept so far
    a = pq.work_tag(pq.parse_args(["--anchors", "10", "--first-seed", "7"]))
    assert a.endswith("_10anchors_seed7") and a != pq.work_tag(pq.parse_args(["--anchors", "10"]))
    other = pq.work_tag(pq.parse_args(["--data-dir", str(tmp_path)]))
    assert other == default + f"_data{pq.path_hash(tmp_path)}"
    assert other != pq.work_tag(pq.parse_args(["--data-dir", str(tmp_path / "b")]))


def test_anchor_subsets_of_two_sources_never_share_a_folder(tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    _tiny_pppm(tmp_path / "a", anchors=4, extra=1)
    _tiny_pppm(tmp_path / "b", anchors=4, extra=3)  # the same anchors' names, more rows each
    a, rows_a = pq.anchor_subset(tmp_path / "a", anchors=2, seed=0)
    b, rows_b = pq.anchor_subset(tmp_path / "b", anchors=2, seed=0)
    assert a != b and rows_a < rows_b and len(pd.read_csv(b / "train.csv")) == rows_b
    assert pq.subset_of(a) == {"source": str((tmp_path / "a").resolve()), "anchors": 2, "seed": 0, "rows": rows_a}
    assert pq.subset_of(tmp_path / "a") is None  # the source is no subset
    _tiny_pppm(tmp_path / "c", anchors=4, extra=1)
    (tmp_path / "a" / "train.csv").write_text((tmp_path / "c" / "train.csv").read_text().replace("0.5", "0.25"))
    again, _ = pq.anchor_subset(tmp_path / "a", anchors=2, seed=0)  # the source changed: its subset is rewritten
    assert again == a and set(pd.read_csv(a / "train.csv")["score"]) == {0.25}


def test_the_notebook_cache_is_refused_for_other_data_or_options(tmp_path):
    """notebook/seed_S.npz was read back whatever data_dir or max_length it was trained with."""
    folder = tmp_path / "notebook"
    base = pq.baseline_options(tmp_path / "a", "m", epochs=1)
    cfg = pq.row_config(base, {"batch_size": pq.NOTEBOOK_BATCH_SIZE}, 42, folder / "unused")
    cache, record_file = pq.notebook_files(folder, 42)
    folder.mkdir()
    np.savez(cache, rows=[0], target=[0.5], scores=[0.5])
    record = {"row": pq.NOTEBOOK, "seed": 42, "pearson": 0.7, "run_dir": str(cache), "recipe": pq.notebook_recipe(cfg)}
    record_file.write_text(json.dumps(record))
    assert pq.run_notebook(base, 42, folder, tmp_path / "none")["status"] == "reused"  # the same: read back
    for other, changed in ((pq.baseline_options(tmp_path / "b", "m", epochs=1), "data_dir: cached '.*a', now '.*b'"),
                           ({**base, "max_length": 128}, "max_length: cached 96, now 128")):
        with pytest.raises(SystemExit, match=f"other data or options \\({changed}\\).*--work-dir"):
            pq.run_notebook(other, 42, folder, tmp_path / "none")
    record_file.write_text(json.dumps({k: v for k, v in record.items() if k != "recipe"}))  # written before the check
    with pytest.raises(SystemExit, match="does not say which data and options"):
        pq.run_notebook(base, 42, folder, tmp_path / "none")


def test_the_bootstrap_by_table_skips_cleanly_without_its_default_runs(tmp_path, capsys, monkeypatch):
    import pppm_bootstrap_by as by

    monkeypatch.setattr(by, "DEFAULT_RUNS", tmp_path / "no_runs")
    assert by.main(["--pair", "a", "b"]) == 0
    assert capsys.readouterr().out.startswith(f"skipped: no kept runs in {tmp_path / 'no_runs'}")
    for flag in ("--data-dir", "--runs"):  # given, and missing: an error (tests/test_pppm_bootstrap_by_benchmark.py)
        with pytest.raises(SystemExit):
            by.main([flag, str(tmp_path / "typo"), "--pair", "a", "b"])


def test_the_snr_sweeps_csv_is_written_whole_or_not_at_all(tmp_path):
    """A write that fails half-way (an interrupted sweep's rows) must leave the last complete file as it was."""
    import snr

    path = tmp_path / "snr.csv"
    snr.write_csv([{"pooler": "mean", "accuracy": 0.5}], path)
    before = path.read_text()
    with pytest.raises(ValueError, match="dict contains fields not in fieldnames"):
        snr.write_csv([{"pooler": "max", "accuracy": 0.6}, {"pooler": "gem", "extra": 1}], path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["snr.csv"]


@pytest.mark.parametrize("anchors", ["0", "1", "3"])
def test_pppm_quality_refuses_fewer_anchors_than_folds(anchors, capsys):
    """--anchors 0 was falsy: the rows trained on the full data; 1 to 3 anchors cannot make 4 grouped folds."""
    with pytest.raises(SystemExit) as exit_:
        pq.parse_args(["--anchors", anchors])
    assert exit_.value.code == 2 and f"--anchors {anchors}: fold 0 of 4 grouped by anchor needs 4 anchors" in \
        capsys.readouterr().err
    assert pq.parse_args(["--anchors", "4"]).anchors == 4


def test_the_tables_precision_is_the_runs_not_this_machines(tmp_path, monkeypatch, capsys):
    """The "attnpool rows: precision ..." label was resolved on the machine printing the table, whatever the runs
    read back had trained in (runs of a GPU or a bf16 CPU, tabled on a fp32 one)."""
    import attnpool

    trained_in = {42: "bf16", 43: "fp32"}

    def fake_train(cfg, resume=False):  # a finished fold 0, its run.json saying the precision it trained in
        run = pq.Run.create(cfg.output_dir)
        run.write_config(cfg.to_dict())
        run.write_info({"task": "regression", "precision": trained_in[cfg.seed]})
        run.fold_dir(0).mkdir(parents=True)
        (run.fold_dir(0) / "metrics.json").write_text(json.dumps({"pearson": 0.5, "train_seconds": 1.0}))

    monkeypatch.setattr(attnpool, "train", fake_train)
    _tiny_pppm(tmp_path / "pppm")
    args = ["--data-dir", str(tmp_path / "pppm"), "--work-dir", str(tmp_path / "work"), "--docs", "-", "--only",
            "baseline", "--model", "some/model", "--epochs", "1"]
    assert pq.main([*args, "--seeds", "2"]) == 0
    table = capsys.readouterr().out.split("## PPPM")[-1]
    assert "attnpool rows: precision bf16 (auto) for seed 42, fp32 (auto) for seed 43; the notebook: fp32" in table
    trained_in[44] = "bf16"
    assert pq.main([*args, "--seeds", "1", "--first-seed", "44"]) == 0  # one precision: said once
    assert "attnpool rows: precision bf16 (auto); the notebook" in capsys.readouterr().out.split("## PPPM")[-1]
    one_seed = [{"row": "a", "seed": 1, "precision": "bf16"}, {"row": "b", "seed": 1, "precision": "fp32"}]
    assert pq.precision_label(one_seed) == "bf16 for a, seed 1, fp32 for b, seed 1"  # the rows of a seed differ
