"""The encoder's own pooler (BERT's ``pooler.dense``...), which attnpool's pooler replaces, is dropped.

Kept, it never got a gradient, and DDP without ``find_unused_parameters`` (transformers' Trainer under activation
checkpointing) stopped at the second step: "Parameter indices which did not receive grad".
"""

from __future__ import annotations

import gc
import tempfile

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from transformers import AlbertConfig, AutoModel, DistilBertConfig, MPNetConfig, XLMRobertaConfig

from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel
from model_helpers import COMMON, DECODER_FAMILIES, ENCODER_FAMILIES, batch, save_tiny_encoder, tiny_config

# Families with a pooler of their own that model_helpers does not build.
MORE = {
    "xlm-roberta": lambda: XLMRobertaConfig(**COMMON, max_position_embeddings=70, pad_token_id=1),
    "mpnet": lambda: MPNetConfig(**COMMON, max_position_embeddings=70, pad_token_id=1),
    "albert": lambda: AlbertConfig(**COMMON, embedding_size=16, max_position_embeddings=64),
    "distilbert": lambda: DistilBertConfig(vocab_size=COMMON["vocab_size"], dim=32, n_layers=2, n_heads=2,
                                           hidden_dim=37, max_position_embeddings=64),
}
FAMILIES = ENCODER_FAMILIES + DECODER_FAMILIES + list(MORE)


def encoder_config(family):
    return MORE[family]() if family in MORE else tiny_config(family)


def build(family="bert"):
    torch.manual_seed(0)
    # xavier: the default start zeroes the scoring layer (a zero gradient is still a gradient; this is clearer)
    return AttnPoolForSequenceClassification.from_encoder(encoder_config(family),
                                                          pooling_options={"attn_size": 8, "init": "xavier"})


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_gets_a_gradient(family):
    model = build(family).train()
    ids, mask = batch([5, 3, 7])
    model(input_ids=ids, attention_mask=mask, labels=torch.rand(3)).loss.backward()
    without = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert without == []
    assert getattr(model.attnpool.encoder, "pooler", None) is None


def test_ddp_without_find_unused_parameters_trains_under_activation_checkpointing(tmp_path):
    """What transformers' Trainer does under activation checkpointing, in one process (gloo)."""
    model = build("bert").train()
    # transformers >= 5.x renamed it; the Trainer calls whichever exists
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    ids, mask = batch([5, 3, 7])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
        for _ in range(2):  # a parameter without a gradient in the first step fails the second
            ddp(input_ids=ids, attention_mask=mask, labels=torch.rand(3)).loss.backward()
        # DDP's reducer holds the process group: released after destroy_process_group, the group's destructor
        # joined gloo's threads and hung the test run (once in a clean CI run); release it while the group is alive
        del ddp
        gc.collect()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_a_checkpoint_with_the_encoder_pooler_loads_quietly_and_predicts_the_same(family, tmp_path):
    """Folders saved before the pooler was dropped hold ``attnpool.encoder.pooler.*``: ignored, not reported."""
    model = build(family).eval()
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    hidden = model.config.hidden_size
    weights["attnpool.encoder.pooler.weight" if family == "albert" else "attnpool.encoder.pooler.dense.weight"] = (
        torch.randn(hidden, hidden))
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ids, mask = batch([5, 3, 7])
    with torch.no_grad():
        expected = model(ids, mask)
    loaded, info = AttnPoolForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert info["unexpected_keys"] == set() and info["missing_keys"] == set()
    base, base_info = AttnPoolModel.from_pretrained(tmp_path, output_loading_info=True)
    assert base_info["unexpected_keys"] == {"head.out.weight", "head.out.bias"}  # the bare model has no head
    assert base_info["missing_keys"] == set()
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids, mask).logits, expected.logits)
        assert torch.equal(base.eval()(ids, mask).pooler_output, model.attnpool(ids, mask).pooler_output)


def test_a_pretrained_encoder_loses_its_pooler_and_the_saved_model_reloads_it_exactly(tmp_path):
    folder = save_tiny_encoder(tmp_path / "encoder")
    assert any(name.startswith("pooler.") for name, _ in AutoModel.from_pretrained(folder).named_parameters())
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(folder).eval()
    assert not any(".pooler." in name for name, _ in model.attnpool.encoder.named_parameters())
    with tempfile.TemporaryDirectory() as saved:
        model.save_pretrained(saved)
        assert not any("encoder.pooler" in key for key in load_file(f"{saved}/model.safetensors"))
        loaded = AttnPoolForSequenceClassification.from_pretrained(saved).eval()
    ids, mask = batch([5, 3, 7])
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask).logits, model(ids, mask).logits)
