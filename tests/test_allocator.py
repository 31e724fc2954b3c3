"""keep_freed_memory: large freed blocks are reused without page faults on glibc; the user's settings win.

own_peak_bytes: this process's high-water mark."""

import platform
import subprocess
import sys

import pytest
import torch

from attnpool import allocator
from attnpool.allocator import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, keep_freed_memory, largest_parameter_bytes

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# The backward pass of a MiniLM-sized word embedding (a dense 47 MB gradient per pass), 4 + 12 times: prints the
# page faults of each of the last twelve passes (about 11,450 each when every gradient is a fresh mapping). With the
# setting glibc may still grow its heap a few times after the warm-up (CI saw two growths in six passes once), so
# the test reads the typical pass, the median, not the sum.
FAULTS = """
import resource, sys, torch
from attnpool.allocator import keep_freed_memory
if sys.argv[1] == "on":
    print(keep_freed_memory(), file=sys.stderr)
embedding, ids = torch.nn.Embedding(30522, 384), torch.randint(0, 30522, (16, 24))
def backward():
    embedding.weight.grad = None
    embedding(ids).sum().backward()
for _ in range(4):
    backward()
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    backward()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults)
"""


class FakeLibc:
    def __init__(self, accept: bool = True):
        self.calls: list[tuple[int, int]] = []
        self.accept = accept

    def mallopt(self, param, value):
        self.calls.append((param, value.value))
        return int(self.accept)


@pytest.fixture
def fake_libc(monkeypatch):
    for name in (allocator.OFF_VARIABLE, *allocator.USER_VARIABLES, "GLIBC_TUNABLES", "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(allocator, "_applied", None)
    libc = FakeLibc()
    monkeypatch.setattr(allocator, "_glibc", lambda: libc)
    return libc


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_freed_blocks_are_reused_without_page_faults():
    def faults(mode):
        done = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True,
                              text=True, check=True, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
        return sorted(map(int, done.stdout.split())), done.stderr

    off, _ = faults("off")
    on, log = faults("on")
    assert off[0] > 10_000  # every pass maps its gradient anew
    assert on[len(on) // 2] < 1_000, (on, log)  # the typical pass writes the freed pages again: no new mapping
    assert sum(count > 11_000 for count in on) <= 4, (on, log)  # a few heap growths at most, never every pass
    assert "kept for reuse" in log


def test_thresholds_cover_the_largest_block(fake_libc):
    line = keep_freed_memory(3 << 29)  # 1.5 GiB: twice that is above what a C int holds
    assert fake_libc.calls == [(M_MMAP_THRESHOLD, 2**31 - 1), (M_TRIM_THRESHOLD, 2**31 - 1)]
    assert "kept for reuse" in line and "ATTNPOOL_MALLOC_TUNING=0" in line


def test_small_models_get_the_minimum_and_a_second_call_sets_nothing(fake_libc):
    first = keep_freed_memory(47 << 20)
    assert fake_libc.calls == [(M_MMAP_THRESHOLD, 1 << 30), (M_TRIM_THRESHOLD, 2**31 - 1)]
    assert keep_freed_memory(100 << 20) == first  # the same line in every run's log, however often it is called
    assert len(fake_libc.calls) == 2


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("ATTNPOOL_MALLOC_TUNING", "0", "ATTNPOOL_MALLOC_TUNING=0"),
    ("MALLOC_MMAP_THRESHOLD_", "131072", "MALLOC_MMAP_THRESHOLD_ is set"),
    ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1", "GLIBC_TUNABLES sets malloc tunables"),
    ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "jemalloc is preloaded"),
])
def test_the_users_settings_win(fake_libc, monkeypatch, name, value, reason):
    monkeypatch.setenv(name, value)
    assert keep_freed_memory(1 << 20) == f"malloc settings left alone: {reason}"
    assert fake_libc.calls == []


def test_switching_off_after_the_settings_were_made_says_they_stay(fake_libc, monkeypatch):
    """Set to 0 after a first training, the log said "left alone" although the raised thresholds stay in force."""
    assert "set ATTNPOOL_MALLOC_TUNING=0 before the first training of the process" in keep_freed_memory()
    monkeypatch.setenv("ATTNPOOL_MALLOC_TUNING", "0")
    line = keep_freed_memory(2 << 30)
    assert "left alone" not in line
    assert line == ("malloc: the settings applied earlier in this process stay until it exits "
                    "(ATTNPOOL_MALLOC_TUNING=0 only keeps them from being raised further): freed blocks up to "
                    "1,024 MiB are kept for reuse")
    assert len(fake_libc.calls) == 2  # not raised to cover the larger block


def test_other_c_libraries_are_left_alone(fake_libc, monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert keep_freed_memory().startswith("malloc settings left alone: not glibc")


def test_a_refused_threshold_is_reported(fake_libc):
    fake_libc.accept = False
    assert keep_freed_memory() == "malloc settings left alone: glibc refused an mmap threshold of 1,073,741,824 bytes"
    assert allocator._applied is None


def test_largest_parameter_bytes_counts_trainable_parameters():
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 8), torch.nn.Linear(8, 4))
    assert largest_parameter_bytes(model) == 1000 * 8 * 4
    model[0].weight.requires_grad_(False)
    assert largest_parameter_bytes(model) == 8 * 4 * 4


def test_own_peak_is_this_process_s_high_water_mark_in_bytes_with_or_without_proc(monkeypatch):
    """VmHWM is read from /proc (kB); without /proc (macOS), ru_maxrss, in bytes there and KiB on Linux."""
    from types import SimpleNamespace

    size = 256 * 2**20
    block = bytearray(size)
    block[::4096] = b"\1" * len(range(0, size, 4096))  # every page resident
    del block
    assert allocator.own_peak_bytes() >= size

    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(allocator, "Path", no_proc)
    monkeypatch.setattr(allocator.resource, "getrusage", lambda who: SimpleNamespace(ru_maxrss=2048))
    for name, expected in (("linux", 2048 * 1024), ("darwin", 2048)):
        monkeypatch.setattr(allocator.sys, "platform", name)
        assert allocator.own_peak_bytes() == expected


def test_own_peak_is_none_where_neither_proc_nor_resource_exists(monkeypatch):
    """Windows has neither: attnpool still imports, and the peak is unknown rather than an error."""

    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(allocator, "Path", no_proc)
    monkeypatch.setattr(allocator, "resource", None)
    assert allocator.own_peak_bytes() is None
