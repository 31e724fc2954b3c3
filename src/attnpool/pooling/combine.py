"""Several poolers side by side: ``"attention+mean"`` concatenates (or projects) their outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn
from typing_extensions import override

from attnpool.pooling import functional as F
from attnpool.pooling.base import Pooler
from attnpool.pooling.modules import check_num_layers, xavier_
from attnpool.pooling.registry import COMBINED_NAME, build_pooler, get_pooler_class, inner_spec, register_pooler

PoolerSpec = str | Mapping[str, Any] | Pooler


def _spec_class(spec: PoolerSpec) -> type[Pooler]:
    if isinstance(spec, Pooler):
        return type(spec)
    if isinstance(spec, Mapping):
        return get_pooler_class(str(spec.get("type", "")))
    return get_pooler_class(spec)


@register_pooler
class CombinedPooling(Pooler):
    r"""Several poolers applied to the same tokens, their outputs concatenated or projected.

    Like PyTorch Geometric's ``MultiAggregation``: the spec ``"attention+mean"`` (any registered names joined by
    ``+``) builds

    .. math::
        \mathrm{pooled} = [\,p_1(H) ; \dots ; p_m(H)\,] \quad (\texttt{concat}), \qquad
        \mathrm{pooled} = W [\,p_1(H) ; \dots ; p_m(H)\,] + b \quad (\texttt{project})

    where the Xavier-initialised projection maps back to ``H``. Requirements combine: if any part needs all
    layers, the combination takes ``(B, L, T, H)`` and the single-layer parts pool the top layer ``[:, -1]``; if
    any part needs attention maps, they are passed to it. All multi-layer parts must take the same number of
    layers. Permutation invariant when every part is. No token weights (the parts' weights differ in kind).

    Args:
        hidden_size: ``H``.
        poolers: The parts: registered names, config dicts or pooler instances.
        combine: ``"concat"`` or ``"project"``.
        num_layers: For the multi-layer parts, the number of layers (set by the model); ``None`` keeps theirs.

    Shapes:
        ``(B, T, H)`` or ``(B, L, T, H)`` -> ``(B, sum of the parts' output_dim)``, or ``(B, H)`` for ``"project"``.
    """

    name = COMBINED_NAME
    config_keys = ("poolers", "combine")

    def __init__(
        self,
        hidden_size: int,
        poolers: Sequence[PoolerSpec] = ("attention", "mean"),
        combine: Literal["concat", "project"] = "concat",
        num_layers: int | None = None,
    ) -> None:
        super().__init__(hidden_size)
        if isinstance(poolers, str | Mapping) or len(poolers) < 1:
            raise ValueError(f"CombinedPooling: poolers must be a non-empty list of pooler specs, got {poolers!r}")
        if combine not in ("concat", "project"):
            raise ValueError(f"CombinedPooling: combine must be 'concat' or 'project', got {combine!r}")
        if num_layers is not None:  # refused here even when no part reads layers
            num_layers = check_num_layers("CombinedPooling", num_layers)
        parts = []
        for spec in poolers:
            layered = num_layers is not None and _spec_class(spec).needs_all_layers and not isinstance(spec, Pooler)
            given = spec.get("num_layers") if layered and isinstance(spec, Mapping) else None
            if given is not None and given != num_layers:  # a part's own option is not silently replaced
                raise ValueError(f"CombinedPooling: part {spec.get('type')!r} takes num_layers={given}, but the "
                                 f"combination reads {num_layers} layers (pooling_layers); drop num_layers from the "
                                 "part or make them agree")
            parts.append(build_pooler(spec, hidden_size, **({"num_layers": num_layers} if layered else {})))
        regularised = [p.name for p in parts if p.has_auxiliary_loss]
        if regularised:  # computed from a part's token weights, which a combination does not return
            raise ValueError(f"CombinedPooling: the regulariser of {', '.join(regularised)} (penalty > 0) needs its "
                             "token weights, which a combination does not return; use it alone (or inside "
                             "weighted_layer), or set its penalty to 0")
        self.parts = nn.ModuleList(parts)
        layer_counts = sorted({p.num_layers for p in parts if p.needs_all_layers})
        if len(layer_counts) > 1:
            raise ValueError(f"CombinedPooling: the multi-layer parts take different numbers of layers {layer_counts}")
        self.combine = combine
        self.needs_all_layers = bool(layer_counts)
        self.num_layers = layer_counts[0] if layer_counts else None
        self.needs_attentions = any(p.needs_attentions for p in parts)
        self.permutation_invariant = all(p.permutation_invariant for p in parts)
        if combine == "project":
            self.out_proj = nn.Linear(sum(p.output_dim for p in parts), hidden_size)
            xavier_(self.out_proj)

    @property
    def poolers(self) -> list[dict[str, Any]]:
        """The parts' configs (without ``hidden_size``)."""
        return [inner_spec(p) for p in self.parts]

    @override
    def held_poolers(self) -> dict[str, Pooler]:
        """The parts, saved by name in :attr:`poolers`."""
        return {f"parts.{i}": part for i, part in enumerate(self.parts)}

    @property
    def output_dim(self) -> int:
        """Sum of the parts' ``output_dim`` for ``"concat"``, ``hidden_size`` for ``"project"``."""
        return self.hidden_size if self.combine == "project" else sum(p.output_dim for p in self.parts)

    @override
    def pool(self, hidden_states: Tensor, mask: Tensor, attentions: Any = None) -> tuple[Tensor, None]:
        outputs = []
        for part in self.parts:
            states = hidden_states if part.needs_all_layers or not self.needs_all_layers else hidden_states[:, -1]
            extra = {"attentions": attentions} if part.needs_attentions else {}
            outputs.append(part.pool(states, mask, **extra)[0])
        pooled = torch.cat(outputs, dim=-1)
        if self.combine == "project":
            pooled = F.zero_empty_rows(self.out_proj(pooled), mask)
        return pooled, None
