"""The CUDA code paths on tiny random models: poolers under autocast, the fused backward, the recipe's precision,
train -> predict, save -> load.

Every test is marked ``gpu``; ``tests/conftest.py`` skips them where ``torch.cuda.is_available()`` is False. On a
GPU machine: ``.venv/bin/python -m pytest tests/test_gpu.py -m gpu -q``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from transformers import TrainerCallback

from attnpool.cli import _train_config, build_parser, main
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.pooling import AttentionPooling, build_pooler
from attnpool.precision import cuda_native_bf16
from attnpool.prediction.engine import load_fold_models, predict_encoded
from attnpool.runs import Run
from attnpool.training.arguments import training_arguments
from attnpool.training.recipe import train
from model_helpers import ENCODER_FAMILIES, batch, save_tiny_encoder, tiny_config, write_toy_csv

# The contract's variants and batches (tests/pooling is on the path only when pytest collects that folder first).
sys.path.append(str(Path(__file__).resolve().parent / "pooling"))
from pool_helpers import (  # noqa: E402
    HIDDEN,
    VARIANT_IDS,
    VARIANTS,
    attention_maps,
    batch_for,
    perturb_parameters,
    ragged_batch,
)

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
HALF = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
HUGE = 1e4
FAST = ["--epochs", "2", "--batch-size", "8", "--eval-batch-size", "16", "--lr", "1e-3", "--head-lr", "3e-3",
        "--max-length", "16", "--pooling-opt", "attn_size=8"]


def _no_dropout(module: nn.Module) -> nn.Module:
    module.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, nn.Dropout) else None)
    return module


def make_pooler(variant, seed=0):
    """The contract's pooler (parameters moved off their initial values), on CUDA, training mode, no dropout."""
    name, options = variant
    torch.manual_seed(seed)
    return _no_dropout(perturb_parameters(build_pooler(name, HIDDEN, **options), seed)).to(CUDA).train()


def cuda_batch(pooler, lengths, **kwargs):
    """``batch_for`` on CUDA, with the encoder-like attention maps (built on the CPU) for poolers that read them."""
    hidden, mask, _ = batch_for(pooler, lengths, **kwargs)
    extra = {"attentions": attention_maps(hidden, mask).to(CUDA)} if pooler.needs_attentions else {}
    return hidden.to(CUDA), mask.to(CUDA), extra


# --- poolers on CUDA ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_pooler_forward_backward_under_autocast(variant, dtype):
    pooler = make_pooler(variant)
    lengths = [5, 0, 12, 3]  # row 1 is all padding
    # The magnitudes of the contract's half-precision test: large values, padding as large as fp16 holds.
    hidden, mask, extra = cuda_batch(pooler, lengths, seq_len=14, pad_value=HUGE / 120)
    hidden = (hidden * 30).requires_grad_(True)
    with torch.autocast("cuda", dtype=dtype):
        pooled, weights = pooler(hidden, mask, return_weights=True, **extra)
    assert pooled.shape == (4, pooler.output_dim)
    assert torch.isfinite(pooled).all()
    assert (pooled[1] == 0).all(), "an all-padding row pools to zeros"
    if pooler.has_weights:
        weights = weights.float()
        token_mask = mask.bool() if weights.dim() == 2 else mask.bool().unsqueeze(1).expand_as(weights)
        assert torch.isfinite(weights).all() and (weights >= 0).all()
        assert (weights[~token_mask] == 0).all(), "padding must get exactly zero weight"
        sums = weights.sum(-1)  # (B,) or (B, heads)
        real = torch.tensor([n > 0 for n in lengths], device=CUDA)
        torch.testing.assert_close(sums[real], torch.ones_like(sums[real]), atol=2e-2 if dtype == torch.bfloat16
                                   else 2e-3, rtol=0)
        assert (sums[~real] == 0).all()
    # A loss of the size training sees: a large one overflows fp16 gradients, which a GradScaler is there to catch.
    (pooled.float() / 30).pow(2).mean().backward()
    assert hidden.grad is not None and torch.isfinite(hidden.grad).all()
    for name, p in pooler.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_pooler_in_half_precision_is_close_to_float32(variant, dtype):
    pooler = make_pooler(variant).eval()
    hidden, mask, extra = cuda_batch(pooler, [5, 12, 3], seq_len=14, pad_value=HUGE / 120)
    hidden = hidden * 30
    with torch.no_grad():
        ref = pooler(hidden, mask, **extra)
        low = pooler.to(dtype)(hidden.to(dtype), mask, **{k: v.to(dtype) for k, v in extra.items()})
    assert low.dtype == dtype and torch.isfinite(low).all()
    assert (low.float() - ref).abs().max() <= 0.03 * ref.abs().max()


# --- the fused attention backward on CUDA ---------------------------------------------------------------------------


def fused_and_plain_grads(pooler, hidden, mask, fused):
    pooler.fused = fused
    pooler.zero_grad()
    hidden = hidden.detach().clone().requires_grad_(True)
    pooled, weights = pooler(hidden, mask, return_weights=True)
    ramp = torch.linspace(0, 1, weights.shape[1], device=weights.device, dtype=weights.dtype)
    (pooled.float().pow(2).sum() + (weights * ramp).float().sum()).backward()  # both outputs carry a gradient
    return [pooled.detach(), weights.detach(), hidden.grad] + [p.grad.clone() for p in pooler.parameters()]


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_fused_backward_on_cuda_equals_autograd(temperature):
    torch.manual_seed(0)
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12, temperature=temperature), scale=0.3).to(CUDA)
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=1e3)
    hidden, mask = hidden.to(CUDA), mask.to(CUDA)
    pooled = pooler(hidden.clone().requires_grad_(True), mask)
    assert "FusedAttentionPool" in type(pooled.grad_fn).__name__, "the fused path is taken on CUDA"
    fused, plain = fused_and_plain_grads(pooler, hidden, mask, True), fused_and_plain_grads(pooler, hidden, mask, False)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_fused_backward_in_bf16_on_cuda_is_close_to_float32():
    torch.manual_seed(0)
    pooler = perturb_parameters(AttentionPooling(HIDDEN, attn_size=12), scale=0.3).to(CUDA)
    hidden, mask, _ = ragged_batch([5, 0, 9, 2], pad_value=30.0)
    hidden, mask = hidden.to(CUDA), mask.to(CUDA)
    ref = fused_and_plain_grads(pooler, hidden, mask, True)
    low_pooler = pooler.to(torch.bfloat16)
    pooled = low_pooler(hidden.to(torch.bfloat16).requires_grad_(True), mask)
    assert "FusedAttentionPool" in type(pooled.grad_fn).__name__, "bf16 weights and inputs: still fused"
    low = fused_and_plain_grads(low_pooler, hidden.to(torch.bfloat16), mask, True)
    names = ["pooled", "weights", "hidden grad"] + [f"{n} grad" for n, _ in pooler.named_parameters()]
    for name, a, b in zip(names, low, ref, strict=True):
        assert a.dtype == torch.bfloat16 and torch.isfinite(a).all(), name
        assert (a.float() - b).abs().max() <= 0.05 * b.abs().max(), name


# --- models on CUDA ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_model_trains_a_step_under_autocast(family, dtype):
    torch.manual_seed(0)
    # init="xavier": the default "mean" starts the scoring layer at zero, where proj gets no gradient at all.
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config(family),
                                                           pooling_options={"attn_size": 16, "init": "xavier"})
    model = _no_dropout(model).to(CUDA).train()
    ids, mask = batch([5, 3, 7])
    ids, mask = ids.to(CUDA), mask.to(CUDA)
    with torch.autocast("cuda", dtype=dtype):
        out = model(input_ids=ids, attention_mask=mask, labels=torch.rand(3, device=CUDA),
                    return_pooling_weights=True)
    assert torch.isfinite(out.loss) and torch.isfinite(out.logits).all()
    out.loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), name
    pooler = model.attnpool.pooler
    assert pooler.proj.weight.grad.abs().sum() > 0 and pooler.score.weight.grad.abs().sum() > 0
    weights = out.pooling_weights.float()
    assert (weights[mask == 0] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, device=CUDA), atol=2e-2, rtol=0)


def test_save_load_on_cuda_gives_identical_predictions(tmp_path):
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("deberta-v3"), pooling_options={"attn_size": 16})
    model = model.to(CUDA).eval()
    ids, mask = batch([6, 2, 4])
    ids, mask = ids.to(CUDA), mask.to(CUDA)
    with torch.no_grad():
        before = model(ids, mask, return_pooling_weights=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            before_bf16 = model(ids, mask).logits
    model.save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path).to(CUDA)
    assert not loaded.training
    with torch.no_grad():
        after = loaded(ids, mask, return_pooling_weights=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            after_bf16 = loaded(ids, mask).logits
    torch.testing.assert_close(after.logits, before.logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(after.pooling_weights, before.pooling_weights, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(after_bf16, before_bf16, atol=0, rtol=0)  # the same weights, kernels and inputs
    for (name, p), (_, q) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(p, q), name


# --- the recipe on CUDA: precision, train -> predict ----------------------------------------------------------------


def train_args(data: Path, encoder: str, out: Path, *extra: str) -> list[str]:
    return ["train", "--train-file", str(data / "train.csv"), "--text-cols", "first", "second", "--label", "label",
            "--folds", "2", "--model", encoder, "--output-dir", str(out), *FAST, *extra]


def test_precision_auto_on_cuda_picks_bf16_when_supported(tmp_path):
    cfg = _train_config(build_parser().parse_args(train_args(tmp_path, "encoder", tmp_path / "run",
                                                             "--precision", "auto")))
    assert cfg.precision == "auto"
    args = training_arguments(cfg, tmp_path / "checkpoints", steps_per_epoch=4)
    assert args.device.type == "cuda" and not args.use_cpu
    assert args.bf16 == cuda_native_bf16() and not args.fp16
    cfg.precision = "fp16"
    args = training_arguments(cfg, tmp_path / "checkpoints", steps_per_epoch=4)
    assert args.fp16 and not args.bf16


class Recorder(TrainerCallback):
    """Notes each fold's precision flags and where its parameters live."""

    def __init__(self) -> None:
        self.folds: list[dict] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.folds.append({"bf16": args.bf16, "fp16": args.fp16, "device": args.device.type,
                           "params": {p.device.type for p in model.parameters()}})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu")
    encoder = save_tiny_encoder(folder / "encoder", family="deberta-v3")
    write_toy_csv(folder / "train.csv", n=48, seed=0)
    write_toy_csv(folder / "test.csv", n=13, seed=1).drop(columns=["label"]).to_csv(folder / "test.csv", index=False)
    return folder, encoder


@pytest.fixture(scope="module")
def cuda_run(files, tmp_path_factory):
    folder, encoder = files
    out = tmp_path_factory.mktemp("runs") / "auto"
    cfg = _train_config(build_parser().parse_args(train_args(folder, encoder, out, "--precision", "auto")))
    recorder = Recorder()
    result = train(cfg, callbacks=[recorder])
    return out, result, recorder


def test_train_on_cuda_with_precision_auto_writes_a_complete_run(cuda_run):
    out, result, recorder = cuda_run
    bf16 = cuda_native_bf16()
    assert recorder.folds == [{"bf16": bf16, "fp16": False, "device": "cuda", "params": {"cuda"}}] * 2
    assert result.metrics["complete"]
    for fold in result.metrics["folds"]:
        assert fold["device"] == "cuda" and fold["peak_memory_bytes"] > 0
    oof = pd.read_csv(out / "oof.csv")
    assert len(oof) == 48 and np.isfinite(oof["prediction"]).all()
    assert json.loads((out / "metrics.json").read_text())["overall"]["n"] == 48


def test_train_on_cuda_in_fp16(files, tmp_path):
    folder, encoder = files
    out = tmp_path / "fp16"
    assert main(train_args(folder, encoder, out, "--precision", "fp16", "--epochs", "1")) == 0
    oof = pd.read_csv(out / "oof.csv")
    assert len(oof) == 48 and np.isfinite(oof["prediction"]).all()


def test_predict_on_cuda_auto_is_close_to_fp32_and_fp32_matches_the_cpu(cuda_run, files, tmp_path):
    out, _, _ = cuda_run
    folder, _ = files
    predictions = {}
    for name, device, precision in (("auto", "cuda", "auto"), ("fp32", "cuda", "fp32"), ("cpu", "cpu", "fp32")):
        path = tmp_path / f"{name}.csv"
        assert main(["predict", "--run", str(out), "--input", str(folder / "test.csv"), "--output", str(path),
                     "--device", device, "--precision", precision]) == 0
        predictions[name] = pd.read_csv(path, dtype={"id": str})["prediction"].to_numpy()
    assert np.isfinite(predictions["auto"]).all()
    np.testing.assert_allclose(predictions["fp32"], predictions["cpu"], atol=1e-4, rtol=1e-4)
    scale = max(1.0, float(np.abs(predictions["fp32"]).max()))
    np.testing.assert_allclose(predictions["auto"], predictions["fp32"], atol=0.03 * scale, rtol=0)


def test_predict_encoded_precision_auto_on_cuda(cuda_run):
    out, _, _ = cuda_run
    _, models, tokenizer, _ = load_fold_models(Run.open(out))
    texts = ["the cat sat on the mat", "a big red dog", "tree"]
    encodings = {k: list(v) for k, v in tokenizer(texts).items()}
    fp32 = predict_encoded(models, encodings, None, 2, tokenizer, device="cuda", precision="fp32")
    auto = predict_encoded(models, encodings, None, 2, tokenizer, device="cuda", precision="auto")
    assert all(next(m.parameters()).device.type == "cuda" for m in models)
    for a, b in zip(auto, fp32, strict=True):
        assert a.dtype == np.float32 and np.isfinite(a).all()
        np.testing.assert_allclose(a, b, atol=0.03 * max(1.0, float(np.abs(b).max())), rtol=0)
