"""``PredictionHead``: multi-sample dropout, the optional hidden layer and the initialisation."""

from __future__ import annotations

import torch
from torch import nn

from attnpool.model import PredictionHead


def test_multi_sample_dropout_gives_k_outputs_in_training_and_one_deterministic_output_in_eval():
    torch.manual_seed(0)
    head = PredictionHead(32, 3, dropout=0.5, multi_sample_dropout=4, hidden_size=8)
    pooled = torch.randn(2, 32)
    samples = head.train()(pooled)
    assert len(samples) == 4 and all(s.shape == (2, 3) for s in samples)
    assert not torch.equal(samples[0], samples[1])  # independent dropout masks
    head.eval()
    (first,), (second,) = head(pooled), head(pooled)
    assert torch.equal(first, second)
    body = head.body(pooled)  # eval: dropout is the identity
    torch.testing.assert_close(first, head.out(body))


def test_linear_head_and_hidden_layer():
    linear = PredictionHead(32, 2)
    assert isinstance(linear.body, nn.Identity) and linear.out.in_features == 32
    hidden = PredictionHead(32, 2, hidden_size=8)
    assert [type(m) for m in hidden.body] == [nn.Linear, nn.GELU] and hidden.out.in_features == 8


def test_normal_weights_with_the_encoder_s_std_and_zero_biases():
    torch.manual_seed(0)
    head = PredictionHead(512, 256, hidden_size=512, init_std=0.05)
    for layer in (head.body[0], head.out):
        assert abs(layer.weight.std().item() - 0.05) < 0.005
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))


def test_the_output_layer_computes_in_float32_under_autocast_and_with_bf16_weights():
    torch.manual_seed(0)
    head = PredictionHead(64, 1).eval()
    pooled = torch.randn(512, 64).to(torch.bfloat16).float()  # a bf16-exact input: only the output layer differs
    reference = pooled @ head.out.weight.T + head.out.bias
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (under_autocast,) = head(pooled)
    assert under_autocast.dtype == torch.float32
    torch.testing.assert_close(under_autocast, reference, rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = head.out(pooled)  # what an autocast nn.Linear gives: scores in bf16's 8 significant bits
    assert plain.dtype == torch.bfloat16 and plain.unique().numel() < under_autocast.unique().numel()
    bf16 = PredictionHead(64, 1).eval()
    bf16.load_state_dict(head.state_dict())
    bf16.to(torch.bfloat16)  # the prediction engine's bf16 weights
    (out,) = bf16(pooled.to(torch.bfloat16))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, pooled @ bf16.out.weight.float().T + bf16.out.bias.float(), rtol=1e-5, atol=1e-6)
