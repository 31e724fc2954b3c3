"""``attnpool.explain``: predictions, weights per example and head, entropy, and the erasure test."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from explain_helpers import PIECES, key_token_model, tiny_model, wordpiece_tokenizer

import attnpool
from attnpool import AttnPoolForSequenceClassification
from attnpool.config import TrainConfig
from attnpool.data.task import encode_texts
from attnpool.explanations.faithfulness import prediction_change, removal_orders, summarize
from model_helpers import tiny_config

TEXTS = ["the cat sat on the mat", "a big red dog", "unbelievable", "the cat , the dog !"]
PAIRS = ["red dogs", "the mat", "a cat sat", "big"]
KEY = "unbelievable"


def _unit_sums(example):
    heads = len(example.token_weights)
    return [sum(w.weights[h] for w in example.words) for h in range(heads)]


@pytest.mark.parametrize(("pooling", "options", "heads"), [
    ("attention", {}, 1),
    ("multihead_attention", {"num_heads": 3}, 3),
    ("gated_attention", {}, 1),
    ("weighted_layer", {"num_layers": 2, "pooler": "attention"}, 1),
])
def test_weights_sum_to_one_per_example_and_head(pooling, options, heads):
    model = tiny_model(pooling, **options)
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS, text_pairs=PAIRS, erasure_k=2)
    assert result.num_heads == heads and len(result.examples) == len(TEXTS)
    for example in result.examples:
        assert np.asarray(example.token_weights).shape == (heads, len(example.tokens))
        np.testing.assert_allclose(np.asarray(example.token_weights).sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(_unit_sums(example), 1.0, atol=1e-5)
        assert all(0.0 <= e <= 1.0 for e in example.normalized_entropy) and len(example.entropy) == heads
    if pooling == "weighted_layer":
        assert result.layer_weights == pytest.approx([0.5, 0.5])
    else:
        assert result.layer_weights is None


def test_classification_prediction_label_and_error():
    model = tiny_model(num_labels=3)
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS, labels=["c0", 1, None, "c2"], erasure_k=1)
    first = result.examples[0]
    assert result.problem_type == "single_label_classification" and result.class_names == ["c0", "c1", "c2"]
    assert first.prediction in result.class_names and sum(first.probabilities) == pytest.approx(1.0)
    assert first.score == pytest.approx(max(first.probabilities))
    labels = [x.label for x in result.examples]
    assert labels == ["c0", "c1", None, "c2"]
    for x in result.examples:
        assert x.error == (None if x.label is None else float(x.prediction != x.label))


def test_integer_classes_read_as_floats_keep_their_right_or_wrong():
    """A label column with a blank cell is read as floats: 1.0 is the class "1" of a run trained on 0/1/2."""
    model = tiny_model(num_labels=3)
    model.config.id2label, model.config.label2id = {i: str(i) for i in range(3)}, {str(i): i for i in range(3)}
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS, labels=[1.0, 0.0, float("nan"), 2.0], erasure_k=0)
    assert [x.label for x in result.examples] == ["1", "0", None, "2"]
    assert all(x.error in (0.0, 1.0) for x in result.examples if x.label is not None)


def test_a_label_written_as_text_names_the_class_it_writes_as_training_and_predict_read_it():
    """Labels "5.0" and " 2" are the classes 5 and 2, as training and predict read them (data.numbers.class_key):
    explain compared the text "5.0" with the class "5", found no class and gave no error."""
    model = tiny_model(num_labels=3)
    model.config.id2label = dict(enumerate(["2", "5", "7"]))
    model.config.label2id = {name: i for i, name in model.config.id2label.items()}
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS[:2], labels=["5.0", " 2"], erasure_k=0)
    assert [x.label for x in result.examples] == ["5", "2"]
    assert all(x.error in (0.0, 1.0) for x in result.examples)


def test_an_integer_label_of_numbered_classes_is_a_class_name_not_an_index():
    """Classes 2, 5 and 7: the label 1 is no class (it was read as index 1, the class 5); 7 is the class 7."""
    model = tiny_model(num_labels=3)
    model.config.id2label = dict(enumerate(["2", "5", "7"]))
    model.config.label2id = {name: i for i, name in model.config.id2label.items()}
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS[:2], labels=[1, 7], erasure_k=0)
    unknown, seven = result.examples
    assert (unknown.label, unknown.error) == ("1", None)
    assert seven.label == "7" and seven.error == float(seven.prediction != "7")


def test_whole_labels_of_classes_with_halves_match_their_class():
    """Classes 1.0, 1.5, 2.0 are saved as "1.0"...; the label 1.0 reads "1": it matched no class and lost its error."""
    model = tiny_model(num_labels=3)
    model.config.id2label = dict(enumerate(["1.0", "1.5", "2.0"]))
    model.config.label2id = {name: i for i, name in model.config.id2label.items()}
    result = attnpool.explain(model, wordpiece_tokenizer(), TEXTS[:3], labels=[1.0, 1.5, 2.0], erasure_k=0)
    assert [x.label for x in result.examples] == ["1.0", "1.5", "2.0"]  # the class names, as the run saved them
    assert all(x.error in (0.0, 1.0) for x in result.examples)


def test_regression_error_and_text_pairs_are_recorded():
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), TEXTS, text_pairs=PAIRS,
                              labels=[0.5, 1.0, None, 0.0], erasure_k=1)
    first = result.examples[0]
    assert result.problem_type == "regression" and result.class_names is None
    assert isinstance(first.prediction, float) and first.error == pytest.approx(abs(first.prediction - 0.5))
    assert first.text == TEXTS[0] and first.text_pair == PAIRS[0]
    assert result.examples[2].error is None


def test_truncation_is_flagged():
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), ["the cat sat on the mat " * 5, "a cat"],
                              max_length=8, erasure_k=1)
    assert [x.truncated for x in result.examples] == [True, False]
    assert len(result.examples[0].tokens) == 8


def test_group_context_pairs_lose_their_context_before_the_rows_own_text():
    """A run's one text column with --group-context: the pair (text, context) is truncated as training did."""
    texts, contexts = ["the cat sat on the mat", "the big red dog sat on the mat , a cat"], ["a red dog big", "a cat"]
    tokenizer = wordpiece_tokenizer()
    cfg = TrainConfig(text_cols=["text"], group_context="text", group_context_by=["q"], max_length=11)
    rows = encode_texts(tokenizer, pd.DataFrame({"text": texts, "group_context": contexts}), cfg)[0]["input_ids"]
    result = attnpool.explain(tiny_model(), tokenizer, texts, text_pairs=contexts, max_length=11, erasure_k=1,
                              context_pairs=True)
    assert [x.tokens for x in result.examples] == [tokenizer.convert_ids_to_tokens(ids) for ids in rows]
    assert result.examples[0].tokens == ["[CLS]", *texts[0].split(), "[SEP]", "a", "red", "[SEP]"]
    assert result.examples[1].tokens == ["[CLS]", *texts[1].split()[:8], "[SEP]", "[SEP]"]  # too long: no context
    assert [x.truncated for x in result.examples] == [True, True]
    assert [w.segment for w in result.examples[0].words if w.kind == "word"] == [0] * 6 + [1] * 2
    pairs = attnpool.explain(tiny_model(), tokenizer, texts, text_pairs=contexts, max_length=11, erasure_k=1)
    assert pairs.examples[0].tokens[:7] != result.examples[0].tokens[:7]  # two texts of a pair: the longer cut first


def test_the_erasure_curve_shows_the_forced_token_as_decisive():
    tokenizer = wordpiece_tokenizer()
    key_id = tokenizer.convert_tokens_to_ids("##able")  # the last piece of "unbelievable"
    model = key_token_model(key_id)
    texts = ["the cat sat on the unbelievable mat", "unbelievable , a big red dog", "a cat , unbelievable !",
             "the big cat sat on a red mat , unbelievable", "red unbelievable dog", "unbelievable cats sat"]
    result = attnpool.explain(model, tokenizer, texts, erasure_k=3, seed=0)
    for x in result.examples:
        key_position = x.tokens.index("##able")
        assert x.token_weights[0][key_position] > 0.999
        top_word = max(x.words, key=lambda w: w.weight)
        assert top_word.text == "unbelievable" and top_word.weight > 0.999
        assert x.normalized_entropy[0] < 0.01
        assert x.score == pytest.approx(1.0, abs=1e-4)
        curves = x.erasure
        assert curves.removed["top"][0] == key_position
        assert curves.top == pytest.approx([1.0, 1.0, 1.0], abs=1e-4), "removing the key moves the prediction"
        assert max(curves.bottom) < 1e-4, "removing the least-weighted tokens leaves the prediction alone"
        for k, change in enumerate(curves.random, start=1):
            hit = key_position in curves.removed["random"][:k]
            assert change == pytest.approx(1.0 if hit else 0.0, abs=1e-4)
    summary = result.erasure
    assert summary.counts == [6, 6, 6] and summary.top == pytest.approx([1.0] * 3, abs=1e-4)
    assert summary.aopc["top"] > 2 * summary.aopc["random"] and summary.aopc["bottom"] < 1e-4


def test_erasure_is_seeded_and_skips_special_tokens():
    model, tokenizer = tiny_model(num_labels=2), wordpiece_tokenizer()
    a = attnpool.explain(model, tokenizer, TEXTS, text_pairs=PAIRS, erasure_k=3, seed=7)
    b = attnpool.explain(model, tokenizer, TEXTS, text_pairs=PAIRS, erasure_k=3, seed=7)
    c = attnpool.explain(model, tokenizer, TEXTS, text_pairs=PAIRS, erasure_k=3, seed=8)
    assert [x.erasure.removed for x in a.examples] == [x.erasure.removed for x in b.examples]
    assert [x.erasure.removed["random"] for x in a.examples] != [x.erasure.removed["random"] for x in c.examples]
    for x in a.examples:
        for order in x.erasure.removed.values():
            assert not any(x.special[p] for p in order)


def test_examples_with_fewer_tokens_than_k_have_gaps_and_the_mean_skips_them():
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), ["cat", "the cat sat on the mat"], erasure_k=3)
    short = result.examples[0].erasure
    assert short.top[0] is not None and short.top[1:] == [None, None]
    assert result.erasure.counts == [2, 1, 1]
    assert short.aopc["top"] == pytest.approx(short.top[0])


def test_to_dict_is_json_and_keeps_the_numbers():
    result = attnpool.explain(tiny_model("multihead_attention", num_heads=2), wordpiece_tokenizer(), TEXTS,
                              text_pairs=PAIRS, labels=[0.1, 0.2, 0.3, 0.4], erasure_k=2)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["attnpool_version"] == attnpool.__version__ and data["num_heads"] == 2
    for example in data["examples"]:
        for h in range(2):
            assert sum(w["weights"][h] for w in example["words"]) == pytest.approx(1.0, abs=1e-5)
    assert set(data["erasure"]) == {"k", "top", "random", "bottom", "counts", "aopc"}


def test_bad_inputs_are_refused():
    model, tokenizer = tiny_model(), wordpiece_tokenizer()
    with pytest.raises(ValueError, match="2 texts but 1 text_pairs"):
        attnpool.explain(model, tokenizer, ["a", "b"], text_pairs=["c"])
    with pytest.raises(ValueError, match="2 texts but 3 labels"):
        attnpool.explain(model, tokenizer, ["a", "b"], labels=[1, 2, 3])
    with pytest.raises(ValueError, match="no texts"):
        attnpool.explain(model, tokenizer, [])
    with pytest.raises(ValueError, match="gives no token weights"):
        attnpool.explain(tiny_model("max"), tokenizer, ["a cat"])
    with pytest.raises(ValueError, match="explain: seed must be >= 0, got -1"):  # numpy's own words named no option
        attnpool.explain(model, tokenizer, ["a cat"], seed=-1)


def test_labels_of_a_shuffled_frame_go_with_their_texts():
    """labels[i] of a Series read its index: a shuffled frame paired each text with another row's label."""
    import pandas as pd

    frame = pd.DataFrame({"text": ["the cat", "a dog", "red mat"], "label": [0.1, 0.3, 0.2]}, index=[0, 2, 1])
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), frame["text"], labels=frame["label"], erasure_k=1)
    assert [(x.text, x.label) for x in result.examples] == [("the cat", 0.1), ("a dog", 0.3), ("red mat", 0.2)]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_weights_that_rank_nothing_are_not_called_faithful(pooling):
    """mean's equal weights and cls's special-token weight removed the same tokens as 'top' and 'bottom'."""
    from attnpool.explanations.page import _verdict

    result = attnpool.explain(tiny_model(pooling), wordpiece_tokenizer(), TEXTS, erasure_k=3)
    verdict = _verdict(result.erasure.aopc)
    assert "the weights do not rank the tokens" in verdict and "relies on" not in verdict


def test_a_verdict_needs_the_top_tokens_to_matter_more_than_the_bottom_ones():
    from attnpool.explanations.page import _verdict

    assert "relies on" in _verdict({"top": 0.3, "random": 0.1, "bottom": 0.05})
    assert "do not read these weights" in _verdict({"top": 0.3, "random": 0.1, "bottom": 0.4})


def test_a_single_string_and_the_training_mode_are_handled():
    model = tiny_model().train()
    result = attnpool.explain(model, wordpiece_tokenizer(), "the cat", erasure_k=1)
    assert len(result.examples) == 1 and model.training, "the model's mode is restored"


def test_removal_orders_break_ties_by_position():
    orders = removal_orders(np.array([0.1, 0.3, 0.3, 0.1, 0.2]), np.array([False, True, True, True, True]),
                            np.random.default_rng(0), 3)
    assert orders["top"] == [1, 2, 4] and orders["bottom"] == [3, 4, 1]
    assert len(set(orders["random"])) == 3 and set(orders["random"]) <= {1, 2, 3, 4}


def test_prediction_change_per_problem_type():
    base = np.array([0.7, 0.2, 0.1])
    erased = np.array([[0.4, 0.5, 0.1], [0.7, 0.1, 0.2]])
    np.testing.assert_allclose(prediction_change("single_label_classification", base, erased, 0), [0.3, 0.0])
    np.testing.assert_allclose(prediction_change("multi_label_classification", base, erased, 0), [0.2, 0.2 / 3])
    np.testing.assert_allclose(prediction_change("regression", np.array([2.0]), np.array([[1.5], [3.0]]), 0),
                               [0.5, 1.0])
    assert summarize([], 2).top == [None, None]


def test_an_erased_token_does_not_move_the_others_on_a_decoder_only_encoder():
    """Llama-like encoders get positions counted over the mask: erasing a token must keep the later ones in place."""
    import torch

    from attnpool.explanations.core import _run
    from attnpool.model import AttnPoolForSequenceClassification
    from model_helpers import tiny_config

    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("llama"), pooling="attention",
                                                           pooling_options={"attn_size": 8}).eval()
    assert model.attnpool.positions_from_mask
    ids, erased = [5, 9, 12, 7, 3], np.array([1, 0, 1, 1, 1])  # the second token erased
    logits, _ = _run(model, [(ids, erased, None)], pad_id=0, device=torch.device("cpu"), batch_size=4, weights=False)
    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.from_numpy(erased)[None]}
    with torch.inference_mode():
        in_place = model(**inputs, position_ids=torch.arange(5)[None]).logits.numpy()
        shifted = model(**inputs).logits.numpy()  # positions from the mask: 0, 0, 1, 2, 3
    np.testing.assert_allclose(logits, in_place, rtol=1e-5, atol=1e-6)
    assert not np.allclose(logits, shifted, rtol=1e-5, atol=1e-6)


def _no_special_tokens(tokenizer):
    """GPT-2, Qwen and Llama-3 tokenizers add no [CLS]/[SEP]: a blank text has no token at all."""
    tokenizer.backend_tokenizer.post_processor = None
    assert tokenizer("")["input_ids"] == []
    return tokenizer


def test_a_text_without_tokens_gets_no_words_alone_or_in_a_batch():
    """A blank text crashed merging words ("cannot reshape array of size 0") after the model and erasure had run."""
    tokenizer = _no_special_tokens(wordpiece_tokenizer())
    for batch_size in (1, 8):  # 1: a batch of the empty row alone
        result = attnpool.explain(tiny_model(num_labels=2), tokenizer, ["the cat sat", ""], erasure_k=2,
                                  batch_size=batch_size)
        full, empty = result.examples
        assert [w.text for w in full.words] == ["the", "cat", "sat"]
        assert (empty.tokens, empty.words, empty.special_weight, empty.normalized_entropy) == ([], [], [0.0], [0.0])
        assert empty.prediction in ("c0", "c1") and empty.erasure.top == [None, None]
    alone = attnpool.explain(tiny_model(), tokenizer, [""], erasure_k=1)
    assert alone.examples[0].words == [] and np.isfinite(alone.examples[0].prediction)


def test_unnamed_classes_take_whole_number_labels_as_indices():
    """LABEL_0/LABEL_1 and a label column with a blank cell (read as 1.0, 0.0, NaN): every row lost right/wrong."""
    model = tiny_model(num_labels=2)
    model.config.id2label = {0: "LABEL_0", 1: "LABEL_1"}
    model.config.label2id = {"LABEL_0": 0, "LABEL_1": 1}
    labels = [1.0, 0.0, float("nan"), "1", np.float32(0.0), 2.0, 0.5]
    texts = (TEXTS * 2)[: len(labels)]
    result = attnpool.explain(model, wordpiece_tokenizer(), texts, labels=labels, erasure_k=0)
    assert [x.label for x in result.examples] == ["LABEL_1", "LABEL_0", None, "LABEL_1", "LABEL_0", "2", "0.5"]
    for x in result.examples:
        assert x.error == (None if x.label is None or not x.label.startswith("LABEL") else
                           float(x.prediction != x.label))


def test_a_slow_tokenizers_pair_keeps_its_second_text_apart(tmp_path):
    """Transformers 5's Python tokenizers return no token_type_ids: the second text's words were segment 0."""
    import torch
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *PIECES]) + "\n", encoding="utf-8")
    model = tiny_model()
    tokenizer = BertTokenizerLegacy(str(vocab))
    assert not tokenizer.is_fast and "token_type_ids" not in tokenizer("a", "b")
    x = attnpool.explain(model, tokenizer, ["unbelievable cats sat"], text_pairs=["a dog"], erasure_k=1).examples[0]
    assert [(w.text, w.segment) for w in x.words if w.kind == "word"] == [
        ("un", 0), ("##believ", 0), ("##able", 0), ("cat", 0), ("##s", 0), ("sat", 0), ("a", 1), ("dog", 1)]
    with torch.inference_mode():  # the model's inputs are the tokenizer's own: no token types added for it
        own = model(**tokenizer("unbelievable cats sat", "a dog", return_tensors="pt")).logits.item()
    assert x.prediction == pytest.approx(own, abs=1e-6)
    zeros = BertTokenizerLegacy(str(vocab), token_type_ids_pattern="all_zeros")  # RoBERTa's: types tell nothing
    x = attnpool.explain(model, zeros, ["the cat"], text_pairs=["a dog"], erasure_k=0).examples[0]
    assert [w.segment for w in x.words if w.kind == "word"] == [None] * 4, "unknown, not a wrong 0"
    single = attnpool.explain(model, tokenizer, ["the cat"], erasure_k=0).examples[0]
    assert [w.segment for w in single.words if w.kind == "word"] == [0, 0]


def test_missing_texts_are_empty_and_a_single_pair_is_one_text():
    """None/NaN became the words "None"/"nan" (training reads ""), and a str text_pairs was split into characters."""
    import pandas as pd

    model, tokenizer = tiny_model(num_labels=2), wordpiece_tokenizer()
    one = attnpool.explain(model, tokenizer, "the cat", text_pairs="a dog", erasure_k=0).examples[0]
    assert one.text_pair == "a dog" and [w.segment for w in one.words if w.kind == "word"] == [0, 0, 1, 1]
    frame = pd.DataFrame({"a": ["the cat", None, float("nan"), "  "], "b": ["red mat", None, pd.NA, "a dog"]})
    frame["b"] = frame["b"].astype(object)
    result = attnpool.explain(model, tokenizer, frame["a"], text_pairs=frame["b"], erasure_k=0)
    assert [(x.text, x.text_pair) for x in result.examples] == [("the cat", "red mat"), ("", ""), ("", ""),
                                                                ("", "a dog")]
    assert result.examples[1].tokens == ["[CLS]", "[SEP]", "[SEP]"]


def test_missing_labels_of_every_kind_have_no_label_and_no_error():
    """pd.NA (nullable columns) and a float32 NaN were labels "<NA>" and "nan", or a TypeError after the model ran."""
    model, tokenizer = tiny_model(num_labels=2), wordpiece_tokenizer()
    texts = ["the cat sat", "a big dog", "red mat", "the dog"]
    for labels in (pd.array(["c0", None, "c1", None], dtype="string"),
                   np.array([0, np.nan, 1, np.nan], dtype=np.float32),
                   pd.Series(["c0", pd.NA, "c1", pd.NaT], dtype=object)):
        result = attnpool.explain(model, tokenizer, texts, labels=labels, erasure_k=0)
        assert [x.label for x in result.examples] == ["c0", None, "c1", None]
        assert [x.error is None for x in result.examples] == [False, True, False, True]
    values = pd.array([0.5, None, 0.2, np.nan], dtype="Float64")
    result = attnpool.explain(tiny_model(), tokenizer, texts, labels=values, erasure_k=0)
    assert [x.label for x in result.examples] == [0.5, None, 0.2, None]
    assert [x.error is None for x in result.examples] == [False, True, False, True]


def test_a_regression_label_that_is_no_number_is_refused_before_the_model_runs(monkeypatch):
    from attnpool.explanations import core

    monkeypatch.setattr(core, "_run", lambda *a, **k: pytest.fail("the model ran before the labels were checked"))
    with pytest.raises(ValueError, match=r"labels\[1\] is 'high', not a number; this model predicts values "
                                         r"\(regression\), so its labels are numbers: fix the label, or give None"):
        attnpool.explain(tiny_model(), wordpiece_tokenizer(), ["the cat", "a dog"], labels=[0.5, "high"])


@pytest.mark.parametrize(("num_labels", "label", "message"), [
    (2, 0.5, r"labels\[1\] is 0.5, 1 value\(s\), but this regression model predicts 2 value\(s\) "
             r"\(config.num_labels\); give a list of 2 numbers, one per output, or None where it is missing"),
    (1, [0.1, 0.9], r"labels\[1\] is \[0.1, 0.9\], 2 value\(s\), but this regression model predicts 1 value\(s\) "
                    r"\(config.num_labels\); give one number, or None"),
    (2, [0.1, 0.2, 0.3], r"labels\[1\] is \[0.1, 0.2, 0.3\], 3 value\(s\), but this regression model predicts 2"),
], ids=["one-for-two", "two-for-one", "three-for-two"])
def test_a_regression_label_of_the_wrong_size_is_refused_before_the_model_runs(monkeypatch, num_labels, label,
                                                                                message):
    """One value for two outputs was broadcast into a made-up error, two for one output were accepted, and three for
    two failed in numpy after every forward and erasure pass."""
    from attnpool.explanations import core

    model = tiny_model(num_labels=num_labels)
    model.config.problem_type = "regression"
    monkeypatch.setattr(core, "_run", lambda *a, **k: pytest.fail("the model ran before the labels were checked"))
    right = [0.1] * num_labels if num_labels > 1 else 0.1
    with pytest.raises(ValueError, match=message):
        attnpool.explain(model, wordpiece_tokenizer(), ["the cat", "a dog"], labels=[right, label])


def test_the_label_of_a_single_text_may_be_given_alone():
    """labels="c1" with one text became the labels ["c", "1"], and labels=0.5 a TypeError."""
    tokenizer = wordpiece_tokenizer()
    one = attnpool.explain(tiny_model(num_labels=2), tokenizer, "the cat", labels="c1", erasure_k=0).examples[0]
    assert one.label == "c1" and one.error is not None
    value = attnpool.explain(tiny_model(), tokenizer, "the cat", labels=np.float32(0.5), erasure_k=0).examples[0]
    assert value.label == 0.5 and value.error is not None
    with pytest.raises(ValueError, match=r"labels='c1' is one label, for 2 texts; give a list with one label per "
                                         r"text"):
        attnpool.explain(tiny_model(num_labels=2), tokenizer, ["the cat", "a dog"], labels="c1")


def test_a_model_without_a_prediction_head_is_refused():
    """A bare AttnPoolModel failed with AttributeError: 'AttnPoolModelOutput' object has no attribute 'logits'."""
    with pytest.raises(ValueError, match="explain needs a model with a prediction head, got a bare AttnPoolModel.*; "
                                         "pass an AttnPoolForSequenceClassification"):
        attnpool.explain(tiny_model().attnpool, wordpiece_tokenizer(), ["the cat sat"], erasure_k=1)


def test_max_length_is_checked_against_the_encoders_positions():
    """The tiny BERT reads 64 positions: the default 128 and an explicit 100 failed in torch with a RuntimeError."""
    model, tokenizer = tiny_model(), wordpiece_tokenizer()
    long = " ".join(["the big red dog sat on the mat"] * 12)  # 96 words
    result = attnpool.explain(model, tokenizer, [long], erasure_k=1)
    assert result.max_length == 64 and len(result.examples[0].tokens) == 64 and result.examples[0].truncated
    with pytest.raises(ValueError, match=r"max_length 100 is over what the model's encoder reads: 64 tokens \(its "
                                         r"position embeddings\); give max_length=64 or less"):
        attnpool.explain(model, tokenizer, [long], max_length=100)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=r"max_length must be an integer >= 1 \(tokens per row\), got"):
            attnpool.explain(model, tokenizer, [long], max_length=bad)
    assert attnpool.explain(model, tokenizer, [long], max_length=64, erasure_k=0).max_length == 64


@pytest.mark.parametrize(("pairs", "special"), [(None, 2), (["a dog"], 3)], ids=["text", "pair"])
def test_a_max_length_that_leaves_no_room_beside_the_special_tokens_is_refused(pairs, special):
    """The tokenizer does not truncate below its special tokens: max_length 1 explained the whole row as not
    truncated, and a long row failed in torch with a RuntimeError (over the 64 positions)."""
    model, tokenizer = tiny_model(), wordpiece_tokenizer()
    long = " ".join(["the big red dog sat on the mat"] * 12)  # 96 words
    for max_length in (1, special):
        with pytest.raises(ValueError, match=rf"max_length {max_length} \(--max-length\) leaves no room for text: "
                                             rf"the tokenizer \w+ adds {special} special tokens to each "
                                             rf"text( pair)?; give --max-length {special + 1} or more"):
            attnpool.explain(model, tokenizer, [long], text_pairs=pairs, max_length=max_length, erasure_k=0)
    example = attnpool.explain(model, tokenizer, [long], text_pairs=pairs, max_length=special + 1,
                               erasure_k=0).examples[0]
    assert len(example.tokens) == special + 1 and example.truncated


@pytest.mark.parametrize(("layers", "options", "indices"), [
    ([-1, -2, -3], {}, [2, 1, 0]),  # top first: the order the model stacks them, not "lowest first"
    ([0, -1], {}, [0, 2]),
    ("all", {}, [1, 2]),
    ("last", {"num_layers": 1}, [2]),
])
def test_layer_weights_carry_the_hidden_states_index_each_weighs(layers, options, indices):
    """Layer weights were labelled as if ascending, whatever order ``pooling_layers`` gave them in."""
    model = AttnPoolForSequenceClassification.from_encoder(
        tiny_config("bert"), pooling="weighted_layer", pooling_options={"pooler": "attention", **options},
        pooling_layers=layers).eval()
    fed = []
    hook = model.attnpool.pooler.register_forward_hook(lambda module, args, out: fed.append(args[0]))
    ids = torch.tensor([[2, 5, 6, 3]])
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states
    hook.remove()
    for j, index in enumerate(indices):  # what the pooler is fed at position j is hidden_states[index]
        torch.testing.assert_close(fed[0][:, j], states[index])
    result = attnpool.explain(model, wordpiece_tokenizer(), ["the cat sat"], erasure_k=0)
    assert result.layer_indices == indices and len(result.layer_weights) == len(indices)
    assert json.loads(json.dumps(result.to_dict()))["layer_indices"] == indices


def test_a_token_pooler_has_no_layer_indices():
    result = attnpool.explain(tiny_model(), wordpiece_tokenizer(), ["the cat sat"], erasure_k=0)
    assert result.layer_weights is None and result.layer_indices is None
