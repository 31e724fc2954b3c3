"""Inline SVG charts of erasure curves for the explain page: no plotting library, no external asset."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

COLORS = {"top": "#d62728", "random": "#6b7280", "bottom": "#1f77b4"}
LABELS = {"top": "most-weighted first", "random": "random", "bottom": "least-weighted first"}
MAX_TICKS = 12  # the most k labels under a chart's x axis


def esc(value: Any) -> str:
    """HTML-escaped text of ``value`` (quotes too: safe in attributes)."""
    return html.escape(str(value), quote=True)


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; a dash for a missing or non-finite value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def svg_curves(k: Sequence[int], series: dict[str, Sequence[float | None]], *, width: int = 460, height: int = 250,
               y_label: str = "", compact: bool = False) -> str:
    """Inline SVG line chart of erasure curves (``None`` values leave gaps).

    Args:
        k: The x values.
        series: Name (``top``, ``random``, ``bottom``) -> y values.
        width: Width in pixels.
        height: Height in pixels.
        y_label: The y axis title.
        compact: Smaller fonts and no legend, for one example.

    Returns:
        An ``<svg>`` element.
    """
    left, right, top_m, bottom_m = (34, 8, 8, 20) if compact else (58, 14, 14, 58)
    plot_w, plot_h = width - left - right, height - top_m - bottom_m
    values = [v for ys in series.values() for v in ys if v is not None]
    y_max = _nice_max(max(values, default=0.0))
    x_min, x_max = (min(k), max(k)) if k else (1, 1)
    span = max(x_max - x_min, 1)

    def x_of(v: float) -> float:
        return left + (v - x_min) / span * plot_w if x_max > x_min else left + plot_w / 2

    def y_of(v: float) -> float:
        return top_m + plot_h - v / y_max * plot_h

    font = 9 if compact else 11
    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="erasure curves" style="font-size:{font}px">']
    for i in range(5):
        value = y_max * i / 4
        y = y_of(value)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        if not compact or i in (0, 4):
            out.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{esc(fmt_number(value, 2))}</text>')
    step = math.ceil(len(k) / MAX_TICKS) if len(k) > MAX_TICKS else 1  # labels that do not overlap
    for i, v in enumerate(k):
        thinned = i % step == 0 and len(k) - 1 - i >= step  # not so near the last one that they overlap
        if (not compact and thinned) or v in (x_min, x_max) or len(k) <= 6:
            out.append(f'<text x="{x_of(v):.1f}" y="{top_m + plot_h + (12 if compact else 15)}" '
                       f'text-anchor="middle">{v}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top_m}" y2="{top_m + plot_h}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top_m + plot_h}" y2="{top_m + plot_h}" class="axis"/>')
    if not compact:
        out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 26}" text-anchor="middle">k, tokens removed</text>')
        if y_label:
            out.append(f'<text transform="translate(12 {top_m + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
                       f"{esc(y_label)}</text>")
    for name, ys in series.items():
        color = COLORS.get(name, "#000")
        dash = ' stroke-dasharray="5 3"' if name == "random" else ""
        for run in _runs(k, ys):
            points = " ".join(f"{x_of(a):.1f},{y_of(b):.1f}" for a, b in run)
            if len(run) > 1:
                out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for a, b in run:
                out.append(f'<circle cx="{x_of(a):.1f}" cy="{y_of(b):.1f}" r="{2 if compact else 3}" fill="{color}">'
                           f"<title>{esc(LABELS.get(name, name))}, k = {a}: {fmt_number(b, 4)}</title></circle>")
    if not compact:  # the legend, in a row under the axis
        for i, name in enumerate(series):
            x, y = left + 135 * i, height - 6
            out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{COLORS.get(name, "#000")}" '
                       f'stroke-width="2"/><text x="{x + 24}" y="{y}">{esc(LABELS.get(name, name))}</text>')
    out.append("</svg>")
    return "".join(out)


def _runs(k: Sequence[int], ys: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    runs: list[list[tuple[int, float]]] = [[]]
    for a, b in zip(k, ys, strict=False):
        if b is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((a, float(b)))
    return [r for r in runs if r]


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n at or above ``value`` (1 for no value)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-4):  # 1.00001 still fits under 1
            return step * power
    return 10 * power
