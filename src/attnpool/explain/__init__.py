"""Which tokens the pooler weighs, merged back to words, and whether those weights can be trusted.

``explain(model, tokenizer, texts)`` returns an :class:`Explanation`: per example the prediction, each word's
pooling weight (the sum over its sub-word pieces; per head for multi-head poolers), the entropy of the weights,
and an erasure test of their faithfulness (:mod:`attnpool.explain.faithfulness`). ``write_report`` turns it into
one self-contained HTML page and a JSON file; ``explain_file`` does both for a train run and a data file, as
``attnpool explain`` does.

The package is callable: ``attnpool.explain(model, tokenizer, texts)`` is :func:`explain`, while
``attnpool.explain.report`` and the other modules stay reachable as attributes (a function exported under the
package's own name would hide them).
"""

import inspect
import sys
import types

from attnpool.explain.core import ExampleExplanation, Explanation, explain
from attnpool.explain.faithfulness import ErasureCurves, ErasureSummary
from attnpool.explain.files import explain_file
from attnpool.explain.report import write_report
from attnpool.explain.words import Word, entropy, merge_words


class _CallableModule(types.ModuleType):
    """The type of this package: calling it calls :func:`explain` (module ``__class__`` assignment, Python 3.5+)."""

    __call__ = staticmethod(explain)


sys.modules[__name__].__class__ = _CallableModule
__signature__ = inspect.signature(explain)  # what help() and inspect show for the callable package

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
