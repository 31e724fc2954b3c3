"""The ``max_length`` that ``serve`` and ``explain`` read rows with, checked against the encoder.

An encoder with absolute position embeddings fails on a sequence longer than its table
(:func:`attnpool.model.encoders.position_limit`); served with a longer ``--max-length``, every long request would
be a 500. A model folder's ``max_length`` is checked against the limit, a run's capped at it with a warning.
``predict --backend onnx`` never loads the PyTorch weights: it reads the limit from a fold's saved config
(:func:`saved_position_limit`), so both backends cap a run alike.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.model.encoders import position_limit
from attnpool.runs.run import RunError

logger = logging.getLogger("attnpool.serve")

DEFAULT_MAX_LENGTH = 128  # a model folder's, unless --max-length


def model_max_length(max_length: Any, model: nn.Module, folder: Any) -> int:
    """A model folder's ``--max-length`` (``None``: 128, or less when the encoder reads less), checked.

    Raises:
        ValueError: Not an integer >= 1.
        RunError: Over what the encoder reads.
    """
    limit = position_limit(model)
    if max_length is None:
        return DEFAULT_MAX_LENGTH if limit is None else min(DEFAULT_MAX_LENGTH, limit)
    if limit is not None and max_length > limit:
        raise RunError(f"--max-length {max_length} is over what the encoder of {folder} reads: {limit} tokens (its "
                       f"position embeddings); give --max-length {limit} or less")
    return max_length


def check_max_length(max_length: Any) -> None:
    """Raise ``ValueError`` unless ``max_length`` is ``None`` or an integer >= 1."""
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                   or max_length < 1):
        raise ValueError(f"--max-length must be an integer >= 1 (tokens per row), got {max_length!r}")


def run_max_length(max_length: int, model: nn.Module, run: Any, command: str = "serve",
                   log: logging.Logger = logger) -> int:
    """A run's ``max_length`` (its config.yaml), capped with a warning at what its encoder reads.

    Such a run trained on rows no longer than that (a longer one fails in the encoder): ``predict`` fails on a
    longer row, and the server would answer it 500; capped, it reads the first tokens, as a model folder does.
    ``command`` and ``log`` say who warns (``serve``, ``explain``).
    """
    return cap_max_length(max_length, position_limit(model), run, command, log)


def cap_max_length(max_length: int, limit: int | None, run: Any, command: str = "serve",
                   log: logging.Logger = logger) -> int:
    """:func:`run_max_length` given the encoder's ``limit`` (``None``: none) rather than the model."""
    if limit is None or max_length <= limit:
        return max_length
    log.warning("attnpool %s: %s has max_length %d (its config.yaml), over the %d tokens its encoder reads: rows "
                "are truncated at %d tokens", command, run, max_length, limit, limit)
    return limit


def saved_position_limit(model_dir: str | Path, log: logging.Logger = logger) -> int | None:
    """:func:`position_limit` of the attnpool model saved in ``model_dir``, without loading its weights.

    The model is built from its config.json on the meta device (shapes, no memory), so the limit is the one the
    loaded model would give: a RoBERTa-style offset, a decoder's positions from the mask. A config that does not
    build here gives ``None`` (rows are read at the run's ``max_length``), with a warning.
    """
    try:
        config = AttnPoolConfig.from_pretrained(model_dir)
        with torch.device("meta"):
            model = AttnPoolForSequenceClassification(config)
    except Exception as err:  # noqa: BLE001 - a check before predicting: the prediction itself says what failed
        log.warning("cannot read the encoder's position limit from %s (%s: %s); rows are read at the run's "
                    "max_length", model_dir, type(err).__name__, err)
        return None
    return position_limit(model)
