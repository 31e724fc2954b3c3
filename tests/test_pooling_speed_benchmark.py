"""benchmarks/pooling_speed.py: the inputs it times the poolers on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pooling_speed as ps  # noqa: E402


def test_the_default_inputs_are_ragged():
    _, mask = ps.make_inputs((8, 16, 4), torch.device("cpu"), torch.float32, 0)
    assert mask.shape == (8, 16) and not bool(mask.all()) and bool(mask[:, 0].all())


def test_no_padding_gives_full_masks(monkeypatch, capsys):
    """The README's "with no padding at all" figure had no way to be measured: make_inputs always drew ragged
    lengths. ``--no-padding`` times every candidate on an all-ones mask."""
    hidden, mask = ps.make_inputs((8, 16, 4), torch.device("cpu"), torch.float32, 0, no_padding=True)
    assert mask.shape == (8, 16) and mask.dtype == torch.long and bool(mask.all())
    assert hidden.shape == (8, 16, 4) and hidden.requires_grad

    seen = []
    real_make_inputs = ps.make_inputs

    def recording(*args, **kwargs):
        out = real_make_inputs(*args, **kwargs)
        seen.append(out[1])
        return out

    monkeypatch.setattr(ps, "make_inputs", recording)
    monkeypatch.setattr(ps.torch, "set_num_threads", lambda n: None)  # main() sets the process's threads
    ps.main(["--no-padding", "--shapes", "2x8x16", "--poolers", "attention", "--repeats", "1", "--warmup", "0"])
    assert len(seen) == 1 and bool(seen[0].all())
    assert "real tokens 100%" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--poolers", "attention,nosuch"], "--poolers 'attention,nosuch': Unknown pooler 'nosuch'. Available"),
        (["--poolers", ","], "--poolers ',': Unknown pooler ''. Available poolers:"),
        (["--device", "cuda:x"], "--device 'cuda:x' is not a device: give cpu or cuda[:N]"),
        (["--threads", "0"], "--threads must be a positive integer, got 0"),
    ],
)
def test_bad_flags_are_usage_errors(monkeypatch, capsys, argv, message):
    """An unknown or empty pooler name, a malformed --device and --threads 0 ended in raw tracebacks."""
    monkeypatch.setattr(ps, "run_shape", lambda *a, **k: pytest.fail("timed a shape"))
    monkeypatch.setattr(ps.torch, "set_num_threads", lambda n: None)
    with pytest.raises(SystemExit) as exit_info:
        ps.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
