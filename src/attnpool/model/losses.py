"""The task loss of the model's head, in Hugging Face's ``problem_type`` terms.

Which problem types and losses exist, and which loss applies when none is chosen, is :mod:`attnpool.tasks`'s; here
the ``problem_type`` of a batch is resolved (transformers' rule when the config leaves it unset), the labels are
checked against it and the loss is computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnpool.model.configuration import AttnPoolConfig
from attnpool.tasks import PROBLEM_TYPES, default_loss


def resolve_problem_type(config: AttnPoolConfig, labels: Tensor) -> str:
    """The config's ``problem_type``, or the transformers rule when unset (and then stored in the config).

    One label: regression; integer labels: single-label classification; otherwise multi-label.

    Raises:
        ValueError: A ``problem_type`` that is none of :data:`attnpool.tasks.PROBLEM_TYPES`.
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


def compute_loss(raw: Tensor, labels: Tensor, config: AttnPoolConfig, problem_type: str) -> Tensor:
    """The loss of the head's raw output ``(B, num_labels)`` (before any sigmoid) against ``labels``.

    The loss is ``config.loss``, or :func:`attnpool.tasks.default_loss` of ``problem_type`` when it is unset.

    Raises:
        ValueError: Labels whose shape, dtype or values do not fit ``problem_type``, saying what was expected.
    """
    batch, num_labels = raw.shape
    shape = tuple(labels.shape)
    where = f"labels of shape {shape} ({labels.dtype}) for problem_type={problem_type!r}, num_labels={num_labels}"
    loss_name = config.loss if config.loss is not None else default_loss(problem_type, config.output_activation)
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
