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
