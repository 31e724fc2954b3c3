"""encode_texts counts the truncated rows without tokenising every row a second time, untruncated.

The count must stay what it was (rows whose untruncated tokens exceed ``max_length``), for a fast tokenizer (its
Encodings hold what truncation cut) and a slow one (only rows at ``max_length`` are tokenised again, whole).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertTokenizerLegacy, PreTrainedTokenizerFast

from attnpool.config import TrainConfig
from attnpool.data.columns import build_texts
from attnpool.data.context import add_group_context, context_text_spec
from attnpool.data.task import encode_texts

WORDS = ["the", "cat", "sat", "on", "mat", "red", "house", "tree", "##s", "##ing", "run", "big"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
MAX_LENGTH = 12


def fast_tokenizer():
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def slow_tokenizer(folder):
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return BertTokenizerLegacy(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)


@pytest.fixture(params=["fast", "slow"])
def tokenizer(request, tmp_path):
    tok = fast_tokenizer() if request.param == "fast" else slow_tokenizer(tmp_path)
    assert tok.is_fast == (request.param == "fast")
    return tok


def varied_rows(n=300, seed=0):
    """Texts of 0 to 20 words (some words split in two tokens, some unknown), blank ones, in pairs of rows."""
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "mats", "running", "red", "house", "trees", "zebra", "big"]

    def text():
        k = int(rng.choice([0, 0, 1, 3, 6, 8, 9, 10, 11, 14, 20]))
        return rng.choice(["", "  "]) if k == 0 else " ".join(rng.choice(words, k))

    return pd.DataFrame({"a": [text() for _ in range(n)], "b": [text() for _ in range(n)],
                         "g": [f"g{i % 150}" for i in range(n)]})


CONFIGS = {
    "one text": dict(text_cols=["a"]),
    "pair": dict(text_cols=["a", "b"]),
    "template": dict(template="{a} [SEP] {b}"),
    "context pair": dict(text_cols=["a"], group_context="b", group_context_by=["g"]),
    "template with context": dict(template="{a}", group_context="b", group_context_by=["g"]),
}


def old_count(tokenizer, rows, cfg):
    """The count as encode_texts made it before: every row tokenised again, untruncated."""
    text_cols, template = cfg.text_cols or None, cfg.template
    if cfg.group_context:
        text_cols, template = context_text_spec(text_cols, template)
    first, second, _ = build_texts(rows, text_cols, template, sep_token=tokenizer.sep_token)
    full = tokenizer(first, second, verbose=False) if second is not None else tokenizer(first, verbose=False)
    return sum(len(ids) > cfg.max_length for ids in full["input_ids"])


def spy(tokenizer):
    """The tokenizer, recording how many texts each call tokenised without truncation (special tokens added)."""
    whole = []

    class Spy(type(tokenizer)):
        def __call__(self, text, *args, **kwargs):
            if not kwargs.get("truncation") and kwargs.get("add_special_tokens", True):
                whole.append(len(text))
            return super().__call__(text, *args, **kwargs)

    tokenizer.__class__ = Spy
    return tokenizer, whole


@pytest.mark.parametrize("name", list(CONFIGS))
def test_truncated_counts_are_those_of_the_untruncated_pass(tokenizer, name):
    cfg = TrainConfig(max_length=MAX_LENGTH, **CONFIGS[name])
    rows = varied_rows()
    if cfg.group_context:
        rows = add_group_context(rows, cfg.group_context, cfg.group_context_by)
    expected = old_count(tokenizer, rows, cfg)
    assert 0 < expected < len(rows)  # the rows are varied: some truncated, some not
    _, counts = encode_texts(tokenizer, rows, cfg)
    assert counts["truncated"] == expected
    for start in range(0, len(rows), 7):  # and in small slices (as prediction encodes), some at max_length
        part = rows.iloc[start:start + 7]
        assert encode_texts(tokenizer, part, cfg)[1]["truncated"] == old_count(tokenizer, part, cfg)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_fast_tokenizer_does_not_tokenise_the_rows_again(name):
    """Every text was tokenised twice, the second time whole only to count truncations: >half the cost on PPPM."""
    cfg = TrainConfig(max_length=MAX_LENGTH, **CONFIGS[name])
    rows = varied_rows()
    if cfg.group_context:
        rows = add_group_context(rows, cfg.group_context, cfg.group_context_by)
    tokenizer, whole = spy(fast_tokenizer())
    encodings, counts = encode_texts(tokenizer, rows, cfg)
    at_limit = sum(len(ids) == MAX_LENGTH for ids in encodings["input_ids"])
    # at most some rows at max_length: those that just fit, and a context pair's whose own text filled max_length
    assert counts["truncated"] and sum(whole) <= at_limit and sum(whole) < len(rows) // 10


def test_a_slow_tokenizer_tokenises_again_only_the_rows_at_max_length(tmp_path):
    cfg = TrainConfig(max_length=MAX_LENGTH, text_cols=["a", "b"])
    rows = varied_rows()
    tokenizer, whole = spy(slow_tokenizer(tmp_path))
    encodings, counts = encode_texts(tokenizer, rows, cfg)
    assert sum(whole) == sum(len(ids) == MAX_LENGTH for ids in encodings["input_ids"]) < len(rows)
    assert counts["truncated"] == old_count(slow_tokenizer(tmp_path), rows, cfg)


def test_empty_rows_count_none():
    cfg = TrainConfig(max_length=MAX_LENGTH, text_cols=["a"])
    _, counts = encode_texts(fast_tokenizer(), pd.DataFrame({"a": ["", "  ", None]}), cfg)
    assert counts["truncated"] == 0 and counts["texts"] == 3 and counts["empty"] == 3
