"""The one exception type of ``attnpool.data``."""

from __future__ import annotations


class DataError(ValueError):
    """Bad input data: a missing file or column, an unreadable file, bad labels, impossible folds.

    Messages say what is wrong, where (file, column, row or line) and how to fix it, so that a training run fails
    before it starts instead of hours into it. A ``ValueError`` subclass, so callers that catch ``ValueError``
    keep working.
    """
