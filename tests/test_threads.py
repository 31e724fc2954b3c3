"""Thread settings: one intra-op thread per physical core this process may use; no tokenizer pool while serving."""

from __future__ import annotations

import os

import pytest
import torch

from attnpool import threads as threads_module
from attnpool.threads import physical_cores, set_threads

# Two cores with two hardware threads each (SMT), then a core on a second socket that has the same core id.
CPUINFO = "\n".join(
    f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nphysical id\t: {socket}\ncore id\t\t: {core}\n"
    for cpu, socket, core in [(0, 0, 0), (1, 0, 1), (2, 0, 0), (3, 0, 1), (4, 1, 0)]
)


def test_smt_siblings_count_once(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cpus", lambda: {0, 1, 2, 3, 4})
    assert physical_cores(CPUINFO) == 3


def test_only_the_cpus_this_process_may_use_count(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cpus", lambda: {0, 2})  # one core's two siblings
    assert physical_cores(CPUINFO) == 1
    monkeypatch.setattr(threads_module, "usable_cpus", lambda: {1, 4})
    assert physical_cores(CPUINFO) == 2


def test_without_core_ids_the_usable_cpus_count(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cpus", lambda: {0, 1, 5})
    assert physical_cores("processor : 0\nprocessor : 1\n") == 3
    assert physical_cores("") == 3


def test_set_threads_sizes_torch_and_turns_the_tokenizer_pool_off(monkeypatch):
    before = torch.get_num_threads()
    for name in ("TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    try:
        assert set_threads(1) == 1 and torch.get_num_threads() == 1
        assert "TOKENIZERS_PARALLELISM" not in os.environ
        monkeypatch.setattr(threads_module, "physical_cores", lambda: 2)
        assert set_threads(tokenizer_threads=False) == 2 and torch.get_num_threads() == 2
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    finally:
        torch.set_num_threads(before)


def test_an_explicit_tokenizer_setting_is_kept(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    before = torch.get_num_threads()
    try:
        set_threads(before, tokenizer_threads=False)
    finally:
        torch.set_num_threads(before)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads must be a positive number of threads, got"):
        set_threads(bad)


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_without_threads_a_thread_count_set_in_the_environment_is_kept(monkeypatch, variable):
    """OMP_NUM_THREADS=1 attnpool predict ran on every physical core: the environment's choice was overridden."""
    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads_module, "physical_cores", lambda: before + 1)
    try:
        monkeypatch.setenv(variable, str(before))
        assert set_threads() == before and torch.get_num_threads() == before, "the environment's count is kept"
        assert set_threads(before + 2) == before + 2, "--threads still wins"
        monkeypatch.setenv(variable, " ")
        assert set_threads() == before + 1, "an empty variable says nothing"
    finally:
        torch.set_num_threads(before)


def test_the_threads_and_precision_help_say_what_the_defaults_depend_on(capsys):
    from attnpool import api
    from attnpool.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name in ("predict", "serve"):
        text = " ".join(commands[name].format_help().split())
        assert "(default: OMP_NUM_THREADS or MKL_NUM_THREADS where set, else one per physical core)" in text, name
        assert "auto = bf16 on a GPU with native bf16 (compute capability 8.0+) or a CPU with it" in text, name
    train = " ".join(commands["train"].format_help().split())
    assert "auto is bf16 on a GPU with native bf16 (compute capability 8.0+) or a CPU with it" in train
    doc = " ".join(api.serve.__doc__.split())
    assert "bf16 on a GPU with native bf16, compute capability 8.0+" in doc and "OMP_NUM_THREADS" in doc
