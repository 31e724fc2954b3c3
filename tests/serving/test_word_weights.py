"""The served word weights (``"weights": true``) of rows batched together are each row's own, on either padding side."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from attnpool.config import TrainConfig
from attnpool.data.context import CONTEXT_FIELD, add_group_context
from attnpool.data.task import encode_texts
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.prediction import FoldEnsemble
from attnpool.serving.weights import word_weights
from model_helpers import save_tiny_encoder, tiny_tokenizer

TEXTS = [("the cat sat on the mat", None), ("dog", None), ("red tree", "big house ran fast")]


@pytest.mark.parametrize("side", ["right", "left"])
def test_batched_rows_get_the_weights_they_get_alone(tmp_path, side):
    """Llama's tokenizers pad on the left: a short row in a batch must not read its weights off the padding."""
    encoder = save_tiny_encoder(tmp_path / "encoder", family="llama")
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention",
                                                           pooling_options={"attn_size": 8}).eval()
    with torch.no_grad():  # a scorer away from its even start, so that each token's weight is its own
        for parameter in model.attnpool.pooler.parameters():
            parameter.normal_(0, 1)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    tokenizer.padding_side = side
    ensemble = FoldEnsemble("regression", [0], [model], np.array([1.0]), tokenizer)
    ids = [tokenizer(first, second)["input_ids"] for first, second in TEXTS]

    def weights(batch_size: int) -> list[list[float]]:
        rows = word_weights(ensemble, TEXTS, ids, max_length=32, batch_size=batch_size, device=torch.device("cpu"),
                            precision="fp32", lock=threading.Lock())
        return [[word["weight"] for word in row] for row in rows]

    alone, together = weights(1), weights(len(TEXTS))
    assert [len(row) for row in together] == [len(row) for row in alone]
    for mine, theirs in zip(together, alone, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)
        assert sum(mine) == pytest.approx(1.0) and len(set(np.round(mine, 4))) > 1  # uneven: the test can tell


def test_a_blank_second_text_gets_the_tokens_it_was_predicted_with(tmp_path):
    """``tokenizer(text, "")`` drops the empty pair that ``tokenizer([text], [""])`` (the prediction) keeps."""
    encoder = save_tiny_encoder(tmp_path / "encoder")
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention",
                                                           pooling_options={"attn_size": 8}).eval()
    tokenizer = tiny_tokenizer()
    ensemble = FoldEnsemble("regression", [0], [model], np.array([1.0]), tokenizer)
    texts = [("the cat", ""), ("dog", None), ("red tree", "big house")]
    pairs = tokenizer(["the cat", "red tree"], ["", "big house"])["input_ids"]  # as encode_texts tokenises
    ids = [pairs[0], tokenizer(["dog"])["input_ids"][0], pairs[1]]
    assert ids[0] == [2, 4, 6, 3, 3]
    rows = word_weights(ensemble, texts, ids, max_length=32, batch_size=4, device=torch.device("cpu"),
                        precision="fp32", lock=threading.Lock())
    assert [word["text"] for word in rows[0]] == ["[CLS]", "the", "cat", "[SEP]", "[SEP]"]
    assert [word["text"] for word in rows[2]] == ["[CLS]", "red", "tree", "[SEP]", "big", "house", "[SEP]"]
    assert [word["segment"] for word in rows[2]][4:6] == [1, 1]
    assert all(sum(word["weight"] for word in row) == pytest.approx(1.0) for row in rows)


def test_a_group_context_pair_truncated_context_first_gets_the_tokens_it_was_predicted_with(tmp_path):
    """A run with --group-context and one text column: its rows' contexts give up their tokens first."""
    encoder = save_tiny_encoder(tmp_path / "encoder")
    model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention",
                                                           pooling_options={"attn_size": 8}).eval()
    tokenizer = tiny_tokenizer()
    ensemble = FoldEnsemble("regression", [0], [model], np.array([1.0]), tokenizer)
    rows = pd.DataFrame({"q": ["g"] * 3, "text": ["the big red cat sat on the mat", "dog ran fast", "a tree"]})
    cfg = TrainConfig(text_cols=["text"], group_context="text", group_context_by=["q"], max_length=10)
    frame = add_group_context(rows, "text", ["q"])
    ids = encode_texts(tokenizer, frame, cfg)[0]["input_ids"]  # as the prediction tokenises them
    texts = list(zip(frame["text"], frame[CONTEXT_FIELD], strict=True))

    def words(**kwargs) -> list[list[dict]]:
        return word_weights(ensemble, texts, ids, max_length=10, batch_size=4, device=torch.device("cpu"),
                            precision="fp32", lock=threading.Lock(), **kwargs)

    served = words(context_pairs=True)
    assert [word["text"] for word in served[0]] == ["[CLS]", *"the big red cat sat on the".split(), "[SEP]", "[SEP]"]
    assert [word["text"] for word in served[1]][:5] == ["[CLS]", "dog", "ran", "fast", "[SEP]"]
    assert len(served[1]) == 10 and [word["segment"] for word in served[1]][5:9] == [1] * 4
    assert all(sum(word["weight"] for word in row) == pytest.approx(1.0) for row in served)
    with pytest.raises(RuntimeError, match="differ from the predicted tokens"):
        words()  # truncated as a pair of two texts (the default): not what was predicted
