"""A run's ``train.log``: attnpool's records from the start of ``train`` on, and the error that ended the run.

The records logged before the run folder exists (a tracker left out, ``--resume``'s overridden options, a capped
``max_length``) are kept by :class:`EarlyRecords` and written first once the file is attached
(:func:`attach_log_file`); :func:`log_ending` writes why the run stopped (an error with its traceback, or an
interrupt) into the file alone: the console says it once, as the command line prints it.
"""

from __future__ import annotations

import logging
from pathlib import Path

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


def log_ending(handler: logging.Handler | None, error: BaseException, resumable: bool = True) -> None:
    """Write into the log file alone (``handler``) what stopped the run: the error and its traceback, or an interrupt.

    ``resumable``: the run had started (its info written), so ``--resume`` goes on; else it is run again.

    Never raises: the error that stopped the run is the one to see.
    """
    if handler is None:
        return
    logger = logging.getLogger(f"{PACKAGE_LOGGER}.train")
    try:
        if isinstance(error, KeyboardInterrupt):
            then = ("--resume goes on from its last checkpoint" if resumable else
                    "it had not started (no run info yet): run the command again, without --resume")
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "interrupted (KeyboardInterrupt): the "
                                       "run stopped here; %s", (then,), None)
        else:
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "the run stopped on an error: %s%s",
                                       (type(error).__name__, f": {message}" if message else ""),
                                       (type(error), error, error.__traceback__))
        handler.handle(record)
    except Exception:  # noqa: BLE001, S110 - an unwritable log must not hide the error
        pass


__all__ = ["EarlyRecords", "attach_log_file", "log_ending"]
