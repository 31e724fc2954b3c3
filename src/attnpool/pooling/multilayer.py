"""Multi-layer poolers: they take several encoder layers stacked as ``(B, L, T, H)`` (``needs_all_layers``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import (
    GEGLUFeedForward,
    Init,
    check_count,
    check_heads,
    check_num_layers,
    check_positive,
    resolve_heads,
    uniform_start_,
    xavier_,
    xavier_parts_,
)
from attnpool.pooling.registry import build_pooler, inner_spec, register_pooler


@register_pooler
class WeightedLayerPooling(Pooler):
    r"""Learned softmax-normalised weights over encoder layers, then any token pooler on the mixture.

    The "weighted layer pooling" of many Kaggle NLP solutions, a scalar mix as in ELMo ("Deep contextualized word
    representations", Peters et al., 2018, arXiv:1802.05365) without the global scale:

    .. math::
        \alpha = \mathrm{softmax}(w) \in \Delta^{L}, \qquad
        \tilde h_t = \sum_{l=1}^{L} \alpha_l\, h^{(l)}_t, \qquad \mathrm{pooled} = \mathrm{pool}(\tilde H)

    The softmax keeps the mixture convex whatever ``w`` becomes (a raw ``w / sum(w)`` can divide by ~0). ``w``
    starts at zero: the mixture starts as the plain average of the layers. The flags (``has_weights``,
    ``permutation_invariant``, ``needs_attentions``, ``has_auxiliary_loss``), the token weights and the regulariser
    are those of the inner pooler.

    Args:
        hidden_size: ``H``.
        num_layers: ``L``, how many layers it mixes (the model feeds the top ``L`` layers of the encoder).
        pooler: The token pooler applied to the mixture: a registered name (``"mean"``, ``"attention"``...), a
            config dict, or a combination such as ``"attention+mean"``.

    Shapes:
        ``(B, L, T, H) -> (B, output_dim of the inner pooler)``; weights those of the inner pooler.
    """

    name = "weighted_layer"
    needs_all_layers = True
    config_keys = ("num_layers", "pooler")

    def __init__(self, hidden_size: int, num_layers: int = 4, pooler: str | Mapping[str, Any] = "mean") -> None:
        super().__init__(hidden_size)
        self.num_layers = check_num_layers("WeightedLayerPooling", num_layers, stuck="its layer_logits")
        inner = build_pooler(pooler, hidden_size)
        if inner.needs_all_layers:
            raise ValueError(f"WeightedLayerPooling: the inner pooler must pool one layer, got {inner.name!r}")
        self.token_pooler = inner
        self.layer_logits = nn.Parameter(torch.zeros(self.num_layers))
        self.has_weights = inner.has_weights
        self.permutation_invariant = inner.permutation_invariant
        self.needs_attentions = inner.needs_attentions
        self.has_auxiliary_loss = inner.has_auxiliary_loss

    @property
    def pooler(self) -> dict[str, Any]:
        """The inner pooler's config (without ``hidden_size``)."""
        return inner_spec(self.token_pooler)

    @override
    def held_poolers(self) -> dict[str, Pooler]:
        """The token pooler, saved by name in :attr:`pooler`."""
        return {"token_pooler": self.token_pooler}

    @property
    def output_dim(self) -> int:
        """The inner pooler's ``output_dim``."""
        return self.token_pooler.output_dim

    def layer_weights(self) -> Tensor:
        """The current mixture weights (the softmax of the layer logits), ``(L,)`` in float32, summing to 1.

        Float64 logits (a float64 pooler) give float64 weights.
        """
        return torch.softmax(self.layer_logits, dim=0, dtype=F.compute_dtype(self.layer_logits.dtype))

    @override
    def auxiliary_loss(self, weights: Tensor | None) -> Tensor | None:
        """The inner pooler's regulariser, of the token weights this pooler returned (the inner pooler's)."""
        return self.token_pooler.auxiliary_loss(weights)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor, attentions: Any = None) -> tuple[Tensor, Tensor | None]:
        alpha = self.layer_weights().to(hidden_states.dtype)  # (L,)
        mixed = torch.einsum("l,blth->bth", alpha, hidden_states)  # (B, T, H)
        if self.token_pooler.needs_attentions:
            return self.token_pooler.pool(mixed, mask, attentions=attentions)
        return self.token_pooler.pool(mixed, mask)


@register_pooler
class MultiLayerAttentionPooling(Pooler):
    r"""Multi-Layers Trainable Pooling: trainable latents cross-attend over the representations of the layers.

    From "Pooling And Attention: What Are Effective Designs For LLM-Based Embedding Models?" (Tang and Yang, 2024,
    arXiv:2409.02727), following its released code (``PerceiverResampler`` in
    ``pooling_layers/MultiLayersTrainablePooling.py``). Each layer ``l`` is summarised by one vector :math:`s_l`
    (the masked mean of its tokens, as the released code does; or its first or last real token), a trainable
    layer embedding :math:`E \in \mathbb{R}^{L \times H}` is added, and ``r`` trainable latents
    :math:`Q \in \mathbb{R}^{r \times H}` attend over the ``L`` layer vectors in one pre-norm block with
    residual connections:

    .. math::
        Z = S + E, \qquad
        X = Q + W_o\,\mathrm{MHA}\big(W_q \mathrm{LN}_q(Q),\ W_k \mathrm{LN}_z(Z),\ W_v \mathrm{LN}_z(Z)\big), \qquad
        \mathrm{pooled} = \frac{1}{r}\sum_{i=1}^{r} \big(X_i + \mathrm{GEGLU}(\mathrm{LN}(X_i))\big)

    As in the released code: the latents are added back after the cross-attention (residual) and layer-normalised
    as queries, the projections have no bias, the MLP is a GEGLU of width ``4H`` (``mlp_ratio``), and the latents
    are drawn from ``N(0, 1)``. The attention is over layers, not tokens, so no token weights are returned; a row
    without real tokens gives zeros. Where it differs, and why:

    * Layers: the released code attends over all hidden layers. The model feeds the top ``num_layers`` (4 by
      default); ``pooling_layers="all"`` in the model feeds every transformer layer, as the released code does.
    * Latents: ``num_queries = 16`` by default; the released code has 768 (with a 4096-wide LLM). Every latent
      goes through the GEGLU, ``12 H^2`` multiply-adds each, so at H = 768 the released code's 768 latents cost
      5.4 G multiply-adds per sequence, half of what BERT-base spends on 128 tokens, against 0.11 G for 16.
    * Heads: ``head_dim = H / num_heads`` by default (the heads split ``H``); the released code has 32 heads of
      width ``H / 2`` (``16 H`` inside: ``64 H^2`` attention parameters, 37.7 M at H = 768, against ``4 H^2``).
      ``head_dim`` sets it.
    * Layer embedding: ``N(0, 0.02^2)`` (the released code's ``nn.Embedding`` draws ``N(0, 1)``, as large as a
      BERT's hidden states, which would drown the layer summaries at the start); linear layers Xavier-uniform.
    * The released code L2-normalises the output (an embedding model's choice); the pooled vector here feeds a
      head and is not normalised.

    ``init="mean"`` zeros ``W_k``: every latent starts with uniform weights over the layers (the average of the
    layer summaries); ``init="xavier"`` (default) keeps the released code's random keys.

    Args:
        hidden_size: ``H``.
        num_layers: ``L``, how many layers it attends over (the model feeds the top ``L`` layers).
        num_queries: ``r``, trainable latents (their outputs are averaged).
        num_heads: Attention heads.
        token: How a layer is summarised: ``"mean"``, ``"last"`` or ``"first"`` real token.
        mlp_ratio: Width of the GEGLU's hidden layer relative to ``H``.
        head_dim: Width of each head; ``None``: ``H / num_heads`` (which must then divide ``H``).
        init: ``"xavier"`` or ``"mean"`` (zero keys: uniform weights over the layers at the start).

    Shapes:
        ``(B, L, T, H) -> (B, H)``; no token weights.
    """

    name = "multilayer_attention"
    needs_all_layers = True
    config_keys = ("num_layers", "num_queries", "num_heads", "token", "mlp_ratio", "head_dim", "init")

    def __init__(
        self,
        hidden_size: int,
        num_layers: int = 4,
        num_queries: int = 16,
        num_heads: int = 4,
        token: Literal["mean", "last", "first"] = "mean",
        mlp_ratio: float = 4.0,
        head_dim: int | None = None,
        init: Init = "xavier",
    ) -> None:
        super().__init__(hidden_size)
        self.num_layers = check_num_layers("MultiLayerAttentionPooling", num_layers,
                                           stuck="its queries and keys (q, the key half of kv, norm_latents)")
        if token not in ("mean", "last", "first"):
            raise ValueError(f"MultiLayerAttentionPooling: token must be 'mean', 'last' or 'first', got {token!r}")
        self.num_queries = check_count("MultiLayerAttentionPooling", "num_queries", num_queries)
        self.num_heads, self.head_dim = resolve_heads("MultiLayerAttentionPooling", hidden_size, num_heads, head_dim)
        self.token = token
        self.mlp_ratio = check_positive("MultiLayerAttentionPooling", "mlp_ratio", mlp_ratio, "mlp_ratio=4.0")
        self.init = init
        self.permutation_invariant = token == "mean"
        inner = self.num_heads * self.head_dim
        self.layer_embedding = nn.Parameter(torch.empty(self.num_layers, hidden_size))
        nn.init.trunc_normal_(self.layer_embedding, std=0.02)
        self.latents = nn.Parameter(torch.randn(self.num_queries, hidden_size))
        self.norm_latents = nn.LayerNorm(hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.q = nn.Linear(hidden_size, inner, bias=False)
        self.kv = nn.Linear(hidden_size, 2 * inner, bias=False)
        self.o = nn.Linear(inner, hidden_size, bias=False)
        xavier_(self.q, self.o)
        xavier_parts_(self.kv.weight, 2)  # W_k and W_v initialised as two separate layers
        uniform_start_(init, "MultiLayerAttentionPooling", self.kv.weight.data[:inner])
        self.norm_mlp = nn.LayerNorm(hidden_size)
        self.mlp = GEGLUFeedForward(hidden_size, self.mlp_ratio)

    def _token_weights(self, mask: Tensor, dtype: torch.dtype) -> Tensor:
        if self.token == "mean":  # unrounded 1/n (float32 for half precision): see weighted_matmul
            return F.mean_weights(mask, F.compute_dtype(dtype))
        index = F.last_token_index(mask) if self.token == "last" else F.first_token_index(mask)
        return F.one_hot_weights(index, mask, dtype)

    def attend(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The latents after the cross-attention and their weights over the layers.

        Returns:
            ``X (B, r, H)`` (before the MLP) and weights ``(B, heads, r, L)`` in float32.
        """
        token_weights = self._token_weights(mask, hidden_states.dtype)  # (B, T)
        summaries = F.weighted_matmul(token_weights[:, None, None, :], hidden_states).squeeze(2)  # (B, L, H)
        layers = self.norm(summaries + self.layer_embedding.to(summaries.dtype))  # (B, L, H)
        all_layers = torch.ones(layers.shape[:2], dtype=torch.bool, device=layers.device)  # (B, L)
        latents = self.latents.to(layers.dtype).unsqueeze(0)  # (1, r, H)
        keys, values = self.kv(layers).chunk(2, dim=-1)  # (B, L, h*d) each
        out, weights = F.masked_attention(self.q(self.norm_latents(latents)), keys, values, all_layers,
                                          self.num_heads)  # (B, r, h*d), (B, h, r, L)
        return latents + self.o(out), weights

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        x, _ = self.attend(hidden_states, mask)  # (B, r, H)
        x = x + self.mlp(self.norm_mlp(x))
        return F.zero_empty_rows(x.mean(dim=1), mask), None


@register_pooler
class MaxPoolBERTPooling(Pooler):
    r"""MaxPoolBERT: the ``[CLS]`` vector refined across layers by a max, optionally with one attention layer.

    From "MaxPoolBERT: Enhancing BERT Classification via Layer- and Token-Wise Aggregation" (2025,
    arXiv:2505.15696). With :math:`c^{(l)}` the first real token (``[CLS]``) of layer ``l`` among the ``k`` layers
    received:

    * ``mode="max"``: :math:`\mathrm{pooled} = \max_l c^{(l)}` elementwise, no parameters;
    * ``mode="attention"``: the final layer's ``[CLS]`` attends over that layer's tokens with multi-head
      attention, :math:`\mathrm{pooled} = c^{(k)} + W_o\,\mathrm{MHA}(W_q c^{(k)}, W_k X^{(k)}, W_v X^{(k)})`;
    * ``mode="max_attention"``: the same attention over :math:`\max_l X^{(l)}`, the sequence max-pooled across the
      ``k`` layers token by token (its ``[CLS]`` as the query).

    The residual connection around the attention is this implementation's choice; ``W_k`` has no bias (a per-head
    shift of the scores, which the softmax ignores). For ``"max"`` the token
    weights are one-hot on ``[CLS]``, else the attention weights. The ``[CLS]`` is the first *real* token, so
    left padding works; a row without real tokens gives zeros.

    Warning:
        Not permutation invariant: the output depends on which token comes first.

    Args:
        hidden_size: ``H``.
        num_layers: ``k``, the top layers it takes (the model feeds the top ``k`` layers of the encoder).
        mode: ``"max"``, ``"attention"`` or ``"max_attention"``.
        num_heads: Heads of the attention modes; must divide ``H``.

    Shapes:
        ``(B, k, T, H) -> (B, H)``; weights ``(B, T)``, ``(B, heads, T)`` for the attention modes with several heads.
    """

    name = "maxpoolbert"
    needs_all_layers = True
    permutation_invariant = False
    has_weights = True
    config_keys = ("num_layers", "mode", "num_heads")
    removed_parameters = ("k.bias",)
    MODES = ("max", "attention", "max_attention")

    def __init__(
        self,
        hidden_size: int,
        num_layers: int = 3,
        mode: Literal["max", "attention", "max_attention"] = "max",
        num_heads: int = 4,
    ) -> None:
        super().__init__(hidden_size)
        self.num_layers = check_num_layers("MaxPoolBERTPooling", num_layers)
        if mode not in self.MODES:
            choices = ", ".join(map(repr, self.MODES))
            raise ValueError(f"MaxPoolBERTPooling: mode must be one of {choices}, got {mode!r}")
        self.mode = mode
        self.num_heads = check_count("MaxPoolBERTPooling", "num_heads", num_heads)
        if mode != "max":
            check_heads("MaxPoolBERTPooling", hidden_size, num_heads)
            self.q, self.k = nn.Linear(hidden_size, hidden_size), nn.Linear(hidden_size, hidden_size, bias=False)
            self.v, self.o = nn.Linear(hidden_size, hidden_size), nn.Linear(hidden_size, hidden_size)
            xavier_(self.q, self.k, self.v, self.o)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        batch, layers, _, size = hidden_states.shape
        first = F.first_token_index(mask)  # (B,)
        if self.mode == "max":
            index = first.long().view(batch, 1, 1, 1).expand(batch, layers, 1, size)
            cls = hidden_states.gather(2, index).squeeze(2)  # (B, k, H): [CLS] of every layer
            weights = F.one_hot_weights(first, mask, hidden_states.dtype)  # (B, T)
            return F.zero_empty_rows(cls.amax(dim=1), mask), weights
        seq = hidden_states[:, -1] if self.mode == "attention" else hidden_states.amax(dim=1)  # (B, T, H)
        cls = F.weighted_sum(F.one_hot_weights(first, mask, seq.dtype), seq)  # (B, H)
        # The query in float32, W_k folded into it and W_v applied after the weighted sum: in fp16 the projections
        # of tokens of ~3e4 overflow (their values' inf times a weight of exactly 0 was NaN).
        query = F.float_linear(self.q, cls).unsqueeze(1)  # (B, 1, H)
        scores = F.folded_key_scores(query, self.k.weight, seq, self.num_heads)  # (B, h, 1, T)
        out, weights = F.attend_projected(scores, seq, self.v, mask, self.num_heads)  # (B, 1, H), (B, h, 1, T)
        # W_o in float32 too: the attended values of such a token may exceed fp16 where the pooled vector does not.
        pooled = (cls + F.float_linear(self.o, out.squeeze(1))).to(seq.dtype)  # (B, H)
        return F.zero_empty_rows(pooled, mask), F.merge_heads(weights, hidden_states.dtype)
