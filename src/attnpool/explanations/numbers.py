"""``explain``'s ``max_length``, checked up front against the encoder's positions."""

from __future__ import annotations

import numpy as np
import torch

from attnpool.model.encoders import position_limit
from attnpool.prediction.positions import DEFAULT_MAX_LENGTH


def explain_max_length(model: torch.nn.Module, max_length: int | None) -> int:
    """``max_length``, checked against the encoder's position embeddings; ``None``: 128, or less if it reads less."""
    limit = position_limit(model)
    if max_length is None:
        return DEFAULT_MAX_LENGTH if limit is None else min(DEFAULT_MAX_LENGTH, limit)
    if isinstance(max_length, bool | np.bool_) or not isinstance(max_length, int | np.integer) or max_length < 1:
        raise ValueError(f"explain: max_length must be an integer >= 1 (tokens per row), got {max_length!r}")
    max_length = int(max_length)
    if limit is not None and max_length > limit:
        raise ValueError(f"explain: max_length {max_length} is over what the model's encoder reads: {limit} tokens "
                         f"(its position embeddings); give max_length={limit} or less")
    return max_length
