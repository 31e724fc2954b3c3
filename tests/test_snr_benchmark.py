"""benchmarks/snr.py: its smallest run end to end, what --quick sets, and the flags it refuses."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import snr  # noqa: E402

TINY = ["--epochs", "1", "--num-train", "16", "--num-test", "16", "--seeds", "0", "--set-sizes", "8",
        "--num-signals", "1", "--batch-size", "16", "--no-plot"]


def _main(monkeypatch, argv):
    """snr.py's main() as the command line runs it (through sys.argv, which it reads when given no argv)."""
    monkeypatch.setattr(sys, "argv", ["snr.py", *argv])
    monkeypatch.setattr(snr.torch, "set_num_threads", lambda n: None)  # main() sets the process's threads
    snr.main()


class _Stop(Exception):
    """Raised by the recording snr_sweep: what main passed is all these tests need."""


def _recorded_sweep(monkeypatch, argv):
    """main's call of snr_sweep for ``argv``, without training."""
    seen = {}

    def recording(poolers, set_sizes, num_signals, **kwargs):
        seen.update(kwargs, poolers=poolers, set_sizes=set_sizes, num_signals=num_signals)
        raise _Stop

    monkeypatch.setattr(snr, "snr_sweep", recording)
    with pytest.raises(_Stop):
        _main(monkeypatch, argv)
    return seen


@pytest.mark.parametrize("poolers", [None, "mean,attention"])
def test_quick_runs_end_to_end(tmp_path, monkeypatch, capsys, poolers):
    """The default run, --quick and the docstring's --poolers mean,attention all died before training: the
    pooling options named multihead_attention (and gated_attention), which snr_sweep refuses when not swept."""
    argv = ["--quick", *TINY, "--output-dir", str(tmp_path)] + ([] if poolers is None else ["--poolers", poolers])
    _main(monkeypatch, argv)
    with (tmp_path / "snr.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    expected = list(snr.DEFAULT_POOLERS) if poolers is None else poolers.split(",")
    assert [row["pooler"] for row in rows] == expected
    assert {(row["set_size"], row["num_signal"], row["seed"]) for row in rows} == {("8", "1", "0")}
    assert "16 train / 16 test sets per task, 1 epochs" in capsys.readouterr().out


def test_options_only_for_the_swept_poolers(monkeypatch):
    seen = _recorded_sweep(monkeypatch, ["--poolers", "mean,gated_attention", *TINY])
    assert seen["pooling_options"] == {"gated_attention": {"attn_size": snr.ATTN_SIZE}}


def test_quick_keeps_the_options_given(monkeypatch):
    """--quick overrode --seeds, --set-sizes, --num-signals, --num-train, --num-test and --epochs silently."""
    seen = _recorded_sweep(monkeypatch, ["--quick", "--seeds", "3,4", "--set-sizes", "32", "--num-signals", "2",
                                         "--num-train", "64", "--num-test", "48", "--epochs", "2"])
    assert (seen["seeds"], seen["set_sizes"], seen["num_signals"]) == ([3, 4], [32], [2])
    assert (seen["num_train"], seen["num_test"], seen["epochs"]) == (64, 48, 2)


def test_quick_sets_the_options_not_given(monkeypatch):
    seen = _recorded_sweep(monkeypatch, ["--quick", "--epochs", "2"])
    assert (seen["seeds"], seen["set_sizes"], seen["num_signals"]) == ([0], [64], [1, 16])
    assert (seen["num_train"], seen["num_test"], seen["epochs"]) == (1024, 512, 2)
    seen = _recorded_sweep(monkeypatch, ["--epochs", "2"])
    assert (seen["seeds"], seen["set_sizes"], seen["num_signals"]) == ([0, 1, 2], [64, 256], [1, 4, 16])
    assert (seen["num_train"], seen["num_test"], seen["epochs"]) == (2048, 1024, 2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--poolers", "attention,nosuch"], "--poolers 'attention,nosuch': Unknown pooler 'nosuch'. Available"),
        (["--poolers", ","], "--poolers ',': Unknown pooler ''. Available poolers:"),
        (["--threads", "0"], "--threads must be a positive integer, got 0"),
    ],
)
def test_bad_flags_are_usage_errors(monkeypatch, capsys, argv, message):
    """An unknown pooler and --threads 0 ended in tracebacks (UnknownPoolerError, RuntimeError)."""
    monkeypatch.setattr(snr, "snr_sweep", lambda *a, **k: pytest.fail("ran the sweep"))
    with pytest.raises(SystemExit) as exit_info:
        _main(monkeypatch, argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
