"""Poolers built on trainable latent vectors: NV-Embed latent attention, Set Transformer PMA, class attention."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import (
    FeedForward,
    Init,
    check_count,
    check_heads,
    check_positive,
    check_switch,
    resolve_heads,
    uniform_start_,
    xavier_,
)
from attnpool.pooling.registry import register_pooler


@register_pooler
class LatentAttentionPooling(Pooler):
    r"""NV-Embed's latent attention layer: every token attends to a trainable latent array, MLP, masked mean.

    From "NV-Embed: Improved Techniques for Training LLMs as Generalist Embedding Models" (Lee et al., 2024,
    arXiv:2405.17428). The tokens are the queries and ``R`` trainable latents the keys and values, in a pre-norm
    block with residual connections as in the released code:

    .. math::
        o_t = h_t + W_o\,\mathrm{MHA}\big(W_q \mathrm{LN}(h_t),\ W_k \mathrm{LN}(L),\ W_v \mathrm{LN}(L)\big), \qquad
        z_t = o_t + \mathrm{MLP}(\mathrm{LN}(o_t)), \qquad
        \mathrm{pooled} = \frac{1}{n} \sum_{t: m_t = 1} z_t

    Each token is transformed on its own (the latents, not the other tokens, are attended to), so no attention
    mask is needed before the final masked mean; padded positions are zeroed before it. As in the released code
    the projections have no bias (``W_o`` included). Latents are drawn from ``N(0, 1)`` as in the released code
    (they are layer-normalised before use), linear layers Xavier-initialised. The attention scores are taken after
    the layer norms, so they stay small in half precision; the softmax runs in float32. The returned token
    weights are the uniform ``1/n`` of the final mean.

    Two differences from the released code, both options:

    * Head width: the released code gives every head the full width (``head_dim = H``, so ``8H`` inside with 8
      heads: ``32 H^2`` attention parameters, 18.9 M at H = 768). Here the heads split ``H`` by default
      (``head_dim = H / heads``, ``4 H^2``, 2.4 M), which keeps the pooler's cost near one transformer layer's;
      ``head_dim=hidden_size`` gives the released code's layer exactly (a test checks it against a
      transcription).
    * The MLP is ``Linear -> GELU -> Linear`` as the paper describes; the released code uses a GEGLU.

    Args:
        hidden_size: ``H`` (the latents have the same width).
        num_latents: ``R`` (512 in the paper).
        num_heads: Attention heads (8 in the paper).
        mlp_ratio: Width of the MLP's hidden layer relative to ``H``.
        head_dim: Width of each head; ``None``: ``H / num_heads`` (which must then divide ``H``). The released
            code's is ``H``.

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``.
    """

    name = "latent_attention"
    has_weights = True
    config_keys = ("num_latents", "num_heads", "mlp_ratio", "head_dim")

    def __init__(
        self,
        hidden_size: int,
        num_latents: int = 512,
        num_heads: int = 8,
        mlp_ratio: float = 4.0,
        head_dim: int | None = None,
    ) -> None:
        super().__init__(hidden_size)
        self.num_latents = check_count("LatentAttentionPooling", "num_latents", num_latents)
        self.num_heads, self.head_dim = resolve_heads("LatentAttentionPooling", hidden_size, num_heads, head_dim)
        self.mlp_ratio = check_positive("LatentAttentionPooling", "mlp_ratio", mlp_ratio, "mlp_ratio=4.0")
        inner = self.num_heads * self.head_dim
        self.latents = nn.Parameter(torch.randn(self.num_latents, hidden_size))
        self.norm = nn.LayerNorm(hidden_size)
        self.norm_latents = nn.LayerNorm(hidden_size)
        self.to_q = nn.Linear(hidden_size, inner, bias=False)
        self.to_kv = nn.Linear(hidden_size, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, hidden_size, bias=False)
        self.norm_mlp = nn.LayerNorm(hidden_size)
        self.mlp = FeedForward(hidden_size, self.mlp_ratio)
        xavier_(self.to_q, self.to_kv, self.to_out)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        batch, seq_len, _ = hidden_states.shape
        heads, head_dim = self.num_heads, self.head_dim
        q = self.to_q(self.norm(hidden_states)) * head_dim**-0.5  # (B, T, h*d)
        k, v = self.to_kv(self.norm_latents(self.latents)).chunk(2, dim=-1)  # (R, h*d) each
        q = q.view(batch, seq_len, heads, head_dim).transpose(1, 2)  # (B, h, T, d)
        k = k.reshape(-1, heads, head_dim).transpose(0, 1)  # (h, R, d)
        v = v.reshape(-1, heads, head_dim).transpose(0, 1)  # (h, R, d)
        dtype = F.compute_dtype(hidden_states.dtype)
        attn = torch.matmul(q, k.transpose(-1, -2)).softmax(dim=-1, dtype=dtype)  # (B, h, T, R)
        out = torch.matmul(attn.to(v.dtype), v).transpose(1, 2)  # (B, T, h, d)
        x = hidden_states + self.to_out(out.reshape(batch, seq_len, heads * head_dim))  # not -1: B or T may be 0
        x = x + self.mlp(self.norm_mlp(x))  # (B, T, H)
        weights = F.mean_weights(mask, dtype)  # (B, T)
        pooled = F.weighted_sum(weights, F.zero_padding(x, mask))  # (B, H)
        return pooled, weights.to(hidden_states.dtype)


@register_pooler
class PMAPooling(Pooler):
    r"""Pooling by Multihead Attention (PMA) from the Set Transformer, with padding masked.

    From "Set Transformer: A Framework for Attention-based Permutation-Invariant Neural Networks" (Lee et al.,
    2019, arXiv:1810.00825). ``k`` trainable seed vectors :math:`S` attend over the tokens in a multihead
    attention block (MAB); as in the reference code the residual adds the projected seeds:

    .. math::
        O = W_q S + \mathrm{MHA}(W_q S, W_k X, W_v X), \qquad
        \mathrm{PMA}_k(X) = \mathrm{LN}_1\big(O' + \mathrm{ReLU}(W_o O')\big), \quad O' = \mathrm{LN}_0(O)

    (the layer norms only with ``layer_norm=True``; the reference code's default is without). The reference code
    has no mask; here padded tokens get exactly zero attention, and the scores use the usual
    :math:`1/\sqrt{d_\text{head}}` scaling (the reference divides by :math:`\sqrt{H}`). ``W_k`` has no bias: it
    would add :math:`q_h^\top b_k` to every score of a head, a shift the softmax ignores (an exactly zero
    gradient). The ``k`` outputs are concatenated. Seeds and linear layers are Xavier-initialised (the reference's
    seeds are; ``init="xavier"``, default); ``init="mean"`` zeros ``W_k`` instead, so every seed starts with
    uniform weights over the real tokens. With one seed the output is invariant to the order of the tokens, like
    every PMA.

    Args:
        hidden_size: ``H``.
        num_seeds: ``k``.
        num_heads: Attention heads; must divide ``H``.
        layer_norm: Use the two layer norms of the MAB.
        init: ``"xavier"`` or ``"mean"`` (zero keys: uniform weights at the start).

    Shapes:
        ``(B, T, H) -> (B, k*H)``; weights ``(B, heads*k, T)``, ``(B, T)`` for one head and one seed.
    """

    name = "pma"
    has_weights = True
    config_keys = ("num_seeds", "num_heads", "layer_norm", "init")
    removed_parameters = ("fc_k.bias",)

    def __init__(
        self, hidden_size: int, num_seeds: int = 1, num_heads: int = 4, layer_norm: bool = False, init: Init = "xavier"
    ) -> None:
        super().__init__(hidden_size)
        self.num_seeds = check_count("PMAPooling", "num_seeds", num_seeds)
        self.num_heads = check_heads("PMAPooling", hidden_size, num_heads)
        self.layer_norm = check_switch("PMAPooling", "layer_norm", layer_norm)
        self.seeds = nn.Parameter(torch.empty(1, self.num_seeds, hidden_size))
        nn.init.xavier_uniform_(self.seeds)
        self.fc_q = nn.Linear(hidden_size, hidden_size)
        self.fc_k = nn.Linear(hidden_size, hidden_size, bias=False)  # a key bias only shifts a head's scores
        self.fc_v = nn.Linear(hidden_size, hidden_size)
        self.fc_o = nn.Linear(hidden_size, hidden_size)
        xavier_(self.fc_q, self.fc_k, self.fc_v, self.fc_o)
        self.init = init
        uniform_start_(init, "PMAPooling", self.fc_k)
        self.ln0 = nn.LayerNorm(hidden_size) if self.layer_norm else nn.Identity()
        self.ln1 = nn.LayerNorm(hidden_size) if self.layer_norm else nn.Identity()

    @property
    def output_dim(self) -> int:
        """``num_seeds * hidden_size``."""
        return self.num_seeds * self.hidden_size

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        query = self.fc_q(self.seeds.to(hidden_states.dtype))  # (1, k, H)
        # W_k folded into the seeds, in float32: fp16 keys of tokens of ~3e4 overflow (NaN weights).
        scores = F.folded_key_scores(query, self.fc_k.weight, hidden_states, self.num_heads)  # (B, h, k, T)
        # W_v applied after each head's weighted sum, in float32: fp16 values of such tokens overflow, and their
        # weight of exactly 0 times inf was NaN. out (B, k, H), weights (B, h, k, T).
        out, weights = F.attend_projected(scores, hidden_states, self.fc_v, mask, self.num_heads)
        out = out.to(hidden_states.dtype)
        o = self.ln0(query + out)
        o = self.ln1(o + torch.relu(self.fc_o(o)))  # (B, k, H)
        return F.zero_empty_rows(o.flatten(1), mask), F.merge_heads(weights, hidden_states.dtype)


@register_pooler
class ClassAttentionPooling(Pooler):
    r"""A learned class token attending over the tokens in one pre-norm transformer block.

    The attention-based aggregation of "Augmenting Convolutional networks with attention-based aggregation"
    (Touvron et al., 2021, arXiv:2112.13692), the class-attention of CaiT, as a pooler:

    .. math::
        c' = c + W_p\,\mathrm{MHA}\big(W_q \mathrm{LN}_1(c),\ W_k \mathrm{LN}_1(X),\ W_v \mathrm{LN}_1(X)\big), \qquad
        c'' = c' + \mathrm{MLP}(\mathrm{LN}_2(c')), \qquad \mathrm{pooled} = \mathrm{LN}(c'')

    Only the class token is updated, so the cost is linear in ``T``. Unlike the paper, the class token is the
    query only and not also a key, so the weights are a distribution over the real tokens and a row without
    tokens pools to zeros; layer-scale is left out (it matters for deep stacks, not one block); ``W_k`` has no
    bias (a per-head shift of the scores, which the softmax ignores). The class token is drawn from
    ``N(0, 0.02^2)`` as in the paper, linear layers are Xavier-initialised (``init="xavier"``, default);
    ``init="mean"`` zeros ``W_k``, so the class token starts with uniform weights over the real tokens.

    Args:
        hidden_size: ``H``.
        num_heads: Attention heads (1 in the paper's aggregation block); must divide ``H``.
        mlp_ratio: Width of the MLP's hidden layer relative to ``H``.
        init: ``"xavier"`` or ``"mean"`` (zero keys: uniform weights at the start).

    Shapes:
        ``(B, T, H) -> (B, H)``; weights ``(B, T)``, ``(B, heads, T)`` with several heads.
    """

    name = "class_attention"
    has_weights = True
    config_keys = ("num_heads", "mlp_ratio", "init")
    removed_parameters = ("k.bias",)

    def __init__(self, hidden_size: int, num_heads: int = 1, mlp_ratio: float = 4.0, init: Init = "xavier") -> None:
        super().__init__(hidden_size)
        self.num_heads = check_heads("ClassAttentionPooling", hidden_size, num_heads)
        self.mlp_ratio = check_positive("ClassAttentionPooling", "mlp_ratio", mlp_ratio, "mlp_ratio=4.0")
        self.cls_token = nn.Parameter(torch.empty(1, 1, hidden_size))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.norm1 = nn.LayerNorm(hidden_size)
        self.q = nn.Linear(hidden_size, hidden_size)
        self.k = nn.Linear(hidden_size, hidden_size, bias=False)  # a key bias only shifts a head's scores
        self.v = nn.Linear(hidden_size, hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        xavier_(self.q, self.k, self.v, self.proj)
        self.init = init
        uniform_start_(init, "ClassAttentionPooling", self.k)
        self.norm2 = nn.LayerNorm(hidden_size)
        self.mlp = FeedForward(hidden_size, self.mlp_ratio)
        self.norm = nn.LayerNorm(hidden_size)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        cls = self.cls_token.to(hidden_states.dtype)  # (1, 1, H)
        tokens = self.norm1(hidden_states)  # (B, T, H)
        out, weights = F.masked_attention(
            self.q(self.norm1(cls)), self.k(tokens), self.v(tokens), mask, self.num_heads
        )  # (B, 1, H), (B, h, 1, T)
        cls = cls + self.proj(out)  # (B, 1, H)
        cls = cls + self.mlp(self.norm2(cls))
        pooled = self.norm(cls).squeeze(1)  # (B, H)
        return F.zero_empty_rows(pooled, mask), F.merge_heads(weights, hidden_states.dtype)
