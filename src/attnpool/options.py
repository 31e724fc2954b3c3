"""Option values written as text (command-line flags, pooler specs), turned into what :class:`TrainConfig` holds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """An option or config file that cannot be used; the message is one line saying where and why."""


OFF_VALUES = ("0", "false", "no", "off")


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns a default off: ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(variable, "").strip().lower() in OFF_VALUES


def parse_value(text: str) -> Any:
    """A ``KEY=VALUE`` option's value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(items: Iterable[str], where: str) -> dict[str, Any]:
    """``["attn_size=128", "num_heads=2"]`` -> ``{"attn_size": 128, "num_heads": 2}``; a later key wins.

    Values go through :func:`parse_value`. ``where`` names the source in errors (``--pooling-opt``, or a pooler
    spec such as ``'attention:attn_size'``).

    Raises:
        ConfigError: An item without ``=`` or with an empty key, naming the item, ``where`` and the expected form.
    """
    options: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"option {item!r} of {where} is not key=value; expected KEY=VALUE, e.g. attn_size=128")
        options[key.strip()] = parse_value(value)
    return options


def parse_pooling_layers(value: Any) -> Any:
    """``pooling_layers`` as the model takes it: ``"last"``, ``"all"`` or a list of layer indices.

    Command-line words are accepted: ``["last"]`` -> ``"last"``, ``["all"]`` -> ``"all"``, ``["0", "-1"]`` ->
    ``[0, -1]``. A string or a list of ints passes through unchanged (the model checks the string).

    Raises:
        ConfigError: A list that is neither one of those words nor integers.
    """
    if not isinstance(value, list | tuple):
        return value
    if list(value) in (["last"], ["all"]):
        return value[0]
    layers = []
    for item in value:
        if isinstance(item, str) and item.strip().lstrip("+-").isdigit():
            layers.append(int(item))
        elif isinstance(item, int) and not isinstance(item, bool):
            layers.append(item)
        else:
            raise ConfigError(f"pooling_layers must be last, all or layer indices (e.g. 0 -1), got {list(value)!r}")
    return layers
