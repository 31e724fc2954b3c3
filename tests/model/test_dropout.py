"""CPUDropout: nn.Dropout's keep rate and scaling, its gradient, seeded repeats; use_cpu_dropout's swap."""

import pytest
import torch
from torch import nn

from attnpool.model.dropout import CPUDropout, use_cpu_dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keeps_one_minus_p_and_scales_the_kept(p, dtype):
    x = torch.ones(400, 1000, dtype=dtype)
    out = CPUDropout(p).train()(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005  # 400,000 draws: 5 standard errors and more
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    rows = kept.float().mean(1)  # no structure along the rows (the 16-bit slices of one 64-bit draw)
    assert rows.std().item() < 0.05 and abs(kept[:, ::4].float().mean().item() - (1 - p)) < 0.01


def test_gradient_is_the_mask_times_the_scale_and_odd_shapes_work():
    x = torch.randn(3, 5, 7).transpose(0, 2).requires_grad_()  # non-contiguous, 105 elements (not a multiple of 4)
    out = CPUDropout(0.3).train()(x)
    out.sum().backward()
    mask = (out.detach() != 0).float()
    torch.testing.assert_close(x.grad, mask / 0.7)
    torch.testing.assert_close(out.detach(), x.detach() * mask / 0.7)


def test_seeded_repeats_eval_identity_and_edge_rates():
    x = torch.randn(64, 64)
    drop = CPUDropout(0.2).train()
    torch.manual_seed(3)
    first = drop(x)
    torch.manual_seed(3)
    assert torch.equal(drop(x), first)
    assert not torch.equal(drop(x), first)
    assert drop.eval()(x) is x
    assert CPUDropout(0.0).train()(x) is x
    assert torch.count_nonzero(CPUDropout(1.0).train()(x)) == 0


class Special(nn.Dropout):
    pass


def test_use_cpu_dropout_swaps_plain_dropout_only(monkeypatch):
    monkeypatch.delenv("ATTNPOOL_CPU_DROPOUT", raising=False)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.3).eval(), Special(0.2)),
                          nn.AlphaDropout(0.1))
    assert use_cpu_dropout(model) == 2
    assert type(model[1]) is CPUDropout and model[1].p == 0.1 and model[1].training
    assert type(model[2][0]) is CPUDropout and model[2][0].p == 0.3 and not model[2][0].training
    assert type(model[2][1]) is Special and type(model[3]) is nn.AlphaDropout
    assert use_cpu_dropout(model) == 0  # already swapped


def test_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setenv("ATTNPOOL_CPU_DROPOUT", "0")
    model = nn.Sequential(nn.Dropout(0.1))
    assert use_cpu_dropout(model) == 0 and type(model[0]) is nn.Dropout
