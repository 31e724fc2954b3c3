"""The Python API under the CLI: the same jobs from a TrainConfig, a dict or a YAML file, with overrides."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

import attnpool
from attnpool.runs import Run, RunError
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    write_toy_csv(folder / "test.csv", n=9, seed=1)
    values = {"train_file": str(folder / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 8, "pooling_options": {"attn_size": 8},
              "precision": "fp32"}
    return folder, values


@pytest.fixture(scope="module")
def trained(recipe):
    """A run trained in two calls: fold 0 from a YAML file with overrides, then the rest with resume."""
    folder, values = recipe
    (folder / "recipe.yaml").write_text(yaml.safe_dump(values))
    first = attnpool.train(folder / "recipe.yaml", output_dir=str(folder / "run"), only_folds=[0])
    rest = attnpool.train(folder / "recipe.yaml", output_dir=str(folder / "run"), resume=True)
    return folder, first, rest


def test_train_from_a_yaml_file_with_overrides_then_resumed(trained):
    folder, first, rest = trained
    assert not first.complete and [f["fold"] for f in first.metrics["folds"]] == [0]
    assert rest.complete and [f["fold"] for f in rest.metrics["folds"]] == [0, 1]
    run = Run.open(folder / "run")
    assert run.config().epochs == 1 and run.config().pooling_options == {"attn_size": 8}
    assert len(rest.oof) == 24 and run.trained_folds() == [0, 1]


def test_train_takes_a_dict_and_a_config_alike(recipe, tmp_path):
    _, values = recipe
    with pytest.raises(ValueError, match="unknown option\\(s\\) epoch \\(did you mean epochs\\?\\); valid options:"):
        attnpool.train(values, epoch=2)
    cfg = attnpool.TrainConfig(**{**values, "output_dir": str(tmp_path / "r"), "only_folds": [1]})
    result = attnpool.train(cfg, head_lr=5e-3)
    assert Run.open(result.run_dir).config().head_lr == 5e-3 and [f["fold"] for f in result.metrics["folds"]] == [1]


def test_predict_ensembles_the_chosen_folds(trained, tmp_path):
    folder, _, _ = trained
    both = attnpool.predict(folder / "run", folder / "test.csv", tmp_path / "both.csv", progress=False)
    one = attnpool.predict(folder / "run", folder / "test.csv", tmp_path / "one.csv", folds=[1], progress=False)
    assert both.rows == one.rows == 9
    a, b = pd.read_csv(tmp_path / "both.csv"), pd.read_csv(tmp_path / "one.csv")
    assert list(a["id"]) == list(b["id"]) and not a["prediction"].equals(b["prediction"])
    with pytest.raises(RunError, match="has no trained fold 5; trained folds: 0, 1"):
        attnpool.predict(folder / "run", folder / "test.csv", tmp_path / "x.csv", folds=[5])


def test_compare_counts_seeds_from_the_config_seed(recipe, tmp_path):
    _, values = recipe
    with pytest.raises(ValueError, match="a single value is a number of seeds and must be >= 1, got 0"):
        attnpool.compare(values, poolings=["max"], seeds=0, output_dir=tmp_path / "c")


def test_poolers_lists_every_registered_pooler():
    rows = {r["pooler"]: r for r in attnpool.poolers(hidden_size=64)}
    assert set(rows) == set(attnpool.available_poolers())
    assert rows["attention"]["token_weights"] and rows["attention"]["parameters"] > 0
    assert rows["max"]["parameters"] == 0 and not rows["max"]["token_weights"]


def test_resume_over_a_config_file_warns_of_the_file_s_values_the_run_ignores(tmp_path, monkeypatch, caplog):
    """--config FILE --resume: the file's differing epochs and lr were ignored without a word (only the flags were
    compared), and --pooling-layers last was named as ignored though the run has last."""
    import attnpool.api as api_module
    from attnpool.training.recipe import _warn_of_overridden

    calls = []
    monkeypatch.setattr(api_module, "_train", lambda cfg, callbacks=None, given=None: calls.append(given))
    (tmp_path / "recipe.yaml").write_text("train_file: t.csv\ntext_cols: [a]\nepochs: 3\nlr: 1.0e-3\n")
    attnpool.train(tmp_path / "recipe.yaml", resume=True, output_dir=str(tmp_path / "run"))
    attnpool.train(tmp_path / "recipe.yaml", output_dir=str(tmp_path / "run"))
    assert calls[0] == {"train_file": "t.csv", "text_cols": ["a"], "epochs": 3, "lr": 1e-3, "resume": True,
                        "output_dir": str(tmp_path / "run")}
    assert calls[1] == {"output_dir": str(tmp_path / "run")}, "without resume: the keywords, as before"
    saved = {"epochs": 1.0, "lr": 2e-5, "text_cols": ["a"], "pooling_layers": "last", "only_folds": None}
    _warn_of_overridden(Run(tmp_path / "run"), saved, {**calls[0], "pooling_layers": ["last"], "only_folds": [1]})
    assert "these options are ignored: epochs=3 (the run has 1.0), lr=0.001 (the run has 2e-05); to train" in \
        caplog.text
    caplog.clear()
    _warn_of_overridden(Run(tmp_path / "run"), {"pooling": "attention"}, {"pooling": "Attention"})
    assert "ignored" not in caplog.text, "the same pooler, spelled another way, is no option ignored"
    _warn_of_overridden(Run(tmp_path / "run"), {"pooling": "attention"}, {"pooling": "mean"})
    assert "these options are ignored: pooling='mean' (the run has 'attention')" in caplog.text


def test_a_run_config_saved_by_an_older_version_does_not_carry_its_call_s_overwrite_resume_or_only_folds(
        tmp_path, monkeypatch):
    """Older runs saved overwrite: true, resume, only_folds: [0]; --config RUN/config.yaml replaced another run."""
    import attnpool.api as api_module

    seen = []
    monkeypatch.setattr(api_module, "_train", lambda cfg, callbacks=None, given=None: seen.append(cfg))
    monkeypatch.setattr(api_module, "_compare", lambda cfg, *a, **k: seen.append(cfg))
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "config.yaml").write_text("train_file: t.csv\ntext_cols: [a]\nfolds: 3\noverwrite: true\n"
                                          "resume: true\nonly_folds: [0]\n")
    attnpool.train(tmp_path / "config.yaml", output_dir="other")
    attnpool.compare(str(tmp_path / "config.yaml"), poolings=["mean"])
    assert [(c.overwrite, c.resume, c.only_folds, c.folds) for c in seen] == [(False, False, None, 3)] * 2
    attnpool.train(tmp_path / "config.yaml", overwrite=True, only_folds=[1])
    assert (seen[-1].overwrite, seen[-1].only_folds) == (True, [1]), "keywords still apply"
    (tmp_path / "run.json").unlink()  # a recipe file of the user's own keeps them
    attnpool.train(tmp_path / "config.yaml", resume=False)
    assert (seen[-1].overwrite, seen[-1].only_folds) == (True, [0])
