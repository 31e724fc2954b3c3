"""benchmarks/quality.py on a tiny random encoder and generated data: the table, the paired tests, the targets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import quality  # noqa: E402
from attnpool.comparison import run_predictions  # noqa: E402
from attnpool.config import TrainConfig  # noqa: E402
from model_helpers import save_tiny_encoder, write_toy_csv  # noqa: E402


def test_sentence_files_become_csv(tmp_path):
    source = tmp_path / "toy.all"
    source.write_text("1 a fine phone .\n0 it broke\n\n1 x\n", encoding="latin-1")
    target = quality.sentences_to_csv(source, tmp_path / "toy.csv")
    lines = target.read_text().splitlines()
    assert lines == ["id,text,label", "toy00001,a fine phone .,1", "toy00002,it broke,0", "toy00004,x,1"]


@pytest.fixture
def no_script_logging(monkeypatch):
    """main() sets up a script's logging (the root logger's handler): not this test process's."""
    monkeypatch.setattr(quality.logging, "basicConfig", lambda **kwargs: None)


def _cr(root: Path) -> Path:
    (root / "cr").mkdir(parents=True)
    (root / "cr" / "custrev.all").write_text("1 a fine phone .\n0 it broke\n", encoding="latin-1")
    return root


def test_missing_data_is_skipped_cleanly(tmp_path, capsys, monkeypatch, no_script_logging):
    """Under the default --data-root: skipped, exit 0 (CI has no data), and a set that is there still runs."""
    monkeypatch.setattr(quality, "DEFAULT_DATA_ROOT", tmp_path / "none")
    assert quality.main(["--docs", "-", "--output-dir", str(tmp_path / "q")]) == 0
    assert f"skipped: no data for pppm, cr, mpqa under {tmp_path / 'none'}" in capsys.readouterr().out
    assert not (tmp_path / "q").exists()
    measured = []
    monkeypatch.setattr(quality, "DEFAULT_DATA_ROOT", _cr(tmp_path / "data"))
    monkeypatch.setattr(quality, "evaluate_set", lambda spec, *args: measured.append(spec.name) or {"set": spec.name})
    monkeypatch.setattr(quality, "markdown", lambda summary: "table")
    assert quality.main(["--sets", "cr", "mpqa", "--no-references", "--docs", "-",
                         "--output-dir", str(tmp_path / "q")]) == 0
    assert "skipped: no data for mpqa under" in capsys.readouterr().out and measured == ["cr"]


def test_a_data_root_given_without_a_sets_data_is_an_error(tmp_path, capsys, monkeypatch, no_script_logging):
    """A --data-root given without the data of a set asked for (a mistyped path) printed "skipped" and exited 0,
    having measured nothing (or only the sets it found): now a usage error naming the root and the missing file."""
    monkeypatch.setattr(quality, "evaluate_set", lambda *args: pytest.fail("nothing may train"))
    data = _cr(tmp_path / "data")
    for flags, says in (([], f"--data-root {tmp_path / 'typo'}: no pppm/train.csv, cr/custrev.all, mpqa/mpqa.all "
                             "there"),
                        (["--sets", "cr", "mpqa"], f"--data-root {data}: no mpqa/mpqa.all there")):
        root = tmp_path / "typo" if not flags else data
        with pytest.raises(SystemExit) as exit_:
            quality.main(["--data-root", str(root), *flags, "--docs", "-", "--output-dir", str(tmp_path / "q")])
        captured = capsys.readouterr()
        assert exit_.value.code == 2 and says in captured.err and "skipped" not in captured.out
    assert not (tmp_path / "q").exists()
    measured = []  # without --sets, a root holding some of the sets measures them (it was refused for the others)
    monkeypatch.setattr(quality, "evaluate_set", lambda spec, *args: measured.append(spec.name) or {"set": spec.name})
    monkeypatch.setattr(quality, "markdown", lambda summary: "table")
    assert quality.main(["--data-root", str(data), "--no-references", "--docs", "-",
                         "--output-dir", str(tmp_path / "q")]) == 0
    assert "skipped: no data for pppm, mpqa under" in capsys.readouterr().out and measured == ["cr"]


@pytest.mark.parametrize("flags, split_seed, says", [
    ([], 42, "one split for every seed (split seed 42)"),
    (["--split-seed", "7"], 7, "one split for every seed (split seed 7)"),
    (["--per-seed-split"], None, "a split drawn per seed"),
])
def test_the_split_is_fixed_across_seeds_unless_asked_per_seed(tmp_path, flags, split_seed, says):
    args = quality.parse_args(["--rows", "mpqa=500", *flags])
    spec = quality.data_sets(args.pppm_rows)["mpqa"]
    (tmp_path / "mpqa").mkdir()
    (tmp_path / "mpqa" / "mpqa.all").write_text("1 good\n0 bad\n", encoding="latin-1")
    cfg = quality.recipe(spec, tmp_path, tmp_path, args)
    assert (cfg.split_seed, cfg.limit, cfg.seed) == (split_seed, 500, 42)
    assert spec.description.endswith(f"500 random rows, {says}")


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality")
    encoder = save_tiny_encoder(root / "encoder")
    write_toy_csv(root / "train.csv", n=40, seed=0, task="binary")
    spec = quality.DataSet("toy", "toy pairs", {}, "train.csv", references=[])
    cfg = TrainConfig(train_file=str(root / "train.csv"), text_cols=["first", "second"], task="binary", folds=2,
                      only_folds=[0], epochs=1, batch_size=8, max_length=16, model=encoder, lr=1e-3)
    return quality.evaluate_set(spec, cfg, root / "out", [1, 2], references=False, bootstrap=50), root / "out"


def test_the_summary_pairs_attention_with_each_baseline(summary):
    result, out = summary
    assert list(result["per_seed"]) == ["mean", "cls", "attention"]
    for name in quality.POOLERS:  # per-seed scores recomputed from each run's out-of-fold predictions
        for seed, value in zip(result["seeds"], result["per_seed"][name], strict=True):
            _, target, scores = run_predictions(out / "runs" / name / f"seed_{seed}", "binary")
            assert value == pytest.approx(float(np.mean(scores.argmax(axis=1) == target)))
    for b in quality.BASELINES:
        v = result["versus"][b]
        assert v["diff"] == pytest.approx(np.mean(result["per_seed"]["attention"]) - np.mean(result["per_seed"][b]))
        assert v["p_bootstrap"] <= v["p_bootstrap_holm"] <= 1
        assert 0.5 <= v["p_signflip"] <= v["p_signflip_holm"] <= 1  # 2 seeds: the exact test's floor is 0.5
        if np.isnan(v["p_ttest"]):  # equal differences on both seeds: no t-test (it would say p = 0)
            assert np.ptp(np.subtract(result["per_seed"]["attention"], result["per_seed"][b])) < 1e-9
        else:
            assert v["p_ttest"] <= v["p_ttest_holm"] <= 1
    assert result["entropy"]["mean"] == pytest.approx(1.0) and 0 < result["entropy"]["attention"] <= 1


def test_the_table_and_the_targets(summary):
    result, _ = summary
    table = quality.markdown(result)
    assert "| **attention** |" in table and "| mean |" in table and "| cls |" in table and "(Holm)" in table
    checks = quality.check_targets(result)
    assert set(checks) == {"not behind mean/cls (by more than their seed std)", "std <= 1.5x mean's",
                           "significantly ahead of both"}
    assert "| p (t over seeds) | p (exact over seeds) | p (bootstrap) |" in table
    behind = {**result, "mean": {**result["mean"], "attention": -1.0}}
    assert not quality.check_targets(behind)["not behind mean/cls (by more than their seed std)"]
    assert ("PASS" in table) or ("FAIL" in table)


def test_the_docs_keep_their_hand_written_section(summary, tmp_path):
    summary, _ = summary
    docs = tmp_path / "quality.md"
    quality.write_docs(docs, [summary], "--seeds 2")
    first = docs.read_text(encoding="utf-8")
    assert first.startswith("# Pooling quality on real data") and "--seeds 2" in first
    hand = f"{quality.HAND_SECTION}; not written by the script)\n\nA probe.\n"
    docs.write_text(first.replace("--seeds 2", "--seeds 1") + "\n" + hand, encoding="utf-8")
    quality.write_docs(docs, [summary], "--seeds 3")
    text = docs.read_text(encoding="utf-8")
    assert "--seeds 3" in text and "--seeds 1" not in text  # the tables are rewritten
    assert text.endswith(hand) and text.count(quality.HAND_SECTION) == 1  # the hand-written section is kept, once
    assert list(tmp_path.iterdir()) == [docs]  # no temporary file left beside it


def test_a_call_on_some_sets_keeps_the_other_sets_tables_and_the_notes_above_them(summary, tmp_path):
    """`quality.py --sets cr` rewrote the file with the CR table alone: PPPM's, MPQA's and the notes were lost."""
    summary, _ = summary
    other = {**summary, "description": "CR review sentiment, binary, fold 0 of 5"}
    docs = tmp_path / "quality.md"
    quality.write_docs(docs, [summary, other], "--sets pppm cr")
    notes = "**A note written by hand above the tables.**\n"
    text = docs.read_text(encoding="utf-8")
    docs.write_text(text.replace("\n### ", f"\n{notes}\n### ", 1), encoding="utf-8")
    quality.write_docs(docs, [other], "--sets cr --seeds 5")
    text = docs.read_text(encoding="utf-8")
    assert text.count(f"### {summary['description']}") == 1 and "`.venv/bin/python benchmarks/quality.py --sets " \
        "pppm cr`" in text  # the other set's table and its command, kept
    assert text.count("### CR review sentiment") == 1 and "--sets cr --seeds 5" in text and notes in text
    assert text.index(summary["description"]) < text.index("### CR review sentiment")  # in its place


def test_references_on_fewer_seeds_are_compared_on_theirs(summary, monkeypatch, tmp_path):
    result, out = summary
    cfg = TrainConfig.from_dict(__import__("yaml").safe_load((out / "compare_config.yaml").read_text()))
    calls = []

    def fake_reference(name, cfg, run_dir, seed, cache):  # the attention run's own scores, one point worse
        calls.append(seed)
        _, target, scores = run_predictions(run_dir, "binary")
        return np.where(np.arange(len(target))[:, None] == 0, scores[:, ::-1], scores)

    monkeypatch.setattr(quality, "reference_scores", fake_reference)
    spec = quality.DataSet("toy", "toy pairs", {}, "train.csv", references=["notebook"])
    two = quality.evaluate_set(spec, cfg, out, [1, 2], references=True, bootstrap=50, reference_seeds=1)
    assert calls == [1] and two["reference_seeds"] == [1] and len(two["per_seed"]["notebook"]) == 1
    v = two["versus"]["notebook"]
    assert v["seeds"] == [1]
    assert v["diff"] == pytest.approx(two["per_seed"]["attention"][0] - two["per_seed"]["notebook"][0])
    assert quality.check_targets(two)[">= notebook"] == (v["diff"] >= 0)
    assert "(seeds 1; Δ on those)" in quality.markdown(two)


def test_a_reference_whose_extra_is_missing_is_left_out_before_training(monkeypatch, capsys):
    """Without sentence-transformers the PPPM CrossEncoder failed with ModuleNotFoundError after the others trained."""
    real = quality.importlib.util.find_spec
    monkeypatch.setattr(quality.importlib.util, "find_spec",
                        lambda name, *a: None if name == "sentence_transformers" else real(name, *a))
    spec = quality.data_sets(100)["pppm"]
    assert quality.available_references(spec) == ["notebook"]
    assert "the cross-encoder reference is skipped: sentence_transformers not installed" in capsys.readouterr().out
    monkeypatch.undo()
    assert quality.available_references(spec) == ["notebook", "cross-encoder"]  # installed here (the test extra)


def test_quality_json_keeps_the_other_sets_and_is_written_whole(tmp_path, monkeypatch):
    """quality.json was rewritten with this call's sets alone: a --sets cr call dropped PPPM's and MPQA's."""
    path = tmp_path / "quality.json"
    quality.write_results(path, [{"set": "pppm", "mean": 1}, {"set": "cr", "mean": 2}, {"set": "mpqa", "mean": 3}])
    quality.write_results(path, [{"set": "cr", "mean": 20}])
    assert json.loads(path.read_text()) == [{"set": "pppm", "mean": 1}, {"set": "cr", "mean": 20},
                                            {"set": "mpqa", "mean": 3}]
    quality.write_results(path, [])  # nothing measured: nothing written
    assert json.loads(path.read_text())[1] == {"set": "cr", "mean": 20}
    _interrupted_write_keeps_the_old_file(monkeypatch, path, lambda: quality.write_results(path, [{"set": "cr"}]))


def _interrupted_write_keeps_the_old_file(monkeypatch, path, write):
    """``write`` killed half-way through writing ``path``'s text: the earlier file stays whole, nothing else is left."""
    from pathlib import Path

    before, real = path.read_text(), Path.write_text

    def half_then_fail(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write()
    monkeypatch.undo()
    assert path.read_text() == before and list(path.parent.iterdir()) == [path]


def test_one_seed_gives_no_verdict_on_the_targets_judged_on_a_seed_std():
    """With one seed every std is NaN: `x >= best - NaN` is False, and a clear +0.14 lead read FAIL."""
    nan = float("nan")
    versus = {b: {"diff": 0.95 - v, "p_ttest": nan, "p_signflip": nan, "p_bootstrap": 0.002, "boot_low": 0.1,
                  "boot_high": 0.2, "seeds": [42], "p_ttest_holm": nan, "p_signflip_holm": nan,
                  "p_bootstrap_holm": 0.004} for b, v in (("mean", 0.80), ("cls", 0.81))}
    versus["cross-encoder"] = {**versus["mean"], "diff": 0.01}
    one = {"set": "cr", "description": "CR", "metric": "accuracy", "seeds": [42], "reference_seeds": [42],
           "per_seed": {"mean": [0.80], "cls": [0.81], "attention": [0.95], "cross-encoder": [0.94]},
           "mean": {"mean": 0.80, "cls": 0.81, "attention": 0.95, "cross-encoder": 0.94},
           "std": {"mean": nan, "cls": nan, "attention": nan, "cross-encoder": nan}, "versus": versus,
           "entropy": {"mean": 1.0, "cls": 0.0, "attention": 0.5}, "epochs": 2, "model": "m"}
    checks = quality.check_targets(one)
    assert checks["not behind mean/cls (by more than their seed std)"] is None
    assert checks["std <= 1.5x mean's"] is None
    assert checks["level with cross-encoder (within its seed std)"] is None
    assert checks["significantly ahead of both"] is False  # the t-test and the exact test are n/a: not shown ahead
    table = quality.markdown(one)
    assert "not behind mean/cls (by more than their seed std): n/a" in table and "std <= 1.5x mean's: n/a" in table
    two = {**one, "std": {"mean": 0.01, "cls": 0.01, "attention": 0.01, "cross-encoder": 0.01}}
    assert quality.check_targets(two)["not behind mean/cls (by more than their seed std)"] is True
    behind = {**two, "mean": {**two["mean"], "attention": 0.5}}
    assert quality.check_targets(behind)["not behind mean/cls (by more than their seed std)"] is False
