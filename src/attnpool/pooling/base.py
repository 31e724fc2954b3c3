"""The pooling contract that every attnpool pooler follows."""

from __future__ import annotations

from collections.abc import Sequence
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
    * ``needs_all_layers``: the pooler takes several encoder layers stacked as ``(B, L, T, H)``, with
      ``L = self.num_layers`` (a constructor option), instead of one layer ``(B, T, H)``. The model then requests
      the encoder's hidden states and feeds the top ``num_layers`` layers, or those chosen by ``pooling_layers``
      (and sizes ``num_layers`` to them when the pooling spec leaves it out).
    * ``needs_attentions``: the pooler needs the encoder's attention maps, passed as ``attentions=``: a sequence
      of per-layer ``(B, heads, T, T)`` tensors as transformers returns them, or one ``(L, B, heads, T, T)``
      tensor (both indexed ``attentions[layer]``). The model then requests ``output_attentions``; transformers
      returns them only with ``attn_implementation="eager"``.

    Composite poolers (``weighted_layer``, ``combined``) set these four flags per instance from their parts.

    The contract, checked for every registered pooler by ``tests/pooling/test_contract.py``:

    * ``attention_mask`` holds 1/``True`` for real tokens (bool, int or float accepted); ``None`` means all real.
    * Padded positions never influence the output, whatever values they hold; left and right padding agree.
    * Token weights are ``>= 0``, exactly 0 on padding and sum to 1 over the real tokens of each row.
    * A row without any real token pools to a zero vector (zero weights) with finite gradients.
    * Inputs are never modified in place. Bad shapes raise ``ValueError`` naming the shapes received.

    Shapes:
        - hidden_states: ``(B, T, H)``; ``(B, L, T, H)`` when ``needs_all_layers``
        - attention_mask: ``(B, T)`` or ``None``
        - attentions (``needs_attentions`` only): ``L`` tensors ``(B, heads, T, T)`` or one ``(L, B, heads, T, T)``
        - output: ``(B, output_dim)``; with ``return_weights=True`` also weights ``(B, T)`` or ``(B, heads, T)``
    """

    name: ClassVar[str] = ""
    config_keys: ClassVar[tuple[str, ...]] = ()
    permutation_invariant: ClassVar[bool] = True
    has_weights: ClassVar[bool] = False
    needs_all_layers: ClassVar[bool] = False
    needs_attentions: ClassVar[bool] = False

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
        attentions: Sequence[Tensor] | Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Pool ``hidden_states`` over the token axis.

        Args:
            hidden_states: ``(B, T, H)`` token representations; ``(B, L, T, H)`` for ``needs_all_layers`` poolers.
            attention_mask: ``(B, T)``, 1/``True`` for real tokens, 0/``False`` for padding. ``None``: no padding.
            return_weights: Also return the token weights (``None`` for poolers without them).
            attentions: The encoder's attention maps, for ``needs_attentions`` poolers (ignored by the others):
                per-layer ``(B, heads, T, T)`` tensors, or one ``(L, B, heads, T, T)`` tensor.

        Returns:
            ``pooled (B, output_dim)``, or ``(pooled, weights)`` when ``return_weights`` is set.

        Raises:
            ValueError: Shapes that do not fit, or missing attention maps for a ``needs_attentions`` pooler.
        """
        mask = self._validate(hidden_states, attention_mask)
        if self.needs_attentions:
            self._validate_attentions(attentions, hidden_states)
            pooled, weights = self.pool(hidden_states, mask, attentions=attentions)
        else:
            pooled, weights = self.pool(hidden_states, mask)
        if return_weights:
            return pooled, weights
        return pooled

    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """Pool validated inputs; ``mask`` is boolean ``(B, T)``. Returns ``(pooled, weights or None)``.

        ``needs_attentions`` poolers receive ``attentions=`` as a further keyword argument.
        """
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
        if self.needs_all_layers:
            expected_dim, layout = 4, "(batch, num_layers, seq_len, hidden_size)"
        else:
            expected_dim, layout = 3, "(batch, seq_len, hidden_size)"
        if not isinstance(hidden_states, Tensor) or hidden_states.dim() != expected_dim:
            got = tuple(hidden_states.shape) if isinstance(hidden_states, Tensor) else type(hidden_states).__name__
            hint = ""
            if self.needs_all_layers:
                layers = getattr(self, "num_layers", "several")
                hint = f"; this pooler combines {layers} encoder layers, stacked on axis 1"
            elif isinstance(hidden_states, Tensor) and hidden_states.dim() == 4:
                hint = "; stacked layers are for multi-layer poolers (needs_all_layers), this one pools one layer"
            raise ValueError(f"{cls_name}: expected hidden_states of shape {layout}, got {got}{hint}")
        num_layers = getattr(self, "num_layers", None)
        if self.needs_all_layers and num_layers is not None and hidden_states.shape[1] != num_layers:
            raise ValueError(
                f"{cls_name}: hidden_states of shape {tuple(hidden_states.shape)} stacks {hidden_states.shape[1]} "
                f"layers, but the pooler was built for num_layers={num_layers}"
            )
        batch, seq_len, hidden = hidden_states.shape[0], hidden_states.shape[-2], hidden_states.shape[-1]
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

    def _validate_attentions(self, attentions: Sequence[Tensor] | Tensor | None, hidden_states: Tensor) -> None:
        """Check that attention maps were given, one ``(B, heads, T, T)`` map per layer."""
        cls_name = type(self).__name__
        missing = attentions is None or (
            not isinstance(attentions, Tensor) and (len(attentions) == 0 or any(a is None for a in attentions))
        )
        if missing:
            got = "None" if attentions is None else f"{type(attentions).__name__} of length {len(attentions)}"
            raise ValueError(
                f"{cls_name} needs the encoder's attention maps (attentions=...), got {got}. transformers returns "
                "them only for the eager attention implementation (under sdpa or flash attention it returns an "
                "empty tuple): load the encoder with attn_implementation='eager' and call it with "
                "output_attentions=True (AttnPoolModel does both for such poolers)"
            )
        batch, seq_len = hidden_states.shape[0], hidden_states.shape[-2]
        if isinstance(attentions, Tensor):
            if attentions.dim() != 5 or attentions.shape[1] != batch or attentions.shape[-2:] != (seq_len, seq_len):
                raise ValueError(
                    f"{cls_name}: attentions of shape {tuple(attentions.shape)} do not fit hidden_states of shape "
                    f"{tuple(hidden_states.shape)}; expected (num_layers, {batch}, heads, {seq_len}, {seq_len})"
                )
            return
        for index, layer in enumerate(attentions):
            if layer.dim() != 4 or layer.shape[0] != batch or layer.shape[-2:] != (seq_len, seq_len):
                raise ValueError(
                    f"{cls_name}: attentions[{index}] of shape {tuple(layer.shape)} does not fit hidden_states of "
                    f"shape {tuple(hidden_states.shape)}; expected ({batch}, heads, {seq_len}, {seq_len})"
                )
