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


def test_a_side_times_new_and_seen_shapes_on_a_tiny_model():
    args = gso.parse_args(["--tiny", "--steps", "2", "--warmup", "1", "--batch-size", "2", "--min-length", "8",
                           "--max-length", "16"])
    args.encoder = gso.encoder_of(args)
    for side in ("pad64", "no-cudnn"):
        result = gso.run_side(side, args, torch.device("cpu"))
        assert set(result) == {"new", "seen"} and all(ms > 0 for ms in result.values())


def test_the_sides_run_in_their_own_processes_and_make_one_table(capsys):
    assert gso.main(["--tiny", "--sides", "sdpa", "eager", "--steps", "1", "--warmup", "0", "--batch-size", "2",
                     "--min-length", "8", "--max-length", "16"]) == 0
    out = capsys.readouterr().out
    table = {line.split("  ")[0]: line for line in out.splitlines() if line.startswith(("sdpa ", "eager "))}
    assert set(table) == {"sdpa", "eager"} and table["sdpa"].rstrip().endswith("1.00x")
    assert gso.RESULT not in out and "fastest on new shapes: " in out
    with pytest.raises(SystemExit, match="side 'eager' failed"):
        gso.run_in_child("eager", ["--model", "/nonexistent/model"])


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gso.parse_args(["--min-length", "300", "--max-length", "256"])


def test_the_profiler_slows_no_timed_pass(monkeypatch):
    """--profile ran the sdpa side's timed first pass under the profiler: its 'new shapes' figure carried the
    profiler's overhead, and every ratio to it favoured the other sides."""
    import time

    profiling, make_batch = [], gso.make_batch

    def slow_profile(fn, device):  # the profiler's overhead: inside every step it records
        profiling.append(True)
        try:
            return fn()
        finally:
            profiling.pop()

    def batch(*args, **kwargs):
        if profiling:
            time.sleep(2.0)  # far above a tiny step on a loaded CPU (one took 294 ms in CI beside other work)
        return make_batch(*args, **kwargs)

    monkeypatch.setattr(gso, "profiled", slow_profile)
    monkeypatch.setattr(gso, "make_batch", batch)
    args = gso.parse_args(["--tiny", "--steps", "2", "--warmup", "1", "--batch-size", "2", "--min-length", "8",
                           "--max-length", "16", "--profile"])
    args.encoder = gso.encoder_of(args)
    times = gso.run_side("sdpa", args, torch.device("cpu"))
    assert times["new"] < 1500  # ms a step: the profiled pass (2,000 ms a step more) is not a timed one


def _tiny_deberta():
    from transformers import DebertaV2Config

    return DebertaV2Config(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=24, relative_attention=True, position_buckets=16,
                           pos_att_type=["p2c", "c2p"], max_relative_positions=-1, position_biased_input=False)


def test_deberta_has_no_sdpa_path_and_bert_has():
    """DeBERTa-v2/v3's config reads ``sdpa`` under attnpool, yet its attention never calls
    scaled_dot_product_attention: the model class says so, the config does not."""
    from transformers import BertConfig

    assert gso.has_sdpa_path(_tiny_deberta()) == (False, "DebertaV2Model")
    assert gso.has_sdpa_path(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=24)) == (True, "BertModel")


def test_the_table_marks_the_sides_that_run_the_same_code():
    results = {side: {"new": 10.0, "seen": 8.0} for side in gso.SIDES}
    marked = {line.split("  ")[0]: "same code as sdpa" in line for line in gso.rows(results, same_code=True)}
    assert marked == {"side": False, "sdpa": False, "sdpa, pad to 64": False, "sdpa, no cuDNN": True, "eager": True}
    assert not any("same code" in line for line in gso.rows(results))


def test_a_deberta_run_warns_that_its_attention_sides_are_the_same_code(tmp_path, capsys):
    """The docstrings suggested measuring DeBERTa's step overhead this way; its sdpa and eager sides were identical
    code, and the table compared them as if they were not."""
    from transformers import AutoModel

    torch.manual_seed(0)
    AutoModel.from_config(_tiny_deberta()).save_pretrained(tmp_path / "deberta")
    assert gso.main(["--model", str(tmp_path / "deberta"), "--sides", "eager", "--steps", "1", "--warmup", "0",
                     "--batch-size", "2", "--min-length", "8", "--max-length", "16"]) == 0
    out = capsys.readouterr().out
    assert "warning: DebertaV2Model has no scaled_dot_product_attention path" in out
    eager = [line for line in out.splitlines() if line.startswith("eager ")]
    assert len(eager) == 1 and eager[0].endswith("(same code as sdpa: no SDPA path)")


def test_random_weights_build_the_model_from_its_config_alone(tmp_path):
    """A device machine has no weights and carries 64 MiB: --random-weights needs the folder's config.json alone."""
    _tiny_deberta().save_pretrained(tmp_path)
    args = gso.parse_args(["--model", str(tmp_path), "--random-weights"])
    encoder = gso.encoder_of(args)
    assert type(encoder).__name__ == "DebertaV2Config" and encoder.hidden_size == 16
    with pytest.raises(SystemExit, match="--model .*nowhere"):
        gso.main(["--model", str(tmp_path / "nowhere"), "--random-weights"])
