"""The id column of `predict`'s output: integer ids of typed files stay integers (so predictions join back to the
input), an input lacking the run's id column is warned about, and labels the run never saw are named with their rows.
"""

from __future__ import annotations

import functools
import json
import logging
import re

import pandas as pd
import pyarrow.parquet as pq
import pytest

from attnpool.cli import main
from attnpool.data import DataError
from attnpool.prediction import predict
from attnpool.runs import Run
from model_helpers import make_run, save_tiny_encoder, write_toy_csv

predict = functools.partial(predict, precision="fp32", progress=False, threads=1)
ROWS, CHUNK = 7, 3  # 3 chunks, the last one short


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def run(encoder, tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs") / "regression", encoder, folds=1)


@pytest.fixture(scope="module")
def binary_run(encoder, tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs") / "binary", encoder, task="binary", classes=["neg", "pos"],
                    folds=1)


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    """Toy rows with int64 ids (not 0..n-1: a join on the row number would not pass for one on the id)."""
    rows = write_toy_csv(tmp_path_factory.mktemp("toy") / "toy.csv", n=ROWS).drop(columns=["label"])
    return rows.assign(id=[1000 + 7 * i for i in range(ROWS)])


@pytest.mark.parametrize("output", ["pred.parquet", "pred.csv", "pred.jsonl"])
@pytest.mark.parametrize("chunk_rows", [CHUNK, 100])
def test_int64_parquet_ids_stay_integers_and_join_back_to_the_input(run, frame, tmp_path, output, chunk_rows):
    """They were read as text: "1000" in the output, and `pd.merge` on the id refused int64 against object."""
    data = tmp_path / "in.parquet"
    frame.to_parquet(data, index=False)
    out = predict(run, data, tmp_path / output, chunk_rows=chunk_rows).output
    pred = (pd.read_parquet(out) if out.suffix == ".parquet" else
            pd.read_json(out, lines=True) if out.suffix == ".jsonl" else pd.read_csv(out))
    assert pred["id"].dtype == "int64" and pred["id"].tolist() == frame["id"].tolist()
    joined = pd.merge(frame, pred, on="id", validate="one_to_one")
    assert len(joined) == ROWS and joined["prediction"].notna().all()
    if out.suffix == ".jsonl":
        assert out.read_text().startswith('{"id":1000,')


def test_parquet_integer_ids_with_missing_values_stay_integers(run, frame, tmp_path):
    data = tmp_path / "in.parquet"
    frame.assign(id=pd.array([None, *frame["id"][1:]], dtype="Int64")).to_parquet(data, index=False)
    out = predict(run, data, tmp_path / "pred.parquet", chunk_rows=CHUNK).output
    assert str(pq.read_schema(out).field("id").type) == "int64"  # pandas reads it as float64 (NaN), or Int64
    pred = pd.read_parquet(out)
    assert pred["id"].isna().tolist() == [True] + [False] * (ROWS - 1)
    assert pred["id"][1:].astype(int).tolist() == frame["id"][1:].tolist()
    csv = predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK).output.read_text().splitlines()
    assert [line.split(",")[0] for line in csv[1:3]] == ["", "1007"]  # not 1007.0


def test_parquet_float_ids_of_whole_numbers_stay_integers(run, frame, tmp_path):
    """pandas writes an integer id column with a NaN as float64: predict wrote "1007.0" in every output format, ids
    that no longer joined back to the input; fractions stay as they were (text)."""
    data = tmp_path / "in.parquet"
    ids = [None, *map(float, frame["id"][1:])]
    frame.assign(id=ids).to_parquet(data, index=False)
    assert str(pq.read_schema(data).field("id").type) == "double"
    parquet = predict(run, data, tmp_path / "pred.parquet", chunk_rows=CHUNK).output
    assert str(pq.read_schema(parquet).field("id").type) == "int64"
    assert pd.read_parquet(parquet)["id"][1:].astype(int).tolist() == frame["id"][1:].tolist()
    csv = predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK).output.read_text().splitlines()
    assert [line.split(",")[0] for line in csv[1:4]] == ["", "1007", "1014"]
    jsonl = predict(run, data, tmp_path / "pred.jsonl", chunk_rows=CHUNK).output.read_text().splitlines()
    assert [json.loads(line)["id"] for line in jsonl[:3]] == [None, 1007, 1014]
    frame.assign(id=[0.5, *ids[1:]]).to_parquet(data, index=False)  # a fraction: no integer column
    csv = predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK).output.read_text().splitlines()
    assert [line.split(",")[0] for line in csv[1:3]] == ["0.5", "1007.0"]


@pytest.mark.parametrize("chunk_rows", [CHUNK, 100])
def test_jsonl_integer_ids_stay_integers(run, frame, tmp_path, chunk_rows):
    """JSONL `"id": 1000` came back as `"id":"1000"`."""
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict("records")))
    out = predict(run, data, tmp_path / "pred.jsonl", chunk_rows=chunk_rows).output
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == frame["id"].tolist() and all(type(i) is int for i in ids)
    parquet = pd.read_parquet(predict(run, data, tmp_path / "pred.parquet", chunk_rows=chunk_rows).output)
    assert parquet["id"].dtype == "int64" and pd.merge(frame, parquet, on="id").shape[0] == ROWS


def test_jsonl_ids_of_mixed_types_across_chunks_are_text_in_every_output(run, frame, tmp_path):
    """7 in the first chunk, "a" in a later one: one type for the whole file, else the Parquet parts did not join."""
    rows = frame.to_dict("records")
    rows[-1]["id"] = "x-1"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    expected = [*map(str, frame["id"][:-1]), "x-1"]
    for name in ("pred.parquet", "pred.csv", "pred.jsonl"):
        out = predict(run, data, tmp_path / name, chunk_rows=CHUNK).output
        pred = (pd.read_parquet(out) if out.suffix == ".parquet" else
                pd.read_json(out, lines=True, dtype={"id": str}) if out.suffix == ".jsonl"
                else pd.read_csv(out, dtype={"id": str}))
        assert pred["id"].tolist() == expected


def test_csv_ids_stay_text(run, frame, tmp_path):
    data = tmp_path / "in.csv"
    frame.assign(id=[f"{i:04d}" for i in range(ROWS)]).to_csv(data, index=False)
    pred = pd.read_csv(predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK).output, dtype=str)
    assert pred["id"].tolist() == [f"{i:04d}" for i in range(ROWS)]


def test_an_input_without_the_id_column_is_warned_about(run, frame, tmp_path, caplog):
    """A header `ID` for the run's `id`: the predictions were written without ids, and nothing said so."""
    data = tmp_path / "in.csv"
    frame.rename(columns={"id": "ID"}).to_csv(data, index=False)
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        out = predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK).output
    assert list(pd.read_csv(out).columns) == ["prediction"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert re.search(r"in\.csv: no id column 'id' \(the run's id column\), but 'ID' differs only in case; the "
                     r"columns present: ID, first, second\. .*match them to the input rows by their order", warnings[0])
    caplog.clear()
    frame.drop(columns=["id"]).to_csv(data, index=False)
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK)
    assert "no id column 'id' (the run's id column); the columns present: first, second." in caplog.text
    assert "differs only in case" not in caplog.text


def test_a_run_trained_without_ids_predicts_a_file_without_them_silently(encoder, frame, tmp_path, caplog):
    run = make_run(tmp_path / "run", encoder, folds=1)
    Run(run).write_info({**Run(run).info(), "id_col": None})  # its training file had no id column
    data = tmp_path / "in.csv"
    frame.drop(columns=["id"]).to_csv(data, index=False)
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK)
    assert "no id column" not in caplog.text
    frame.rename(columns={"id": "Id"}).to_csv(data, index=False)  # but one in another case is named
    with caplog.at_level(logging.WARNING, logger="attnpool.predict"):
        predict(run, data, tmp_path / "pred.csv", chunk_rows=CHUNK)
    assert "'Id' differs only in case" in caplog.text


def test_the_cli_prints_the_missing_id_warning(run, frame, tmp_path, capsys):
    data = tmp_path / "in.csv"
    frame.rename(columns={"id": "ID"}).to_csv(data, index=False)
    argv = ["predict", "--run", str(run), "--input", str(data), "--output", str(tmp_path / "pred.csv"),
            "--precision", "fp32", "--threads", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "no id column 'id'" in err and "'ID' differs only in case" in err and "by their order" in err


@pytest.mark.parametrize("chunk_rows", [2, 100])
def test_unseen_labels_are_named_with_their_data_rows_and_the_fix(binary_run, frame, tmp_path, chunk_rows):
    """The message named the labels only: not where they are in a large file, nor that predict needs no labels."""
    labels = ["pos", "neg", "pos", "neg", "maybe", "pos", "maybe"]  # data rows 5 and 7 (chunks of 2: 3rd and 4th)
    data = tmp_path / "in.csv"
    frame.assign(label=labels).to_csv(data, index=False)
    with pytest.raises(DataError) as err:
        predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=chunk_rows)
    message = str(err.value)
    rows = "5" if chunk_rows == 2 else "5, 7"  # chunked, the first chunk holding one stops the prediction
    assert re.search(rf"in\.csv: column 'label' has labels the model never saw in training: maybe \(data rows "
                     rf"{rows}\); known labels: neg, pos\. predict does not need the label column: remove or rename "
                     r"it, or fix those labels$", message), message


def test_unseen_label_rows_are_the_files_rows_in_a_later_chunk(binary_run, frame, tmp_path):
    labels = ["pos", "neg", "pos", "maybe", "pos", "other", "neg"]  # data rows 4 and 6: the 2nd chunk of 3 rows
    data = tmp_path / "in.jsonl"
    frame.assign(label=labels).to_json(data, orient="records", lines=True)
    with pytest.raises(DataError, match=r"never saw in training: maybe, other \(data rows 4, 6\); known labels"):
        predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=CHUNK)
    many = ["maybe"] * ROWS
    frame.assign(label=many).to_json(data, orient="records", lines=True)
    with pytest.raises(DataError, match=r"never saw in training: maybe \(data rows 1, 2, 3\); known"):
        predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=CHUNK)
    with pytest.raises(DataError, match=r"never saw in training: maybe \(data rows 1, 2, 3, 4, 5 and 2 more\); known"):
        predict(binary_run, data, tmp_path / "pred.csv", chunk_rows=100)
