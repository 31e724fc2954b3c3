"""Encoder + pooler + head as Hugging Face models, registered with the Auto classes on import."""

from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from attnpool.model.configuration import AttnPoolConfig
from attnpool.model.heads import PredictionHead
from attnpool.model.modeling import (
    AttnPoolForSequenceClassification,
    AttnPoolModel,
    AttnPoolModelOutput,
    AttnPoolPreTrainedModel,
    AttnPoolSequenceClassifierOutput,
)

AutoConfig.register(AttnPoolConfig.model_type, AttnPoolConfig, exist_ok=True)
AutoModel.register(AttnPoolConfig, AttnPoolModel, exist_ok=True)
AutoModelForSequenceClassification.register(AttnPoolConfig, AttnPoolForSequenceClassification, exist_ok=True)

__all__ = [
    "AttnPoolConfig",
    "AttnPoolForSequenceClassification",
    "AttnPoolModel",
    "AttnPoolModelOutput",
    "AttnPoolPreTrainedModel",
    "AttnPoolSequenceClassifierOutput",
    "PredictionHead",
]
