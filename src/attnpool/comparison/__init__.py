"""Which pooler wins on your data: paired multi-seed comparisons with significance tests (``attnpool compare``)."""

from attnpool.comparison.runner import compare
from attnpool.comparison.specs import PoolerSpec
from attnpool.comparison.stats import Interval, PairedTest, holm, paired_bootstrap, paired_t_test, t_interval
from attnpool.comparison.summary import CompareResult, run_predictions, summarise

__all__ = [
    "CompareResult",
    "Interval",
    "PairedTest",
    "PoolerSpec",
    "compare",
    "holm",
    "paired_bootstrap",
    "paired_t_test",
    "run_predictions",
    "summarise",
    "t_interval",
]
