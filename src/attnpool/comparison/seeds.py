"""The seeds of a comparison: ``--seeds N`` (a count, from ``--seed`` on) or ``--seeds S1 S2 ...`` (the seeds)."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Iterable
from typing import Any

from attnpool.config_checks import SEED_BOUND

# The largest count one --seeds value may give: a larger one is more likely a seed meant as such (--seeds 42).
MAX_SEED_COUNT = 20


def seed_list(seeds: Any, first: int) -> list[int]:
    """The seeds ``seeds`` names: a count (that many from ``first`` on, at most :data:`MAX_SEED_COUNT`) or the seeds.

    Raises:
        ValueError: Not integers (``3.0``, ``True``, text), a count below 1 or above :data:`MAX_SEED_COUNT`, seeds
            repeated or outside ``[0, 2**32 - 1]`` (listed, or counted from ``first`` on).
    """
    # numbers.Integral: numpy's integers (np.int64 from an array) are counts too, though not subclasses of int.
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"--seeds: a single value is a number of seeds and must be >= 1, got {seeds}")
        if seeds > MAX_SEED_COUNT:
            last = first + operator.index(seeds) - 1
            raise ValueError(
                f"--seeds {seeds}: a single value is a number of seeds, not a seed: it would train every pooler "
                f"{seeds} times (seeds {first} to {last}). To name the seeds, list them: --seeds {seeds} {seeds + 1} "
                f"{seeds + 2} (or --seed {seeds} --seeds 3, three seeds from {seeds} on); for more than "
                f"{MAX_SEED_COUNT} seeds give them as a list too (--seeds $(seq {first} {last}); in Python "
                f"seeds=range({first}, {last + 1})), or a count of at most {MAX_SEED_COUNT}")
        return _in_bounds(list(range(first, first + operator.index(seeds))))
    if isinstance(seeds, bool) or isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ValueError(f"--seeds must be integer seeds (or one count), got {seeds!r}")
    listed = list(seeds)
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in listed):
        raise ValueError(f"--seeds must be integer seeds (or one count), got {listed!r}")
    listed = [operator.index(s) for s in listed]  # ints: np.int64 from np.arange is no YAML for the runs' requests
    if not listed or len(set(listed)) != len(listed):
        raise ValueError(f"--seeds must be distinct seeds (or one count), got {listed}")
    return _in_bounds(listed)


def _in_bounds(seeds: list[int]) -> list[int]:
    """``seeds``, checked to be seeds numpy and torch take (a count from ``--seed 4294967295`` on runs past them)."""
    if not all(0 <= seed < SEED_BOUND for seed in seeds):
        raise ValueError(f"--seeds must be in [0, 2**32 - 1], the seeds numpy and torch take, got {seeds}")
    return seeds
