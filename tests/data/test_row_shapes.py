"""Rows that read wrongly or with a misleading message: a row with fewer fields than the header (padded with
missing values), parser errors naming pandas' record count as a line, 2-D labels holding missing values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnpool.data import DataError, iter_table, make_folds, read_table, write_table


def read(path, chunked: bool, chunk_rows: int = 2) -> pd.DataFrame:
    return pd.concat(iter_table(path, chunk_rows)) if chunked else read_table(path)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("sep", [",", "\t"])
def test_a_row_split_by_an_unquoted_line_break_is_refused_naming_its_line(tmp_path, chunked, sep):
    """The text's second line became a row of its own, its fragment read as the id and its text missing."""
    path = tmp_path / ("reviews.tsv" if sep == "\t" else "reviews.csv")
    path.write_text("id,text\n1,first review\n2,second review spans\ntwo lines\n3,third\n".replace(",", sep))
    with pytest.raises(DataError, match=r"reviews\.(csv|tsv): data row 3 \(line 4\) has 1 field\(s\) and the "
                                        r"header 2.*'two lines'.*unquoted text splits the row: quote the field"):
        read(path, chunked)


@pytest.mark.parametrize("chunked", [False, True])
def test_the_short_row_is_found_after_quoted_line_breaks_and_blank_lines(tmp_path, chunked):
    path = tmp_path / "a.csv"
    path.write_text('text,label,id\n"a\nb",1,x\n\n"c\nd",0,y\ne,1\n')
    with pytest.raises(DataError, match=r"a\.csv: data row 3 \(line 7\) has 2 field\(s\) and the header 3"):
        read(path, chunked)


@pytest.mark.parametrize("chunked", [False, True])
def test_empty_last_fields_blank_lines_and_one_column_files_still_read(tmp_path, chunked):
    path = tmp_path / "a.csv"
    path.write_text("text,label\nhello,1\nworld,\n\n,\n\n  \n")
    frame = read(path, chunked)
    assert frame["text"].tolist()[:2] == ["hello", "world"] and len(frame) == 3
    assert frame["label"].isna().tolist() == [False, True, True]
    path.write_text("text\nhello\n\nworld\n")  # one column: a blank line is a row whose text is missing
    assert read(path, chunked)["text"].isna().tolist() == [False, True, False]
    frame = pd.DataFrame({"text": ["a\nb", "c"], "label": [1.0, np.nan]})
    write_table(frame, path)  # pandas writes a missing last value as an empty last field
    assert read(path, chunked)["label"].isna().tolist() == [False, True]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_parse_error_names_the_data_row_and_physical_line_after_quoted_line_breaks(tmp_path, chunked):
    """pandas' "line 10" counted records: 8 quoted texts of two lines each put the bad row on line 18."""
    path = tmp_path / "ln2.csv"
    path.write_text("text,label\n" + "".join(f'"r{i}\nmore",{i % 2}\n' for i in range(8)) + "bad, row,1\nok,0\n")
    with pytest.raises(DataError, match=r"ln2\.csv: could not be parsed as CSV: .*Expected 2 fields in data row 9 "
                                        r"\(line 18\), saw 3"):
        read(path, chunked)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_quote_never_closed_names_the_data_row_and_physical_line(tmp_path, chunked):
    path = tmp_path / "a.csv"
    path.write_text('text,label\n"a\nb",1\n\n3,"4\n5,6\n')
    with pytest.raises(DataError, match=r"EOF inside string starting at data row 2 \(line 5\)"):
        read(path, chunked)


def test_a_parse_error_in_a_one_column_file_after_leading_blank_lines_names_its_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text('\n\ntext\n"a\nb"\n\nc,d\n')
    with pytest.raises(DataError, match=r"Expected 1 fields in data row 3 \(line 7\), saw 2"):
        read_table(path)


@pytest.mark.parametrize("task", ["regression", "multilabel"])
def test_2d_labels_holding_missing_values_are_refused_naming_the_rows(task):
    labels = np.random.default_rng(0).random((20, 2))
    labels[3, 1] = labels[7, 0] = np.nan
    with pytest.raises(DataError, match=r"rows 4, 8 \(2 in all\) hold missing or infinite values"):
        make_folds(20, 5, labels=labels, task=task)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_tsv_text_starting_with_a_quoted_word_keeps_its_quotes(tmp_path, chunked):
    """GLUE-style TSV: '"Great" product' was read as 'Great product', its quotes dropped without a word."""
    path = tmp_path / "a.tsv"
    path.write_text('sentence\tlabel\n"Great" product\t1\nbad\t0\nthe "best" one\t1\n')
    assert read(path, chunked)["sentence"].tolist() == ['"Great" product', "bad", 'the "best" one']
    frame = pd.DataFrame({"sentence": ['a "b" c', '"quoted" start', "x\ty"], "label": [1, 0, 1]})
    write_table(frame, path)  # valid quoting, as pandas writes it: read as before
    assert read(path, chunked)["sentence"].tolist() == frame["sentence"].tolist()


@pytest.mark.parametrize("chunked", [False, True])
def test_a_csv_field_with_text_after_its_closing_quote_is_refused(tmp_path, chunked):
    path = tmp_path / "a.csv"
    path.write_text('sentence,label\nok,0\n"a\nb",1\n"Great" product,1\n')
    with pytest.raises(DataError, match=r'a\.csv: data row 3 \(line 5\): a field starts with a double quote and '
                                        r'more text follows its closing quote.*"""Great"" product"'):
        read(path, chunked)
    frame = pd.DataFrame({"sentence": ['a "b" c', '"quoted" start', "x,y"], "label": [1, 0, 1]})
    write_table(frame, path)
    assert read(path, chunked)["sentence"].tolist() == frame["sentence"].tolist()


@pytest.mark.parametrize("chunked", [False, True])
def test_blanks_between_a_closing_quote_and_the_delimiter_still_read(tmp_path, chunked):
    """The strict quote scan refused `"hello" ,a` (pandas reads `hello `): only blanks follow the closing quote."""
    path = tmp_path / "a.csv"
    path.write_bytes(b'id,text,label\r\n1,"hello" ,a\r\n2,world,b\r\n3,"x"\t,c\r\n4,z,"end" \r\n')
    frame = read(path, chunked)
    assert frame["text"].tolist() == ["hello ", "world", "x\t", "z"] and frame["label"].tolist()[-1] == "end "
