"""The Python API's arguments of the wrong kind: a ``pathlib.Path`` is a path, anything else is refused clearly."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import attnpool
from attnpool import AttnPoolForSequenceClassification, options
from attnpool.options import ConfigError, typed_value
from attnpool.runs import Run
from model_helpers import save_tiny_encoder, tiny_tokenizer, write_toy_csv


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("types")
    save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=16, seed=0)
    write_toy_csv(folder / "test.csv", n=4, seed=1)
    return folder


def _recipe(folder: Path) -> dict:
    return {"text_cols": ["first", "second"], "folds": 2, "only_folds": [0], "epochs": 1, "max_length": 16,
            "batch_size": 8, "pooling_options": {"attn_size": 8}, "precision": "fp32"}


def test_train_takes_pathlib_paths_for_its_path_options(folder):
    values = {**_recipe(folder), "train_file": folder / "train.csv", "model": folder / "encoder"}
    result = attnpool.train(values, output_dir=folder / "run", valid_file=folder / "test.csv")
    saved = Run.open(folder / "run").config()
    assert [f["fold"] for f in result.metrics["folds"]] == [0]
    assert isinstance(saved.train_file, str) and Path(saved.train_file).name == "train.csv"
    assert isinstance(saved.model, str) and isinstance(saved.valid_file, str)
    config = attnpool.TrainConfig(**{**_recipe(folder), "train_file": folder / "train.csv",
                                     "model": folder / "encoder", "output_dir": folder / "run2"})
    assert attnpool.train(config).metrics["folds"][0]["fold"] == 0


def test_a_path_is_text_for_a_text_option_and_a_dataframe_is_named_by_its_type():
    assert typed_value("train_file", str, Path("data/train.csv"), "config") == str(Path("data/train.csv"))
    frame = pd.DataFrame({"first": ["a b"] * 500, "label": [0.5] * 500})
    with pytest.raises(ConfigError) as err:
        typed_value("train_file", str, frame, "config")
    message = str(err.value)
    assert "train_file must be text, got a DataFrame" in message and "df.to_csv(" in message
    assert len(message) < 300 and "\n" not in message
    with pytest.raises(TypeError, match=r"input_file must be a file path \(str or pathlib.Path\), got a DataFrame; "
                                        r".*df.to_csv\("):
        options.file_path(frame, "input_file")
    with pytest.raises(TypeError, match="output_file must be a file path .*, got None"):
        options.file_path(None, "output_file")


def test_train_refuses_a_dataframe_as_train_file_by_its_type(folder, tmp_path):
    frame = pd.read_csv(folder / "train.csv")
    with pytest.raises(ConfigError) as err:
        attnpool.train({**_recipe(folder), "train_file": frame, "model": str(folder / "encoder")},
                       output_dir=tmp_path / "run")
    assert "train_file must be text, got a DataFrame" in str(err.value) and "df.to_csv(" in str(err.value)
    assert "label" not in str(err.value) and len(str(err.value)) < 300  # no table pasted into the message


@pytest.mark.parametrize("config", [5, ["train.csv"], pd.DataFrame({"a": [1]})])
def test_train_refuses_a_config_of_another_kind(config):
    with pytest.raises(TypeError, match=f"config must be a TrainConfig, a mapping of its fields, a config file path "
                                        fr"\(YAML/JSON\) or None, got {type(config).__name__}$"):
        attnpool.train(config)


def test_predict_and_explain_file_refuse_a_dataframe_as_input_before_anything_else(folder, tmp_path):
    frame = pd.read_csv(folder / "test.csv")
    with pytest.raises(TypeError, match="input_file must be a file path .*got a DataFrame.*df.to_csv"):
        attnpool.predict(tmp_path / "no-run", frame, tmp_path / "out.csv")
    with pytest.raises(TypeError, match="output_file must be a file path .*got None"):
        attnpool.predict(tmp_path / "no-run", folder / "test.csv", None)
    with pytest.raises(TypeError, match="input_file must be a file path .*got a DataFrame.*df.to_csv"):
        attnpool.explain_file(tmp_path / "no-run", frame, tmp_path / "report.html")


def test_explain_refuses_a_folder_path_for_the_model_and_points_to_explain_file(tmp_path):
    with pytest.raises(TypeError, match=r"explain: model must be a loaded model \(a torch.nn.Module\), got str "
                                        r"'folder/model'; load it first with .*from_pretrained.*explain_file\("):
        attnpool.explain("folder/model", tiny_tokenizer(), ["the cat"])
    with pytest.raises(TypeError, match=r"model must be a loaded model \(a torch.nn.Module\), got int 3$"):
        attnpool.explain(3, tiny_tokenizer(), ["the cat"])


def test_explain_file_takes_one_column_name_as_that_column(folder, tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(str(folder / "encoder"), pooling_options={"attn_size": 8})
    model.save_pretrained(tmp_path / "model", tokenizer=tiny_tokenizer())
    explanation = attnpool.explain_file(tmp_path / "model", folder / "test.csv", tmp_path / "report.html",
                                        text_cols="first", limit=2, erasure_k=1, device="cpu")
    rows = pd.read_csv(folder / "test.csv")
    assert len(explanation.examples) == 2 and explanation.examples[0].text == rows["first"][0]


@pytest.mark.parametrize(("seconds", "error", "message"), [
    ("x", TypeError, "demo: seconds must be a positive number of seconds, got str 'x'"),
    (True, TypeError, "got bool True"),
    (0, ValueError, "demo: seconds must be a positive number of seconds, got 0"),
    (float("nan"), ValueError, "got nan"),
])
def test_demo_refuses_seconds_that_are_not_a_positive_number(tmp_path, seconds, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        attnpool.demo(output_dir=tmp_path / "demo", seconds=seconds)
    assert not (tmp_path / "demo").exists()
