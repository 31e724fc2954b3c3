"""Training-loss logs over equal windows: logging_steps divides the save interval; the smoothed loss weighs windows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import attnpool
from attnpool.runs import Run
from attnpool.training.arguments import logging_steps
from attnpool.training.progress import FoldProgress
from model_helpers import save_tiny_encoder, write_toy_csv


@pytest.mark.parametrize(("steps_per_epoch", "eval_steps", "expected"),
                         [(36, None, 9), (40, None, 10), (148, None, 37), (400, None, 50), (12, 8, 2), (100, 30, 15),
                          (1000, 64, 32), (3, None, 1), (1, None, 1), (200, 7, 7), (200, 3, 3)])
def test_logging_steps_divides_the_save_interval_and_stays_near_a_quarter_epoch(steps_per_epoch, eval_steps,
                                                                               expected):
    chosen = logging_steps(steps_per_epoch, eval_steps)
    assert chosen == expected
    assert (eval_steps or steps_per_epoch) % chosen == 0
    assert 1 <= chosen <= max(1, min(50, steps_per_epoch // 4))


@pytest.mark.parametrize(("steps_per_epoch", "eval_steps", "expected"), [(37, None, 9), (4000, 997, 50), (80, 23, 20)])
def test_a_prime_save_interval_keeps_the_quarter_epoch_not_a_log_every_step(steps_per_epoch, eval_steps, expected):
    """The only divisor of a prime interval is 1: a log every step of a long run (its history in every checkpoint)."""
    assert logging_steps(steps_per_epoch, eval_steps) == expected


def test_a_runs_logged_training_losses_average_equal_windows(tmp_path):
    """12 steps an epoch, a checkpoint every 8: logging every 3 gave windows of 3, 3, 2 (forced at 8), 1, 3..."""
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=48, seed=0)
    values = {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
              "folds": 2, "only_folds": [0], "epochs": 2, "max_length": 16, "batch_size": 2, "eval_steps": 8,
              "pooling_options": {"attn_size": 8}, "precision": "fp32"}
    result = attnpool.train(values, output_dir=str(tmp_path / "run"))
    history = Run.open(result.run_dir).fold_history(0)
    steps = [entry["step"] for entry in history if "loss" in entry]
    windows = [b - a for a, b in zip([0, *steps[:-1]], steps, strict=True)]
    assert steps[-1] == 24 and windows == [2] * 12


def test_the_smoothed_loss_weighs_a_short_window_less():
    """A 1-step window (a forced log before a checkpoint) moved the shown loss as far as a full window did."""
    progress = FoldProgress(mode="off", smoothing=0.5)
    args = SimpleNamespace(logging_steps=4)
    progress.on_log(args, SimpleNamespace(global_step=4), None, logs={"loss": 1.0})
    progress.on_log(args, SimpleNamespace(global_step=5), None, logs={"loss": 0.0})  # 1 step of 4
    assert progress._loss == pytest.approx(0.5 ** 0.25)
    progress.on_log(args, SimpleNamespace(global_step=9), None, logs={"loss": 0.0})  # a full window: weight 0.5
    assert progress._loss == pytest.approx(0.5 ** 0.25 * 0.5)
