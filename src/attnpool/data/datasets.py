"""The training and validation rows of a fold as torch data sets: pre-tokenised, padded per batch by the collator."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class EncodedDataset(torch.utils.data.Dataset):
    """Rows of pre-tokenised (unpadded) inputs with their labels; padding happens per batch in the collator."""

    def __init__(self, encodings: dict[str, list], labels: np.ndarray | None, rows: np.ndarray) -> None:
        self.encodings = encodings
        self.labels = labels
        self.rows = np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        item: dict[str, Any] = {k: v[row] for k, v in self.encodings.items()}
        if self.labels is not None:
            item["labels"] = self.labels[row]
        return item


class ContextDropoutDataset(EncodedDataset):
    """Training rows of which a seeded share goes without its group context, drawn afresh each epoch.

    ``bare`` holds the rows' token lists with an empty context. :meth:`set_epoch` (which the length-grouped sampler
    calls as it draws each epoch's order, a resumed epoch included, and accelerate's data loader as an epoch starts)
    draws ``round(share * len(rows))`` rows from a generator seeded by ``(seed, epoch)``, so every process and a
    resumed run draw the same rows.
    """

    def __init__(self, encodings: dict[str, list], bare: dict[str, list], labels: np.ndarray | None,
                 rows: np.ndarray, share: float, seed: int) -> None:
        super().__init__(encodings, labels, rows)
        self.bare, self.share, self.seed = bare, share, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Draw the rows that go without their context in ``epoch``."""
        self.without = self.drawn(epoch)

    def drawn(self, epoch: int) -> np.ndarray:
        """Whether each row goes without its context in ``epoch`` (a boolean per row)."""
        rng = np.random.default_rng([self.seed, int(epoch)])
        without = np.zeros(len(self.rows), dtype=bool)
        without[rng.permutation(len(self.rows))[: round(self.share * len(self.rows))]] = True
        return without

    def epoch_lengths(self, epoch: int) -> list[int]:
        """The rows' token lengths in ``epoch``, for the length-grouped sampler (a row without context is shorter)."""
        ids = (self.encodings["input_ids"], self.bare["input_ids"])
        return [len(ids[int(w)][row]) for row, w in zip(self.rows.tolist(), self.drawn(epoch), strict=True)]

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = super().__getitem__(i)
        if self.without[i]:
            row = int(self.rows[i])
            item.update({k: v[row] for k, v in self.bare.items()})
        return item
