"""Which tokens the pooler weighs, merged back to words, and whether those weights can be trusted.

``attnpool.explain(model, tokenizer, texts)`` returns an :class:`Explanation`: per example the prediction, each
word's pooling weight (the sum over its sub-word pieces; per head for multi-head poolers), the entropy of the
weights, and an erasure test of their faithfulness (:mod:`attnpool.explanations.faithfulness`). ``write_report``
turns it into one self-contained HTML page (:mod:`attnpool.explanations.page`) and a JSON file;
``attnpool.explain_file`` does both for a train run and a data file, as ``attnpool explain`` does.
"""

from attnpool.explanations.core import ExampleExplanation, Explanation, explain
from attnpool.explanations.faithfulness import ErasureCurves, ErasureSummary
from attnpool.explanations.files import explain_file
from attnpool.explanations.page import write_report
from attnpool.explanations.words import Word, entropy, merge_words

__all__ = [
    "ErasureCurves",
    "ErasureSummary",
    "ExampleExplanation",
    "Explanation",
    "Word",
    "entropy",
    "explain",
    "explain_file",
    "merge_words",
    "write_report",
]
