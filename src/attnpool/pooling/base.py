"""The pooling contract that every attnpool pooler follows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling.functional import zero_padding


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
    * ``has_auxiliary_loss``: :meth:`auxiliary_loss` returns a regulariser (``multihead_attention`` with
      ``penalty > 0``).

    Composite poolers (``weighted_layer``, ``combined``) set these flags per instance from their parts.

    ``removed_parameters`` names parameters that earlier versions had and that had no effect (a bias under a
    softmax, which ignores a constant shift): they are dropped from loaded state dicts, so old checkpoints load
    and compute exactly as before.

    The contract, checked for every registered pooler by ``tests/pooling/test_contract.py``:

    * ``attention_mask`` holds 1/``True`` for real tokens (bool, int or float accepted; any nonzero value is real)
      and 0/``False`` for padding; ``None`` means all real. A float mask holding negative or non-finite values, an
      additive mask (0 for real tokens, ``-inf`` for padding), is refused: read as nonzero, it would be inverted.
    * Padded positions never reach the output or any gradient, whatever values they hold (NaN, ``inf`` and
      ``1e30`` included): :meth:`forward` replaces them by 0 (see :meth:`clear_padding`) before :meth:`pool` sees
      them, and their gradient is exactly 0. Left and right padding agree. Real tokens holding NaN or ``inf``
      are the caller's to fix: they reach the output like any real value (a pooler that weights them gives NaN).
    * Token weights are ``>= 0``, exactly 0 on padding and sum to 1 over the real tokens of each row.
    * A row without any real token pools to a zero vector (zero weights) with finite gradients; so does a batch
      without tokens (``T == 0``, weights ``(B, [heads,] 0)``), and an empty batch gives ``(0, output_dim)``.
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
    has_auxiliary_loss: ClassVar[bool] = False
    removed_parameters: ClassVar[tuple[str, ...]] = ()

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
            ValueError: Shapes that do not fit, an ``attention_mask`` that is not a tensor or is an additive float
                mask (negative or non-finite values), missing attention maps
                for a ``needs_attentions`` pooler, or hidden states in another dtype than the pooler's parameters
                (outside autocast) that its operations cannot mix.
            PoolOutputError: :meth:`pool` returned something other than ``(pooled, weights)`` of these shapes (a
                ``TypeError``; a bug of the pooler, not of its inputs).
        """
        mask = self._validate(hidden_states, attention_mask)
        if self.needs_attentions:
            self._validate_attentions(attentions, hidden_states)
        if not torch.jit.is_tracing() and 0 in mask.shape:  # a trace keeps the pooler's own path, for any size
            pooled, weights = self._pool_empty(hidden_states, mask, attentions)
        else:
            if attention_mask is not None:  # without a mask there is no padding to clear
                hidden_states = self.clear_padding(hidden_states, mask)
            extra = {"attentions": attentions} if self.needs_attentions else {}
            pooled, weights = self._call_pool(hidden_states, mask, extra)
        if return_weights:
            return pooled, weights
        return pooled

    def _pool_empty(
        self, hidden_states: Tensor, mask: Tensor, attentions: Sequence[Tensor] | Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """Pool a batch without any token (``B == 0`` or ``T == 0``): zeros, and empty weights.

        Reductions over an empty axis fail (``argmax``, ``amax``) and a ``view(..., -1)`` of an empty tensor is
        ambiguous, so rather than each pooler guarding each operation, an axis of size 0 gets one padded position,
        which every pooler pools as a row without real tokens (zeros, by the contract), and the result is cut back
        to ``(B, output_dim)`` and weights ``(B, [heads,] T)``. It stays connected to the inputs and parameters
        (their gradients are empty or zero).
        """
        batch, seq_len = mask.shape
        rows, tokens = max(batch, 1), max(seq_len, 1)
        if seq_len == 0:
            position = hidden_states.new_zeros(*hidden_states.shape[:-2], 1, hidden_states.shape[-1])
            hidden_states = torch.cat([hidden_states, position], dim=-2)  # (B, [L,] 1, H)
        if batch == 0:
            hidden_states = torch.cat([hidden_states, hidden_states.new_zeros(1, *hidden_states.shape[1:])])
        padding = torch.zeros(rows, tokens, dtype=torch.bool, device=mask.device)
        extra: dict[str, Any] = {}
        if self.needs_attentions:
            if isinstance(attentions, Tensor):  # (L, B, heads, T, T)
                layers, heads = attentions.shape[0], attentions.shape[2]
                extra["attentions"] = attentions.new_zeros(layers, rows, heads, tokens, tokens)
            else:
                extra["attentions"] = [a.new_zeros(rows, a.shape[1], tokens, tokens) for a in attentions or ()]
        pooled, weights = self._call_pool(hidden_states, padding, extra)
        return pooled[:batch], None if weights is None else weights[:batch, ..., :seq_len]

    def _call_pool(self, hidden_states: Tensor, mask: Tensor, extra: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
        """:meth:`pool`, its result checked; an error of mixed dtypes names the pooler's and the hidden states'.

        A float32 pooler given bf16 hidden states outside autocast failed with PyTorch's ``mat1 and mat2 must have
        the same dtype``, naming neither. It is caught rather than refused beforehand: several poolers mix dtypes
        deliberately (``gem``'s ``p``, ``adaptive``'s float32 query, ``weighted_layer``'s logits) and work so.
        """
        if torch.compiler.is_compiling() or torch.jit.is_tracing():  # a graph keeps the plain call
            return self._check_pool_output(self.pool(hidden_states, mask, **extra), mask)
        try:
            result = self.pool(hidden_states, mask, **extra)
        except RuntimeError as err:
            mismatch = self._dtype_mismatch(hidden_states)
            if mismatch is None or "type" not in str(err):
                raise
            raise ValueError(f"{mismatch} (PyTorch: {str(err).splitlines()[0]})") from err
        return self._check_pool_output(result, mask)

    def _dtype_mismatch(self, hidden_states: Tensor) -> str | None:
        """What is wrong when the parameters' floating dtypes differ from the hidden states' outside autocast."""
        dtypes = {str(p.dtype) for p in self.parameters() if p.is_floating_point()}
        device = hidden_states.device.type
        if not dtypes or dtypes == {str(hidden_states.dtype)} or torch.is_autocast_enabled(device):
            return None
        # autocast runs in half precision only: float32 or float64 states need the pooler cast
        autocast = (f" or run it under torch.autocast({device!r}, dtype={hidden_states.dtype})"
                    if hidden_states.dtype in (torch.float16, torch.bfloat16) else "")
        return (
            f"{type(self).__name__}: hidden_states are {hidden_states.dtype} but the pooler's parameters are "
            f"{' and '.join(sorted(dtypes))}; cast the pooler to the hidden states' dtype "
            f"(pooler.to(hidden_states.dtype)){autocast}"
        )

    def _check_pool_output(self, result: Any, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """What :meth:`pool` returned, checked: ``pooled (B, output_dim)`` and ``weights`` None, ``(B, [heads,] T)``.

        A pooler returning the pooled tensor alone would otherwise be unpacked along its batch axis (at B = 2: row 0
        taken as pooled, row 1 as weights) or fail with "too many values to unpack", naming nothing.

        Raises:
            PoolOutputError: Naming the class, what its ``pool`` returned and what is expected.
        """
        batch, seq_len = mask.shape
        if isinstance(result, tuple | list) and len(result) == 2:
            pooled, weights = result
            if isinstance(pooled, Tensor) and tuple(pooled.shape) == (batch, self.output_dim) and (
                    weights is None or isinstance(weights, Tensor) and weights.dim() in (2, 3)
                    and weights.shape[0] == batch and weights.shape[-1] == seq_len):
                return pooled, weights
        raise PoolOutputError(
            f"{type(self).__name__}.pool returned {_describe(result)}; expected a pair (pooled, weights): pooled of "
            f"shape ({batch}, {self.output_dim}) (batch, output_dim), weights None or of shape ({batch}, {seq_len}) "
            f"(batch, seq_len) or ({batch}, heads, {seq_len}), e.g. `return pooled, None`"
        )

    def clear_padding(self, hidden_states: Tensor, mask: Tensor) -> Tensor:
        """Hidden states with padded positions replaced by 0, so that no value held there can reach an output.

        A zero weight does not remove a NaN (``0 * nan`` is NaN, in the weighted sum and in every backward that
        multiplies by a saved input), so padding is cleared once, here, for every pooler, instead of each pooler
        masking each of its operations. This copies the hidden states; a pooler that clears padding more cheaply
        itself may override this (``attention``'s fused path does, in a buffer that it reuses for the gradient).

        Args:
            hidden_states: ``(B, T, H)``, or ``(B, L, T, H)`` for ``needs_all_layers`` poolers.
            mask: ``(B, T)`` boolean, ``True`` for real tokens.

        Returns:
            A tensor of the same shape, 0 at padded positions; its gradient there is exactly 0.
        """
        return zero_padding(hidden_states, mask)

    def auxiliary_loss(self, weights: Tensor | None) -> Tensor | None:
        r"""A regulariser of the pooler to add to the training loss, computed from the weights it returned.

        ``None`` (the default) when the pooler has none. :class:`~attnpool.pooling.MultiHeadAttentionPooling`
        with ``penalty > 0`` returns Lin et al.'s :math:`\lVert AA^\top - I\rVert_F^2` penalty.

        Args:
            weights: The token weights of the same forward (``return_weights=True``): ``(B, T)`` or
                ``(B, heads, T)``, or ``None``.

        Returns:
            A scalar tensor, or ``None``.
        """
        return None

    def pool(self, hidden_states: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """Pool validated inputs; ``mask`` is boolean ``(B, T)``. Returns the pair ``(pooled, weights)``.

        ``pooled`` is ``(B, output_dim)``; ``weights`` is ``None`` (no token weights), ``(B, T)`` or
        ``(B, heads, T)``. :meth:`forward` checks this and raises :class:`PoolOutputError` otherwise.

        ``needs_attentions`` poolers receive ``attentions=`` as a further keyword argument.
        """
        raise NotImplementedError

    def held_poolers(self) -> dict[str, Pooler]:
        """The poolers this one holds and saves by name in its config, by attribute path (none by default).

        A helper module built by the constructor is not one: the config rebuilds it.
        """
        return {}

    def get_config(self) -> dict[str, Any]:
        """Everything needed to rebuild this pooler with :func:`attnpool.build_pooler` (weights aside).

        A pooler defined outside attnpool also saves ``"module"``, the module that defines (and registers) it: a
        model saved with it can then say what to import before it is loaded. Loading never imports it itself.
        """
        config: dict[str, Any] = {"type": self.name, "hidden_size": self.hidden_size}
        for key in self.config_keys:
            config[key] = getattr(self, key)
        module = user_module(type(self))
        if module is not None:
            config["module"] = module
        return config

    @override
    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        for name in self.removed_parameters:
            state_dict.pop(prefix + name, None)  # an effect-free parameter of earlier versions
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @override
    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "type")

    def _validate(self, hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
        """Check shapes (and that a float mask is not additive) for every pooler; the mask as a boolean ``(B, T)``."""
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
        if not isinstance(attention_mask, Tensor):
            raise ValueError(
                f"{cls_name}: expected attention_mask to be a torch tensor of shape ({batch}, {seq_len}) or None, got "
                f"a {type(attention_mask).__name__}; convert it with torch.as_tensor(attention_mask), or tokenize with "
                "tokenizer(..., return_tensors='pt')"
            )
        if tuple(attention_mask.shape) != (batch, seq_len):
            raise ValueError(
                f"{cls_name}: attention_mask of shape {tuple(attention_mask.shape)} does not match hidden_states "
                f"of shape {tuple(hidden_states.shape)}; expected ({batch}, {seq_len}) with 1 for real tokens"
            )
        if attention_mask.dtype == torch.bool:
            return attention_mask
        if attention_mask.is_floating_point() and not (torch.compiler.is_compiling() or torch.jit.is_tracing()):
            # an additive mask (0 for real tokens, -inf or -1e4 for padding) read as != 0 would pool the padding only
            ok = torch.isfinite(attention_mask) & (attention_mask >= 0)
            if not bool(ok.all()):
                bad = attention_mask[~ok][0].item()
                raise ValueError(
                    f"{cls_name}: attention_mask holds {bad} (dtype {attention_mask.dtype}); it must be 1 (or True) "
                    "for real tokens and 0 (or False) for padding, not an additive mask (0 for real tokens, a large "
                    "negative value or -inf for padding): pass the tokenizer's attention_mask, or convert an "
                    "additive one with (additive_mask == 0)"
                )
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


class PoolOutputError(TypeError):
    """A pooler's :meth:`Pooler.pool` returned something other than ``(pooled, weights)`` of the expected shapes."""


def _describe(value: Any) -> str:
    """A returned value as an error names it: a tensor by its shape, a tuple or list by its items."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple | list):
        items = ", ".join(_describe(item) for item in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"a {type(value).__name__} of {len(value)} ({items})"
    return "None" if value is None else f"a {type(value).__name__}"


def user_module(cls: type) -> str | None:
    """The module defining ``cls`` when it is defined outside attnpool (a user's pooler), else ``None``."""
    module = cls.__module__
    return None if module.partition(".")[0] == "attnpool" else module
