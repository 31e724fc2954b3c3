"""Batches and variants shared by the pooling tests."""

from __future__ import annotations

import torch

from attnpool.pooling import available_poolers

HIDDEN = 16

# Every registered pooler with its defaults, plus option combinations that take other code paths.
EXTRA_VARIANTS = [
    ("multihead_attention", {"num_heads": 1}),
    ("multihead_attention", {"num_heads": 3, "combine": "project"}),
    ("multihead_attention", {"num_heads": 2, "combine": "mean"}),
    ("attention", {"attn_size": 8, "temperature": 0.5}),
    ("gem", {"learnable_p": False, "p": 2.0}),
]
VARIANTS = [(name, {}) for name in available_poolers()] + EXTRA_VARIANTS
VARIANT_IDS = [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in VARIANTS]



def ragged_batch(lengths, hidden=HIDDEN, seq_len=None, seed=0, side="right", pad_value=0.0):
    """Hidden states of sequences with the given lengths, padded to seq_len on the given side.

    Returns (hidden_states, mask, tokens) where tokens[i] is the (length_i, H) tensor of real tokens.
    """
    gen = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(lengths)
    tokens = [torch.randn(n, hidden, generator=gen) for n in lengths]
    return pad(tokens, seq_len, side, pad_value, seed), torch.stack(
        [_mask_row(n, seq_len, side) for n in lengths]
    ), tokens


def pad(tokens, seq_len, side="right", pad_value=0.0, seed=0):
    gen = torch.Generator().manual_seed(seed + 1)
    rows = []
    for t in tokens:
        filler = torch.randn(seq_len - t.shape[0], t.shape[1], generator=gen) * pad_value
        rows.append(torch.cat([t, filler]) if side == "right" else torch.cat([filler, t]))
    return torch.stack(rows)


def _mask_row(n, seq_len, side):
    row = torch.zeros(seq_len, dtype=torch.long)
    if side == "right":
        row[:n] = 1
    elif n:
        row[-n:] = 1
    return row


def perturb_parameters(module, seed=0, scale=0.1):
    """Move every parameter away from its initial value (zero biases would hide bugs)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return module
