"""What loading and building say when given the wrong thing: a saved attnpool model as the encoder, a subfolder that
is not there, a file instead of its folder, a peft adapter; and the card of a model that has no ONNX export."""

from __future__ import annotations

import json
import os

import pytest
import torch
import transformers

from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.model.card import CARD_FILE
from attnpool.model.sources import check_hub_source
from model_helpers import batch, tiny_config

NEW_HEAD = "AttnPoolForSequenceClassification.from_pretrained("


@pytest.fixture
def saved(tmp_path):
    """A saved one-output (regression) model folder."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling_options={"attn_size": 8})
    model.save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def test_from_encoder_refuses_a_saved_attnpool_folder_and_points_to_from_pretrained(saved, monkeypatch):
    """Refused from its config, before its weights load (they loaded, with transformers' load report, first)."""
    with monkeypatch.context() as patch:
        patch.setattr(transformers.AutoModel, "from_pretrained", lambda *a, **k: pytest.fail("weights loaded"))
        with pytest.raises(ValueError, match="is a saved attnpool model") as err:
            AttnPoolForSequenceClassification.from_encoder(saved, num_labels=2)
    message = str(err.value)
    assert f"{NEW_HEAD}{str(saved)!r}, num_labels=N, ignore_mismatched_sizes=True)" in message
    assert "from_encoder(model.attnpool.encoder, ...)" in message
    # what the message recommends works: the encoder and pooler kept, a new 3-class head
    model = AttnPoolForSequenceClassification.from_pretrained(saved, num_labels=3, ignore_mismatched_sizes=True)
    old = AttnPoolForSequenceClassification.from_pretrained(saved)
    assert model.config.num_labels == 3 and model.config.problem_type is None
    assert model.head.out.out_features == 3
    for name, value in old.attnpool.state_dict().items():
        assert torch.equal(model.attnpool.state_dict()[name], value), name
    ids, mask = batch([5, 3], seed=1)
    loss = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2])).loss
    assert torch.isfinite(loss)
    # and so does the other way: its encoder under a new pooler and head
    rebuilt = AttnPoolForSequenceClassification.from_encoder(old.attnpool.encoder, num_labels=2)
    assert type(rebuilt.attnpool.encoder).__name__ == "BertModel"


def test_from_encoder_refuses_an_attnpool_model_instance_or_config(saved):
    loaded = AttnPoolForSequenceClassification.from_pretrained(saved)
    for given, what in [(loaded, "AttnPoolForSequenceClassification"), (loaded.attnpool, "AttnPoolModel"),
                        (loaded.config, "AttnPoolConfig")]:
        with pytest.raises(ValueError, match=f"the {what} given is a saved attnpool model") as err:
            AttnPoolModel.from_encoder(given)
        assert f"{NEW_HEAD}{str(saved)!r}" in str(err.value)


def test_a_subfolder_that_is_not_there_is_named_with_what_the_folder_holds(saved):
    (saved / "fold_0").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(saved, subfolder="nope")
    assert str(err.value).startswith(f"subfolder 'nope' is not in {saved} (it contains: README.md, config.json, "
                                     "fold_0/, model.safetensors)")
    assert "does not exist" not in str(err.value)


@pytest.mark.parametrize("file", ["model.safetensors", "config.json"])
def test_a_file_given_as_the_model_says_it_is_a_file_and_names_its_folder(saved, file):
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(saved / file)
    assert str(err.value) == (f"the model '{saved / file}' is a file; give the folder that holds config.json and "
                              f"model.safetensors: {saved}")


def test_a_file_given_as_the_encoder_says_it_is_a_file_and_names_its_folder(tmp_path):
    tiny_config("bert").save_pretrained(tmp_path / "enc")
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolModel.from_encoder(tmp_path / "enc" / "config.json")
    assert str(err.value) == (f"the encoder '{tmp_path / 'enc' / 'config.json'}' is a file; give the folder that "
                              f"holds config.json and model.safetensors: {tmp_path / 'enc'}")


def test_a_peft_adapter_folder_gets_the_peft_recipe_with_its_base_model(tmp_path):
    adapter = tmp_path / "my-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/models/my-base",
                                                             "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(adapter)
    assert str(err.value) == (
        f"{adapter} has no config.json: it is not a saved attnpool model folder; it is a LoRA (peft) adapter, not a "
        "whole model: load its base model and put the adapter on it: model = peft.PeftModel.from_pretrained("
        f"attnpool.AttnPoolForSequenceClassification.from_pretrained('/models/my-base'), {str(adapter)!r}), then "
        "model.merge_and_unload().save_pretrained(\"my-model\", tokenizer=tokenizer) for one plain attnpool folder "
        "(README: Fine-tuning with LoRA)"
    )


def test_a_plain_folder_without_config_gets_no_peft_advice(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        AttnPoolForSequenceClassification.from_pretrained(tmp_path)
    assert str(err.value) == f"{tmp_path} has no config.json: it is not a saved attnpool model folder"


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_card_of_a_recurrent_model_offers_no_onnx_export(tmp_path, cell):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), recurrent=cell)
    model.save_pretrained(tmp_path / "m")
    text = (tmp_path / "m" / CARD_FILE).read_text(encoding="utf-8")
    assert "attnpool export" not in text
    assert (f"# no ONNX export: the recurrent={cell!r} layer (a packed sequence) does not trace to a graph; serve it "
            "with attnpool serve --backend torch") in text


def test_the_card_of_a_model_without_recurrent_offers_the_onnx_export(saved):
    text = (saved / CARD_FILE).read_text(encoding="utf-8")
    assert "attnpool export --model " in text and "no ONNX export" not in text


def test_a_file_whose_path_can_be_a_hub_name_stays_a_hub_name(tmp_path, monkeypatch):
    # transformers loads anything that is not a folder from the Hub: a file that happens to sit at that path is no
    # reason to refuse the name (an existing path is left to transformers, as before files were refused)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prajjwal1").mkdir()
    (tmp_path / "prajjwal1" / "bert-tiny").write_text("not a model")
    (tmp_path / "bert-tiny").write_text("not a model")
    assert check_hub_source("prajjwal1/bert-tiny", {}) is None
    assert check_hub_source("bert-tiny", {}, what="model") is None


@pytest.mark.parametrize("name", ["enc/config.json", "model.safetensors", "./bert-tiny", "prajjwal1/../bert-tiny",
                                  "deep/er/bert-tiny"])
def test_a_relative_file_that_cannot_be_a_hub_name_says_it_is_a_file(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    for path in ("enc/config.json", "model.safetensors", "bert-tiny", "deep/er/bert-tiny"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    (tmp_path / "prajjwal1").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        check_hub_source(name, {})
    folder = os.path.dirname(os.path.abspath(name))
    assert str(err.value) == (f"the encoder {name!r} is a file; give the folder that holds config.json and "
                              f"model.safetensors: {folder}")
