r"""Are the pooling weights faithful? The erasure test: remove the most-weighted tokens and watch the prediction.

Attention weights are often read as explanations, yet a model can be trained to put its weight on tokens that do
not drive its prediction ("Learning to Deceive with Attention-Based Explanations", Pruthi et al., 2020,
arXiv:1909.07913). The erasure test checks: for ``k = 1..K`` it removes the ``k`` most-weighted tokens, ``k``
random ones (seeded) and the ``k`` least-weighted ones, and records how far the prediction moves,

.. math::
    \Delta_k^{s} = \lvert f(x) - f(x \setminus R_k^{s}) \rvert, \qquad
    \mathrm{AOPC}^{s} = \frac{1}{K} \sum_{k=1}^{K} \Delta_k^{s}, \qquad
    s \in \{\text{top}, \text{random}, \text{bottom}\}

(the area over the perturbation curve of "Evaluating the visualization of what a deep neural network has
learned", Samek et al., 2017, arXiv:1509.06321). Weights that explain the model give
``top > random > bottom``. ``f`` is the predicted class's probability for single-label classification, the
predicted value for regression. With several outputs (regression of several values; multi-label classification,
whose outputs are the label probabilities) :math:`\Delta_k^{s}` is the mean over the outputs of each output's
:math:`\lvert f_c(x) - f_c(x \setminus R_k^{s}) \rvert`, so changes in opposite directions do not cancel.

A token is removed by setting its ``attention_mask`` to 0: the encoder no longer attends to it and the pooler
gives it no weight, while positions stay as they were. Special tokens (``[CLS]``, ``[SEP]``) are never removed;
the candidates are the real, non-special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STRATEGIES = ("top", "random", "bottom")


@dataclass
class ErasureCurves:
    """The erasure test of one example.

    Attributes:
        k: ``1..K``.
        top: ``|prediction change|`` after removing the ``k`` most-weighted tokens; ``None`` where the example has
            fewer than ``k`` removable tokens.
        random: The same for ``k`` random tokens.
        bottom: The same for the ``k`` least-weighted tokens.
        removed: The token positions each strategy removes, in order (the first ``k`` are removed at step ``k``).
        aopc: The mean of each curve over the ``k`` it has (``None`` when it has none).
    """

    k: list[int]
    top: list[float | None]
    random: list[float | None]
    bottom: list[float | None]
    removed: dict[str, list[int]]
    aopc: dict[str, float | None]


@dataclass
class ErasureSummary:
    """The erasure test over all examples: the mean curve of each strategy.

    Attributes:
        k: ``1..K``.
        top: Mean ``|prediction change|`` over the examples that have ``k`` removable tokens.
        random: The same for random tokens.
        bottom: The same for the least-weighted tokens.
        counts: How many examples each mean is over.
        aopc: The mean of each curve (the AOPC); ``None`` without any value.
    """

    k: list[int]
    top: list[float | None]
    random: list[float | None]
    bottom: list[float | None]
    counts: list[int]
    aopc: dict[str, float | None]


def removal_orders(importance: np.ndarray, candidates: np.ndarray, rng: np.random.Generator,
                   max_k: int) -> dict[str, list[int]]:
    """The first ``max_k`` positions each strategy removes.

    Args:
        importance: ``(n,)`` token weights (the mean over heads for a multi-head pooler).
        candidates: ``(n,)`` booleans, the tokens that may be removed.
        rng: Draws the random order.
        max_k: ``K``.

    Returns:
        ``{"top": [...], "random": [...], "bottom": [...]}``, each at most ``max_k`` positions; ties are broken by
        position so that the orders are reproducible.
    """
    positions = np.flatnonzero(candidates)
    values = np.asarray(importance, dtype=np.float64)[positions]
    top = positions[np.lexsort((positions, -values))]
    bottom = positions[np.lexsort((positions, values))]
    random = rng.permutation(positions)
    return {"top": top[:max_k].tolist(), "random": random[:max_k].tolist(), "bottom": bottom[:max_k].tolist()}


def prediction_change(problem_type: str, base: np.ndarray, erased: np.ndarray, predicted: int) -> np.ndarray:
    """``|f(x) - f(x')|`` for rows of model outputs (values for regression, probabilities otherwise).

    Args:
        problem_type: ``regression``, ``single_label_classification`` or ``multi_label_classification``.
        base: ``(C,)`` outputs on the whole input.
        erased: ``(R, C)`` outputs on ``R`` erased inputs.
        predicted: The class predicted on the whole input (single-label classification).

    Returns:
        ``(R,)`` changes.
    """
    erased = np.asarray(erased, dtype=np.float64).reshape(len(erased), -1)
    base = np.asarray(base, dtype=np.float64).reshape(1, -1)
    if problem_type == "single_label_classification":
        return np.abs(erased[:, predicted] - base[0, predicted])
    return np.abs(erased - base).mean(axis=1)


def curves_of(k_max: int, orders: dict[str, list[int]], changes: dict[str, Sequence[float]]) -> ErasureCurves:
    """An example's curves from the changes measured for ``k = 1..len(changes[s])``, padded with ``None``."""
    series: dict[str, list[float | None]] = {}
    for s in STRATEGIES:
        values = [float(v) for v in changes.get(s, [])]
        series[s] = [*values, *([None] * (k_max - len(values)))]
    return ErasureCurves(k=list(range(1, k_max + 1)), top=series["top"], random=series["random"],
                         bottom=series["bottom"], removed=orders, aopc={s: _mean(series[s]) for s in STRATEGIES})


def summarize(curves: Sequence[ErasureCurves], k_max: int) -> ErasureSummary:
    """Mean curves over examples, at each ``k`` over the examples that have ``k`` removable tokens."""
    means: dict[str, list[float | None]] = {s: [] for s in STRATEGIES}
    counts = []
    for i in range(k_max):
        rows = [c for c in curves if i < len(c.top) and c.top[i] is not None]
        counts.append(len(rows))
        for s in STRATEGIES:
            means[s].append(float(np.mean([getattr(c, s)[i] for c in rows])) if rows else None)
    return ErasureSummary(k=list(range(1, k_max + 1)), top=means["top"], random=means["random"],
                          bottom=means["bottom"], counts=counts, aopc={s: _mean(means[s]) for s in STRATEGIES})


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None
