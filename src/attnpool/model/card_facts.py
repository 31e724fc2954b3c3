"""What a model card says beyond the model config: training facts, export facts, and names of the encoder.

:class:`TrainingFacts` are what training knows (data, split, recipe, validation scores), :class:`ExportFacts` what an
ONNX export wrote; :mod:`attnpool.model.card` turns them into a card.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnpool.model.configuration import AttnPoolConfig
from attnpool.model.encoders import looks_like_local_path
from attnpool.pooling import build_pooler

# Our metric names -> the Hub's metric ids (https://huggingface.co/metrics) and display names.
HUB_METRICS = {"pearson": ("pearsonr", "Pearson"), "spearman": ("spearmanr", "Spearman"), "rmse": ("rmse", "RMSE"),
               "accuracy": ("accuracy", "Accuracy"), "macro_f1": ("f1", "Macro F1"), "auc": ("roc_auc", "ROC AUC")}


def encoder_source(config: AttnPoolConfig) -> str | None:
    """Where the encoder was loaded from (hub name or folder), as its config remembers it."""
    name = getattr(config.encoder, "_name_or_path", "") if config.encoder is not None else ""
    return str(name) or None


def hub_name(name: str | None) -> str | None:
    """``name`` when it is a Hugging Face hub name rather than a local folder (only hub names are ``base_model``)."""
    if not name or looks_like_local_path(name) or os.path.exists(name):
        return None
    return name


def display_name(name: str | None) -> str:
    """A short name: the hub name, or the folder's (its package's for ``.../package/model``)."""
    if not name:
        return "random encoder"
    if hub_name(name):
        return name
    path = Path(name)
    return path.parent.name if path.name == "model" and path.parent.name else path.name


def pooler_has_weights(config: AttnPoolConfig) -> bool:
    """Whether the config's pooler gives token weights (``max``, ``gem``, a combination... do not).

    Composite poolers take the flag from their parts, so the pooler is built, on the meta device: no memory, and no
    random numbers drawn (a card written before training must not change what it trains). A pooler that does not build
    there (a user's calling ``.item()``...) is built on the CPU at the model's hidden size, the random generator's
    state put back after; the card is written after training too and must not fail where the model was built.
    """
    try:
        with torch.device("meta"):
            return build_pooler(config.pooling, config.hidden_size).has_weights
    except Exception:  # noqa: BLE001 - the CPU build below raises what is the config's fault
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            return build_pooler(config.pooling, config.hidden_size).has_weights


def metric_values(training: TrainingFacts | None) -> dict[str, float]:
    """The validation scores the Hub knows a metric id for."""
    validation = training.validation if training is not None else {}
    return {k: float(v) for k, v in validation.items() if k in HUB_METRICS and isinstance(v, int | float)}


@dataclass
class TrainingFacts:
    """What training knows beyond the model config: the data, the split, the recipe and the validation scores.

    ``rows``: rows read from ``data_file`` (after ``limit``), of which ``train_rows`` trained this model and
    ``valid_rows`` validated it (fold ``fold`` of ``folds``, or ``valid_file``); ``text``: the text columns or
    template; ``label``: the target column; ``validation``: the model's scores on its validation rows;
    ``recipe``: the recipe options; ``run_dir``: the ``attnpool train`` run it belongs to.
    """

    data_file: str | None = None
    rows: int | None = None
    train_rows: int | None = None
    valid_rows: int | None = None
    fold: int | None = None
    folds: int | None = None
    valid_file: str | None = None
    text: str | None = None
    label: str | None = None
    validation: dict[str, float] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    run_dir: str | None = None
    train_seconds: float | None = None
    device: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts that are set, JSON-serialisable."""
        return {k: v for k, v in json.loads(json.dumps(dataclasses.asdict(self), default=str)).items()
                if v not in (None, {}, [])}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingFacts:
        """Facts from :meth:`to_dict` (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class ExportFacts:
    """What an ONNX export wrote: the graph file, its inputs and outputs, the opset and the verified difference.

    ``tokenizer_from``: where the tokenizer is when it was not saved beside the graph: a folder relative to the
    export's (``../model``, a run's fold model), an absolute folder or a hub name (the encoder's); ``None``: unknown.
    """

    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int | None = None
    max_abs_diff: float | None = None
    tokenizer_saved: bool = False
    tokenizer_from: str | None = None
