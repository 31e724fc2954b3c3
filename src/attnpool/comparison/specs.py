"""The contenders of a comparison: pooler specs written ``NAME`` or ``NAME:key=value,...``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from attnpool.options import parse_options
from attnpool.pooling import get_pooler_class


@dataclass(frozen=True)
class PoolerSpec:
    """One contender: a registered pooler name with its options, written ``NAME`` or ``NAME:key=value,key=value``."""

    label: str
    pooling: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> PoolerSpec:
        """Parse ``attention:attn_size=128,num_heads=2`` (values are JSON when they parse, else strings).

        A value may hold commas inside JSON brackets or quotes: ``weighted_layer:pooler={"type":"attention",
        "attn_size":64},num_layers=4``.
        """
        name, _, rest = text.partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"--poolings: empty pooler name in {text!r}; expected NAME or NAME:key=value,...")
        get_pooler_class(name)  # unknown names fail here, with the closest valid one
        options = parse_options(_top_level_items(rest), repr(text))
        return cls(label=text.strip(), pooling=name, options=options)

    @property
    def slug(self) -> str:
        """A folder name for the label."""
        return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", self.label)


def _top_level_items(text: str) -> list[str]:
    """``a=1,b=[1,2],c={"x":1}`` -> ``["a=1", "b=[1,2]", 'c={"x":1}']``: commas inside brackets or quotes stay."""
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote and text[i - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]
