"""The run directory: its layout, atomic writes, and the checks that keep a run from being clobbered or misread."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnpool import __version__

RUN_FORMAT = 1  # bumped when the layout of a run directory changes incompatibly
RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"


class RunError(ValueError):
    """A run directory that cannot be used as asked (exists, wrong version, incomplete, corrupt)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write through ``write(tmp_path)`` to a temporary name beside ``path``, then rename: never a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide the outputs from the rest of a team
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Atomically write a text file."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, data: Any) -> Path:
    """Atomically write JSON (NaN written as null)."""
    return atomic_write_text(path, json.dumps(_nan_to_none(data), indent=2, sort_keys=False) + "\n")


def atomic_save_dir(path: str | Path, save: Callable[[Path], None]) -> Path:
    """Fill a temporary sibling folder through ``save(tmp_dir)``, then swap it in place of ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save(tmp)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700, as for files
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_to_none(v) for v in value]
    return value


def prepare_run_dir(path: str | Path, *, overwrite: bool, resume: bool) -> Path:
    """Create the run directory, or accept an existing one only with ``resume`` or ``overwrite``.

    ``overwrite`` deletes an existing attnpool run (a folder with ``run.json``) or an empty folder, and refuses any
    other folder so that a mistyped path cannot wipe unrelated files.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunError(f"output path {path} exists and is a file; choose a folder for the run")
    if path.exists() and any(path.iterdir()):
        if resume:
            read_run_info(path)
            return path
        if overwrite:
            if not (path / RUN_FILE).exists():
                raise RunError(f"--overwrite refuses to delete {path}: it is not an attnpool run (no {RUN_FILE})")
            shutil.rmtree(path)
        else:
            raise RunError(
                f"run directory {path} already exists; pass --resume to continue it, --overwrite to replace it, "
                "or choose another --output-dir"
            )
    elif resume:
        raise RunError(f"--resume: run directory {path} does not exist or is empty; start the run without --resume")
    path.mkdir(parents=True, exist_ok=True)
    return path


def fold_model_dirs(run_dir: str | Path) -> list[Path]:
    """The trained fold models of a run, ``RUN_DIR/fold_K/model/``, in fold order (``fold_2`` before ``fold_10``)."""
    found = (p for p in Path(run_dir).glob("fold_*/model") if re.fullmatch(r"fold_\d+", p.parent.name))
    return sorted(found, key=lambda p: int(p.parent.name.split("_")[1]))


def write_run_info(path: Path, info: dict[str, Any]) -> None:
    """Record the version and layout of the run, plus task facts (label classes...) that prediction needs."""
    atomic_write_json(path / RUN_FILE, {"attnpool_version": __version__, "format": RUN_FORMAT, **info})


def read_run_info(path: str | Path) -> dict[str, Any]:
    """Read ``run.json``, refusing runs of another layout version or folders that are not runs."""
    path = Path(path)
    file = path / RUN_FILE
    if not file.is_file():
        raise RunError(f"{path} is not an attnpool run directory (no {RUN_FILE}); give the --output-dir of a train run")
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise RunError(f"{file} is corrupt ({err}); re-run training or restore the file") from err
    if info.get("format") != RUN_FORMAT:
        raise RunError(
            f"{path} was written by attnpool {info.get('attnpool_version', '?')} in run format {info.get('format')}, "
            f"but this attnpool {__version__} reads format {RUN_FORMAT}; use a matching attnpool version or re-train"
        )
    return info
