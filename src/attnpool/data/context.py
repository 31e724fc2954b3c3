"""Grouped-target context: the other values of a column among the rows of a group, joined into each row's text.

The "magic" of the U.S. Patent Phrase to Phrase Matching gold solutions (Kaggle, 2022; 1st and 2nd place
write-ups): joining all the targets that share a row's anchor and context into its input, so that the model
scores one target while seeing the others it is ranked against. Here it is general: ``column`` is any column (PPPM:
``target``) and ``by`` any key columns (PPPM: ``anchor``, ``context``).

For each row, the context is the distinct values of ``column`` among the rows of a *pool* that share the row's
``by`` values, less the row's own value, sorted (so the text does not depend on the order of the rows), joined by
:data:`CONTEXT_SEP`. The pool is what may be seen: in training the rows of the same side of the fold split (a
training row's context from training rows, a validation row's from validation rows), in prediction the rows of the
file predicted (or of one served request). A row with a missing key value, or no other value in its group, gets an
empty context.

Where it goes in the text (:func:`context_text_spec`): a template gets `` [SEP] {group_context}`` appended unless
it already names ``{group_context}`` (then the user chose the place); text columns get ``group_context`` as one
more column (one column becomes a text pair; two become three joined by the separator).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from transformers import BatchEncoding

from attnpool.data.columns import build_texts, check_columns, template_fields, text_fields
from attnpool.data.errors import DataError
from attnpool.json_values import is_missing

CONTEXT_FIELD = "group_context"  # the column added to the rows and the template placeholder
CONTEXT_SEP = "; "  # between the values of one row's context
CONTEXT_POOLING = ("all", "own")  # what the pooler weighs with a group context: every token, or the row's own text
_FIT_ROWS = 10_000  # rows tokenised at a time by fit_context


def group_context(rows: pd.DataFrame, column: str, by: Sequence[str], *, pool: pd.DataFrame | None = None,
                  sep: str = CONTEXT_SEP) -> pd.Series:
    """The context of each row: the other values of ``column`` in the ``pool`` rows sharing the row's ``by`` values.

    Args:
        rows: The rows to give a context to.
        column: The column whose values are joined (PPPM: ``target``).
        by: The key columns of a group (PPPM: ``anchor``, ``context``).
        pool: The rows the values are taken from; default ``rows`` itself.
        sep: The separator between the values.

    Returns:
        A string per row (index of ``rows``): the distinct values of ``column`` among the ``pool`` rows of the same
        group, the row's own value excluded, sorted, joined by ``sep``; ``""`` when there are none or a key is
        missing. Values and keys are compared as stripped text, so ``1`` and ``"1"`` are one value.

    Raises:
        DataError: ``by`` empty or naming ``column``; a column missing from ``rows`` or ``pool``.
    """
    by = list(by)
    if not by:
        raise DataError(f"group context of {column!r}: no key columns; give the columns whose shared values make a "
                        "group, e.g. --group-context-by anchor context")
    if column in by:
        raise DataError(f"group context of {column!r}: it is also a key column ({', '.join(by)}); every row of a "
                        "group would share its value, leaving no context: drop it from --group-context-by")
    pool = rows if pool is None else pool
    check_columns(rows, [column, *by], "rows given a group context")
    check_columns(pool, [column, *by], "rows the group context is taken from")
    values: dict[tuple[str, ...], set[str]] = {}
    for key, value in zip(_keys(pool, by), _texts(pool[column]), strict=True):
        if key is not None and value:
            values.setdefault(key, set()).add(value)
    groups = {key: sorted(members) for key, members in values.items()}
    context = [sep.join(v for v in groups.get(key, ()) if v != own) if key is not None else ""
               for key, own in zip(_keys(rows, by), _texts(rows[column]), strict=True)]
    return pd.Series(context, index=rows.index, dtype=object, name=CONTEXT_FIELD)


def add_group_context(rows: pd.DataFrame, column: str, by: Sequence[str], *,
                      pool: pd.DataFrame | None = None) -> pd.DataFrame:
    """A copy of ``rows`` with the :data:`CONTEXT_FIELD` column from :func:`group_context`.

    Raises:
        DataError: ``rows`` already has a column of that name; see :func:`group_context`.
    """
    if CONTEXT_FIELD in rows.columns:
        raise DataError(f"the rows already have a column {CONTEXT_FIELD!r}, the name of the group context that "
                        "--group-context adds: rename that column")
    out = rows.copy()
    out[CONTEXT_FIELD] = group_context(rows, column, by, pool=pool)
    return out


def split_groups(frame: pd.DataFrame, by: Sequence[str], train: np.ndarray, valid: np.ndarray) -> tuple[int, int]:
    """``(groups with rows on both sides, groups among the validation rows)`` for the ``by`` key.

    A group split across training and validation gives its validation rows the context of the validation side only:
    shorter than its training rows' and than prediction's on a file that holds the whole group.
    """
    seen = {key for key in _keys(frame.iloc[train], list(by)) if key is not None}
    groups = {key for key in _keys(frame.iloc[valid], list(by)) if key is not None}
    return len(groups & seen), len(groups)


def context_text_spec(text_cols: Sequence[str] | None, template: str | None) -> tuple[list[str] | None, str | None]:
    """``(text_cols, template)`` with the group context in the text; idempotent.

    A template gets ``" [SEP] {group_context}"`` appended (``[SEP]`` becomes the tokenizer's separator) unless it
    names ``{group_context}`` already; text columns get ``group_context`` as their last column unless they have it.
    """
    if template:
        named = CONTEXT_FIELD in template_fields(template)
        return None, template if named else f"{template} [SEP] {{{CONTEXT_FIELD}}}"
    cols = list(text_cols or [])
    return (cols if CONTEXT_FIELD in cols else [*cols, CONTEXT_FIELD]), None


def is_context_pair(group_context: str | None, text_cols: Sequence[str] | None, template: str | None) -> bool:
    """Whether the texts built from ``text_cols`` (or ``template``) are a pair whose second text is the context.

    One text column with ``group_context`` (after :func:`context_text_spec`): the tokenizer's pair
    ``(text, group_context)``, which :func:`tokenize_rows` truncates context first.
    """
    cols = list(text_cols or [])
    return bool(group_context) and not template and len(cols) == 2 and cols[1] == CONTEXT_FIELD


def tokenize_rows(tokenizer: Any, first: Sequence[str], second: Sequence[str] | None, max_length: int, *,
                  context_pair: bool = False, **kwargs: Any) -> BatchEncoding:
    """The rows tokenised and truncated to ``max_length``, as training, prediction, explain and serve tokenise them.

    A text, or a pair of two text columns, is truncated by ``truncation=True`` (a pair: the longer text first). A
    pair whose second text is the group context (``context_pair``, :func:`is_context_pair`) gives up its context
    first (``truncation="only_second"``), so the row's own text keeps all its tokens while the context can make room;
    a row whose own text alone (with the pair's special tokens) fills ``max_length`` gets an empty context and its
    own text truncated. The rows are tokenised in two batches at most; ``kwargs`` go to each call, and so may not pad
    (each batch would be padded to its own length): pad the result with ``tokenizer.pad``.
    """
    if kwargs.get("padding") not in (None, False, "do_not_pad") or kwargs.get("return_tensors") is not None:
        raise ValueError("tokenize_rows returns unpadded lists (its rows are tokenised in up to two batches); leave "
                         "out padding= and return_tensors= and pad the result with tokenizer.pad(...)")
    check_room(tokenizer, max_length, pair=second is not None)
    if second is None:
        return tokenizer(list(first), truncation=True, max_length=max_length, **kwargs)
    if not context_pair or not len(first):
        return tokenizer(list(first), list(second), truncation=True, max_length=max_length, **kwargs)
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    own = tokenizer(list(first), add_special_tokens=False, verbose=False)["input_ids"]
    # "only_second" refuses a row whose context would have to give up every token or more
    full = [i for i, ids in enumerate(own) if len(ids) >= room]
    rest = [i for i, ids in enumerate(own) if len(ids) < room]
    parts = []
    if rest:
        parts.append((rest, tokenizer([first[i] for i in rest], [second[i] for i in rest],
                                      truncation="only_second", max_length=max_length, **kwargs)))
    if full:
        parts.append((full, tokenizer([first[i] for i in full], [""] * len(full), truncation=True,
                                      max_length=max_length, **kwargs)))
    return parts[0][1] if len(parts) == 1 else _merged(parts, len(own))


def cuts_context_first(tokenizer: Any, text_cols: Sequence[str] | None, template: str | None) -> bool:
    """Whether truncation alone cuts the group context before the row's own text.

    So it does for the context pair, and for one text that ends with the context, cut from the right
    (the tokenizer's ``truncation_side``).
    """
    text_cols, template = context_text_spec(text_cols, template)
    if is_context_pair(CONTEXT_FIELD, text_cols, template):
        return True
    fields = text_fields(text_cols, template)
    last = template.rstrip().endswith("{" + CONTEXT_FIELD + "}") if template else fields[-1] == CONTEXT_FIELD
    single = bool(template) or len(fields) != 2  # two columns are a pair, truncated longest first
    return last and single and fields.count(CONTEXT_FIELD) == 1 and getattr(tokenizer, "truncation_side",
                                                                            "right") == "right"


def fit_context(tokenizer: Any, rows: pd.DataFrame, text_cols: Sequence[str] | None, template: str | None,
                max_length: int, *, sep: str) -> tuple[pd.DataFrame, list[int]]:
    """``rows`` with the group context of each row too long for ``max_length`` cut to the values that fit.

    Where truncation would cut the row's own text first (not :func:`cuts_context_first`): the group context placed
    before or among the row's own fields, or a tokenizer that cuts from the left.
    The context keeps its first values (in their sorted order) as long as the whole text fits; a row whose own text
    alone does not fit gets an empty context (and is truncated as any text). Only the rows too long are rendered
    again; in the default layout (the context last, cut from the right) ``rows`` come back as they are.

    Returns:
        ``(rows, positions)``: a copy of ``rows`` with the shortened contexts (``rows`` itself when none is), and the
        positions of the rows whose context was shortened and that now fit (they count as truncated).
    """
    text_cols, template = context_text_spec(text_cols, template)
    if cuts_context_first(tokenizer, text_cols, template) or not len(rows):
        return rows, []
    values = [v.split(CONTEXT_SEP) if v else [] for v in _texts(rows[CONTEXT_FIELD])]

    def fits(positions: np.ndarray, counts: np.ndarray) -> np.ndarray:
        part = rows.iloc[positions].assign(**{CONTEXT_FIELD: [CONTEXT_SEP.join(values[i][:k])
                                                              for i, k in zip(positions, counts, strict=True)]})
        first, second, _ = build_texts(part, text_cols, template, sep_token=sep)
        lengths = []
        for start in range(0, len(first), _FIT_ROWS):  # in slices: a whole file's encodings hold much memory
            end = start + _FIT_ROWS
            pair = [second[start:end]] if second is not None else []
            lengths += [len(ids) for ids in tokenizer(first[start:end], *pair, verbose=False)["input_ids"]]
        return np.asarray(lengths, dtype=int) <= max_length

    sizes = np.asarray([len(v) for v in values], dtype=int)
    over = np.flatnonzero(sizes > 0)
    over = over[~fits(over, sizes[over])] if len(over) else over
    if not len(over):
        return rows, []
    low, high = np.zeros(len(over), dtype=int), sizes[over] - 1  # the most values that fit: in [low, high]
    while (open_ := low < high).any():
        mid = (low + high + 1) // 2
        ok = np.ones(len(over), dtype=bool)
        ok[open_] = fits(over[open_], mid[open_])
        low, high = np.where(open_ & ok, mid, low), np.where(open_ & ~ok, mid - 1, high)
    out = rows.copy()
    column = out.columns.get_loc(CONTEXT_FIELD)
    out.iloc[over, column] = [CONTEXT_SEP.join(values[i][:k]) for i, k in zip(over, low, strict=True)]
    fitted = fits(over, low)
    return out, [int(i) for i in over[fitted]]


def sample_groups(frame: pd.DataFrame, by: Sequence[str], limit: int, seed: int) -> pd.DataFrame:
    """Whole groups of ``frame`` drawn in a seeded random order, each taken if the rows stay at most ``limit``.

    A group: the rows sharing their ``by`` values, as :func:`group_context` joins them. A group too large for the
    room left is passed over, not the end of the draw (the first one that did not fit stopped it: 17 rows of 100
    asked, or a group of 900 drawn whole); when none fits, the smallest group is drawn alone. The rows come in their
    order in ``frame``.
    A row with a missing key is a group of its own. ``--limit`` with a group context: each row keeps its group's
    other values, as prediction gives them from a file of whole groups.
    """
    groups: dict[Any, list[int]] = {}
    for position, key in enumerate(_keys(frame, list(by))):
        groups.setdefault(key if key is not None else ("", position), []).append(position)
    members = list(groups.values())
    taken: list[int] = []
    for group in np.random.default_rng(seed).permutation(len(members)):
        if len(taken) + len(members[group]) <= limit:
            taken += members[group]
        if len(taken) == limit:
            break
    taken = taken or min(members, key=len)
    return frame.iloc[sorted(taken)].reset_index(drop=True)


def check_room(tokenizer: Any, max_length: int, *, pair: bool) -> None:
    """Refuse a ``max_length`` that leaves no token of text beside the tokenizer's special tokens.

    A Hugging Face tokenizer asked to truncate below its special tokens logs an error and returns the row whole, so
    such a ``max_length`` would be silently ignored: reports would say ``truncated: False``, and a long row would
    overflow the encoder's position embeddings.

    Raises:
        ValueError: ``max_length`` at or below ``tokenizer.num_special_tokens_to_add(pair=pair)``.
    """
    special = tokenizer.num_special_tokens_to_add(pair=pair)
    if max_length <= special:
        what = "text pair" if pair else "text"
        raise ValueError(f"max_length {max_length} (--max-length) leaves no room for text: the tokenizer "
                         f"{type(tokenizer).__name__} adds {special} special tokens to each {what}; give "
                         f"--max-length {special + 1} or more (a few dozen tokens, to read more than a word)")


def _merged(parts: list[tuple[list[int], BatchEncoding]], n: int) -> BatchEncoding:
    """One batch of ``n`` rows from batches of some of them (each with its row numbers), in row order."""
    place = {i: (j, k) for j, (rows, _) in enumerate(parts) for k, i in enumerate(rows)}
    data = {key: [parts[place[i][0]][1][key][place[i][1]] for i in range(n)] for key in parts[0][1].keys()}
    fast = parts[0][1].encodings is not None
    encodings = [parts[place[i][0]][1].encodings[place[i][1]] for i in range(n)] if fast else None
    return BatchEncoding(data, encoding=encodings, n_sequences=2)


def _keys(frame: pd.DataFrame, by: list[str]):
    """Each row's key as a tuple of stripped texts, or ``None`` when one of its values is missing or blank."""
    for key in zip(*(_texts(frame[c]) for c in by), strict=True):
        yield key if all(key) else None


def _texts(column: pd.Series) -> list[str]:
    return [_text(v) for v in column.tolist()]


def _text(value: Any) -> str:
    if is_missing(value):
        return ""
    return str(value).strip()


def own_segments(tokenizer: Any, text_cols: Sequence[str] | None, template: str | None) -> tuple[int, int]:
    """``(segments, separator id)``: how many separator-ended segments a row's own text fills in its input.

    What ``--group-context-pooling own`` pools (``AttnPoolConfig.pool_segments``): the tokens up to and with that
    many separators, the row's own fields, and not the context after them. Counted on a probe row (each field one
    word) built and tokenised as the recipe builds the texts (:func:`context_text_spec`, ``build_texts``), so the
    tokenizer's own way of joining a pair (``[SEP]``, ``</s></s>``) is counted as it comes; the context, last,
    ends with one separator of its own.

    Raises:
        DataError: The context is not the last field of the text; a tokenizer without a separator token.
    """
    sep_id = getattr(tokenizer, "sep_token_id", None)
    if sep_id is None:
        raise DataError(f"--group-context-pooling own finds the row's own text by its separators, and the tokenizer "
                        f"{type(tokenizer).__name__} has no separator token; use --group-context-pooling all")
    cols, template = context_text_spec(text_cols, template)
    fields = text_fields(cols, template)
    last = template.rstrip().endswith("{" + CONTEXT_FIELD + "}") if template else fields[-1] == CONTEXT_FIELD
    if not last or fields.count(CONTEXT_FIELD) != 1:
        raise DataError(f"--group-context-pooling own pools the text before the group context, so the context must "
                        f"come last, once: the text is {template or cols!r}. Move {{{CONTEXT_FIELD}}} to the end "
                        "of the template, or use --group-context-pooling all")
    probe = pd.DataFrame([{name: "word" for name in fields}])
    first, second, _ = build_texts(probe, cols, template, sep_token=tokenizer.sep_token)
    ids = (tokenizer(first, second) if second is not None else tokenizer(first))["input_ids"][0]
    return sum(int(i == sep_id) for i in ids) - 1, int(sep_id)
