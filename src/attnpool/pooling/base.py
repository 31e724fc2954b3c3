"""The pooling contract that every attnpool pooler follows."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from typing_extensions import override


class Pooler(nn.Module):
    """Base class of all poolers: reduces token hidden states ``(B, T, H)`` to one vector per sequence.

    Subclasses implement :meth:`pool`, which receives validated inputs and a boolean mask, and declare:

    * ``name``: the registry name, also the ``"type"`` of :meth:`get_config`.
    * ``config_keys``: constructor arguments (besides ``hidden_size``) that :meth:`get_config` saves.
    * ``permutation_invariant``: whether reordering the real tokens leaves the output unchanged.
    * ``has_weights``: whether the pooler gives token weights (``None`` is returned otherwise).

    The contract, checked for every registered pooler by ``tests/pooling/test_contract.py``:

    * ``attention_mask`` holds 1/``True`` for real tokens (bool, int or float accepted); ``None`` means all real.
    * Padded positions never influence the output, whatever values they hold; left and right padding agree.
    * Token weights are ``>= 0``, exactly 0 on padding and sum to 1 over the real tokens of each row.
    * A row without any real token pools to a zero vector (zero weights) with finite gradients.
    * Inputs are never modified in place. Bad shapes raise ``ValueError`` naming the shapes received.

    Shapes:
        - hidden_states: ``(B, T, H)``
        - attention_mask: ``(B, T)`` or ``None``
        - output: ``(B, output_dim)``; with ``return_weights=True`` also weights ``(B, T)`` or ``(B, heads, T)``
    """

    name: ClassVar[str] = ""
    config_keys: ClassVar[tuple[str, ...]] = ()
    permutation_invariant: ClassVar[bool] = True
    has_weights: ClassVar[bool] = False
    needs_all_layers: ClassVar[bool] = False

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        if not isinstance(hidden_size, int) or isinstance(hidden_size, bool) or hidden_size <= 0:
            raise ValueError(
                f"{type(self).__name__}: hidden_size must be a positive integer, got {hidden_size!r}"
            )
        self.hidden_size = hidden_size

    @property
    def output_dim(self) -> int:
        """Size of the pooled vector."""
        return self.hidden_size

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Pool ``hidden_states`` over the token axis.

        Args:
            hidden_states: ``(B, T, H)`` token representations.
            attention_mask: ``(B, T)``, 1/``True`` for real tokens, 0/``False`` for padding. ``None``: no padding.
            return_weights: Also return the token weights (``None`` for poolers without them).

        Returns:
            ``pooled (B, output_dim)``, or ``(pooled, weights)`` when ``return_weights`` is set.
        """
        mask = self._validate(hidden_states, attention_mask)
        pooled, weights = self.pool(hidden_states, mask)
        if return_weights:
            return pooled, weights
        return pooled

    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """Pool validated inputs; ``mask`` is boolean ``(B, T)``. Returns ``(pooled, weights or None)``."""
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """Everything needed to rebuild this pooler with :func:`attnpool.build_pooler` (weights aside)."""
        config: dict[str, Any] = {"type": self.name, "hidden_size": self.hidden_size}
        for key in self.config_keys:
            config[key] = getattr(self, key)
        return config

    @override
    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "type")

    def _validate(self, hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
        """Check shapes once for every pooler and return the mask as a boolean ``(B, T)`` tensor."""
        cls_name = type(self).__name__
        if not isinstance(hidden_states, Tensor) or hidden_states.dim() != 3:
            got = tuple(hidden_states.shape) if isinstance(hidden_states, Tensor) else type(hidden_states).__name__
            raise ValueError(
                f"{cls_name}: expected hidden_states of shape (batch, seq_len, hidden_size), got {got}"
            )
        batch, seq_len, hidden = hidden_states.shape
        if hidden != self.hidden_size:
            raise ValueError(
                f"{cls_name}: hidden_states has hidden size {hidden} (shape {tuple(hidden_states.shape)}) but "
                f"the pooler was built for hidden_size={self.hidden_size}; build it with the encoder's "
                f"config.hidden_size"
            )
        if not hidden_states.is_floating_point():
            raise ValueError(f"{cls_name}: hidden_states must be a floating-point tensor, got {hidden_states.dtype}")
        if attention_mask is None:
            return torch.ones(batch, seq_len, dtype=torch.bool, device=hidden_states.device)
        if tuple(attention_mask.shape) != (batch, seq_len):
            raise ValueError(
                f"{cls_name}: attention_mask of shape {tuple(attention_mask.shape)} does not match hidden_states "
                f"of shape {tuple(hidden_states.shape)}; expected ({batch}, {seq_len}) with 1 for real tokens"
            )
        if attention_mask.dtype == torch.bool:
            return attention_mask
        return attention_mask != 0
