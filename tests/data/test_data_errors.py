"""DataError is the ValueError of attnpool.data, and the package exports its public API."""

from __future__ import annotations

import pytest

import attnpool.data
from attnpool.data import DataError


def test_data_error_is_a_value_error(tmp_path):
    assert issubclass(DataError, ValueError)
    with pytest.raises(ValueError, match="no such file"):
        attnpool.data.read_table(tmp_path / "missing.csv")


def test_public_api():
    assert sorted(attnpool.data.__all__) == sorted(
        [
            "PPPM_TEMPLATE",
            "SUPPORTED_EXTENSIONS",
            "DataError",
            "LengthGroupedSampler",
            "Labels",
            "Texts",
            "build_texts",
            "check_columns",
            "iter_table",
            "length_sorted_batches",
            "load_pppm",
            "make_folds",
            "read_table",
            "table_columns",
            "validate_labels",
            "write_table",
        ]
    )
    for name in attnpool.data.__all__:
        assert getattr(attnpool.data, name) is not None


def test_a_validation_file_is_checked_on_its_own(tmp_path):
    """Joined to the training rows first, a missing column came back as blank texts and its rows were misnumbered."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    (tmp_path / "train.csv").write_text("text,label\nthe cat,0.5\na dog,0.1\nred mat,0.9\n")
    (tmp_path / "valid.csv").write_text("sentence,label\nthe cat,0.5\na dog,0.1\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"], model=encoder)
    with pytest.raises(DataError, match=r"valid.csv.*'text'"):
        load_task(cfg, logging.getLogger("test"))
    (tmp_path / "valid.csv").write_text("text,label\nthe cat,0.5\na dog,\nred,0.2\n")
    with pytest.raises(DataError, match=r"valid.csv: column 'label' has 1 missing values in data rows 2; regression "
                                        "labels must be finite numbers"):
        load_task(cfg, logging.getLogger("test"))



@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel", "regression"])
def test_validation_labels_are_numbered_in_their_file_and_need_training_classes(tmp_path, task):
    """Joined to the training rows first, a class only the validation file has became an output never trained,
    and a bad validation label was numbered as a row of the joined table, without the file's name."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    train = {"binary": "x,y,x,y", "multiclass": "x,y,x,y", "multilabel": "x,y,x|y,y", "regression": "0.1,0.5,0.9,0.2"}
    rows = "".join(f"row {i},{v}\n" for i, v in enumerate(train[task].split(",")))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"], model=encoder, task=task)
    valid = tmp_path / "valid.csv"

    def refused(text: str, message: str):
        valid.write_text("text,label\n" + text)
        with pytest.raises(DataError, match=message):
            load_task(cfg, logging.getLogger("test"))

    if task == "regression":
        refused("a,0.5\nb,oops\n", r"valid.csv: column 'label' has 1 non-numeric values in data rows 2 \('oops'\)")
    else:
        if task != "multilabel":  # a blank multilabel cell is a row without classes
            refused("a,x\nb, \nc,y\n", r"valid.csv: column 'label' has missing labels in data rows 2; every")
        refused("a,x\nb,y\nc,z\nd,x\n", r"valid.csv: class\(es\) 'z' of column 'label' are not in the training "
                r"file \(validation data rows 3\); the model would have an output it never trains on")
    valid.write_text("text,label\na,0.5\n" if task == "regression" else "text,label\na,x\nb,y\n")
    assert load_task(cfg, logging.getLogger("test")).valid_rows.tolist() == ([4] if task == "regression" else [4, 5])


@pytest.mark.parametrize(("options", "named"), [
    ({"text_cols": ["text", "label"]}, "--text-cols"),
    ({"text_cols": [], "template": "{text} [SEP] {label}"}, "--template"),
    ({"group_context": "text", "group_context_by": ["label"]}, "--group-context-by"),
])
def test_the_label_column_is_refused_as_an_input(tmp_path, options, named):
    """Grouped by the label, each row's context listed the rows of its own score: validation was inflated."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    (tmp_path / "train.csv").write_text("text,label\nthe cat,0.5\na dog,0.1\nred mat,0.9\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), model=save_tiny_encoder(tmp_path / "encoder"),
                      **{"text_cols": ["text"], **options})
    with pytest.raises(DataError, match=rf"^{named} uses 'label', the label column: the model would read the answer "
                                        "it is trained to give, and predict's rows have no label"):
        load_task(cfg, logging.getLogger("test"))
    cfg.label = "other"  # another column is the label: the same inputs are read
    (tmp_path / "train.csv").write_text("text,label,other\nthe cat,x,0.5\na dog,y,0.1\nred mat,x,0.9\n")
    assert len(load_task(cfg, logging.getLogger("test")).labels) == 3


def test_limit_draws_training_rows_with_a_validation_file_too_and_pppm_stays_regression(tmp_path):
    """--limit was ignored when a validation file was given: the quick run trained on every row."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import apply_preset, load_task
    from model_helpers import save_tiny_encoder

    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"row {i},{i / 10}\n" for i in range(8)))
    (tmp_path / "valid.csv").write_text("text,label\na,0.5\nb,0.1\nc,0.3\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), valid_file=str(tmp_path / "valid.csv"),
                      text_cols=["text"], model=save_tiny_encoder(tmp_path / "encoder"), limit=3)
    data = load_task(cfg, logging.getLogger("test"))
    assert data.valid_rows.tolist() == [3, 4, 5] and data.frame["text"].tolist()[3:] == ["a", "b", "c"]
    assert set(data.frame["text"][:3]) < {f"row {i}" for i in range(8)}
    with pytest.raises(DataError, match=r"^--preset pppm is a regression task \(scores 0 to 1\), got --task binary"):
        apply_preset(TrainConfig(preset="pppm", data_dir=str(tmp_path), task="binary"))


def test_a_multilabel_validation_file_of_label_lists_loads(tmp_path):
    """JSONL/Parquet lists: the blank check's pd.isna(list) raised 'setting an array element with a sequence'."""
    import json
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    rows = [("a", ["x", "y"]), ("b", ["y"]), ("c", []), ("d", ["x"])]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t, "label": v}) + "\n" for t, v in rows))
    (tmp_path / "valid.jsonl").write_text("".join(json.dumps({"text": t, "label": v}) + "\n" for t, v in rows[:3]))
    cfg = TrainConfig(train_file=str(tmp_path / "train.jsonl"), valid_file=str(tmp_path / "valid.jsonl"),
                      text_cols=["text"], model=encoder, task="multilabel")
    data = load_task(cfg, logging.getLogger("test"))
    assert data.classes == ["x", "y"] and data.valid_rows.tolist() == [4, 5, 6]
    (tmp_path / "valid.jsonl").write_text(json.dumps({"text": "e", "label": ["z"]}) + "\n")
    with pytest.raises(DataError, match=r"class\(es\) 'z' of column 'label' are not in the training file"):
        load_task(cfg, logging.getLogger("test"))


def test_likely_mistakes_that_train_without_an_error_are_warned_of(tmp_path, caplog):
    """0/1 labels trained as the default regression, and a numbers-only text column, trained without a word."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    (tmp_path / "train.csv").write_text("text,score,label\nthe cat,0.5,1\na dog,3,0\nred mat,7.25,1\n")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), model=encoder, text_cols=["score"])
    with caplog.at_level(logging.WARNING, logger="test"):
        load_task(cfg, logging.getLogger("test"))
    said = caplog.text
    assert "label 'label' holds two values only (0 and 1): it trains as a regression (--task regression, the " \
           "default); for a classifier pass --task binary" in said
    assert "the text column(s) hold numbers only ('score': e.g. 0.5, 3, 7.25)" in said
    for cols, template in ((["text"], None), ([], "{score} stars: {text}")):  # a number beside a text: meant
        caplog.clear()
        cfg.text_cols, cfg.template, cfg.task = cols, template, "binary"
        with caplog.at_level(logging.WARNING, logger="test"):
            load_task(cfg, logging.getLogger("test"))
        assert "hold" not in caplog.text


def test_with_limit_a_bad_label_is_named_by_its_row_in_the_file(tmp_path):
    """--limit drew a subset and renumbered it: the error named rows of the subset, not of the file."""
    import logging

    from attnpool.config import TrainConfig
    from attnpool.data.task import load_task
    from model_helpers import save_tiny_encoder

    rows = [f"row {i},{'x' if i == 7 else 'pos' if i % 2 else 'neg'}\n" for i in range(40)]
    rows[7] = "row 7,\n"  # data row 8: no label
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(rows))
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), model=save_tiny_encoder(tmp_path / "encoder"),
                      text_cols=["text"], task="binary", limit=30, split_seed=3)
    with pytest.raises(DataError, match=r"missing labels in data rows 8;"):
        load_task(cfg, logging.getLogger("test"))
