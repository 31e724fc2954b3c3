"""The U.S. Patent Phrase to Phrase Matching data (Kaggle, 2022), the reference task of the k-fold recipe.

Each row scores the similarity of two short patent phrases (``anchor``, ``target``) in {0, 0.25, 0.5, 0.75, 1},
within a CPC class (``context``, e.g. ``A47``). As in the public baseline, the context code is replaced by its
title from ``cpc_texts.csv`` and the three are joined into one text; folds are grouped by ``anchor``.
Metric: Pearson correlation. Data: Aslanyan and Wetherbee, "Patents Phrase to Phrase Semantic Matching
Dataset", 2022, arXiv:2208.01171.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from attnpool.data.columns import check_columns
from attnpool.data.errors import DataError
from attnpool.data.readers import read_table

PPPM_TEMPLATE = "{anchor} [SEP] {target} [SEP] {context_text}"
PPPM_FIELDS = ("anchor", "target", "context")  # what a PPPM row gives; context_text is looked up from context
SPLITS = ("train", "test")
_TEXT_COLUMNS = ("id", *PPPM_FIELDS, "text")  # read as strings even when they look like numbers

_LAYOUT = (
    "expected a folder holding train.csv (id,anchor,target,context,score), test.csv (id,anchor,target,context) "
    "and cpc_texts.csv (context,text: the CPC title of each context code), as in the Kaggle "
    "'us-patent-phrase-to-phrase-matching' download plus cpc_texts.csv"
)


def cpc_titles(data_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The CPC title of each context code, from ``data_dir/cpc_texts.csv``.

    Raises:
        DataError: Missing folder, file or column (stating the expected layout); a code without a title, or given
            twice (naming them and their rows).
    """
    return read_titles(_file(_folder(data_dir), "cpc_texts.csv"))


def read_titles(path: str | os.PathLike[str]) -> dict[str, str]:
    """The CPC title of each context code (stripped), from a ``context,text`` file such as ``cpc_texts.csv``.

    Raises:
        DataError: A missing column; a line without a code, a code without a title, or one given twice (a
            silent choice of title otherwise): each named with its data rows.
    """
    table = read_table(path, text_columns=_TEXT_COLUMNS)
    check_columns(table, ["context", "text"], str(path))
    codes, titles = _stripped(table["context"]), _stripped(table["text"])
    problems = []
    if codes.eq("").any():
        problems.append(f"no code on data row(s) {_rows(codes.index[codes.eq('')])}")
    for code in dict.fromkeys(codes[titles.eq("") & codes.ne("")]):
        problems.append(f"no title for {code!r} (data row(s) {_rows(codes.index[codes.eq(code)])})")
    for code in dict.fromkeys(codes[codes.duplicated() & codes.ne("")]):
        problems.append(f"{code!r} given twice or more (data rows {_rows(codes.index[codes.eq(code)])})")
    if problems:
        shown = "; ".join(problems[:10]) + ("; ..." if len(problems) > 10 else "")
        raise DataError(f"{path}: {shown}. Each line gives one CPC code and its title, once per code: fix those lines")
    return dict(zip(codes, table["text"].astype(str), strict=True))


def load_pppm(
    data_dir: str | os.PathLike[str], split: str = "train", *, frame: pd.DataFrame | None = None,
    titles: Mapping[str, str] | None = None, titles_name: str | None = None,
) -> tuple[pd.DataFrame, str]:
    """Read a PPPM split and add the title of each row's CPC context.

    Args:
        data_dir: The PPPM folder (see the expected layout in the errors).
        split: ``"train"`` (with ``score``) or ``"test"``.
        frame: Rows to use instead of ``data_dir/{split}.csv`` (e.g. another file to predict); only
            ``cpc_texts.csv`` is read from ``data_dir`` then.
        titles: The context titles (:func:`cpc_titles`) when already read: ``cpc_texts.csv`` is not read again
            (predict's chunks, serve's requests).
        titles_name: What ``titles`` are, for the error on codes they lack (a run's: ``"the CPC titles this run
            was trained with (PATH)"``): those rows are to be corrected or dropped. Default: ``data_dir``'s
            ``cpc_texts.csv``, to which lines for the codes are to be added (a data folder to train on).

    Returns:
        ``(frame, template)``: a copy of the rows with a ``context_text`` column, and :data:`PPPM_TEMPLATE`
        (``"{anchor} [SEP] {target} [SEP] {context_text}"``) for :func:`attnpool.data.build_texts`.

    Raises:
        DataError: Missing folder, file or column (stating the expected layout); context codes that
            ``cpc_texts.csv`` lacks (naming them).
    """
    if split not in SPLITS:
        raise DataError(f"unknown PPPM split {split!r}; choose one of {', '.join(SPLITS)}")
    root = _folder(data_dir)
    if frame is None:
        frame = read_table(_file(root, f"{split}.csv"), text_columns=_TEXT_COLUMNS)
        where = str(root / f"{split}.csv")
        check_columns(frame, [*PPPM_FIELDS, *(["score"] if split == "train" else [])], where)
    else:
        where = f"PPPM {split} rows"
        check_columns(frame, list(PPPM_FIELDS), where)
    titles = cpc_titles(root) if titles is None else titles
    codes = _stripped(frame["context"])  # " A47" is A47, as in the group keys and folds
    blank = codes.eq("").to_numpy().nonzero()[0]
    if len(blank):
        if isinstance(frame.index, pd.RangeIndex):  # a chunk of a file carries its rows' positions in the file
            blank = frame.index[blank]
        raise DataError(
            f"{where}: {len(blank)} row(s) have no context code (data rows {_rows(blank)}); every PPPM row needs its "
            "CPC context (e.g. A47), whose title cpc_texts.csv gives: fill them in or drop those rows")
    titles = {str(code).strip(): title for code, title in titles.items()}
    unknown = sorted(set(codes) - set(titles))
    if unknown:
        raise DataError(_unknown_codes(root, unknown, int(codes.isin(unknown).sum()), titles, titles_name))
    out = frame.copy()
    out["context_text"] = codes.map(titles)
    return out, PPPM_TEMPLATE


def _folder(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"PPPM data folder {root} does not exist or is not a folder; {_LAYOUT}")
    return root


def _file(root: Path, name: str) -> Path:
    path = root / name
    if not path.is_file():
        raise DataError(f"{path} not found in the PPPM data folder; {_LAYOUT}")
    return path


def _stripped(values: pd.Series) -> pd.Series:
    """The values as stripped text, a missing one as ``""``."""
    return values.fillna("").astype(str).str.strip()


def _rows(positions) -> str:
    """1-based data row numbers of 0-based positions, the first ten."""
    return ", ".join(str(int(i) + 1) for i in positions[:10]) + (", ..." if len(positions) > 10 else "")


def _unknown_codes(root: Path, unknown: list[str], rows: int, titles: Mapping[str, str],
                   titles_name: str | None = None) -> str:
    """The error for context codes without a title: a known code in another case is told apart.

    CPC codes are upper case, and the group keys and folds compare codes as written (a47 and A47 would be two).
    With ``titles_name`` (a trained model's titles) a code new to them is not added: the model learned those titles,
    and a run reads its own copy once the data folder's file differs from it (:meth:`attnpool.runs.Run.config`).
    """
    known = {code.upper(): code for code in titles}
    cased = [code for code in unknown if code.upper() in known]
    shown = ", ".join(map(repr, unknown[:10])) + (", ..." if len(unknown) > 10 else "")
    fixes = []
    if cased:
        fixes.append("CPC codes are upper case: write " + ", ".join(
            f"{code!r} as {known[code.upper()]!r}" for code in cased[:10]) + " in the rows")
    if titles_name is not None:
        if len(cased) < len(unknown):
            fixes.append(f"correct or drop the rows with {'the other' if cased else 'those'} code(s): a code new to "
                         "the model needs a model trained with its title")
        return (f"{len(unknown)} context code(s) used by {rows} rows are unknown to {titles_name}: {shown}; "
                + "; ".join(fixes))
    if len(cased) < len(unknown):
        fixes.append(f"add a line 'code,title' for each{' other' if cased else ''} to cpc_texts.csv")
    return (f"{root / 'cpc_texts.csv'}: no text for {len(unknown)} context code(s) used by {rows} rows: {shown}; "
            + "; ".join(fixes))
