"""``explain``: which tokens the pooler weighs for each example, merged back to words, and how faithful that is."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnpool.data.context import tokenize_rows
from attnpool.explanations.faithfulness import (
    STRATEGIES,
    ErasureCurves,
    curves_of,
    prediction_change,
    removal_orders,
    summarize,
)
from attnpool.explanations.labels import check_numeric, label_and_error, label_list
from attnpool.explanations.layers import layer_indices, layer_weights
from attnpool.explanations.numbers import explain_max_length
from attnpool.explanations.result import MEASURES, ExampleExplanation, Explanation
from attnpool.explanations.words import entropy, merge_words, special_token_ids
from attnpool.json_values import is_missing
from attnpool.model import AttnPoolModel
from attnpool.options import shown, whole_number
from attnpool.tasks import class_names, scores_from_logits, task_of
from attnpool.tasks import problem_type as problem_type_of


def _problem_type(config: Any) -> str:
    problem = getattr(config, "problem_type", None) or None
    return problem_type_of(task_of(problem, getattr(config, "num_labels", 1)))


def _outputs(problem: str, logits: np.ndarray) -> np.ndarray:
    """``(N, C)``: values for regression, probabilities for classification (see ``tasks.scores_from_logits``)."""
    logits = np.asarray(logits, dtype=np.float64)
    task = task_of(problem, logits.shape[-1])
    return scores_from_logits(task, logits).reshape(logits.shape)


def _base(model: torch.nn.Module) -> Any:
    """The :class:`~attnpool.AttnPoolModel` of an attnpool model (``model`` itself for the bare one)."""
    return getattr(model, "attnpool", model)


def _find_pooler(model: torch.nn.Module) -> Any:
    return getattr(_base(model), "pooler", None)


def _check_head(model: torch.nn.Module) -> None:
    if isinstance(model, AttnPoolModel):  # encoder + pooler alone: pooled vectors, no logits to explain
        raise ValueError("explain needs a model with a prediction head, got a bare AttnPoolModel (encoder and pooler, "
                         "whose output is the pooled vectors); pass an AttnPoolForSequenceClassification, e.g. "
                         "AttnPoolForSequenceClassification.from_pretrained(folder)")


def _check_pooler(model: torch.nn.Module) -> Any:
    pooler = _find_pooler(model)
    if pooler is not None and not getattr(pooler, "has_weights", True):
        name = getattr(pooler, "name", type(pooler).__name__)
        raise ValueError(
            f"the model's pooler {name!r} gives no token weights, so there is nothing to explain; explain needs a "
            "pooler that weighs tokens (attention, multihead_attention, gated_attention, ...)"
        )
    return pooler


@dataclass
class _Encoded:
    input_ids: list[int]
    token_type_ids: list[int] | None
    tokens: list[str]
    special: list[bool]
    word_ids: list[int | None] | None
    sequence_ids: list[int | None] | None
    offsets: list[tuple[int, int]] | None
    truncated: bool


def _encode(tokenizer: Any, texts: list[str], pairs: list[str] | None, max_length: int,
            context_pairs: bool = False) -> list[_Encoded]:
    """Tokenise as training does (``tokenize_rows``, ``max_length``), keeping what merging words needs."""
    fast = bool(getattr(tokenizer, "is_fast", False))
    tokenize = partial(tokenize_rows, tokenizer, texts, pairs, max_length, context_pair=context_pairs)
    enc = tokenize(return_offsets_mapping=fast)
    full = tokenizer(texts, pairs, verbose=False)
    specials = special_token_ids(tokenizer)
    types = enc.get("token_type_ids")
    segments = None if fast or pairs is None else _slow_segments(tokenize, types)
    out = []
    for i, ids in enumerate(enc["input_ids"]):
        ids = [int(t) for t in ids]
        if fast:
            sequence_ids = enc.sequence_ids(i)
        elif pairs is None:  # one text: every word is of segment 0
            sequence_ids = [int(t) for t in types[i]] if types is not None else None
        else:  # unknown (None), never a second text's word shown as the first's
            sequence_ids = segments[i] if segments is not None and len(segments[i]) == len(ids) else [None] * len(ids)
        out.append(_Encoded(
            input_ids=ids,
            token_type_ids=[int(t) for t in types[i]] if types is not None else None,
            tokens=enc.tokens(i) if fast else tokenizer.convert_ids_to_tokens(ids),
            special=[t in specials for t in ids],
            word_ids=enc.word_ids(i) if fast else None,
            sequence_ids=sequence_ids,
            offsets=[tuple(o) for o in enc["offset_mapping"][i]] if fast else None,
            truncated=len(full["input_ids"][i]) > len(ids),
        ))
    return out


def _slow_segments(tokenize: Callable[..., Any], types: Sequence[Sequence[int]] | None) -> list[list[int]] | None:
    """Which text of a pair each token of a slow tokenizer comes from (0 or 1), by its token type; ``None``: unknown.

    Transformers 5's Python tokenizers (``BertTokenizerLegacy``...) return no ``token_type_ids`` unless asked (their
    ``model_input_names`` lack them): asked for here, for the segments alone, so the model's inputs stay as the
    tokenizer makes them. Types 0 in every pair (RoBERTa's) tell the texts apart nowhere: unknown then.
    """
    if types is None:
        try:
            types = tokenize(return_token_type_ids=True).get("token_type_ids")
        except (TypeError, ValueError, NotImplementedError):  # a tokenizer that cannot make them
            return None
    if types is None or not any(any(row) for row in types):
        return None
    return [[int(t) for t in row] for row in types]


def _model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


@torch.inference_mode()
def _run(model: torch.nn.Module, rows: Sequence[tuple[list[int], np.ndarray, list[int] | None]], *, pad_id: int,
         device: torch.device, batch_size: int, weights: bool) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Logits (and pooling weights) of input rows ``(input_ids, attention_mask, token_type_ids)``.

    Rows are sorted by length and padded on the right per batch. Returns ``(R, C)`` logits and, with
    ``weights``, one ``(heads, len)`` float32 array per row.
    """
    order = np.argsort([-len(r[0]) for r in rows], kind="stable")
    positions_from_mask = getattr(_base(model), "positions_from_mask", False)
    logits: np.ndarray | None = None
    out_weights: list[np.ndarray | None] = [None] * len(rows)
    for start in range(0, len(rows), batch_size):
        chosen = order[start : start + batch_size]
        width = max(1, max(len(rows[i][0]) for i in chosen))  # a batch of texts without tokens: one padding position
        ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chosen), width), dtype=torch.long)
        has_types = rows[chosen[0]][2] is not None
        types = torch.zeros((len(chosen), width), dtype=torch.long) if has_types else None
        for j, i in enumerate(chosen):
            n = len(rows[i][0])
            ids[j, :n] = torch.as_tensor(rows[i][0])
            mask[j, :n] = torch.as_tensor(rows[i][1])
            if types is not None:
                types[j, :n] = torch.as_tensor(rows[i][2])
        kwargs: dict[str, Any] = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        if types is not None:
            kwargs["token_type_ids"] = types.to(device)
        if positions_from_mask:  # an erased token keeps the others where they were: positions of the full row
            kwargs["position_ids"] = torch.arange(width, device=device).expand(len(chosen), width)
        out = model(**kwargs, return_pooling_weights=weights)
        if getattr(out, "logits", None) is None:
            raise ValueError(f"the model ({type(model).__name__}) returned no logits; explain needs a model with a "
                             "prediction head, e.g. an AttnPoolForSequenceClassification")
        batch_logits = out.logits.float().cpu().numpy().reshape(len(chosen), -1)
        if logits is None:
            logits = np.zeros((len(rows), batch_logits.shape[1]), dtype=np.float64)
        logits[chosen] = batch_logits
        if weights:
            if out.pooling_weights is None:
                raise ValueError("the model returned no pooling weights (return_pooling_weights=True gave None); "
                                 "explain needs a pooler that weighs tokens")
            w = out.pooling_weights.float().cpu().numpy()
            w = w[:, None, :] if w.ndim == 2 else w  # (B, heads, T)
            for j, i in enumerate(chosen):
                out_weights[i] = w[j, :, : len(rows[i][0])]
    if logits is None:
        raise ValueError("explain: no input rows to run")
    return logits, (out_weights if weights else None)  # type: ignore[return-value]


def _text(value: Any) -> str:
    """A text as training's ``build_texts`` reads a cell: missing (``None``, NaN, ``pd.NA``) or blank is ``""``."""
    if is_missing(value):
        return ""
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else ""


def _refuse_frame(value: Any, name: str) -> None:
    """Refuse a DataFrame as texts: iterating it gives its column names, which would be explained as the texts."""
    if isinstance(value, pd.DataFrame):
        raise ValueError(f"explain: {name} is a DataFrame (columns {shown(list(value.columns))}), whose iteration "
                         "gives its column names, not its rows; pass one column of it: texts=df['text'] (and "
                         "text_pairs=df['text2'] for pairs)")


def explain(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: str | Sequence[str],
    *,
    text_pairs: str | Sequence[str] | None = None,
    labels: Any = None,
    max_length: int | None = None,
    erasure_k: int = 5,
    seed: int = 0,
    batch_size: int = 32,
    context_pairs: bool = False,
) -> Explanation:
    """Explain the predictions of an attnpool model by its pooling weights, and test how faithful they are.

    For each text: the prediction, every word with the summed weight of its sub-word pieces (per head for a
    multi-head pooler), special tokens apart, the entropy of the weights, and the erasure test of
    :mod:`attnpool.explanations.faithfulness` for ``k = 1..erasure_k`` (tokens ranked by their weight averaged over
    heads).

    Args:
        model: An :class:`~attnpool.AttnPoolForSequenceClassification` (or a model with the same
            ``forward(..., return_pooling_weights=True)``) whose pooler gives token weights.
        tokenizer: Its tokenizer; a fast one merges pieces into words, a slow one shows tokens.
        texts: The texts (or the first texts of pairs), built as in training: a missing one (``None``, NaN) or a
            blank one is ``""``.
        text_pairs: The second texts of pairs (one string with one text); they are kept apart from the first ones.
        labels: True labels (class names or indices, or values), one per text, to show errors; a missing one
            (``None``, NaN, ``pd.NA``) has none, but is the empty set of classes for a multi-label model (as
            training reads a blank cell). With one text (a string), its label may be given as it is: ``"c1"``,
            ``0.5``, or a list for a model of several outputs (``[0.1, 0.2]``, ``["a", "c"]``, ``[1, 0, 1]``).
        max_length: Truncate to this many tokens, as in training; default 128, or less when the encoder reads less
            (its position embeddings).
        erasure_k: ``K``, the most tokens removed; 0 skips the erasure test.
        seed: Seed of the random erasure (each example draws from ``(seed, index)``), ``>= 0``.
        batch_size: Rows per forward pass, ``>= 1``.
        context_pairs: The ``text_pairs`` are group contexts (``--group-context``): truncated first, as in training.

    Returns:
        The :class:`Explanation`. The model runs where it is (move it first: ``model.to("cuda")``), in eval mode;
        its training mode is restored afterwards.

    Raises:
        TypeError: ``model`` is no ``torch.nn.Module`` (a folder path: load it, or use ``explain_file``).
        ValueError: Inputs of different lengths, no texts, ``texts`` or ``text_pairs`` given as a DataFrame, a bad
            option (a number option that is no whole number or out of range), a ``max_length`` over what the
            encoder reads or within the tokenizer's special tokens, a label of a regression model that is not
            ``num_labels`` numbers, a model without a prediction head, or a pooler without token weights.
    """
    if not isinstance(model, torch.nn.Module):
        folder = isinstance(model, str | os.PathLike)  # a saved model or a run: explain_file reads those
        raise TypeError(f"explain: model must be a loaded model (a torch.nn.Module), got {type(model).__name__} "
                        f"{shown(model)}" + ("; load it first with AttnPoolForSequenceClassification.from_pretrained"
                        "(folder), or explain a file's rows with explain_file(folder_or_run, input_file, html_path)"
                        if folder else ""))
    _refuse_frame(texts, "texts")
    _refuse_frame(text_pairs, "text_pairs")
    one_text = isinstance(texts, str)
    texts = [_text(t) for t in ([texts] if one_text else texts)]
    pairs = None if text_pairs is None else [_text(t) for t in ([text_pairs] if isinstance(text_pairs, str)
                                                                else text_pairs)]
    if not texts:
        raise ValueError("explain: no texts given")
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError(f"explain: {len(texts)} texts but {len(pairs)} text_pairs; give one per text")
    config = getattr(model, "config", None)
    problem_type = _problem_type(config)
    several = problem_type != "single_label_classification" and (getattr(config, "num_labels", 1) or 1) > 1
    labels = label_list(labels, texts, one_text, several_outputs=several,
                        multi_label=problem_type == "multi_label_classification")
    max_length = explain_max_length(model, max_length)
    erasure_k = whole_number(erasure_k, "explain: erasure_k", 0, " (0 skips the erasure test)")
    batch_size = whole_number(batch_size, "explain: batch_size", 1, " (rows per forward pass)")
    seed = whole_number(seed, "explain: seed", 0)
    _check_head(model)
    pooler = _check_pooler(model)
    if problem_type == "regression":
        check_numeric(labels, getattr(config, "num_labels", 1))  # before the forward and erasure passes, not after them
    encoded = _encode(tokenizer, texts, pairs, max_length, context_pairs)
    pad_id = tokenizer.pad_token_id if getattr(tokenizer, "pad_token_id", None) is not None else 0
    device = _model_device(model)
    was_training = model.training
    model.eval()
    try:
        full_rows = [(e.input_ids, np.ones(len(e.input_ids), dtype=np.int64), e.token_type_ids) for e in encoded]
        logits, weights = _run(model, full_rows, pad_id=pad_id, device=device, batch_size=batch_size, weights=True)
        outputs = _outputs(problem_type, logits)  # (N, C)
        pooled = [_pooled(model, enc.input_ids) for enc in encoded]
        erasure = _erasure(model, encoded, weights, outputs, problem_type, erasure_k, seed, pad_id, device,
                           batch_size, pooled)
    finally:
        model.train(was_training)
    names = class_names(getattr(config, "id2label", None), outputs.shape[1]) if problem_type != "regression" else None
    tokens_to_string = getattr(tokenizer, "convert_tokens_to_string", None)
    examples = []
    for i, enc in enumerate(encoded):
        w = np.asarray(weights[i], dtype=np.float64)  # (heads, n)
        ent = [entropy(head[pooled[i]]) for head in w]  # over the tokens the pooler may weigh
        predicted = int(np.argmax(outputs[i]))
        if problem_type == "regression":
            prediction: Any = float(outputs[i][0]) if outputs.shape[1] == 1 else outputs[i].tolist()
            probabilities, score = None, float(outputs[i].mean())
        elif problem_type == "single_label_classification":
            prediction, probabilities, score = names[predicted], outputs[i].tolist(), float(outputs[i][predicted])
        else:
            prediction = [n for n, p in zip(names, outputs[i], strict=True) if p >= 0.5]
            probabilities, score = outputs[i].tolist(), float(outputs[i].mean())
        label, error = label_and_error(None if labels is None else labels[i], problem_type, outputs[i], names, config)
        special = np.asarray(enc.special, dtype=bool)  # bool even when empty: a text without tokens
        examples.append(ExampleExplanation(
            index=i,
            text=texts[i],
            text_pair=pairs[i] if pairs is not None else None,
            prediction=prediction,
            probabilities=probabilities,
            score=score,
            label=label,
            error=error,
            words=merge_words(enc.tokens, w, special=enc.special, word_ids=enc.word_ids,
                              sequence_ids=enc.sequence_ids, offsets=enc.offsets,
                              texts=(texts[i], pairs[i] if pairs is not None else None),
                              tokens_to_string=tokens_to_string),
            tokens=list(enc.tokens),
            token_weights=w.tolist(),
            special=[bool(s) for s in enc.special],
            entropy=[e[0] for e in ent],
            normalized_entropy=[e[1] for e in ent],
            special_weight=[float(head[special].sum()) for head in w],
            truncated=enc.truncated,
            erasure=erasure[i],
        ))
    num_heads = int(weights[0].shape[0])
    weights_of_layers = layer_weights(pooler)
    return Explanation(
        examples=examples,
        problem_type=problem_type,
        class_names=names,
        pooler=dict(pooler.get_config()) if hasattr(pooler, "get_config") else {},
        num_heads=num_heads,
        layer_weights=weights_of_layers,
        layer_indices=None if weights_of_layers is None else layer_indices(model, len(weights_of_layers)),
        erasure=summarize(erasure, erasure_k),
        erasure_measure=MEASURES.get(problem_type, "|prediction change|"),
        max_length=max_length,
        erasure_k=erasure_k,
        seed=seed,
    )


def _pooled(model: torch.nn.Module, input_ids: list[int]) -> np.ndarray:
    """Which tokens of a row the pooler may weigh: all, or those of the first ``pool_segments`` segments."""
    base = _base(model)
    if getattr(getattr(base, "config", None), "pool_segments", None) is None:
        return np.ones(len(input_ids), dtype=bool)
    ids = torch.as_tensor([input_ids])
    return base.pooling_mask(ids, torch.ones_like(ids)).numpy()[0].astype(bool)


def _erasure(model: torch.nn.Module, encoded: list[_Encoded], weights: list[np.ndarray], outputs: np.ndarray,
             problem_type: str, max_k: int, seed: int, pad_id: int, device: torch.device,
             batch_size: int, pooled: list[np.ndarray]) -> list[ErasureCurves]:
    """Run every example's erased variants in one batched pass and turn them into curves.

    Only tokens the pooler may weigh are erased (``pooled``): with ``pool_segments`` the others have weight 0 by
    construction, and erasing them would test the encoder's context, not the pooler's ranking.
    """
    rows: list[tuple[list[int], np.ndarray, list[int] | None]] = []
    plans = []  # (example, strategy, k) per row
    orders = []
    for i, enc in enumerate(encoded):
        importance = weights[i].mean(axis=0)  # (n,), the heads' mean
        candidates = ~np.asarray(enc.special, dtype=bool) & pooled[i]
        order = removal_orders(importance, candidates, np.random.default_rng([seed, i]), max_k)
        orders.append(order)
        for strategy in STRATEGIES:
            for k in range(1, len(order[strategy]) + 1):
                mask = np.ones(len(enc.input_ids), dtype=np.int64)
                mask[order[strategy][:k]] = 0
                rows.append((enc.input_ids, mask, enc.token_type_ids))
                plans.append((i, strategy, k))
    changes: list[dict[str, list[float]]] = [{s: [] for s in STRATEGIES} for _ in encoded]
    if rows:
        logits, _ = _run(model, rows, pad_id=pad_id, device=device, batch_size=batch_size, weights=False)
        erased = _outputs(problem_type, logits)
        for row, (i, strategy, _k) in enumerate(plans):  # plans are in k order per example and strategy
            delta = prediction_change(problem_type, outputs[i], erased[row : row + 1], int(np.argmax(outputs[i])))
            changes[i][strategy].append(float(delta[0]))
    return [curves_of(max_k, orders[i], changes[i]) for i in range(len(encoded))]

