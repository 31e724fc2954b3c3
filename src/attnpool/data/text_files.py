"""UTF-8 text files, read whole or streamed, with errors that give the line and byte offset of a bad byte."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

from attnpool.data.errors import DataError


def read_utf8(path: Path) -> str:
    """The file's text; a UTF-8 byte-order mark is dropped."""
    raw = path.read_bytes()
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = bom + e.start
        raise not_utf8(path, raw[offset : bom + e.end], offset, raw.count(b"\n", 0, offset) + 1) from None


def not_utf8(path: Path, bad: bytes, offset: int, line: int) -> DataError:
    """The error for an undecodable byte: where it is, and how to re-save the file."""
    return DataError(
        f"{path}: not valid UTF-8: byte(s) {bad.hex(' ')} at byte offset {offset} (line {line}); re-encode the file "
        "as UTF-8, e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv` or, in pandas, "
        "`pd.read_csv(path, encoding='latin-1').to_csv(out, index=False)`"
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


class Utf8Stream(io.TextIOBase):
    """A UTF-8 file's text, decoded block by block, for pandas' chunked CSV parser.

    Bad bytes raise the error of :func:`read_utf8`, file offset and line included; a byte-order mark is dropped.
    """

    def __init__(self, path: Path, block: int = 1 << 20) -> None:
        super().__init__()
        self._path = path
        self._file = path.open("rb")
        self._block = block
        self._pending = b""  # bytes of a character cut by the end of the last block
        self._offset = 0  # file offset of self._pending
        self._lines = 0  # line breaks before self._offset
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
        raw = self._file.read(self._block)
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
                line = self._lines + data.count(b"\n", 0, start) + 1
                raise not_utf8(self._path, data[start : skip + e.end], offset, line) from None
        done = len(data) - len(keep)
        self._lines += data.count(b"\n", 0, done)
        self._offset += done
        self._pending = keep
        self._text += text
