"""`attnpool train` / `attnpool predict` end to end on a tiny random encoder and generated data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import attnpool.training.fold as fold_module
from attnpool.cli import main
from attnpool.config import TrainConfig
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.training.fold import paired_inputs
from model_helpers import save_tiny_encoder, train_killed_after_save, write_toy_csv

FAST = ["--epochs", "2", "--batch-size", "8", "--eval-batch-size", "16", "--lr", "1e-3", "--head-lr", "3e-3",
        "--max-length", "16", "--pooling-opt", "attn_size=8", "--precision", "fp32"]  # fp32: exact comparisons


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_toy_csv(folder / "train.csv", n=48, seed=0)
    test = write_toy_csv(folder / "test.csv", n=13, seed=1).drop(columns=["label"])
    test.to_csv(folder / "test.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def run(encoder, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    code = main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST])
    assert code == 0
    return out


def test_train_writes_the_run_directory(run, data):
    for name in ("run.json", "config.yaml", "folds.csv", "oof.csv", "metrics.json", "learning_curve.png",
                 "train.log", "fold_0/model/model.safetensors", "fold_1/model/tokenizer.json"):
        assert (run / name).is_file(), name
    assert not (run / "fold_0" / "checkpoints").exists(), "checkpoints are removed once a fold is done"
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((run / "metrics.json").read_text())
    assert [f["fold"] for f in metrics["folds"]] == [0, 1] and metrics["complete"]
    assert set(metrics["overall"]) >= {"pearson", "spearman", "rmse"}
    train = pd.read_csv(data / "train.csv", dtype={"id": str})
    oof = pd.read_csv(run / "oof.csv", dtype={"id": str})
    assert sorted(oof["row"]) == list(range(len(train))), "out-of-fold predictions cover every row exactly once"
    assert list(oof["id"]) == list(train["id"])  # ids kept as strings, leading zeros included
    np.testing.assert_allclose(oof["target"], train["label"])
    assert "attnpool train: regression" in (run / "train.log").read_text()


def test_fold_models_load_on_their_own_and_reproduce_the_oof_predictions(run, data):
    from transformers import AutoTokenizer

    oof = pd.read_csv(run / "oof.csv")
    train = pd.read_csv(data / "train.csv")
    model = AttnPoolForSequenceClassification.from_pretrained(run / "fold_1" / "model")
    tokenizer = AutoTokenizer.from_pretrained(run / "fold_1" / "model")
    rows = oof[oof["fold"] == 1]["row"].to_numpy()
    batch = tokenizer(list(train["first"][rows]), list(train["second"][rows]), padding=True, truncation=True,
                      max_length=16, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits[:, 0].numpy()
    np.testing.assert_allclose(oof[oof["fold"] == 1]["prediction"], logits, atol=1e-5)


def test_predict_ensembles_the_folds_in_input_order(run, data, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "pred.csv"
    assert main(["predict", "--run", str(run), "--input", str(data / "test.csv"), "--output", str(out),
                 "--precision", "fp32"]) == 0
    test = pd.read_csv(data / "test.csv", dtype={"id": str})
    pred = pd.read_csv(out, dtype={"id": str})
    assert list(pred["id"]) == list(test["id"]) and list(pred.columns) == ["id", "prediction"]
    expected = []
    for fold in (0, 1):
        model = AttnPoolForSequenceClassification.from_pretrained(run / f"fold_{fold}" / "model").eval()
        tokenizer = AutoTokenizer.from_pretrained(run / f"fold_{fold}" / "model")
        batch = tokenizer(list(test["first"]), list(test["second"]), padding=True, truncation=True, max_length=16,
                          return_tensors="pt")
        with torch.no_grad():
            expected.append(model(**batch).logits[:, 0].numpy())
    np.testing.assert_allclose(pred["prediction"], np.mean(expected, axis=0), atol=1e-5)
    assert not list(tmp_path.glob(".*tmp")), "no temporary file is left behind"


def _embeddings(path, prefix=""):
    from safetensors.torch import load_file

    weights = load_file(str(path))
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(f"{prefix}embeddings.")}


def test_the_word_embeddings_stay_pretrained_by_default_and_train_with_no_freeze_word_embeddings(run, data, encoder,
                                                                                               tmp_path):
    words, positions = "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight"
    pretrained = _embeddings(os.path.join(encoder, "model.safetensors"))
    default = _embeddings(run / "fold_0" / "model" / "model.safetensors", "attnpool.encoder.")
    assert default.keys() == pretrained.keys()
    assert torch.equal(default[words], pretrained[words])
    assert not torch.equal(default[positions], pretrained[positions]), "the rest of the embedding layer trains"
    assert "word embeddings: frozen (default" in (run / "train.log").read_text()
    card = (run / "fold_0" / "model" / "README.md").read_text().lower()
    assert "freeze_word_embeddings: true" in card and "precision: fp32" in card

    out = tmp_path / "trained"
    code = main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--only-folds", "0", "--model", encoder, "--output-dir", str(out),
                 "--no-freeze-word-embeddings", *FAST])
    assert code == 3  # one fold of two
    trained = _embeddings(out / "fold_0" / "model" / "model.safetensors", "attnpool.encoder.")
    assert not torch.equal(trained[words], pretrained[words])
    assert "word embeddings: trained (--no-freeze-word-embeddings)" in (out / "train.log").read_text()


def test_existing_run_directory_is_refused_without_resume_or_overwrite(run, data, encoder, capsys):
    code = main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--label", "label",
                 "--model", encoder, "--output-dir", str(run)])
    assert code == 2
    assert "already exists; pass --resume to continue it, --overwrite to replace it" in capsys.readouterr().err


def test_a_bad_option_is_refused_before_the_run_directory_is_made_or_overwritten(encoder, data, tmp_path, capsys):
    from model_helpers import make_run

    old = make_run(tmp_path / "old", encoder)
    before = {p.relative_to(old): p.stat().st_mtime_ns for p in old.rglob("*")}
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--label", "label", "--model",
            encoder, "--pooling", "meen"]
    assert main([*args, "--output-dir", str(old), "--overwrite"]) == 2
    assert "Unknown pooler 'meen'. Did you mean 'mean'?" in capsys.readouterr().err
    assert {p.relative_to(old): p.stat().st_mtime_ns for p in old.rglob("*")} == before, "the old run is kept"
    assert main([*args, "--output-dir", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists(), "no empty run folder is left behind"


def test_a_pooler_value_that_cannot_build_is_refused_before_the_run_directory_is_made(encoder, data, tmp_path,
                                                                                       capsys):
    """attn_size=-3 failed in fold 0 with a traceback, leaving a run that a corrected command was refused on."""
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--model", encoder,
            "--output-dir", str(tmp_path / "new")]
    assert main([*args, "--pooling-opt", "attn_size=-3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnpool train: error: pooling with pooling_options attn_size=-3: the pooler does not "
                          "build") and err.count("\n") == 1
    assert main([*args, "--pooling", "weighted_layer", "--recurrent", "lstm"]) == 2
    assert "recurrent lstm runs over one sequence of token states" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_overwrite_with_resume_is_refused_before_the_run_is_opened(encoder, data, tmp_path, capsys):
    """--resume --overwrite (or a file's resume: true and --overwrite) resumed, silently, as resume skipped validate."""
    from model_helpers import make_run

    config = tmp_path / "recipe.yaml"
    config.write_text(f"train_file: {tmp_path / 'absent.csv'}\ntext_cols: first\nresume: true\n")
    assert main(["train", "--config", str(config), "--overwrite", "--output-dir", str(tmp_path / "new")]) == 2
    assert "error: overwrite deletes the run that resume would continue: give one of them (--no-overwrite or " \
           "--no-resume undoes a config file's)" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    old = make_run(tmp_path / "old", encoder)
    before = {p.relative_to(old): p.stat().st_mtime_ns for p in old.rglob("*")}
    assert main(["train", "--output-dir", str(old), "--resume", "--overwrite"]) == 2
    assert "overwrite deletes the run that resume would continue" in capsys.readouterr().err
    assert {p.relative_to(old): p.stat().st_mtime_ns for p in old.rglob("*")} == before, "neither resumed nor replaced"


def test_encoder_dropout_is_trained_with_saved_in_the_fold_model_and_checked(encoder, data, tmp_path, capsys):
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--only-folds", "0", "--model", encoder, *FAST]
    assert main([*args, "--output-dir", str(tmp_path / "bad"), "--encoder-dropout", "1"]) == 2
    assert "encoder_dropout must be in [0, 1), got 1.0" in capsys.readouterr().err
    out = tmp_path / "run"
    assert main([*args, "--output-dir", str(out), "--encoder-dropout", "0"]) == 3  # one fold of two
    assert "encoder_dropout: 0.0" in (out / "config.yaml").read_text()
    saved = json.loads((out / "fold_0" / "model" / "config.json").read_text())["encoder"]
    assert (saved["hidden_dropout_prob"], saved["attention_probs_dropout_prob"]) == (0.0, 0.0)
    pretrained = json.loads((Path(encoder) / "config.json").read_text())
    assert pretrained["hidden_dropout_prob"] > 0, "the encoder folder itself is left as it was"


def test_resume_skips_finished_folds(encoder, data, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "0"]) == 3  # incomplete run: exit code 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert not metrics["complete"] and len(metrics["folds"]) == 1
    stamp = (out / "fold_0" / "model" / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume", "--train-file", str(data / "train.csv"),
                 "--text-cols", "x", "--model", encoder]) == 0  # the saved config wins over these flags
    assert (out / "fold_0" / "model" / "model.safetensors").stat().st_mtime_ns == stamp, "fold 0 was retrained"
    # and says which it ignored (the same file and model given again are not among them)
    said = capsys.readouterr().err
    assert f"--resume: the run's saved config ({out / 'config.yaml'}) wins, so these options are ignored: " \
           "text_cols=['x'] (the run has ['first', 'second']); to train with them, start a new run" in said
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["complete"] and [f["fold"] for f in metrics["folds"]] == [0, 1]
    # "seconds" is this call's, which trained fold 1 only: the folds' time over both calls is train_seconds
    assert metrics["train_seconds"] == round(sum(f["train_seconds"] for f in metrics["folds"]), 1)
    assert "min this call (the folds' training over every call: " in said


def test_a_fold_killed_between_its_metrics_and_its_predictions_does_not_count_as_done(encoder, data, tmp_path):
    """metrics.json is written before oof.csv: its metrics alone made the run 'complete' with a fold missing."""
    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "1"]) == 3
    (out / "fold_1" / "oof.csv").unlink()  # killed after the fold's metrics.json, before its oof.csv
    assert main(["train", "--output-dir", str(out), "--resume", "--only-folds", "0"]) == 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert not metrics["complete"] and [f["fold"] for f in metrics["folds"]] == [0]
    # killed after its oof.csv, before its checkpoints were deleted: the next start deletes them
    (out / "fold_0" / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    assert main(["train", "--output-dir", str(out), "--resume", "--only-folds", "0"]) == 3
    assert not (out / "fold_0" / "checkpoints").exists() and (out / "fold_0" / "oof.csv").is_file()


def test_resume_refuses_a_finished_folds_damaged_predictions_before_training_the_others(encoder, data, tmp_path,
                                                                                       capsys):
    """The damaged fold_0/oof.csv used to be read at the summary only, after the remaining folds had trained."""
    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "0"]) == 3
    oof = out / "fold_0" / "oof.csv"
    oof.write_text(oof.read_text()[:-7])  # cut short in its last line
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume"]) != 0
    said = capsys.readouterr().err
    assert f"{oof} is corrupt" in said and "re-train that fold" in said
    assert not (out / "fold_1").exists(), "the other fold trained before the damaged one was noticed"


def test_resume_refuses_data_changed_under_the_same_row_count(encoder, data, tmp_path, capsys):
    """Fold 0 learned the old labels and fold 1 the new ones, and the CV scored them all against the new."""
    out = tmp_path / "run"
    frame = pd.read_csv(data / "train.csv")
    frame.to_csv(tmp_path / "train.csv", index=False)
    args = ["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--label",
            "label", "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "0"]) == 3
    frame.loc[3, "label"] = frame.loc[3, "label"] + 0.5  # a label fixed between the calls
    frame.to_csv(tmp_path / "train.csv", index=False)
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume"]) == 2
    assert "--resume: the training data changed since the run started (same number of rows, other texts or " \
           "labels)" in capsys.readouterr().err
    assert not (out / "fold_1" / "oof.csv").exists()


def test_resuming_a_class_run_whose_limit_drew_other_rows_says_the_draw_changed(encoder, data, tmp_path, capsys):
    """A binary run begun with --limit before the draw kept a row of each class: its data read as changed, and the
    error said to put the data back (the file was untouched)."""
    out = tmp_path / "run"
    frame = pd.read_csv(data / "train.csv")
    frame.assign(label=["pos" if v >= 0.25 else "neg" for v in frame["label"]]).to_csv(tmp_path / "c.csv", index=False)
    args = ["train", "--train-file", str(tmp_path / "c.csv"), "--text-cols", "first", "second", "--task", "binary",
            "--limit", "30", "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "0"]) == 3
    info = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**info, "data_sha256": "0" * 64}))  # the earlier draw's rows
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume"]) == 2
    assert ("start a new run; a run of a classification task started with --limit before --limit kept a row of each "
            "class (December 2026) draws other rows now, so its data reads as changed: start it anew (--overwrite)"
            in capsys.readouterr().err)
    from attnpool.config import TrainConfig
    from attnpool.data.sampling import earlier_draw

    cfg = TrainConfig(train_file="c.csv", text_cols=["first"], task="binary", limit=1000)
    assert earlier_draw(cfg, 48) == "", "a --limit at or above the rows drew nothing: the data did change"
    cfg.limit, cfg.group_context = 48, "first"
    assert earlier_draw(cfg, 48) == "", "the group draw did not change"


def test_resuming_a_run_saved_before_freeze_word_embeddings_keeps_training_them(encoder, data, tmp_path):
    import yaml

    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--only-folds", "0", "--no-freeze-word-embeddings"]) == 3
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved.pop("freeze_word_embeddings") is False
    (out / "config.yaml").write_text(yaml.safe_dump(saved))  # as an earlier attnpool wrote it
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    pretrained = _embeddings(os.path.join(encoder, "model.safetensors"))["embeddings.word_embeddings.weight"]
    trained = _embeddings(out / "fold_1" / "model" / "model.safetensors", "attnpool.encoder.")
    assert not torch.equal(trained["embeddings.word_embeddings.weight"], pretrained)


def test_resume_after_sigkill_mid_fold_continues_from_the_last_checkpoint(encoder, data, tmp_path):
    out = tmp_path / "run"
    proc = train_killed_after_save(
        {"train_file": str(data / "train.csv"), "text_cols": ["first", "second"], "label": "label", "folds": 2,
         "model": encoder, "output_dir": str(out), "epochs": 3, "batch_size": 8, "eval_steps": 2, "lr": 1e-3,
         "head_lr": 3e-3, "max_length": 16, "pooling_options": {"attn_size": 8}}, fold=1, step=4)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert (out / "fold_0" / "oof.csv").is_file() and not (out / "fold_1" / "oof.csv").exists()
    saved = list((out / "fold_1" / "checkpoints").glob("checkpoint-*"))
    assert saved
    torn = out / "fold_1" / "checkpoints" / "checkpoint-99"  # as a kill in the middle of a save leaves one
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"\0" * 8)
    folds_before = (out / "folds.csv").read_text()
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    assert (out / "folds.csv").read_text() == folds_before
    log = (out / "train.log").read_text()
    assert f"{torn} was not written to the end (no trainer_state.json: the run stopped while saving it)" in log
    assert "fold 0: already done" in log and f"fold 1: resuming from {max(saved)}" in log
    oof = pd.read_csv(out / "oof.csv")
    assert sorted(oof["row"]) == list(range(48))


@pytest.mark.parametrize(
    ("options", "paired"),
    [({"text_cols": ["text"]}, False), ({"text_cols": ["first", "second"]}, True),
     ({"template": "{anchor} [SEP] {target}"}, True), ({"template": "review: {text}"}, False),
     ({"preset": "pppm"}, True)],
)
def test_paired_inputs_says_whether_an_input_joins_two_texts(options, paired):
    assert paired_inputs(TrainConfig(**options)) is paired


def test_multilabel_trains_keeps_the_best_macro_f1_and_predicts_a_probability_per_label(encoder, tmp_path):
    """Multi-label end to end: "a|b" cells, checkpoints chosen by macro-F1 (exact-match accuracy stays flat)."""
    frame = write_toy_csv(tmp_path / "toy.csv", n=32, seed=4)
    frame["tags"] = ["|".join(t for t, on in (("cat", "cat" in f), ("dog", "dog" in s), ("red", "red" in s)) if on)
                     or "none" for f, s in zip(frame["first"], frame["second"], strict=True)]
    frame.to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--label",
                 "tags", "--task", "multilabel", "--folds", "2", "--model", encoder, "--output-dir", str(out),
                 *FAST]) == 0
    for fold in (0, 1):
        history = json.loads((out / f"fold_{fold}" / "log_history.json").read_text())
        scores = {e["step"]: e["eval_macro_f1"] for e in history if "eval_macro_f1" in e}
        kept = json.loads((out / f"fold_{fold}" / "metrics.json").read_text())
        assert len(scores) == 2 and scores[int(kept["best_checkpoint"].split("-")[1])] == max(scores.values())
        assert kept["macro_f1"] == pytest.approx(max(scores.values()))
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"accuracy", "macro_f1"} <= set(metrics["overall"])
    assert main(["predict", "--run", str(out), "--input", str(tmp_path / "train.csv"), "--output",
                 str(tmp_path / "pred.csv")]) == 0
    pred = pd.read_csv(tmp_path / "pred.csv")
    probabilities = pred[[c for c in pred.columns if c.startswith("prob_")]]
    assert sorted(probabilities.columns) == ["prob_cat", "prob_dog", "prob_none", "prob_red"]
    assert ((probabilities >= 0) & (probabilities <= 1)).all().all()


def test_a_run_saved_with_options_now_refused_resumes_without_them(tmp_path, caplog):
    """Classification ignored --loss bce and adversarial_start without adversarial: both are refused now, but a run
    that trained so must still resume (it trained without them), not ask for its config.yaml to be edited."""
    import yaml

    from attnpool.config import TrainConfig
    from attnpool.runs import Run
    from attnpool.training.recipe import _resumed_config

    (tmp_path / "train.csv").write_text("text,label\na,0\n")  # a saved path that exists (a moved one is asked for)
    saved = TrainConfig(train_file=str(tmp_path / "train.csv"), text_cols=["text"], task="multiclass").to_dict()
    saved.update({"loss": "bce", "adversarial_start": 0.5})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ValueError, match="loss bce does not train task multiclass"):
        TrainConfig.from_dict(saved).validate()
    cfg = _resumed_config(Run(tmp_path / "run"), TrainConfig(resume=True, output_dir=str(tmp_path / "run")))
    assert (cfg.loss, cfg.adversarial_start) == (None, 1.0) and cfg.validate() is cfg
    assert "loss bce was ignored by this classification run" in caplog.text


def test_the_out_of_fold_rows_are_predicted_in_the_training_precision(encoder, data, tmp_path, monkeypatch):
    """They came in fp32 or in bf16 depending on whether the Trainer's model kept accelerate's autocast forward."""
    from attnpool.precision import resolve_precision
    from attnpool.training import fold

    seen, predict_encoded = [], fold.predict_encoded

    def spy(*args, **kwargs):
        seen.append(kwargs.get("precision"))
        return predict_encoded(*args, **kwargs)

    monkeypatch.setattr(fold, "predict_encoded", spy)
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--only-folds", "0", "--model", encoder, "--output-dir", str(tmp_path / "run"),
            *FAST[:-1], "auto"]
    assert main(args) == 3
    assert seen == ["auto"]
    card = (tmp_path / "run" / "fold_0" / "model" / "README.md").read_text()
    assert f"precision: {resolve_precision('auto', 'cpu')}" in card and "precision: auto" not in card  # as trained


def test_a_pearson_loss_run_also_scores_its_folds_each_on_its_own_scale(encoder, data, tmp_path, capsys):
    """--loss pearson leaves each fold model its own scale and offset: the pooled Pearson understates the folds."""
    import numpy as np
    import pandas as pd

    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), "--loss", "pearson", *FAST]
    assert main(args) == 0
    overall = json.loads((out / "metrics.json").read_text())["overall"]
    oof = pd.read_csv(out / "oof.csv")
    z = oof.groupby("fold")["prediction"].transform(lambda p: (p - p.mean()) / p.std(ddof=0))
    assert overall["pearson_folds_standardised"] == pytest.approx(np.corrcoef(z, oof["target"])[0, 1], abs=1e-6)
    assert "with each fold's predictions standardised" in capsys.readouterr().err


def test_each_fold_trains_with_its_own_seed(encoder, data, tmp_path, monkeypatch):
    """The Trainer seeds torch with args.seed after the model is built: one seed for all folds gave every fold the
    same dropout masks, while the card said seed + fold."""
    seeds, real = [], fold_module.training_arguments

    def spy(*args, **kwargs):
        made = real(*args, **kwargs)
        seeds.append((made.seed, made.data_seed))
        return made

    monkeypatch.setattr(fold_module, "training_arguments", spy)
    assert main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--model", encoder, "--output-dir", str(tmp_path / "run"), "--seed", "7",
                 *FAST]) == 0
    assert seeds == [(7, 7), (8, 7)]  # the batches' order (data_seed) as before: a mid-epoch resume skips the same


def test_resume_in_another_precision_than_the_run_started_in_warns(encoder, data, tmp_path, capsys):
    """precision: auto is saved as such; resolved on another machine (bf16 there, fp32 here) the folds would differ."""
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--model", encoder, "--output-dir", str(out), "--only-folds", "0",
                 *FAST, "--precision", "auto"]) == 3
    info = json.loads((out / "run.json").read_text())
    here = info["precision"]  # auto resolved on this machine: bf16 with native bf16, else fp32
    other = "fp32" if here == "bf16" else "bf16"
    (out / "run.json").write_text(json.dumps({**info, "precision": other}))  # as started on another machine
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    assert (f"--resume: the run started in {other} and goes on in {here} on this machine (precision: auto in "
            f"{out / 'config.yaml'})") in capsys.readouterr().err


def test_a_run_started_with_relative_paths_works_from_any_folder(encoder, data, tmp_path, monkeypatch):
    """config.yaml kept `train_file: train.csv` as given: --resume (and a PPPM run's predict) from elsewhere failed."""
    import shutil

    import yaml

    (tmp_path / "work").mkdir()
    shutil.copy(data / "train.csv", tmp_path / "work" / "train.csv")
    shutil.copytree(encoder, tmp_path / "work" / "encoder")
    monkeypatch.chdir(tmp_path / "work")
    assert main(["train", "--train-file", "train.csv", "--text-cols", "first", "second", "--label", "label",
                 "--folds", "2", "--model", "encoder", "--output-dir", "run", "--only-folds", "0", *FAST]) == 3
    saved = yaml.safe_load((tmp_path / "work" / "run" / "config.yaml").read_text())
    assert saved["train_file"] == str(tmp_path / "work" / "train.csv")
    assert saved["model"] == str(tmp_path / "work" / "encoder")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--output-dir", "work/run", "--resume"]) == 0


def test_resume_of_a_group_context_run_refuses_edited_texts(encoder, data, tmp_path, capsys):
    """Its folds tokenise the rows, so data_sha256 holds the labels alone: texts_sha256 holds the texts."""
    frame = pd.read_csv(data / "train.csv")
    frame.to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(tmp_path / "train.csv"), "--text-cols", "first", "second", "--label",
                 "label", "--folds", "2", "--model", encoder, "--output-dir", str(out), "--only-folds", "0",
                 "--group-context", "second", "--group-context-by", "first", *FAST]) == 3
    assert "texts_sha256" in json.loads((out / "run.json").read_text())
    frame.loc[3, "second"] = "an edited text"
    frame.to_csv(tmp_path / "train.csv", index=False)
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--resume"]) == 2
    assert "--resume: the training data changed since the run started" in capsys.readouterr().err


def test_a_fold_that_failed_after_training_resumes_without_training_again(encoder, data, tmp_path, monkeypatch):
    """The Trainer deleted the last checkpoint at the end of training (save_total_limit 1): a fold that failed while
    predicting its validation rows re-trained from the best checkpoint on resume."""
    def fail(*args, **kwargs):
        raise MemoryError("out of memory while predicting")

    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--only-folds", "0", "--model", encoder, "--output-dir", str(out), *FAST, "--lr", "0",
            "--head-lr", "0", "--eval-steps", "2"]  # lr 0: the first checkpoint stays the best
    predict = fold_module.predict_encoded
    monkeypatch.setattr(fold_module, "predict_encoded", fail)
    with pytest.raises(MemoryError):
        main(args)
    last = max(int(p.name.split("-")[1]) for p in (out / "fold_0" / "checkpoints").glob("checkpoint-*"))
    monkeypatch.setattr(fold_module, "predict_encoded", predict)
    assert main(["train", "--output-dir", str(out), "--resume", "--only-folds", "0"]) == 3  # fold 1 left
    log = (out / "train.log").read_text()
    assert f"fold 0: resuming from {out / 'fold_0' / 'checkpoints' / f'checkpoint-{last}'}" in log
    history = json.loads((out / "fold_0" / "log_history.json").read_text())
    assert max(e["step"] for e in history) == last and "train_runtime" in history[-1]
    assert json.loads((out / "fold_0" / "metrics.json").read_text())["best_checkpoint"] == "checkpoint-2"


def test_a_saved_config_reused_for_another_run_carries_no_overwrite_resume_or_only_folds(run, encoder, data,
                                                                                         tmp_path, capsys):
    """config.yaml saved overwrite: true and only_folds: [0]: reused with --output-dir OTHER it replaced OTHER's run
    without --overwrite, or trained fold 0 alone."""
    import yaml

    first = tmp_path / "first"
    assert main(["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--folds", "2",
                 "--only-folds", "0", "--model", encoder, "--output-dir", str(first), "--overwrite", *FAST]) == 3
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert (saved["overwrite"], saved["resume"], saved["only_folds"]) == (False, False, None)
    before = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(["train", "--config", str(first / "config.yaml"), "--output-dir", str(run)]) == 2
    assert "already exists; pass --resume to continue it, --overwrite to replace it" in capsys.readouterr().err
    assert {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")} == before, "the other run is kept"


@pytest.mark.parametrize(("options", "message"), [
    (["--max-length", "200"], "max_length 200 is over what the encoder {enc} reads: 64 tokens (its position "
     "embeddings); give --max-length 64 or less"),
    (["--freeze-layers", "5"], "freeze_layers 5 is over the 2 layers of the encoder {enc}; give --freeze-layers 2 "
     "or less"),
    (["--reinit-layers", "3"], "reinit_layers 3 is over the 2 layers of the encoder {enc}; give --reinit-layers 2"),
    (["--reinit-layers", "1", "--freeze-layers", "2"], "reinit_layers 1 and freeze_layers 2 overlap on the 2 layers"),
    (["--pooling-layers", "7"], "pooling_layers [7]: [7] outside [-3, 2], the indices into the 3 hidden states of "
     "the encoder {enc}"),
    (["--adversarial", "awp", "--freeze-layers", "2"], "adversarial=awp perturbs the weights of the encoder layers "
     "being trained, and freeze_layers 2 freezes all 2 layers of the encoder {enc}; give --freeze-layers 1 or less"),
])
def test_options_the_encoder_cannot_take_are_refused_before_the_run_folder_is_written(encoder, data, tmp_path, capsys,
                                                                                     options, message):
    """They failed in fold 0 (--max-length a traceback) after config.yaml, folds.csv and run.json were written, so
    the corrected command was refused: the folder already existed."""
    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--model", encoder,
            "--output-dir", str(out)]
    assert main([*args, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnpool train: error: {message.format(enc=encoder)}") and err.count("\n") == 1, err
    assert not out.exists(), "nothing is written"


def test_the_default_max_length_is_capped_at_a_small_encoder_s_positions_and_a_corrected_command_trains(
        encoder, data, tmp_path, capsys):
    from attnpool.config import TrainConfig
    from attnpool.training.recipe import check_encoder_fit

    cfg = TrainConfig(train_file="t.csv", text_cols=["a"], model=encoder)
    check_encoder_fit(cfg)
    assert cfg.max_length == 64, "the default 128 is over the tiny encoder's 64 positions: capped, not refused"
    with pytest.raises(FileNotFoundError, match="no such folder"):  # said before the run folder is made
        check_encoder_fit(TrainConfig(model=str(tmp_path / "absent"), max_length=10_000))
    out = tmp_path / "run"
    args = ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "--folds", "2", "--only-folds",
            "0", "--model", encoder, "--output-dir", str(out), *FAST]
    assert main([*args, "--freeze-layers", "5"]) == 2 and not out.exists()
    assert main([*args, "--freeze-layers", "1"]) == 3, "the corrected command trains"


@pytest.mark.parametrize("ema", [False, True])
def test_a_fold_checkpointed_with_the_encoders_own_pooler_resumes(encoder, data, tmp_path, monkeypatch, ema):
    """attnpool before 2026-12-06 kept BERT's own pooler: the optimizer state (and weight average) of such a
    checkpoint hold its parameters, and resuming it with the pooler dropped was refused by the Trainer."""
    import transformers

    import attnpool.model.modeling as modeling
    from attnpool.api import train

    class KillAtFirstSave(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise KeyboardInterrupt

    out = tmp_path / "run"
    with monkeypatch.context() as old:
        old.setattr(modeling, "_drop_encoder_pooler", lambda encoder: None)  # as the earlier version built it
        with pytest.raises(KeyboardInterrupt):
            train(None, callbacks=[KillAtFirstSave()], train_file=str(data / "train.csv"),
                  text_cols=["first", "second"], label="label", folds=2, only_folds=[0], model=encoder,
                  output_dir=str(out), epochs=2, batch_size=8, eval_batch_size=16, lr=1e-3, head_lr=3e-3,
                  max_length=16, pooling_options={"attn_size": 8}, precision="fp32", eval_steps=2,
                  ema_decay=0.5 if ema else None)
    assert list((out / "fold_0" / "checkpoints").glob("checkpoint-2"))
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    assert "fold 0: resuming from" in (out / "train.log").read_text()
    model = AttnPoolForSequenceClassification.from_pretrained(out / "fold_0" / "model")
    assert model.attnpool.encoder.pooler is None  # the saved pooler's weights are ignored on load
