"""The task head on top of the pooled vector (its loss is :mod:`attnpool.model.losses`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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

    The output layer always computes in float32, under autocast and with bf16/fp16 weights alike (as transformers'
    language-model heads return ``logits.float()``): a bf16 score has 8 significant bits, so a sigmoid output in
    [0.5, 1) would come in steps of 1/256 and many rows would tie. It is one ``in_features x num_labels`` product.
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
        return [self._output(self.body(self.dropout(pooled))) for _ in range(samples)]

    def _output(self, x: Tensor) -> Tensor:
        """The output layer in float32 (see the class docstring)."""
        weight, bias = self.out.weight, self.out.bias
        if x.dtype == weight.dtype == torch.float32 and not torch.is_autocast_enabled(x.device.type):
            return self.out(x)  # the plain float32 model (and its ONNX graph): nothing to change
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(x.float(), weight.float(), None if bias is None else bias.float())
