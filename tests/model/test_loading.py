"""Loading: safetensors only (an index that names pickles is refused), weights and problem types a checkpoint lacks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModel

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification, AttnPoolModel
from model_helpers import batch, tiny_config


def pickled_shards(folder, weights_file="model.safetensors"):
    """Turn a saved folder into one whose safetensors index maps every weight to a pickle (and a decoy file)."""
    state = load_file(folder / weights_file)
    (folder / weights_file).unlink()
    torch.save(state, folder / "shard.bin")
    index = {"metadata": {}, "weight_map": {key: "shard.bin" for key in state}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "decoy.safetensors").write_bytes(b"")  # passed the "any *.safetensors in the folder" check


def test_a_model_folder_whose_safetensors_index_names_pickles_is_refused(tmp_path, monkeypatch):
    """use_safetensors=True had transformers torch.load the .bin shards an index named: a pickle can run code."""
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    pickled_shards(tmp_path)
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: pytest.fail("a pickle was loaded"))
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json maps weights to 'shard\.bin'.*Convert"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)


def test_an_encoder_folder_whose_safetensors_index_names_pickles_is_refused(tmp_path, monkeypatch):
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path)
    pickled_shards(tmp_path)
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: pytest.fail("a pickle was loaded"))
    with pytest.raises(ValueError, match=r"index model\.safetensors\.index\.json maps weights to 'shard\.bin'"):
        AttnPoolForSequenceClassification.from_encoder(str(tmp_path))


def test_a_config_naming_pickled_weights_is_refused(tmp_path):
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "transformers_weights": "adapter_model.bin"}))
    with pytest.raises(ValueError, match="transformers_weights names 'adapter_model.bin'"):
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)


def test_sharded_safetensors_still_load(tmp_path):
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).eval()
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ids, mask = batch([5, 3])
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask).logits, model(ids, mask).logits)


def test_a_pooler_buffer_the_checkpoint_lacks_gets_its_configured_value(tmp_path):
    """GeM with a fixed p keeps p as a buffer: it was left uninitialised memory (p = 2.8e-13, not 4)."""
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path)
    loaded = AttnPoolForSequenceClassification.from_pretrained(
        tmp_path, pooling={"type": "gem", "learnable_p": False, "p": 4.0})
    assert "p_param" in dict(loaded.attnpool.pooler.named_buffers())
    assert loaded.attnpool.pooler.p_param.item() == 4.0


def test_a_built_encoder_keeps_the_weights_set_on_it():
    """The wrapper's post_init drew an embedding swapped into the encoder anew (word vectors lost)."""
    for cls in (AttnPoolModel, AttnPoolForSequenceClassification):
        torch.manual_seed(0)
        encoder = AutoModel.from_config(tiny_config("bert"))
        vectors = torch.randn(encoder.get_input_embeddings().weight.shape) * 5
        encoder.set_input_embeddings(nn.Embedding.from_pretrained(vectors.clone(), freeze=False, padding_idx=0))
        before = {key: value.clone() for key, value in encoder.state_dict().items()}
        model = cls.from_encoder(encoder)
        after = model._base().encoder.state_dict()
        assert torch.equal(after["embeddings.word_embeddings.weight"], vectors), cls.__name__
        assert all(torch.equal(after[key], value) for key, value in before.items() if key in after), cls.__name__


def test_an_embedding_model_sets_no_problem_type():
    """AttnPoolModel has no head: "regression" in its config went to every head later put on its folder."""
    assert AttnPoolModel.from_encoder(tiny_config("bert")).config.problem_type is None
    assert AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).config.problem_type == "regression"


def test_a_regression_folder_re_headed_for_classes_takes_class_labels(tmp_path):
    """from_pretrained(folder, num_labels=3) kept the saved "regression": the 3-output model refused int labels."""
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert")).save_pretrained(tmp_path / "one")
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "one", num_labels=3,
                                                               ignore_mismatched_sizes=True)
    assert loaded.config.problem_type is None
    ids, mask = batch([5, 3, 4])
    assert torch.isfinite(loaded(ids, mask, labels=torch.tensor([0, 2, 1])).loss)
    assert loaded.config.problem_type == "single_label_classification"
    # classes named, transformers' other way to give num_labels: it kept "regression" and refused the class labels
    named = AttnPoolForSequenceClassification.from_pretrained(
        tmp_path / "one", id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2},
        ignore_mismatched_sizes=True)
    assert named.config.num_labels == 3 and named.config.problem_type is None
    assert torch.isfinite(named(ids, mask, labels=torch.tensor([0, 2, 1])).loss)
    # several regression targets reloaded as they were, or with a problem type given, keep it
    torch.manual_seed(0)
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=3,
                                                   problem_type="regression").save_pretrained(tmp_path / "three")
    again = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "three", num_labels=3)
    assert again.config.problem_type == "regression"
    kept = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "one", num_labels=2, problem_type="regression",
                                                             ignore_mismatched_sizes=True)
    assert kept.config.problem_type == "regression"
    # a regression saved with several outputs (asked for) re-headed with other outputs stays one: float targets
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2,
                                                   problem_type="regression").save_pretrained(tmp_path / "two")
    wider = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "two", num_labels=3,
                                                              ignore_mismatched_sizes=True)
    assert wider.config.problem_type == "regression"
    assert torch.isfinite(wider(ids, mask, labels=torch.randn(3, 3) * 4).loss)


def test_vocab_size_is_the_encoders_and_is_saved_once(tmp_path):
    """peft's save_embedding_layers="auto" compares config.vocab_size, which the outer config lacked."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"))
    vocab = model.config.encoder.vocab_size
    assert model.config.vocab_size == vocab
    model.resize_token_embeddings(vocab + 5)
    assert model.config.vocab_size == model.config.encoder.vocab_size == vocab + 5
    assert "vocab_size" not in model.config.to_dict() and "vocab_size" not in model.config.to_diff_dict()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "vocab_size" not in saved and saved["encoder"]["vocab_size"] == vocab + 5
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.vocab_size == vocab + 5
    assert type(loaded.config).from_dict(loaded.config.to_dict()).to_dict() == loaded.config.to_dict()


def test_a_top_level_vocab_size_is_the_encoders_as_attnpool_saved_a_resize_before(tmp_path):
    """attnpool saved a resized vocabulary at the top of config.json before 2026-12-06 (the encoder's kept the old
    size): such a folder loads with the resized size; without an encoder, a vocab_size is not refused."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"))
    vocab = model.config.encoder.vocab_size
    model.resize_token_embeddings(vocab + 5)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["encoder"]["vocab_size"] = vocab  # as the earlier attnpool wrote it
    (tmp_path / "config.json").write_text(json.dumps({**saved, "vocab_size": vocab + 5}))
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.vocab_size == vocab + 5
    assert loaded.attnpool.encoder.get_input_embeddings().weight.shape[0] == vocab + 5
    assert AttnPoolConfig(vocab_size=5).vocab_size is None
