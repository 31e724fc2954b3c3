"""Reading defects found in review: Parquet range-index ids in chunks, JSONL errors, a header ending in a delimiter."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnpool.data import iter_table, read_table
from attnpool.data.errors import DataError
from attnpool.data.readers import table_columns

pytest.importorskip("pyarrow")


def _range_parquet(path, index: pd.RangeIndex):
    frame = pd.DataFrame({"first": [f"the cat {i}" for i in range(len(index))], "second": ["a dog"] * len(index)},
                         index=index)
    frame.to_parquet(path)
    return path


def test_parquet_range_index_ids_are_kept_in_every_chunk(tmp_path):
    """A named RangeIndex is only schema metadata: a chunk (a slice) lost it, so predict wrote no ids."""
    path = _range_parquet(tmp_path / "ids.parquet", pd.RangeIndex(100, 105, name="id"))
    assert read_table(path)["id"].tolist() == [100, 101, 102, 103, 104]
    chunks = list(iter_table(path, 2))
    assert [c.columns.tolist() for c in chunks] == [["id", "first", "second"]] * 3
    assert [c["id"].tolist() for c in chunks] == [[100, 101], [102, 103], [104]]
    assert [c["first"].tolist()[0] for c in chunks] == ["the cat 0", "the cat 2", "the cat 4"]
    assert table_columns(path) == ["id", "first", "second"]
    assert [c["id"].tolist() for c in iter_table(path, 10)] == [[100, 101, 102, 103, 104]]  # one chunk: the whole
    stepped = _range_parquet(tmp_path / "step.parquet", pd.RangeIndex(10, 20, 2, name="key"))
    assert [c["key"].tolist() for c in iter_table(stepped, 3)] == [[10, 12, 14], [16, 18]]
    assert read_table(stepped)["key"].tolist() == [10, 12, 14, 16, 18]
    unnamed = _range_parquet(tmp_path / "unnamed.parquet", pd.RangeIndex(0, 5))
    assert [c.columns.tolist() for c in iter_table(unnamed, 2)] == [["first", "second"]] * 3


def test_predict_in_chunks_smaller_than_a_parquet_file_keeps_its_range_index_ids(tmp_path):
    from attnpool.prediction.predict import predict
    from model_helpers import make_run, save_tiny_encoder

    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"))
    path = _range_parquet(tmp_path / "ids.parquet", pd.RangeIndex(100, 105, name="id"))
    for chunk_rows in (10, 2):
        out = tmp_path / f"out_{chunk_rows}.jsonl"
        predict(run, path, out, chunk_rows=chunk_rows, progress=False, device="cpu")
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r.get("id") for r in rows] == [100, 101, 102, 103, 104], chunk_rows  # integers, as in the file


def test_jsonl_parse_errors_read_alike_whole_and_in_chunks(tmp_path):
    """iter_table kept the line's "\\n" (a JSON error of another column), and "starting at at column" doubled."""
    path = tmp_path / "trunc.jsonl"
    path.write_text('{"id":1,"text":"a"}\n{"id":2,"text":"b"}\n{"id":3,"text":"abc\n')
    messages = []
    for read in (lambda: read_table(path), lambda: list(iter_table(path, 2)), lambda: list(iter_table(path, 1))):
        with pytest.raises(DataError) as caught:
            read()
        messages.append(str(caught.value))
    assert messages[0] == messages[1] == messages[2]
    assert messages[0].startswith(f"{path}: line 3 is not valid JSON (Unterminated string starting at column 16); "
                                  "a .jsonl file holds one JSON object per line")
    path.write_text('{"id":1,"text":"a"}\n{"id":2 "text":"b"}\n')
    for read in (lambda: read_table(path), lambda: list(iter_table(path, 1))):
        with pytest.raises(DataError, match=r"line 2 is not valid JSON \(Expecting ',' delimiter at column 9\); "):
            read()


@pytest.mark.parametrize("sep, suffix", [(",", ".csv"), ("\t", ".tsv")])
def test_a_header_ending_in_a_delimiter_is_named(tmp_path, sep, suffix):
    """`id,text,label,` over 3-field rows was refused with advice about a line break inside an unquoted text."""
    path = tmp_path / f"th{suffix}"
    path.write_text(sep.join(["id", "text", "label", ""]) + "\n" + "\n".join(sep.join(r) for r in
                                                                          (["1", "a", "1"], ["2", "b", "0"])) + "\n")
    expected = (f"{path}: the header ends with a delimiter ({sep!r}): an unnamed last column, 4 fields, while data "
                "row 1 (line 2) has 3. Remove the delimiter ending the header line")
    for read in (lambda: read_table(path), lambda: list(iter_table(path, 1))):
        with pytest.raises(DataError) as caught:
            read()
        assert str(caught.value) == expected
    short = tmp_path / "short.csv"  # a row two fields short: not the header's delimiter
    short.write_text("id,text,label,\n1,a,1,\n2,b\n")
    with pytest.raises(DataError, match=r"data row 2 \(line 3\) has 2 field\(s\) and the header 4; .* line break"):
        read_table(short)
