"""attnpool: learned attention pooling for fine-tuning transformer encoders."""

from attnpool.pooling import (
    AttentionPooling,
    GatedAttentionPooling,
    MultiHeadAttentionPooling,
    Pooler,
    available_poolers,
    build_pooler,
    register_pooler,
)

__version__ = "0.1.0"

__all__ = [
    "AttentionPooling",
    "GatedAttentionPooling",
    "MultiHeadAttentionPooling",
    "Pooler",
    "__version__",
    "available_poolers",
    "build_pooler",
    "register_pooler",
]
