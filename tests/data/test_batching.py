"""length_sorted_batches and LengthGroupedSampler: the rows in length-homogeneous batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnpool.data import LengthGroupedSampler, length_sorted_batches
from attnpool.data.batching import PaddingCollator, padded_batches
from model_helpers import tiny_tokenizer


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


def test_sampler_order_depends_on_seed_and_epoch_only():
    lengths = [int(x) for x in np.random.default_rng(0).integers(2, 30, size=40)]
    sampler = LengthGroupedSampler(lengths, global_batch_size=8, seed=7)
    torch.manual_seed(1)
    first = list(sampler)
    torch.manual_seed(2)  # another global RNG state (another process) gives the same order
    assert list(sampler) == first and sorted(first) == list(range(40))
    sampler.set_epoch(1)
    assert list(sampler) != first and sorted(sampler) == list(range(40))


def test_sampler_groups_by_length(lengths):
    order = list(LengthGroupedSampler(list(lengths), global_batch_size=16, seed=0))
    batches = [order[i : i + 16] for i in range(0, len(order), 16)]
    random = np.random.default_rng(0).permutation(len(lengths))
    random_batches = [random[i : i + 16] for i in range(0, len(lengths), 16)]
    assert padded_tokens(lengths, batches) < 0.75 * padded_tokens(lengths, random_batches)
    assert lengths[batches[0]].max() == lengths.max()  # the longest batch first: out-of-memory shows at once


def test_tiny_inputs():
    assert length_sorted_batches([], 4) == []
    assert length_sorted_batches([7], 4) == [[0]]


@pytest.mark.parametrize("tensors", ["pt", "np"])
def test_a_batch_of_rows_without_tokens_is_one_masked_padding_token_wide(tensors):
    """A tokenizer without special tokens gives an empty text no token: a batch of those padded to (rows, 0), which
    the models (PyTorch's and ONNX Runtime's) cannot reshape."""
    encodings = {"input_ids": [[], [5, 6], []], "attention_mask": [[], [1, 1], []], "token_type_ids": [[], [0, 0], []]}
    batches = list(padded_batches(encodings, 2, tiny_tokenizer(), return_tensors=tensors))
    assert [b for b, _ in batches] == [[1, 0], [2]]
    (_, mixed), (_, empty) = batches
    assert np.asarray(mixed["attention_mask"]).tolist() == [[1, 1], [0, 0]]
    assert {k: np.asarray(v).tolist() for k, v in empty.items()} == {
        "input_ids": [[0]], "attention_mask": [[0]], "token_type_ids": [[0]]}
    assert [b for b, _ in padded_batches(encodings, 2, tiny_tokenizer(), rows=[2, 0])] == [[0, 1]]


def test_the_training_collator_pads_a_batch_of_rows_without_tokens_to_one_masked_token():
    """Training's batches too: the length-grouped sampler puts the empty texts together, and a (rows, 0) batch broke
    the encoder ("cannot reshape tensor of 0 elements"); other batches are padded as transformers pads them."""
    import transformers

    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import tiny_config

    tokenizer = tiny_tokenizer()
    empty = [{"input_ids": [], "attention_mask": [], "labels": label} for label in (0.5, 1.0)]
    batch = PaddingCollator(tokenizer)(empty)
    assert batch["input_ids"].tolist() == [[0], [0]] and batch["attention_mask"].tolist() == [[0], [0]]
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("gpt2"), num_labels=1)
    assert torch.isfinite(model(**batch).loss)
    rows = [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": 0.5}, empty[1]]
    expected = transformers.DataCollatorWithPadding(tokenizer)(rows)
    got = PaddingCollator(tokenizer)(rows)
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in expected.items()}


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        length_sorted_batches([1, 2], 0)
    with pytest.raises(ValueError, match=r"lengths must be one length per row \(1-D\), got shape \(2, 2\)"):
        length_sorted_batches([[1, 2], [3, 4]], 2)


def test_sampler_groups_each_epoch_by_that_epochs_lengths(lengths):
    """Rows whose length changes per epoch (half of them drop a long context): each epoch groups by its own."""
    rng = np.random.default_rng(1)
    per_epoch = {e: np.where(rng.random(len(lengths)) < 0.5, lengths, lengths + 100) for e in (0, 1)}
    sampler = LengthGroupedSampler(list(per_epoch[0]), global_batch_size=16, seed=0,
                                   epoch_lengths=lambda e: list(per_epoch[e]))
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert sorted(order) == list(range(len(lengths)))
        batches = [order[i : i + 16] for i in range(0, len(order), 16)]
        fixed = LengthGroupedSampler(list(per_epoch[0]), global_batch_size=16, seed=0)
        fixed.set_epoch(epoch)
        stale = list(fixed)  # grouped by epoch 0's lengths whatever the epoch
        stale_batches = [stale[i : i + 16] for i in range(0, len(stale), 16)]
        ratio = padded_tokens(per_epoch[epoch], batches) / padded_tokens(per_epoch[epoch], stale_batches)
        assert ratio < 0.8 if epoch == 1 else ratio == 1.0


def test_sampler_sets_the_data_sets_epoch_as_it_draws_each_order(lengths):
    """The sampler, not only accelerate (which skips the data set on a resumed epoch), tells the data set its epoch."""
    told = []
    sampler = LengthGroupedSampler(list(lengths), global_batch_size=16, seed=0, on_epoch=told.append)
    sampler.set_epoch(2)
    assert told == [], "told when the order is drawn, not before"
    first = list(sampler)
    sampler.set_epoch(3)
    list(sampler)
    assert told == [2, 3]
    sampler.set_epoch(2)
    assert list(sampler) == first and told == [2, 3, 2]
