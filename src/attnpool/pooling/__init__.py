"""Poolers: reduce token hidden states ``(B, T, H)`` to one vector per sequence, under one contract."""

from attnpool.pooling.adaptive import AdaptivePooling, SimPooling
from attnpool.pooling.attention import AttentionPooling, GatedAttentionPooling, MultiHeadAttentionPooling
from attnpool.pooling.base import Pooler, PoolOutputError
from attnpool.pooling.basic import ClsPooling, GeMPooling, LastTokenPooling, MaxPooling, MeanMaxPooling, MeanPooling
from attnpool.pooling.combine import CombinedPooling
from attnpool.pooling.contract import check_pooler
from attnpool.pooling.encoder_attention import DittoPooling
from attnpool.pooling.latent import ClassAttentionPooling, LatentAttentionPooling, PMAPooling
from attnpool.pooling.mil import ACMILPooling
from attnpool.pooling.multilayer import MaxPoolBERTPooling, MultiLayerAttentionPooling, WeightedLayerPooling
from attnpool.pooling.registry import (
    available_poolers,
    build_pooler,
    check_pooler_options,
    get_pooler_class,
    register_pooler,
)
from attnpool.pooling.sparse import masked_entmax15, masked_sparsemax
from attnpool.pooling.statistics import GroupGeMPooling, SoftPooling, StatisticsPooling

__all__ = [
    "ACMILPooling",
    "AdaptivePooling",
    "AttentionPooling",
    "ClassAttentionPooling",
    "ClsPooling",
    "CombinedPooling",
    "DittoPooling",
    "GatedAttentionPooling",
    "GeMPooling",
    "GroupGeMPooling",
    "LastTokenPooling",
    "LatentAttentionPooling",
    "MaxPoolBERTPooling",
    "MaxPooling",
    "MeanMaxPooling",
    "MeanPooling",
    "MultiHeadAttentionPooling",
    "MultiLayerAttentionPooling",
    "PMAPooling",
    "PoolOutputError",
    "Pooler",
    "SimPooling",
    "SoftPooling",
    "StatisticsPooling",
    "WeightedLayerPooling",
    "available_poolers",
    "build_pooler",
    "check_pooler",
    "check_pooler_options",
    "get_pooler_class",
    "masked_entmax15",
    "masked_sparsemax",
    "register_pooler",
]
