"""From sub-word pieces back to words: merge token weights per word, keep special tokens apart, measure entropy."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WORD = "word"
SPECIAL = "special"


@dataclass
class Word:
    """A word (its sub-word pieces merged) or a special token, with its pooling weight per head.

    Attributes:
        text: The word as written in the input (from the tokenizer's offsets), or the special token.
        kind: ``"word"`` or ``"special"`` (``[CLS]``, ``[SEP]``, ``<s>``...: never merged into a word).
        segment: ``0`` for the text, ``1`` for the second text of a pair; ``None`` for special tokens that the
            tokenizer added around the texts.
        pieces: The tokens it is made of, e.g. ``["un", "##believ", "##able"]``.
        positions: Their positions in the encoded input.
        weights: The sum of the pieces' pooling weights, one value per pooler head.
        start: Character offset in its segment's text where the word begins (``None`` without offsets).
        end: Character offset where it ends.
    """

    text: str
    kind: str
    segment: int | None
    pieces: list[str]
    positions: list[int]
    weights: list[float]
    start: int | None = None
    end: int | None = None

    @property
    def weight(self) -> float:
        """The weight averaged over heads (the weight itself for a single-head pooler)."""
        return float(np.mean(self.weights))


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's special tokens, except ``[UNK]``, which stands for a real word of the text."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids.discard(getattr(tokenizer, "unk_token_id", None))
    return ids


def merge_words(
    tokens: Sequence[str],
    weights: np.ndarray,
    *,
    special: Sequence[bool],
    word_ids: Sequence[int | None] | None = None,
    sequence_ids: Sequence[int | None] | None = None,
    offsets: Sequence[tuple[int, int]] | None = None,
    texts: Sequence[str | None] = (),
    tokens_to_string: Any = None,
) -> list[Word]:
    """Group the real tokens of one encoded input into words and special tokens, summing the weights of the pieces.

    Consecutive pieces with the same ``(sequence id, word id)`` form one word, as a fast tokenizer's ``word_ids()``
    and ``sequence_ids()`` say; the two texts of a pair stay apart because their sequence ids differ. Special
    tokens are units of their own, wherever they are (a ``[SEP]`` written inside a template too). Without word ids
    (a slow tokenizer) every token is its own unit.

    Args:
        tokens: The ``n`` tokens (real ones only, no padding).
        weights: ``(heads, n)`` pooling weights of those tokens.
        special: Whether each token is a special token.
        word_ids: The fast tokenizer's ``word_ids()``.
        sequence_ids: The fast tokenizer's ``sequence_ids()`` (0: text, 1: pair, ``None``: added tokens).
        offsets: ``(start, end)`` character offsets of each token in its segment's text.
        texts: The segments' texts, ``(text, pair)``, to read the words from.
        tokens_to_string: ``tokenizer.convert_tokens_to_string``, for words whose offsets are missing.

    Returns:
        The words and special tokens in input order; their weights sum to the tokens' weights.
    """
    if not tokens:  # a blank text with a tokenizer that adds no special tokens (GPT-2's): nothing to merge
        return []
    weights = np.asarray(weights, dtype=np.float64).reshape(-1, len(tokens))  # (heads, n)
    words: list[Word] = []
    previous_key: tuple[int | None, int] | None = None
    for position, token in enumerate(tokens):
        segment = sequence_ids[position] if sequence_ids is not None else 0
        word_id = word_ids[position] if word_ids is not None else None
        if special[position]:
            words.append(Word(token, SPECIAL, segment if word_id is not None else None, [token], [position],
                              weights[:, position].tolist()))
            previous_key = None
            continue
        key = (segment, word_id) if word_id is not None else None
        if key is not None and key == previous_key and not _starts_word(position, tokens, offsets, texts, segment):
            word = words[-1]
            word.pieces.append(token)
            word.positions.append(position)
            word.weights = (np.asarray(word.weights) + weights[:, position]).tolist()
        else:
            words.append(Word(token, WORD, segment, [token], [position], weights[:, position].tolist()))
        previous_key = key
    for word in words:
        if word.kind == WORD:
            _set_text(word, offsets, texts, tokens_to_string)
    _keep_marks(words, texts)
    return words


def _keep_marks(words: list[Word], texts: Sequence[str | None]) -> None:
    """Extend each word over the combining marks (accents, vowel signs) that follow it, up to the next word.

    BERT's normalizer strips marks (Unicode category ``M*``), so the offsets of ``"Cafe\u0301"`` (NFD), Hindi
    ``"\u0939\u0948"`` or Thai ``"\u0e14\u0e35"`` end before the last mark: the word showed without it, and the
    page put a space between the word and what follows it.
    """
    ends: dict[int, int] = {}  # segment -> where the word read last (in input order) may extend to
    for word in reversed(words):
        if word.kind != WORD or word.start is None or word.end is None or word.segment not in (0, 1):
            continue
        text = texts[word.segment] if word.segment < len(texts) else None
        limit = ends.get(word.segment, len(text or ""))
        ends[word.segment] = word.start
        if text is None or word.text != text[word.start:word.end]:  # whitespace shown as marks: leave it
            continue
        end = word.end
        while end < limit and unicodedata.category(text[end]).startswith("M"):
            end += 1
        word.end, word.text = end, text[word.start:end]


def _starts_word(position: int, tokens: Sequence[str], offsets: Sequence[tuple[int, int]] | None,
                 texts: Sequence[str | None], segment: int | None) -> bool:
    """Whether a piece that shares the previous one's word id starts a word after all.

    It does after a space: Llama and Mistral tokenizers (Metaspace without splitting) give every piece of a text
    word id 0. It does between two CJK characters (:func:`_is_cjk`): Chinese and Japanese are written without
    spaces, so a SentencePiece tokenizer would make a whole sentence one word; each piece of them is a word, as
    BERT's tokenizer makes each CJK ideograph one (its ``_tokenize_chinese_chars``).
    """
    text = texts[segment] if offsets is not None and segment is not None and segment < len(texts) else None
    if text is None:
        previous, piece = tokens[position - 1], tokens[position]
        return piece.startswith(("\u2581", "\u0120")) or (  # SentencePiece's and byte-level BPE's space marks
            _is_cjk(previous[-1:]) and _is_cjk(piece[:1]))
    (_, previous_end), (start, end) = offsets[position - 1], offsets[position]
    # a piece that starts inside the previous one is another byte of the same character (a no-break space's two)
    if end > start >= previous_end > 0 and _is_cjk(text[previous_end - 1]) and _is_cjk(text[start]):
        return True
    return any(c.isspace() for c in text[previous_end:start]) or (end > start >= previous_end
                                                                  and text[start].isspace())


# Scripts written without spaces between words: CJK ideographs (with the iteration marks) and kana. Not hangul:
# Korean puts spaces between words, and a word's syllables are its pieces, not words.
_CJK_RANGES = ((0x3005, 0x3007), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
               (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x20000, 0x2FA1F))


def _is_cjk(char: str) -> bool:
    """Whether ``char`` (one character; ``""`` is not) is a CJK ideograph or a kana."""
    return len(char) == 1 and any(low <= ord(char) <= high for low, high in _CJK_RANGES)


def _set_text(word: Word, offsets: Sequence[tuple[int, int]] | None, texts: Sequence[str | None],
              tokens_to_string: Any) -> None:
    """The word as written in the text (case and accents kept), else its pieces joined back by the tokenizer.

    A word of whitespace alone (byte-level BPE's ``Ċ`` for a line break or ``Ġ`` for a second space, the two bytes
    of a no-break space) shows that whitespace as visible marks (:func:`visible_space`), not as the raw pieces.
    """
    if offsets is not None and word.segment is not None and word.segment < len(texts):
        text = texts[word.segment]
        spans = [offsets[p] for p in word.positions if offsets[p][1] > offsets[p][0]]
        if text is not None and spans:
            start, end = min(s for s, _ in spans), max(e for _, e in spans)
            first, last = start, end
            while first < last and text[first].isspace():  # Metaspace pieces (DeBERTa-v3) hold the space before
                first += 1
            while last > first and text[last - 1].isspace():
                last -= 1
            if first < last:
                word.start, word.end, word.text = first, last, text[first:last]
            else:  # whitespace alone: where it is, and marks to see it by
                word.start, word.end, word.text = start, end, visible_space(text[start:end])
            return
    joined = ""
    if tokens_to_string is not None:
        try:
            joined = str(tokens_to_string(word.pieces))
        except Exception:  # noqa: BLE001 - a tokenizer that cannot join pieces: show them as they are
            pass
    word.text = joined.strip() or (visible_space(joined) if joined else "".join(word.pieces))


def visible_space(space: str) -> str:
    r"""Whitespace made visible, a mark a character: ``⏎`` a line break (``\r\n`` too), ``⇥`` a tab, ``␣`` others."""
    return "".join("\u23ce" if c in _BREAKS else "\u21e5" if c == "\t" else "\u2423"
                   for c in space.replace("\r\n", "\n"))


_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines breaks at


def entropy(weights: np.ndarray) -> tuple[float, float]:
    r"""Shannon entropy of one distribution of weights, and the entropy divided by its maximum.

    .. math::
        H(a) = -\sum_t a_t \log a_t, \qquad \tilde H = H / \log n \in [0, 1]

    ``0`` means all weight on one token (concentrated), ``1`` the uniform spread over all ``n`` tokens.

    Args:
        weights: ``(n,)`` non-negative weights summing to 1 (renormalised if they do not).

    Returns:
        ``(H in nats, H / log n)``; ``(0, 0)`` for fewer than two tokens or no weight at all.
    """
    w = np.clip(np.asarray(weights, dtype=np.float64).ravel(), 0.0, None)
    n, total = w.size, w.sum()
    if n < 2 or total <= 0:
        return 0.0, 0.0
    w = w[w > 0] / total
    value = float(-(w * np.log(w)).sum())
    return value, min(max(value / math.log(n), 0.0), 1.0)
