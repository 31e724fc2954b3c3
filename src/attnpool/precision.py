"""Which floating-point precision a run uses: the one rule for training and prediction."""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str) -> str:
    """``precision`` itself; ``ValueError`` naming the valid ones when it is not one."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision that ``precision`` means on ``device``: ``fp32``, ``bf16`` or ``fp16``.

    ``auto`` is bf16 on a CUDA device that supports it, else fp32. bf16 and fp16 run the forward pass under
    ``torch.autocast`` (on a CPU too, when asked); the weights stay float32.

    Raises:
        ValueError: ``precision`` is not one of ``auto``, ``fp32``, ``bf16``, ``fp16``.
    """
    if check_precision(precision) != "auto":
        return precision
    device = torch.device(device)
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def autocast(precision: str, device: str | torch.device):
    """A ``torch.autocast`` context for ``precision`` on ``device`` (a no-op context for fp32)."""
    device = torch.device(device)
    dtype = AUTOCAST_DTYPES.get(resolve_precision(precision, device))
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def trainer_flags(precision: str, device: str | torch.device) -> dict[str, bool]:
    """``TrainingArguments``' ``bf16`` / ``fp16`` flags for ``precision`` on ``device``."""
    resolved = resolve_precision(precision, device)
    return {"bf16": resolved == "bf16", "fp16": resolved == "fp16"}
