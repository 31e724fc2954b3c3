"""The API takes what Python callers hand it: an opened ``Run`` or any path object as a run, ``config=``, and
``export``'s options checked and named as ``export``'s own.

A ``Run`` failed with "'Run' object is not iterable" (predict) or "expected str, bytes or os.PathLike object, not
Run"; ``export(model, None)`` leaked the exporter's TypeError; ``fold="0"`` was refused as ``folds`` with a list
example; ``folds=0`` as an argument of ``export_onnx()``; ``train(config=...)`` as an unknown option ``config``.
"""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest
import yaml

import attnpool
import attnpool.api as api
from attnpool.data import DataError
from attnpool.runs import Run
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv


class Where:
    """A path object that is not pathlib's (``os.PathLike``)."""

    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return os.fspath(self.path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("api_review")
    encoder = save_tiny_encoder(base / "encoder")
    write_toy_csv(base / "test.csv", n=6)
    return add_oof(make_run(base / "run", encoder))  # out-of-fold rows: several runs are blended by them


def _several(run):
    copy = run.parent / "copy"  # another run (one run given twice is refused)
    if not copy.exists():
        shutil.copytree(run, copy)
    return [Run(run), Where(copy)]


@pytest.mark.parametrize("given", [Run, Where, _several], ids=["run", "pathlike", "several"])
def test_predict_takes_an_opened_run_or_any_path_object(run_dir, tmp_path, given):
    summary = attnpool.predict(given(run_dir), run_dir.parent / "test.csv", tmp_path / "out.csv", progress=False,
                               device="cpu")
    assert summary.rows == 6
    assert len(pd.read_csv(tmp_path / "out.csv")) == 6


@pytest.mark.parametrize("as_keyword", [False, True])
def test_explain_file_takes_an_opened_run(run_dir, tmp_path, as_keyword):
    source = Run(run_dir)
    args, kwargs = ((), {"source": source}) if as_keyword else ((source,), {})
    result = attnpool.explain_file(*args, input_file=run_dir.parent / "test.csv", html_path=tmp_path / "e.html",
                                   limit=2, erasure_k=1, device="cpu", **kwargs)
    assert len(result.examples) == 2 and (tmp_path / "e.html").is_file()


@pytest.fixture
def exported(monkeypatch):
    """export_onnx as a stand-in that records what api.export passed it."""
    seen = {}
    monkeypatch.setattr(api, "export_onnx", lambda model, output, **options: seen.update(
        model=model, output=output, **options) or "done")
    return seen


@pytest.mark.parametrize("given", [Run, Where])
def test_export_takes_an_opened_run_or_any_path_object(run_dir, tmp_path, exported, given):
    assert attnpool.export(given(run_dir), Where(tmp_path / "m.onnx"), fold=1) == "done"
    assert exported == {"model": run_dir, "output": tmp_path / "m.onnx", "fold": 1}


def test_export_refuses_an_output_inside_the_run(run_dir, exported):
    """--output RUN/fold_0/model/model.onnx rewrote the fold's tokenizer files (predict and explain refuse that)."""
    inside = run_dir / "fold_0" / "model" / "model.onnx"
    with pytest.raises(DataError) as raised:
        attnpool.export(Run(run_dir), inside)
    assert str(raised.value) == (f"--output {inside}: is inside the run folder {run_dir}, whose own files the ONNX "
                                 "graph and its tokenizer files would replace or mix with; write the ONNX graph and "
                                 f"its tokenizer files outside it, e.g. --output {run_dir.parent / 'model.onnx'}")
    for model in (run_dir / "fold_0", run_dir / "fold_0" / "model"):  # a fold of the run, as export takes it
        with pytest.raises(DataError, match=f"is inside the run folder {run_dir}, whose own files"):
            attnpool.export(model, inside)
    assert exported == {}


def test_export_refuses_an_output_that_is_not_a_path(run_dir):
    with pytest.raises(TypeError, match=r"^output must be a file path \(str or pathlib.Path\), got None"):
        attnpool.export(run_dir, None)


def test_export_names_its_fold_argument_with_a_one_number_example(run_dir, tmp_path):
    with pytest.raises(ValueError) as raised:
        attnpool.export(run_dir, tmp_path / "m.onnx", fold="0")
    assert str(raised.value) == ("fold '0' is not a fold number: export writes one fold's model; give one whole "
                                 "number, e.g. fold=0 (--fold 0), or leave fold out for the run's first trained fold")
    assert not (tmp_path / "m.onnx").exists()


def test_export_reports_an_unknown_keyword_as_its_own(run_dir, tmp_path):
    with pytest.raises(TypeError) as raised:
        attnpool.export(run_dir, tmp_path / "m.onnx", folds=0)
    assert str(raised.value) == ("export() got an unexpected keyword argument 'folds' (did you mean fold?); its "
                                 "options: fold, with_weights, opset, tokenizer, save_tokenizer, verify, "
                                 "verify_inputs, atol, external_data")


def test_export_lists_its_options_in_its_docstring():
    for name in ("fold", "with_weights", "opset", "tokenizer", "save_tokenizer", "verify", "verify_inputs", "atol",
                 "external_data"):
        assert f"``{name}``" in api.export.__doc__


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"epochs": 7, "train_file": "train.csv"}))
    return path


def test_train_and_compare_take_the_config_as_a_keyword(recipe, tmp_path, monkeypatch):
    called = {}
    monkeypatch.setattr(api, "_train", lambda cfg, callbacks=None, given=None: called.setdefault("train", cfg))
    monkeypatch.setattr(api, "_compare", lambda cfg, specs, seeds, **kw: called.setdefault("compare", (cfg, kw)))
    attnpool.train(config=str(recipe), output_dir=str(tmp_path / "run"))
    attnpool.compare(config=recipe, poolings=["mean"], output_dir=tmp_path / "cmp")
    assert called["train"].epochs == 7 and called["train"].output_dir == str(tmp_path / "run")
    cfg, kw = called["compare"]
    assert cfg.epochs == 7 and kw["config_file"] == recipe


def test_a_config_given_twice_is_refused():
    with pytest.raises(TypeError) as raised:
        attnpool.train("first.yaml", config="other.yaml")
    assert str(raised.value) == ("train() got the config twice, as its first argument ('first.yaml') and as config= "
                                 "('other.yaml'): give one of them, e.g. attnpool.train('recipe.yaml', ...)")
