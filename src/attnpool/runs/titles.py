"""A PPPM run's copy of its CPC titles: kept once, and held to on ``--resume``.

The texts a PPPM run trains on end with the title of each row's CPC context. The run keeps the ``cpc_texts.csv`` it
started with, so that prediction reads the titles its folds learned (:meth:`attnpool.runs.Run.config`) wherever the
run is, whatever becomes of the data folder's file; a resume with other titles would mix two sets in one run.
"""

from __future__ import annotations

from pathlib import Path

from attnpool.data.errors import DataError
from attnpool.data.pppm import read_titles
from attnpool.runs.files import atomic_write


def same_titles(kept: Path, source: Path) -> bool:
    """Whether ``source`` gives the titles of ``kept`` (written alike, or otherwise: quotes, order, line ends).

    A ``source`` that does not read as titles (a blank title, a code twice, not UTF-8) is not: the run reads its copy.
    """
    if not source.is_file():
        return False
    if source.read_bytes() == kept.read_bytes():
        return True
    try:
        return read_titles(source) == read_titles(kept)
    except DataError:
        return False


def keep_titles(kept: Path, source: Path) -> None:
    """Copy ``source`` (the data folder's titles) to ``kept`` (the run's) the first time; after, check it.

    Raises:
        DataError: ``kept`` exists and ``source`` gives other titles (a resumed run whose finished folds learned
            the old ones), naming the codes that differ and how to go on.
    """
    if not kept.is_file():
        if source.is_file():
            atomic_write(kept, lambda tmp: tmp.write_bytes(source.read_bytes()))
        return
    if not source.is_file() or source.read_bytes() == kept.read_bytes():
        return
    old, new = read_titles(kept), read_titles(source)
    changes = [(what, codes) for what, codes in (
        ("other titles for", [c for c in old if c in new and old[c] != new[c]]),
        ("codes added", [c for c in new if c not in old]),
        ("codes removed", [c for c in old if c not in new])) if codes]
    if changes:  # else the same titles written otherwise (quotes, order, line ends)
        shown = "; ".join(f"{what} {', '.join(map(repr, codes[:10]))}{', ...' if len(codes) > 10 else ''}"
                          for what, codes in changes)
        raise DataError(
            f"--resume: {source} changed since the run started ({shown}): the run's finished folds learned the "
            f"titles of its copy {kept}. Put the file back as it was (copy {kept} over it), or start a new run "
            "(another --output-dir, or --overwrite) to train with the new titles")
