"""One run of a comparison, in a process of its own: ``python -m attnpool.comparison.worker REQUEST.yaml [...]``.

The request is a :class:`~attnpool.config.TrainConfig` as YAML; the run goes through :func:`attnpool.train`
(the Python API, not the console script); ``--resume`` after it continues the run. Exit status: 0 when the run is
complete, :data:`INCOMPLETE` when folds are left (``only_folds``), :data:`BAD_INPUT` for bad data or options (one
line says which, as the CLI does), 1 on any other error (its traceback ends the process's output). With
``--peak-file PATH``, the process's own peak resident memory in bytes (:func:`own_peak_bytes`) is written to
``PATH`` when it ends, for the runner's cost file. Each ``--import MODULE`` is imported first: the module of a user's
pooler, which registers it (see :func:`~attnpool.comparison.specs.worker_imports`).
"""

from __future__ import annotations

import logging
import resource
import sys
from pathlib import Path

from attnpool.cli_flags import import_modules
from attnpool.comparison.runner import BAD_INPUT, INCOMPLETE
from attnpool.config import make_config
from attnpool.runs.files import atomic_write_text
from attnpool.training.recipe import train


def own_peak_bytes() -> int:
    """This process's peak resident memory in bytes: ``VmHWM``, the high-water mark of its own address space.

    Not the ``ru_maxrss`` its parent gets from ``os.wait4``: on Linux that also counts the peak of the process it was
    started from (``exec`` keeps the high-water mark of the memory it replaces), so a compare called by a process
    that had trained a model (``benchmarks/quality.py``) gave every run at least that process's peak.
    ``VmHWM`` starts anew at ``exec``. Where ``/proc`` is missing (macOS), this process's own ``ru_maxrss`` (bytes
    on macOS, KiB on Linux), which may carry the same inherited peak.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def main(argv: list[str] | None = None) -> int:
    """Train the run described by ``argv[0]`` (``--resume`` continues it); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    peak_file = argv[argv.index("--peak-file") + 1] if "--peak-file" in argv else None
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    imports = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--import"]
    try:
        import_modules(imports)
        result = train(make_config(argv[0], resume="--resume" in argv[1:]))
    except (ValueError, OSError, ImportError) as err:  # DataError, RunError, a missing file or --import module: the
        # user's to fix, no traceback
        print(f"attnpool train: error: {err}", file=sys.stderr)
        return BAD_INPUT
    finally:
        if peak_file is not None:  # written last: the peak of the whole run, loading and evaluating included
            atomic_write_text(Path(peak_file), str(own_peak_bytes()))
    return 0 if result.complete else INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
