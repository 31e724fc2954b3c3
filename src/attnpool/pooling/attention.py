"""Learned attention poolers: single-head (the recipe), multi-head and gated."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.fused import FusedAttentionPool
from attnpool.pooling.modules import (
    Init,
    check_count,
    check_number,
    check_positive,
    check_switch,
    xavier_,
    xavier_parts_,
)
from attnpool.pooling.registry import register_pooler
from attnpool.pooling.scoring import default_attn_size, gated_scores, init_scorer_, tanh_projection
from attnpool.pooling.sparse import NORMALIZERS, Normalizer, normalize


class _ScoredPooling(Pooler):
    """Shared tail of the attention poolers: scores -> masked float32 normalizer -> dropout -> weighted sum.

    Dropout acts on the weights of the sum only: the weights returned (and the penalty computed from them) are
    those before it, a distribution over the real tokens in training too.

    The normalizer is ``"softmax"`` (default), ``"sparsemax"`` or ``"entmax15"`` (see :mod:`attnpool.pooling.sparse`):
    the sparse ones give exactly zero weight to low-scoring tokens.
    """

    has_weights = True

    def __init__(
        self, hidden_size: int, temperature: float, dropout: float, normalizer: str = "softmax", cls_share: float = 0.0
    ) -> None:
        super().__init__(hidden_size)
        if normalizer not in NORMALIZERS:
            raise ValueError(
                f"{type(self).__name__}: normalizer must be one of {', '.join(map(repr, NORMALIZERS))}, "
                f"got {normalizer!r}"
            )
        self.normalizer = normalizer
        owner = type(self).__name__
        self.dropout = check_number(owner, "dropout", dropout, "dropout=0.1", 0.0, 1.0)
        self.temperature = check_positive(owner, "temperature", temperature, "temperature=1.0")
        self.weight_dropout = nn.Dropout(self.dropout)
        self.cls_share = check_number(owner, "cls_share", cls_share, "cls_share=0.5", 0.0, 1.0)
        self.permutation_invariant = self.cls_share == 0  # the prior singles out the first token

    def _count(self, name: str, value: int) -> int:
        """The count option ``name`` as an int: a fraction is refused, not cut (see :func:`check_count`)."""
        return check_count(type(self).__name__, name, value)

    def score_prior(self, mask: Tensor) -> Tensor | None:
        """Fixed ``(B, T)`` score offsets for ``cls_share`` (:func:`~attnpool.pooling.functional.first_token_prior`)."""
        return F.first_token_prior(mask, self.cls_share, self.normalizer) if self.cls_share > 0 else None

    def scores(self, hidden_states: Tensor) -> Tensor:
        """Unnormalised token scores ``(B, T)`` or ``(B, heads, T)``."""
        raise NotImplementedError

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Weighted sums and token weights: ``(B, H)``/``(B, T)``, or ``(B, K, H)``/``(B, K, T)`` with heads."""
        scores = self.scores(hidden_states)
        dtype = scores.dtype
        # Divided in float32 (float64: float64): in fp16 a small temperature overflows the scores to inf (NaN weights).
        scores = scores.to(F.compute_dtype(dtype))
        if self.temperature != 1.0:
            scores = scores / self.temperature
        token_mask = mask if scores.dim() == 2 else mask.unsqueeze(1)  # (B, T) or (B, 1, T)
        prior = self.score_prior(mask)
        if prior is not None:  # added in float32 (a bf16 prior would move the share), the weights back in dtype
            scores = scores + prior.view(token_mask.shape)
        # Unrounded weights (float32 for half precision) go into the sum: fp16 turns weights near 1/T into subnormals.
        weights = normalize(scores, token_mask, self.normalizer)
        dropped = self.weight_dropout(weights)  # zeros and 1/(1-p) scaling: no longer a distribution
        return F.weighted_sum(dropped, hidden_states), weights.to(dtype)


@register_pooler
class AttentionPooling(_ScoredPooling):
    r"""Learned attention pooling, the PPPM recipe: a small MLP scores each token, softmax, weighted sum.

    .. math::
        s_t = w_2^\top \tanh(W_1 h_t + b_1), \qquad
        a = \mathrm{softmax}_{t: m_t = 1}(s / \tau), \qquad
        \mathrm{pooled} = \sum_t a_t h_t

    As in "Hierarchical Attention Networks for Document Classification" (Yang et al., 2016) and the public
    PPPM DeBERTa-v3-large baseline. Unlike the usual notebook head, padding is masked *before* the softmax with
    the float32 minimum (no ``-1e9`` that overflows fp16), the softmax runs in float32, and a row without real
    tokens gives zeros. The recipe's scoring layer also has a bias :math:`b_2`; a softmax ignores a constant shift,
    so its gradient is exactly zero and it never learns: it is left out (old checkpoints holding it load, and
    compute the same). ``H * A + 2 * A`` parameters (525,312 at H = 1024, A = 512).

    By default (``init="mean"``) the scoring layer ``w_2`` starts at zero: all tokens score alike and the pooler
    *is* mean pooling at step 0, then learns to weigh tokens as far as the loss pays for it. The recipe's head,
    both layers Xavier-uniform so that the first weights are already far from uniform, is ``init="xavier"``.

    Args:
        hidden_size: ``H``, the encoder's hidden size.
        attn_size: ``A``, width of the scoring MLP; ``None`` (default) takes ``H // 2`` (512 at H = 1024, as in
            the recipe; 192 on a 384-wide MiniLM).
        init: ``"mean"`` (zero scoring layer: uniform weights at the start) or ``"xavier"`` (the recipe's).
        temperature: ``tau``; above 1 flattens the weights, below 1 sharpens them.
        dropout: Dropout on the attention weights in the weighted sum while training (the sum's weights then add
            up to 1 only in expectation); the weights returned are those before it.
        fused: When training, use the fused backward of :mod:`attnpool.pooling.fused`, which keeps one
            ``(B*T, A)`` activation instead of about five (same results). It runs once per forward: set ``False``
            for ``retain_graph=True`` or double backward. Not used under autocast, ``torch.compile`` or export,
            nor with a sparse normalizer.
        normalizer: ``"softmax"``, or ``"sparsemax"`` / ``"entmax15"`` for sparse weights (exact zeros).
        cls_share: At the start, the share of weight on the first real token (``[CLS]``): a fixed score
            offset (:func:`~attnpool.pooling.functional.first_token_prior`) that, with the uniform start of
            ``init="mean"``, gives ``[CLS]`` this share and spreads the rest evenly; learned scores move from
            there. 0 (default): no offset.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "attention"
    config_keys = ("attn_size", "init", "temperature", "dropout", "fused", "normalizer", "cls_share")
    removed_parameters = ("score.bias",)

    def __init__(
        self,
        hidden_size: int,
        attn_size: int | None = None,
        init: Init = "mean",
        temperature: float = 1.0,
        dropout: float = 0.0,
        fused: bool = True,
        normalizer: Normalizer = "softmax",
        cls_share: float = 0.0,
    ) -> None:
        super().__init__(hidden_size, temperature, dropout, normalizer, cls_share)
        self.attn_size = default_attn_size(hidden_size) if attn_size is None else self._count("attn_size", attn_size)
        self.init = init
        self.fused = check_switch(type(self).__name__, "fused", fused)
        self.proj = nn.Linear(hidden_size, self.attn_size)
        self.score = nn.Linear(self.attn_size, 1, bias=False)  # a bias here is a constant shift: no effect
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as ``init`` says (see :func:`init_scorer_`)."""
        init_scorer_(self.init, type(self).__name__, self.proj, self.score)

    @override
    def scores(self, hidden_states: Tensor) -> Tensor:
        return self.score(tanh_projection(self.proj, hidden_states)).squeeze(-1)  # (B, T)

    def _use_fused(self, hidden_states: Tensor) -> bool:
        needs_grad = hidden_states.requires_grad or any(p.requires_grad for p in self.parameters())
        return (
            self.fused
            and self.normalizer == "softmax"
            and torch.is_grad_enabled()
            and needs_grad
            and not (self.training and self.dropout > 0)
            and not torch.is_autocast_enabled(hidden_states.device.type)
            and not torch.compiler.is_compiling()
            and not torch.onnx.is_in_onnx_export()
            and not torch.jit.is_tracing()  # a traced graph cannot call a Python autograd.Function
            and not torch._C._are_functorch_transforms_active()  # vmap/grad: the Function has no vmap rule
            and not hidden_states.is_inference()  # an inference tensor cannot be saved for the backward
            and all(p.dtype == hidden_states.dtype for p in self.parameters())
        )

    @override
    def clear_padding(self, hidden_states: Tensor, mask: Tensor) -> Tensor:
        # The fused path clears padding itself, in a copy that its backward reuses for the input's gradient.
        if self._use_fused(hidden_states):
            return hidden_states
        return super().clear_padding(hidden_states, mask)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        if self._use_fused(hidden_states):
            return FusedAttentionPool.apply(
                hidden_states, mask, self.proj.weight, self.proj.bias, self.score.weight, self.temperature,
                self.score_prior(mask),
            )
        return super().pool(hidden_states, mask)


@register_pooler
class MultiHeadAttentionPooling(_ScoredPooling):
    r"""Multi-head attention pooling: ``K`` heads, each its own softmax over the tokens.

    The structured self-attention of "A Structured Self-attentive Sentence Embedding" (Lin et al., 2017,
    arXiv:1703.03130): the heads share the first layer and each has its own scoring row,

    .. math::
        A = \mathrm{softmax}_{t: m_t = 1}\big(W_2 \tanh(W_1 H^\top + b_1)\big) \in \mathbb{R}^{K \times T},
        \qquad M = A H \in \mathbb{R}^{K \times H}

    (the paper's scorer has no second bias either; one would be a per-head shift, which the softmax ignores).
    The paper trains with the penalty :math:`P = \lVert AA^\top - I\rVert_F^2`, which pushes each head to a
    distribution of its own and each to few tokens: ``penalty`` is its coefficient (a hyperparameter in the
    paper; 0, off, by default), and :meth:`auxiliary_loss` returns ``penalty * P`` averaged over the rows that
    have real tokens, for the model to add to the task loss.

    The ``K`` head vectors are then combined by ``combine``:

    * ``"concat"`` (default): ``output_dim = K * H``, each head keeps its own view;
    * ``"project"``: concatenation followed by a Xavier-initialised ``Linear(K * H, H)``, ``output_dim = H``;
    * ``"mean"``: the average of the heads, ``output_dim = H``.

    With ``num_heads=1`` and ``combine`` ``"concat"`` or ``"mean"`` it computes exactly :class:`AttentionPooling`
    (``"project"`` adds its linear layer). With ``init="mean"`` (default) the scoring rows start at zero, so every
    head starts as mean pooling; the heads part as the shared first layer and their rows learn (``init="xavier"``:
    the heads differ from the start). Heads that start equal get equal gradients wherever nothing downstream tells
    them apart (``combine="mean"``, or the penalty alone, which is symmetric in the heads): use ``init="xavier"``
    there.

    Args:
        hidden_size: ``H``.
        num_heads: ``K``.
        attn_size: Width of the shared first layer; ``None``: ``H // 2``.
        init: ``"mean"`` or ``"xavier"``, as for :class:`AttentionPooling`.
        combine: ``"concat"``, ``"project"`` or ``"mean"``.
        temperature: Softmax temperature, shared by the heads.
        dropout: Dropout on the attention weights in the weighted sum while training; the weights returned, and
            the penalty computed from them, are those before it.
        normalizer: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"``, applied per head.
        cls_share: As for :class:`AttentionPooling`, per head.
        penalty: Coefficient of Lin et al.'s :math:`\lVert AA^\top - I\rVert_F^2` (see :meth:`auxiliary_loss`).

    Shapes:
        ``(B, T, H) -> (B, output_dim)``; weights ``(B, K, T)``.
    """

    name = "multihead_attention"
    config_keys = ("num_heads", "attn_size", "init", "combine", "temperature", "dropout", "normalizer", "penalty",
                   "cls_share")
    removed_parameters = ("score.bias",)

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 4,
        attn_size: int | None = None,
        init: Init = "mean",
        combine: Literal["concat", "project", "mean"] = "concat",
        temperature: float = 1.0,
        dropout: float = 0.0,
        normalizer: Normalizer = "softmax",
        penalty: float = 0.0,
        cls_share: float = 0.0,
    ) -> None:
        super().__init__(hidden_size, temperature, dropout, normalizer, cls_share)
        self.penalty = check_number("MultiHeadAttentionPooling", "penalty", penalty, "penalty=1.0")
        self.has_auxiliary_loss = self.penalty != 0
        if combine not in ("concat", "project", "mean"):
            raise ValueError(
                f"MultiHeadAttentionPooling: combine must be 'concat', 'project' or 'mean', got {combine!r}"
            )
        self.num_heads = self._count("num_heads", num_heads)
        self.attn_size = default_attn_size(hidden_size) if attn_size is None else self._count("attn_size", attn_size)
        self.init = init
        self.combine = combine
        self.proj = nn.Linear(hidden_size, self.attn_size)
        self.score = nn.Linear(self.attn_size, self.num_heads, bias=False)  # a per-head shift: no effect
        if combine == "project":
            self.out_proj = nn.Linear(self.num_heads * hidden_size, hidden_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the scorer as ``init`` says (see :func:`init_scorer_`); the projection Xavier-uniform."""
        init_scorer_(self.init, type(self).__name__, self.proj, self.score)
        if self.combine == "project":
            xavier_(self.out_proj)

    @property
    def output_dim(self) -> int:
        """``num_heads * hidden_size`` for ``"concat"``, ``hidden_size`` otherwise."""
        return self.num_heads * self.hidden_size if self.combine == "concat" else self.hidden_size

    @override
    def scores(self, hidden_states: Tensor) -> Tensor:
        return self.score(tanh_projection(self.proj, hidden_states)).transpose(1, 2)  # (B, K, T)

    @override
    def auxiliary_loss(self, weights: Tensor | None) -> Tensor | None:
        r"""Lin et al.'s penalty ``penalty * ||A A^T - I||_F^2``, averaged over the rows with real tokens.

        Computed in float32 from the weights this pooler returned, those before dropout (heads at
        :math:`AA^\top = I` pay nothing in training either). Rows without any real token (all-zero weights) are
        left out, and the loss is 0 for a batch without any; ``None`` when ``penalty`` is 0.

        Args:
            weights: ``(B, K, T)`` weights from ``forward(..., return_weights=True)``.

        Returns:
            A scalar float32 tensor, or ``None``.

        Raises:
            ValueError: ``weights`` is not ``(B, num_heads, T)``.
        """
        if self.penalty == 0:
            return None
        if weights is None or weights.dim() != 3 or weights.shape[1] != self.num_heads:
            got = None if weights is None else tuple(weights.shape)
            raise ValueError(f"MultiHeadAttentionPooling.auxiliary_loss: expected weights (B, {self.num_heads}, T), "
                             f"got {got}")
        a = weights.to(F.compute_dtype(weights.dtype))
        gram = torch.bmm(a, a.transpose(1, 2))  # (B, K, K)
        eye = torch.eye(self.num_heads, device=a.device, dtype=a.dtype)
        per_row = (gram - eye).square().sum(dim=(1, 2))  # (B,)
        real = a.sum(dim=(1, 2)) > 0  # rows with at least one real token
        total = torch.where(real, per_row, torch.zeros_like(per_row)).sum()
        return self.penalty * total / real.sum().clamp(min=1)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        heads, weights = super().pool(hidden_states, mask)  # (B, K, H), (B, K, T)
        if self.combine == "mean":
            return heads.mean(dim=1), weights
        pooled = heads.flatten(1)  # (B, K * H)
        if self.combine == "project":
            # The projection's bias would turn a row without tokens into a non-zero vector.
            pooled = self.out_proj(pooled) * mask.any(dim=1, keepdim=True).to(pooled.dtype)  # (B, H)
        return pooled, weights


@register_pooler
class GatedAttentionPooling(_ScoredPooling):
    r"""Gated attention pooling from attention-based multiple-instance learning.

    From "Attention-based Deep Multiple Instance Learning" (Ilse, Tomczak and Welling, 2018, arXiv:1802.04712):

    .. math::
        s_t = w^\top\big(\tanh(V h_t + b_V) \odot \sigma(U h_t + b_U)\big), \qquad
        a = \mathrm{softmax}_{t: m_t = 1}(s / \tau), \qquad \mathrm{pooled} = \sum_t a_t h_t

    The sigmoid gate lets the scorer switch off the ``tanh`` branch's near-linear regime. ``V`` and ``U`` are
    computed as one ``Linear(H, 2A)`` (one matrix product instead of two), each branch Xavier-initialised. With
    ``init="mean"`` (default) ``w`` starts at zero, so the pooler starts as mean pooling; ``init="xavier"``
    initialises ``w`` Xavier-uniform too, as the paper's code does. The paper's code also gives ``w`` a bias, a
    constant shift under the softmax with an exactly zero gradient: left out.

    Args:
        hidden_size: ``H``.
        attn_size: ``A``, the width of each branch; ``None``: ``H // 2``.
        init: ``"mean"`` or ``"xavier"``, as for :class:`AttentionPooling`.
        temperature: Softmax temperature.
        dropout: Dropout on the attention weights in the weighted sum while training; the weights returned are
            those before it.
        normalizer: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"``.
        cls_share: As for :class:`AttentionPooling`.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "gated_attention"
    config_keys = ("attn_size", "init", "temperature", "dropout", "normalizer", "cls_share")
    removed_parameters = ("score.bias",)

    def __init__(
        self,
        hidden_size: int,
        attn_size: int | None = None,
        init: Init = "mean",
        temperature: float = 1.0,
        dropout: float = 0.0,
        normalizer: Normalizer = "softmax",
        cls_share: float = 0.0,
    ) -> None:
        super().__init__(hidden_size, temperature, dropout, normalizer, cls_share)
        self.attn_size = default_attn_size(hidden_size) if attn_size is None else self._count("attn_size", attn_size)
        self.init = init
        self.proj = nn.Linear(hidden_size, 2 * self.attn_size)  # [V; U]
        self.score = nn.Linear(self.attn_size, 1, bias=False)  # a bias here is a constant shift: no effect
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as ``init`` says (see :func:`init_scorer_`), ``V`` and ``U`` as two separate layers."""
        init_scorer_(self.init, type(self).__name__, self.proj, self.score)
        xavier_parts_(self.proj.weight, 2)  # V and U as two separate (H -> A) layers, as the paper's two branches

    @override
    def scores(self, hidden_states: Tensor) -> Tensor:
        return gated_scores(self.proj, self.score, hidden_states).squeeze(-1)  # (B, T)
