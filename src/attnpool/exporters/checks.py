"""Checks of :func:`~attnpool.exporters.export_onnx`'s options and of the opset the exporter produced.

The options are checked before the model is loaded and exported, not after a graph was made only to be refused.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from attnpool.exporters.models import ExportError
from attnpool.exporters.verify import ATOL

MIN_OPSET = 7  # the oldest opset onnx's version converter converts to; older ones predate onnxruntime's support


def check_atol(atol: Any) -> float:
    """``atol`` if it is a finite number >= 0; else a ValueError, before a model is exported only to fail its check."""
    value = float(atol) if isinstance(atol, numbers.Real) and not isinstance(atol, bool) else math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"atol (export_onnx) must be a finite number >= 0, got {atol!r}: give the largest "
                         f"|onnxruntime - PyTorch| difference the verification accepts (default {ATOL:g}), or "
                         "skip the check with verify=False")
    return value


def check_opset_number(opset: Any) -> int | None:
    """``opset`` as an int, refused before exporting when it does not exist (onnx knows up to its own version).

    Raises:
        ValueError: ``opset`` is not a whole number in ``[MIN_OPSET, onnx.defs.onnx_opset_version()]``.
    """
    if opset is None:
        return None
    import onnx  # the onnx extra: export_onnx checked that it is installed

    newest = onnx.defs.onnx_opset_version()
    try:
        number = None if isinstance(opset, bool) else operator.index(opset)  # numpy's integers too
    except TypeError:
        number = None
    if number is None or not MIN_OPSET <= number <= newest:
        raise ValueError(f"--opset (opset=) {opset!r} is not an ONNX opset this onnx {onnx.__version__} can "
                         f"write: give a whole number from {MIN_OPSET} to {newest}, or leave it out for the "
                         "exporter's default (18 or newer)")
    return number


def check_opset(program: Any, opset: int | None) -> None:
    """The exporter writes opset 18 or newer and converts down when asked; it keeps 18 when conversion fails."""
    got = program.model.opset_imports.get("")
    if opset is not None and got != opset:
        raise ExportError(
            f"asked for ONNX opset {opset}, but the exporter produced opset {got} for this model: it writes opsets "
            "from 18 on and converts to others only where every operator has a form there; choose another --opset, "
            "or leave it out for the exporter's default"
        )
