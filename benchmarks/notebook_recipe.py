"""The notebook attention-pooling head, transcribed as is: the reference the benchmarks measure against.

Softmax over all positions, then, when a mask is given, the mask multiplied in and the weights renormalised by
``sum + 1e-8``: the seed recipe's ``AttentionPooling``. The public PPPM baseline notebook itself gives its head no
mask (the softmax spans the padding): ``references.py`` (the quality benchmarks' notebook) calls it so, while
``pppm_throughput.py``'s ``NotebookModel`` (also ``pppm_gpu.py``'s) and ``pooling_speed.py`` pass the mask, as the
seed recipe does (the two cost the same to within a multiply and a sum over the tokens).
"""

from __future__ import annotations

from torch import Tensor, nn


class NotebookAttentionHead(nn.Module):
    """The usual notebook attention head (``AttentionPooling`` of the seed recipe)."""

    def __init__(self, hidden_size: int, attn_size: int = 512) -> None:
        super().__init__()
        self.attention = nn.Sequential(
            nn.Linear(hidden_size, attn_size),
            nn.Tanh(),
            nn.Linear(attn_size, 1),
            nn.Softmax(dim=1),
        )

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, T, H), (B, T) -> (B, H)``."""
        weights = self.attention(hidden_states)  # (B, T, 1)
        if attention_mask is not None:
            weights = weights * attention_mask.unsqueeze(-1).to(weights.dtype)
            weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-8)
        return (weights * hidden_states).sum(dim=1)
