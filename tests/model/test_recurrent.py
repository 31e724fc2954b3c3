"""The optional BiLSTM/GRU between encoder and pooler: padding exactness, save/load, optimiser groups, export."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.cli import _train_config, build_parser
from attnpool.config import TrainConfig
from attnpool.exporters import ExportError, export_onnx
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.model.recurrent import RecurrentLayer
from attnpool.training.fold import build_model
from attnpool.training.optim import parameter_groups
from model_helpers import batch, tiny_config

CELLS = ["lstm", "gru"]


def layer(cell="lstm", hidden_size=8, num_layers=1, seed=0):
    torch.manual_seed(seed)
    return RecurrentLayer(cell, hidden_size, num_layers=num_layers).eval()


def build(family="bert", **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("pooling_options", {"attn_size": 8})
    return AttnPoolForSequenceClassification.from_encoder(tiny_config(family), recurrent="lstm", **kwargs).eval()


def padded(rows, seq_len, side="right", fill=float("nan")):
    """Rows (n_i, H) placed in a (B, seq_len, H) batch on the given side, ``fill`` everywhere else."""
    hidden = torch.full((len(rows), seq_len, rows[0].shape[-1]), fill)
    mask = torch.zeros(len(rows), seq_len, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(seq_len - len(row), seq_len)
        hidden[i, span], mask[i, span] = row, 1
    return hidden, mask


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("num_layers", [1, 2])
def test_unpadded_input_gives_the_plain_bidirectional_rnn(cell, num_layers):
    rec = layer(cell, num_layers=num_layers)
    x = torch.randn(3, 6, 8)
    out = rec(x, torch.ones(3, 6, dtype=torch.long))
    torch.testing.assert_close(out, rec.rnn(x)[0])
    assert rec.rnn.hidden_size == 4 and rec.rnn.bidirectional and rec.proj is None


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("hidden_size", [8, 7])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_row_is_the_same_alone_and_in_a_padded_ragged_batch(cell, hidden_size, side):
    rec = layer(cell, hidden_size, num_layers=2)
    gen = torch.Generator().manual_seed(1)
    rows = [torch.randn(n, hidden_size, generator=gen) for n in (5, 2, 7)]
    hidden, mask = padded(rows, seq_len=9, side=side, fill=float("nan"))  # NaN padding must not leak
    out = rec(hidden, mask)
    assert out.shape == (3, 9, hidden_size) and torch.isfinite(out).all()
    assert (out[mask == 0] == 0).all()
    for i, row in enumerate(rows):
        alone = rec(row[None], torch.ones(1, len(row), dtype=torch.long))[0]
        torch.testing.assert_close(out[i][mask[i].bool()], alone, atol=1e-6, rtol=1e-5)


def test_odd_hidden_size_projects_back_to_the_pooler_width():
    rec = layer("lstm", hidden_size=7)
    assert rec.rnn.hidden_size == 4 and rec.proj is not None and rec.proj.out_features == 7


def test_real_tokens_need_not_be_contiguous():
    rec = layer("gru")
    x = torch.randn(1, 6, 8)
    mask = torch.tensor([[1, 1, 0, 1, 0, 1]])
    out = rec(x, mask)
    keep = mask[0].bool()
    torch.testing.assert_close(out[0, keep], rec(x[:, keep], torch.ones(1, 4))[0])
    assert (out[0, ~keep] == 0).all()


@pytest.mark.parametrize("cell", CELLS)
def test_all_padding_row_and_nan_padding_give_finite_outputs_and_gradients(cell):
    rec = layer(cell).train()
    hidden, mask = padded([torch.randn(4, 8), torch.randn(1, 8)], seq_len=5, fill=float("nan"))
    hidden = torch.cat([hidden, torch.full((1, 5, 8), float("inf"))])
    mask = torch.cat([mask, torch.zeros(1, 5, dtype=torch.long)])
    hidden.requires_grad_(True)
    before = hidden.detach().clone()
    out = rec(hidden, mask)
    assert (out[2] == 0).all() and torch.isfinite(out).all()
    out.sum().backward()
    assert torch.equal(hidden.detach().isnan(), before.isnan())  # the input is not written into
    for name, p in rec.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert torch.isfinite(hidden.grad).all() and (hidden.grad[mask == 0] == 0).all()


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("lengths", [(6, 6), (6, 3)])  # equal lengths: where CPU autocast would take the LSTM
def test_cpu_autocast_runs_the_rnn_in_float32_whatever_the_batch(cell, dtype, lengths):
    rec = layer(cell)
    gen = torch.Generator().manual_seed(2)
    hidden, mask = padded([torch.randn(n, 8, generator=gen) for n in lengths], seq_len=6, fill=0.0)
    reference = rec(hidden, mask)
    with torch.autocast("cpu", dtype=dtype):
        out = rec(hidden, mask)
    assert out.dtype == torch.float32 and torch.isfinite(out).all() and (out[mask == 0] == 0).all()
    torch.testing.assert_close(out, reference)


def test_model_under_cpu_bf16_autocast_trains_with_finite_loss():
    model = build().train()
    ids, mask = batch([5, 3, 7])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, mask, labels=torch.rand(3))
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.attnpool.recurrent.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_model_logits_do_not_depend_on_batch_mates_or_padding():
    model = build("bert")
    ids, mask = batch([5, 2, 7], seq_len=10)
    together = model(ids, mask).logits
    for i, n in enumerate([5, 2, 7]):
        alone = model(ids[i : i + 1, :n], mask[i : i + 1, :n]).logits
        torch.testing.assert_close(together[i : i + 1], alone, atol=1e-5, rtol=1e-4)


def test_decoder_only_left_padding_equals_right_padding():
    model = build("llama")
    right = model(*batch([4, 6, 2], seq_len=7, side="right")).logits
    left = model(*batch([4, 6, 2], seq_len=7, side="left")).logits
    torch.testing.assert_close(left, right, atol=1e-5, rtol=1e-4)


def test_recurrent_changes_the_prediction_and_is_absent_by_default():
    plain = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling_options={"attn_size": 8})
    assert plain.attnpool.recurrent is None and plain.config.recurrent is None
    assert not any("recurrent" in k for k in plain.state_dict())  # older saved models load unchanged
    model = build()
    assert any(k.startswith("attnpool.recurrent.rnn.") for k in model.state_dict())
    ids, mask = batch([5, 3])
    hidden = model.attnpool.encoder(ids, attention_mask=mask).last_hidden_state
    into_pooler = model.attnpool.recurrent(hidden, mask)
    pooled = model.attnpool.pooler(into_pooler, mask)
    torch.testing.assert_close(model.attnpool(ids, mask).pooler_output, pooled)


@pytest.mark.parametrize("cls", [AttnPoolForSequenceClassification, AttnPoolModel])
def test_save_and_load_give_identical_predictions(tmp_path, cls):
    torch.manual_seed(0)
    model = cls.from_encoder(tiny_config("bert"), pooling_options={"attn_size": 8}, recurrent="gru",
                             recurrent_layers=2).eval()
    ids, mask = batch([6, 2, 4])
    key = "logits" if cls is AttnPoolForSequenceClassification else "pooler_output"
    before = getattr(model(ids, mask), key)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["recurrent"], saved["recurrent_layers"]) == ("gru", 2)
    assert "bidirectional `gru`, 2 layer(s)" in (tmp_path / "README.md").read_text()
    loaded = cls.from_pretrained(tmp_path)
    assert isinstance(loaded._base().recurrent, RecurrentLayer) and loaded._base().recurrent.num_layers == 2
    torch.testing.assert_close(getattr(loaded(ids, mask), key), before, atol=0, rtol=0)


def test_averaged_layers_feed_the_recurrent_layer():
    model = build(pooling_layers="all")
    ids, mask = batch([5, 3])
    states = model.attnpool.encoder(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    mean = torch.stack(states[1:]).mean(0)
    pooled = model.attnpool.pooler(model.attnpool.recurrent(mean, mask), mask)
    torch.testing.assert_close(model.attnpool(ids, mask).pooler_output, pooled)


def test_multi_layer_pooler_is_refused():
    with pytest.raises(ValueError, match=r"recurrent='lstm'.*weighted_layer.*needs_all_layers"):
        AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="weighted_layer",
                                                       recurrent="lstm")


@pytest.mark.parametrize(("options", "message"), [
    ({"recurrent": "rnn"}, r"recurrent must be one of lstm, gru or None, got 'rnn'"),
    ({"recurrent": "lstm", "recurrent_layers": 0}, r"recurrent_layers must be an integer >= 1, got 0"),
    ({"recurrent": "lstm", "recurrent_layers": 1.5}, r"recurrent_layers must be an integer >= 1"),
    ({"recurrent_layers": 2}, r"recurrent_layers=2 needs a recurrent layer"),
])
def test_config_rejects_bad_values(options, message):
    with pytest.raises(ValueError, match=message):
        AttnPoolConfig(encoder=tiny_config("bert"), **options)


@pytest.mark.parametrize("pooler_lr", [None, 3e-3])
def test_recurrent_layer_trains_at_the_pooler_rate_not_the_encoder_rate(pooler_lr):
    model = build()
    groups = parameter_groups(model, lr=1e-5, head_lr=1e-3, weight_decay=0.01, llrd=0.8, pooler_lr=pooler_lr)
    rate_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    expected = 1e-3 if pooler_lr is None else pooler_lr
    recurrent = dict(model.attnpool.recurrent.named_parameters())
    assert recurrent and all(rate_of[id(p)] == expected for p in recurrent.values())
    assert all(rate_of[id(p)] == expected for p in model.attnpool.pooler.parameters())
    assert decay_of[id(recurrent["rnn.weight_ih_l0"])] == 0.01 and decay_of[id(recurrent["rnn.bias_ih_l0"])] == 0.0


def test_export_refuses_a_recurrent_model_naming_the_option(tmp_path):
    with pytest.raises(ExportError, match=r"recurrent='lstm'.*--backend torch"):
        export_onnx(build(), tmp_path / "model.onnx")
    assert not any(tmp_path.iterdir())


def test_train_options_reach_the_model():
    args = build_parser().parse_args(["train", "--train-file", "a.csv", "--text-cols", "a", "--recurrent", "gru",
                                      "--recurrent-layers", "2"])
    cfg = _train_config(args)
    assert (cfg.recurrent, cfg.recurrent_layers) == ("gru", 2)
    cfg = TrainConfig(model=tiny_config("bert"), recurrent="gru", recurrent_layers=2, pooling_options={"attn_size": 8})
    model = build_model(cfg, SimpleNamespace(classes=None, num_outputs=1), fold=0)
    rec = model.attnpool.recurrent
    assert (rec.cell, rec.num_layers, model.config.recurrent_layers) == ("gru", 2, 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--recurrent", "rnn"])


@pytest.mark.parametrize("options", [{"recurrent_layers": 2}, {"recurrent": "lstm", "recurrent_layers": 0}])
def test_train_config_validation_rejects_bad_recurrent_layers(options):
    cfg = TrainConfig(train_file="a.csv", text_cols=["a"], **options)
    with pytest.raises(ValueError, match="recurrent_layers must be >= 1 and needs recurrent"):
        cfg.validate()


def test_bfloat16_weights_run_in_bfloat16():
    rec = layer("lstm")
    hidden, mask = padded([torch.randn(5, 8), torch.randn(2, 8)], seq_len=5, fill=0.0)
    reference = rec(hidden, mask)
    out = rec.to(torch.bfloat16)(hidden.bfloat16(), mask)
    assert out.dtype == torch.bfloat16 and (out[mask == 0] == 0).all()
    torch.testing.assert_close(out.float(), reference, atol=0.05, rtol=0.05)
