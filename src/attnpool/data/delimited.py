"""Checks of a CSV or TSV file as pandas reads it, each a DataError saying where and how to fix it.

A header naming a column twice, a first row longer than the header, a file that uses another delimiter than its
extension says, a TSV row that a stray quote merged with the next lines (in a file that is not valid CSV quoting),
and pandas' parser errors as one line.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from attnpool.data.columns import shown_column
from attnpool.data.errors import DataError

_OTHER_DELIMITERS = {"\t": "tab", ";": "semicolon", "|": "pipe", ",": "comma"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # where pandas' parser ends a line
_FIELD_LIMIT = 2**31 - 1  # the largest field size limit of the csv module on every platform (a C long)


def check_header(source: TextIO, path: Path, sep: str) -> list[str]:
    """The header's names, read from the first lines of ``source``; a DataError if it names a column twice.

    pandas would rename the second ``name.1`` and read the first.
    """
    header = pd.read_csv(source, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()
    first: dict[str, int] = {}
    for position, name in enumerate(header, 1):
        if name.strip() and name in first:
            raise DataError(
                f"{path}: the header names column {name!r} twice (columns {first[name]} and {position}); which one "
                f"holds the data is ambiguous. Rename or drop one of them")
        first.setdefault(name, position)
    return header


def check_fields(frame: pd.DataFrame, path: Path, sep: str) -> None:
    """Refuse a first data row with more fields than the header, or a file separated by another delimiter.

    With more fields, pandas made the first column the index: an unquoted delimiter inside a text, or a delimiter
    ending every line, shifted every column one to the right (the ids became the index, the text's second half was
    read as the label) without an error. A header read as one name holding ``;``, a tab or ``|`` (a ``.csv`` file
    saved by a European Excel, or a TSV file named ``.csv``) would only fail later, as a missing column.
    """
    other = _other_delimiter(frame, sep)
    if isinstance(frame.index, pd.RangeIndex):
        if other and _splits_alike(frame, other):  # the data rows are split the same way: not a name that holds it
            raise DataError(f"{path}: the header is one column, {str(frame.columns[0])!r}, and the first data row "
                            f"holds {other!r} too: {_looks_separated(sep, other)}")
        return
    extra = frame.index.nlevels
    hint = f" The header is one column, {str(frame.columns[0])!r}: {_looks_separated(sep, other)}" if other else ""
    raise DataError(
        f"{path}: the first data row has {len(frame.columns) + extra} fields and the header {len(frame.columns)} "
        f"({', '.join(map(shown_column, frame.columns))}); every column would be read one place off. Enclose fields "
        f"that hold the delimiter ({sep!r}) in double quotes, and remove a delimiter ending each line (or name that "
        f"column in the header).{hint}")


def _other_delimiter(frame: pd.DataFrame, sep: str) -> str | None:
    """The delimiter other than ``sep`` in a header read as a single name, if any."""
    if len(frame.columns) != 1:
        return None
    return next((d for d in _OTHER_DELIMITERS if d != sep and d in str(frame.columns[0])), None)


def _splits_alike(frame: pd.DataFrame, other: str) -> bool:
    """Whether the header and the first data rows (two at most) split at ``other`` into as many fields, 2 or more.

    A one-column file whose texts hold ``other`` (commas in prose: ``review, short`` above ``Great, cheap``) is read
    as it is. Only the chunk holding the first data row is checked: a later one starts elsewhere in the file.
    """
    if not len(frame) or frame.index[0] != 0:
        return False
    cells = [str(frame.columns[0]), *frame.iloc[:2, 0]]
    counts = {len(cell.split(other)) if isinstance(cell, str) else 1 for cell in cells}
    return len(counts) == 1 and counts.pop() >= 2


def _looks_separated(sep: str, other: str) -> str:
    """What the header's other delimiter suggests, and how to fix the file (rename it, or convert it to CSV)."""
    kind = "a .tsv file is read as tab-separated" if sep == "\t" else "a .csv file is read as comma-separated"
    if other in ("\t", ","):
        fix = f"rename it to {'.tsv' if other == chr(9) else '.csv'}"
    else:
        fix = (f"convert it, e.g. `pd.read_csv(path, sep={other!r}, dtype=str, keep_default_na=False)"
               ".to_csv(out, index=False)`")
    return f"the file looks {_OTHER_DELIMITERS[other]}-separated, but {kind}; {fix}"


class MergedRows:
    """Refuses TSV rows that a stray double quote merged with the next lines; checks chunk after chunk of a file.

    TSV is read with CSV quoting, as pandas and :func:`~attnpool.data.writers.write_table` write it: a quoted field
    may hold a tab or a line break. A file without quoting (GLUE style) whose text starts with ``"`` reads the same
    way: the quote opens a section that runs over the next lines, and they become one row without an error. Only a
    field holding a line break can be such a merge; then the file is read once more (:func:`tsv_reading`). If
    lines of other lengths than the header's show quoted fields holding line breaks, the file reads as quoted. If
    every line has the header's fields, the row is refused: as a stray quote's merge when the quotes are not valid
    CSV quoting, and as ambiguous when they are (two stray quotes, ``"Hello`` and ``12"``, read as valid quoting
    too, and would merge the rows between them without a word).
    """

    def __init__(self, path: Path, sep: str, open_text: Callable[[], TextIO]) -> None:
        self._path, self._sep, self._open_text = path, sep, open_text
        self._reading: str | None = None  # decided once per file, at the first field holding a line break

    def check(self, frame: pd.DataFrame, first_row: int) -> pd.DataFrame:
        """The chunk, unless a field holds a line break in a file without quoting; ``first_row``: its first row."""
        if self._sep != "\t":
            return frame
        merged = []  # (position in the chunk, column) of the first field holding a line break, per column
        for name in frame.columns:
            column = frame[name]
            if column.dtype == object or pd.api.types.is_string_dtype(column):
                found = np.flatnonzero(column.str.contains("[\r\n]", na=False).to_numpy())
                merged += [(int(found[0]), name)] if len(found) else []
        if not merged:
            return frame
        if self._reading is None:
            self._reading = tsv_reading(self._open_text, len(frame.columns))
        if self._reading == "quoted":
            return frame
        position, name = min(merged, key=lambda m: m[0])
        value = frame[name].iloc[position]
        where = (f"{self._path}: data row {first_row + position + 1}, column {name!r} (starting "
                 f"{_LINE_BREAK.split(value)[0][:40]!r}) holds {len(_LINE_BREAK.findall(value))} line break(s)")
        if self._reading == "either":
            raise DataError(
                f"{where}, and the file reads two ways: with CSV quoting, as pandas and attnpool write TSV (a quoted "
                f"field holding line breaks and tabs), or without quoting, every line a row of the header's "
                f"{len(frame.columns)} field(s) (GLUE style, where two stray double quotes would merge the lines "
                "between them into this row). Save texts holding tabs and line breaks as CSV, JSONL or Parquet; or, "
                "if the file has no quoting, double the quotes inside quoted fields or remove the stray ones")
        raise DataError(
            f"{where}: a double quote at the start of a field opened a quoted section that merged the next lines "
            f"into this row, yet every line of the file has the header's {len(frame.columns)} field(s) and its "
            "quotes are not valid CSV quoting, as in a TSV file without quoting. Remove the stray double quote, or "
            "quote the file as CSV does "
            '(enclose such fields in double quotes and double the quotes inside, "" for "), e.g. '
            '`pd.read_csv(path, sep="\\t", quoting=csv.QUOTE_NONE, dtype=str, keep_default_na=False).to_csv(out, '
            'sep="\\t", index=False)`; or convert the file to JSONL')


def tsv_reading(open_text: Callable[[], TextIO], fields: int) -> str:
    """How a TSV file whose fields hold line breaks reads: ``"quoted"``, ``"unquoted"`` or ``"either"``.

    ``"quoted"``: some non-blank line has another number of fields than ``fields`` (a quoted field's line
    breaks split it). ``"unquoted"``: every line has ``fields`` fields and the file is not valid CSV quoting with
    ``fields`` fields in every record. ``"either"``: both readings hold (with one field, where every line has it,
    valid quoting reads as ``"quoted"``: texts of several lines as pandas writes them).

    Lines of the header's fields say nothing alone: a quoted text of several lines holding a tab (``"Dear team,``
    above ``Name:<tab>John"``), as pandas writes it, splits into such lines too. Invalid quoting (a closing quote
    followed by more text, as in ``"big tree" fast``, or a quote never closed) or a record of another length is
    what a stray quote in a file without quoting gives.
    """
    with open_text() as source:
        if any(line.count("\t") != fields - 1 for line in _lines(source) if line):
            return "quoted"
    with open_text() as source:
        if not _valid_quoting(source, fields):
            return "unquoted"
    return "quoted" if fields == 1 else "either"  # one field: every line has it, quoted texts of several lines too


def _valid_quoting(source: TextIO, fields: int) -> bool:
    """Whether the text parses as strict CSV quoting (tab-separated) with ``fields`` fields in every record."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, _FIELD_LIMIT))  # a quoted text of several MB is no quoting error
    try:
        return all(len(record) == fields for record in csv.reader(_lines(source), delimiter="\t", strict=True)
                   if record)
    except csv.Error:
        return False
    finally:
        csv.field_size_limit(limit)


def _lines(source: TextIO, block: int = 1 << 20) -> Iterator[str]:
    r"""The lines of a text stream without their line breaks (``\r\n``, ``\r`` or ``\n``), read block by block."""
    rest = ""
    while text := source.read(block):
        lines = _LINE_BREAK.split(rest + text)
        rest = lines.pop()  # may go on in the next block
        yield from lines
    if rest:
        yield rest


class RowShapes:
    """Physical lines of the records pandas parsed, for rows with fewer fields than the header and parser errors.

    pandas pads a row with fewer fields than the header with missing values, without an error: a text broken by an
    unquoted line break became two rows, the second holding the text's end as its first field. Such a row leaves its
    last column missing, so the file is scanned (once, with ``csv.reader``) only when a chunk's last column has a
    missing value: an empty last field (``1,``) still has its delimiter, so its row has every field.
    """

    def __init__(self, path: Path, sep: str, header: list[str], open_text: Callable[[], TextIO], *,
                 first_line: int = 1, one_column: bool = False) -> None:
        """``open_text``: the text pandas parses, whose first line is the file's line ``first_line``."""
        self._path, self._sep, self._fields, self._open_text = path, sep, len(header), open_text
        self._first_line, self._one_column = first_line, one_column
        self._unnamed_last = len(header) > 1 and not str(header[-1]).strip()  # `id,text,label,`: a delimiter ends it
        self._checked = False

    def _records(self, strict: bool = False) -> Iterator[tuple[int, int | None, list[str]]]:
        """(physical line, data row or None for the header and skipped blank lines, fields) of each record.

        With ``strict``, a quoting error raises :class:`_QuoteError` with the line and data row it is in.
        """
        limit = csv.field_size_limit()
        csv.field_size_limit(max(limit, _FIELD_LIMIT))
        line, row, header = 0, 0, False
        try:
            with self._open_text() as source:
                lines = _lines(source)
                if strict:  # blanks between a closing quote and the delimiter: pandas drops them, as csv does not
                    blanks = re.compile(r'"[ \t]+(?=' + re.escape(self._sep) + r"|\r|\n|$)")
                    lines = (blanks.sub('"', line) for line in lines)
                reader = csv.reader(lines, delimiter=self._sep, strict=strict)
                for record in reader:
                    blank = not self._one_column and len(record) < 2 and not "".join(record).strip(" \t")
                    if header and not blank:
                        row += 1
                    yield self._first_line + line, row if header and not blank else None, record
                    header = header or not blank
                    line = reader.line_num
        except csv.Error as e:
            raise _QuoteError(str(e), self._first_line + reader.line_num - 1, row + 1 if header else None) from None
        finally:
            csv.field_size_limit(limit)

    def check_quotes(self) -> int:
        """The ``quoting`` to read with; a DataError for a CSV field whose closing quote more text follows.

        pandas drops the quotes of ``"Great" product`` and joins the text (``Great product``) without an error. A
        TSV file whose quotes are not valid CSV quoting, every line holding the header's fields (GLUE style), is
        read without quoting (:func:`tsv_reading`) unless a quote would merge lines (:class:`MergedRows` refuses
        those); a CSV file is refused. Scanned only in a file holding a double quote.
        """
        if not _holds_quote(self._path):
            return csv.QUOTE_MINIMAL
        if self._sep == "\t":
            if tsv_reading(self._open_text, self._fields) != "unquoted":
                return csv.QUOTE_MINIMAL
            return csv.QUOTE_NONE if _one_line_records(self._open_text) else csv.QUOTE_MINIMAL
        try:
            for _ in self._records(strict=True):
                pass
        except _QuoteError as e:
            message, line, row = e.args
            if "expected after" not in message:
                return csv.QUOTE_MINIMAL  # a quote never closed: pandas' own error says so
            where = f"data row {row} (line {line})" if row is not None else f"the header (line {line})"
            raise DataError(
                f"{self._path}: {where}: a field starts with a double quote and more text follows its closing "
                "quote; it would be read without its quotes. Double the quotes inside a quoted field and enclose "
                'the whole field in double quotes (e.g. """Great"" product" for "Great" product)') from None
        return csv.QUOTE_MINIMAL

    def check(self, frame: pd.DataFrame) -> None:
        """A DataError for the file's first row with fewer fields than the header, if the chunk may hold one."""
        if self._checked or self._fields < 2 or not len(frame) or not frame.iloc[:, -1].isna().any():
            return
        self._checked = True
        for line, row, record in self._records():
            if row is not None and len(record) < self._fields:
                if self._unnamed_last and len(record) == self._fields - 1:
                    raise DataError(
                        f"{self._path}: the header ends with a delimiter ({self._sep!r}): an unnamed last column, "
                        f"{self._fields} fields, while data row {row} (line {line}) has {len(record)}. Remove the "
                        "delimiter ending the header line")
                raise DataError(
                    f"{self._path}: data row {row} (line {line}) has {len(record)} field(s) and the header "
                    f"{self._fields}; its last column(s) would be read as missing (starting {record[0][:40]!r}). A "
                    "line break inside an unquoted text splits the row: quote the field (enclose it in double "
                    "quotes), or join the lines; if the row really lacks values, write their delimiters "
                    f"({self._sep!r}) with empty fields")

    def locate(self, message: str) -> str:
        """The parser error of pandas, its line or row (counting records) given as data row and physical line."""
        found = re.search(r"(fields in line|string starting at row) (\d+)", message)
        if not found:
            return message
        wanted = int(found[2]) - (found[1] == "fields in line")  # 0-based record, the header's included
        for number, (line, row, _) in enumerate(self._records()):
            if number == wanted:
                where = f"data row {row} (line {line})" if row is not None else f"line {line}"
                return f"{message[: found.start(1)]}{found[1].rsplit(' ', 1)[0]} {where}{message[found.end():]}"
        return message


def csv_error(path: Path, sep: str, error: Exception, shapes: RowShapes | None = None) -> DataError:
    """The error pandas raised reading a CSV or TSV file, as a DataError saying what to check (delimiter, quoting)."""
    if isinstance(error, pd.errors.EmptyDataError):
        return DataError(f"{path}: the file is empty; it needs a header line and at least one data row")
    kind = "TSV" if sep == "\t" else "CSV"
    message = str(error).strip()
    if shapes is not None:
        message = shapes.locate(message)
    return DataError(
        f"{path}: could not be parsed as {kind}: {message}. Check the delimiter ({sep!r}) and the "
        "quoting: a field holding the delimiter, a double quote or a line break must be enclosed in double quotes"
    )


class _QuoteError(Exception):
    """A quoting error of ``csv.reader``: ``(message, physical line, data row or None)``."""


def _holds_quote(path: Path, block: int = 1 << 20) -> bool:
    """Whether the file holds a double quote."""
    with path.open("rb") as f:
        return any(b'"' in raw for raw in iter(lambda: f.read(block), b""))


def _one_line_records(open_text: Callable[[], TextIO]) -> bool:
    """Whether no quoted section of the (tab-separated) text runs over a line break."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, _FIELD_LIMIT))
    try:
        with open_text() as source:
            reader = csv.reader(_lines(source), delimiter="\t")
            return all(reader.line_num == n for n, _ in enumerate(reader, 1))
    finally:
        csv.field_size_limit(limit)
