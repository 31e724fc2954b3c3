"""The public notebook's attention-pooling head, transcribed as is: the reference both benchmarks measure against.

Softmax over all positions, then the mask multiplied in and the weights renormalised by ``sum + 1e-8``.
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
