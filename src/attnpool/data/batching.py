"""Length-grouped batches, one grouping for training and prediction: each batch pads only to its own longest row.

Padding every batch to the data set's longest row (the notebook recipe) spends most of the compute on padding when
lengths vary; grouping rows of similar length and padding per batch (``tokenizer.pad`` /
``transformers.DataCollatorWithPadding``) removes most of it.

* Prediction: :func:`length_sorted_batches`, rows sorted by length (longest first), outputs put back in input order.
* Training: :class:`LengthGroupedSampler`, transformers' shuffled length grouping, seeded per epoch and grouped by
  the global batch so that every process draws the same order; :class:`PaddingCollator` pads each batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import transformers
from transformers.trainer_pt_utils import get_length_grouped_indices

ENCODING_KEYS = ("input_ids", "attention_mask", "token_type_ids")  # what a model reads of a tokenizer's output


def length_sorted_batches(lengths: Sequence[int] | np.ndarray, batch_size: int) -> list[list[int]]:
    """Row indices grouped into batches of similar length; every row appears in exactly one batch.

    Rows sorted by length, longest first (so a batch that does not fit in memory fails at once), ties kept in input
    order, cut into batches of ``batch_size`` (the last may be smaller).

    Args:
        lengths: Length (e.g. tokens) of each row.
        batch_size: Rows per batch, at least 1.

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
    order = np.argsort(-lengths, kind="stable")
    return [order[i : i + batch_size].tolist() for i in range(0, len(lengths), batch_size)]


def padded_batches(encodings: dict[str, list], batch_size: int, tokenizer: Any, *,
                   rows: Sequence[int] | np.ndarray | None = None,
                   return_tensors: str = "pt") -> Iterator[tuple[list[int], Any]]:
    """The rows of pre-tokenised inputs in :func:`length_sorted_batches`, each batch padded to its own longest row.

    Args:
        encodings: ``{"input_ids": [...], "attention_mask": [...], ...}``: one unpadded token list per row.
        batch_size: Rows per batch.
        tokenizer: Pads the batches (``tokenizer.pad``).
        rows: Which rows (default: all).
        return_tensors: ``pt`` or ``np``, as ``tokenizer.pad`` takes it.

    Yields:
        ``(positions, features)``: the batch's positions in ``rows`` (row indices when ``rows`` is ``None``) and
        its padded ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the encodings have them); at least
        one token wide: a batch of rows without tokens is one masked padding token wide.
    """
    rows = np.arange(len(encodings["input_ids"])) if rows is None else np.asarray(rows)
    keys = [k for k in ENCODING_KEYS if k in encodings]
    lengths = [len(encodings["input_ids"][i]) for i in rows]
    for batch in length_sorted_batches(lengths, batch_size):
        # Empty rows only (a tokenizer that adds no special tokens, GPT-2's): one masked padding token each, as an
        # empty row gets beside longer ones, since a (rows, 0) batch breaks the models' reshapes.
        width = {"padding": "max_length", "max_length": 1} if lengths[batch[0]] == 0 else {}
        yield batch, tokenizer.pad([{k: encodings[k][rows[i]] for k in keys} for i in batch],
                                   return_tensors=return_tensors, **width)


@dataclasses.dataclass
class PaddingCollator(transformers.DataCollatorWithPadding):
    """Transformers' padding collator for training and evaluation, at least one token wide.

    A batch of rows without tokens (empty texts, with a tokenizer that adds no special tokens, GPT-2's; the
    length-grouped sampler puts them together) is one masked padding token wide, as in :func:`padded_batches`:
    padded to ``(rows, 0)`` it broke the encoders' reshapes.
    """

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """The padded batch of ``features`` (pre-tokenised rows with their labels)."""
        if features and max(len(f["input_ids"]) for f in features) == 0:
            one = dataclasses.replace(self, padding="max_length", max_length=1)
            return transformers.DataCollatorWithPadding.__call__(one, features)
        return super().__call__(features)


class LengthGroupedSampler(torch.utils.data.Sampler):
    """Shuffled row order in which runs of similar length follow each other; the same on every process.

    The order is ``transformers``' length grouping (a random permutation, cut into mega-batches of up to 50 global
    batches, each sorted by length, the longest batch first), drawn from a generator seeded by ``seed + epoch``
    rather than from the global torch RNG, and grouped by the *global* batch (per-device batch x processes x
    gradient accumulation). So:

    * every process draws the same order, which the ``Trainer`` then splits batch by batch between processes (with
      the global RNG the processes drift apart after the first epoch on CPUs, where dropout draws from that RNG a
      number of values that depends on each process's padded batch shapes: rows get repeated or skipped);
    * one process with batch ``2B`` and two with batch ``B`` take their optimizer steps on the same rows, provided
      the training rows are a multiple of ``2B`` (the rows of one micro-batch over all processes; a multiple of the
      global batch is one). Otherwise they do not at the epoch's end: one process trains a short last batch, while
      accelerate (``BatchSamplerShard``, ``even_batches=True``) fills every process's last batch to ``B`` rows
      with rows from the start of the epoch's order, which that last step then trains a second time (10 rows, B=2:
      one process's epoch ends on the order's rows 8-9, two processes' on rows 8-9 and 0-1);
    * a run resumed in the middle of an epoch skips exactly the batches it had already trained on.

    Args:
        lengths: Token length of each row of the training set.
        global_batch_size: Rows per optimizer step, over all processes.
        seed: The data seed; epoch ``e`` uses ``seed + e``.
        epoch_lengths: For rows whose length changes from epoch to epoch (a training set that draws each row's view
            per epoch, :class:`~attnpool.data.datasets.ContextDropoutDataset`): the lengths of epoch ``e``, grouped by
            in place of ``lengths``.
        on_epoch: Called with the epoch as each epoch's order is drawn: that training set's ``set_epoch``, so that
            the rows fetched are the views the order was grouped by. accelerate's data loader does not forward
            ``set_epoch`` to the data set on a resumed epoch (1.16: ``DataLoaderShard.set_epoch`` reaches either a
            sampler under a ``SkipBatchSampler`` or the data set), which would train the rest of that epoch on the
            first epoch's draw.
    """

    def __init__(self, lengths: list[int], global_batch_size: int, seed: int, *,
                 epoch_lengths: Callable[[int], list[int]] | None = None,
                 on_epoch: Callable[[int], None] | None = None) -> None:
        self.lengths = list(lengths)
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.epoch = 0
        self.epoch_lengths = epoch_lengths
        self.on_epoch = on_epoch

    def set_epoch(self, epoch: int) -> None:
        """Called by the ``Trainer`` (through accelerate) at the start of every epoch."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        if self.on_epoch is not None:
            self.on_epoch(self.epoch)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        lengths = self.lengths if self.epoch_lengths is None else self.epoch_lengths(self.epoch)
        return iter(get_length_grouped_indices(lengths, self.global_batch_size, generator=generator))
