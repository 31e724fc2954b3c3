"""Poolers: reduce token hidden states ``(B, T, H)`` to one vector per sequence, under one contract."""

from attnpool.pooling.attention import AttentionPooling, GatedAttentionPooling, MultiHeadAttentionPooling
from attnpool.pooling.base import Pooler
from attnpool.pooling.basic import ClsPooling, GeMPooling, LastTokenPooling, MaxPooling, MeanMaxPooling, MeanPooling
from attnpool.pooling.registry import available_poolers, build_pooler, get_pooler_class, register_pooler

__all__ = [
    "AttentionPooling",
    "ClsPooling",
    "GatedAttentionPooling",
    "GeMPooling",
    "LastTokenPooling",
    "MaxPooling",
    "MeanMaxPooling",
    "MeanPooling",
    "MultiHeadAttentionPooling",
    "Pooler",
    "available_poolers",
    "build_pooler",
    "get_pooler_class",
    "register_pooler",
]
