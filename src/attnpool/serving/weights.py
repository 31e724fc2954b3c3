"""The word-level pooling weights of served rows, merged from sub-word pieces as ``attnpool explain`` merges them.

Predictions always come from :meth:`FoldEnsemble.scores <attnpool.prediction.engine.FoldEnsemble.scores>` (so they
are ``predict``'s numbers); the weights come from a second forward pass of the rows that ask for them, with
``return_pooling_weights=True``, because the prediction engine returns logits only. Each row's token weights are
the ensemble's weighted mean of the folds' weights (per head); every head's weights sum to 1 over the row's tokens,
and so do the mean's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnpool.data.batching import ENCODING_KEYS, padded_batches
from attnpool.data.context import tokenize_rows
from attnpool.explanations.words import merge_words, special_token_ids
from attnpool.precision import autocast
from attnpool.prediction.engine import FoldEnsemble


def word_weights(ensemble: FoldEnsemble, texts: Sequence[tuple[str, str | None]], input_ids: Sequence[list[int]],
                 *, max_length: int, batch_size: int, device: torch.device, precision: str,
                 lock: threading.Lock, context_pairs: bool = False) -> list[list[dict[str, Any]]]:
    """Each row's words (and special tokens) with their pooling weights.

    Args:
        ensemble: The served models and their weights.
        texts: Each row's ``(text, pair or None)``, built as the prediction built them.
        input_ids: Each row's token ids as predicted, to check the re-tokenised texts against.
        max_length: Truncation.
        batch_size: Rows per forward pass.
        device: Where the models are.
        precision: The autocast precision of the prediction.
        lock: Held while the tokenizer runs (it is shared with the request handlers).
        context_pairs: The pairs' second texts are group contexts (a run trained with ``--group-context`` and one
            text column), truncated context first as the prediction truncated them
            (:func:`attnpool.data.context.tokenize_rows`); ``False``: truncated as any pair.

    Returns:
        Per row, the words in input order: ``text``, ``kind`` (``word`` or ``special``), ``segment`` (0: text,
        1: pair), ``start``/``end`` (character offsets in their segment), ``pieces``, ``weight`` (mean over heads)
        and ``weights`` (per head).
    """
    tokenizer = ensemble.tokenizer
    fast = bool(getattr(tokenizer, "is_fast", False))
    specials = special_token_ids(tokenizer)
    with lock:
        encoded = _encode(tokenizer, texts, max_length, fast, context_pairs)
    for i, (row, ids) in enumerate(zip(encoded, input_ids, strict=True)):
        if row.features["input_ids"] != list(ids):
            raise RuntimeError(f"row {i}: the texts re-tokenised for the word weights differ from the predicted "
                               "tokens; this is a bug in attnpool, please report it")
    weights = _token_weights(ensemble, encoded, batch_size, device, precision)
    join = getattr(tokenizer, "convert_tokens_to_string", None)
    out = []
    for (first, second), row, w in zip(texts, encoded, weights, strict=True):
        ids = row.features["input_ids"]
        words = merge_words(row.tokens if fast else tokenizer.convert_ids_to_tokens(ids), w,
                            special=[t in specials for t in ids], word_ids=row.word_ids,
                            sequence_ids=row.sequence_ids, offsets=row.offsets, texts=(first, second),
                            tokens_to_string=join)
        out.append([{"text": word.text, "kind": word.kind, "segment": word.segment, "start": word.start,
                     "end": word.end, "pieces": list(word.pieces), "weight": word.weight,
                     "weights": [float(v) for v in word.weights]} for word in words])
    return out


@dataclass
class _Row:
    """One row's tokens as the tokenizer gave them; the fast tokenizer's alignment, else ``None``."""

    features: dict[str, list[int]]  # input_ids, attention_mask (, token_type_ids)
    tokens: list[str] | None
    word_ids: list[int | None] | None
    sequence_ids: list[int | None] | None
    offsets: list[tuple[int, int]] | None


def _encode(tokenizer: Any, texts: Sequence[tuple[str, str | None]], max_length: int, fast: bool,
            context_pairs: bool) -> list[_Row]:
    """The rows tokenised in list form, the pairs apart, as the prediction tokenised them (``tokenize_rows``).

    The form matters: ``tokenizer(text, "")`` drops an empty second text where ``tokenizer([text], [""])`` keeps
    it (``[CLS] text [SEP] [SEP]``), and :func:`attnpool.data.task.encode_texts` (the prediction) calls the list
    form. A blank pair (``build_texts`` makes whitespace ``""``) tokenised one row at a time would not match.
    """
    rows: list[_Row | None] = [None] * len(texts)
    for pair in (False, True):
        members = [i for i, (_, second) in enumerate(texts) if (second is not None) == pair]
        if not members:
            continue
        batch = tokenize_rows(tokenizer, [texts[i][0] for i in members],
                              [texts[i][1] for i in members] if pair else None, max_length,
                              context_pair=context_pairs, return_offsets_mapping=fast)
        for j, i in enumerate(members):
            features = {k: list(batch[k][j]) for k in ENCODING_KEYS if k in batch}
            rows[i] = _Row(features, batch.tokens(j) if fast else None, batch.word_ids(j) if fast else None,
                           batch.sequence_ids(j) if fast else None,
                           [tuple(o) for o in batch["offset_mapping"][j]] if fast else None)
    return rows  # type: ignore[return-value]  # every row is in one of the two groups


@torch.inference_mode()
def _token_weights(ensemble: FoldEnsemble, encoded: Sequence[_Row], batch_size: int, device: torch.device,
                   precision: str) -> list[np.ndarray]:
    """``(heads, tokens)`` weights per row: the folds' pooling weights, averaged with the ensemble's weights."""
    encodings = {k: [row.features[k] for row in encoded] for k in encoded[0].features}
    out: list[np.ndarray] = [np.zeros(0)] * len(encoded)
    context = autocast(precision, device)
    left = getattr(ensemble.tokenizer, "padding_side", "right") == "left"  # tokenizer.pad pads on that side
    for batch, features in padded_batches(encodings, batch_size, ensemble.tokenizer):
        features = {k: v.to(device) for k, v in features.items()}
        total = None
        for fold_weight, model in zip(ensemble.weights, ensemble.models, strict=True):
            with context:
                result = model(**features, return_pooling_weights=True).pooling_weights
            if result is None:
                raise ValueError("the model returned no pooling weights; its pooler does not weigh tokens")
            result = result.float().cpu().numpy()
            result = result[:, None, :] if result.ndim == 2 else result  # (B, heads, T)
            total = fold_weight * result if total is None else total + fold_weight * result
        for j, i in enumerate(batch):
            n = len(encoded[i].features["input_ids"])
            row = total[j, :, total.shape[-1] - n :] if left else total[j, :, :n]
            row = row.astype(np.float64)
            sums = row.sum(axis=-1, keepdims=True)  # bf16 weights sum to 1 only within their rounding
            out[i] = np.divide(row, sums, out=row.copy(), where=sums > 0)
    return out
