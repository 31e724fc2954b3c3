"""UTF-8 text files, read whole or streamed, with errors that give the line and byte offset of a bad byte."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

from attnpool.data.errors import DataError


def read_utf8(path: Path) -> str:
    """The file's text; a UTF-8 byte-order mark is dropped.

    A bad byte's line counts line feeds only, as the JSONL reader numbers its lines (a carriage return is JSON
    whitespace there, not a line break), so that its messages and this one name the same line.
    """
    raw = path.read_bytes()
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = bom + e.start
        raise not_utf8(path, raw[offset : bom + e.end], offset, raw.count(b"\n", 0, offset) + 1) from None


# Byte-order marks of the encodings a UTF-8 reader cannot read; UTF-32's first: its LE mark starts like UTF-16's
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


def not_utf8(path: Path, bad: bytes, offset: int, line: int) -> DataError:
    """The error for an undecodable byte: where it is, and how to re-save the file.

    A file starting with a UTF-16 byte-order mark (Excel's "Unicode Text") is named as such. Otherwise the usual
    culprit is Windows' cp1252 (Excel's "CSV"), not latin-1: re-encoded as latin-1, its curly quotes and euro sign
    would become control characters.
    """
    with path.open("rb") as f:
        head = f.read(4)
    bom, encoding = next(((bom, name) for bom, name in _BOMS if head.startswith(bom)), (b"", None))
    if encoding:
        excel = ", as Excel's \"Unicode Text\" writes" if encoding == "utf-16" else ""
        return DataError(
            f"{path}: not UTF-8 but {encoding.upper()} (it starts with the byte-order mark {bom.hex(' ')}{excel}); "
            f"re-encode the file as UTF-8, e.g. `iconv -f {encoding} -t utf-8 {path.name} > utf8-{path.name}` or, "
            f"in Python, `Path(out).write_text(Path(path).read_text(encoding='{encoding}'), encoding='utf-8')`"
        )
    return DataError(
        f"{path}: not valid UTF-8: byte(s) {bad.hex(' ')} at byte offset {offset} (line {line}); re-encode the file "
        f"as UTF-8 from its encoding, usually Windows' cp1252 (Excel), e.g. `iconv -f cp1252 -t utf-8 {path.name} > "
        f"utf8-{path.name}` or, in pandas, `pd.read_csv(path, encoding='cp1252').to_csv(out, index=False)`"
    )


def is_blank(path: Path, block: int = 1 << 16) -> bool:
    """Whether the file holds nothing but whitespace (and a byte-order mark); usually decided by its first block."""
    with path.open("rb") as f:
        first = True
        while raw := f.read(block):
            if first and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            first = False
            if raw.strip():
                return False
    return True


def blank_edges(path: Path, blank: bytes, block: int = 1 << 16) -> tuple[int, int]:
    """Byte offsets of the start of the first line and the end of the last (before its break) holding more than blank.

    ``blank``: what a blank line holds besides its line break (spaces and tabs, not the file's delimiter). The start
    is 0 unless blank lines come first; a byte-order mark counts as blank. An all-blank file gives its size twice.
    """
    breaks = b"\r\n"
    with path.open("rb") as f:
        offset = start = 0
        while head := f.read(block):
            bom = len(codecs.BOM_UTF8) if offset == 0 and head.startswith(codecs.BOM_UTF8) else 0
            first = len(head) - len(head[bom:].lstrip(blank + breaks))
            if (line_break := max(head.rfind(b"\n", 0, first), head.rfind(b"\r", 0, first))) >= 0:
                start = offset + line_break + 1
            offset += len(head)
            if first < len(head):
                break
        else:
            return offset, offset
        end = f.seek(0, io.SEEK_END)
        while not (last := len(_read_at(f, max(start, end - block), end).rstrip(blank + breaks))):
            end = max(start, end - block)  # a block of blank lines: the last line with more is further back
        at = max(start, end - block) + last  # just past the last byte that is not blank
        while (more := _read_at(f, at, at + block)) and b"\n" not in more and b"\r" not in more:
            at += len(more)  # the spaces ending the last line run into the next block
        return start, at + min((i for i in (more.find(b"\n"), more.find(b"\r")) if i >= 0), default=len(more))


def _read_at(f, start: int, end: int) -> bytes:
    f.seek(start)
    return f.read(end - start)


def _line_breaks(data: bytes, start: int, end: int) -> int:
    r"""Line breaks in ``data[start:end]``: ``\n``, ``\r`` and ``\r\n`` each end a line, as the CSV parser reads."""
    return data.count(b"\n", start, end) + data.count(b"\r", start, end) - data.count(b"\r\n", start, end)


class Utf8Stream(io.TextIOBase):
    r"""A UTF-8 file's text, decoded block by block, for pandas' chunked CSV parser.

    Bad bytes raise the error of :func:`read_utf8`, file offset and line included (lines end at ``\n``, ``\r`` or
    ``\r\n``, as the CSV parser and its messages count them); a byte-order mark is dropped.
    """

    def __init__(self, path: Path, block: int = 1 << 20, *, start: int = 0, end: int | None = None) -> None:
        """The text from byte ``start`` (a line's start) to byte ``end`` (the end of the file with ``None``)."""
        super().__init__()
        self._path = path
        self._file = path.open("rb")
        self._block = block
        self._end = end
        self._pending = b""  # bytes of a character cut by the end of the last block
        self._offset = start  # file offset of self._pending
        self._lines = 0  # line breaks before self._offset
        self._after_cr = False  # the byte before self._offset is a "\r": a "\n" next ends no other line
        if start:
            head = self._file.read(start)  # blank lines only (see blank_edges): no bad bytes
            self._lines, self._after_cr = _line_breaks(head, 0, start), head.endswith(b"\r")
        self._text = ""  # decoded, not yet returned
        self._eof = False

    def readable(self) -> bool:
        """Always: a text stream for reading."""
        return True

    def close(self) -> None:
        """Close the file."""
        self._file.close()
        super().close()

    def read(self, size: int | None = -1) -> str:
        """Up to ``size`` characters (all with ``None`` or a negative size), decoded from UTF-8."""
        while not self._eof and (size is None or size < 0 or len(self._text) < size):
            self._decode_block()
        if size is None or size < 0 or size >= len(self._text):
            out, self._text = self._text, ""
        else:
            out, self._text = self._text[:size], self._text[size:]
        return out

    def _decode_block(self) -> None:
        left = self._block if self._end is None else max(0, self._end - self._offset - len(self._pending))
        raw = self._file.read(min(self._block, left))
        self._eof = not raw
        data = self._pending + raw
        skip = len(codecs.BOM_UTF8) if self._offset == 0 and data.startswith(codecs.BOM_UTF8) else 0
        try:
            text, keep = data[skip:].decode("utf-8"), b""
        except UnicodeDecodeError as e:
            start = skip + e.start
            if raw and e.reason == "unexpected end of data":  # a character continues in the next block
                text, keep = data[skip:start].decode("utf-8"), data[start:]
            else:
                offset = self._offset + start
                line = self._lines + self._breaks(data, start) + 1
                raise not_utf8(self._path, data[start : skip + e.end], offset, line) from None
        done = len(data) - len(keep)
        self._lines += self._breaks(data, done)
        if done:
            self._after_cr = data.endswith(b"\r", 0, done)
        self._offset += done
        self._pending = keep
        self._text += text

    def _breaks(self, data: bytes, end: int) -> int:
        r"""Line breaks in ``data[:end]``, the bytes from ``self._offset``: a ``\r\n`` cut by a block counts once."""
        split = self._after_cr and data.startswith(b"\n")  # its "\r" ended the line, in the last block
        return _line_breaks(data, 0, end) - int(split and end > 0)
