"""Which pooler wins on your data: paired multi-seed comparisons with significance tests (``attnpool compare``)."""

from attnpool.comparison.keys import bootstrap_keys, run_groups, shared_bootstrap_keys
from attnpool.comparison.runner import compare
from attnpool.comparison.specs import PoolerSpec
from attnpool.comparison.stats import (
    ExactTest,
    Interval,
    PairedTest,
    holm,
    metric_range,
    paired_bootstrap,
    paired_t_test,
    score_interval,
    sign_flip_test,
    t_interval,
)
from attnpool.comparison.summary import CompareResult, run_predictions, summarise

__all__ = [
    "CompareResult",
    "ExactTest",
    "Interval",
    "PairedTest",
    "PoolerSpec",
    "bootstrap_keys",
    "compare",
    "holm",
    "metric_range",
    "paired_bootstrap",
    "paired_t_test",
    "run_groups",
    "run_predictions",
    "score_interval",
    "shared_bootstrap_keys",
    "sign_flip_test",
    "summarise",
    "t_interval",
]
