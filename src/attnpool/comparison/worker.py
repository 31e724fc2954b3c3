"""One run of a comparison, in a process of its own: ``python -m attnpool.comparison.worker REQUEST.yaml [...]``.

The request is a :class:`~attnpool.config.TrainConfig` as YAML; the run goes through :func:`attnpool.train`
(the Python API, not the console script); ``--resume`` after it continues the run. Exit status: 0 when the run is
complete, :data:`INCOMPLETE` when folds are left (``only_folds``), :data:`BAD_INPUT` for bad data or options (one
line says which, as the CLI does), 1 on any other error (its traceback ends the process's output). With
``--peak-file PATH``, the process's own peak resident memory in bytes (:func:`~attnpool.allocator.own_peak_bytes`)
is written to ``PATH`` when it ends, for the runner's cost file. Each ``--import MODULE`` is imported first: the
module of a user's pooler, which registers it (see :func:`~attnpool.comparison.specs.worker_imports`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attnpool.allocator import own_peak_bytes
from attnpool.cli_flags import import_modules
from attnpool.comparison.runner import BAD_INPUT, INCOMPLETE
from attnpool.config import make_config
from attnpool.runs.files import atomic_write_text
from attnpool.training.recipe import train


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's command line: the request file, ``--resume``, ``--import MODULE`` (repeated), ``--peak-file``."""
    parser = argparse.ArgumentParser(prog="python -m attnpool.comparison.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("request", help="the run's TrainConfig as YAML")
    parser.add_argument("--resume", action="store_true", help="continue the run in the request's output_dir")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="a module to import first (one defining a user's pooler); repeatable")
    parser.add_argument("--peak-file", type=Path, default=None, help="write this process's peak memory here at exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Train the run described by the request file (``--resume`` continues it); returns the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        import_modules(args.imports)
        result = train(make_config(args.request, resume=args.resume))
    except (ValueError, OSError, ImportError) as err:  # DataError, RunError, a missing file or --import module: the
        # user's to fix, no traceback
        print(f"attnpool train: error: {err}", file=sys.stderr)
        return BAD_INPUT
    finally:
        peak = own_peak_bytes() if args.peak_file is not None else None
        if peak is not None:  # written last: the peak of the whole run, loading and evaluating included
            atomic_write_text(args.peak_file, str(peak))
    return 0 if result.complete else INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
