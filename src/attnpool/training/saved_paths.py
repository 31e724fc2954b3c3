"""The paths a run's ``config.yaml`` saves: made absolute at the start, and found again when a moved run resumes.

A run saves its training data's paths (and a local encoder folder's) absolute, so that it works from any folder. A
run copied to another folder or machine, its data and encoder with it, resumes with the call's ``--train-file`` /
``--model`` ... where a saved path no longer exists; the data fingerprints the run recorded (checked as the run
resumes) refuse other data, and the encoder's architecture is compared with the one the folds were trained from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnpool.config_checks import DATA_PATHS, PATH_OPTIONS  # also those whose ~ a config expands
from attnpool.runs.run import Run, RunError

logger = logging.getLogger("attnpool.train")
_ARCHITECTURE = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def absolute_paths(values: dict[str, Any]) -> dict[str, Any]:
    """The config's data paths made absolute (and a local model folder's), so that the run works from any folder.

    ``predict``/``serve``/``explain`` read a PPPM run's ``data_dir`` (its CPC texts) and ``--resume`` its training
    file: saved as given (``data_dir: pppm``), they were found only from the folder the run was trained in.
    """
    values = dict(values)
    for key in DATA_PATHS:
        if values.get(key):
            values[key] = str(Path(values[key]).expanduser().resolve())
    model = values.get("model")
    if model and Path(model).expanduser().is_dir():  # a local folder; a hub name stays a name
        values["model"] = str(Path(model).expanduser().resolve())
    return values


def find_moved_paths(run: Run, saved: dict[str, Any], given: Mapping[str, Any]) -> None:
    """Replace in ``saved`` (a resumed run's config) each saved path that no longer exists by the call's own.

    A saved model that is no path (a hub name) is kept. The data the call points to is checked as the run resumes
    (its row count and the data fingerprints the run recorded); a given encoder folder is compared here.

    Raises:
        RunError: A saved path that no longer exists, and the call gives no other (naming the file, the key, the
            path and the flag to give); a given encoder of another architecture than the folds were trained from.
    """
    for key in PATH_OPTIONS:
        old = saved.get(key)
        if not old or (key == "model" and not Path(old).expanduser().is_absolute()) or Path(old).expanduser().exists():
            continue
        new = str(absolute_paths({key: given[key]})[key]) if given.get(key) else None
        flag = f"--{key.replace('_', '-')}"
        if new is None or new == old:
            raise RunError(f"--resume: {run.config_file} has {key}: {old}, which does not exist (the run or its "
                           f"{'encoder' if key == 'model' else 'data'} moved?); give {flag} with where it is now, or "
                           f"edit {key} in that file")
        if key == "model":
            _check_same_encoder(run, new)
        logger.warning("--resume: %s of %s (%s) does not exist; using the given %s %s", key, run.config_file, old,
                       flag, new)
        saved[key] = new


def _check_same_encoder(run: Run, model: str) -> None:
    """Refuse an encoder folder whose architecture differs from the one saved with the run's trained folds."""
    given = _json(Path(model).expanduser() / "config.json")
    trained = next((c for f in run.trained_folds() if isinstance(c := _json(run.model_dir(f) / "config.json"), dict)
                    and isinstance(c.get("encoder"), dict)), None)
    if not isinstance(given, dict) or trained is None:  # a hub name, or no fold trained yet: nothing to compare
        logger.info("--resume: the encoder %s could not be compared with the run's (no fold model or no config.json "
                    "to read); using it", model)
        return
    if differ := [k for k in _ARCHITECTURE if k in given and k in trained["encoder"]
                  and given[k] != trained["encoder"][k]]:
        raise RunError(f"--resume: the encoder given with --model ({model}) is not the one the run's folds were "
                       "trained from: " + ", ".join(f"{k} {given[k]!r} (trained: {trained['encoder'][k]!r})"
                                                    for k in differ) + "; give the folder of the run's encoder")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
