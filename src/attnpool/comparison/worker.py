"""One run of a comparison, in a process of its own: ``python -m attnpool.comparison.worker REQUEST.yaml [--resume]``.

The request is a :class:`~attnpool.config.TrainConfig` as YAML; the run goes through :func:`attnpool.train`
(the Python API, not the console script). Exit status: 0 when the run is complete, :data:`INCOMPLETE` when folds
are left (``only_folds``), :data:`BAD_INPUT` for bad data or options (one line says which, as the CLI does), 1 on
any other error (its traceback ends the process's output).
"""

from __future__ import annotations

import logging
import sys

from attnpool.comparison.runner import BAD_INPUT, INCOMPLETE
from attnpool.config import make_config
from attnpool.training.recipe import train


def main(argv: list[str] | None = None) -> int:
    """Train the run described by ``argv[0]`` (``--resume`` continues it); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        result = train(make_config(argv[0], resume="--resume" in argv[1:]))
    except (ValueError, OSError) as err:  # DataError, RunError, a missing file: the user's to fix, no traceback
        print(f"attnpool train: error: {err}", file=sys.stderr)
        return BAD_INPUT
    return 0 if result.complete else INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
