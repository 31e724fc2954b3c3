"""What a run prints: attnpool's own lines only, one progress line per fold, --quiet and --verbose."""

from __future__ import annotations

import gc
import io
import logging
import os
import re
import struct
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers

import attnpool
from attnpool.cli import build_parser, main
from attnpool.training import progress
from attnpool.training.progress import FoldProgress, quiet_third_party
from model_helpers import save_tiny_encoder, write_toy_csv

try:
    import fcntl
    import termios
except ImportError:  # Windows
    fcntl = termios = None

NOISE = ("{'loss'", "{'eval_loss'", "'train_runtime'", "Loading weights", "Writing model shards", "it/s]",
         "Warning", "[transformers]")
# Every line a run prints before its summary, off a terminal.
OWN_LINES = [r"\S+\.csv: \d+ texts, tokens per text: .*", r"precision: .*", r"malloc: .*", r"word embeddings: .*",
             r"fold \d \(\d of \d\): \d+ train / \d+ valid rows",
             r"fold \d: step \d+/\d+, epoch [\d.]+/\d+, loss [\d.e-]+, val pearson -?[\d.]+ \(best -?[\d.]+\), "
             r"\d\d:\d\d elapsed(, \d\d:\d\d left)?",
             r"fold \d: pooling weights on validation: .*"]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress")
    encoder = save_tiny_encoder(folder / "encoder")
    write_toy_csv(folder / "train.csv", n=24, seed=0)
    args = ["--train-file", str(folder / "train.csv"), "--text-cols", "first", "second", "--model", encoder,
            "--folds", "2", "--epochs", "2", "--max-length", "16", "--batch-size", "4", "--pooling-opt",
            "attn_size=8", "--precision", "fp32"]
    return folder, args


def _train(recipe, capfd, *flags):
    folder, args = recipe
    out = folder / f"run{len(list(folder.glob('run*')))}"
    assert main(["train", *args, "--output-dir", str(out), *flags]) == 0
    captured = capfd.readouterr()
    return out, captured.out + captured.err


def test_a_train_off_a_terminal_prints_only_attnpool_lines_one_per_evaluation(recipe, capfd):
    out, text = _train(recipe, capfd)
    for noise in NOISE:
        assert noise not in text, noise
    assert "\r" not in text and "\x1b" not in text  # no redraws, no escape sequences in a file
    lines = text.splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("attnpool train: regression"))
    before = [line for line in lines[:summary] if line.strip()]
    strange = [line for line in before if not any(re.fullmatch(p, line) for p in OWN_LINES)]
    assert not strange, "lines that are not attnpool's own:\n" + "\n".join(strange)
    progress_lines = [line for line in before if re.match(r"fold \d: step ", line)]
    assert [line.split(",")[0] for line in progress_lines] == ["fold 0: step 3/6", "fold 0: step 6/6",
                                                                "fold 1: step 3/6", "fold 1: step 6/6"]
    assert "complete;" in text[text.index("attnpool train: regression"):]
    log = (out / "train.log").read_text()  # the full detail stays in the run's log
    assert "attnpool.detail: fold 0: step 1: loss " in log and "eval_pearson" in log and "grad_norm" in log
    assert "fold 1: step 6/6, epoch 2.00/2" in log


def test_quiet_prints_only_the_summary(recipe, capfd):
    out, text = _train(recipe, capfd, "--quiet")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("attnpool train: regression") and lines[-1].strip().startswith("oof.csv")
    assert not any(line.startswith("fold ") for line in lines), text
    assert "fold 0: step 3/6" in (out / "train.log").read_text()


def test_verbose_shows_the_trainers_own_logs(recipe, capfd):
    _, text = _train(recipe, capfd, "-v")
    assert "{'loss'" in text and "'eval_pearson'" in text and "attnpool train: regression" in text
    assert "fold 0: step 3/6" not in text  # the Trainer draws its own bars instead


def test_quiet_and_verbose_go_before_or_after_the_command():
    parser = build_parser()
    assert parser.parse_args(["poolers"]).verbosity == "normal"
    assert parser.parse_args(["--quiet", "poolers"]).verbosity == "quiet"
    assert parser.parse_args(["poolers", "--verbose"]).verbosity == "verbose"
    assert parser.parse_args(["-q", "demo"]).verbosity == "quiet"
    with pytest.raises(SystemExit):
        parser.parse_args(["poolers", "-q", "-v"])


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_one_live_line_per_fold_and_the_callers_settings_are_restored(recipe, monkeypatch):
    folder, _ = recipe
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert transformers.utils.logging.is_progress_bar_enabled()
    result = attnpool.train(train_file=str(folder / "train.csv"), text_cols=["first", "second"],
                            model=str(folder / "encoder"), folds=2, epochs=2, max_length=16, batch_size=4,
                            pooling_options={"attn_size": 8}, precision="fp32", output_dir=str(folder / "tty"))
    assert result.complete
    text = terminal.getvalue()
    assert "Loading weights" not in text and "Writing model shards" not in text and "{'loss'" not in text
    lines = text.split("\n")
    bars = [line for line in lines if line.strip()]
    assert len(bars) == 2, bars  # one line per fold, redrawn in place
    for fold, line in enumerate(bars):
        states = line.split("\r")
        assert all(s.startswith(f"fold {fold}:") for s in states if s.strip())
        assert any("evaluating 1/" in s for s in states), "evaluation is a status on the line, not a second bar"
        assert "100%" in states[-1] and "6/6" in states[-1] and "val pearson" in states[-1]
    assert transformers.utils.logging.is_progress_bar_enabled(), "the caller's transformers settings are restored"


def _state(step, max_steps=10, epoch=0.0):
    return SimpleNamespace(global_step=step, max_steps=max_steps, epoch=epoch, is_world_process_zero=True)


def test_the_line_says_step_epoch_smoothed_loss_metric_elapsed_and_eta():
    stream = io.StringIO()
    bar = FoldProgress("fold 3", mode="lines", stream=stream, interval=1e9, smoothing=0.5)
    args = SimpleNamespace(num_train_epochs=2, metric_for_best_model="rmse", greater_is_better=False)
    bar.on_train_begin(args, _state(0), None)
    bar.on_log(args, _state(2, epoch=0.4), None, logs={"loss": 1.0})
    bar.on_log(args, _state(4, epoch=0.8), None, logs={"loss": 0.5})
    bar.on_step_end(args, _state(5, epoch=1.0), None)
    assert stream.getvalue() == ""  # no line between evaluations before the interval
    bar.on_evaluate(args, _state(5, epoch=1.0), None, metrics={"eval_rmse": 0.25})
    bar.on_evaluate(args, _state(10, epoch=2.0), None, metrics={"eval_rmse": 0.5})
    first, second = stream.getvalue().splitlines()
    assert re.fullmatch(r"fold 3: step 5/10, epoch 1\.00/2, loss 0\.75, val rmse 0\.2500 \(best 0\.2500\), "
                        r"\d\d:\d\d elapsed, \d\d:\d\d left", first), first
    assert second.startswith("fold 3: step 10/10, epoch 2.00/2, loss 0.75, val rmse 0.5000 (best 0.2500)")
    assert not second.endswith("left")
    bar = FoldProgress("fold 0", mode="lines", stream=stream, interval=0)
    bar.on_train_begin(args, _state(0), None)
    bar.on_step_end(args, _state(1), None)
    assert stream.getvalue().splitlines()[-1].startswith("fold 0: step 1/10, epoch 0.00/2, ")  # a heartbeat


def test_quiet_and_verbose_draw_nothing_of_their_own():
    args = SimpleNamespace(num_train_epochs=1, metric_for_best_model="pearson", greater_is_better=True)
    for verbosity in ("quiet", "verbose"):
        stream = Terminal()
        previous = progress.set_verbosity(verbosity)
        try:
            bar = FoldProgress("fold 0", stream=stream)
            bar.on_train_begin(args, _state(0), None)
            bar.on_evaluate(args, _state(10), None, metrics={"eval_pearson": 0.5})
            bar.on_train_end(args, _state(10), None)
        finally:
            progress.set_verbosity(previous)
        assert stream.getvalue() == "", verbosity
    stream = Terminal()
    FoldProgress("fold 0", stream=stream).on_evaluate(args, _state(0), None, metrics={"eval_pearson": 0.5})
    assert stream.getvalue() == ""  # an evaluate() outside training draws nothing (and does not fail)
    with pytest.raises(ValueError, match="verbosity must be one of quiet, normal, verbose"):
        progress.set_verbosity("loud")


def test_library_warnings_and_log_lines_go_to_the_log_not_the_console(capfd):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    library = Path(transformers.__file__).parent / "trainer.py"
    library_logger = logging.getLogger("transformers")
    levels = [h.level for h in library_logger.handlers]
    with quiet_third_party(handler):
        warnings.warn_explicit("a deprecation inside transformers", FutureWarning, str(library), 1)
        warnings.warn_explicit("a warning of the user's code", FutureWarning, "/home/user/script.py", 1)
        transformers.utils.logging.get_logger("transformers.trainer").warning("a transformers warning")
        logging.getLogger(progress.DETAIL_LOGGER).info("a raw trainer log")
    err = capfd.readouterr().err
    assert "a deprecation inside transformers" not in err and "a transformers warning" not in err
    assert "a warning of the user's code" in err and "a raw trainer log" not in err
    logged = [r.getMessage() for r in records]
    assert any("a deprecation inside transformers" in m for m in logged)
    assert "a transformers warning" in logged and "a raw trainer log" in logged
    assert [h.level for h in library_logger.handlers] == levels  # the library's console handler is back


def _recorder():
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    return handler, records


def test_other_libraries_log_lines_go_to_the_log_and_only_their_warnings_to_the_console(capfd):
    """A fresh machine printed matplotlib's "generated new fontManager" (INFO) between the fold lines; a library's
    warning (accelerate's "the process may hang") stays on the console, and train.log gets all of them."""
    handler, records = _recorder()
    library = logging.getLogger("matplotlib.font_manager")  # propagates to the console's handler on the root logger
    with progress.console():
        library.info("an info outside a run")
        library.warning("a warning outside a run")
        with quiet_third_party(handler):
            library.info("generated new fontManager")  # on a fresh machine, while the run plots its curves
            library.warning("a library warning")
            library.error("a library error")
            logging.getLogger("attnpool.test").info("attnpool's own line")
        library.warning("a warning after the run")
    err = capfd.readouterr().err
    assert "a warning outside a run" in err and "a library error" in err and "attnpool's own line" in err
    assert "an info outside a run" not in err and "generated new fontManager" not in err
    assert "a library warning" in err and "a warning after the run" in err
    logged = [r.getMessage() for r in records]  # once each; attnpool's own reach train.log by the attnpool logger
    assert logged == ["generated new fontManager", "a library warning", "a library error"]


def test_transformers_propagating_under_ci_stays_off_the_console(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    library = logging.getLogger("transformers")
    for own in library.handlers:  # transformers' own console handler, made with the stderr of its import
        if type(own) is logging.StreamHandler:  # not pytest's capturing handlers
            monkeypatch.setattr(own, "stream", err)
    monkeypatch.setattr(library, "propagate", True)  # what transformers sets when CI=true
    handler, records = _recorder()
    log = transformers.utils.logging.get_logger("transformers.trainer")
    with progress.console("quiet"), quiet_third_party(handler):
        log.warning("a transformers warning under CI")
    with progress.console("verbose"), quiet_third_party(handler):
        log.warning("a transformers warning at verbose")
    text = err.getvalue()
    assert "a transformers warning under CI" not in text
    assert text.count("a transformers warning at verbose") == 1, text  # by its own handler, not the root's too
    assert [r.getMessage() for r in records] == ["a transformers warning under CI"]
    assert library.propagate


class Boom(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of a fold


def test_a_training_that_fails_ends_its_live_line_before_the_error(recipe, monkeypatch):
    folder, _ = recipe
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        attnpool.train(train_file=str(folder / "train.csv"), text_cols=["first", "second"],
                       model=str(folder / "encoder"), folds=2, epochs=2, max_length=16, batch_size=4,
                       pooling_options={"attn_size": 8}, precision="fp32", output_dir=str(folder / "boom"),
                       callbacks=[Boom()])
    except KeyboardInterrupt:
        text = terminal.getvalue()  # where the CLI prints its error: the traceback still keeps the Trainer alive
    else:
        pytest.fail("the interruption did not reach the caller")
    assert text.startswith("\rfold 0:") and text.endswith("\n"), repr(text)  # the error gets a line of its own
    assert "2/6" in text.split("\r")[-1]
    gc.collect()
    assert terminal.getvalue() == text  # and the bar is not drawn again when it is collected


def _args(metric="pearson"):
    return SimpleNamespace(num_train_epochs=2, metric_for_best_model=metric, greater_is_better=True)


def test_close_is_idempotent_and_a_new_fold_closes_a_stale_line():
    terminal = Terminal()
    bar = FoldProgress("fold 0", mode="bar", stream=terminal)
    bar.on_train_begin(_args(), _state(0), None)
    bar.on_step_end(_args(), _state(3), None)
    bar.label = "fold 1"
    bar.on_train_begin(_args(), _state(0), None)  # fold 0 failed without on_train_end
    first, second = terminal.getvalue().split("\n")
    assert "fold 1" not in first and "3/10" in first.split("\r")[-1]
    assert second.startswith("\rfold 1:")
    bar.close()
    bar.close()
    assert terminal.getvalue().count("\n") == 2
    bar.on_train_end(_args(), _state(10), None)  # after close: nothing more
    assert terminal.getvalue().count("\n") == 2


def test_log_lines_go_above_the_live_line_not_onto_it(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress.console():
        bar = FoldProgress("fold 0", stream=terminal)
        bar.on_train_begin(_args(), _state(0), None)
        logging.getLogger("attnpool.test").info("a log line")
        bar.on_train_end(_args(), _state(10), None)
    lines = terminal.getvalue().split("\n")
    assert lines[0].split("\r")[-1] == "a log line", lines  # the bar was cleared first
    assert lines[1].startswith("\rfold 0:") and "10/10" in lines[1]  # and redrawn below it


def test_a_nan_evaluation_is_not_the_best():
    stream = io.StringIO()
    bar = FoldProgress("fold 0", mode="lines", stream=stream)
    bar.on_train_begin(_args(), _state(0), None)
    bar.on_evaluate(_args(), _state(5), None, metrics={"eval_pearson": float("nan")})
    bar.on_evaluate(_args(), _state(10), None, metrics={"eval_pearson": 0.25})
    first, second = stream.getvalue().splitlines()
    assert "val pearson nan," in first and "best" not in first
    assert "val pearson 0.2500 (best 0.2500)" in second


posix_pty = pytest.mark.skipif(termios is None or not hasattr(os, "openpty"), reason="needs a pty")


@pytest.fixture
def pty_terminal():
    """A Terminal whose descriptor is a pseudo-terminal of the given size (a fresh pty reports 0x0)."""
    fds = []

    def make(columns=None):
        master, slave = os.openpty()
        fds.extend([master, slave])
        if columns is not None:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        terminal = Terminal()
        terminal.fileno = lambda: slave
        return terminal

    yield make
    for fd in fds:
        os.close(fd)


def _a_fold(stream, steps=1000):
    bar = FoldProgress("fold 0", stream=stream)
    bar.on_train_begin(_args(), _state(0, steps), None)
    bar.on_log(_args(), _state(steps // 2, steps, 1.0), None, logs={"loss": 0.1234})
    bar.on_evaluate(_args(), _state(steps // 2, steps, 1.0), None, metrics={"eval_pearson": 0.8765})
    bar.on_evaluate(_args(), _state(steps, steps, 2.0), None, metrics={"eval_pearson": 0.5432})
    bar.on_train_end(_args(), _state(steps, steps, 2.0), None)
    return stream.getvalue()


@posix_pty
@pytest.mark.parametrize("columns", [80, 50])
def test_the_metric_survives_a_narrow_terminal(pty_terminal, columns):
    last = _a_fold(pty_terminal(columns)).split("\r")[-1].rstrip("\n")
    assert len(last) < columns and last.startswith("fold 0: val pearson 0.5432"), last
    if columns == 80:
        assert "loss 0.1234" in last and "1000/1000" in last and "|#" in last, last


@posix_pty
def test_a_wide_terminal_shows_everything(pty_terminal):
    last = _a_fold(pty_terminal(200)).split("\r")[-1].rstrip("\n")
    assert re.fullmatch(r"fold 0: val pearson 0\.5432, best 0\.8765, loss 0\.1234, epoch 2\.00/2 100%\|#+\| "
                        r"1000/1000 \[\d\d:\d\d<\d\d:\d\d\]", last), last
    assert len(last) == 199


@posix_pty
def test_a_terminal_of_no_size_or_too_narrow_gets_plain_lines(pty_terminal):
    for stream in (pty_terminal(), pty_terminal(30)):  # 0x0 (docker run -t without -i), and 30 columns
        text = _a_fold(stream, steps=10)
        assert "\r" not in text and text.count("\n") == 2, repr(text)
        assert text.splitlines()[-1].startswith("fold 0: step 10/10, epoch 2.00/2, loss 0.1234, val pearson 0.5432")
