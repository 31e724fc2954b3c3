"""A run's ``train.log``: attnpool's records from the start of ``train`` on, and the error that ended the run.

The records logged before the run folder exists (a tracker left out, ``--resume``'s overridden options, a capped
``max_length``) are kept by :class:`EarlyRecords` and written first once the file is attached
(:func:`attach_log_file`); :func:`log_ending` writes why the run stopped (an error with its traceback, or an
interrupt) into the file alone: the console says it once, as the command line prints it.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from attnpool.runs import Run

PACKAGE_LOGGER = "attnpool"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class EarlyRecords(logging.Handler):
    """On the package logger from the start of a run until its log file is attached: the records logged meanwhile."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        logging.getLogger(PACKAGE_LOGGER).addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record."""
        self.records.append(record)

    def close(self) -> None:
        """Stop keeping records (idempotent)."""
        logging.getLogger(PACKAGE_LOGGER).removeHandler(self)
        super().close()


def attach_log_file(path: Path, early: EarlyRecords | None = None) -> logging.Handler:
    """Attach ``path`` to the package logger (at INFO), writing into it first the records ``early`` kept."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    if early is not None:
        early.close()
        for record in early.records:
            handler.handle(record)
    root = logging.getLogger(PACKAGE_LOGGER)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def resume_hint(output_dir: str | Path) -> str:
    """How an interrupted ``train`` into ``output_dir`` goes on: ``--resume``, or started again (no run recorded)."""
    if not Run.is_run(output_dir):  # not recorded yet: --resume would be refused
        return "start it again (without --resume): it stopped before its run was recorded"
    return (f"to continue from its last checkpoint: attnpool train ... --output-dir {shlex.quote(str(output_dir))} "
            "--resume")


def log_ending(handler: logging.Handler | None, error: BaseException, output_dir: str | Path) -> None:
    """Write into the log file alone (``handler``) what stopped the run: the error and its traceback, or an interrupt.

    An interrupt's record says how the run in ``output_dir`` goes on (:func:`resume_hint`, as the command line says).

    Never raises: the error that stopped the run is the one to see.
    """
    if handler is None:
        return
    logger = logging.getLogger(f"{PACKAGE_LOGGER}.train")
    try:
        if isinstance(error, KeyboardInterrupt):
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "interrupted (KeyboardInterrupt): the "
                                       "run stopped here; %s", (resume_hint(output_dir),), None)
        else:
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "the run stopped on an error: %s%s",
                                       (type(error).__name__, f": {message}" if message else ""),
                                       (type(error), error, error.__traceback__))
        handler.handle(record)
    except Exception:  # noqa: BLE001, S110 - an unwritable log must not hide the error
        pass


__all__ = ["EarlyRecords", "attach_log_file", "log_ending", "resume_hint"]
