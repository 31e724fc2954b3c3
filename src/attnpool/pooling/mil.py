"""Multiple-instance-learning attention: ACMIL's multiple branches with stochastic top-k instance masking."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import Init, check_count, check_number, uniform_start_, xavier_, xavier_parts_
from attnpool.pooling.registry import register_pooler
from attnpool.pooling.scoring import gated_scores


@register_pooler
class ACMILPooling(Pooler):
    r"""Attention-Challenging MIL: several gated-attention branches, their top tokens randomly hidden in training.

    From "Attention-Challenging Multiple Instance Learning for Whole Slide Image Classification" (Zhang et al.,
    2023, arXiv:2311.07125). Multiple Branch Attention: ``K`` gated-attention branches (Ilse et al.) share
    the first layers,

    .. math::
        s_{k,t} = w_k^\top\big(\tanh(V h_t) \odot \sigma(U h_t)\big), \qquad
        a_k = \mathrm{softmax}_{t \in \mathcal{M}_k}(s_k), \qquad
        \mathrm{pooled} = \frac{1}{K}\sum_k \sum_t a_{k,t}\, h_t

    and Stochastic Top-K Instance Masking: in training only, for each branch a random ``mask_rate`` share of its
    ``top_k`` highest-scoring real tokens is removed from :math:`\mathcal{M}_k` before the softmax, so that their
    weight goes to the other tokens. The number removed is ``floor(min(top_k, n) * mask_rate)``, and never more
    than ``n - 1``: a row keeps at least one real token. In eval mode all real tokens take part. The paper's
    branch-diversity loss belongs to the training objective and is not part of the pooler; ``combine="concat"``
    keeps the branches apart for it or for per-branch heads.

    One softmax per branch, as in the authors' code: their gated-attention module returns the raw scores, and
    ``ACMIL_GA`` masks its top-k tokens in those (filling ``-1e9``) and takes a single softmax. Here the masked
    softmax excludes padding and the masked tokens alike, and its weights are those returned and used in the sum.
    The branch scorer ``w_k`` has no bias (a per-branch shift, which the softmax ignores; the authors' layer has
    one that never learns).

    Initialisation: Xavier-uniform, as the authors' code (``init="xavier"``, default), so that the branches start
    apart: branches that start equal (``init="mean"``, zero ``w_k``: uniform weights) get equal gradients except
    for what the random masking tells apart, and a branch-diversity loss cannot separate them.

    Args:
        hidden_size: ``H``.
        num_branches: ``K`` (5 in the authors' code).
        attn_size: Width of the gated scoring layers (128 in the authors' code).
        top_k: How many of a branch's highest-weighted tokens may be masked (10 in the authors' code).
        mask_rate: Share of those that is masked in training (0.6 in the authors' code); 0 turns it off.
        combine: ``"mean"`` of the branch vectors (the bag representation) or their ``"concat"``.
        init: ``"xavier"`` or ``"mean"`` (zero branch scorers: uniform weights at the start).

    Shapes:
        ``(B, T, H) -> (B, H)`` (``(B, K*H)`` for ``"concat"``); weights ``(B, K, T)``.
    """

    name = "acmil"
    has_weights = True
    config_keys = ("num_branches", "attn_size", "top_k", "mask_rate", "combine", "init")
    removed_parameters = ("score.bias",)

    def __init__(
        self,
        hidden_size: int,
        num_branches: int = 5,
        attn_size: int = 128,
        top_k: int = 10,
        mask_rate: float = 0.6,
        combine: Literal["mean", "concat"] = "mean",
        init: Init = "xavier",
    ) -> None:
        super().__init__(hidden_size)
        self.num_branches = check_count("ACMILPooling", "num_branches", num_branches)
        self.attn_size = check_count("ACMILPooling", "attn_size", attn_size)
        self.top_k = check_count("ACMILPooling", "top_k", top_k, minimum=0)
        mask_rate = check_number("ACMILPooling", "mask_rate", mask_rate, "mask_rate=0.6", 0.0, 1.0)
        if combine not in ("mean", "concat"):
            raise ValueError(f"ACMILPooling: combine must be 'mean' or 'concat', got {combine!r}")
        self.mask_rate, self.combine = float(mask_rate), combine
        self.proj = nn.Linear(hidden_size, 2 * self.attn_size)  # [V; U]
        self.score = nn.Linear(self.attn_size, self.num_branches, bias=False)  # a per-branch shift: no effect
        xavier_(self.score)
        xavier_parts_(self.proj.weight, 2)  # V and U initialised as two separate layers
        nn.init.zeros_(self.proj.bias)
        self.init = init
        uniform_start_(init, "ACMILPooling", self.score)

    @property
    def output_dim(self) -> int:
        """``hidden_size``, or ``num_branches * hidden_size`` for ``"concat"``."""
        return self.num_branches * self.hidden_size if self.combine == "concat" else self.hidden_size

    def _stochastic_top_k(self, scores: Tensor, mask: Tensor) -> Tensor:
        """Boolean ``(B, K, T)``: the tokens hidden from each branch in this training step."""
        real = mask.unsqueeze(1).expand_as(scores)  # (B, K, T)
        filled = scores.float().masked_fill(~real, -torch.inf)
        rank = filled.argsort(dim=-1, descending=True).argsort(dim=-1)  # 0 = the branch's highest score
        counts = mask.sum(dim=-1).view(-1, 1, 1)  # (B, 1, 1)
        k = counts.clamp(max=self.top_k)
        candidates = real & (rank < k)
        n_drop = torch.minimum((k * self.mask_rate).floor().long(), (counts - 1).clamp(min=0))  # keep >= 1 token
        priority = torch.rand(scores.shape, device=scores.device).masked_fill(~candidates, 2.0)
        order = priority.argsort(dim=-1).argsort(dim=-1)  # a random order of the candidates first
        return candidates & (order < n_drop)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        scores = gated_scores(self.proj, self.score, hidden_states).transpose(1, 2)  # (B, K, T)
        keep = mask.unsqueeze(1).expand_as(scores)
        if self.training and self.mask_rate > 0 and self.top_k > 0:
            keep = keep & ~self._stochastic_top_k(scores.detach(), mask)
        weights = F.masked_softmax(scores.to(F.compute_dtype(scores.dtype)), keep)  # (B, K, T), unrounded for the sum
        branches = F.weighted_sum(weights, hidden_states)  # (B, K, H)
        pooled = branches.mean(dim=1) if self.combine == "mean" else branches.flatten(1)
        return pooled, weights.to(scores.dtype)
