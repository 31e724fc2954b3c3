"""Exports that meet something else in their folder: another graph with its tokenizer and card, a peft model, a peft
adapter folder; and the ONNX card's snippet for a model trained on text pairs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from attnpool.exporters import ExportError, export_onnx, resolve_model_dir
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE, model_card
from attnpool.model.card_facts import TrainingFacts
from attnpool.model.card_sections import PLACEHOLDER
from attnpool.model.sources import adapter_advice
from model_helpers import tiny_config, tiny_tokenizer

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _fake_exporter(monkeypatch):
    """A stand-in for the (slow) exporter: what happens to the files around the graph is under test."""
    import attnpool.exporters.onnx as export_module

    class Program:
        model = type("Proto", (), {"metadata_props": {}, "opset_imports": {"": 20}})()

        @staticmethod
        def save(path, **kwargs):
            path.write_bytes(b"onnx")

    monkeypatch.setattr(export_module, "_export_program", lambda *args: Program())


def _card_graph(folder):
    """The graph the folder's card describes."""
    return re.findall(r"^- \*\*Graph:\*\* `([^`]+)`", (folder / CARD_FILE).read_text(encoding="utf-8"), re.M)


def _other_tokenizer():
    vocab = {"<pad>": 0, "<unk>": 1, "zebra": 2, "yak": 3, "xylophone": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def _model(seed):
    torch.manual_seed(seed)
    return AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2).eval()


def test_a_second_graph_with_another_tokenizer_is_refused_and_the_first_keeps_its_own(tmp_path, monkeypatch):
    """b.onnx beside a.onnx replaced a's tokenizer files and card: a.onnx then read "cat sat" as [UNK] [UNK]."""
    _fake_exporter(monkeypatch)
    folder = tmp_path / "serve"
    export_onnx(_model(0), folder / "a.onnx", tokenizer=tiny_tokenizer(), verify=False)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    ids = AutoTokenizer.from_pretrained(folder)("cat sat")["input_ids"]
    with pytest.raises(ExportError, match=r"holds the graph a\.onnx with another tokenizer .*own folder"):
        export_onnx(_model(1), folder / "b.onnx", tokenizer=_other_tokenizer(), verify=False)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # nothing moved, nothing lost
    assert AutoTokenizer.from_pretrained(folder)("cat sat")["input_ids"] == ids == [2, 6, 8, 3]


def test_a_second_graph_with_the_same_tokenizer_keeps_the_first_ones_card(tmp_path, monkeypatch):
    """The same tokenizer may serve both graphs, but b.onnx's card replaced the one describing a.onnx."""
    _fake_exporter(monkeypatch)
    folder = tmp_path / "serve"
    export_onnx(_model(0), folder / "a.onnx", tokenizer=tiny_tokenizer(), verify=False)
    card = (folder / CARD_FILE).read_text(encoding="utf-8")
    assert _card_graph(folder) == ["a.onnx"]
    export_onnx(_model(1), folder / "b.onnx", tokenizer=tiny_tokenizer(), verify=False)
    assert (folder / "b.onnx").is_file() and (folder / CARD_FILE).read_text(encoding="utf-8") == card
    export_onnx(_model(0), folder / "a.onnx", tokenizer=tiny_tokenizer(), verify=False)  # a's own card: rewritten
    (folder / "a.onnx").unlink()
    export_onnx(_model(1), folder / "b.onnx", tokenizer=tiny_tokenizer(), verify=False)  # a gone: b's card now
    assert _card_graph(folder) == ["b.onnx"]


# transformers' own deprecation, of the method peft calls
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_peft_model_exports_with_its_card(tmp_path):
    """A PeftModel crashed after export and verification: model.base_model is peft's LoraModel, without a pooler."""
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_model(0), peft.LoraConfig(
        task_type=None, r=4, lora_alpha=8, target_modules=["query", "key", "value"],
        modules_to_save=["head", "attnpool.pooler"]))
    with torch.no_grad():  # lora_B starts at zero: make the adapter change the model
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    result = export_onnx(model.eval(), tmp_path / "serve" / "model.onnx", tokenizer=tiny_tokenizer())
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-4
    assert _card_graph(tmp_path / "serve") == ["model.onnx"]
    assert "## ONNX Export" in (tmp_path / "serve" / CARD_FILE).read_text(encoding="utf-8")


# transformers' own deprecation, of the method peft calls
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_peft_adapter_folder_is_named_with_how_to_merge_it_for_export(tmp_path):
    """An adapter folder was called neither a model folder nor a run: what it is, and the way out, were not said."""
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_model(0), peft.LoraConfig(task_type=None, r=4, target_modules=["query"]))
    model.save_pretrained(tmp_path / "my-lora")
    assert (tmp_path / "my-lora" / "adapter_config.json").is_file()
    (tmp_path / "my-lora" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/m/base"}))
    with pytest.raises(FileNotFoundError) as err:
        resolve_model_dir(tmp_path / "my-lora")
    # the advice from_pretrained gives (model.sources.adapter_advice), with the adapter's own base model filled in
    assert str(err.value) == (f"{tmp_path / 'my-lora'} has no config.json{adapter_advice(tmp_path / 'my-lora')}; "
                              "then export that folder: attnpool export --model my-model ...")
    assert "AttnPoolForSequenceClassification.from_pretrained('/m/base')" in str(err.value)


def test_a_model_file_given_for_its_folder_names_the_folder(tmp_path):
    """export said only "is a file"; the model loaders also name the folder to give instead."""
    model = _model(0)
    model.save_pretrained(tmp_path / "model")
    with pytest.raises(FileNotFoundError) as err:
        resolve_model_dir(tmp_path / "model" / "config.json")
    assert str(err.value) == (f"the model '{tmp_path / 'model' / 'config.json'}' is a file; give the folder that "
                              f"holds config.json and model.safetensors: {tmp_path / 'model'}")


def test_the_onnx_cards_snippet_feeds_a_text_pair_for_a_model_trained_on_pairs(tmp_path):
    """The pipeline snippet showed the pair; the ONNX one fed one text to a model trained on two."""
    model = _model(0)
    facts = TrainingFacts(text="`first`, `second`", recipe={"max_length": 16})
    model.save_pretrained(tmp_path / "model", tokenizer=tiny_tokenizer(), model_card=model_card(
        model.config, training=facts))
    export_onnx(tmp_path / "model", tmp_path / "serve" / "model.onnx", verify=False)
    text = (tmp_path / "serve" / CARD_FILE).read_text(encoding="utf-8")
    [code] = re.findall(r"### ONNX Runtime \(this folder\).*?```python\n(.*?)```", text, re.S)
    assert 'tokenizer(["the first text"], ["the second text"], padding=True, truncation=True, max_length=16' in code
    namespace: dict = {}
    exec(code.replace(PLACEHOLDER, str(tmp_path / "serve")), namespace)
    batch = tiny_tokenizer()(["the first text"], ["the second text"], truncation=True, max_length=16,
                             return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    assert (namespace["batch"]["input_ids"] == 3).sum() == 2  # [SEP] after each text of the pair
    assert abs(namespace["logits"] - expected).max() < 1e-4
