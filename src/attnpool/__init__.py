"""attnpool: learned attention pooling for fine-tuning transformer encoders.

Importing the package registers its models with transformers' ``AutoConfig``, ``AutoModel`` and
``AutoModelForSequenceClassification``, so that folders saved by attnpool load through them and through
``transformers.pipeline``.
"""

from attnpool import explain  # the package, callable as explain(model, tokenizer, texts)
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
    register_pooler,
)

from attnpool._version import __version__

__all__ = [
    "AttentionPooling",
    "AttnPoolConfig",
    "AttnPoolForSequenceClassification",
    "AttnPoolModel",
    "GatedAttentionPooling",
    "MultiHeadAttentionPooling",
    "Pooler",
    "__version__",
    "available_poolers",
    "build_pooler",
    "explain",
    "register_pooler",
]
