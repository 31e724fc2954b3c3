"""What the model does with its encoder: re-initialised and frozen layers, its dtype, its layers and mask checked."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.encoders import encoder_layers
from model_helpers import DECODER_FAMILIES, batch, tiny_config


def build(family="bert", **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("pooling_options", {"attn_size": 16})
    return AttnPoolForSequenceClassification.from_encoder(tiny_config(family), **kwargs)


@pytest.mark.parametrize("family", ["bert", "llama", "gpt2", "modernbert"])
def test_reinit_top_layers_starts_the_top_layer_as_a_new_encoder_does(family, tmp_path):
    # GPT-2 and ModernBERT scale their output projections by depth (set at the parent module), ModernBERT draws
    # from a truncated normal: visited parent-first, the child's plain normal(0.02) overwrote both
    torch.manual_seed(0)
    source = AutoModel.from_config(tiny_config(family))  # a fresh encoder: the reference of a new layer's init
    source.save_pretrained(tmp_path)  # and a "pre-trained" folder
    torch.manual_seed(1)
    model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path), reinit_layers=1)
    config = model.attnpool.encoder.config
    top, reference = encoder_layers(model.attnpool.encoder)[-1], encoder_layers(source)[-1]
    checked = 0
    for (name, new), (_, old) in zip(top.named_parameters(), reference.named_parameters(), strict=True):
        if new.ndim < 2:
            continue
        checked += 1
        assert not torch.equal(new, old), name
        assert new.std().item() == pytest.approx(old.std().item(), rel=0.15), name
        if family == "modernbert":  # truncated at initializer_cutoff_factor standard deviations
            assert new.abs().max() <= config.initializer_cutoff_factor * config.initializer_range, name
    assert checked >= 4
    bottom = encoder_layers(model.attnpool.encoder)[0].state_dict()
    assert all(torch.equal(value, encoder_layers(source)[0].state_dict()[key]) for key, value in bottom.items())


@pytest.mark.parametrize("family", ["bert", "electra", "deberta-v3", "modernbert", "llama", "gpt2"])
def test_freeze_layers_keeps_what_feeds_the_frozen_layers_fixed(family):
    # GPT-2's position embeddings, ELECTRA's embeddings_project, DeBERTa's relative embeddings and their norm lie
    # outside the `embeddings` module and kept training
    model = build(family, freeze_layers=1, pooling_options={"attn_size": 16, "init": "xavier"})
    ids, mask = batch([6, 4])

    def hidden_states():
        model.eval()
        with torch.no_grad():
            return model.attnpool(ids, mask, output_hidden_states=True).hidden_states

    before = hidden_states()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model.train()
    model(ids, mask, labels=torch.tensor([0.1, 0.9])).loss.backward()
    optimizer.step()
    after = hidden_states()
    assert torch.equal(before[0], after[0])  # the embedding output
    assert torch.equal(before[1], after[1])  # the frozen first layer's
    assert not torch.equal(before[2], after[2])  # the second layer trained


def test_freeze_layers_zero_freezes_the_embeddings_alone_and_all_leaves_the_final_norm():
    model = build("gpt2", freeze_layers=0)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == ["attnpool.encoder.wte.weight", "attnpool.encoder.wpe.weight"]
    model.freeze_layers(2)  # the final norm reads the top layer's output: it is none of the layers
    trained = [n for n, p in model.attnpool.encoder.named_parameters() if p.requires_grad]
    assert trained == ["ln_f.weight", "ln_f.bias"]


@pytest.mark.parametrize("source", ["config", "folder", "built"])
def test_a_bf16_encoder_gets_a_bf16_pooler_and_head_as_loading_in_bf16_does(source, tmp_path):
    # the pooler and head stayed float32: "mat1 and mat2 must have the same dtype" at the first forward
    torch.manual_seed(0)
    bf16 = {"dtype": torch.bfloat16}
    if source == "config":
        model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), encoder_kwargs=bf16)
    elif source == "folder":
        AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path / "encoder")
        model = AttnPoolForSequenceClassification.from_encoder(str(tmp_path / "encoder"), encoder_kwargs=bf16)
    else:
        model = AttnPoolForSequenceClassification.from_encoder(AutoModel.from_config(tiny_config("bert"), **bf16))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    ids, mask = batch([5, 3])
    out = model.eval()(ids, mask, labels=torch.tensor([0.2, 0.5]))
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    model.save_pretrained(tmp_path / "model")
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "model", dtype=torch.bfloat16).eval()
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    assert out.logits.dtype == loaded(ids, mask).logits.dtype == torch.float32


def test_the_pooler_and_head_go_where_a_built_encoder_is():
    """A GPU encoder got a CPU pooler and head (the meta device stands in for the GPU here)."""
    with torch.device("meta"):
        encoder = AutoModel.from_config(tiny_config("bert"))
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling_options={"attn_size": 16})
    assert {p.device.type for p in model.parameters()} == {"meta"}
    on_cpu = AttnPoolForSequenceClassification.from_encoder(AutoModel.from_config(tiny_config("bert")))
    assert {p.device.type for p in on_cpu.parameters()} == {"cpu"}


def test_an_encoder_placed_by_accelerate_leaves_the_pooler_and_head_where_they_are(tmp_path):
    """An offloaded encoder (device_map, its last layer on disk: parameters on meta) took the pooler and head to meta,
    their weights lost: its hook hands the hidden states back on the inputs' device."""
    AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path / "encoder")
    device_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "pooler": "cpu"}
    encoder = AutoModel.from_pretrained(tmp_path / "encoder", device_map=device_map,
                                        offload_folder=str(tmp_path / "offload"))
    model = AttnPoolForSequenceClassification.from_encoder(encoder, num_labels=2).eval()
    assert {p.device.type for p in [*model.attnpool.pooler.parameters(), *model.head.parameters()]} == {"cpu"}
    ids, mask = batch([5, 3])
    assert torch.isfinite(model(ids, mask).logits).all()


@pytest.mark.parametrize("layers", [[], [5], [-4], [0, 3]])
def test_pooling_layers_outside_the_hidden_states_are_refused(layers):
    with pytest.raises(ValueError, match="pooling_layers"):
        build("bert", pooling_layers=layers)


def test_pooling_layers_at_both_ends_of_the_hidden_states_pool():
    model = build("bert", pooling_layers=[-3, 0, 2, -1]).eval()  # 2 layers: 3 hidden states, the embeddings first
    ids, mask = batch([5, 3])
    assert torch.isfinite(model(ids, mask).logits).all()


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_an_attention_mask_not_shaped_as_the_input_is_refused(family):
    # a 4-D mask crashed deep in decoder-only encoders (positions counted over it came out 4-D)
    model = build(family).eval()
    ids, mask = batch([5, 3])
    for wrong in (mask[:, None, None, :].bool(), mask[:, :-1]):
        with pytest.raises(ValueError, match=r"attention_mask .*\(B, T\)"):
            model(ids, wrong)


def test_mpnets_relative_attention_bias_is_frozen_and_decayed_with_the_embeddings():
    """MPNet's encoder.relative_attention_bias feeds every layer (all-mpnet-base-v2): freeze_layers left it trainable
    and layer-wise decay gave it the top layer's rate."""
    from transformers import MPNetConfig

    from attnpool.training.optim import parameter_groups

    config = MPNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=37, max_position_embeddings=64)
    frozen = AttnPoolForSequenceClassification.from_encoder(config, num_labels=1, freeze_layers=1)
    bias = {n: p for n, p in frozen.named_parameters() if "relative_attention_bias" in n}
    assert len(bias) == 1 and not any(p.requires_grad for p in bias.values())
    model = AttnPoolForSequenceClassification.from_encoder(config, num_labels=1)
    rates = {id(p): g["lr"] for g in parameter_groups(model, 1e-4, 1e-3, 0.0, llrd=0.5) for p in g["params"]}
    named = dict(model.named_parameters())
    embeddings = rates[id(named["attnpool.encoder.embeddings.word_embeddings.weight"])]
    assert rates[id(named["attnpool.encoder.encoder.relative_attention_bias.weight"])] == embeddings == 1e-4 * 0.5**2
