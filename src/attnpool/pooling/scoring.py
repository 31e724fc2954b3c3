"""Token scorers shared by the attention poolers: ``Linear(H, A) -> act -> Linear(A, K)`` and its initialisation."""

from __future__ import annotations

import torch.nn.functional as F_nn
from torch import Tensor, nn

from attnpool.pooling.modules import check_init, xavier_


def default_attn_size(hidden_size: int) -> int:
    """Width of the scoring MLP when none is given: half the encoder's width.

    512 at ``H = 1024`` (the PPPM recipe's value for DeBERTa-v3-large), 384 at 768, 192 at 384 (MiniLM): the
    scorer grows with the encoder instead of being as wide as a large model's on a small one.
    """
    return max(1, int(hidden_size) // 2)


def init_scorer_(init: str, owner: str, hidden: nn.Linear, score: nn.Linear) -> None:
    """Initialise a ``Linear(H, A) -> act -> Linear(A, K)`` token scorer.

    ``"xavier"``: both layers Xavier-uniform (the PPPM recipe's head). ``"mean"``: the first layer Xavier-uniform,
    the scoring layer zero, so that every token starts with the same score and the pooler computes exactly the
    masked mean at step 0; the first layer still gets a gradient from the second step on, and training moves the
    weights away from uniform only as far as the loss pays for it. Biases (the first layer's; the scoring layer
    has none in attnpool's poolers, a softmax ignores it) start at zero either way.

    Raises:
        ValueError: An unknown ``init``.
    """
    check_init(init, owner)
    xavier_(hidden, score)
    if init == "mean":
        nn.init.zeros_(score.weight)


def tanh_projection(proj: nn.Linear, hidden_states: Tensor) -> Tensor:
    """``tanh(proj(h))`` with the tanh in place on the 2-D matmul output.

    On a 3-D input ``nn.Linear`` returns a view of a 2-D result, and an in-place op on that view makes autograd
    rebuild it in the backward (two extra ``(B*T, A)`` buffers and copies). Flattening first avoids that; the
    matmul's backward does not need its output, so the in-place tanh is free.
    """
    batch, seq_len, size = hidden_states.shape
    flat = F_nn.linear(hidden_states.reshape(batch * seq_len, size), proj.weight, proj.bias).tanh_()
    return flat.view(batch, seq_len, proj.out_features)  # (B, T, A); -1 is ambiguous for an empty batch


def gated_scores(proj: nn.Linear, score: nn.Linear, hidden_states: Tensor) -> Tensor:
    r"""Ilse et al.'s gated token scores :math:`w^\top(\tanh(V h_t) \odot \sigma(U h_t))`, one per row of ``w``.

    ``proj`` is ``[V; U]`` as one ``Linear(H, 2A)``, ``score`` the ``Linear(A, K)`` of ``K`` scoring rows.

    Shapes:
        ``(B, T, H) -> (B, T, K)``.
    """
    tanh_branch, gate = proj(hidden_states).chunk(2, dim=-1)  # (B, T, A) each
    return score(tanh_branch.tanh() * gate.sigmoid())  # (B, T, K)
