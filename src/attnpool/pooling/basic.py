"""Baseline poolers: CLS, last token, mean, max, mean+max and generalised mean."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import check_number, check_positive, check_switch
from attnpool.pooling.registry import register_pooler


@register_pooler
class ClsPooling(Pooler):
    """The first real token's hidden state (``[CLS]`` for BERT-style encoders).

    The first *real* token is taken, so the result is the same under left padding. Token weights are one-hot.

    Warning:
        Not permutation invariant: the output depends on which token comes first.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "cls"
    permutation_invariant = False
    has_weights = True

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        weights = F.one_hot_weights(F.first_token_index(mask), mask, hidden_states.dtype)  # (B, T)
        return F.weighted_sum(weights, hidden_states), weights


@register_pooler
class LastTokenPooling(Pooler):
    """The last real token's hidden state, the usual choice for decoder-only models used as encoders.

    Correct under left and right padding. Token weights are one-hot.

    Warning:
        Not permutation invariant: the output depends on which token comes last.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "last_token"
    permutation_invariant = False
    has_weights = True

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        weights = F.one_hot_weights(F.last_token_index(mask), mask, hidden_states.dtype)  # (B, T)
        return F.weighted_sum(weights, hidden_states), weights


@register_pooler
class MeanPooling(Pooler):
    r"""Masked mean of the real tokens: :math:`\frac{1}{\max(n, 1)} \sum_{t: m_t = 1} h_t`.

    The denominator is clamped to 1, so a row without real tokens gives zeros rather than NaN. The returned
    weights are the uniform ``1 / n`` over real tokens.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "mean"
    has_weights = True

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        weights = F.mean_weights(mask, F.compute_dtype(hidden_states.dtype))  # (B, T), 1/n unrounded for the sum
        return F.weighted_sum(weights, hidden_states), weights.to(hidden_states.dtype)


@register_pooler
class MaxPooling(Pooler):
    """Per-channel maximum over the real tokens; padding can never win, a row without tokens gives zeros.

    Shapes:
        ``(B, T, H) -> (B, H)``; no token weights.
    """

    name = "max"

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        return F.masked_max(hidden_states, mask), None


@register_pooler
class MeanMaxPooling(Pooler):
    """Concatenation ``[mean ; max]`` of masked mean and masked max pooling.

    Shapes:
        ``(B, T, H) -> (B, 2H)``; no token weights.
    """

    name = "mean_max"

    @property
    def output_dim(self) -> int:
        """``2 * hidden_size``."""
        return 2 * self.hidden_size

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        pooled = torch.cat([F.masked_mean(hidden_states, mask), F.masked_max(hidden_states, mask)], dim=-1)
        return pooled, None


@register_pooler
class GeMPooling(Pooler):
    r"""Generalised mean (GeM) with a learnable exponent :math:`p`.

    From "Fine-tuning CNN Image Retrieval with No Human Annotation" (Radenović et al., 2018, arXiv:1711.02512):

    .. math::
        \mathrm{GeM}(h) = \Big(\frac{1}{n} \sum_{t: m_t = 1} \max(h_t, \epsilon)^p\Big)^{1/p}

    ``p = 1`` is the mean of the clamped values, ``p -> inf`` tends to the max. Transformer hidden states can be
    negative, and GeM is defined on positive values: they are clamped at ``eps`` as in the original. The mean is
    computed in float32 and in log space with the maximum shifted out (see
    :func:`~attnpool.pooling.functional.masked_generalized_mean`): ``x ** p`` is never formed, so the output and
    the gradient of ``p`` stay finite for large inputs and large ``p`` (a direct float32 power overflows at
    ``x = 100, p = 20``, or ``x = 1e4``, seen in LLM hidden states, at ``p = 10``). A row without real tokens
    gives zeros.

    Args:
        hidden_size: Size of the token vectors.
        p: Initial exponent.
        eps: Lower clamp of the hidden states.
        learnable_p: Train ``p`` (a single scalar parameter) or keep it fixed.

    Shapes:
        ``(B, T, H) -> (B, H)``; no token weights.
    """

    name = "gem"
    config_keys = ("p", "eps", "learnable_p")

    def __init__(self, hidden_size: int, p: float = 3.0, eps: float = 1e-6, learnable_p: bool = True) -> None:
        super().__init__(hidden_size)
        # The initial value, saved in the config: a plain number, so that get_config never reads a tensor (a model
        # loaded with from_pretrained is built on the meta device first). The learned value is in the state dict.
        self.p = check_positive("GeMPooling", "p", p, "p=3.0; 1 is the mean, a large p nears the max")
        # eps > 0, the floor of the values raised to p: log(0) gives p a NaN gradient
        self.eps = check_number("GeMPooling", "eps", eps, "eps=1e-6", low_open=True)
        self.learnable_p = check_switch("GeMPooling", "learnable_p", learnable_p)
        p_tensor = torch.tensor(self.p)
        if self.learnable_p:
            self.p_param = nn.Parameter(p_tensor)
        else:
            self.register_buffer("p_param", p_tensor)

    @property
    def learned_p(self) -> float:
        """The exponent now (``p`` is the initial one)."""
        return float(self.p_param.detach())

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        p = self.p_param.to(F.compute_dtype(self.p_param.dtype)).clamp(min=1e-3)
        return F.masked_generalized_mean(hidden_states, mask, p, self.eps).to(hidden_states.dtype), None
