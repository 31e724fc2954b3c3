"""benchmarks/gpu_step_overhead.py on the CPU: the steps' rows, the batches, and a tiny run of every side."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_step_overhead as gso  # noqa: E402


def test_steps_draw_a_padded_length_and_rows_within_it():
    steps = gso.step_lengths(50, batch_size=8, min_length=40, max_length=256, seed=3)
    assert len(steps) == 50 and all(len(rows) == 8 for rows in steps)
    for rows in steps:
        longest = rows.max()
        assert 40 <= longest <= 256 and rows[0] == longest and rows.min() >= np.ceil(0.8 * longest)
    assert len({int(rows.max()) for rows in steps}) > 25  # the shapes change from step to step
    again = gso.step_lengths(50, batch_size=8, min_length=40, max_length=256, seed=3)
    assert all((a == b).all() for a, b in zip(steps, again, strict=True))  # every side trains on the same rows


@pytest.mark.parametrize(("pad_to", "width"), [(1, 70), (64, 128)])
def test_a_batch_is_padded_to_its_longest_row_or_the_multiple(pad_to, width):
    lengths = np.array([70, 60, 57])
    batch = gso.make_batch(lengths, vocab=100, pad_to=pad_to, seed=0, device=torch.device("cpu"))
    assert batch["input_ids"].shape == (3, width) and batch["labels"].shape == (3,)
    assert batch["attention_mask"].sum(1).tolist() == lengths.tolist()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 0).all()
    assert (batch["input_ids"][batch["attention_mask"] == 1] >= 5).all()


def test_every_side_runs_on_a_tiny_model(capsys):
    assert gso.main(["--tiny", "--steps", "1", "--warmup", "1", "--batch-size", "2", "--min-length", "8",
                     "--max-length", "16"]) == 0
    out = capsys.readouterr().out
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    assert all(side in lines for side in gso.SIDES)
    assert lines["sdpa"].rstrip().endswith("1.00x") and "fastest: " in out


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gso.parse_args(["--min-length", "300", "--max-length", "256"])
