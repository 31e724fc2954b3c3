"""Small building blocks shared by the learned poolers: initialisation and argument checks."""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any, Literal

import torch
import torch.nn.functional as F_nn
from torch import Tensor, nn
from typing_extensions import override

from attnpool.options import FALSE_WORDS, TRUE_WORDS, parse_switch

logger = logging.getLogger("attnpool.pooling")

Init = Literal["mean", "xavier"]
INITS = ("mean", "xavier")


def xavier_(*layers: nn.Linear) -> None:
    """Xavier-uniform weights and zero biases (the initialisation of every learned pooler in attnpool)."""
    for layer in layers:
        nn.init.xavier_uniform_(layer.weight)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


def xavier_parts_(weight: Tensor, parts: int) -> None:
    """Xavier-uniform on each of ``parts`` equal row blocks of a fused weight, as if they were separate layers.

    A ``Linear(H, 2A)`` that computes two ``(H -> A)`` branches (keys and values, or gated attention's ``V`` and
    ``U``) in one product gets each block's own Xavier range, ``sqrt(6 / (H + A))``, not the fused layer's.
    """
    with torch.no_grad():
        for part in weight.chunk(parts, dim=0):
            nn.init.xavier_uniform_(part)


def check_init(init: str, owner: str) -> str:
    """``init`` itself when it is one of :data:`INITS`.

    Raises:
        ValueError: An unknown ``init``, naming the valid ones.
    """
    if init not in INITS:
        raise ValueError(f"{owner}: init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
    return init


def uniform_start_(init: str, owner: str, key: nn.Linear | Tensor) -> None:
    """Apply ``init`` to the layer (or weight) that produces an attention's keys or scores.

    ``"mean"``: zero it, so that every token gets the same score and the first weights are uniform over the real
    tokens (the pooler starts as an average); the other weights keep their initialisation, and the zeroed ones get
    a gradient at the first step. ``"xavier"``: leave it as initialised.

    Raises:
        ValueError: An unknown ``init``.
    """
    if check_init(init, owner) == "mean":
        weight = key.weight if isinstance(key, nn.Linear) else key
        nn.init.zeros_(weight)


def check_count(owner: str, name: str, value: Any, minimum: int | None = 1) -> int:
    """The whole-number option ``name`` of ``owner`` as an int: ``4`` or ``4.0``, at least ``minimum``.

    ``int()`` would cut ``num_heads=2.5`` to 2 without a word, so a fraction is refused, as are bools and text.
    ``minimum=None``: any whole number (an index, negative from the end).

    Raises:
        ValueError: Not a whole number (naming the whole numbers around a fraction), or below ``minimum``.
    """
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    finite = number and (isinstance(value, numbers.Integral) or math.isfinite(value))
    if not finite or not (isinstance(value, numbers.Integral) or float(value).is_integer()):
        at_least = "" if minimum is None else f" >= {minimum}"
        if finite:  # a fraction
            choices = sorted({c for c in (math.floor(value), math.ceil(value)) if minimum is None or c >= minimum})
            fix = f"it is not rounded: give {' or '.join(f'{name}={c}' for c in choices)}"
        else:
            fix = f"give e.g. {name}={0 if minimum is None else max(minimum, 1)}"
        raise ValueError(f"{owner}: {name} must be a whole number{at_least}, got {value!r}; {fix}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}: {name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_positive(owner: str, name: str, value: Any, example: str) -> float:
    """The option ``name`` of ``owner`` as a float, a finite number > 0 (``example``: a valid value, for the error).

    Written as ``not value > 0`` rather than ``value <= 0``, so that NaN, which compares False either way, is refused.

    Raises:
        ValueError: Not a number (a bool or text included), NaN, infinite, zero or negative.
    """
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None
    if number is not None and number > 0 and math.isfinite(number):
        return number
    what = ("a number" if number is None else "finite" if number > 0 else "positive")  # inf: not "must be positive"
    raise ValueError(f"{owner}: {name} must be {what}, got {value!r}; give a finite number > 0 (e.g. {example})")


def check_number(owner: str, name: str, value: Any, example: str, low: float = 0.0, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = True) -> float:
    """The option ``name`` of ``owner`` as a float, a finite number from ``low`` to ``high`` (``None``: no bound).

    ``low_open`` / ``high_open`` leave the bound itself out: ``low=0, low_open=True`` is "positive", ``low=0,
    high=1`` is ``[0, 1)``. ``example`` is a valid setting, for the error (``"dropout=0.1"``). Comparisons are
    written so that NaN, which compares False either way, is refused.

    Raises:
        ValueError: Not a number (a bool or text included), NaN, infinite or out of range, naming the option, the
            value and the range.
    """
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None
    if number is not None and math.isfinite(number):
        above = number > low if low_open else number >= low
        below = high is None or (number < high if high_open else number <= high)
        if above and below:
            return number
    if high is not None:
        span = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        wanted = f"a finite number {span}"
    elif low_open and low == 0:
        span, wanted = "positive", "a finite number > 0"
    else:
        span = f"{'>' if low_open else '>='} {low:g}"
        wanted = f"a finite number {span}"
    if number is None:  # text, a bool, None: "must be a number"
        got = f"{value!r} ({type(value).__name__})"
        span = wanted.replace("finite ", "")
        as_text = _float_or_none(value) if isinstance(value, str) else None
        try:  # only where the number the text means would be taken
            if as_text is not None:
                check_number(owner, name, as_text, example, low, high, low_open=low_open, high_open=high_open)
        except ValueError:
            as_text = None
        if as_text is not None:  # --pooling-opt reads a value as JSON, where ".1" is text
            example += f"; --pooling-opt reads values as JSON, where {value!r} is text: write {name}={as_text!r}"
    else:
        got = str(value)
        span = span if math.isfinite(number) else wanted
    raise ValueError(f"{owner}: {name} must be {span}, got {got}; give {wanted} (e.g. {example})")


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_switch(owner: str, name: str, value: Any) -> bool:
    """The on/off option ``name`` of ``owner`` as a bool: a bool, or a word ``--pooling-opt`` reads as one.

    ``bool("False")`` is True, so text is read as :func:`attnpool.options.parse_value` reads it (``true``, ``yes``,
    ``on``; ``false``, ``no``, ``off``; any case) and anything else is refused, 0 and 1 included.

    Raises:
        ValueError: Neither a bool nor one of those words, naming the option, the value and the accepted ones.
    """
    if isinstance(value, bool):
        return value
    switch = parse_switch(value) if isinstance(value, str) else None
    if switch is None:
        words = ", ".join((*TRUE_WORDS, *FALSE_WORDS))
        raise ValueError(f"{owner}: {name} must be true or false, got {value!r}; give a bool or one of {words} "
                         f"(e.g. {name}=false)")
    return switch


def check_heads(owner: str, size: int, num_heads: int) -> int:
    """Validate ``num_heads`` against the width it splits and return it as an int.

    Raises:
        ValueError: ``num_heads`` not a whole number >= 1, or ``size`` not divisible by it.
    """
    heads = check_count(owner, "num_heads", num_heads)
    if size % heads:
        raise ValueError(f"{owner}: hidden_size {size} is not divisible by num_heads={num_heads}")
    return heads


def resolve_heads(owner: str, size: int, num_heads: int, head_dim: int | None) -> tuple[int, int]:
    """``(num_heads, head_dim)`` of an attention over width ``size``: heads split it unless ``head_dim`` is given.

    Heads of a given width need not split ``size`` (the inner width is then ``num_heads * head_dim``).

    Raises:
        ValueError: ``num_heads`` or ``head_dim`` not a whole number >= 1, or (without ``head_dim``) ``size`` not
            divisible.
    """
    if head_dim is None:
        heads = check_heads(owner, size, num_heads)
        return heads, size // heads
    return check_count(owner, "num_heads", num_heads), check_count(owner, "head_dim", head_dim)


def check_num_layers(owner: str, num_layers: int, stuck: str | None = None) -> int:
    """Validate the number of stacked encoder layers a multi-layer pooler takes (:func:`check_count`).

    ``stuck``: for a pooler whose weights over the layers are a softmax, the parameters that never learn over one
    layer (the softmax is constantly 1 there): a warning says so. Not an error: models saved so still load.

    Raises:
        ValueError: ``num_layers`` not a whole number >= 1.
    """
    layers = check_count(owner, "num_layers", num_layers)
    if stuck and layers == 1:
        logger.warning("%s over one layer (the encoder's depth or the pooling_layers chosen): it weighs the layers "
                       "by a softmax, constantly 1 here, so %s never learn; a one-layer pooler does the same with "
                       "fewer parameters", owner, stuck)
    return layers


class FeedForward(nn.Sequential):
    """``Linear(H, r*H) -> GELU -> Linear(r*H, H)``, Xavier-initialised: the MLP of a transformer block."""

    def __init__(self, hidden_size: int, ratio: float) -> None:
        inner = max(1, round(hidden_size * check_positive("FeedForward", "mlp_ratio", ratio, "mlp_ratio=4.0")))
        super().__init__(nn.Linear(hidden_size, inner), nn.GELU(), nn.Linear(inner, hidden_size))
        xavier_(self[0], self[2])


class GEGLUFeedForward(nn.Module):
    """``Linear(H, 2rH) -> value * GELU(gate) -> Linear(rH, H)``, Xavier-initialised: a GEGLU MLP.

    From "GLU Variants Improve Transformer" (Shazeer, 2020, arXiv:2002.05202), as in Perceiver-style blocks.
    """

    def __init__(self, hidden_size: int, ratio: float) -> None:
        super().__init__()
        inner = max(1, round(hidden_size * check_positive("GEGLUFeedForward", "mlp_ratio", ratio, "mlp_ratio=4.0")))
        self.proj_in = nn.Linear(hidden_size, 2 * inner)
        self.proj_out = nn.Linear(inner, hidden_size)
        xavier_(self.proj_in, self.proj_out)

    @override
    def forward(self, x: Tensor) -> Tensor:
        value, gate = self.proj_in(x).chunk(2, dim=-1)
        return self.proj_out(value * F_nn.gelu(gate))
