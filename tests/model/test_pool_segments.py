"""`pool_segments`: the pooler weighs the first segments of the input only (the row's own text, not the group context
after it), while the encoder reads every token; padding-invariant, saved and loaded, exported, and refused where it
cannot work."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from attnpool.config import TrainConfig
from attnpool.data import DataError
from attnpool.data.context import own_segments
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from model_helpers import save_tiny_encoder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def tokenizer(encoder):
    return AutoTokenizer.from_pretrained(encoder)


@pytest.fixture(scope="module")
def model(encoder, tokenizer):
    torch.manual_seed(0)
    return AttnPoolForSequenceClassification.from_encoder(
        encoder, pooling="attention", pooling_options={"attn_size": 8, "init": "xavier"}, pool_segments=2,
        segment_token_id=tokenizer.sep_token_id).eval()


TEXTS = ["cat dog [SEP] red [SEP] blue tree mat", "the cat [SEP] sat on the mat [SEP] dog", "a [SEP] b [SEP]"]


def encode(tokenizer, texts, **kwargs):
    return tokenizer(texts, padding=True, return_tensors="pt", **kwargs)


def test_only_the_first_segments_get_weight_and_their_weights_sum_to_one(model, tokenizer):
    batch = encode(tokenizer, TEXTS)
    weights = model(**batch, return_pooling_weights=True).pooling_weights
    sep = tokenizer.sep_token_id
    for row, ids in enumerate(batch["input_ids"]):
        real = batch["attention_mask"][row].bool()
        ends = (ids == sep) & real
        second_end = torch.nonzero(ends)[1].item()  # the second separator closes the pooled part
        assert torch.all(weights[row, : second_end + 1] > 0)
        assert torch.all(weights[row, second_end + 1 :] == 0)
        assert weights[row].sum().item() == pytest.approx(1.0, abs=1e-6)


def test_the_encoder_still_reads_the_context_and_padding_changes_nothing(model, tokenizer):
    with torch.no_grad():
        one = model(**encode(tokenizer, TEXTS[:1])).logits
        other_context = model(**encode(tokenizer, ["cat dog [SEP] red [SEP] house fast slow"])).logits
        padded = model(**encode(tokenizer, TEXTS)).logits[:1]
    assert not torch.allclose(one, other_context), "the context is read by the encoder: it moves the output"
    torch.testing.assert_close(padded, one, rtol=1e-5, atol=1e-6)


def test_save_and_load_keep_the_segments_and_the_predictions(model, tokenizer, tmp_path):
    model.save_pretrained(tmp_path / "m", tokenizer=tokenizer)
    loaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    assert (loaded.config.pool_segments, loaded.config.segment_token_id) == (2, tokenizer.sep_token_id)
    card = (tmp_path / "m" / "README.md").read_text(encoding="utf-8")
    assert f"**Pooled tokens:** the first 2 segment(s) of each input, up to and with separator token " \
           f"{tokenizer.sep_token_id}" in card
    batch = encode(tokenizer, TEXTS)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_bf16_autocast_keeps_the_context_at_zero_weight_and_the_output_finite(model, tokenizer):
    batch = encode(tokenizer, TEXTS)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch, return_pooling_weights=True)
    assert torch.isfinite(out.logits).all()
    assert out.pooling_weights[0, -1] == 0 and out.pooling_weights[0, :3].sum() > 0


def test_inputs_embeds_and_bad_options_are_refused(model, tokenizer, encoder):
    batch = encode(tokenizer, TEXTS)
    embeds = model.get_input_embeddings()(batch["input_ids"])
    with pytest.raises(ValueError, match="pools only the first 2 segment.* give input_ids, not inputs_embeds"):
        model(inputs_embeds=embeds, attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="pool_segments must be an integer >= 1 and comes with segment_token_id"):
        AttnPoolConfig(encoder=model.config.encoder, pool_segments=2)
    with pytest.raises(ValueError, match="pool_segments must be an integer >= 1"):
        AttnPoolConfig(encoder=model.config.encoder, pool_segments=0, segment_token_id=3)


def test_own_segments_counts_the_separators_before_the_context(tokenizer):
    # [CLS] anchor [SEP] target [SEP] title [SEP] context [SEP]: the own text is 3 segments
    assert own_segments(tokenizer, None, "{anchor} [SEP] {target} [SEP] {title}") == (3, tokenizer.sep_token_id)
    # one column: a pair with the context, [CLS] a [SEP] context [SEP]
    assert own_segments(tokenizer, ["a"], None) == (1, tokenizer.sep_token_id)
    # two columns: three joined, [CLS] a [SEP] b [SEP] context [SEP]
    assert own_segments(tokenizer, ["a", "b"], None) == (2, tokenizer.sep_token_id)
    with pytest.raises(DataError, match=r"the context must come last, once.*Move \{group_context\} to the end"):
        own_segments(tokenizer, None, "{group_context} [SEP] {anchor}")


def test_own_pooling_needs_a_group_context():
    with pytest.raises(ValueError, match="group_context_pooling own .* needs --group-context COL"):
        TrainConfig(train_file="x.csv", text_cols=["a"], group_context_pooling="own").validate()
    with pytest.raises(ValueError, match="group_context_pooling must be one of all, own"):
        TrainConfig(train_file="x.csv", text_cols=["a"], group_context="b", group_context_pooling="mine").validate()


def test_explain_erases_and_measures_only_the_tokens_the_pooler_may_weigh(model, tokenizer):
    """Context tokens have weight 0 by construction: erasing them, or spreading the entropy over them, says nothing."""
    import numpy as np

    from attnpool.explanations import explain

    explanation = explain(model, tokenizer, TEXTS[:2], erasure_k=20)
    for text, example in zip(TEXTS[:2], explanation.examples, strict=True):
        ids = tokenizer(text)["input_ids"]
        pooled = model.attnpool.pooling_mask(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
        specials = set(tokenizer.all_special_ids)
        erasable = sum(1 for i, keep in zip(ids, pooled.tolist(), strict=True) if keep and i not in specials)
        for strategy in ("top", "bottom", "random"):  # no more steps than pooled, non-special tokens
            removed = example.erasure.removed[strategy]
            assert len(removed) == erasable and all(pooled[j] for j in removed), (strategy, removed)
        weights = np.asarray(example.token_weights[0])[pooled.numpy().astype(bool)]
        p = weights / weights.sum()
        expected = -(p[p > 0] * np.log(p[p > 0])).sum() / np.log(len(p))
        assert example.normalized_entropy[0] == pytest.approx(expected, abs=1e-6)
