"""The pooling contract, run over every registered pooler (and a few option variants).

Multi-layer poolers (``needs_all_layers``) get batches with a layer axis, ``(B, L, T, H)``; poolers that read the
encoder's attention maps (``needs_attentions``) get maps computed from the same tokens (``pool_helpers.call``).
"""

from __future__ import annotations

import json

import pytest
import torch
from pool_helpers import (
    ATTN_HEADS,
    ATTN_LAYERS,
    GRAPH_VARIANTS,
    HIDDEN,
    attention_maps,
    batch_for,
    call,
    pad,
    perturb_parameters,
    variant_ids,
)
from torch import nn

from attnpool.pooling import AttentionPooling, Pooler, build_pooler

HUGE = 1e4


def make(variant, seed=0) -> Pooler:
    name, options = variant
    torch.manual_seed(seed)
    return perturb_parameters(build_pooler(name, HIDDEN, **options), seed).eval()


def pooled_and_weights(pooler, hidden, mask):
    return call(pooler, hidden, mask, return_weights=True)


def test_shape_and_output_dim(variant):
    pooler = make(variant)
    hidden, mask, _ = batch_for(pooler, [3, 5, 1])
    pooled, weights = pooled_and_weights(pooler, hidden, mask)
    assert pooled.shape == (3, pooler.output_dim)
    assert pooled.dtype == hidden.dtype
    assert call(pooler, hidden, mask).shape == pooled.shape  # without return_weights: the tensor alone
    if pooler.has_weights:
        assert weights.shape[0] == 3 and weights.shape[-1] == 5 and weights.dim() in (2, 3)
    else:
        assert weights is None


def test_appended_padding_with_huge_values_changes_nothing(variant):
    pooler = make(variant)
    hidden, mask, tokens = batch_for(pooler, [4, 6, 2])
    base, base_w = pooled_and_weights(pooler, hidden, mask)
    seq_len = hidden.shape[-2]
    for extra in (1, 7):
        longer = pad(tokens, seq_len + extra, pad_value=HUGE, seed=extra)
        longer_mask = torch.cat([mask, torch.zeros(3, extra, dtype=mask.dtype)], dim=1)
        out, w = pooled_and_weights(pooler, longer, longer_mask)
        torch.testing.assert_close(out, base, atol=1e-5, rtol=1e-5)
        if base_w is not None:
            torch.testing.assert_close(w[..., :seq_len], base_w, atol=1e-6, rtol=1e-5)


def test_left_padding_equals_right_padding(variant):
    pooler = make(variant)
    right, right_mask, _ = batch_for(pooler, [5, 2, 7], seq_len=9, pad_value=3.0)
    left, left_mask, _ = batch_for(pooler, [5, 2, 7], seq_len=9, pad_value=3.0, side="left")
    out_r, w_r = pooled_and_weights(pooler, right, right_mask)
    out_l, w_l = pooled_and_weights(pooler, left, left_mask)
    torch.testing.assert_close(out_l, out_r, atol=1e-5, rtol=1e-5)
    if w_r is not None:
        # The same token gets the same weight wherever the padding sits.
        for i, n in enumerate([5, 2, 7]):
            torch.testing.assert_close(w_l[i, ..., -n:], w_r[i, ..., :n], atol=1e-6, rtol=1e-5)


def test_sample_alone_equals_sample_in_ragged_batch(variant):
    pooler = make(variant)
    hidden, mask, tokens = batch_for(pooler, [6, 1, 3, 9], pad_value=HUGE)
    batched = call(pooler, hidden, mask)
    for i, t in enumerate(tokens):
        alone = call(pooler, t.unsqueeze(0))  # no mask, no padding
        torch.testing.assert_close(batched[i : i + 1], alone, atol=1e-5, rtol=1e-5)


def test_permutation_invariance_matches_the_declared_flag(variant):
    pooler = make(variant)
    hidden, mask, tokens = batch_for(pooler, [7, 5], seq_len=8)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    shuffled = hidden.clone()
    shuffled[0, ..., :7, :] = hidden[0, ..., perm, :]  # the token axis, with or without a layer axis
    out, out_shuffled = call(pooler, hidden, mask), call(pooler, shuffled, mask)
    if pooler.permutation_invariant:
        torch.testing.assert_close(out_shuffled, out, atol=1e-5, rtol=1e-5)
    else:  # the flag is not set out of caution: the output really depends on the order
        assert not torch.allclose(out_shuffled[0], out[0], atol=1e-3)


def test_weights_are_a_distribution_over_real_tokens(variant):
    pooler = make(variant)
    hidden, mask, _ = batch_for(pooler, [4, 8, 1], pad_value=HUGE)
    _, weights = pooled_and_weights(pooler, hidden, mask)
    if not pooler.has_weights:
        assert weights is None
        return
    token_mask = mask.bool() if weights.dim() == 2 else mask.bool().unsqueeze(1).expand_as(weights)
    assert (weights >= 0).all()
    assert (weights[~token_mask] == 0).all(), "padding must get exactly zero weight"
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5, rtol=0)


def test_mask_dtypes_agree(variant):
    pooler = make(variant)
    hidden, mask, _ = batch_for(pooler, [2, 5])
    ref = call(pooler, hidden, mask)
    for m in (mask.bool(), mask.int(), mask.float(), mask.half()):
        torch.testing.assert_close(call(pooler, hidden, m), ref)


def test_fully_masked_row_gives_zeros_and_finite_gradients(variant):
    pooler = make(variant).train()
    pooler.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, torch.nn.Dropout) else None)
    hidden, mask, _ = batch_for(pooler, [0, 3, 0], seq_len=4, pad_value=HUGE)
    hidden.requires_grad_(True)
    pooled, weights = pooled_and_weights(pooler, hidden, mask)
    assert torch.isfinite(pooled).all()
    assert (pooled[0] == 0).all() and (pooled[2] == 0).all()
    if weights is not None:
        assert (weights[0] == 0).all() and (weights[2] == 0).all()
    pooled.pow(2).sum().backward()
    assert torch.isfinite(hidden.grad).all()
    for name, p in pooler.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


# A parameter whose largest gradient entry is below this share of the largest of any parameter is taken for one
# that does not learn. Live parameters of every variant measure 2e-3 or more here; a bias under a softmax, whose
# true gradient is 0, measures about 1e-7 (float32 rounding).
GRADIENT_FLOOR = 1e-5


def parameters_that_do_not_learn(pooler, hidden, mask) -> dict[str, str]:
    """Backward of a loss on the pooled vector; ``{name: why}`` for each parameter with no real gradient."""
    pooler.zero_grad(set_to_none=True)
    hidden = hidden.detach().clone().requires_grad_(True)
    torch.manual_seed(0)  # poolers with randomness in training (acmil's masking) draw the same every call
    call(pooler, hidden, mask).pow(2).sum().backward()
    assert torch.isfinite(hidden.grad).all() and hidden.grad.abs().sum() > 0
    named = list(pooler.named_parameters())
    top = max((p.grad.abs().max().item() for _, p in named if p.grad is not None), default=0.0)
    faults = {}
    for name, p in named:
        if p.grad is None:
            faults[name] = "no gradient"
        elif not torch.isfinite(p.grad).all():
            faults[name] = "a non-finite gradient"
        elif p.grad.abs().max().item() <= GRADIENT_FLOOR * top:
            faults[name] = f"only rounding noise ({p.grad.abs().max().item():.1e} against {top:.1e})"
    return faults


def test_every_parameter_gets_a_real_finite_gradient(variant):
    pooler = make(variant).train()
    pooler.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, torch.nn.Dropout) else None)
    hidden, mask, _ = batch_for(pooler, [3, 6, 2])
    assert parameters_that_do_not_learn(pooler, hidden, mask) == {}


def test_the_gradient_check_catches_a_parameter_that_never_learns():
    # attention with the recipe's score bias put back: a softmax ignores it, so its gradient is rounding noise.
    pooler = make(("attention", {"fused": False})).train()
    dead = nn.Linear(pooler.attn_size, 1)
    with torch.no_grad():
        dead.weight.copy_(pooler.score.weight)
        dead.bias.fill_(0.3)
    pooler.score = dead
    hidden, mask, _ = batch_for(pooler, [3, 6, 2])
    faults = parameters_that_do_not_learn(pooler, hidden, mask)
    assert list(faults) == ["score.bias"] and "rounding noise" in faults["score.bias"]


POISON = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "1e30": 1e30}


def _poisoned(hidden, mask, value):
    """A copy with every padded position (of every layer) set to value."""
    pad = ~mask.bool().view(mask.shape[0], *([1] * (hidden.dim() - 3)), mask.shape[1], 1)
    return hidden.masked_fill(pad, value)


def _poisoned_maps(maps, mask, value):
    """Attention maps (L, B, heads, T, T) with the rows and columns of padded positions set to value."""
    pad = ~mask.bool()
    touched = pad[None, :, None, :, None] | pad[None, :, None, None, :]
    return maps.masked_fill(touched, value)


def _forward_and_gradients(pooler, hidden, mask, maps):
    pooler.zero_grad(set_to_none=True)
    hidden = hidden.detach().clone().requires_grad_(True)
    kwargs = {"attentions": maps} if pooler.needs_attentions else {}
    torch.manual_seed(0)
    pooled, weights = pooler(hidden, mask, return_weights=True, **kwargs)
    pooled.pow(2).sum().backward()
    grads = {name: p.grad for name, p in pooler.named_parameters()}
    return pooled.detach(), weights, hidden.grad, grads


@pytest.mark.parametrize("poison", list(POISON))
def test_nan_and_inf_in_padding_reach_neither_output_nor_gradient(variant, poison):
    pooler = make(variant)  # eval: deterministic; gradients still flow (and attention takes its fused path)
    # Right and left padded rows and a row without any real token, clean padding holding finite random values.
    hidden, mask, _ = batch_for(pooler, [4, 6, 1, 0], seq_len=7, pad_value=3.0)
    mask[1] = torch.tensor([0, 1, 1, 1, 1, 1, 1])  # left padding in one row
    maps = attention_maps(hidden, mask)
    ref = _forward_and_gradients(pooler, hidden, mask, maps)
    value = POISON[poison]
    out, weights, hidden_grad, grads = _forward_and_gradients(
        pooler, _poisoned(hidden, mask, value), mask, _poisoned_maps(maps, mask, value)
    )
    torch.testing.assert_close(out, ref[0], atol=1e-6, rtol=1e-5)
    if weights is not None:
        torch.testing.assert_close(weights, ref[1], atol=1e-7, rtol=1e-5)
    assert torch.isfinite(hidden_grad).all()
    pad = ~mask.bool().view(mask.shape[0], *([1] * (hidden.dim() - 3)), mask.shape[1], 1).expand_as(hidden_grad)
    assert (hidden_grad[pad] == 0).all(), "padded positions must get an exactly zero gradient"
    torch.testing.assert_close(hidden_grad, ref[2], atol=1e-6, rtol=1e-5)
    for name, grad in grads.items():
        assert grad is not None and torch.isfinite(grad).all(), f"{name}: non-finite gradient"
        torch.testing.assert_close(grad, ref[3][name], atol=1e-6, rtol=1e-5, msg=f"{name} differs")


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])  # attention: fused path or not
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_finite_and_close_to_float32(variant, dtype, grad):
    pooler = make(variant)
    # Large magnitude (x ** 3 alone overflows fp16 here), with padding as large as fp16 can hold.
    hidden, mask, _ = batch_for(pooler, [5, 12, 3], seq_len=14, pad_value=HUGE / 120)
    hidden = hidden * 30
    ref = call(pooler, hidden, mask)
    with torch.set_grad_enabled(grad):
        low = call(pooler.to(dtype), hidden.to(dtype), mask)
        weights = pooled_and_weights(pooler, hidden.to(dtype), mask)[1] if pooler.has_weights else None
    assert low.dtype == dtype
    assert weights is None or weights.dtype == dtype, "token weights in the input's dtype (cls_share's float32 prior)"
    assert torch.isfinite(low).all()
    scale = ref.abs().max()
    assert (low.float() - ref).abs().max() <= 0.03 * scale


def test_fp16_weights_of_an_outlier_token_are_finite_and_close_to_float32(variant):
    """A token of 3e4 in every channel (LLM hidden states have such outliers) is representable in fp16, but its
    key projection is not: PMA and MaxPoolBERT's attention modes gave NaN weights. Scores are computed in float32
    with the key projection folded into the query; the output is finite wherever float32's fits fp16."""
    pooler = make(variant)
    hidden, mask, _ = batch_for(pooler, [5, 3])
    hidden[..., 0, :] = 3e4 * hidden[..., 0, :].sign()  # the first token of every row (and layer)
    ref, ref_weights = pooled_and_weights(pooler, hidden, mask)
    low, weights = pooled_and_weights(pooler.half(), hidden.half(), mask)
    if pooler.has_weights:
        assert torch.isfinite(weights).all()
        torch.testing.assert_close(weights.float(), ref_weights, atol=1e-3, rtol=0)
    if ref.abs().max() < torch.finfo(torch.float16).max / 2:
        assert torch.isfinite(low).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_is_finite_with_large_states_and_single_token_rows(variant, dtype):
    """--precision fp16 runs the pooler under autocast, whose matmuls went back to fp16: stats' squares of 300 and
    the attention scores overflowed; simpool's floor became 0 and its gradient NaN on a one-token row. (Gradients
    of large states may overflow fp16 like any layer's: the grad scaler skips those steps; they are checked at
    unit scale, where a NaN is the pooler's own.)"""
    pooler = make(variant).train()
    pooler.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, torch.nn.Dropout) else None)
    hidden, mask, _ = batch_for(pooler, [1, 6, 4], seq_len=7)
    for scale in (300.0, 1.0):
        states = (hidden * scale).requires_grad_(True)
        maps = {"attentions": attention_maps(states.detach(), mask)} if pooler.needs_attentions else {}  # an encoder's
        with torch.autocast("cpu", dtype=dtype):
            out = call(pooler, states, mask, **maps)
        assert torch.isfinite(out).all(), scale
        if scale == 1.0:
            pooler.zero_grad(set_to_none=True)
            out.float().pow(2).mean().backward()
            assert torch.isfinite(states.grad).all()
            for name, p in pooler.named_parameters():
                assert p.grad is None or torch.isfinite(p.grad).all(), name


def test_inputs_are_not_modified(variant):
    pooler = make(variant)
    hidden, mask, _ = batch_for(pooler, [2, 4], pad_value=HUGE)
    attentions = attention_maps(hidden, mask)
    hidden_copy, mask_copy, attentions_copy = hidden.clone(), mask.clone(), attentions.clone()
    call(pooler, hidden, mask, attentions=attentions)
    assert torch.equal(hidden, hidden_copy) and torch.equal(mask, mask_copy)
    assert torch.equal(attentions, attentions_copy)


def test_config_and_state_dict_round_trip(variant):
    pooler = make(variant)
    config = pooler.get_config()
    assert config["type"] == variant[0]
    assert json.loads(json.dumps(config)) == config, "config must be JSON-serialisable"
    rebuilt = build_pooler(config)
    rebuilt.load_state_dict(pooler.state_dict())
    rebuilt.eval()
    assert type(rebuilt) is type(pooler) and rebuilt.get_config() == config
    assert repr(rebuilt) == repr(pooler)
    hidden, mask, _ = batch_for(pooler, [3, 5])
    torch.testing.assert_close(call(rebuilt, hidden, mask), call(pooler, hidden, mask), atol=0, rtol=0)


@pytest.mark.parametrize("graph_variant", GRAPH_VARIANTS, ids=variant_ids(GRAPH_VARIANTS))
def test_torch_compile_captures_one_graph(graph_variant):
    pooler = make(graph_variant)
    hidden, mask, _ = batch_for(pooler, [3, 5])
    torch.compiler.reset()  # each pooler compiles afresh, not against the recompile limit of earlier ones
    compiled = torch.compile(pooler, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(call(compiled, hidden, mask), call(pooler, hidden, mask), atol=1e-6, rtol=1e-5)


class _Exported(nn.Module):
    """The pooler with the attention maps as a positional input (exporters take positional tensors)."""

    def __init__(self, pooler):
        super().__init__()
        self.pooler = pooler

    def forward(self, hidden_states, attention_mask, attentions=None):
        return self.pooler(hidden_states, attention_mask, attentions=attentions)


@pytest.mark.parametrize("graph_variant", GRAPH_VARIANTS, ids=variant_ids(GRAPH_VARIANTS))
def test_onnx_export_runs_with_dynamic_batch_and_length(graph_variant, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pooler = make(graph_variant)
    hidden, mask, _ = batch_for(pooler, [3, 5, 4])
    path = tmp_path / "pooler.onnx"
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    token_axis = hidden.dim() - 2  # 1, or 2 behind a layer axis
    args = (hidden, mask)
    names = ["hidden_states", "attention_mask"]
    dynamic = [{0: batch, token_axis: seq}, {0: batch, 1: seq}]
    if pooler.needs_attentions:
        args += (attention_maps(hidden, mask),)
        names.append("attentions")
        dynamic.append({1: batch, 3: seq, 4: seq})  # (L, B, heads, T, T)
    torch.onnx.export(
        _Exported(pooler).eval(),
        args,
        str(path),
        input_names=names,
        output_names=["pooled"],
        dynamic_shapes=tuple(dynamic),
        dynamo=True,
        verbose=False,
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    # Other batch size and length than at export time.
    hidden2, mask2, _ = batch_for(pooler, [2, 7, 1, 4, 6], seed=3, pad_value=5.0)
    feeds = {"hidden_states": hidden2.numpy(), "attention_mask": mask2.numpy()}
    if pooler.needs_attentions:
        feeds["attentions"] = attention_maps(hidden2, mask2).numpy()
    (out,) = session.run(None, feeds)
    torch.testing.assert_close(torch.from_numpy(out), call(pooler, hidden2, mask2), atol=1e-4, rtol=1e-4)


def test_checkpoints_holding_removed_parameters_load_and_compute_the_same(variant):
    pooler = make(variant)
    old = pooler.state_dict()
    added = 0
    for prefix, module in pooler.named_modules():
        if isinstance(module, Pooler):
            for name in module.removed_parameters:
                old[f"{prefix}.{name}" if prefix else name] = torch.randn(3)  # dropped on load, whatever it holds
                added += 1
    rebuilt = build_pooler(pooler.get_config()).eval()
    rebuilt.load_state_dict(old)  # strict: nothing unexpected is left
    hidden, mask, _ = batch_for(pooler, [3, 5])
    torch.testing.assert_close(call(rebuilt, hidden, mask), call(pooler, hidden, mask), atol=0, rtol=0)
    assert added == sum(len(m.removed_parameters) for m in pooler.modules() if isinstance(m, Pooler))


def _unfused(pooler):
    """The pooler with attention's fused backward off: it runs once per forward, gradcheck backpropagates often."""
    pooler.apply(lambda m: setattr(m, "fused", False) if isinstance(m, AttentionPooling) else None)
    return pooler


def test_float64_is_computed_in_float64(variant):
    """Float64 was rounded through float32 by most poolers (softmax, attention, statistics, GeM): gradcheck, whose
    finite differences of 1e-6 see float32 rounding, failed on 14 of the 23 registered poolers."""
    pooler = _unfused(make(variant).double())
    hidden, mask, _ = batch_for(pooler, [3, 2], seq_len=4)
    hidden = hidden.double().requires_grad_(True)
    maps = attention_maps(hidden.detach(), mask) if pooler.needs_attentions else None

    def pool(x):
        return pooler(x, mask, attentions=maps)

    assert pool(hidden).dtype == torch.float64
    assert torch.autograd.gradcheck(pool, (hidden,), eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize(("batch", "seq_len"), [(0, 5), (2, 0)], ids=["no-rows", "no-tokens"])
def test_batches_without_tokens_pool_to_zeros(variant, batch, seq_len, grad):
    """B == 0 and T == 0 crashed (views with -1 of empty tensors, argmax and amax over an empty axis)."""
    pooler = make(variant).train(grad)
    layers = (pooler.num_layers,) if pooler.needs_all_layers else ()
    hidden = torch.randn(batch, *layers, seq_len, HIDDEN, requires_grad=grad)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    maps = torch.zeros(ATTN_LAYERS, batch, ATTN_HEADS, seq_len, seq_len) if pooler.needs_attentions else None
    with torch.set_grad_enabled(grad):
        pooled, weights = pooler(hidden, mask, return_weights=True, attentions=maps)
    assert pooled.shape == (batch, pooler.output_dim) and pooled.dtype == hidden.dtype
    assert (pooled == 0).all()
    if pooler.has_weights:  # the weights of a batch with tokens, cut to B rows and T tokens
        _, usual = pooled_and_weights(pooler, *batch_for(pooler, [2, 3])[:2])
        assert weights.shape == (batch, *usual.shape[1:-1], seq_len)
    else:
        assert weights is None
    if grad:
        pooled.sum().backward()
        assert hidden.grad is not None and hidden.grad.shape == hidden.shape


# Poolers whose output is (or is built on) a weighted sum of the tokens with weights that are uniform at the start or
# on equal tokens. Not every variant: 277,000 tokens against latent_attention's default 512 latents or ditto's
# (T, T) attention maps would take gigabytes.
LONG_VARIANTS = [
    ("mean", {}),
    ("weighted_layer", {"num_layers": 2}),
    ("attention", {}),
    ("attention", {"fused": False}),
    ("gated_attention", {}),
    ("multihead_attention", {"num_heads": 2}),
    ("acmil", {"init": "mean", "attn_size": 2}),
    ("adaptive", {}),
    ("simpool", {}),
    ("pma", {"num_heads": 2}),
    ("class_attention", {}),
    ("latent_attention", {"num_latents": 2, "num_heads": 1}),
    ("multilayer_attention", {"num_layers": 2, "num_queries": 1, "num_heads": 1}),
]


@pytest.mark.parametrize("long_variant", LONG_VARIANTS, ids=variant_ids(LONG_VARIANTS))
def test_fp16_pooling_of_many_equal_tokens_equals_pooling_one(long_variant):
    """Weights near 1/T were rounded to fp16 before the weighted sum: subnormal above 16k tokens, they moved a mean
    of 5.0 over 1e5 tokens to 5.0078. 2**24 / 277,000 = 60.57 subnormal steps: 1/T was off by 0.7%."""
    name, options = long_variant
    torch.manual_seed(0)
    pooler = perturb_parameters(build_pooler(name, 4, **options)).half()  # training: attention's fused path
    token = torch.tensor([5.0, -3.0, 1.5, 2.25], dtype=torch.float16)  # every token the same: weights 1/T
    layers = (pooler.num_layers,) if pooler.needs_all_layers else ()
    many = pooler(token.expand(1, *layers, 277_000, 4).requires_grad_(True))
    one = pooler(token.expand(1, *layers, 1, 4))
    scale = one.abs().max().item()
    torch.testing.assert_close(many, one, atol=2e-3 * scale, rtol=0)  # a few fp16 ulps: the products run apart
