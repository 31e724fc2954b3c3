"""The task head on top of the pooled vector, and the losses in Hugging Face's ``problem_type`` terms."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnpool.model.configuration import AttnPoolConfig

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


class PredictionHead(nn.Module):
    """Dropout -> [Linear -> GELU ->] Linear, with multi-sample dropout.

    Multi-sample dropout ("Multi-Sample Dropout for Accelerated Training and Better Generalization", Inoue, 2019,
    arXiv:1905.09788) applies ``k`` independent dropout masks to the pooled vector in training and averages
    the ``k`` losses; in evaluation dropout is the identity, so one pass gives the same result.

    Args:
        in_features: Size of the pooled vector.
        num_labels: Number of outputs.
        dropout: Dropout probability.
        multi_sample_dropout: Number of dropout samples ``k`` in training.
        hidden_size: Width of an optional hidden layer; ``None`` for a linear head.
        init_std: Standard deviation of the normal initialisation of the linear layers (the encoder's
            ``initializer_range``, as transformers' classifiers do); biases start at zero.
    """

    def __init__(
        self,
        in_features: int,
        num_labels: int,
        dropout: float = 0.1,
        multi_sample_dropout: int = 1,
        hidden_size: int | None = None,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.samples = multi_sample_dropout
        self.init_std = init_std
        if hidden_size:
            self.body: nn.Module = nn.Sequential(nn.Linear(in_features, hidden_size), nn.GELU())
            in_features = hidden_size
        else:
            self.body = nn.Identity()
        self.out = nn.Linear(in_features, num_labels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights and zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=self.init_std)
                nn.init.zeros_(module.bias)

    def forward(self, pooled: Tensor) -> list[Tensor]:
        """One ``(B, num_labels)`` output per dropout sample (a single one in evaluation)."""
        samples = self.samples if self.training else 1
        return [self.out(self.body(self.dropout(pooled))) for _ in range(samples)]


def resolve_problem_type(config: AttnPoolConfig, labels: Tensor) -> str:
    """The config's ``problem_type``, or the transformers rule when unset (and then stored in the config).

    One label: regression; integer labels: single-label classification; otherwise multi-label.
    """
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {config.problem_type!r}")
    return config.problem_type


def _default_loss(config: AttnPoolConfig, problem_type: str) -> str:
    if config.loss is not None:
        return config.loss
    if problem_type == "regression":
        return "bce" if config.output_activation == "sigmoid" else "mse"
    return "cross_entropy" if problem_type == "single_label_classification" else "bce"


def compute_loss(raw: Tensor, labels: Tensor, config: AttnPoolConfig, problem_type: str) -> Tensor:
    """The loss of the head's raw output ``(B, num_labels)`` (before any sigmoid) against ``labels``.

    Raises:
        ValueError: Labels whose shape, dtype or values do not fit ``problem_type``, saying what was expected.
    """
    batch, num_labels = raw.shape
    shape = tuple(labels.shape)
    where = f"labels of shape {shape} ({labels.dtype}) for problem_type={problem_type!r}, num_labels={num_labels}"
    loss_name = _default_loss(config, problem_type)
    if problem_type == "single_label_classification":
        if shape not in ((batch,), (batch, 1)) or labels.is_floating_point():
            raise ValueError(
                f"{where}: expected integer class indices of shape ({batch},); for one-hot or multi-hot targets "
                "use problem_type='multi_label_classification'"
            )
        labels = labels.view(-1)
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
            bad = labels[(labels < 0) | (labels >= num_labels)].unique().tolist()
            raise ValueError(f"{where}: class indices {bad} are outside [0, {num_labels - 1}]; check label2id")
        return F.cross_entropy(raw, labels)
    expected = ((batch, num_labels),) if num_labels > 1 else ((batch,), (batch, 1))
    if shape not in expected:
        raise ValueError(
            f"{where}: expected shape {' or '.join(str(e) for e in expected)}"
            + ("; class indices need problem_type='single_label_classification'" if num_labels > 1 else "")
        )
    target = labels.to(raw.dtype).view(batch, num_labels)
    if not torch.isfinite(target).all():
        rows = (~torch.isfinite(target)).any(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"{where}: non-finite labels in batch rows {rows}")
    if loss_name == "cross_entropy":
        raise ValueError(f"loss='cross_entropy' needs problem_type='single_label_classification', not {problem_type!r}")
    if loss_name == "bce":
        if ((target < 0) | (target > 1)).any():
            raise ValueError(f"{where}: BCE needs targets in [0, 1], got values in [{target.min()}, {target.max()}]")
        return F.binary_cross_entropy_with_logits(raw, target)
    prediction = torch.sigmoid(raw) if config.output_activation == "sigmoid" else raw
    return F.mse_loss(prediction, target)
