"""An optional bidirectional LSTM or GRU between the encoder and the pooler, exact under any padding.

The 1st-place solution of the Kaggle *U.S. Patent Phrase to Phrase Matching* competition (2022) put a BiLSTM
over the encoder's token vectors before its attention pooler. :class:`RecurrentLayer` is that layer: each
direction has ``ceil(H / 2)`` units, so the two together give the pooler ``H`` features again (for an odd ``H`` a
``Linear`` brings ``H + 1`` back to ``H``).

Padding: the real tokens of each row are gathered to its left, in order, run as a packed sequence
(``pack_padded_sequence``) and put back where they came from. A row's outputs are therefore the same with right
padding, left padding (decoder-only encoders) or any number of padded positions, and whatever its batch mates are;
padded positions get zeros. Under autocast the recurrent layer itself runs in its weights' dtype (float32 in
mixed-precision training), for the same reason.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RECURRENT_CELLS = ("lstm", "gru")
_CELL_CLASSES = {"lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentLayer(nn.Module):
    """A bidirectional LSTM or GRU over the real tokens of each row, giving back ``hidden_size`` features.

    From the PPPM 1st-place write-up (Kaggle, 2022): "a BiLSTM before an attention pooler".

    Args:
        cell: ``"lstm"`` or ``"gru"``.
        hidden_size: ``H``, the width of the token vectors in and out.
        num_layers: Stacked recurrent layers.

    Shapes:
        - hidden_states: ``(B, T, H)``
        - attention_mask: ``(B, T)``, 1/True for a real token; real tokens need not be contiguous
        - output: ``(B, T, H)``, zeros at padded positions
    """

    def __init__(self, cell: str, hidden_size: int, num_layers: int = 1) -> None:
        super().__init__()
        if cell not in _CELL_CLASSES:
            raise ValueError(f"recurrent cell must be one of {', '.join(RECURRENT_CELLS)}, got {cell!r}")
        if hidden_size < 2:
            raise ValueError(f"a bidirectional recurrent layer needs hidden_size >= 2, got {hidden_size}")
        self.cell = cell
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        per_direction = math.ceil(hidden_size / 2)
        self.rnn = _CELL_CLASSES[cell](hidden_size, per_direction, num_layers=num_layers, batch_first=True,
                                       bidirectional=True)
        # Only an odd H needs one: 2 * ceil(H / 2) = H + 1 features back to H.
        self.proj = nn.Linear(2 * per_direction, hidden_size) if 2 * per_direction != hidden_size else None

    def reset_parameters(self) -> None:
        """PyTorch's own initialisation of the recurrent weights (and of the projection, if any)."""
        self.rnn.reset_parameters()
        if self.proj is not None:
            self.proj.reset_parameters()

    def extra_repr(self) -> str:
        """``cell='lstm', hidden_size=H, num_layers=n``."""
        return f"cell={self.cell!r}, hidden_size={self.hidden_size}, num_layers={self.num_layers}"

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> Tensor:
        """Run the recurrent layer over each row's real tokens; padded positions come out as zeros."""
        if hidden_states.dim() != 3 or attention_mask.shape != hidden_states.shape[:2]:
            raise ValueError(
                f"RecurrentLayer takes hidden_states (B, T, H) and attention_mask (B, T), got "
                f"{tuple(hidden_states.shape)} and {tuple(attention_mask.shape)}"
            )
        mask = attention_mask.bool()
        # Real tokens first, in their order (a stable sort): left padding becomes right padding.
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # (B, T)
        index = order.unsqueeze(-1).expand_as(hidden_states)  # (B, T, H)
        # Padded vectors are zeroed, so that NaN or inf there cannot reach an empty row or the gradients.
        clean = torch.where(mask.unsqueeze(-1), hidden_states, hidden_states.new_zeros(()))
        gathered = clean.gather(1, index).to(self.rnn.weight_ih_l0.dtype)  # (B, T, H), real tokens on the left
        lengths = mask.sum(dim=1).clamp(min=1).cpu()  # an all-padding row runs one zero vector, then is zeroed
        packed = pack_padded_sequence(gathered, lengths, batch_first=True, enforce_sorted=False)
        # Outside autocast, in the weights' dtype: under CPU autocast PyTorch runs a packed LSTM in bf16/fp16 only
        # when every row has the same length (and oneDNN's fp16 LSTM can fail outright), so a row's numbers would
        # depend on its batch mates. The layer is small next to the encoder; float32 costs little.
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=hidden_states.shape[1])  # (B, T, 2h)
        if self.proj is not None:
            out = self.proj(out)  # (B, T, H)
        out = torch.where(mask.gather(1, order).unsqueeze(-1), out, out.new_zeros(()))  # empty rows, proj bias
        return torch.zeros_like(out).scatter(1, order.unsqueeze(-1).expand_as(out), out)  # back in place
