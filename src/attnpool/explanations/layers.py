"""A multi-layer pooler's weights over the encoder layers, each with the ``hidden_states`` index it weighs."""

from __future__ import annotations

from typing import Any

import torch

from attnpool.explanations.svg import fmt_number


def layer_weights(pooler: Any) -> list[float] | None:
    """The pooler's weights over the layers it mixes, in the order it is fed them; ``None`` for a token pooler."""
    method = getattr(pooler, "layer_weights", None)
    if not callable(method):
        return None
    with torch.no_grad():
        return [float(v) for v in method().detach().float().cpu().numpy().ravel()]


def layer_indices(model: torch.nn.Module, count: int) -> list[int] | None:
    """The ``hidden_states`` index of each of the ``count`` layer weights, as the model stacks the layers.

    ``hidden_states`` has ``depth + 1`` entries: 0 is the embeddings' output, ``depth`` the top transformer layer.
    The model stacks the layers in the order ``config.pooling_layers`` lists them (a negative index counts from
    the top); ``"all"`` is layers ``1..depth`` and ``"last"`` the top ``count`` layers, both ascending.

    Returns:
        Non-negative indices, one per weight; ``None`` when the model does not say (no ``pooling_layers``, or an
        encoder depth it does not state where one is needed).
    """
    base = getattr(model, "attnpool", model)
    config = getattr(base, "config", None)
    layers = getattr(config, "pooling_layers", None)
    depth = getattr(getattr(config, "encoder", None), "num_hidden_layers", None)
    if depth is None:
        depth = getattr(getattr(getattr(base, "encoder", None), "config", None), "num_hidden_layers", None)
    if layers == "all":
        indices = list(range(1, (count if depth is None else depth) + 1))
    elif layers == "last" and depth is not None:
        indices = list(range(depth + 1 - count, depth + 1))
    elif isinstance(layers, (list, tuple)) and (depth is not None or all(int(i) >= 0 for i in layers)):
        indices = [int(i) if int(i) >= 0 else int(i) + depth + 1 for i in layers]
    else:
        return None
    return indices if len(indices) == count and all(i >= 0 for i in indices) else None


def layer_section(weights: list[float], indices: list[int] | None) -> str:
    """The page's bars of the layer weights, each labelled with the layer it weighs (HTML)."""
    if indices is None:  # a model that does not say which layers: only their order is known
        names = [f"input {i + 1}" for i in range(len(weights))]
        note = "in the order the pooler is fed them (the model does not say which encoder layers they are)"
    else:
        names = [f"layer {i}" + (" (embeddings)" if i == 0 else "") for i in indices]
        note = ("labelled by their index into the encoder's hidden states (layer 0: the embeddings' output, layer N: "
                "the N-th transformer layer), in the order the pooler is fed them")
    bars = "".join(
        f'<div class="lw"><span>{name}</span><span class="bar" style="width:{120 * w:.1f}px"></span>'
        f"<span>{fmt_number(w)}</span></div>"
        for name, w in zip(names, weights, strict=True)
    )
    return f"<p>Weights over the {len(weights)} encoder layers the pooler mixes, {note}:</p>{bars}"
