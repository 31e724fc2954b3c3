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
