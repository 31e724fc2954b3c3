"""What ``explain`` returns: per example the prediction, the words and their weights, and the erasure curves."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnpool._version import __version__
from attnpool.explanations.faithfulness import ErasureCurves, ErasureSummary
from attnpool.explanations.words import Word
from attnpool.json_values import json_value

MEASURES = {
    "regression": "|change of the predicted value| (mean over outputs)",
    "single_label_classification": "|change of the predicted class's probability|",
    "multi_label_classification": "|change of the label probabilities| (mean over labels)",
}


@dataclass
class ExampleExplanation:
    """One example: its prediction, its words with their pooling weights, and its erasure test.

    Attributes:
        index: Position of the example in the input.
        text: The (first) text.
        text_pair: The second text of a pair, else ``None``.
        prediction: The predicted value (a list for several outputs), class name, or list of label names.
        probabilities: The class (or label) probabilities, for classification.
        score: What the erasure test follows: the predicted class's probability, or the predicted value.
        label: The true label when given (a class name for classification).
        error: ``|prediction - label|`` for regression (mean over outputs), ``1``/``0`` for a wrong/right class.
        words: The words (sub-word pieces merged) and special tokens, in input order, with weights per head.
        tokens: The real tokens the model saw.
        token_weights: ``(heads, tokens)`` pooling weights; each head's weights sum to 1.
        special: Whether each token is a special token.
        entropy: Entropy of each head's token weights, in nats: low means concentrated.
        normalized_entropy: Entropy divided by ``log(tokens)``, in ``[0, 1]``.
        special_weight: Each head's total weight on special tokens.
        truncated: The input was longer than ``max_length`` tokens and was cut.
        erasure: The erasure test of this example.
        id: The row's id, when the input file has an id column.
    """

    index: int
    text: str
    text_pair: str | None
    prediction: Any
    probabilities: list[float] | None
    score: float
    label: Any
    error: float | None
    words: list[Word]
    tokens: list[str]
    token_weights: list[list[float]]
    special: list[bool]
    entropy: list[float]
    normalized_entropy: list[float]
    special_weight: list[float]
    truncated: bool
    erasure: ErasureCurves
    id: str | None = None

    @property
    def concentration(self) -> float:
        """The normalised entropy averaged over heads (0: one token holds all weight, 1: uniform)."""
        return float(np.mean(self.normalized_entropy))

    def __repr__(self) -> str:  # its tokens, words and weights stay out: thousands of numbers in a notebook
        return (f"ExampleExplanation(index={self.index}, id={self.id!r}, prediction={self.prediction!r}, "
                f"label={self.label!r}, words={len(self.words)}, tokens={len(self.tokens)}, "
                f"concentration={self.concentration:.3f})")


@dataclass
class Explanation:
    """What :func:`explain` returns; :meth:`to_dict` gives the same numbers as plain JSON data.

    Attributes:
        examples: One :class:`ExampleExplanation` per input text.
        problem_type: ``regression``, ``single_label_classification`` or ``multi_label_classification``.
        class_names: Names of the outputs for classification (``config.id2label``), else ``None``.
        pooler: The pooler's config (``{"type": ..., ...}``).
        num_heads: Heads of the pooler's weights (1 for single-head poolers).
        layer_weights: A multi-layer pooler's weights over the encoder layers, in the order the pooler is fed them
            (that of ``config.pooling_layers``), else ``None``.
        erasure: The erasure test over all examples.
        erasure_measure: What the erasure curves measure.
        max_length: Inputs were truncated to this many tokens.
        erasure_k: ``K`` of the erasure test.
        seed: Seed of the random erasure.
        source: Where the model came from (set by :func:`attnpool.explanations.explain_file`).
        layer_indices: The index into the encoder's ``hidden_states`` of each of ``layer_weights`` (0: the
            embeddings' output, ``N``: the N-th transformer layer); ``None`` without layer weights, or when the model
            does not say which layers it mixes.
    """

    examples: list[ExampleExplanation]
    problem_type: str
    class_names: list[str] | None
    pooler: dict[str, Any]
    num_heads: int
    layer_weights: list[float] | None
    erasure: ErasureSummary
    erasure_measure: str
    max_length: int
    erasure_k: int
    seed: int
    source: str | None = None
    layer_indices: list[int] | None = None

    def __repr__(self) -> str:  # its examples are counted, not printed: each holds its tokens and weights
        return (f"Explanation(examples=<{len(self.examples)}>, problem_type={self.problem_type!r}, "
                f"pooler={self.pooler!r}, aopc={self.erasure.aopc!r}, source={self.source!r})")

    def to_dict(self) -> dict[str, Any]:
        """All numbers as JSON-able data (``json.dumps`` works on it); each word carries its ``weights`` per head."""
        return {"attnpool_version": __version__, **json_value(dataclasses.asdict(self))}
