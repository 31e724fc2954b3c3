"""Checks of :meth:`TrainConfig.validate <attnpool.config.TrainConfig.validate>` that need more than one comparison.

Each raises ``ValueError`` naming the option and how to fix it, before the run folder is made: an option that fails
only in fold 0 leaves a run behind that a corrected command is refused on ("already exists") and that ``--resume``
replays with the bad value.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from attnpool.pooling import Pooler, build_pooler, check_pooler_options

TrainConfig = Any  # attnpool.config.TrainConfig: that module imports this one

# The hidden size of the pooler's trial build: divisible by every head count up to 10, 12, 14, 16 and by the powers
# of two up to 1024, so that the heads of a real encoder are not refused for not splitting it. Built on the meta
# device, which allocates nothing, its size costs nothing.
TRIAL_HIDDEN_SIZE = 2**10 * 3**2 * 5 * 7
SEED_BOUND = 2**32  # numpy's and torch's seeds are in [0, 2**32)


def check_numbers(cfg: TrainConfig) -> None:
    """Every float option finite and the seeds in range (``lr: .inf`` passed ``>= 0`` and trained to NaN)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value}")
    for name in ("seed", "split_seed"):
        value = getattr(cfg, name)
        if value is not None and not 0 <= value < SEED_BOUND:
            raise ValueError(f"{name} must be in [0, 2**32 - 1], the seeds numpy and torch take, got {value}; give "
                             f"--{name.replace('_', '-')} N with N >= 0")


def check_output_flags(cfg: TrainConfig) -> None:
    """``overwrite`` and ``resume`` not both: checked before the run opens, also where ``resume`` skips validate."""
    if cfg.overwrite and cfg.resume:
        raise ValueError("overwrite deletes the run that resume would continue: give one of them (--no-overwrite or "
                         "--no-resume undoes a config file's)")


def check_pooler(cfg: TrainConfig, spec: str | None = None) -> None:
    """The pooler's name, its options and their values, and whether it fits the recurrent layer.

    The names are checked first (a miss lists the valid ones); then the pooler is built once on the meta device at
    :data:`TRIAL_HIDDEN_SIZE`, so that a bad value (``attn_size=-3``, ``eps=abc``) is refused before an encoder loads
    or data is read. The encoder's own hidden size is only known then: a value that fails at it alone (heads that do
    not split it) is still refused when the model is built.

    ``spec``: the ``compare --poolings`` spec the pooler comes from, named in the errors instead of the options.
    """
    options = cfg.pooling_options
    if not isinstance(options, Mapping):
        raise ValueError(f"pooling_options must be a mapping of option names to values (--pooling-opt KEY=VALUE, or "
                         f"key: value lines under pooling_options: in a config file), got {options!r}")
    where = f"--poolings {spec}" if spec else "pooling" if not options else (
        "pooling with pooling_options " + ", ".join(f"{k}={v}" for k, v in options.items()))
    try:
        check_pooler_options(cfg.pooling, options)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    fix = ("--poolings NAME:key=value,..." if spec else
           "--pooling-opt KEY=VALUE (or under pooling_options: in a config file)")
    pooler = _trial_pooler(cfg.pooling, options, f"{where}: the pooler does not build", f"; fix the value in {fix}")
    if pooler is not None and cfg.recurrent is not None and pooler.needs_all_layers:
        raise ValueError(f"recurrent {cfg.recurrent} runs over one sequence of token states, but pooler "
                         f"{pooler.name!r} reads several encoder layers stacked (needs_all_layers): use a token pooler "
                         "(e.g. --pooling attention; --pooling-layers then picks the layers averaged into the "
                         "recurrent layer's input), or drop --recurrent (--recurrent none over a config file's)")


def _trial_pooler(name: str, options: Mapping[str, object], failed: str, fix: str) -> Pooler | None:
    """The pooler built on the meta device, or None where an operation has no meta kernel (not the options' fault).

    Raises:
        ValueError: ``failed``, whatever the build raised (a negative size, a value of the wrong type...), ``fix``.
    """
    pooling_logger = logging.getLogger("attnpool.pooling")
    level = pooling_logger.level
    pooling_logger.setLevel(logging.ERROR)  # its warnings come again, once, when the model is built
    try:
        with torch.device("meta"):
            return build_pooler(name, TRIAL_HIDDEN_SIZE, **options)
    except NotImplementedError:
        return None
    except Exception as err:  # any failure of the build is a bad value: said in one line, not a traceback
        raise ValueError(f"{failed} (tried at a stand-in hidden size of {TRIAL_HIDDEN_SIZE}): "
                         f"{type(err).__name__}: {' '.join(str(err).split())}{fix}") from None
    finally:
        pooling_logger.setLevel(level)


__all__ = ["SEED_BOUND", "TRIAL_HIDDEN_SIZE", "check_numbers", "check_output_flags", "check_pooler"]
