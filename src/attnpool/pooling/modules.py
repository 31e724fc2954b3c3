"""Small building blocks shared by the learned poolers: initialisation and argument checks."""

from __future__ import annotations

from torch import nn


def xavier_(*layers: nn.Linear) -> None:
    """Xavier-uniform weights and zero biases (the initialisation of every learned pooler in attnpool)."""
    for layer in layers:
        nn.init.xavier_uniform_(layer.weight)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


def check_heads(owner: str, size: int, num_heads: int) -> int:
    """Validate ``num_heads`` against the width it splits and return it as an int.

    Raises:
        ValueError: ``num_heads < 1`` or ``size`` not divisible by it.
    """
    if int(num_heads) < 1:
        raise ValueError(f"{owner}: num_heads must be >= 1, got {num_heads}")
    if size % int(num_heads):
        raise ValueError(f"{owner}: hidden_size {size} is not divisible by num_heads={num_heads}")
    return int(num_heads)


def check_num_layers(owner: str, num_layers: int) -> int:
    """Validate the number of stacked encoder layers a multi-layer pooler takes.

    Raises:
        ValueError: ``num_layers < 1``.
    """
    if isinstance(num_layers, bool) or int(num_layers) != num_layers or int(num_layers) < 1:
        raise ValueError(f"{owner}: num_layers must be a positive integer, got {num_layers!r}")
    return int(num_layers)


class FeedForward(nn.Sequential):
    """``Linear(H, r*H) -> GELU -> Linear(r*H, H)``, Xavier-initialised: the MLP of a transformer block."""

    def __init__(self, hidden_size: int, ratio: float) -> None:
        inner = max(1, round(hidden_size * ratio))
        super().__init__(nn.Linear(hidden_size, inner), nn.GELU(), nn.Linear(inner, hidden_size))
        xavier_(self[0], self[2])
