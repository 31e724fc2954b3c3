"""CPU prediction at bf16/fp16: lowered copies compute what autocast computes, and emulated types are warned about."""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest
import torch
from transformers.pytorch_utils import Conv1D

from attnpool.model import AttnPoolForSequenceClassification
from attnpool.prediction.engine import FoldEnsemble, with_encoder_in
from model_helpers import DECODER_FAMILIES, ENCODER_FAMILIES, batch, tiny_config

LINEAR = (torch.nn.Linear, Conv1D)


def tiny_model(family: str, seed: int = 0) -> AttnPoolForSequenceClassification:
    torch.manual_seed(seed)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config(family), pooling="attention",
                                                          pooling_options={"attn_size": 8}).eval()


@pytest.mark.parametrize("family", ENCODER_FAMILIES + DECODER_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lowered_copy_gives_the_outputs_of_autocast_over_float32_weights(family, dtype):
    """Every encoder parameter was lowered: embeddings, layer norms and the residual stream ran in bf16 (CPU autocast
    does not lift layer_norm to float32), so predict/serve computed otherwise than the out-of-fold scores."""
    model = tiny_model(family)
    low = with_encoder_in(model, dtype)
    ids, mask = batch([9, 5, 12], seed=1)
    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype):
        reference = model(input_ids=ids, attention_mask=mask).logits.float()
        lowered = low(input_ids=ids, attention_mask=mask).logits.float()
    torch.testing.assert_close(lowered, reference, rtol=0, atol=1e-6)
    encoder = low.attnpool.encoder
    linear = {p.dtype for m in encoder.modules() if isinstance(m, LINEAR) for p in m.parameters(recurse=False)}
    assert linear == {dtype}, "the matrix products' weights are stored lowered (autocast would cast them anyway)"
    others = {name: p.dtype for m_name, m in encoder.named_modules() if not isinstance(m, LINEAR)
              for name, p in m.named_parameters(prefix=m_name, recurse=False)}
    assert others and set(others.values()) == {torch.float32}, others
    assert {p.dtype for p in model.parameters()} == {torch.float32}, "the float32 model is not changed"
    kept = {id(p) for p in low.parameters() if p.dtype == torch.float32}
    assert kept and kept <= {id(p) for p in model.parameters()}, "float32 parameters are shared, not copied"


def test_gpt2_projections_are_lowered_too():
    """GPT-2's projections are transformers' Conv1D (an addmm, which CPU autocast casts as it casts F.linear)."""
    low = with_encoder_in(tiny_model("gpt2"), torch.bfloat16)
    convs = [m for m in low.attnpool.encoder.modules() if isinstance(m, Conv1D)]
    assert convs and all(m.weight.dtype == m.bias.dtype == torch.bfloat16 for m in convs)


def test_a_linear_weight_tied_to_an_embedding_stays_float32():
    """A linear weight that is also an embedding is not lowered: the embedding would be lowered with it."""
    model = tiny_model("bert")
    encoder = model.attnpool.encoder
    tied = torch.nn.Linear(32, encoder.config.vocab_size, bias=False)
    tied.weight = encoder.embeddings.word_embeddings.weight
    encoder.add_module("tied_head", tied)
    low = with_encoder_in(model, torch.bfloat16).attnpool.encoder
    assert low.tied_head.weight is low.embeddings.word_embeddings.weight
    assert low.embeddings.word_embeddings.weight.dtype == torch.float32
    assert low.encoder.layer[0].attention.self.query.weight.dtype == torch.bfloat16


def ensemble_of(family: str = "bert") -> FoldEnsemble:
    return FoldEnsemble("regression", [], [tiny_model(family)], np.array([1.0]), tokenizer=None)


@pytest.fixture
def cpu_with(monkeypatch):
    """Pretend the CPU has native bf16 and/or fp16 kernels, or not."""

    def pretend(bf16: bool, fp16: bool) -> None:
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: bf16, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16, raising=False)
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: fp16, raising=False)

    return pretend


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_emulated_precision_on_a_cpu_is_warned_about_once(precision, cpu_with, caplog):
    """--precision fp16 on an AVX2 CPU predicted silently, several times slower than fp32 (training refuses it)."""
    cpu_with(bf16=False, fp16=False)
    ensemble = ensemble_of()
    with caplog.at_level(logging.INFO, logger="attnpool.predict"):
        first = ensemble.models_for(precision, "cpu")
        assert ensemble.models_for(precision, "cpu") is first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert (f"--precision {precision}: this CPU has no native {precision}, so it is emulated here and much slower "
            "than fp32") in warnings[0]
    assert "use --precision auto or fp32" in warnings[0]


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32", "auto"])
def test_a_native_or_float32_precision_is_not_warned_about(precision, cpu_with, caplog):
    cpu_with(bf16=True, fp16=True)
    with caplog.at_level(logging.INFO, logger="attnpool.predict"):
        ensemble_of().models_for(precision, "cpu")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_fp16_is_emulated_where_the_mkldnn_probe_is_missing(cpu_with, monkeypatch):
    from attnpool.precision import cpu_fp16_native, emulated_on_cpu

    cpu_with(bf16=True, fp16=True)
    assert cpu_fp16_native() and emulated_on_cpu("fp16", "cpu") is None
    monkeypatch.setattr(torch, "ops", types.SimpleNamespace())  # a torch without the private probe
    assert not cpu_fp16_native()
    assert "no native fp16" in emulated_on_cpu("fp16", "cpu")
    assert emulated_on_cpu("bf16", "cpu") is None and emulated_on_cpu("fp16", "cuda") is None
