"""Bad input to `attnpool train` / `predict`: one clear error line (what, where, how to fix), exit 2, nothing lost."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from attnpool.cli import main
from model_helpers import save_tiny_encoder, write_toy_csv

FAST = ["--epochs", "1", "--batch-size", "8", "--max-length", "16", "--pooling-opt", "attn_size=8"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


def train_args(encoder, train_file, out, *extra):
    return ["train", "--train-file", str(train_file), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST, *extra]


def run_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "attnpool train: error:" in err or "attnpool predict: error:" in err
    return err


def test_missing_file(encoder, tmp_path, capsys):
    err = run_error(capsys, train_args(encoder, tmp_path / "nope.csv", tmp_path / "run"))
    assert "nope.csv: no such file" in err


def test_unknown_column_lists_the_columns_present(encoder, tmp_path, capsys):
    write_toy_csv(tmp_path / "train.csv")
    err = run_error(capsys, [*train_args(encoder, tmp_path / "train.csv", tmp_path / "run")[:-len(FAST)], *FAST,
                             "--label", "score"])
    assert "score" in err and "first" in err and "second" in err and "label" in err


def test_a_start_stopped_by_bad_data_can_be_started_again(encoder, tmp_path, capsys):
    """The stopped start left its log (and config), but no run: the same command, corrected, starts afresh."""
    write_toy_csv(tmp_path / "train.csv", n=12)
    argv = train_args(encoder, tmp_path / "train.csv", tmp_path / "run")
    run_error(capsys, [*argv, "--label", "scroe"])
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["train.log"]
    saved = {"label": "scroe", "overwrite": False, "resume": False, "only_folds": None}  # as a start saves it
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))  # stopped by its folds
    err = run_error(capsys, [*argv, "--resume"])
    assert "holds a run that stopped before it started (no run.json, e.g. bad data); start it again without " \
           "--resume" in err
    assert main(argv) == 0
    assert "label: label" in (tmp_path / "run" / "config.yaml").read_text()
    assert "already exists; pass --resume" in run_error(capsys, argv)  # a run that started is never restarted


def test_empty_file(encoder, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("")
    err = run_error(capsys, train_args(encoder, tmp_path / "train.csv", tmp_path / "run"))
    assert "the file is empty" in err


def test_nan_and_non_numeric_regression_labels_name_the_rows(encoder, tmp_path, capsys):
    frame = write_toy_csv(tmp_path / "train.csv", n=10)
    frame["label"] = frame["label"].astype(object)
    frame.loc[3, "label"] = "high"
    frame.loc[7, "label"] = None
    frame.to_csv(tmp_path / "train.csv", index=False)
    err = run_error(capsys, train_args(encoder, tmp_path / "train.csv", tmp_path / "run"))
    assert "label" in err and "4" in err and "8" in err  # 1-based data rows, as in the file


def test_too_few_rows_for_the_folds(encoder, tmp_path, capsys):
    write_toy_csv(tmp_path / "train.csv", n=3)
    err = run_error(capsys, [*train_args(encoder, tmp_path / "train.csv", tmp_path / "run"), "--folds", "5"])
    assert "5" in err and "3" in err


def test_too_few_groups_for_the_folds(encoder, tmp_path, capsys):
    frame = write_toy_csv(tmp_path / "train.csv", n=20)
    frame["group"] = ["a", "b"] * 10
    frame.to_csv(tmp_path / "train.csv", index=False)
    err = run_error(capsys, [*train_args(encoder, tmp_path / "train.csv", tmp_path / "run"), "--folds", "4",
                             "--group-col", "group"])
    assert "2 distinct groups" in err or "2 groups" in err


def test_non_utf8_bytes(encoder, tmp_path, capsys):
    write_toy_csv(tmp_path / "train.csv", n=6)
    raw = (tmp_path / "train.csv").read_bytes() + "0099,caf\xe9,tree,0.5\n".encode("latin-1")
    (tmp_path / "train.csv").write_bytes(raw)
    err = run_error(capsys, train_args(encoder, tmp_path / "train.csv", tmp_path / "run"))
    assert "UTF-8" in err


def test_nothing_is_written_when_the_input_is_bad(encoder, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("")
    run_error(capsys, train_args(encoder, tmp_path / "train.csv", tmp_path / "run"))
    assert not (tmp_path / "run" / "fold_0").exists()


def test_predict_refuses_unseen_labels_other_versions_and_corrupt_checkpoints(encoder, tmp_path, capsys):
    write_toy_csv(tmp_path / "train.csv", n=24, task="classification")
    run = tmp_path / "run"
    argv = ["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--label",
            "label", "--task", "binary", "--folds", "2", "--model", encoder, "--output-dir", str(run), *FAST]
    assert main(argv) == 0
    test = write_toy_csv(tmp_path / "test.csv", n=5, seed=3, task="classification")
    test.loc[2, "label"] = "maybe"
    test.to_csv(tmp_path / "test.csv", index=False)
    out = tmp_path / "pred.csv"
    err = run_error(capsys, ["predict", "--run", str(run), "--input", str(tmp_path / "test.csv"), "--output", str(out)])
    assert "labels the model never saw in training: maybe" in err and "neg, pos" in err
    assert not out.exists()

    test.drop(columns=["label"]).to_csv(tmp_path / "test.csv", index=False)
    assert main(["predict", "--run", str(run), "--input", str(tmp_path / "test.csv"), "--output", str(out)]) == 0
    pred = pd.read_csv(out)
    assert set(pred["prediction"]) <= {"neg", "pos"} and {"prob_neg", "prob_pos"} <= set(pred.columns)

    weights = run / "fold_1" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: a corrupt checkpoint
    err = run_error(capsys, ["predict", "--run", str(run), "--input", str(tmp_path / "test.csv"), "--output",
                             str(tmp_path / "p2.csv")])
    assert "fold_1/model" in err and "corrupt" in err

    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "format": 999, "attnpool_version": "9.9"}))
    err = run_error(capsys, ["predict", "--run", str(run), "--input", str(tmp_path / "test.csv"), "--output",
                             str(tmp_path / "p3.csv")])
    assert "written by attnpool 9.9 in run format 999" in err


def test_predict_on_a_folder_that_is_not_a_run(tmp_path, capsys):
    err = run_error(capsys, ["predict", "--run", str(tmp_path), "--input", "x.csv", "--output", "y.csv"])
    assert "is not an attnpool run directory" in err


def test_empty_and_overlong_texts_are_kept_and_counted_in_the_log(encoder, tmp_path):
    frame = write_toy_csv(tmp_path / "train.csv", n=16)
    frame.loc[2, "first"] = ""
    frame.loc[5, "second"] = None
    frame.loc[7, "first"] = " ".join(["tree"] * 40)
    frame.to_csv(tmp_path / "train.csv", index=False)
    run = tmp_path / "run"
    assert main(train_args(encoder, tmp_path / "train.csv", run)) == 0
    log = (run / "train.log").read_text()
    assert "2 rows have empty or missing text" in log
    assert "1 of 16 texts are longer than max_length=16 tokens and were truncated" in log
    assert len(pd.read_csv(run / "oof.csv")) == 16  # nothing dropped


def test_an_unwritable_train_log_releases_the_lock_and_the_logger_level(encoder, tmp_path):
    """train.log was opened before the try: its failure kept the run locked until the process ended."""
    import logging

    from attnpool import api
    from attnpool.runs.lock import LOCK_NAME

    write_toy_csv(tmp_path / "train.csv", n=12)
    (tmp_path / "run" / "train.log").mkdir(parents=True)  # cannot be opened as a file
    package = logging.getLogger("attnpool")
    before = package.level
    package.setLevel(logging.ERROR)
    try:
        with pytest.raises(OSError, match="train.log") as failed:
            api.train(train_file=str(tmp_path / "train.csv"), text_cols=["first", "second"], label="label",
                      folds=2, model=encoder, output_dir=str(tmp_path / "run"), epochs=1)
        assert package.level == logging.ERROR
        assert not (tmp_path / "run" / LOCK_NAME).exists()  # released: another process may take it
        del failed
    finally:
        package.setLevel(before)


def test_a_finished_training_leaves_the_callers_logger_level(encoder, tmp_path):
    import logging

    write_toy_csv(tmp_path / "train.csv", n=12)
    package = logging.getLogger("attnpool")
    before = package.level
    package.setLevel(logging.ERROR)
    try:
        assert main(train_args(encoder, tmp_path / "train.csv", tmp_path / "run")) == 0
        assert package.level == logging.ERROR
    finally:
        package.setLevel(before)


def test_none_for_what_the_preset_sets_and_text_cols_are_refused_before_anything_runs(tmp_path, capsys):
    """--group-col none --output-activation none came back as anchor and sigmoid, silently; --text-cols anchor
    target was refused as "not both" with a template never given."""
    from attnpool.config import TrainConfig, make_config
    from attnpool.data.errors import DataError
    from attnpool.data.task import apply_preset

    base = ["train", "--preset", "pppm", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "run")]
    for flags, name in ((["--group-col", "none"], "group_col anchor"),
                        (["--output-activation", "none"], "output_activation sigmoid")):
        assert main([*base, *flags]) == 2
        assert f"error: --preset pppm sets {name}, so {flags[0]} none (or " in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text("preset: pppm\ndata_dir: x\ngroup_col:\n")
    with pytest.raises(ValueError, match=r"--preset pppm sets group_col anchor.*group_col: null in a config file"):
        make_config(tmp_path / "c.yaml")
    assert main([*base, "--text-cols", "anchor", "target"]) == 2
    assert "error: --preset pppm builds each text from its template '{anchor} [SEP] {target} [SEP] {context_text}': " \
           "change it with --template (e.g. '{anchor} [SEP] {target}'), not --text-cols" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    with pytest.raises(DataError, match="change it with --template"):
        apply_preset(TrainConfig(preset="pppm", data_dir="x", text_cols=["anchor", "target"]))
    cfg = apply_preset(make_config(preset="pppm", data_dir="x", group_col="context"))
    assert (cfg.group_col, cfg.output_activation) == ("context", "sigmoid"), "another column is taken"
