"""What reaches the console: attnpool's own log lines at the verbosity's level; other libraries' output in train.log.

:func:`console` (a command's terminal) prints log lines on stderr. Outside ``verbose`` those are attnpool's own
records; another library's that propagate to the root logger (matplotlib's "generated new fontManager") only from
WARNING (a library's warning may be the one a user needs: accelerate's "the process may hang"), and during a run
:func:`quiet_third_party` sends all of them to ``train.log`` too.

:func:`quiet_third_party` keeps, for the length of a run, transformers' loading and saving bars, its log lines, other
libraries' log lines and known-harmless deprecation warnings of the libraries underneath off the console; they go
to ``train.log`` with every raw ``Trainer`` log, through :data:`DETAIL_LOGGER`. Everything it changes is restored
afterwards, so a Python caller's own transformers and logging settings survive :func:`attnpool.train`, and the
warnings it does not keep back reach a caller's own ``warnings.showwarning`` (``logging.captureWarnings``), and
``train.log`` too.
:func:`quiet_library_call` (``attnpool.predict``, ``explain_file``, ``export``) turns off the bars and log lines only:
a library call leaves every warning to the caller.

The verbosity (:func:`set_verbosity`): ``quiet`` (the summary, warnings and errors), ``normal``, or ``verbose`` (the
``Trainer``'s own bars and log dicts, transformers' messages, as without attnpool). The command line sets it from
``--quiet`` / ``--verbose`` with :func:`console`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import transformers
from tqdm import tqdm

# the module, not the tqdm class that huggingface_hub.utils exports under the same name
_hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")

VERBOSITIES = ("quiet", "normal", "verbose")
# The level of the lines that --quiet keeps: the end-of-run summary (between INFO and WARNING).
SUMMARY = 25
logging.addLevelName(SUMMARY, "SUMMARY")
# What only train.log gets: every raw Trainer log, the progress lines, third-party messages (not propagated to the
# console's handlers; the run attaches its log file to it).
DETAIL_LOGGER = "attnpool.detail"
_detail = logging.getLogger(DETAIL_LOGGER)
_detail.propagate = False
_detail.setLevel(logging.INFO)
_detail.addHandler(logging.NullHandler())  # outside a run (or off the main process): nowhere, not stderr
# Libraries whose own console handlers a run turns down to errors (their records go to train.log instead).
_QUIET_LOGGERS = ("transformers", "mlflow")
# Libraries that print through a console handler of their own: the root's console handler does not print their
# records again (transformers propagates them under CI=true, huggingface_hub always).
_OWN_CONSOLE_LOGGERS = ("transformers", "huggingface_hub")
# Libraries whose FutureWarning / DeprecationWarning (raised in their own code) say nothing to an attnpool user.
_QUIET_WARNING_PACKAGES = ("transformers", "torch", "accelerate", "huggingface_hub", "tokenizers", "safetensors",
                           "tensorboard", "mlflow")

_settings = {"verbosity": "normal"}


def get_verbosity() -> str:
    """The current verbosity: ``quiet``, ``normal`` or ``verbose``."""
    return _settings["verbosity"]


def set_verbosity(verbosity: str) -> str:
    """Set the verbosity of training output (``quiet``, ``normal``, ``verbose``); returns the previous one."""
    if verbosity not in VERBOSITIES:
        raise ValueError(f"verbosity must be one of {', '.join(VERBOSITIES)}, got {verbosity!r}")
    previous, _settings["verbosity"] = _settings["verbosity"], verbosity
    return previous


def _own(record: logging.LogRecord) -> bool:
    """Whether a record is attnpool's (``attnpool`` or ``attnpool.*``), not another library's."""
    return record.name == "attnpool" or record.name.startswith("attnpool.")


class _OwnLines(logging.Filter):
    """The console outside ``verbose``: attnpool's records; another library's only from ``floor`` up.

    During a run (:func:`quiet_third_party`) ``train.log`` gets all of them, the console still those from WARNING.
    """

    floor = logging.WARNING

    def filter(self, record: logging.LogRecord) -> bool:
        return _own(record) or record.levelno >= self.floor


class _OthersTo(logging.Handler):
    """On the root logger for a run: other libraries' records to ``target`` (attnpool's reach it by its logger)."""

    def __init__(self, target: logging.Handler) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if not _own(record):
            self.target.handle(record)


class _Stderr(logging.StreamHandler):
    """A console handler that writes to whatever ``sys.stderr`` is when it writes (tests swap it)."""

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        # a live progress line on this terminal is cleared before the log line and redrawn below it, not written over
        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


@contextlib.contextmanager
def console(verbosity: str = "normal") -> Iterator[None]:
    """The terminal of one command: log lines on stderr at the verbosity's level, no third-party bars.

    ``quiet`` shows the summary (:data:`SUMMARY`) and warnings and errors; ``normal`` the INFO lines too;
    ``verbose`` also leaves the libraries' progress bars on and shows their log lines. Outside ``verbose`` another
    library's records are shown from WARNING only. Everything is restored on exit.
    """
    previous = set_verbosity(verbosity)
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(SUMMARY if verbosity == "quiet" else logging.INFO)
    if verbosity != "verbose":
        handler.addFilter(_OwnLines())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.ExitStack() as stack:
            for name in _OWN_CONSOLE_LOGGERS:
                if logging.getLogger(name).handlers:  # printed by their own handler: not a second time
                    stack.enter_context(_not_propagated(logging.getLogger(name)))
            if verbosity != "verbose":
                stack.enter_context(_no_library_bars())
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        set_verbosity(previous)


@contextlib.contextmanager
def _not_propagated(library: logging.Logger) -> Iterator[None]:
    propagate, library.propagate = library.propagate, False
    try:
        yield
    finally:
        library.propagate = propagate


@contextlib.contextmanager
def _no_library_bars() -> Iterator[None]:
    """No tqdm bars from transformers and huggingface_hub ("Loading weights", "Writing model shards"), then back.

    huggingface_hub keeps its switches per group (``disable_progress_bars("huggingface_hub.http_get")``) in one
    dict, which ``enable_progress_bars()`` clears: the dict itself is put back, so a caller's groups survive.
    """
    bars = transformers.utils.logging.is_progress_bar_enabled()
    hub_states = dict(_hub_tqdm.progress_bar_states)
    transformers.utils.logging.disable_progress_bar()  # also turns huggingface_hub's off
    try:
        yield
    finally:
        if transformers.utils.logging.is_progress_bar_enabled() != bars:
            with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS refuses the switch: said on the way in
                warnings.simplefilter("ignore")
                (transformers.utils.logging.enable_progress_bar if bars else
                 transformers.utils.logging.disable_progress_bar)()
        _hub_tqdm.progress_bar_states.clear()  # in place: huggingface_hub reads this very dict
        _hub_tqdm.progress_bar_states.update(hub_states)


@contextlib.contextmanager
def quiet_library_call() -> Iterator[None]:
    """For one ``predict``, ``explain_file`` or ``export`` call: the libraries' bars and log lines below errors off.

    Unlike :func:`quiet_third_party`, warnings are left alone: they reach the caller's ``warnings.showwarning``
    (``logging.captureWarnings(True)`` sends them to the caller's logging) as they would without attnpool.
    """
    with contextlib.ExitStack() as stack:
        if get_verbosity() != "verbose":
            _quiet_libraries(stack, None)
        yield


def _quiet_libraries(stack: contextlib.ExitStack, log_handler: logging.Handler | None) -> None:
    """On ``stack``: the libraries' bars off, and transformers' and mlflow's records to ``log_handler`` only."""
    stack.enter_context(_no_library_bars())
    for name in _QUIET_LOGGERS:
        stack.enter_context(_logger_to_file(logging.getLogger(name), log_handler))


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _QUIET_WARNING_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            dirs.append(str(Path(spec.origin).parent) + os.sep)
    return tuple(dirs)


@contextlib.contextmanager
def quiet_third_party(log_handler: logging.Handler | None = None) -> Iterator[None]:
    """For one run: third-party bars off, their log lines and deprecation warnings to ``log_handler``, not the console.

    ``log_handler`` (``train.log``) also gets :data:`DETAIL_LOGGER`'s records and every Python warning; at
    ``verbose`` that is all that changes. Otherwise it also gets what other libraries log to the root logger (the
    :func:`console` shows only their errors meanwhile), and transformers' and mlflow's records, which stop
    propagating for the run.

    A ``FutureWarning`` or ``DeprecationWarning`` raised inside transformers, torch and the other libraries below
    attnpool is one to their callers' authors (us), not to the user: it goes to ``train.log`` only (shown at
    ``verbose``); one raised in attnpool's code or the user's is still shown. Errors that the libraries log still
    reach the console.
    """
    stack = contextlib.ExitStack()
    with stack:
        if log_handler is not None:
            _detail.addHandler(log_handler)
            stack.callback(_detail.removeHandler, log_handler)
        verbose = get_verbosity() == "verbose"
        if not verbose:
            _quiet_libraries(stack, log_handler)
            if log_handler is not None:
                stack.enter_context(_others_to_file(log_handler))
        stack.enter_context(_warnings_to_file(() if verbose else _package_dirs()))  # verbose: none kept back
        yield


@contextlib.contextmanager
def _others_to_file(log_handler: logging.Handler) -> Iterator[None]:
    """Other libraries' records that reach the root logger to ``log_handler`` too (the console keeps its floor)."""
    root, others = logging.getLogger(), _OthersTo(log_handler)
    root.addHandler(others)
    try:
        yield
    finally:
        root.removeHandler(others)


@contextlib.contextmanager
def _logger_to_file(library: logging.Logger, log_handler: logging.Handler | None) -> Iterator[None]:
    """A library's own (console) handlers pass only its errors, and its records go to ``log_handler`` only.

    The handlers get a filter rather than a level: one may be shared with other loggers (a caller's handler also on
    the root logger, pytest's capture), whose records must still pass. With a ``log_handler`` the library's records
    stop propagating for the run (transformers' do under CI=true): not to the console's handler on the root logger,
    nor to ``log_handler`` a second time from there.
    """
    handlers = list(library.handlers)
    propagate = library.propagate
    errors_only = _ErrorsOnly(library.name)
    for handler in handlers:
        handler.addFilter(errors_only)
    if log_handler is not None:
        library.addHandler(log_handler)
        library.propagate = False
    try:
        yield
    finally:
        if log_handler is not None:
            library.removeHandler(log_handler)
        library.propagate = propagate
        for handler in handlers:
            handler.removeFilter(errors_only)


class _ErrorsOnly(logging.Filter):
    """Drops the records below ERROR of one logger and its children (``name``); passes every other logger's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not super().filter(record)  # Filter(name): that logger's records


def _plain(show: Any) -> bool:
    """Whether ``show`` is the standard library's own ``warnings.showwarning`` (nobody has replaced it)."""
    return getattr(show, "__module__", None) in ("warnings", "_py_warnings") and show.__name__ == "showwarning"


@contextlib.contextmanager
def _warnings_to_file(package_dirs: tuple[str, ...]) -> Iterator[None]:
    previous = warnings.showwarning  # a caller's own (logging.captureWarnings) still gets the warnings it would

    with warnings.catch_warnings():  # restores showwarning and the filters on exit
        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
            kept_back = issubclass(category, FutureWarning | DeprecationWarning) and filename.startswith(package_dirs)
            if kept_back or getattr(previous, "__module__", None) != "logging":  # captureWarnings': logged to it
                _detail.warning("%s", text)  # train.log has every warning, those the console shows too
            if kept_back:
                return
            if _plain(previous):
                tqdm.write(text, file=sys.stderr)  # above a live progress line, not through it
            else:
                with tqdm.external_write_mode(file=sys.stderr):
                    previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


__all__ = ["DETAIL_LOGGER", "SUMMARY", "VERBOSITIES", "console", "get_verbosity", "quiet_library_call",
           "quiet_third_party", "set_verbosity"]
