"""Write several files as one: each whole under a temporary sibling first, then all renamed into place."""

from __future__ import annotations

import os
from pathlib import Path

from attnpool.runs.files import staged


def write_texts_together(texts: dict[Path, str]) -> None:
    """Write each text to a temporary sibling of its path, then rename them all into place, in the given order.

    Nothing is replaced until every file is written whole: when a write fails (a full disk), only the temporary
    files are deleted and the files already under those names stay as they were. Put the file that marks the set
    as finished last.
    """
    temporaries: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            temporaries[path] = staged(path, lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
        for path, tmp in temporaries.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
        raise
