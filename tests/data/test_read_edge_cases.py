"""read_table and iter_table on files that read wrongly without an error: valid TSV quoting refused as a stray
quote, a key or column named twice, blank lines of a one-column file dropped with their rows."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from attnpool.data import DataError, build_texts, iter_table, read_table, write_table


def read(path, chunked: bool, chunk_rows: int = 2) -> pd.DataFrame:
    return pd.concat(iter_table(path, chunk_rows)) if chunked else read_table(path)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_tsv_that_reads_both_with_and_without_quoting_is_refused_naming_both(tmp_path, chunked):
    """Every line has the header's fields and the quotes are valid: two stray quotes merged rows without a word."""
    path = tmp_path / "letters.tsv"
    path.write_text('text\tlabel\n"Hello world\t1\nfoo\t0\npipe is 12"\t1\nbar\t0\n')  # GLUE style, 4 rows
    with pytest.raises(DataError, match=r"letters.tsv: data row 1, column 'text' \(starting 'Hello world\\t1'\) "
                                        r"holds 2 line break\(s\), and the file reads two ways: with CSV quoting.*"
                                        r"or without quoting.*Save texts holding tabs and line breaks as CSV"):
        read(path, chunked)
    frame = pd.DataFrame({"label": [1, 0], "text": ["Dear team,\nName:\tJohn Smith", "no tabs here"]})
    write_table(frame, path)  # a quoted text whose lines each hold the header's fields: the same two readings
    with pytest.raises(DataError, match="reads two ways"):
        read(path, chunked)
    frame = pd.DataFrame({"label": [1, 0], "text": ['say "hi"\nand go', "a\ttab"]})
    write_table(frame, path)  # a line break without a tab in its field: lines of other lengths, read as quoted
    assert read(path, chunked)["text"].tolist() == frame["text"].tolist()
    path.write_text('text\tlabel\nok\t0\n"Great film\t1\nmeh\t0\n"bad" one\t1\n')  # not valid quoting
    with pytest.raises(DataError, match=r"letters.tsv: data row 2, column 'text' \(starting 'Great film\\t1'\) "
                                        r"holds 2 line break\(s\): .*its quotes are not valid CSV quoting"):
        read(path, chunked)
    path.write_text('text\tlabel\nok\t0\n"Great film\t1\nmeh\t0\n')  # a quote never closed
    with pytest.raises(DataError, match="letters.tsv: "):
        read(path, chunked)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_jsonl_key_named_twice_is_refused_not_overwritten(tmp_path, chunked):
    """json.loads kept the last value: the text read was "" and the review was lost without a word."""
    path = tmp_path / "dup.jsonl"
    path.write_text('{"text": "ok", "label": 0}\n{"text": "the review", "label": 1, "text": ""}\n')
    with pytest.raises(DataError, match=re.escape(
            "dup.jsonl: line 2 names key 'text' twice in one object (its keys 1 and 3); which value holds the data "
            "is ambiguous. Rename or drop one of them")):
        read(path, chunked, chunk_rows=1)
    path.write_text('{"text": "ok", "label": 0, "meta": {"text": 1}}\n')  # the same key in a nested object: fine
    assert read(path, chunked)["text"].tolist() == ["ok"]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_parquet_column_named_twice_is_refused_like_csv(tmp_path, chunked):
    """read_table called it an incomplete file; iter_table raised ValueError or AttributeError of pandas."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table([pa.array(["a", "b"]), pa.array(["c", "d"]), pa.array([0, 1])],
                            names=["text", "label", "text"]), path)
    with pytest.raises(DataError, match=re.escape(
            "dup.parquet: the Parquet schema names column 'text' twice (columns 1 and 3); which one holds the data "
            "is ambiguous. Rename or drop one of them")):
        read(path, chunked) if not chunked else list(iter_table(path, 1, text_columns=["text"]))


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(("name", "newline"), [("texts.tsv", "\n"), ("texts.csv", "\r\n"), ("texts.csv", "\n")])
def test_a_blank_line_of_a_one_column_file_is_a_missing_text_not_a_lost_row(tmp_path, chunked, name, newline):
    """pandas skipped it: predict wrote fewer rows than the file has, and no empty-text warning was given."""
    path = tmp_path / name
    lines = ["", "", "text", "first review", "", "  ", "fourth review  ", "", " ", ""]  # blank lines around too
    path.write_bytes(("\ufeff" + newline.join(lines)).encode())
    for chunk_rows in (1, 2, 10):
        out = read(path, chunked, chunk_rows)
        assert list(out.columns) == ["text"] and out.index.tolist() == [0, 1, 2, 3]
        assert out["text"].tolist()[0::2] == ["first review", "  "] and out["text"].isna().tolist()[1]
        assert out["text"].tolist()[3] == "fourth review  "  # a text's own spaces stay
    assert build_texts(out, "text").num_empty == 2  # what predict's empty-text warning counts
    sep = "\t" if name.endswith(".tsv") else ","
    path.write_text(f"text{sep}label\na{sep}1\n\nb{sep}0\n\n")  # several columns: a blank line is no row, as before
    assert read(path, chunked)["text"].tolist() == ["a", "b"]


def test_bad_bytes_after_leading_blank_lines_are_placed_on_their_line(tmp_path):
    """A one-column file is read from its header on: the lines skipped before it still count."""
    path = tmp_path / "t.csv"
    data = b"\n \ntext\n" + b"fine\n" * 250_000 + b"caf\xe9\n"  # past the first block the header is read from
    path.write_bytes(data)
    message = f"t.csv: not valid UTF-8: byte(s) e9 at byte offset {len(data) - 2} (line 250004)"
    for read_it in (lambda: read_table(path), lambda: list(iter_table(path, 100_000))):
        with pytest.raises(DataError, match=re.escape(message)):
            read_it()


def test_a_one_column_file_of_blank_lines_has_no_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text\n\n\n")
    for read_it in (lambda: read_table(path), lambda: list(iter_table(path, 1))):
        with pytest.raises(DataError, match=r"t.csv: no data rows \(columns: text\)"):
            read_it()
    path.write_text("n\n1\n\n3\n")  # a missing number: a float column, as with several columns
    assert read_table(path)["n"].tolist()[0::2] == [1.0, 3.0] and np.isnan(read_table(path)["n"].iloc[1])
