"""The task loss of the model's head, in Hugging Face's ``problem_type`` terms.

Which problem types and losses exist, and which loss applies when none is chosen, is :mod:`attnpool.tasks`'s; here
the ``problem_type`` of a batch is resolved (transformers' rule when the config leaves it unset), the labels are
checked against it and the loss is computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnpool.model.configuration import AttnPoolConfig, loss_mismatch
from attnpool.tasks import PROBLEM_TYPES, default_loss


def resolve_problem_type(config: AttnPoolConfig, labels: Tensor) -> str:
    """The config's ``problem_type``, or the transformers rule when unset.

    One label: regression; integer labels: single-label classification; otherwise multi-label. The model stores an
    inferred type in its config once a loss was computed with it (:func:`remember_problem_type`): a first batch of
    bad labels must not fix the wrong type for good.

    Raises:
        ValueError: A ``problem_type`` that is none of :data:`attnpool.tasks.PROBLEM_TYPES`.
    """
    problem_type = config.problem_type
    if problem_type is None:
        if config.num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
    return problem_type


def remember_problem_type(config: AttnPoolConfig, problem_type: str) -> None:
    """Keep an inferred ``problem_type`` in the config (later batches and the saved config use it)."""
    if config.problem_type is None:
        config.problem_type = problem_type


def compute_loss(raw: Tensor, labels: Tensor, config: AttnPoolConfig, problem_type: str) -> Tensor:
    """The loss of the head's raw output ``(B, num_labels)`` (before any sigmoid) against ``labels``.

    The loss is ``config.loss``, or :func:`attnpool.tasks.default_loss` of ``problem_type`` when it is unset;
    ``pearson`` (:func:`pearson_loss`) and MSE compare the predictions as the model reports them: after the sigmoid
    of ``output_activation``, and for multi-label classification after each label's sigmoid (its probabilities).

    Raises:
        ValueError: Labels whose shape, dtype or values do not fit ``problem_type``, saying what was expected, or a
            loss that does not train it.
    """
    batch, num_labels = raw.shape
    shape = tuple(labels.shape)
    where = f"labels of shape {shape} ({labels.dtype}) for problem_type={problem_type!r}, num_labels={num_labels}"
    loss_name = config.loss if config.loss is not None else default_loss(problem_type, config.output_activation)
    why = loss_mismatch(problem_type, loss_name, config.output_activation)  # the config checks a problem_type given
    if why:
        raise ValueError(why)
    if problem_type == "single_label_classification":
        if shape not in ((batch,), (batch, 1)) or labels.is_floating_point():
            raise ValueError(
                f"{where}: expected integer class indices of shape ({batch},); for one-hot or multi-hot targets "
                "use problem_type='multi_label_classification'"
            )
        labels = labels.view(-1).long()  # cross_entropy takes int64 (or uint8) only: int32 labels raised
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
            bad = labels[(labels < 0) | (labels >= num_labels)].unique().tolist()
            ignored = ("; -100 marks ignored labels in transformers, which attnpool does not support: drop those rows "
                       "from the batch" if -100 in bad else "")
            raise ValueError(f"{where}: class indices {bad} are outside [0, {num_labels - 1}]; check label2id"
                             f"{ignored}")
        return F.cross_entropy(raw, labels)
    expected = ((batch, num_labels),) if num_labels > 1 else ((batch,), (batch, 1))
    if shape not in expected:
        raise ValueError(
            f"{where}: expected shape {' or '.join(str(e) for e in expected)}"
            + ("; class indices need problem_type='single_label_classification'"
               if num_labels > 1 and config.problem_type is None else "")  # inferred, not the one asked for
        )
    target = labels.to(raw.dtype).view(batch, num_labels)
    if not torch.isfinite(target).all():
        rows = (~torch.isfinite(target)).any(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"{where}: non-finite labels in batch rows {rows}")
    if loss_name == "bce":
        if ((target < 0) | (target > 1)).any():
            raise ValueError(f"{where}: BCE needs targets in [0, 1], got values in [{target.min()}, {target.max()}]")
        return F.binary_cross_entropy_with_logits(raw, target)
    # what the model reports: the sigmoid of a [0, 1] regression head, and of each label of a multi-label one
    sigmoid = config.output_activation == "sigmoid" or problem_type == "multi_label_classification"
    prediction = torch.sigmoid(raw) if sigmoid else raw
    if loss_name == "pearson":
        return pearson_loss(prediction, labels.view(batch, num_labels))  # the labels as given, not cast to bf16
    return F.mse_loss(prediction, target)


# The relative spread below which pearson_loss takes a column for constant (r = 0): std over the batch at most this
# share of the column's largest magnitude. Centring equal float32 values leaves a rounding residue of about 1e-7 of
# them, which an absolute threshold took for a spread (equal predictions of 0.3 got gradients of 1e7); a real
# spread is far above it at any scale (targets in [0, 1e-4] have a relative spread near 0.3).
PEARSON_EPS = 1e-5


def pearson_loss(prediction: Tensor, target: Tensor, eps: float = PEARSON_EPS) -> Tensor:
    r"""``1 - r``: one minus the Pearson correlation of a batch's predictions with its targets, averaged over columns.

    The PPPM 1st-place solution (Kaggle 2022) trained on the competition's metric directly:

    .. math:: r_k = \frac{\operatorname{cov}(p_k, y_k)}{\sqrt{\operatorname{var} p_k \operatorname{var} y_k}},
              \qquad \mathcal{L} = 1 - \frac{1}{K} \sum_k r_k

    with population (co)variances over the batch, in float32 (also under autocast). The loss only sees the batch,
    so it depends on the batch size (per process, per gradient-accumulation step) and ignores the scale and offset
    of the predictions and of the targets (the Pearson metric does too): a perfect fit gives 0 whether the targets
    lie in [0, 1] or in [0, 1e-4]. A column that is constant in the batch (a batch of one row, equal targets or
    equal predictions: a standard deviation at most ``eps`` times the column's largest magnitude, float32 rounding)
    has ``r = 0``: the loss is 1 with a zero gradient, never NaN (nothing in such a batch tells which way to move
    the predictions).

    Shapes:
        prediction, target: ``(B, K)``. Output: a scalar.
    """
    p = prediction.float()
    y = target.float()
    floor_p = (eps * p.detach().abs().amax(dim=0)).square()  # (K,) the variance rounding alone can leave
    floor_y = (eps * y.abs().amax(dim=0)).square()
    p = p - p.mean(dim=0, keepdim=True)  # (B, K)
    y = y - y.mean(dim=0, keepdim=True)
    cov = (p * y).mean(dim=0)  # (K,)
    var_p, var_y = p.square().mean(dim=0), y.square().mean(dim=0)
    varies = (var_p > floor_p) & (var_y > floor_y) & (var_p * var_y > 0)
    # the square root of a safe 1 where the column is constant: sqrt'(0) = inf would give the gradient 0 * inf = NaN
    r = torch.where(varies, cov / torch.sqrt(torch.where(varies, var_p * var_y, 1.0)), 0.0)
    return 1.0 - r.mean()
