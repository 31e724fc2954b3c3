"""What a person sees while a run trains: one progress line per fold, plain lines off a terminal, quiet or verbose.

:class:`FoldProgress` (a ``transformers.TrainerCallback``) draws one live line per fold with tqdm on a terminal:
step/total, epoch, the smoothed training loss, the last validation metric, elapsed time and ETA; an evaluation shows
as a short status on that line, not as a second bar. When its stream is not a terminal (a file, CI, a ``compare``
worker's log) it prints plain lines instead, one per evaluation and one at least every ``interval`` seconds between
them, without carriage returns or escape sequences.

:func:`quiet_third_party` keeps, for the length of a run, transformers' loading and saving bars, its log lines and
known-harmless deprecation warnings of the libraries underneath off the console; they go to ``train.log`` with
every raw ``Trainer`` log, through :data:`DETAIL_LOGGER`. Everything it changes is restored afterwards, so a Python
caller's own transformers settings survive :func:`attnpool.train`.

The verbosity (:func:`set_verbosity`): ``quiet`` (the summary and errors), ``normal``, or ``verbose`` (the
``Trainer``'s own bars and log dicts, transformers' messages, as without attnpool). The command line sets it from
``--quiet`` / ``--verbose`` with :func:`console`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TextIO

import huggingface_hub.utils
import transformers
from tqdm import tqdm

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


class _Stderr(logging.StreamHandler):
    """A console handler that writes to whatever ``sys.stderr`` is when it writes (tests swap it)."""

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


@contextlib.contextmanager
def console(verbosity: str = "normal") -> Iterator[None]:
    """The terminal of one command: log lines on stderr at the verbosity's level, no third-party bars.

    ``quiet`` shows the summary (:data:`SUMMARY`) and warnings and errors; ``normal`` the INFO lines too;
    ``verbose`` also leaves the libraries' progress bars on. Everything is restored on exit.
    """
    previous = set_verbosity(verbosity)
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(SUMMARY if verbosity == "quiet" else logging.INFO)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.nullcontext() if verbosity == "verbose" else _no_library_bars():
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        set_verbosity(previous)


@contextlib.contextmanager
def _no_library_bars() -> Iterator[None]:
    """No tqdm bars from transformers and huggingface_hub ("Loading weights", "Writing model shards"), then back."""
    bars = transformers.utils.logging.is_progress_bar_enabled()
    hub_bars = not huggingface_hub.utils.are_progress_bars_disabled()
    transformers.utils.logging.disable_progress_bar()  # also turns huggingface_hub's off
    try:
        yield
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
        if hub_bars:
            huggingface_hub.utils.enable_progress_bars()
        else:
            huggingface_hub.utils.disable_progress_bars()


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

    ``log_handler`` (``train.log``) also gets :data:`DETAIL_LOGGER`'s records; at ``verbose`` that is all that
    changes. Everything is restored on exit.

    A ``FutureWarning`` or ``DeprecationWarning`` raised inside transformers, torch and the other libraries below
    attnpool is one to their callers' authors (us), not to the user; one raised in attnpool's code or the user's is
    still shown. Errors that the libraries log still reach the console.
    """
    stack = contextlib.ExitStack()
    with stack:
        if log_handler is not None:
            _detail.addHandler(log_handler)
            stack.callback(_detail.removeHandler, log_handler)
        if get_verbosity() != "verbose":
            stack.enter_context(_no_library_bars())
            for name in _QUIET_LOGGERS:
                stack.enter_context(_logger_to_file(logging.getLogger(name), log_handler))
            stack.enter_context(_warnings_to_file(_package_dirs()))
        yield


@contextlib.contextmanager
def _logger_to_file(library: logging.Logger, log_handler: logging.Handler | None) -> Iterator[None]:
    """A library's own (console) handlers turned down to errors, and its records sent to ``log_handler``."""
    levels = [(handler, handler.level) for handler in library.handlers]
    for handler, level in levels:
        handler.setLevel(max(level, logging.ERROR))
    if log_handler is not None:
        library.addHandler(log_handler)
    try:
        yield
    finally:
        if log_handler is not None:
            library.removeHandler(log_handler)
        for handler, level in levels:
            handler.setLevel(level)


@contextlib.contextmanager
def _warnings_to_file(package_dirs: tuple[str, ...]) -> Iterator[None]:
    with warnings.catch_warnings():  # restores showwarning and the filters on exit
        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
            if issubclass(category, FutureWarning | DeprecationWarning) and filename.startswith(package_dirs):
                _detail.warning("%s", text)
            else:
                tqdm.write(text, file=sys.stderr)  # above a live progress line, not through it

        warnings.showwarning = show
        yield


def _clock(seconds: float) -> str:
    return tqdm.format_interval(max(0.0, seconds))


def _compact(logs: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in logs.items())


class FoldProgress(transformers.TrainerCallback):
    """One progress line per fold: step/total, epoch, smoothed training loss, last validation metric, elapsed, ETA.

    Args:
        label: What the line starts with (``fold 0``).
        mode: ``bar`` (a live tqdm line), ``lines`` (plain lines), ``off``, or ``None``: off at ``quiet`` and
            ``verbose`` (the ``Trainer`` draws its own bars then), else a bar when the stream is a terminal and plain
            lines otherwise.
        stream: Where to draw (default: ``sys.stderr`` at the start of training).
        interval: In ``lines`` mode, the longest wait in seconds between two lines (there is also one per evaluation).
        smoothing: Weight of the newest logged loss in the exponential moving average shown.
    """

    def __init__(self, label: str = "training", *, mode: str | None = None, stream: TextIO | None = None,
                 interval: float = 30.0, smoothing: float = 0.3) -> None:
        if mode not in (None, "bar", "lines", "off"):
            raise ValueError(f"mode must be bar, lines, off or None, got {mode!r}")
        self.label, self.mode, self.stream, self.interval, self.smoothing = label, mode, stream, interval, smoothing
        self._bar: Any = None
        self._drawing = "off"  # until training starts: an evaluate() on its own draws nothing
        self._reset(SimpleNamespace(num_train_epochs=0, metric_for_best_model=None, greater_is_better=None), 0)

    def _reset(self, args: Any, step: int) -> None:
        self._stream = self.stream or sys.stderr
        self._started = self._last_line = time.perf_counter()
        self._first_step, self._epochs = step, args.num_train_epochs
        self._metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
        self._greater = bool(args.greater_is_better)
        self._loss = self._metric_value = self._best = None
        self._evaluated = 0

    # --- what the line says
    def _line(self, state: Any, short: bool = False) -> str:
        parts = [f"epoch {state.epoch or 0:.2f}/{self._epochs:g}"]
        if self._loss is not None:
            parts.append(f"loss {self._loss:.4g}")
        if self._metric_value is not None:
            best = "" if short or self._best is None else f" (best {self._best:.4f})"
            parts.append(f"val {self._metric} {self._metric_value:.4f}{best}")
        if short:
            return ", ".join(parts)
        done = state.global_step - self._first_step
        elapsed = time.perf_counter() - self._started
        remaining = state.max_steps - state.global_step
        left = elapsed / done * remaining if done and remaining > 0 else None
        return (f"{self.label}: step {state.global_step}/{state.max_steps}, " + ", ".join(parts)
                + f", {_clock(elapsed)} elapsed" + (f", {_clock(left)} left" if left is not None else ""))

    def _emit(self, state: Any) -> None:
        line = self._line(state)
        _detail.info("%s", line)
        if self._drawing == "lines":
            print(line, file=self._stream, flush=True)
            self._last_line = time.perf_counter()
        elif self._drawing == "bar":
            self._bar.set_postfix_str(self._line(state, short=True), refresh=False)
            self._bar.update(state.global_step - self._bar.n)
            self._bar.refresh()

    # --- the Trainer's events
    def on_train_begin(self, args, state, control, **kwargs):
        """Start the line of this fold (main process only)."""
        self._reset(args, state.global_step)
        mode = self.mode
        if mode is None:
            terminal = getattr(self._stream, "isatty", lambda: False)()
            mode = "off" if get_verbosity() != "normal" else "bar" if terminal else "lines"
        self._drawing = mode if state.is_world_process_zero else "off"
        _detail.info("%s: %d steps (%g epochs) from step %d", self.label, state.max_steps, self._epochs,
                     state.global_step)
        if self._drawing == "bar":
            self._bar = tqdm(total=state.max_steps, initial=state.global_step, desc=self.label, file=self._stream,
                             dynamic_ncols=True, leave=True, unit="step",
                             bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}]{postfix}")

    def on_step_end(self, args, state, control, **kwargs):
        """Move the bar; off a terminal, a line when none came for ``interval`` seconds."""
        if self._drawing == "bar":
            self._bar.update(state.global_step - self._bar.n)
        elif self._drawing == "lines" and time.perf_counter() - self._last_line >= self.interval:
            self._emit(state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        """The raw log to train.log; a training loss into the moving average."""
        logs = dict(logs or {})
        logs.pop("total_flos", None)
        _detail.info("%s: step %d: %s", self.label, state.global_step, _compact(logs))
        loss = logs.get("loss")
        if isinstance(loss, int | float) and "train_runtime" not in logs:
            self._loss = loss if self._loss is None else (1 - self.smoothing) * self._loss + self.smoothing * loss
        if self._drawing == "bar":
            self._bar.set_postfix_str(self._line(state, short=True))

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        """During an evaluation, a short status on the fold's line."""
        if self._drawing != "bar":
            return
        total = len(eval_dataloader) if eval_dataloader is not None and hasattr(eval_dataloader, "__len__") else None
        self._evaluated += 1
        self._bar.set_postfix_str(f"evaluating {self._evaluated}" + (f"/{total}" if total else ""), refresh=False)
        self._bar.refresh()

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """The new validation metric on the line (off a terminal: a line per evaluation)."""
        self._evaluated = 0
        value = (metrics or {}).get(f"eval_{self._metric}")
        if isinstance(value, int | float):
            self._metric_value = float(value)
            better = self._best is None or (value > self._best if self._greater else value < self._best)
            self._best = float(value) if better else self._best
        self._emit(state)

    def on_train_end(self, args, state, control, **kwargs):
        """Leave the fold's final line."""
        if self._drawing == "bar" and self._bar is not None:
            self._bar.set_postfix_str(self._line(state, short=True), refresh=False)
            self._bar.update(state.global_step - self._bar.n)
            self._bar.close()
            self._bar = None
        _detail.info("%s: done at step %d in %s", self.label, state.global_step,
                     _clock(time.perf_counter() - self._started))
        self._drawing = "off"
