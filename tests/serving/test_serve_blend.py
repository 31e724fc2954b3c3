"""Serving a blend of runs: its answers are ``predict --run A B``'s for the same rows, a row takes every run's fields,
the word weights are the first run's, and what cannot be blended is refused before anything is served."""

from __future__ import annotations

import json

import numpy as np
import pytest
from serve_helpers import Server

from attnpool.data import read_table
from attnpool.prediction import predict
from attnpool.runs import RunError
from attnpool.serving import BlendService, Service
from attnpool.serving.blend import load_service
from attnpool.serving.page import render_page
from model_helpers import add_oof, make_run, save_tiny_encoder, write_toy_csv

TEMPLATE = "{first} [SEP] {second} [SEP] {note}"  # the second run reads a field the first does not


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("blend")
    encoder = save_tiny_encoder(base / "encoder")
    a = add_oof(make_run(base / "a", encoder, seed=0), center=0.5, scale=0.1, seed=1)
    b = add_oof(make_run(base / "b", encoder, seed=10, text_cols=None, template=TEMPLATE), center=0.2, scale=0.02,
                seed=2)
    binary = add_oof(make_run(base / "binary", encoder, task="binary", classes=["neg", "pos"]), "binary",
                     ["neg", "pos"], seed=3)
    frame = write_toy_csv(base / "test.csv", n=7, seed=1).drop(columns=["label"])
    frame["note"] = ["a short note", "", "cat", "red dog", "tree", "the mat", "x"]
    frame.to_csv(base / "test.csv", index=False)
    predicted = read_table(predict([a, b], base / "test.csv", base / "blend.csv", blend_weights=[1, 3],
                                   precision="fp32", progress=False).output, text_columns=["id"])
    rows = [{"first": r.first, "second": r.second, "note": r.note or "", "id": r.id} for r in frame.itertuples()]
    return {"a": a, "b": b, "binary": binary, "rows": rows, "predicted": predicted, "base": base}


def test_a_blend_answers_what_predict_writes_and_the_first_runs_words(setup):
    service = BlendService.load_blend([setup["a"], setup["b"]], blend_weights=[1, 3], precision="fp32")
    assert service.fields == ["first", "second", "note"] and service.id_field == "id"
    answer = service.run([service.encode(setup["rows"], texts=True)], batch_size=3)[0]
    np.testing.assert_allclose(answer.scores, setup["predicted"]["prediction"], rtol=1e-5, atol=1e-6)
    alone = Service.load(setup["a"], precision="fp32")
    first = alone.run([alone.encode(setup["rows"], texts=True)], batch_size=3)[0]
    assert answer.words == first.words
    assert all(abs(sum(w["weight"] for w in words) - 1) < 1e-5 for words in answer.words)
    assert not np.allclose(answer.scores, first.scores)  # the second run counts
    info = service.info()
    assert info["source"] == "blend" and [r["weight"] for r in info["runs"]] == [0.25, 0.75]
    assert [r["run"] for r in info["runs"]] == ["a", "b"] and info["folds"] == [0, 1]  # no server path to clients
    assert info["encoder"] == "encoder" and {r["encoder"] for r in info["runs"]} == {"encoder"}
    body = service.respond(answer, [row["id"] for row in setup["rows"]])
    assert [p["id"] for p in body["predictions"]] == list(setup["predicted"]["id"])
    assert service.describe().startswith("a blend of 2 runs")
    assert service.describe(public=True) == "a blend of 2 runs (a, b)"
    assert str(setup["a"].parent) not in json.dumps(info) + render_page(info)[0]


def test_what_cannot_be_blended_is_refused_with_the_reason(setup, tmp_path):
    with pytest.raises(RunError, match=r"cannot blend .*a \(regression\) with .*binary \(binary\)"):
        load_service([setup["a"], setup["binary"]], precision="fp32")
    model = tmp_path / "model"
    Service.load(setup["a"]).ensemble.models[0].save_pretrained(model)
    with pytest.raises(RunError, match=r"model is not a train run: a blend serves the --output-dir of attnpool "
                                       r"train .*serve a model folder alone"):
        load_service([setup["a"], model])
    with pytest.raises(ValueError, match=r"\(--blend-weights\) weighs the runs of a blend: give two or more runs"):
        load_service(setup["a"], blend_weights=[1.0])
    with pytest.raises(ValueError, match=r"one non-negative number per run \(2 runs\)"):
        load_service([setup["a"], setup["b"]], blend_weights=[1.0, -1.0])
    assert type(load_service([setup["a"]])) is Service  # one run in a list is that run
    with pytest.raises(ValueError, match=r"\(--blend-weights\) weighs the runs of a blend: give two or more runs"):
        load_service([setup["a"]], blend_weights=[1.0])
    with pytest.raises(RunError, match=r"^--run names one run twice, as .*a and as .*a/: it would count twice"):
        load_service([setup["a"], setup["b"], f"{setup['a']}/"])  # was served at twice its weight


def test_serve_cli_blends_over_http(setup):
    """Under -q too, whose server never said on which port it listened (the helper reads it from that line)."""
    server = Server("--run", str(setup["a"]), str(setup["b"]), "--blend-weights", "1", "3", "--precision", "fp32",
                    "-q")
    try:
        status, _, body = server.request("POST", "/predict", {"rows": setup["rows"]})
        assert status == 200, body
        served = [p["prediction"] for p in body["predictions"]]
        np.testing.assert_allclose(served, setup["predicted"]["prediction"], rtol=1e-5, atol=1e-6)
        status, _, body = server.request("POST", "/predict", {"rows": [{"first": "cat", "second": "dog"}]})
        assert status == 422 and "note" in str(body), body  # the second run's field is a field of the blend
        info = server.request("GET", "/info")[2]
        assert info["fields"] == ["first", "second", "note"] and len(info["runs"]) == 2
        status, _, page = server.request("GET", "/")
        assert status == 200 and "a blend of 2 runs (word weights from the first)" in str(page), str(page)[:500]
        assert "a blend of 2 runs" in server.output
    finally:
        server.stop()


def test_a_run_given_as_dot_is_named_by_its_folder(tmp_path, monkeypatch):
    """serve --run . (started inside the run) described itself as "2 fold(s) of ."."""
    from attnpool.serving.service import public_name

    (tmp_path / "my-run").mkdir()
    monkeypatch.chdir(tmp_path / "my-run")
    assert public_name(".") == public_name(tmp_path / "my-run" / "sub" / "..") == "my-run"
    assert public_name("microsoft/deberta-v3-large") == "microsoft/deberta-v3-large"  # a hub name, as it is
