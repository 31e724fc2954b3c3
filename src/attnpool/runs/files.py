"""Atomic writes: a file or folder appears whole under its name, or not at all (never a partial output)."""

from __future__ import annotations

import errno
import functools
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnpool.json_values import json_value


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (``/proc/self/status``).

    Elsewhere it is set and restored: for that moment, a file another thread creates would get mode 0666.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


# What fsync answers on a file system that has no fsync to give (some network mounts), or none for this descriptor
# (CIFS refuses it on one opened read-only): nothing was lost
_NO_FSYNC = {errno.EINVAL, errno.EBADF, errno.EACCES, errno.EPERM, getattr(errno, "ENOTSUP", errno.EINVAL),
             getattr(errno, "EOPNOTSUPP", errno.EINVAL)}


def _sync(path: Path, strict: bool = False) -> None:
    """Flush a file (or a folder's entries) to the disk: a renamed file must not come back empty after a crash.

    ``strict`` (a file about to be renamed into place): an fsync that fails otherwise than for want of fsync (a
    full disk, an I/O error: the data may not be on disk) raises, so the file is not renamed in as whole.
    """
    # a file this process just wrote: opened for writing, as CIFS fsyncs only such a descriptor
    flags = os.O_RDWR if strict else os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # e.g. folders cannot be opened on Windows: nothing to flush there
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if strict and err.errno not in _NO_FSYNC:
            raise
    finally:
        os.close(fd)


def staged(path: str | Path, write: Callable[[Path], None], *, tmp_dir: str | Path | None = None) -> Path:
    """Write through ``write(tmp_path)`` to a temporary file beside ``path``, whole and on disk; return its path.

    The first half of :func:`atomic_write`, for writes that must all succeed before any is renamed into place. A
    failed write leaves no temporary file. ``tmp_dir``: as :func:`atomic_write`'s.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=tmp_dir or path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide the outputs from the rest of a team
        _sync(Path(tmp), strict=True)  # on disk before the name: a "finished" part or fold never empty after a crash
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write(path: str | Path, write: Callable[[Path], None], *, tmp_dir: str | Path | None = None) -> Path:
    """Write through ``write(tmp_path)`` to a temporary name beside ``path``, then rename: never a partial file.

    ``tmp_dir``: a folder (on the file system of ``path``) to make the temporary file in instead, e.g. one whose
    deletion also removes what a killed write leaves there.
    """
    path = Path(path)
    tmp = staged(path, write, tmp_dir=tmp_dir)
    try:
        os.replace(tmp, path)
        _sync(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Atomically write a text file."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, data: Any) -> Path:
    """Atomically write JSON (NaN and infinities written as null, NumPy values as numbers: :func:`json_value`)."""
    return atomic_write_text(path, json.dumps(json_value(data), indent=2, sort_keys=False) + "\n")


def atomic_save_dir(path: str | Path, save: Callable[[Path], None]) -> Path:
    """Fill a temporary sibling folder through ``save(tmp_dir)``, then swap it in place of ``path``.

    The old folder is renamed aside, the new one renamed in, then the old one deleted: at every moment one of them
    is whole under a name. Leftovers of a save killed before (``.NAME.*`` siblings, full copies of a model) are
    deleted first; call it under the run's lock.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    old = None
    try:
        save(tmp)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700, as for files
        for item in tmp.iterdir():
            if item.is_file():
                _sync(item)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            os.replace(path, old)
        os.replace(tmp, path)
        _sync(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not path.exists():
            os.replace(old, path)  # the save failed after the old folder moved aside: put it back
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path


# How a full disk shows in a save: OSError's text, safetensors' (SafetensorError: "... (os error 28)"), and torch's
# (RuntimeError "[enforce fail at inline_container.cc:672] . unexpected pos N vs M": its zip writer's failed write)
_FULL_DISK = ("no space left", "os error 28", "unexpected pos")


@contextmanager
def full_disk_hint(what: str, where: str | Path, run: str | Path) -> Iterator[None]:
    """Re-raise a full disk's error while saving ``what`` in ``where`` as one ``OSError(ENOSPC)`` with the way on.

    torch and safetensors report ENOSPC as errors of their own (``RuntimeError``, ``SafetensorError``), which the CLI
    would print as a traceback; the run itself is sound (its last complete checkpoint), so ``--resume`` goes on.
    """
    try:
        yield
    except Exception as err:
        if getattr(err, "errno", None) != errno.ENOSPC and not any(s in str(err).lower() for s in _FULL_DISK):
            raise
        raise OSError(errno.ENOSPC, f"no space left on device while saving {what} in {where}; free space, then "
                      f"attnpool train --output-dir {shlex.quote(str(run))} --resume") from err


def full_disk_checked(save_checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    """A ``RecipeTrainer._save_checkpoint`` whose full disk says so (:func:`full_disk_hint`).

    The checkpoint goes under the trainer's ``args.output_dir``; the run is its recipe's ``output_dir``.
    """
    @functools.wraps(save_checkpoint)
    def save(trainer: Any, *args: Any, **kwargs: Any) -> Any:
        with full_disk_hint("a checkpoint", trainer.args.output_dir, trainer.recipe.output_dir):
            return save_checkpoint(trainer, *args, **kwargs)
    return save


def not_a_folder(path: Path) -> str | None:
    """Why ``path`` cannot be a run's folder (a file there, a symbolic link to nothing), for an error; else ``None``."""
    if path.is_symlink() and not path.exists():
        target = Path(os.readlink(path))
        resolved = "" if target.is_absolute() else f" ({path.parent.absolute() / target})"
        return (f"output path {path} is a symbolic link to {target}{resolved}, which does not exist; create that "
                "folder, or remove the link, or choose another --output-dir")
    if path.exists() and not path.is_dir():
        return f"output path {path} exists and is a file; choose a folder for the run"
    return None


def check_writable(path: str | Path, option: str = "--output", *, folder: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written: a folder, under a file, in a folder not writable.

    ``path`` is a file to be written (its temporary and lock files go beside it; an existing folder there is refused:
    a file cannot be renamed onto it) or, with ``folder``, a folder to be made or filled (an existing one must be
    writable itself; a file or a symbolic link to nothing there is refused).
    Else the nearest existing folder above it must be a
    folder, writable (``os.access``), and take a file (tried: a read-only mount, or ``/proc``, which ``os.access``
    passes for root).

    Raises:
        ValueError: Saying which ``option`` to change, and why.
    """
    path = Path(path).expanduser()
    if folder and path.is_symlink() and not path.exists():
        raise ValueError(not_a_folder(path))
    if folder and path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file, not a folder; choose another {option}")
    if not folder and path.is_dir():
        example = path / f"predictions{path.suffix or '.csv'}"
        raise ValueError(f"{option} {path} is a folder; give a file path such as {example}")
    if folder and path.is_dir():
        above = path
    else:
        above = existing_above(path) or Path(".")
    if not above.is_dir():
        raise ValueError(f"{option} {path}: {above} is a file, not a folder, so nothing can be written under it; give "
                         f"a path in a folder, e.g. {above.parent / path.name}")
    if not takes_files(above):
        raise ValueError(f"cannot write {option} {path}: folder {above} is not writable (read-only or no "
                         f"permission); choose another {option}")


def existing_above(path: Path) -> Path | None:
    """The nearest existing path above ``path`` (a folder, or a file standing where one is needed), or ``None``."""
    return next((parent for parent in path.parents if parent.exists()), None)


def takes_files(folder: Path) -> bool:
    """Whether files can be made in ``folder``: writable (``os.access``), and one is made and deleted at once.

    The trial catches a read-only mount, or ``/proc``, which ``os.access`` passes for root.
    """
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False
