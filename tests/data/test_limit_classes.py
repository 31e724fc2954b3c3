"""``--limit`` keeps a row of each class: a plain random draw lost rare classes without a word (or blamed the file)."""

from __future__ import annotations

import logging

import pytest

from attnpool.config import TrainConfig
from attnpool.data.errors import DataError
from attnpool.data.task import load_task

LOG = logging.getLogger("test")


def _load(tmp_path, tok, labels, task, limit, **options):
    path = tmp_path / "train.csv"
    path.write_text("id,text,label\n" + "".join(f"{i},the cat,{v}\n" for i, v in enumerate(labels)))
    cfg = TrainConfig(train_file=str(path), text_cols=["text"], label="label", task=task, model=tok, limit=limit,
                      folds=2, **options)
    return load_task(cfg, LOG)


def test_binary_limit_keeps_the_rare_class(tmp_path, tok):
    """3 positives in 400 rows, --limit 20: a plain draw had no positive and failed 'a binary task needs both'."""
    labels = [1 if i < 3 else 0 for i in range(400)]
    for seed in range(5):
        data = _load(tmp_path, tok, labels, "binary", 20, split_seed=seed)
        assert len(data.frame) == 20 and data.classes == [0, 1] and 1 in data.labels.tolist()
    ids = [_load(tmp_path, tok, labels, "binary", 20, split_seed=3).frame["id"].tolist() for _ in range(2)]
    assert ids[0] == ids[1] and len(set(ids[0])) == 20  # the same draw for a seed, no row twice
    assert _load(tmp_path, tok, labels, "binary", 20, split_seed=4).frame["id"].tolist() != ids[0]


def test_multiclass_limit_keeps_a_class_of_one_row(tmp_path, tok, caplog):
    labels = ["c" if i == 7 else "ab"[i % 2] for i in range(300)]
    with caplog.at_level(logging.WARNING, logger="test"):
        data = _load(tmp_path, tok, labels, "multiclass", 10, split_seed=1)
    assert data.classes == ["a", "b", "c"] and "--limit" not in caplog.text
    assert data.frame["id"].astype(str).tolist().count("7") == 1


def test_multilabel_limit_keeps_a_rare_label(tmp_path, tok):
    labels = ["x|z" if i == 11 else "x|y" if i % 3 else "y" for i in range(200)]
    data = _load(tmp_path, tok, labels, "multilabel", 8, split_seed=2)
    assert data.classes == ["x", "y", "z"] and data.labels[:, 2].sum() == 1


def test_a_limit_below_the_classes_names_limit(tmp_path, tok, caplog):
    """The draw lost a class: binary failed blaming the file; multiclass trained on fewer classes silently."""
    labels = ["c" if i < 5 else "ab"[i % 2] for i in range(100)]
    with caplog.at_level(logging.WARNING, logger="test"):
        data = _load(tmp_path, tok, labels, "multiclass", 2, split_seed=0)
    assert len(data.classes) == 2
    lost = ({"a", "b", "c"} - set(data.classes)).pop()
    assert (f"--limit 2 draws fewer rows than the 3 classes of column 'label' in {tmp_path / 'train.csv'}: the model "
            f"trains without class(es) {lost!r}; raise --limit to at least 3 to keep a row of each") in caplog.text
    with pytest.raises(DataError) as caught:
        _load(tmp_path, tok, [i % 2 for i in range(100)], "binary", 1)
    assert str(caught.value) == (
        f"--limit 1 draws 1 row(s) of {tmp_path / 'train.csv'}, too few for the 2 classes of column 'label': a binary "
        "task needs both classes among its training rows. Raise --limit to at least 2")
