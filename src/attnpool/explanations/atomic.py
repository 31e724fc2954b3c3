"""Write several files as one: each whole under a temporary sibling first, then all renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from attnpool.runs.files import atomic_write_text


def write_texts_together(texts: dict[Path, str]) -> None:
    """Write each text to a temporary sibling of its path, then rename them all into place, in the given order.

    Nothing is replaced until every file is written whole: when a write fails (a full disk), only the temporary
    files are deleted and the files already under those names stay as they were. Put the file that marks the set
    as finished last.
    """
    temporaries: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            temporaries[path] = Path(tmp)
            atomic_write_text(tmp, text)  # its mode, and on disk before it gets the real name
        for path, tmp in temporaries.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
        raise
