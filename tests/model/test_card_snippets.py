"""The card's pipeline snippet runs as the model was trained: truncated to the trained max_length."""

from __future__ import annotations

import re

import torch

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE, model_card
from attnpool.model.card_facts import TrainingFacts
from attnpool.model.card_sections import PLACEHOLDER
from model_helpers import tiny_config, tiny_tokenizer


def _pipeline_code(folder):
    text = (folder / CARD_FILE).read_text(encoding="utf-8")
    [code] = re.findall(r"### Pipeline\n\n```python\n(.*?)```", text, re.S)
    return code


def test_the_pipeline_snippet_truncates_to_the_trained_max_length(tmp_path):
    """classifier("a text") cut nothing (the tokenizer's model_max_length is huge): a longer text than trained got
    other scores than attnpool predict, and one past the 64 positions crashed."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2).eval()
    model.save_pretrained(tmp_path, tokenizer=tiny_tokenizer(),
                          model_card=model_card(model.config, training=TrainingFacts(recipe={"max_length": 12})))
    code = _pipeline_code(tmp_path)
    long = " ".join(["the cat sat on the red mat"] * 15)  # 105 words: past 12 tokens and past the 64 positions
    namespace: dict = {}
    exec(code.replace(PLACEHOLDER, str(tmp_path)).replace('classifier("a text"', f"result = classifier({long!r}"),
         namespace)
    [top] = namespace["result"]
    batch = tiny_tokenizer()(long, truncation=True, max_length=12, return_tensors="pt")
    with torch.no_grad():
        probs = model(**batch).logits.softmax(-1)[0]
    assert model.config.id2label[int(probs.argmax())] == top["label"]
    assert abs(float(probs.max()) - top["score"]) < 1e-5
    assert '"max_length": 12' in code


def test_the_pipeline_snippet_of_a_model_trained_on_pairs_calls_it_with_a_pair(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2)
    model.save_pretrained(tmp_path, model_card=model_card(model.config, training=TrainingFacts(
        text="`first`, `second`", recipe={"max_length": 12})))
    assert ('classifier({"text": "the first text", "text_pair": "the second text"}, **cut)'
            in _pipeline_code(tmp_path))
