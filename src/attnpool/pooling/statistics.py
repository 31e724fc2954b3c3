"""Parameter-light per-channel statistics: mean and standard deviation, SoftPool, grouped generalised mean."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import check_count, check_number, check_positive
from attnpool.pooling.registry import register_pooler


@register_pooler
class StatisticsPooling(Pooler):
    r"""Statistics pooling: masked mean and standard deviation of each channel, concatenated.

    The pooling of x-vector speaker embeddings, "X-Vectors: Robust DNN Embeddings for Speaker Recognition"
    (Snyder et al., 2018):

    .. math::
        \mu = \frac{1}{n} \sum_{t: m_t = 1} h_t, \qquad
        \sigma = \sqrt{\max\Big(\frac{1}{n} \sum_{t: m_t = 1} (h_t - \mu)^2,\ \epsilon\Big)}, \qquad
        \mathrm{pooled} = [\mu ; \sigma]

    The *population* standard deviation (divided by ``n``, not ``n - 1``): it is defined for a single token
    (:math:`\sigma = \sqrt\epsilon` there) and is the maximum-likelihood estimate. The clamp at ``eps`` keeps the
    gradient of the square root finite when all tokens are equal. Both moments are computed in float32 with the
    two-pass formula (no catastrophic cancellation of :math:`E[h^2] - \mu^2`); a row without real tokens gives
    zeros.

    Args:
        hidden_size: ``H``.
        eps: Lower clamp of the variance.

    Shapes:
        ``(B, T, H) -> (B, 2H)``; no token weights.
    """

    name = "stats"
    config_keys = ("eps",)

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(hidden_size)
        self.eps = check_number("StatisticsPooling", "eps", eps, "eps=1e-6", low_open=True)

    @property
    def output_dim(self) -> int:
        """``2 * hidden_size``."""
        return 2 * self.hidden_size

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        x = F.zero_padding(hidden_states.to(F.compute_dtype(hidden_states.dtype)), mask)  # (B, T, H)
        weights = F.mean_weights(mask, x.dtype)  # (B, T), 1/n on real tokens
        # elementwise sums, not bmm: fp16 autocast would run a bmm in fp16, where a square of 300 overflows
        mean = (weights.unsqueeze(-1) * x).sum(1)  # (B, H)
        centered = F.zero_padding(x - mean.unsqueeze(1), mask)  # (B, T, H)
        var = (weights.unsqueeze(-1) * centered.square()).sum(1)  # (B, H), population variance
        std = var.clamp(min=self.eps).sqrt() * F.has_token(mask)
        return torch.cat([mean, std], dim=-1).to(hidden_states.dtype), None


@register_pooler
class SoftPooling(Pooler):
    r"""SoftPool: each channel is averaged with weights given by the softmax of that channel's own values.

    From "Refining activation downsampling with SoftPool" (Stergiou, Poppe and Kalliatakis, 2021,
    arXiv:2101.00440), applied over the token axis:

    .. math::
        w_{t,c} = \frac{e^{h_{t,c}}}{\sum_{s: m_s = 1} e^{h_{s,c}}}, \qquad
        \mathrm{pooled}_c = \sum_{t: m_t = 1} w_{t,c}\, h_{t,c}

    Between the mean (flat channels) and the max (one dominant token). No parameters. The weights are per channel,
    ``(B, T, H)``, so no ``(B, T)`` token weights are returned; :meth:`channel_weights` gives them. The softmax runs
    in float32 with padding filled with the float32 minimum; a row without real tokens gives zeros.

    Shapes:
        ``(B, T, H) -> (B, H)``; no token weights (per-channel weights from :meth:`channel_weights`).
    """

    name = "softpool"

    def channel_weights(self, hidden_states: Tensor, mask: Tensor) -> Tensor:
        """Per-channel softmax weights over the real tokens, ``(B, T, H)`` in float32 (zeros on padding).

        Float64 hidden states give float64 weights.
        """
        return F.masked_softmax(hidden_states.to(F.compute_dtype(hidden_states.dtype)), mask.unsqueeze(-1), dim=1)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        weights = self.channel_weights(hidden_states, mask)  # (B, T, H)
        pooled = (weights * F.zero_padding(hidden_states.to(weights.dtype), mask)).sum(dim=1)  # (B, H)
        return pooled.to(hidden_states.dtype), None


@register_pooler
class GroupGeMPooling(Pooler):
    r"""Group Generalized Mean (GGeM) pooling: GeM with one learnable exponent per group of channels.

    From "Group Generalized Mean Pooling for Vision Transformer" (Ko, Gu and Kim, 2022, arXiv:2212.04114). The
    ``H`` channels are split into ``G`` contiguous groups (sizes differ by at most one when ``G`` does not divide
    ``H``) and channel ``c`` of group ``g(c)`` is pooled as

    .. math::
        \mathrm{pooled}_c = \Big(\frac{1}{n} \sum_{t: m_t = 1} \max(h_{t,c}, \epsilon)^{p_{g(c)}}\Big)^{1/p_{g(c)}}

    The paper uses one group per attention head of the encoder, so ``num_groups = num_attention_heads`` is the
    natural choice (12 for base models, the default). With all ``p = 1`` it is the mean of the clamped values,
    large ``p`` tends to the max. As for :class:`~attnpool.pooling.GeMPooling`, hidden states below ``eps``
    (including all negative ones) are clamped, the mean is computed in float32 in log space with the maximum
    shifted out (finite for large inputs and large ``p``), and an empty row gives zeros.

    Args:
        hidden_size: ``H``.
        num_groups: ``G``, at most ``H``.
        p: Initial exponent of every group.
        eps: Lower clamp of the hidden states.

    Shapes:
        ``(B, T, H) -> (B, H)``; no token weights.
    """

    name = "ggem"
    config_keys = ("num_groups", "p", "eps")

    def __init__(self, hidden_size: int, num_groups: int = 12, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__(hidden_size)
        if not check_count("GroupGeMPooling", "num_groups", num_groups) <= hidden_size:
            raise ValueError(f"GroupGeMPooling: num_groups must be in [1, hidden_size={hidden_size}], got {num_groups}")
        self.num_groups = int(num_groups)
        # the initial value, saved in the config; the learned ones are in the state dict
        self.p = check_positive("GroupGeMPooling", "p", p, "p=3.0; 1 is the mean, a large p nears the max")
        # eps > 0, the floor of the values raised to p: log(0) gives p a NaN gradient
        self.eps = check_number("GroupGeMPooling", "eps", eps, "eps=1e-6", low_open=True)
        self.p_param = nn.Parameter(torch.full((self.num_groups,), self.p))

    def channel_groups(self, device: torch.device | None = None) -> Tensor:
        """The group of each channel, ``(H,)``: ``c * G // H`` (computed, not stored, so loading cannot skip it)."""
        return torch.arange(self.hidden_size, device=device) * self.num_groups // self.hidden_size

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        groups = self.channel_groups(hidden_states.device)
        p = self.p_param.to(F.compute_dtype(self.p_param.dtype)).clamp(min=1e-3)[groups]  # (H,): its group's exponent
        return F.masked_generalized_mean(hidden_states, mask, p, self.eps).to(hidden_states.dtype), None
