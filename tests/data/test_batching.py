"""length_sorted_batches: a partition of the rows into length-homogeneous batches, deterministic per seed."""

from __future__ import annotations

import numpy as np
import pytest

from attnpool.data import length_sorted_batches


def padded_tokens(lengths: np.ndarray, batches: list[list[int]]) -> int:
    """Tokens computed when each batch is padded to its own longest row."""
    return sum(len(b) * int(lengths[b].max()) for b in batches)


def assert_partition(batches: list[list[int]], n: int, batch_size: int) -> None:
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(n))
    assert all(1 <= len(b) <= batch_size for b in batches)
    assert sum(len(b) < batch_size for b in batches) <= (n // (batch_size * 50) + 1)  # one short batch per megabatch


@pytest.fixture
def lengths():
    return np.random.default_rng(0).integers(3, 200, size=1000)


def test_sorted_longest_first_with_stable_ties():
    assert length_sorted_batches([3, 9, 1, 9, 5], 2) == [[1, 3], [4, 0], [2]]


def test_sorted_batches_pad_much_less_than_file_order(lengths):
    batches = length_sorted_batches(lengths, 16)
    assert_partition(batches, len(lengths), 16)
    assert all(isinstance(i, int) for b in batches for i in b)
    in_order = [list(range(i, min(i + 16, len(lengths)))) for i in range(0, len(lengths), 16)]
    assert padded_tokens(lengths, batches) < 0.6 * padded_tokens(lengths, in_order)


def test_shuffled_batches(lengths):
    batches = length_sorted_batches(lengths, 8, shuffle=True, seed=3)
    assert_partition(batches, len(lengths), 8)
    assert lengths[batches[0]].max() == lengths.max()  # the longest batch first: out-of-memory shows at once
    assert batches == length_sorted_batches(lengths, 8, shuffle=True, seed=3)
    assert batches != length_sorted_batches(lengths, 8, shuffle=True, seed=4)
    assert batches != length_sorted_batches(lengths, 8)
    random = np.random.default_rng(0).permutation(len(lengths))
    random_batches = [random[i : i + 8] for i in range(0, len(lengths), 8)]
    assert padded_tokens(lengths, batches) < 0.75 * padded_tokens(lengths, random_batches)
    # The batch order is shuffled, not sorted by length.
    maxima = [int(lengths[b].max()) for b in batches[1:]]
    assert maxima != sorted(maxima, reverse=True)


def test_tiny_inputs():
    assert length_sorted_batches([], 4) == []
    assert length_sorted_batches([], 4, shuffle=True) == []
    assert length_sorted_batches([7], 4, shuffle=True) == [[0]]
    small = length_sorted_batches([1, 2, 3], 2, shuffle=True, seed=1)
    assert sorted(i for b in small for i in b) == [0, 1, 2] and small[0][0] == 2  # longest row first


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        length_sorted_batches([1, 2], 0)
    with pytest.raises(ValueError, match=r"lengths must be one length per row \(1-D\), got shape \(2, 2\)"):
        length_sorted_batches([[1, 2], [3, 4]], 2)
