"""Batches and variants shared by the pooling tests."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from attnpool.pooling import available_poolers
from attnpool.pooling.functional import masked_softmax

HIDDEN = 16
ATTN_LAYERS, ATTN_HEADS = 2, 2  # shape of the synthetic encoder attention maps given to needs_attentions poolers

# Every registered pooler with its defaults, plus option combinations that take other code paths.
EXTRA_VARIANTS = [
    ("multihead_attention", {"num_heads": 1}),
    ("multihead_attention", {"num_heads": 3, "combine": "project"}),
    ("multihead_attention", {"num_heads": 2, "combine": "mean"}),
    ("attention", {"attn_size": 8, "temperature": 0.5}),
    ("gem", {"learnable_p": False, "p": 2.0}),
    ("attention", {"normalizer": "sparsemax", "temperature": 0.3}),
    ("multihead_attention", {"num_heads": 2, "normalizer": "entmax15"}),
    ("gated_attention", {"normalizer": "entmax15"}),
    ("ggem", {"num_groups": 5}),
    ("pma", {"num_seeds": 2, "num_heads": 2, "layer_norm": True}),
    ("class_attention", {"num_heads": 2}),
    ("simpool", {"gamma": 2.0}),
    ("simpool", {"num_heads": 2}),
    ("adaptive", {"query": "first"}),
    ("adaptive", {"query": "learned", "num_heads": 2}),
    ("acmil", {"combine": "concat", "top_k": 3}),
    ("weighted_layer", {"num_layers": 3, "pooler": "attention"}),
    ("multilayer_attention", {"token": "last", "num_queries": 2}),
    ("maxpoolbert", {"mode": "attention"}),
    ("maxpoolbert", {"mode": "max_attention", "num_heads": 1}),
    ("ditto", {"layer": -1, "head": 1}),
    ("combined", {"poolers": ["cls", "stats"], "combine": "project"}),
    ("combined", {"poolers": ["max", "weighted_layer", "ditto"]}),
    ("attention", {"cls_share": 0.5}),
    ("multihead_attention", {"num_heads": 2, "cls_share": 0.3}),
    ("gated_attention", {"cls_share": 0.5}),
    ("attention", {"normalizer": "sparsemax", "cls_share": 0.3}),
    ("multihead_attention", {"num_heads": 2, "normalizer": "entmax15", "cls_share": 0.3}),
]
VARIANTS = [(name, {}) for name in available_poolers()] + EXTRA_VARIANTS

# torch.compile and ONNX export (one to two seconds a variant) run for every registered pooler, the original option
# variants, and the extra variants whose exported graph holds operations that no default does (the sort-based
# sparse normalizers, SimPool's power normalisation, a combination fed stacked layers and attention maps). The
# other extras change sizes, flags or the order of operations already exported.
GRAPH_EXTRAS = [
    *EXTRA_VARIANTS[:5],
    ("attention", {"normalizer": "sparsemax", "temperature": 0.3}),
    ("multihead_attention", {"num_heads": 2, "normalizer": "entmax15"}),
    ("simpool", {"gamma": 2.0}),
    ("combined", {"poolers": ["max", "weighted_layer", "ditto"]}),
    ("attention", {"cls_share": 0.5}),
]
assert all(extra in EXTRA_VARIANTS for extra in GRAPH_EXTRAS)
GRAPH_VARIANTS = [(name, {}) for name in available_poolers()] + GRAPH_EXTRAS


def variant_ids(variants):
    return [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in variants]


VARIANT_IDS = variant_ids(VARIANTS)


def ragged_batch(lengths, hidden=HIDDEN, seq_len=None, seed=0, side="right", pad_value=0.0, layers=None):
    """Hidden states of sequences with the given lengths, padded to seq_len on the given side.

    Returns (hidden_states, mask, tokens) where tokens[i] is the (length_i, H) tensor of real tokens. With
    ``layers=L`` (multi-layer poolers) hidden_states is (B, L, T, H) and tokens[i] is (L, length_i, H).
    """
    gen = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(lengths)
    lead = () if layers is None else (layers,)
    tokens = [torch.randn(*lead, n, hidden, generator=gen) for n in lengths]
    return pad(tokens, seq_len, side, pad_value, seed), torch.stack(
        [_mask_row(n, seq_len, side) for n in lengths]
    ), tokens


def batch_for(pooler, lengths, **kwargs):
    """ragged_batch with the layer axis that the pooler expects."""
    layers = pooler.num_layers if pooler.needs_all_layers else None
    return ragged_batch(lengths, layers=layers, **kwargs)


def pad(tokens, seq_len, side="right", pad_value=0.0, seed=0):
    """Pad each (..., n, H) token tensor to (..., seq_len, H) with random values scaled by pad_value."""
    gen = torch.Generator().manual_seed(seed + 1)
    rows = []
    for t in tokens:
        filler = torch.randn(*t.shape[:-2], seq_len - t.shape[-2], t.shape[-1], generator=gen) * pad_value
        rows.append(torch.cat([t, filler], dim=-2) if side == "right" else torch.cat([filler, t], dim=-2))
    return torch.stack(rows)


def _mask_row(n, seq_len, side):
    row = torch.zeros(seq_len, dtype=torch.long)
    if side == "right":
        row[:n] = 1
    elif n:
        row[-n:] = 1
    return row


def attention_maps(hidden, mask=None, layers=ATTN_LAYERS, heads=ATTN_HEADS):
    """Valid encoder-like self-attention maps (L, B, heads, T, T) computed from the tokens themselves.

    Each map is a masked softmax of (x W)(x W)^T / sqrt(H) over the real keys, with fixed W, so the maps of the
    real tokens do not depend on padding, follow a permutation of the tokens, and agree between a sample alone
    and inside a ragged batch, as an encoder's would. Multi-layer inputs use their top layer.
    """
    x = (hidden[:, -1] if hidden.dim() == 4 else hidden).float()
    batch, seq_len, size = x.shape
    mask = torch.ones(batch, seq_len, dtype=torch.bool) if mask is None else mask.bool()
    gen = torch.Generator().manual_seed(1234)
    proj = torch.randn(layers, heads, size, size, generator=gen) / size**0.5
    keys = torch.einsum("bth,lkhd->lbktd", x, proj)  # (L, B, heads, T, H)
    scores = keys @ keys.transpose(-1, -2) / size**0.5  # (L, B, heads, T, T)
    return masked_softmax(scores, mask[None, :, None, None, :]).to(hidden.dtype)


def call(pooler, hidden, mask=None, **kwargs):
    """pooler(hidden, mask, **kwargs), with attention maps of these tokens for needs_attentions poolers."""
    if pooler.needs_attentions:
        kwargs.setdefault("attentions", attention_maps(hidden, mask))
    return pooler(hidden, mask, **kwargs)


def perturb_parameters(module, seed=0, scale=0.1):
    """Move every parameter away from its initial value (zero biases would hide bugs)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return module


def assert_xavier(layer: nn.Linear | Tensor, fan_out: int | None = None) -> None:
    """Weights uniform on the whole Xavier range of ``(fan_out, fan_in)`` (default: the weight's own), zero biases."""
    weight = layer.weight if isinstance(layer, nn.Linear) else layer
    rows, fan_in = weight.shape
    bound = (6.0 / (fan_in + (fan_out or rows))) ** 0.5
    assert weight.abs().max() <= bound
    assert weight.abs().max() > 0.9 * bound  # uniform on the whole Xavier range, not a smaller init
    bias = getattr(layer, "bias", None)
    assert bias is None or torch.equal(bias, torch.zeros_like(bias))

def overflowing_value_outputs(pooler: nn.Module, value: nn.Linear, token: Tensor, hidden: Tensor, mask: Tensor,
                              precision: str) -> tuple[Tensor, Tensor]:
    """``(float32 output, fp16 output)`` of ``pooler``, after checking that ``value(token)`` overflows in fp16.

    ``precision``: ``"fp16"`` runs a half copy of the pooler on half inputs, ``"autocast"`` the float32 pooler under
    fp16 autocast.
    """
    with torch.no_grad():
        projected = nn.functional.linear(token.half(), value.weight.half(), value.bias.half())
        assert torch.isinf(projected).any()  # the case: the outlier's fp16 values overflow
        expected = pooler(hidden, mask)
        if precision == "fp16":
            return expected, copy.deepcopy(pooler).half()(hidden.half(), mask)
        with torch.autocast("cpu", dtype=torch.float16):
            return expected, pooler(hidden.half(), mask)
