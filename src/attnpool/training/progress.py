"""What a person sees while a run trains: one progress line per fold, plain lines off a terminal, quiet or verbose.

:class:`FoldProgress` (a ``transformers.TrainerCallback``) draws one live line per fold with tqdm on a terminal:
the last validation metric first, the smoothed training loss, epoch, step/total, elapsed time and ETA, the least
needed dropped on a narrow terminal; an evaluation shows as a short status on that line, not as a second bar; log
lines go above it. When its stream is not a terminal (a file, CI, a ``compare`` worker's log), or one under
:data:`MIN_BAR_COLUMNS` wide or of no size (0x0), it prints plain lines instead, one per evaluation and one at least
every ``interval`` seconds between them, without carriage returns or escape sequences.

What else reaches the console, the verbosity and third-party output (:func:`console`, :func:`quiet_third_party`,
:func:`set_verbosity`) are :mod:`attnpool.training.console_logging`'s, importable from here too.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from types import SimpleNamespace
from typing import Any, TextIO

import transformers
from tqdm import tqdm
from tqdm.utils import disp_len

from attnpool.training.console_logging import (
    DETAIL_LOGGER,
    SUMMARY,
    VERBOSITIES,
    console,
    get_verbosity,
    quiet_library_call,
    quiet_third_party,
    set_verbosity,
)

_detail = logging.getLogger(DETAIL_LOGGER)  # train.log only: the raw Trainer logs and the progress lines
# Narrower than this (or a terminal that reports no size, 0x0), a live line cannot say much: plain lines instead.
MIN_BAR_COLUMNS = 40


def _clock(seconds: float) -> str:
    return tqdm.format_interval(max(0.0, seconds))


def _compact(logs: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in logs.items())


def _bar_fits(stream: TextIO) -> bool:
    """Whether a terminal is wide enough for a live line; one whose size cannot be read or is 0x0 is not."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a wrapper): tqdm draws at its default width
        return True
    try:
        return os.get_terminal_size(fd).columns >= MIN_BAR_COLUMNS
    except OSError:
        return False


# The parts of the live line after the facts, and how soon each is dropped on a narrow terminal (higher: sooner).
_TAIL_RANKS = {"percentage": 6, "time": 4, "bar": 3, "counts": 2}


class _FoldBar(tqdm):
    """The live line of a fold: ``LABEL: facts  pct%|bar| n/total [elapsed<left]``, fitted to the terminal.

    The facts come first (the validation metric leading), so what tqdm cuts at the edge is the bar's side; on a
    narrow terminal the parts of highest rank are dropped until the line fits with a bar of at least 10 columns.
    """

    facts: list[tuple[int, str]] = []  # (rank, text) in display order; rank 0 is always shown

    @property
    def format_dict(self) -> dict[str, Any]:
        d = super().format_dict
        if not hasattr(self, "unit"):  # closed before it was set up
            return d
        ncols = d["ncols"] if d["ncols"] is not None and d["ncols"] >= 20 else None  # shrunk to ~0: unsized
        ranks = sorted({rank for rank, _ in self.facts} | set(_TAIL_RANKS.values()) | {0}, reverse=True)
        for limit in ranks if ncols else ranks[:1]:
            prefix, bar_format = self._layout(limit)
            trial = self.format_meter(**{**d, "prefix": prefix, "ncols": None,
                                         "bar_format": bar_format.replace("{bar}", "{bar:10}")})
            if ncols is None or disp_len(trial) <= ncols:
                break
        d.update(ncols=ncols, prefix=prefix, bar_format=bar_format.replace("{bar}", "{bar}" if ncols else "{bar:20}"))
        return d

    def _layout(self, limit: int) -> tuple[str, str]:
        facts = ", ".join(text for rank, text in self.facts if rank <= limit)
        show = {name for name, rank in _TAIL_RANKS.items() if rank <= limit}
        percentage = "{percentage:3.0f}%" if "percentage" in show else ""
        tail = [percentage + "|{bar}|" if "bar" in show else percentage,
                "{n_fmt}/{total_fmt}" if "counts" in show else "", "[{elapsed}<{remaining}]" if "time" in show else ""]
        return f"{self.desc}: {facts}" if facts else f"{self.desc}:", " ".join(["{desc}", *filter(None, tail)])


class FoldProgress(transformers.TrainerCallback):
    """One progress line per fold: step/total, epoch, smoothed training loss, last validation metric, elapsed, ETA.

    Args:
        label: What the line starts with (``fold 0``).
        mode: ``bar`` (a live tqdm line), ``lines`` (plain lines), ``off``, or ``None``: off at ``quiet`` and
            ``verbose`` (the ``Trainer`` draws its own bars then), else a bar when the stream is a terminal and plain
            lines otherwise.
        stream: Where to draw (default: ``sys.stderr`` at the start of training).
        interval: In ``lines`` mode, the longest wait in seconds between two lines (there is also one per evaluation).
        smoothing: Weight of the newest logged loss in the exponential moving average shown, for a log of
            ``logging_steps`` steps (a shorter one, as at a checkpoint or the end, weighs less).
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
        self._first_step = self._logged_step = step
        self._epochs = args.num_train_epochs
        self._metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
        self._greater = bool(args.greater_is_better)
        self._loss = self._metric_value = self._best = None
        self._evaluated = 0

    # --- what the line says
    def _line(self, state: Any) -> str:
        parts = [f"epoch {state.epoch or 0:.2f}/{self._epochs:g}"]
        if self._loss is not None:
            parts.append(f"loss {self._loss:.4g}")
        if self._metric_value is not None:
            best = "" if self._best is None else f" (best {self._best:.4f})"
            parts.append(f"val {self._metric} {self._metric_value:.4f}{best}")
        done = state.global_step - self._first_step
        elapsed = time.perf_counter() - self._started
        remaining = state.max_steps - state.global_step
        left = elapsed / done * remaining if done and remaining > 0 else None
        return (f"{self.label}: step {state.global_step}/{state.max_steps}, " + ", ".join(parts)
                + f", {_clock(elapsed)} elapsed" + (f", {_clock(left)} left" if left is not None else ""))

    def _facts(self, state: Any, status: str | None = None) -> list[tuple[int, str]]:
        """What the live line says before its bar, with ranks for :class:`_FoldBar` (the metric stays longest)."""
        facts = []
        if self._metric_value is not None:
            facts.append((0, f"val {self._metric} {self._metric_value:.4f}"))
            if self._best is not None:
                facts.append((5, f"best {self._best:.4f}"))
        if status:
            facts.append((0, status))
        if self._loss is not None:
            facts.append((1, f"loss {self._loss:.4g}"))
        return [*facts, (7, f"epoch {state.epoch or 0:.2f}/{self._epochs:g}")]

    def _show(self, state: Any, status: str | None = None) -> None:
        self._bar.facts = self._facts(state, status)
        self._bar.update(state.global_step - self._bar.n)
        self._bar.refresh()

    def _emit(self, state: Any) -> None:
        line = self._line(state)
        _detail.info("%s", line)
        if self._drawing == "lines":
            print(line, file=self._stream, flush=True)
            self._last_line = time.perf_counter()
        elif self._drawing == "bar":
            self._show(state)

    def close(self) -> None:
        """End the live line, if one is drawn (again: nothing); the ``Trainer`` skips ``on_train_end`` on an error."""
        bar, self._bar = self._bar, None
        self._drawing = "off"
        if bar is not None:
            bar.close()  # its last state stays, with a newline: what is printed next starts on a line of its own

    # --- the Trainer's events
    def on_train_begin(self, args, state, control, **kwargs):
        """Start the line of this fold (main process only)."""
        self.close()  # a line left live by a training that failed
        self._reset(args, state.global_step)
        self._resumed(args, state)
        mode = self.mode
        if mode is None:
            terminal = getattr(self._stream, "isatty", lambda: False)() and _bar_fits(self._stream)
            mode = "off" if get_verbosity() != "normal" else "bar" if terminal else "lines"
        self._drawing = mode if state.is_world_process_zero else "off"
        _detail.info("%s: %d steps (%g epochs) from step %d", self.label, state.max_steps, self._epochs,
                     state.global_step)
        if self._drawing == "bar":
            self._bar = _FoldBar(total=state.max_steps, initial=state.global_step, desc=self.label,
                                 file=self._stream, dynamic_ncols=True, leave=True, unit="step")

    def _resumed(self, args, state) -> None:
        """Resumed from a checkpoint: the last evaluation and the best so far are those of its state.

        The best of ``state.best_metric`` (what the Trainer keeps, per ``metric_for_best_model``) and the evaluations
        in ``state.log_history``, in the metric's direction (``greater_is_better``); NaNs never count.
        """
        key = f"eval_{self._metric}"
        values = [float(entry[key]) for entry in getattr(state, "log_history", None) or []
                  if isinstance(entry.get(key), int | float)]
        if values:
            self._metric_value = values[-1]
        best = getattr(state, "best_metric", None) if args.metric_for_best_model else None
        for value in [*values, *([float(best)] if isinstance(best, int | float) else [])]:
            self._consider(value)

    def _consider(self, value: float) -> None:
        """Make ``value`` the best if it beats it (a NaN compares False with anything: it would stay for good)."""
        better = self._best is None or (value > self._best if self._greater else value < self._best)
        self._best = value if better and math.isfinite(value) else self._best

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
            # the loss averages the steps since the last log: a window of 1 step weighs less than one of 37
            every = getattr(args, "logging_steps", None)  # unknown: every log a full window
            share = (state.global_step - self._logged_step) / every if isinstance(every, int) and every > 0 else 1
            weight = 1 - (1 - self.smoothing) ** max(share, 0.0)
            self._loss = loss if self._loss is None else (1 - weight) * self._loss + weight * loss
            self._logged_step = state.global_step
        if self._drawing == "bar":
            self._show(state)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        """During an evaluation, a short status on the fold's line."""
        if self._drawing != "bar":
            return
        total = len(eval_dataloader) if eval_dataloader is not None and hasattr(eval_dataloader, "__len__") else None
        self._evaluated += 1
        self._show(state, f"evaluating {self._evaluated}" + (f"/{total}" if total else ""))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """The new validation metric on the line (off a terminal: a line per evaluation)."""
        self._evaluated = 0
        value = (metrics or {}).get(f"eval_{self._metric}")
        if isinstance(value, int | float):
            self._metric_value = float(value)
            self._consider(float(value))  # a NaN (pearson of constant predictions, common at first) does not count
        self._emit(state)

    def on_train_end(self, args, state, control, **kwargs):
        """Leave the fold's final line."""
        if self._drawing == "bar" and self._bar is not None:
            self._show(state)
        self.close()
        _detail.info("%s: done at step %d in %s", self.label, state.global_step,
                     _clock(time.perf_counter() - self._started))


__all__ = ["DETAIL_LOGGER", "MIN_BAR_COLUMNS", "SUMMARY", "VERBOSITIES", "FoldProgress", "console", "get_verbosity",
           "quiet_library_call", "quiet_third_party", "set_verbosity"]
