"""A run's ``train.log``: attnpool's records from the start of ``train`` on, and the error that ended the run.

The records logged before the run folder exists (a tracker left out, ``--resume``'s overridden options, a capped
``max_length``) are kept by :class:`EarlyRecords` and written first once the file is attached
(:func:`attach_log_file`); :func:`log_ending` writes why the run stopped (an error with its traceback, or an
interrupt) into the file alone: the console says it once, as the command line prints it.
"""

from __future__ import annotations

import logging
import shlex
import sys
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


class LogFile(logging.FileHandler):
    """``train.log``'s handler: a write that fails (a full disk) never raises nor prints logging's traceback.

    The first failure is noted in one line on stderr (the records from then on are missing from the file); the
    error that stops the run on that disk (a checkpoint's, with the way on) is the one the caller sees.
    """

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        """A failed write (an ``OSError``: a full disk) is noted once on stderr, in one line.

        Other errors (a record that does not format) get logging's own report, as with any handler.
        """
        if isinstance(sys.exc_info()[1], OSError):
            self._note(sys.exc_info()[1])
        else:
            super().handleError(record)

    def close(self) -> None:
        """Close the file; its last flush failing (a full disk) is noted, not raised."""
        try:
            super().close()
        except OSError as err:
            self._note(err)

    def _note(self, err: BaseException | None) -> None:
        if self.failed:
            return
        self.failed = True
        try:
            sys.stderr.write(f"attnpool: warning: could not write {self.baseFilename} ({err}); the run's records "
                             "from here on are missing from it (free space on its disk for the next runs)\n")
        except Exception:  # noqa: BLE001, S110 - no stderr either: nothing more to say
            pass


def attach_log_file(path: Path, early: EarlyRecords | None = None) -> logging.Handler:
    """Attach ``path`` to the package logger (at INFO), writing into it first the records ``early`` kept.

    The handler (:class:`LogFile`) never raises on a failed write; take it off with :func:`detach_log_file`.
    """
    handler = LogFile(path, encoding="utf-8", errors="backslashreplace")  # a path of undecodable bytes written too
    handler.setFormatter(logging.Formatter(_FORMAT))
    if early is not None:
        early.close()
        for record in early.records:
            handler.handle(record)
    root = logging.getLogger(PACKAGE_LOGGER)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def detach_log_file(handler: logging.Handler | None, early: EarlyRecords | None = None) -> None:
    """Take ``handler`` (of :func:`attach_log_file`) off the package logger and close it, and ``early``; never raises.

    A full disk's last flush is noted once on stderr (:class:`LogFile`), so the error that stopped the run stays
    the one raised, and what the caller restores after this (the logger's level, the run's lock) is restored.
    """
    try:
        if early is not None:
            early.close()
        if handler is not None:
            logging.getLogger(PACKAGE_LOGGER).removeHandler(handler)
            handler.close()
    except Exception:  # noqa: BLE001, S110 - a handler other than LogFile: the run's own error comes first
        pass


def resume_hint(output_dir: str | Path) -> str:
    """How an interrupted ``train`` into ``output_dir`` goes on: ``--resume``, or started again (no run recorded)."""
    if not Run.is_run(output_dir):  # not recorded yet: --resume would be refused
        return "start it again (without --resume): it stopped before its run was recorded"
    return (f"to continue from its last checkpoint: attnpool train ... --output-dir {shlex.quote(str(output_dir))} "
            "--resume")


def log_ending(handler: logging.Handler | None, error: BaseException, output_dir: str | Path) -> None:
    """Write into the log file alone (``handler``) what stopped the run: the error and its traceback, or an interrupt.

    An interrupt (Ctrl-C, or SIGTERM: :class:`~attnpool.training.stop_signals.Terminated`) is named; its record
    says how the run in ``output_dir`` goes on (:func:`resume_hint`, as the command line says).

    Never raises: the error that stopped the run is the one to see.
    """
    if handler is None:
        return
    logger = logging.getLogger(f"{PACKAGE_LOGGER}.train")
    try:
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C; SIGTERM: Terminated, "interrupted (Terminated: SIGTERM)"
            why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "interrupted (%s): the run stopped "
                                       "here; %s", (why, resume_hint(output_dir)), None)
        else:
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "the run stopped on an error: %s%s",
                                       (type(error).__name__, f": {message}" if message else ""),
                                       (type(error), error, error.__traceback__))
        handler.handle(record)
    except Exception:  # noqa: BLE001, S110 - an unwritable log must not hide the error
        pass


__all__ = ["EarlyRecords", "LogFile", "attach_log_file", "detach_log_file", "log_ending", "resume_hint"]
