"""Length-grouped batches, so that dynamic padding pads each batch only to its own longest row.

Padding every batch to the data set's longest row (the notebook recipe) spends most of the compute on padding when
lengths vary; grouping rows of similar length and padding per batch (``tokenizer.pad`` /
``transformers.DataCollatorWithPadding``) removes most of it.

For training we rely on transformers: ``TrainingArguments(train_sampling_strategy="group_by_length")`` (the
``group_by_length=True`` flag of transformers 4.x), whose ``LengthGroupedSampler`` does what
``length_sorted_batches(..., shuffle=True)`` does, with ``DataCollatorWithPadding`` padding each batch. The function
here serves inference (sorted, no shuffling; put the outputs back in input order) and custom training loops.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MEGA_BATCH_MULT = 50  # batches per megabatch when shuffling, as transformers' LengthGroupedSampler


def length_sorted_batches(
    lengths: Sequence[int] | np.ndarray, batch_size: int, shuffle: bool = False, seed: int = 0
) -> list[list[int]]:
    """Row indices grouped into batches of similar length; every row appears in exactly one batch.

    Without ``shuffle``: rows sorted by length, longest first (so a batch that does not fit in memory fails at
    once), ties kept in input order, cut into batches of ``batch_size`` (the last may be smaller).

    With ``shuffle`` (training), as transformers' ``get_length_grouped_indices``: the rows are randomly permuted,
    cut into megabatches of ``50 * batch_size`` rows (fewer for small data: at least 4 megabatches), each
    megabatch sorted by length and cut into batches; then the order of the batches is shuffled and the batch
    holding the longest row is moved to the front. Batches stay length-homogeneous while the data order changes
    with ``seed``; the result is deterministic for a given seed.

    Args:
        lengths: Length (e.g. tokens) of each row.
        batch_size: Rows per batch, at least 1.
        shuffle: Randomise the batches (training) instead of sorting them (inference).
        seed: Seed of the shuffling.

    Returns:
        Lists of row indices, one per batch.

    Raises:
        ValueError: ``batch_size < 1`` or ``lengths`` not one-dimensional.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be one length per row (1-D), got shape {lengths.shape}")
    n = len(lengths)
    if n == 0:
        return []
    if not shuffle:
        order = np.argsort(-lengths, kind="stable")
        return [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]

    rng = np.random.default_rng(seed)
    mega_batch_mult = max(1, min(n // (batch_size * 4), MEGA_BATCH_MULT))
    megabatch_size = mega_batch_mult * batch_size
    permuted = rng.permutation(n)
    batches: list[list[int]] = []
    for start in range(0, n, megabatch_size):
        mega = permuted[start : start + megabatch_size]
        mega = mega[np.argsort(-lengths[mega], kind="stable")]
        batches.extend(mega[i : i + batch_size].tolist() for i in range(0, len(mega), batch_size))
    batches = [batches[i] for i in rng.permutation(len(batches))]
    longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])  # each batch is sorted: [0] is its max
    batches.insert(0, batches.pop(longest))
    return batches
