"""A public check of the pooling contract, for a user's pooler: ``check_pooler(MyPooler)`` in their own tests.

The contract suite of attnpool (``tests/pooling/test_contract.py``) runs over the poolers registered when it runs,
which never include a user's; this runs its essential properties on any pooler, in a fraction of a second.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnpool.pooling.base import Pooler, PoolOutputError
from attnpool.pooling.functional import masked_softmax
from attnpool.pooling.registry import build_pooler, check_rebuildable

_LENGTHS = (4, 6, 1)  # a ragged batch: a full row, a shorter one, a single token
_HEADS = 2  # of the synthetic attention maps given to a needs_attentions pooler


def check_pooler(pooler_or_class: Pooler | type[Pooler] | str, hidden_size: int = 16, **options: object) -> None:
    """Run the essential pooling contract on a pooler; raise naming the first property it breaks.

    Checked: ``pool`` returns ``(pooled, weights)`` of the contract's shapes, weights exactly when
    ``pooler.has_weights`` is set; padded positions, filled with huge values or NaN, change neither the pooled
    vector nor the weights; weights (where returned) are >= 0, exactly 0 on padding and sum to 1 over the real
    tokens, per head; a row of padding only pools to finite values; every
    parameter and the input get finite gradients; ``get_config()`` -> :func:`build_pooler` (then
    ``load_state_dict``) gives the identical output; fp16 and bf16 give finite outputs, where the CPU runs the
    pooler in them. A pooler given keeps its training mode and its parameters' gradients.

    Args:
        pooler_or_class: A pooler, a :class:`Pooler` subclass (built with ``hidden_size`` and ``options``) or a
            registered name.
        hidden_size: The hidden size a class or name is built with.
        **options: Constructor options of a class or name.

    Raises:
        AssertionError: A broken property, named first in the message (``padding invariance: ...``,
            ``pool return value: ...``, ``has_weights: ...``).
        ValueError: The pooler cannot be built, or its config does not rebuild it (its class, or that of a pooler
            it holds, is not the one registered under its ``name``: decorate it with ``@register_pooler``).
    """
    if isinstance(pooler_or_class, str):
        pooler = build_pooler(pooler_or_class, hidden_size, **options)
    elif isinstance(pooler_or_class, type):
        pooler = pooler_or_class(hidden_size, **options)
    else:
        pooler = pooler_or_class
    was_training = pooler.training
    grads = [(param, param.grad) for param in pooler.parameters()]  # a caller's accumulated gradients
    pooler.eval()
    try:
        _check_contract(pooler)
    finally:
        pooler.train(was_training)  # a caller's pooler goes back in the mode it came in (it stayed in eval)
        for param, grad in grads:  # and with its gradients (the gradient check had set them to None)
            param.grad = grad


def _check_contract(pooler: Pooler) -> None:
    hidden, mask = _batch(pooler, _LENGTHS, seq_len=max(_LENGTHS))
    try:
        pooled, weights = _call(pooler, hidden, mask)
    except PoolOutputError as err:  # the first property of all: what pool returns
        raise AssertionError(f"pool return value: {err}") from err
    _expect(pooled.shape == (len(_LENGTHS), pooler.output_dim), "output shape",
            f"pooled {tuple(pooled.shape)}, expected {(len(_LENGTHS), pooler.output_dim)} (batch, output_dim)")
    _expect((weights is not None) == bool(pooler.has_weights), "has_weights",
            f"{type(pooler).__name__}.has_weights is {pooler.has_weights} but pool returned "
            f"{'weights' if weights is not None else 'None for them'}: set the class attribute "
            f"`has_weights = {weights is not None}` (the model card, PoolingMonitor and explanations read it)")
    _check_padding(pooler, hidden, mask, pooled, weights)
    if weights is not None:
        _check_weights(weights, mask)
    _check_empty_rows_and_gradients(pooler)
    _check_round_trip(pooler, hidden, mask, pooled)
    _check_half_precision(pooler, hidden, mask)


def _expect(condition: bool, prop: str, detail: str) -> None:
    """An AssertionError that names the property: ``assert`` would vanish under ``python -O``."""
    if not condition:
        raise AssertionError(f"{prop}: {detail}")


def _batch(pooler: Pooler, lengths: tuple[int, ...], seq_len: int) -> tuple[Tensor, Tensor]:
    """Random hidden states ``(B, T, H)`` (``(B, L, T, H)`` for a multi-layer pooler), zeros on padding, and a mask."""
    gen = torch.Generator().manual_seed(0)
    lead = (pooler.num_layers,) if pooler.needs_all_layers else ()
    hidden = torch.randn(len(lengths), *lead, seq_len, pooler.hidden_size, generator=gen)
    mask = (torch.arange(seq_len)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return hidden * mask.view(len(lengths), *[1] * len(lead), seq_len, 1), mask


def _call(pooler: Pooler, hidden: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
    """``pooler(hidden, mask, return_weights=True)``, with attention maps of the real tokens where it needs them."""
    extra = {}
    if pooler.needs_attentions:  # valid self-attention maps over the real keys: (L=1, B, heads, T, T)
        top = (hidden[:, -1] if hidden.dim() == 4 else hidden).float().nan_to_num(0.0, 0.0, 0.0)
        scores = torch.einsum("bth,bsh->bts", top, top)[None, :, None].expand(1, -1, _HEADS, -1, -1)
        extra["attentions"] = masked_softmax(scores / top.shape[-1] ** 0.5, mask.bool()[None, :, None, None])
    return pooler(hidden, mask, return_weights=True, **extra)


def _check_padding(pooler: Pooler, hidden: Tensor, mask: Tensor, pooled: Tensor, weights: Tensor | None) -> None:
    """Appended padding filled with huge values, then NaN, changes nothing of the real tokens' results."""
    for fill in (1e4, float("nan")):
        longer = torch.cat([hidden, torch.full((*hidden.shape[:-2], 3, hidden.shape[-1]), fill)], dim=-2)
        longer[..., :-3, :] = torch.where(mask.bool().view(mask.shape[0], *[1] * (hidden.dim() - 3), -1, 1),
                                          hidden, torch.full_like(hidden, fill))  # the old padding too
        out, w = _call(pooler, longer, torch.cat([mask, torch.zeros(mask.shape[0], 3, dtype=mask.dtype)], 1))
        _expect(torch.allclose(out, pooled, atol=1e-5, rtol=1e-4), "padding invariance",
                f"padded positions filled with {fill} changed the output by {(out - pooled).abs().max().item():.3g} "
                "(is the mask applied before every reduction?)")
        if weights is not None:
            _expect(torch.allclose(w[..., :-3], weights, atol=1e-6, rtol=1e-5), "padding invariance",
                    f"padded positions filled with {fill} changed the weights of the real tokens")


def _check_weights(weights: Tensor, mask: Tensor) -> None:
    """Weights ``(B, T)`` or ``(B, heads, T)``: >= 0, 0 on padding, summing to 1 over the real tokens per head."""
    _expect(weights.dim() in (2, 3) and weights.shape[0] == mask.shape[0] and weights.shape[-1] == mask.shape[1],
            "weights shape", f"got {tuple(weights.shape)} for a mask {tuple(mask.shape)}: (B, T) or (B, heads, T)")
    real = mask.bool() if weights.dim() == 2 else mask.bool()[:, None].expand_as(weights)
    _expect(bool((weights >= 0).all()), "weights >= 0", f"smallest weight {weights.min().item():.3g}")
    _expect(bool((weights[~real] == 0).all()), "weights zero on padding",
            f"padding got weight up to {weights[~real].abs().max().item():.3g}")
    sums = weights.sum(-1)
    _expect(torch.allclose(sums, torch.ones_like(sums), atol=1e-5, rtol=0), "weights sum to 1",
            f"the weights of a row (per head) sum to {sums.flatten().tolist()} over its real tokens")


def _check_empty_rows_and_gradients(pooler: Pooler) -> None:
    """A row of padding only pools to finite values; parameters and input get finite gradients through padding."""
    hidden, mask = _batch(pooler, (0, 3), seq_len=4)
    hidden = (hidden + 1e4 * (1 - mask).view(2, *[1] * (hidden.dim() - 3), 4, 1)).requires_grad_(True)
    pooler.zero_grad()
    try:
        pooled, weights = _call(pooler, hidden, mask)
    except PoolOutputError as err:  # the first property of all: what pool returns
        raise AssertionError(f"pool return value: {err}") from err
    _expect(bool(torch.isfinite(pooled).all()), "fully padded row finite", f"pooled {pooled[0].tolist()}")
    _expect(weights is None or bool(torch.isfinite(weights).all()), "fully padded row finite",
            "non-finite weights for a row of padding only")
    pooled.pow(2).sum().backward()
    _expect(bool(torch.isfinite(hidden.grad).all()), "finite gradients", "non-finite gradient of the input")
    for name, param in pooler.named_parameters():
        _expect(param.grad is None or bool(torch.isfinite(param.grad).all()), "finite gradients",
                f"non-finite gradient of parameter {name}")
    pooler.zero_grad()


def _check_round_trip(pooler: Pooler, hidden: Tensor, mask: Tensor, pooled: Tensor) -> None:
    """``get_config()`` rebuilds the same pooler through the registry; with its state dict, the same output."""
    try:  # an unregistered class (or a subclass keeping its parent's name): say to register it
        check_rebuildable(pooler, "pooler")
    except ValueError as err:
        raise ValueError(f"config round trip: {err}") from err
    config = pooler.get_config()
    try:
        rebuilt = build_pooler(config)
    except (ValueError, TypeError) as err:
        raise ValueError(f"config round trip: build_pooler({config!r}) failed: {err}") from err
    _expect(type(rebuilt) is type(pooler), "config round trip",
            f"{config!r} builds {type(rebuilt).__name__}, not {type(pooler).__name__}")
    rebuilt.load_state_dict(pooler.state_dict())
    out = _call(rebuilt.eval(), hidden, mask)[0]
    _expect(torch.equal(out, pooled), "config round trip", f"the rebuilt pooler's output differs by "
            f"{(out - pooled).abs().max().item():.3g}: is an option missing from config_keys? config {config!r}")


def _check_half_precision(pooler: Pooler, hidden: Tensor, mask: Tensor) -> None:
    """fp16 and bf16 outputs are finite, where the CPU runs the pooler's operations in them."""
    for dtype in (torch.float16, torch.bfloat16):
        half = build_pooler(pooler.get_config()).to(dtype).eval()
        half.load_state_dict(pooler.state_dict())
        try:
            out = _call(half, hidden.to(dtype), mask)[0]
        except (RuntimeError, NotImplementedError) as err:  # an operation without a CPU kernel in this dtype
            if "not implemented" in str(err).lower():
                continue
            raise
        _expect(out.dtype == dtype, f"{dtype} output", f"a {dtype} pooler returned {out.dtype}")
        _expect(bool(torch.isfinite(out).all()), f"{dtype} finite", "non-finite output in half precision")


__all__ = ["check_pooler"]
