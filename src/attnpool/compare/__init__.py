"""Which pooler wins on your data: paired multi-seed comparisons with significance tests (``attnpool compare``)."""

from attnpool.compare.core import CompareResult, PoolerSpec, compare, summarise
from attnpool.compare.stats import Interval, PairedTest, holm, paired_bootstrap, paired_t_test, t_interval

__all__ = [
    "CompareResult",
    "Interval",
    "PairedTest",
    "PoolerSpec",
    "compare",
    "holm",
    "paired_bootstrap",
    "paired_t_test",
    "summarise",
    "t_interval",
]
