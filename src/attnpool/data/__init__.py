"""Data loading for the k-fold fine-tuning recipe: files -> checked columns -> texts and labels -> folds -> batches.

Typical use (the PPPM reference task)::

    >>> from attnpool.data import build_texts, load_pppm, make_folds, validate_labels
    >>> frame, template = load_pppm("data/pppm")  # adds `context_text`, the CPC title  # doctest: +SKIP
    >>> first, second, num_empty = build_texts(frame, template=template, sep_token="[SEP]")  # doctest: +SKIP
    >>> labels = validate_labels(frame, "score", "regression")  # doctest: +SKIP
    >>> folds = make_folds(frame, 4, labels=labels.values, groups="anchor", seed=42)  # doctest: +SKIP

Every problem with the data raises :class:`DataError` (a ``ValueError``) saying what is wrong, where (file,
column, row or line) and how to fix it.
"""

from attnpool.data.batching import LengthGroupedSampler, length_sorted_batches
from attnpool.data.columns import Labels, Texts, build_texts, check_columns, validate_labels
from attnpool.data.errors import DataError
from attnpool.data.folds import make_folds
from attnpool.data.pppm import PPPM_TEMPLATE, load_pppm
from attnpool.data.readers import SUPPORTED_EXTENSIONS, iter_table, read_table, table_columns
from attnpool.data.writers import write_table

__all__ = [
    "LengthGroupedSampler",
    "PPPM_TEMPLATE",
    "SUPPORTED_EXTENSIONS",
    "DataError",
    "Labels",
    "Texts",
    "build_texts",
    "check_columns",
    "iter_table",
    "length_sorted_batches",
    "load_pppm",
    "make_folds",
    "read_table",
    "table_columns",
    "validate_labels",
    "write_table",
]
