"""attnpool: learned attention pooling for fine-tuning transformer encoders.

The Python API is one function per command (:mod:`attnpool.api`): :func:`train`, :func:`predict`,
:func:`compare`, :func:`explain_file`, :func:`export`, :func:`serve`, :func:`demo`, :func:`poolers`; plus
:func:`explain` for a model and texts in memory, the models and the poolers.

Importing the package registers its models with transformers' ``AutoConfig``, ``AutoModel`` and
``AutoModelForSequenceClassification``, so that folders saved by attnpool load through them and through
``transformers.pipeline``.
"""

from attnpool._version import __version__
from attnpool.api import (
    TrainConfig,
    compare,
    demo,
    explain,
    explain_file,
    export,
    poolers,
    predict,
    serve,
    train,
)
from attnpool.model import (
    AttnPoolConfig,
    AttnPoolForSequenceClassification,
    AttnPoolModel,
)
from attnpool.pooling import (
    AttentionPooling,
    GatedAttentionPooling,
    MultiHeadAttentionPooling,
    Pooler,
    available_poolers,
    build_pooler,
    check_pooler,
    register_pooler,
)
from attnpool.runs import Run, RunError

__all__ = [
    "AttentionPooling",
    "AttnPoolConfig",
    "AttnPoolForSequenceClassification",
    "AttnPoolModel",
    "GatedAttentionPooling",
    "MultiHeadAttentionPooling",
    "Pooler",
    "Run",
    "RunError",
    "TrainConfig",
    "__version__",
    "available_poolers",
    "build_pooler",
    "check_pooler",
    "compare",
    "demo",
    "explain",
    "explain_file",
    "export",
    "poolers",
    "predict",
    "register_pooler",
    "serve",
    "train",
]
