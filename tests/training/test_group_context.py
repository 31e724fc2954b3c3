"""`--group-context` end to end on a tiny random encoder: train (out-of-fold rows see only validation rows' targets),
the option saved in the run's config, predict and serve building the context from the rows they are given."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from attnpool import train
from attnpool.cli import main
from attnpool.config import TrainConfig, load_yaml
from attnpool.explanations import explain_file
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.prediction import predict
from attnpool.serving.service import Service
from model_helpers import WORDS, save_tiny_encoder, train_killed_after_save

FAST = ["--epochs", "1", "--batch-size", "8", "--eval-batch-size", "16", "--max-length", "32", "--pooling-opt",
        "attn_size=8", "--precision", "fp32"]


def phrases(n: int, seed: int) -> pd.DataFrame:
    """PPPM-like rows: 4 anchors x 2 contexts, several short targets each."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": [f"{seed}-{i:03d}" for i in range(n)],
                         "anchor": rng.choice(WORDS[:4], size=n), "context": rng.choice(["c1", "c2"], size=n),
                         "target": [" ".join(rng.choice(WORDS[4:], size=rng.integers(1, 3))) for _ in range(n)],
                         "label": rng.random(n).round(2)})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("group_context")
    encoder = save_tiny_encoder(folder / "encoder")
    phrases(40, seed=0).to_csv(folder / "train.csv", index=False)
    phrases(17, seed=1).drop(columns=["label"]).to_csv(folder / "test.csv", index=False)
    run = folder / "run"
    code = main(["train", "--train-file", str(folder / "train.csv"), "--template", "{anchor} [SEP] {target}",
                 "--group-context", "target", "--group-context-by", "anchor", "context", "--folds", "2",
                 "--model", encoder, "--output-dir", str(run), *FAST])
    assert code == 0
    return folder, run


def contexts(frame: pd.DataFrame) -> list[str]:
    """What each row's context must be, written out: its group's other targets in ``frame``, sorted, ``; ``."""
    return ["; ".join(sorted({t for t in frame.target[(frame.anchor == a) & (frame.context == c)] if t != own}))
            for a, c, own in zip(frame.anchor, frame.context, frame.target, strict=True)]


def scores(model_dir, frame: pd.DataFrame, context: bool = True) -> np.ndarray:
    """The model's scores of the rows, each with its context in ``frame`` (or an empty one)."""
    model = AttnPoolForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    joined = contexts(frame) if context else [""] * len(frame)
    texts = [f"{a} [SEP] {t} [SEP] {c}" for a, t, c in zip(frame.anchor, frame.target, joined, strict=True)]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits[:, 0].numpy()


def test_the_option_round_trips_in_the_saved_config(trained):
    _, run = trained
    cfg = TrainConfig.from_dict(load_yaml(run / "config.yaml"))
    assert cfg.group_context == "target" and cfg.group_context_by == ["anchor", "context"]
    assert cfg.template == "{anchor} [SEP] {target}", "the saved template is the user's; the context is added"
    assert "validation rows with group context" in (run / "train.log").read_text()


def test_out_of_fold_rows_were_scored_with_the_context_of_the_validation_rows_only(trained):
    folder, run = trained
    train = pd.read_csv(folder / "train.csv", dtype={"id": str})
    oof = pd.read_csv(run / "oof.csv")
    for fold in (0, 1):
        valid = train.iloc[oof.loc[oof.fold == fold, "row"].to_numpy()].reset_index(drop=True)
        everyone = dict(zip(train.id, contexts(train), strict=True))
        assert contexts(valid) != [everyone[i] for i in valid.id], "no group straddles the folds: nothing tested"
        np.testing.assert_allclose(oof.loc[oof.fold == fold, "prediction"], scores(run / f"fold_{fold}" / "model",
                                                                                    valid), atol=1e-5)


def test_predict_builds_the_context_from_the_file_and_serve_from_the_request(trained, tmp_path):
    folder, run = trained
    test = pd.read_csv(folder / "test.csv", dtype={"id": str})
    out = predict(run, folder / "test.csv", tmp_path / "pred.csv", progress=False, device="cpu", precision="fp32",
                  chunk_rows=4)  # groups straddle the chunks: the context is the file's all the same
    pred = pd.read_csv(out.output, dtype={"id": str})
    expected = np.mean([scores(run / f"fold_{k}" / "model", test) for k in (0, 1)], axis=0)
    np.testing.assert_allclose(pred["prediction"], expected, atol=1e-5)
    # one row fewer in a group changes the predictions of the group's other rows, and only theirs
    dropped = test.drop(index=0)
    dropped.to_csv(tmp_path / "fewer.csv", index=False)
    fewer = pd.read_csv(predict(run, tmp_path / "fewer.csv", tmp_path / "fewer_pred.csv", progress=False,
                                device="cpu", precision="fp32").output, dtype={"id": str})
    group = ((dropped.anchor == test.anchor[0]) & (dropped.context == test.context[0])).to_numpy()
    before = pred["prediction"].to_numpy()[1:]
    assert group.any() and not np.allclose(fewer["prediction"].to_numpy()[group], before[group], atol=1e-6)
    np.testing.assert_allclose(fewer["prediction"].to_numpy()[~group], before[~group], atol=1e-5)
    # serve: a request holding the file's rows answers what predict wrote
    service = Service.load(run, device="cpu", precision="fp32")
    assert service.fields == ["anchor", "target", "context"]
    job = service.encode(test[service.fields].to_dict("records"))
    served = service.run([job], batch_size=8)[0].scores
    np.testing.assert_allclose(np.asarray(served).reshape(-1), pred["prediction"], atol=1e-5)


def test_predict_reads_the_rows_with_without_or_both_views_of_their_context(trained, tmp_path):
    folder, run = trained
    test = pd.read_csv(folder / "test.csv", dtype={"id": str})
    views = {view: scores(run / "fold_0" / "model", test, context=view == "with") for view in ("with", "without")}
    assert not np.allclose(views["with"], views["without"], atol=1e-4), "the context changes the scores"
    views["both"] = (views["with"] + views["without"]) / 2
    for view, expected in views.items():
        out = tmp_path / f"{view}.csv"
        assert main(["predict", "--run", str(run), "--input", str(folder / "test.csv"), "--output", str(out),
                     "--folds", "0", "--context-view", view, "--device", "cpu", "--precision", "fp32", "-q"]) == 0
        np.testing.assert_allclose(pd.read_csv(out)["prediction"], expected, atol=1e-5, err_msg=view)


def test_a_context_view_of_a_run_without_context_is_refused(trained, tmp_path):
    import shutil

    import yaml

    _, run = trained
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(run / "run.json", plain / "run.json")
    saved = load_yaml(run / "config.yaml")
    (plain / "config.yaml").write_text(yaml.safe_dump({**saved, "group_context": None, "group_context_by": []}))
    with pytest.raises(ValueError, match=r"^context_view both: .*plain trained without a group context "
                                         r"\(--group-context\), so the rows have one view only; drop --context-view$"):
        predict(plain, tmp_path / "in.csv", tmp_path / "out.csv", context_view="both")
    with pytest.raises(ValueError, match="^context_view must be one of with, without, both, got 'neither'$"):
        predict(plain, tmp_path / "in.csv", tmp_path / "out.csv", context_view="neither")


@pytest.mark.parametrize("limit", [None, 5])
def test_explain_rebuilds_the_texts_with_the_files_context(trained, tmp_path, limit):
    folder, run = trained
    explanation = explain_file(run, folder / "test.csv", tmp_path / "report.html", limit=limit, device="cpu")
    test = pd.read_csv(folder / "test.csv", dtype={"id": str})
    first = explanation.examples[0]
    assert first.id == test.id[0] and len(explanation.examples) == (limit or len(test))
    assert contexts(test)[0] and first.text == f"{test.anchor[0]} [SEP] {test.target[0]} [SEP] {contexts(test)[0]}"


def test_own_pooling_trains_pools_the_rows_own_text_and_exports(trained, tmp_path):
    """`--group-context-pooling own` end to end: saved, pooled over `anchor [SEP] target [SEP]` only, predicted,
    and exported to ONNX with the same numbers."""
    from attnpool.exporters import export_onnx

    folder, _ = trained
    run = tmp_path / "own"
    code = main(["train", "--train-file", str(folder / "train.csv"), "--template", "{anchor} [SEP] {target}",
                 "--group-context", "target", "--group-context-by", "anchor", "context", "--group-context-pooling",
                 "own", "--folds", "2", "--model", str(folder / "encoder"),
                 "--output-dir", str(run), *FAST])
    assert code == 0
    model = AttnPoolForSequenceClassification.from_pretrained(run / "fold_0" / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(run / "fold_0" / "model")
    assert (model.config.pool_segments, model.config.segment_token_id) == (2, tokenizer.sep_token_id)
    batch = tokenizer(["cat [SEP] red blue [SEP] tree; house"], return_tensors="pt")
    with torch.no_grad():
        weights = model(**batch, return_pooling_weights=True).pooling_weights[0]
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    pooled = [t for t, w in zip(tokens, weights, strict=True) if w > 0]
    assert pooled == ["[CLS]", "cat", "[SEP]", "red", "blue", "[SEP]"]
    out = predict(run, folder / "test.csv", tmp_path / "pred.csv", progress=False, device="cpu", precision="fp32")
    test = pd.read_csv(folder / "test.csv", dtype={"id": str})
    expected = np.mean([scores(run / f"fold_{k}" / "model", test) for k in (0, 1)], axis=0)
    np.testing.assert_allclose(pd.read_csv(out.output)["prediction"], expected, atol=1e-5)
    export_onnx(run / "fold_0" / "model", tmp_path / "own.onnx", with_weights=True)  # verified against torch


def test_context_dropout_trains_each_epoch_on_a_fresh_half_without_context(trained, tmp_path, monkeypatch):
    """`--group-context-dropout 0.5`: the Trainer draws each epoch's rows (through accelerate's ``set_epoch``), half
    of the rows it trains on go without their context, and validation keeps it (the out-of-fold scores)."""
    from attnpool.data.datasets import ContextDropoutDataset

    folder, _ = trained
    fetched: list[tuple[int, bool]] = []  # (epoch drawn, row without its context) per training row fetched
    draw, fetch = ContextDropoutDataset.set_epoch, ContextDropoutDataset.__getitem__

    def set_epoch(self, epoch):
        self.epoch = epoch
        draw(self, epoch)

    def getitem(self, i):
        fetched.append((self.epoch, bool(self.without[i])))
        return fetch(self, i)

    monkeypatch.setattr(ContextDropoutDataset, "set_epoch", set_epoch)
    monkeypatch.setattr(ContextDropoutDataset, "__getitem__", getitem)
    run = tmp_path / "dropout"
    fast = [*FAST]
    fast[1] = "2"  # --epochs 2
    code = main(["train", "--train-file", str(folder / "train.csv"), "--template", "{anchor} [SEP] {target}",
                 "--group-context", "target", "--group-context-by", "anchor", "context", "--group-context-dropout",
                 "0.5", "--folds", "2", "--only-folds", "0", "--model", str(folder / "encoder"),
                 "--output-dir", str(run), *fast])
    assert code == 3  # one fold of two: the other is left for later
    assert TrainConfig.from_dict(load_yaml(run / "config.yaml")).group_context_dropout == 0.5
    assert "training rows without context: 20 texts" in (run / "train.log").read_text()
    trained_on = fetched[-40:]  # the two epochs' 20 rows each; the sampler read every row's length before
    for epoch in (0, 1):
        assert sum(bare for e, bare in trained_on if e == epoch) == 10, f"epoch {epoch}: half without context"
    train = pd.read_csv(folder / "train.csv", dtype={"id": str})
    oof = pd.read_csv(run / "oof.csv")
    valid = train.iloc[oof.loc[oof.fold == 0, "row"].to_numpy()].reset_index(drop=True)
    np.testing.assert_allclose(oof["prediction"], scores(run / "fold_0" / "model", valid), atol=1e-5)


def test_serve_answers_the_context_views_predict_writes(trained, tmp_path):
    """A request holding the file's rows: each view served is what `predict --context-view` writes for it."""
    folder, run = trained
    test = pd.read_csv(folder / "test.csv", dtype={"id": str})
    for view in ("without", "both"):
        out = predict(run, folder / "test.csv", tmp_path / f"{view}.csv", progress=False, device="cpu",
                      precision="fp32", context_view=view).output
        service = Service.load(run, device="cpu", precision="fp32", context_view=view)
        assert service.info()["context_view"] == view
        job = service.encode(test[service.fields].to_dict("records"), texts=True)
        answer = service.run([job, service.encode(test[service.fields].head(3).to_dict("records"))],
                             batch_size=8)[0]  # with another request in the batch
        np.testing.assert_allclose(np.asarray(answer.scores).reshape(-1), pd.read_csv(out)["prediction"], atol=1e-5)
        # the words are those of the input with the context (both) or without it: the row's own words and its group's
        said = [[w["text"] for w in row if w["kind"] == "word"] for row in answer.words]
        joined = contexts(test) if view == "both" else [""] * len(test)
        assert said == [f"{a} {t} {c.replace(';', ' ;')}".split() for a, t, c in
                        zip(test.anchor, test.target, joined, strict=True)]
        assert view == "without" or any(joined), "no row of the request has a context: the test would not tell"


def test_a_served_context_view_needs_a_run_with_a_context(trained, tmp_path):
    from attnpool.serving.blend import load_service
    from model_helpers import add_oof, make_run

    folder, run = trained
    plain = add_oof(make_run(tmp_path / "plain", str(folder / "encoder"), text_cols=["anchor"]), rows=40)
    with pytest.raises(ValueError, match="^context_view both: .*plain trained without a group context"):
        Service.load(plain, device="cpu", context_view="both")
    blend = load_service([run, plain], device="cpu", precision="fp32", context_view="both")
    assert [m.context_view for m in blend.members] == ["both", "with"], "the view applies to the run with context"
    copy = shutil.copytree(plain, tmp_path / "plain2")  # another run (one run given twice is refused)
    with pytest.raises(ValueError, match="^context_view without: .*plain, .*plain2 trained without a group context"):
        load_service([plain, copy], device="cpu", context_view="without")


def test_context_dropout_resumed_in_the_middle_of_an_epoch_trains_as_the_uninterrupted_run(trained, tmp_path):
    """Killed after the checkpoint of step 4 (inside the second epoch) and resumed: the epoch's draw of the rows
    without context, the sampler's order and the dropout all continue as in one call, so the fold's scores match.
    (accelerate does not call the data set's ``set_epoch`` on a resumed epoch; before the sampler did, the rest of
    that epoch trained on the first epoch's draw, and the scores differed by 3e-4.)"""
    folder, _ = trained
    options = {"train_file": str(folder / "train.csv"), "template": "{anchor} [SEP] {target}",
               "group_context": "target", "group_context_by": ["anchor", "context"], "group_context_dropout": 0.5,
               "folds": 2, "only_folds": [0], "model": str(folder / "encoder"), "eval_steps": 2, "epochs": 2,
               "batch_size": 8, "eval_batch_size": 16, "max_length": 32, "pooling_options": {"attn_size": 8},
               "precision": "fp32", "lr": 1e-3, "head_lr": 3e-3}  # steps large enough that another draw shows
    once, twice = tmp_path / "once", tmp_path / "twice"
    assert not train(TrainConfig(**options, output_dir=str(once))).complete  # one fold of two
    # the first step of the second epoch (3 steps an epoch)
    proc = train_killed_after_save({**options, "output_dir": str(twice)}, fold=0, step=4)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not (twice / "fold_0" / "oof.csv").exists()
    assert main(["train", "--output-dir", str(twice), "--resume", "--only-folds", "0"]) == 3
    assert "fold 0: resuming from" in (twice / "train.log").read_text()
    first, second = pd.read_csv(once / "oof.csv"), pd.read_csv(twice / "oof.csv")
    assert first["row"].tolist() == second["row"].tolist()
    np.testing.assert_allclose(second["prediction"], first["prediction"], atol=1e-6)
