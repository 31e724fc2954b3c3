"""Facts about the wrapped encoder: decoder-only or not, a local path or a hub name, where its layers are."""

from __future__ import annotations

import os

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES


def is_decoder_only(config: PretrainedConfig) -> bool:
    """Whether an encoder config describes a causal (decoder-only) architecture rather than a bidirectional one."""
    model_type = getattr(config, "model_type", "")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def looks_like_local_path(name: str) -> bool:
    """Hub names are ``name`` or ``org/name``; anything else with a path separator is meant as a local path."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or os.path.isabs(name)


def check_encoder_source(name: str) -> None:
    """Refuse a path that does not exist (a hub name is left to the hub), saying what a valid source is."""
    if not os.path.exists(name) and looks_like_local_path(name):
        raise FileNotFoundError(
            f"encoder path {name!r} does not exist; give a folder holding the encoder's config.json and "
            "model.safetensors, or a Hugging Face hub name such as 'microsoft/deberta-v3-large'"
        )


def encoder_layers(encoder: PreTrainedModel) -> nn.ModuleList:
    """The encoder's list of transformer blocks (``encoder.layer``, ``layers``, ``h``... found by its length)."""
    num_layers = getattr(encoder.config, "num_hidden_layers", None)
    for _, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(
        f"cannot find the list of {num_layers} transformer layers in {type(encoder).__name__}; freezing or "
        "re-initialising layers is not supported for this encoder"
    )
