"""The number options of ``explain`` and ``explain_file`` (``max_length``, ``erasure_k``...), checked up front."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnpool.model.encoders import position_limit
from attnpool.options import shown
from attnpool.prediction.positions import DEFAULT_MAX_LENGTH


def whole_number(value: Any, name: str, least: int, why: str = "") -> int:
    """``value`` as an ``int`` (a Python or numpy integer, not a bool) of at least ``least``.

    ``name``: the option as the caller knows it (``erasure_k``, ``--erasure-k``); ``why``: what the least value
    means, shown after it (`` (0 skips the erasure test)``).

    Raises:
        ValueError: Not a whole number (``2.0``, ``"3"``, ``True``), or below ``least``, naming ``name``.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        whole = isinstance(value, float | np.floating) and float(value).is_integer()
        raise ValueError(f"{name} must be a whole number >= {least}{why}, got {shown(value)}"
                         + (f"; give {int(value)}" if whole else ""))
    if value < least:
        raise ValueError(f"{name} must be >= {least}{why}, got {value}")
    return int(value)


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
