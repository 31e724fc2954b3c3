"""A comparison's saved recipe read back: its paths made absolute, and which values count as the same."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from attnpool.config import load_yaml
from attnpool.runs.run import Run
from attnpool.training.saved_paths import PATH_OPTIONS, absolute_paths


def saved_paths(out: Path, saved: dict[str, Any]) -> dict[str, Any]:
    """The paths of a saved recipe made absolute, as :func:`attnpool.comparison.runner._check_recipe` saves them now.

    A comparison saved before that holds paths relative to the folder its first call ran in, which is not known:
    each is taken from a run inside (runs save theirs absolute) whose path ends in it, else read from this call's
    working directory. A model that is no local folder is a hub name and stays one.
    """
    saved = dict(saved)
    relative = [k for k in PATH_OPTIONS if saved.get(k) and not Path(saved[k]).expanduser().is_absolute()]
    runs = [load_yaml(Run(d).config_file) for d in sorted(out.glob("runs/*/seed_*"))
            if relative and Run(d).config_file.is_file()]
    for key in relative:
        parts = Path(saved[key]).parts  # data/x.csv and ./data/x.csv alike
        for values in runs:
            found = values.get(key)
            if isinstance(found, str) and Path(found).is_absolute() and Path(found).parts[-len(parts):] == parts:
                saved[key] = found
                break
    return absolute_paths(saved)


def same_value(key: str, saved: Any, given: Any) -> bool:
    """Whether a saved recipe value and this call's are the same: equal, or paths of one existing file or folder."""
    if saved == given:
        return True
    if key not in PATH_OPTIONS or not isinstance(saved, str) or not isinstance(given, str):
        return False
    with contextlib.suppress(OSError):  # a hard link, a case-insensitive file system
        return os.path.samefile(saved, given)
    return False
