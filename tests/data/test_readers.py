"""read_table: every format round-trips with text kept as text; bad files raise DataError saying what, where, how."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from attnpool.data import SUPPORTED_EXTENSIONS, DataError, iter_table, read_table, table_columns

FRAME = pd.DataFrame(
    {
        "id": ["0001", "0002", "0100"],  # leading zeros: must stay strings
        "text": ["a, b", 'say "hi"\nthere', "NA"],  # delimiter, quotes, newline, a word pandas reads as missing
        "score": [0.5, 1.0, 0.0],
        "label": [1, 0, 2],
    }
)


def write(frame: pd.DataFrame, path) -> None:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path, index=False)


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.jsonl", "t.parquet", "T.CSV"])
def test_round_trip_keeps_strings_and_numbers(tmp_path, name):
    write(FRAME, tmp_path / name)
    out = read_table(tmp_path / name)
    assert list(out.columns) == list(FRAME.columns)
    assert out["id"].tolist() == ["0001", "0002", "0100"]
    assert out["text"].tolist() == FRAME["text"].tolist()
    assert out["score"].dtype == np.float64 and out["score"].tolist() == [0.5, 1.0, 0.0]
    assert out["label"].dtype == np.int64 and out["label"].tolist() == [1, 0, 2]


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.jsonl", "t.parquet"])
def test_table_columns_reads_the_header(tmp_path, name):
    write(FRAME, tmp_path / name)
    assert table_columns(tmp_path / name) == list(FRAME.columns)
    with pytest.raises(DataError, match="absent.csv"):
        table_columns(tmp_path / "absent.csv")


def test_supported_extensions():
    assert SUPPORTED_EXTENSIONS == (".csv", ".tsv", ".jsonl", ".parquet")


def test_csv_numeric_detection(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "code,sci,gaps,huge,special,word,signed\n"
        "007,1e-3,1,12345678901234567890123,inf,null,+3\n"
        "8,2,,1,0.5,None,-4\n"
    )
    out = read_table(path)
    assert out["code"].tolist() == ["007", "8"]  # a leading zero makes the column text
    assert out["sci"].dtype == np.float64 and out["sci"].tolist() == [1e-3, 2.0]
    assert out["gaps"].dtype == np.float64 and out["gaps"].iloc[0] == 1.0 and np.isnan(out["gaps"].iloc[1])
    assert out["huge"].tolist() == ["12345678901234567890123", "1"]  # would not fit int64: exact digits kept
    assert out["special"].tolist() == [np.inf, 0.5]
    assert out["word"].tolist() == ["null", "None"]  # only an empty field is missing
    assert out["signed"].tolist() == [3, -4]


def test_empty_field_is_missing_and_bom_is_dropped(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffid,text\n1,\n2,x\n".encode())
    out = read_table(path)
    assert list(out.columns) == ["id", "text"]
    assert out["text"].isna().tolist() == [True, False]


def test_jsonl_keeps_lists_and_skips_blank_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "0001", "tags": ["a", "b"]}\n\n{"id": "0002", "tags": []}\n')
    out = read_table(path)
    assert out["id"].tolist() == ["0001", "0002"]
    assert out["tags"].tolist() == [["a", "b"], []]


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(DataError, match=r"nope\.csv: no such file .*check the path"):
        read_table(tmp_path / "nope.csv")


def test_folder_is_not_a_file(tmp_path):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(DataError, match=r"d\.csv: is a folder, not a file"):
        read_table(tmp_path / "d.csv")


def test_unknown_extension_lists_supported(tmp_path):
    path = tmp_path / "train.xlsx"
    path.write_text("a\n1\n")
    msg = "train.xlsx: unsupported file extension '.xlsx'; supported extensions: .csv, .tsv, .jsonl, .parquet. Convert"
    with pytest.raises(DataError, match=re.escape(msg)):
        read_table(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.csv", "", "e.csv: the file is empty; it needs a header line and at least one data row"),
        ("e.jsonl", "\n  \n", "e.jsonl: the file is empty"),
        ("e.csv", "a,b\n", "e.csv: no data rows (columns: a, b); the file needs at least one row below its header"),
        ("e.tsv", "a\tb\n", "e.tsv: no data rows (columns: a, b)"),
    ],
)
def test_empty_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=re.escape(message)):
        read_table(path)


def test_empty_parquet(tmp_path):
    path = tmp_path / "e.parquet"
    FRAME.iloc[:0].to_parquet(path)
    with pytest.raises(DataError, match=re.escape("e.parquet: no data rows (columns: id, text, score, label)")):
        read_table(path)


@pytest.mark.parametrize("name", ["latin.csv", "latin.tsv", "latin.jsonl"])
def test_non_utf8_names_offset_and_line(tmp_path, name):
    data = "id,text\n1,ok\n2,caf\u00e9\n".encode("latin-1")
    path = tmp_path / name
    path.write_bytes(data)
    offset = data.index(b"\xe9")
    msg = f"{name}: not valid UTF-8: byte(s) e9 at byte offset {offset} (line 3); re-encode the file as UTF-8"
    with pytest.raises(DataError, match=re.escape(msg)):
        read_table(path)


def test_malformed_jsonl_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3,}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 3 is not valid JSON \(.*\); a \.jsonl file holds one JSON"):
        read_table(path)


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + json.dumps([1, 2]) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2 holds a JSON list, not an object"):
        read_table(path)


def test_csv_parse_error_suggests_quoting(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(DataError, match=r"bad\.csv: could not be parsed as CSV: .*Check the delimiter.*quoting"):
        read_table(path)


def test_corrupt_parquet(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: could not be read as Parquet \(.*\); check that it is"):
        read_table(path)


def test_text_columns_stay_strings_even_when_numeric_looking(tmp_path):
    (tmp_path / "t.csv").write_text("id,n\n4112,7\n1e5,8\n")
    out = read_table(tmp_path / "t.csv", text_columns=["id", "absent"])
    assert out["id"].tolist() == ["4112", "1e5"]
    assert out["n"].tolist() == [7, 8]
    (tmp_path / "t.jsonl").write_text('{"id": 4112, "n": 7}\n{"id": null, "n": 8}\n')
    out = read_table(tmp_path / "t.jsonl", text_columns=["id"])
    assert out["id"].tolist()[0] == "4112" and pd.isna(out["id"].iloc[1])  # a JSON number: as written
    assert out["n"].tolist() == [7, 8]


def test_text_columns_of_a_parquet_file(tmp_path):
    pd.DataFrame({"id": [7, 8], "tags": [["a"], ["b", "c"]]}).to_parquet(tmp_path / "t.parquet")
    out = read_table(tmp_path / "t.parquet", text_columns=(c for c in ["id"]))
    assert out["id"].tolist() == ["7", "8"]
    assert [list(t) for t in out["tags"]] == [["a"], ["b", "c"]]


@pytest.mark.parametrize("chunked", [False, True])
def test_an_unquoted_tsv_whose_text_starts_with_a_quote_is_refused_not_merged(tmp_path, chunked):
    """GLUE-style TSV has no quoting: a leading " opened a quoted section that swallowed the next rows silently."""
    path = tmp_path / "reviews.tsv"
    path.write_text('text\tlabel\nok\t0\nfine\t1\n"Great film\t1\nmeh\t0\n"bad" one\t1\nlast\t0\n')
    with pytest.raises(DataError, match=r"reviews.tsv: data row 3, column 'text' \(starting 'Great film\\t1'\) holds "
                                        r"2 line break\(s\): a double quote at the start of a field opened a quoted "
                                        r"section that merged the next lines into this row, yet every line of the file "
                                        r"has the header's 2 field\(s\)"):
        list(iter_table(path, 2, text_columns={"text"})) if chunked else read_table(path)
    # a quoted field may hold a tab (as pandas writes it): read as written
    pd.DataFrame({"text": ["a\tb", 'say "hi"'], "label": [1, 2]}).to_csv(path, sep="\t", index=False)
    assert read_table(path)["text"].tolist() == ["a\tb", 'say "hi"']


def test_parquet_integers_with_a_null_read_as_text_like_csv(tmp_path):
    """pyarrow made int64 with nulls float64: the id 4112 became "4112.0" as text, unlike the same CSV or JSONL."""
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"id": pd.array([4112, None, 7], dtype="Int64"), "text": ["a", "b", "c"], "label": [1, 0, 1]})
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    out = read_table(tmp_path / "t.parquet", text_columns=["id"])
    assert out["id"].tolist()[0::2] == ["4112", "7"] and pd.isna(out["id"].tolist()[1])
    chunks = list(iter_table(tmp_path / "t.parquet", 2, text_columns=["id"]))
    assert [v for c in chunks for v in c["id"].tolist() if not pd.isna(v)] == ["4112", "7"]
    assert out["label"].dtype == np.int64
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array([4112, None, 7], pa.int64()), "text": ["a", "b", "c"]}),
                   tmp_path / "plain.parquet")  # written by pyarrow, without pandas' metadata
    ids = read_table(tmp_path / "plain.parquet", text_columns=["id"])["id"].tolist()
    assert ids[0::2] == ["4112", "7"] and pd.isna(ids[1])


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("name", ["t.csv", "t.tsv"])
def test_a_column_named_twice_is_refused_not_renamed(tmp_path, name, chunked):
    """pandas renamed the second 'text' to 'text.1' and training read the first one without a word."""
    sep = "\t" if name.endswith(".tsv") else ","
    path = tmp_path / name
    path.write_text(sep.join(["text", "label", "text"]) + "\n" + sep.join(["a", "1", "b"]) + "\n")
    with pytest.raises(DataError, match=rf"{name}: the header names column 'text' twice \(columns 1 and 3\); which "
                                        r"one holds the data is ambiguous. Rename or drop one of them"):
        list(iter_table(path, 1)) if chunked else read_table(path)
    path.write_text(sep.join(["", "text", ""]) + "\n" + sep.join(["0", "a", "1"]) + "\n")  # unnamed: kept apart
    assert read_table(path)["text"].tolist() == ["a"]


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("name", ["t.csv", "t.tsv"])
def test_a_first_row_longer_than_the_header_is_refused_not_shifted(tmp_path, name, chunked):
    """pandas made the first column the index: the ids vanished and the text's second half became the label."""
    sep = "\t" if name.endswith(".tsv") else ","
    path = tmp_path / name
    rows = [["id", "text", "score"], ["1", "good", " fine", "0.5"], ["2", "bad", " awful", "0.1"]]
    path.write_text("\n".join(sep.join(r) for r in rows) + "\n")
    with pytest.raises(DataError, match=rf"{name}: the first data row has 4 fields and the header 3 \(id, text, "
                                        r"score\); every column would be read one place off. Enclose fields that "
                                        rf"hold the delimiter \({re.escape(repr(sep))}\) in double quotes"):
        list(iter_table(path, 1)) if chunked else read_table(path)
    path.write_text(f"text{sep}label\nhello{sep}1{sep}{sep}\nbye{sep}0{sep}{sep}\n")  # a delimiter ending each line
    with pytest.raises(DataError, match=r"the first data row has 4 fields and the header 2 \(text, label\)"):
        list(iter_table(path, 1)) if chunked else read_table(path)
    quoted = f'id{sep}text{sep}score\n1{sep}"good{sep} fine"{sep}0.5\n'
    path.write_text(quoted)
    frame = pd.concat(iter_table(path, 1)) if chunked else read_table(path)
    assert frame.to_dict("list") == {"id": [1], "text": [f"good{sep} fine"], "score": [0.5]}


def test_missing_text_stays_missing_with_pandas_2_string_inference(tmp_path):
    """pandas 2's astype(str) wrote a missing id or text as "None" or "nan": the model read the word "nan"."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": 4112, "text": "a"}\n{"id": null, "text": 5}\n{"id": 7, "text": null}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the option is deprecated in pandas 3
        try:
            with pd.option_context("future.infer_string", False):
                frame = read_table(path, text_columns=["id", "text"])
        except KeyError:  # pandas.errors.OptionError: gone in pandas 4
            pytest.skip("this pandas cannot read strings as pandas 2 did")
    assert frame["id"].tolist()[0::2] == ["4112", "7"] and pd.isna(frame["id"][1])
    assert frame["text"].tolist()[:2] == ["a", "5"] and pd.isna(frame["text"][2])


@pytest.mark.parametrize("chunked", [False, True])
def test_a_one_column_tsv_whose_text_starts_with_a_quote_is_refused_not_merged(tmp_path, chunked):
    """4 lines read as 2 rows: `attnpool predict` wrote 2 predictions, and a tab-and-line-break check saw nothing."""
    path = tmp_path / "sentences.tsv"
    path.write_text('first\n"the cat sat\nred dog ran\nbig tree" fast\nblue house\n')
    with pytest.raises(DataError, match=r"sentences.tsv: data row 1, column 'first' \(starting 'the cat sat'\) "
                                        r"holds 2 line break\(s\).* Remove the stray double quote"):
        list(iter_table(path, 1)) if chunked else read_table(path)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_quoted_tsv_field_with_a_tab_and_a_line_break_reads_as_written(tmp_path, chunked):
    """Code that write_table wrote to TSV (a quoted field with a tab and a line break) was refused as a stray quote."""
    from attnpool.data import write_table

    path = tmp_path / "code.tsv"
    frame = pd.DataFrame({"text": ["def f():\n\treturn 1", "x = 2", 'say "hi"'], "label": [1, 0, 1]})
    write_table(frame, path)
    out = pd.concat(iter_table(path, 1)) if chunked else read_table(path)
    assert out.to_dict("list") == frame.to_dict("list")
    one = frame[["text"]].assign(text=["line 1\nline 2", "x", 'a "b"\nc'])  # one column: every line has one field
    write_table(one, path)
    out = pd.concat(iter_table(path, 2)) if chunked else read_table(path)
    assert out["text"].tolist() == one["text"].tolist()


@pytest.mark.parametrize("chunked", [False, True])
def test_a_pandas_index_stored_in_parquet_becomes_columns(tmp_path, chunked):
    """set_index("id").to_parquet: read_table made the ids the index, iter_table lost them (--id-col failed)."""
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"id": ["a1", "a2", "a3"], "g": [1, 1, 2], "text": ["x", "y", "z"]})
    cases = {"named.parquet": frame.set_index("id"), "two.parquet": frame.set_index(["id", "g"]),
             "unnamed.parquet": frame.iloc[[2, 0, 1]],  # a stored, unnamed index is dropped
             # an index named like a column is dropped: set_index("id", drop=False) failed as "id already exists"
             "kept.parquet": frame.set_index("id", drop=False),
             "both.parquet": frame.set_index("id").set_index("g", drop=False, append=True)}
    for name, stored in cases.items():
        stored.to_parquet(tmp_path / name)
        out = pd.concat(iter_table(tmp_path / name, 2)) if chunked else read_table(tmp_path / name)
        expected = frame.iloc[[2, 0, 1]] if name == "unnamed.parquet" else frame
        assert out.to_dict("list") == expected.to_dict("list") and list(out.index) == [0, 1, 2], name


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(("name", "content", "message"), [
    ("semi.csv", "text;label\nhello there;1\n", "the header is one column, 'text;label', and the first data row "
     "holds ';' too: the file looks semicolon-separated, but a .csv file is read as comma-separated; convert it"),
    ("semi2.csv", "text;label\nhello, world;1\n", "the first data row has 2 fields and the header 1 (text;label); "
     "every column would be read one place off. Enclose fields that hold the delimiter (',') in double quotes, and "
     "remove a delimiter ending each line (or name that column in the header). The header is one column, "
     "'text;label': the file looks semicolon-separated"),
    ("tabs.csv", "text\tlabel\nhello\t1\n", "the header is one column, 'text\\tlabel', and the first data row holds "
     "'\\t' too: the file looks tab-separated, but a .csv file is read as comma-separated; rename it to .tsv"),
    ("comma.tsv", "text,label\nhello,1\n", "the file looks comma-separated, but a .tsv file is read as "
     "tab-separated; rename it to .csv"),
])
def test_a_file_separated_by_another_delimiter_says_so(tmp_path, chunked, name, content, message):
    """A ;-separated .csv read as one column named 'text;label', then failed as a missing column 'text'."""
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=re.escape(f"{name}: ") + ".*" + re.escape(message)):
        list(iter_table(path, 1)) if chunked else read_table(path)
    path.write_text("a|b\nx\n")  # a one-column header holding '|' above rows without it: a name, read as it is
    assert read_table(path).columns.tolist() == ["a|b"]


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(("name", "content"), [
    ("prose.tsv", "review, short\nGreat, cheap\nok\n"),  # commas in prose, split unlike the header's
    ("uneven.csv", "text;label\nhello;there;1\n"),
    ("second.csv", "text;label\nhello;1\nbye\n"),  # the second data row is one field
])
def test_a_one_column_file_whose_texts_hold_another_delimiter_reads_as_it_is(tmp_path, chunked, name, content):
    """A one-column TSV of reviews was refused as comma-separated: its header and first row both held a comma."""
    path = tmp_path / name
    path.write_text(content)
    out = pd.concat(iter_table(path, 2)) if chunked else read_table(path)
    lines = content.splitlines()
    assert out.to_dict("list") == {lines[0]: lines[1:]}


def test_column_names_with_control_characters_are_shown_quoted(tmp_path):
    """A tab in a name printed as a gap: "columns: id text" hid that the header was one name, not two."""
    path = tmp_path / "t.tsv"
    path.write_text('"a\tb"\tc\n1\t2\t3\n')
    with pytest.raises(DataError, match=re.escape(r"the header 2 ('a\tb', c)")):
        read_table(path)


def test_utf16_is_named_and_cp1252_is_the_suggested_encoding(tmp_path):
    """Both were told `iconv -f latin1`: useless for UTF-16, and it turns cp1252's curly quotes into control codes."""
    path = tmp_path / "excel.tsv"
    path.write_bytes("text\tlabel\nh\u00e9llo\t1\n".encode("utf-16"))
    message = (r"excel.tsv: not UTF-8 but UTF-16 \(it starts with the byte-order mark (ff fe|fe ff), as Excel's "
               r'"Unicode Text" writes\); re-encode the file as UTF-8, e.g. `iconv -f utf-16 -t utf-8 excel.tsv')
    for read in (read_table, lambda p: list(iter_table(p, 1))):
        with pytest.raises(DataError, match=message):
            read(path)
    path.write_bytes("text\tlabel\nit\u2019s\t1\n".encode("cp1252"))
    with pytest.raises(DataError, match=re.escape("usually Windows' cp1252 (Excel), e.g. `iconv -f cp1252 -t utf-8")):
        read_table(path)


def test_parquet_strings_stored_as_bytes_read_as_text(tmp_path):
    """A BYTE_ARRAY column without its UTF-8 annotation reads as pyarrow binary: str(b"cat") made the text "b'cat'"."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"id": pa.array([b"1", None, b"3"], pa.binary()),
                             "first": pa.array([b"cat", "caf\u00e9".encode(), b""], pa.large_binary())}), path)
    out = read_table(path, text_columns=["id", "first"])
    assert out["id"].tolist()[0::2] == ["1", "3"] and pd.isna(out["id"].iloc[1])
    assert out["first"].tolist() == ["cat", "caf\u00e9", ""]
    chunks = list(iter_table(path, 2, text_columns=["id", "first"]))
    assert [v for c in chunks for v in c["first"]] == ["cat", "caf\u00e9", ""]
    pq.write_table(pa.table({"first": pa.array([b"ok", b"ok", "caf\u00e9".encode("cp1252")], pa.binary())}), path)
    message = (r"bytes.parquet: column 'first', data row 3 holds bytes that are not UTF-8 text \(e9 at byte 3\); "
               r"store the column as UTF-8 strings")
    for read in (read_table, lambda p, **kw: list(iter_table(p, 2, **kw))):
        with pytest.raises(DataError, match=message):
            read(path, text_columns=["first"])


def test_a_jsonl_escape_of_a_lone_surrogate_names_the_line_and_key(tmp_path):
    """json.loads accepts "\\ud83d" alone; pandas' string column then failed with a bare UnicodeEncodeError."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": 1, "text": "ok \\ud83d\\ude00"}\n{"id": 2, "text": "a \\ud83d b"}\n', encoding="utf-8")
    for read in (read_table, lambda p: list(iter_table(p, 1))):
        with pytest.raises(DataError, match=r"t\.jsonl: line 2, key 'text': the escape \\ud83d is half of a UTF-16 "
                                            r"surrogate pair without its other half.*or remove the escape"):
            read(path)
    path.write_text('{"id": 1, "text": "ok", "tags": ["\\uD83D"]}\n', encoding="utf-8")  # in a list too
    with pytest.raises(DataError, match=r"t\.jsonl: line 1, key 'tags': the escape \\ud83d is half"):
        read_table(path)
    path.write_text('{"id": 1, "text": "ok \\ud83d\\ude00"}\n', encoding="utf-8")  # a whole pair: one emoji
    assert read_table(path)["text"].tolist() == ["ok \U0001f600"]


@pytest.mark.parametrize(("data", "line"), [
    (b"text,label\ra,1\rb\xff,0\r", 3),  # carriage returns only (classic Mac, some exports)
    (b"text,label\r\na,1\r\nb\xff,0\r\n", 3),
    (b"text,label\ra,1\r\nb,0\nc\xff,1\n", 4),  # all three breaks in one file
])
@pytest.mark.parametrize("chunked", [False, True])
def test_a_bad_byte_is_on_the_line_the_csv_reader_counts(tmp_path, data, line, chunked):
    """Only line feeds were counted: the bad byte of a CR-only file was said to be on line 1."""
    path = tmp_path / "cr.csv"
    path.write_bytes(data)
    offset = data.index(b"\xff")
    message = f"cr.csv: not valid UTF-8: byte(s) ff at byte offset {offset} (line {line})"
    with pytest.raises(DataError, match=re.escape(message)):
        list(iter_table(path, 1, text_columns=["text"])) if chunked else read_table(path, text_columns=["text"])


def test_a_crlf_cut_by_a_block_is_one_line_break(tmp_path):
    """Blocks of every size: the \\r of a \\r\\n at the end of one block and the \\n at the start of the next."""
    from attnpool.data.text_files import Utf8Stream

    data = b"text,label\r\na,1\r\n\r\nb\r\nc\xff,0\r\n"
    path = tmp_path / "crlf.csv"
    path.write_bytes(data)
    for block in range(1, len(data) + 1):
        with Utf8Stream(path, block=block) as stream, pytest.raises(DataError, match=r"\(line 5\)"):
            stream.read()


@pytest.mark.parametrize("chunked", [False, True])
def test_jsonl_numbers_in_text_columns_are_kept_as_written(tmp_path, chunked):
    """Ids 1e5 and 0.10 became "100000.0" and "0.1": predictions could not be joined back on them."""
    written = ["1e5", "0.10", "-0", "1E+3", "4112", "12345678901234567890123", "NaN"]
    lines = [f'{{"id": {v}, "text": {v}, "score": {v}, "label": {i}}}' for i, v in enumerate(written)]
    path = tmp_path / "ids.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = pd.concat(iter_table(path, 2, text_columns=["id", "text"])) if chunked else read_table(
        path, text_columns=["id", "text"])
    assert read["id"].tolist() == read["text"].tolist() == written
    expected = [json.loads(v) for v in written]  # the other columns: the numbers JSON reads
    assert read["score"].tolist()[:-1] == expected[:-1] and np.isnan(read["score"].iloc[-1])
    assert read["label"].tolist() == list(range(len(written)))


def test_a_jsonl_bad_byte_is_on_the_same_line_read_whole_or_in_chunks(tmp_path):
    """JSONL lines end at line feeds only (a carriage return is JSON whitespace): both readers count them so."""
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b'{"text":\r"a"}\n{"text": "b\xff"}\n')
    for read in (lambda: read_table(path), lambda: list(iter_table(path, 1))):
        with pytest.raises(DataError, match=re.escape("(line 2)")):
            read()
