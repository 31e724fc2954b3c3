"""Grouped-target context: the values joined per row, the pool they come from, the text they go into, the leakage
rule of the training folds, and the same context at prediction time whatever the chunk a row is read in."""

from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd
import pytest

from attnpool.config import TrainConfig
from attnpool.data import DataError
from attnpool.data.context import (
    CONTEXT_FIELD,
    CONTEXT_SEP,
    add_group_context,
    context_text_spec,
    group_context,
    tokenize_rows,
)
from attnpool.data.prediction import PredictionInputs, load_prediction_inputs
from attnpool.data.task import apply_preset, encode_texts, load_task
from attnpool.serving.service import run_fields
from model_helpers import tiny_tokenizer

LOG = logging.getLogger("test_context")


@pytest.fixture
def rows():
    return pd.DataFrame({
        "anchor": ["wood", "wood", "wood", "wood", "drum", "drum", "wood"],
        "context": ["B27", "B27", "B27", "B27", "G02", "G02", "A47"],
        "target": ["timber", "log", "board", "log", "opc drum", "barrel", "chair"],
    })


# --- the values


def test_each_row_gets_the_other_values_of_its_group_sorted_deduplicated_own_value_excluded(rows):
    context = group_context(rows, "target", ["anchor", "context"])
    assert context.tolist() == [
        "board; log",  # timber: log appears twice in the group, once here
        "board; timber",  # log: its own value excluded, also the other row's "log"
        "log; timber",
        "board; timber",
        "barrel",
        "opc drum",
        "",  # wood in A47: alone in its group (the key is both columns)
    ]
    assert context.index.equals(rows.index) and CONTEXT_SEP == "; "


def test_the_context_does_not_depend_on_the_order_of_the_rows(rows):
    shuffled = rows.sample(frac=1.0, random_state=3)
    assert group_context(shuffled, "target", ["anchor", "context"]).sort_index().equals(
        group_context(rows, "target", ["anchor", "context"]))


def test_values_come_from_the_pool_only(rows):
    pool = pd.DataFrame({"anchor": ["wood", "wood", "drum"], "context": ["B27", "B27", "X99"],
                         "target": ["plank", "timber", "barrel"]})
    context = group_context(rows, "target", ["anchor", "context"], pool=pool)
    assert context.tolist() == ["plank", "plank; timber", "plank; timber", "plank; timber", "", "", ""]


def test_missing_keys_get_no_context_and_missing_values_are_skipped():
    rows = pd.DataFrame({"q": ["a", "a", "a", None, None, "b", "b"],
                         "value": ["x", np.nan, " y ", "z", "w", 1, "1"]})
    assert group_context(rows, "value", ["q"]).tolist() == ["y", "x; y", "x", "", "", "", ""]


def test_add_group_context_returns_a_copy_with_the_context_column(rows):
    out = add_group_context(rows, "target", ["anchor"])
    assert CONTEXT_FIELD not in rows.columns and list(out.columns) == [*rows.columns, CONTEXT_FIELD]
    assert out.loc[6, CONTEXT_FIELD] == "board; log; timber"  # by anchor alone: wood in A47 joins wood in B27


@pytest.mark.parametrize(("by", "message"), [
    ([], "no key columns; give the columns whose shared values make a group, e.g. --group-context-by anchor"),
    (["anchor", "target"], "it is also a key column (anchor, target)"),
    (["anchor", "cpc"], "missing column(s) 'cpc'"),
])
def test_bad_keys_are_refused_saying_how_to_fix_them(rows, by, message):
    with pytest.raises(DataError, match=re.escape(message)):
        group_context(rows, "target", by)


def test_a_column_named_like_the_context_is_refused(rows):
    with pytest.raises(DataError, match="already have a column 'group_context'.*rename that column"):
        add_group_context(rows.assign(group_context="x"), "target", ["anchor"])


# --- the text


def test_a_template_gets_the_context_after_a_separator_unless_it_places_it_itself():
    assert context_text_spec([], "{anchor} [SEP] {target}") == (None, "{anchor} [SEP] {target} [SEP] {group_context}")
    placed = "{anchor} [SEP] {group_context} [SEP] {target}"
    assert context_text_spec(None, placed) == (None, placed)
    twice = context_text_spec(*context_text_spec(None, "{a}"))
    assert twice == (None, "{a} [SEP] {group_context}")


def test_text_columns_get_the_context_as_one_more_column():
    assert context_text_spec(["first"], None) == (["first", CONTEXT_FIELD], None)
    assert context_text_spec(["a", "b", CONTEXT_FIELD], None) == (["a", "b", CONTEXT_FIELD], None)


def test_an_empty_context_is_not_counted_as_an_empty_text(rows):
    tokenizer = _tokenizer(rows)
    cfg = TrainConfig(template="{anchor} [SEP] {target}", group_context="target", group_context_by=["anchor"],
                      max_length=64)
    lonely = add_group_context(rows.iloc[[0, 4]], "target", ["anchor"])  # one row per anchor: both contexts empty
    encodings, counts = encode_texts(tokenizer, lonely, cfg)
    assert counts["empty"] == 0
    blank = add_group_context(rows.iloc[[0, 1]].assign(target=["", "log"]), "target", ["anchor"])
    assert encode_texts(tokenizer, blank, cfg)[1]["empty"] == 1  # a blank text field still counts
    # likewise when the config names the context already (prediction rebuilds its texts from such a config)
    named = TrainConfig(template="{anchor} [SEP] {target} [SEP] {group_context}", group_context="target",
                        group_context_by=["anchor"], max_length=64)
    assert encode_texts(tokenizer, lonely, named)[1]["empty"] == 0
    assert encode_texts(tokenizer, blank, named)[1]["empty"] == 1
    # the template's separator stays, before an empty context (and the tokenizer's closing [SEP])
    assert _words(tokenizer, encodings["input_ids"][0]) == ["wood", "[SEP]", "timber", "[SEP]", "[SEP]"]


def _pair_rows(*sizes: int) -> pd.DataFrame:
    """One group of rows of ``sizes`` distinct words each (row i: ``w{i}x0 w{i}x1 ...``)."""
    return pd.DataFrame({"q": ["g"] * len(sizes),
                         "text": [" ".join(f"w{i}x{j}" for j in range(n)) for i, n in enumerate(sizes)]})


def test_a_pair_truncates_the_context_before_the_rows_own_text():
    """One text column: the pair (text, context) loses context tokens first (longest_first cut the text too)."""
    rows = _pair_rows(10, 10, 10, 10)
    tokenizer = _tokenizer(rows)
    cfg = TrainConfig(text_cols=["text"], group_context="text", group_context_by=["q"], max_length=20)
    encodings, counts = encode_texts(tokenizer, add_group_context(rows, "text", ["q"]), cfg)
    words = tokenizer.convert_ids_to_tokens(encodings["input_ids"][0])
    assert [w for w in words if w.startswith("w0")] == rows.text[0].split()  # the own text whole
    assert len(words) == 20 and words[11] == "[SEP]" and words[12].startswith("w1")  # the context filled the rest
    assert counts["truncated"] == 4
    # a pair of two columns of the rows' own (no group context) is truncated as before: the longer text first
    two = rows.assign(other=[" ".join(f"w{i + 1}x{j}" for j in range(10)) for i in range(4)])
    pair, _ = encode_texts(tokenizer, two.iloc[:1], TrainConfig(text_cols=["text", "other"], max_length=20))
    assert sum(w.startswith("w0") for w in tokenizer.convert_ids_to_tokens(pair["input_ids"][0])) < 10


@pytest.mark.parametrize("layout", ["context-first", "left-truncation"])
def test_a_single_text_drops_context_values_before_the_rows_own_text(layout, tmp_path):
    """Context not last, or a tokenizer cutting from the left: truncation cut the row's own anchor and target."""
    rows = pd.DataFrame({"id": [f"r{i}" for i in range(7)], "anchor": ["wood"] * 6 + ["drum"],
                         "target": [f"t{i}" for i in range(6)] + ["t0"]})
    tokenizer = _tokenizer(rows)
    template = "{anchor} [SEP] {target}"
    if layout == "left-truncation":
        tokenizer.truncation_side = "left"
    else:
        template = "{group_context} [SEP] " + template
    cfg = TrainConfig(template=template, group_context="target", group_context_by=["anchor"], max_length=8)
    encodings, counts = encode_texts(tokenizer, add_group_context(rows, "target", ["anchor"]), cfg)
    words = [tokenizer.convert_ids_to_tokens(ids) for ids in encodings["input_ids"]]
    # room for one value of five: the context keeps its first values, the row its own text whole
    if layout == "left-truncation":
        assert words[0] == ["[CLS]", "wood", "[SEP]", "t0", "[SEP]", "t1", "[SEP]"]
    else:
        assert words[0] == ["[CLS]", "t1", "[SEP]", "wood", "[SEP]", "t0", "[SEP]"]
    for i in range(6):  # every row of the group: its own anchor and target kept, within max_length
        assert ["wood", "[SEP]", f"t{i}"] == words[i][words[i].index("wood"):words[i].index("wood") + 3]
        assert len(words[i]) <= 8
    assert words[6] == ["[CLS]", *(["drum", "[SEP]", "t0", "[SEP]"] if layout == "left-truncation" else
                                   ["[SEP]", "drum", "[SEP]", "t0"]), "[SEP]"]  # alone in its group: as it was
    assert counts["truncated"] == 6
    if layout == "context-first":  # predict's rows hold the contexts tokenised (explain rebuilds its texts from them)
        rows.to_csv(tmp_path / "rows.csv", index=False)
        frame, predicted = load_prediction_inputs(cfg, {}, tmp_path / "rows.csv", tokenizer, LOG)
        assert predicted["input_ids"] == encodings["input_ids"]
        assert frame[CONTEXT_FIELD].tolist()[:2] == ["t1", "t0"]
    # the default layout (context last, cut from the right) is truncated as before: into the context
    default = TrainConfig(template="{anchor} [SEP] {target}", group_context="target", group_context_by=["anchor"],
                          max_length=8)
    tokenizer.truncation_side = "right"
    encodings, counts = encode_texts(tokenizer, add_group_context(rows, "target", ["anchor"]), default)
    assert _words(tokenizer, encodings["input_ids"][0]) == ["wood", "[SEP]", "t0", "[SEP]", "t1", ";", "[SEP]"]
    assert counts["truncated"] == 6


def test_a_row_whose_own_text_fills_max_length_still_encodes_with_no_context():
    """"only_second" refuses a row whose context would lose every token: it is tokenised without its context."""
    rows = _pair_rows(4, 30, 17, 5, 16)  # 17 words + [CLS] [SEP] [SEP] = 20: exactly max_length
    tokenizer = _tokenizer(rows)
    cfg = TrainConfig(text_cols=["text"], group_context="text", group_context_by=["q"], max_length=20)
    encodings, counts = encode_texts(tokenizer, add_group_context(rows, "text", ["q"]), cfg)
    words = [tokenizer.convert_ids_to_tokens(ids) for ids in encodings["input_ids"]]
    assert [len(w) for w in words] == [20] * 5 and counts["truncated"] == 5
    assert words[1] == ["[CLS]", *rows.text[1].split()[:17], "[SEP]", "[SEP]"]  # own text cut, no context
    assert words[2] == ["[CLS]", *rows.text[2].split(), "[SEP]", "[SEP]"]  # own text whole, no room for context
    for i in (0, 3, 4):  # the other rows, in their places: own text whole, then their context
        assert words[i][1 : len(rows.text[i].split()) + 2] == [*rows.text[i].split(), "[SEP]"]
        assert words[i][-2].startswith("w") and not words[i][-2].startswith(f"w{i}")


@pytest.mark.parametrize(("text_cols", "group", "special"), [
    (["text"], None, 2), (["text", "other"], None, 3), (["text"], "text", 3),
], ids=["text", "pair", "context-pair"])
def test_a_max_length_within_the_special_tokens_is_refused_for_train_and_predict(text_cols, group, special):
    """The tokenizer logs an error and leaves a row whole below its special tokens: --max-length 1 was ignored."""
    rows = add_group_context(_pair_rows(10, 10).assign(other="w0x1 w1x1"), "text", ["q"])
    tokenizer = _tokenizer(rows)
    context = {"group_context": group, "group_context_by": ["q"]} if group else {}
    for max_length in (1, special):
        cfg = TrainConfig(text_cols=text_cols, max_length=max_length, **context)
        what = "text pair" if special == 3 else "text"
        with pytest.raises(ValueError, match=rf"^max_length {max_length} \(--max-length\) leaves no room for text: "
                                             rf"the tokenizer \w+ adds {special} special tokens to each {what}; "
                                             rf"give --max-length {special + 1} or more"):
            encode_texts(tokenizer, rows, cfg)
    cfg = TrainConfig(text_cols=text_cols, max_length=special + 1, **context)
    encodings, counts = encode_texts(tokenizer, rows, cfg)
    assert [len(ids) for ids in encodings["input_ids"]] == [special + 1] * 2 and counts["truncated"] == 2
    second = None if len(text_cols) == 1 else list(rows.other)
    with pytest.raises(ValueError, match=r"max_length 1 \(--max-length\) leaves no room"):
        tokenize_rows(tokenizer, list(rows.text), second, 1)


# --- presets and options


def test_the_pppm_preset_groups_by_anchor_and_context(tmp_path):
    cfg = apply_preset(TrainConfig(preset="pppm", data_dir=str(tmp_path), group_context="target"))
    assert cfg.group_context_by == ["anchor", "context"]
    assert apply_preset(TrainConfig(preset="pppm", data_dir=str(tmp_path))).group_context_by == []
    kept = apply_preset(TrainConfig(preset="pppm", data_dir=str(tmp_path), group_context="target",
                                    group_context_by=["anchor"]))
    assert kept.group_context_by == ["anchor"]


def test_group_context_without_keys_or_on_the_label_is_refused():
    with pytest.raises(DataError, match=re.escape("--group-context target needs --group-context-by COL")):
        apply_preset(TrainConfig(train_file="t.csv", text_cols=["a"], group_context="target"))
    with pytest.raises(DataError, match="that is the label column"):
        apply_preset(TrainConfig(train_file="t.csv", text_cols=["a"], group_context="label", group_context_by=["a"]))


def test_served_fields_are_the_keys_and_column_never_the_context():
    cfg = TrainConfig(template="{target} [SEP] {group_context}", group_context="target", group_context_by=["q"])
    assert run_fields(cfg) == ["target", "q"]
    assert run_fields(TrainConfig(text_cols=["first"])) == ["first"]


# --- training folds: the leakage rule


def _tokenizer(frame: pd.DataFrame):
    """A word-level tokenizer over every word of ``frame`` (and ';'), built in code."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for column in frame.columns for v in frame[column].astype(str) for w in v.split()} | {";"})
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


def _words(tokenizer, ids) -> list[str]:
    return [w for w in tokenizer.convert_ids_to_tokens(list(ids)) if w != "[CLS]"]


def _context_words(tokenizer, ids) -> set[str]:
    """The words after the template's second separator: the context, ``{anchor} [SEP] {target} [SEP] ...``."""
    words = _words(tokenizer, ids)
    second = [i for i, w in enumerate(words) if w == "[SEP]"][1]
    return {w for w in words[second + 1:] if w not in ("[SEP]", ";")}


@pytest.fixture
def straddling(tmp_path):
    """Two groups of six distinct targets; the folds split each group across train and valid."""
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(12)], "anchor": ["ga"] * 6 + ["gb"] * 6,
                          "target": [f"t{i}" for i in range(12)], "label": np.linspace(0, 1, 12)})
    frame.to_csv(tmp_path / "train.csv", index=False)
    _tokenizer(frame).save_pretrained(tmp_path / "tok")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), template="{anchor} [SEP] {target}", model=str(
        tmp_path / "tok"), group_context="target", group_context_by=["anchor"], max_length=64)
    return cfg, load_task(cfg, LOG), np.array([0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1])


def test_folds_tokenise_each_side_with_its_own_rows_context(straddling):
    cfg, data, folds = straddling
    assert data.encodings == {}, "with group_context nothing is tokenised before the folds"
    targets = data.frame["target"].to_numpy()
    for fold in (0, 1):
        train, valid = data.split(folds, fold)
        encodings = data.fold_encodings(cfg, train, valid, LOG)
        tokenizer = data.tokenizer
        for side, others in ((train, valid), (valid, train)):
            for row in side:
                ids = encodings["input_ids"][row]
                words = set(_words(tokenizer, ids))
                context = _context_words(tokenizer, ids)
                group = [r for r in side if data.frame.anchor[r] == data.frame.anchor[row] and r != row]
                assert context == set(targets[group]), (fold, row)  # the group's other rows on its side, all
                assert targets[row] not in context
                if side is train:
                    assert not words & set(targets[others]), f"fold {fold}: a validation target in training row {row}"
        assert all(ids is not None for ids in encodings["input_ids"])


def test_the_resume_fingerprint_sees_the_texts_when_the_folds_tokenise_them(straddling, tmp_path):
    # with group_context nothing is tokenised up front: the fingerprint hashed the labels alone, so a resume on
    # other texts (same labels) went on, mixing folds trained on the old rows with folds trained on the new
    cfg, data, _ = straddling
    assert set(data.text_columns) == {"anchor", "target"}  # the template's fields and the context's column and keys
    original = pd.read_csv(cfg.train_file)
    original.assign(notes="unused").to_csv(cfg.train_file, index=False)  # a column the texts do not read
    assert load_task(cfg, LOG).text_fingerprint() == data.text_fingerprint()
    changed = original.copy()
    changed.loc[4, "target"] = "t5"  # one target edited, the labels as they were
    changed.to_csv(cfg.train_file, index=False)
    again = load_task(cfg, LOG)
    assert again.text_fingerprint() != data.text_fingerprint()
    assert again.fingerprint() == data.fingerprint(), "the labels' fingerprint as before: older runs still resume"


def test_without_group_context_the_folds_share_the_one_tokenisation(straddling, tmp_path):
    cfg, _, folds = straddling
    cfg.group_context, cfg.group_context_by = None, []
    data = load_task(cfg, LOG)
    train, valid = data.split(folds, 0)
    assert data.fold_encodings(cfg, train, valid, LOG) is data.encodings and len(data.encodings["input_ids"]) == 12


def test_context_dropout_leaves_a_seeded_share_of_training_rows_without_context_each_epoch(straddling):
    cfg, data, folds = straddling
    cfg.group_context_dropout = 0.5
    train, valid = data.split(folds, 0)
    encodings = data.fold_encodings(cfg, train, valid, LOG)
    dataset = data.training_set(cfg, encodings, train, LOG)
    draws = []
    for epoch in (0, 1, 2, 0):
        dataset.set_epoch(epoch)
        bare = [i for i in range(len(train)) if not _context_words(data.tokenizer, dataset[i]["input_ids"])]
        assert len(bare) == 3, f"epoch {epoch}: half of the 6 training rows go without their context"
        for i in range(len(train)):
            own = encodings["input_ids"][train[i]]
            assert (dataset[i]["input_ids"] == own) == (i not in bare), "the others keep the fold's context text"
            assert dataset[i]["labels"] == data.labels[train[i]]
        draws.append(bare)
        assert dataset.epoch_lengths(epoch) == [len(dataset[i]["input_ids"]) for i in range(len(train))]
    assert draws[0] == draws[3], "the same epoch draws the same rows (a resumed run)"
    assert draws[0] != draws[1] or draws[1] != draws[2], "the rows are drawn afresh each epoch"
    again = data.training_set(cfg, encodings, train, LOG)
    again.set_epoch(1)
    assert [i for i in range(len(train)) if again.without[i]] == draws[1], "a fresh dataset (or process) draws alike"
    cfg.seed += 1
    other = data.training_set(cfg, encodings, train, LOG)
    assert any((other.set_epoch(e), list(np.flatnonzero(other.without)))[1] != draws[e] for e in (0, 1, 2))


def test_without_context_dropout_the_training_set_is_the_plain_one(straddling):
    cfg, data, folds = straddling
    train, valid = data.split(folds, 0)
    dataset = data.training_set(cfg, data.fold_encodings(cfg, train, valid, LOG), train, LOG)
    assert not hasattr(dataset, "set_epoch") and len(dataset) == len(train)


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_context_dropout_outside_0_1_or_without_a_context_is_refused(share):
    ok = dict(train_file="t.csv", text_cols=["a"], group_context="target", group_context_by=["anchor"])
    with pytest.raises(ValueError, match=f"^group_context_dropout must be in \\[0, 1\\) and needs --group-context "
                                          f"COL, got {share} with group_context='target'$"):
        TrainConfig(**ok, group_context_dropout=share).validate()
    with pytest.raises(ValueError, match="got 0.5 with group_context=None$"):
        TrainConfig(train_file="t.csv", text_cols=["a"], group_context_dropout=0.5).validate()


# --- prediction: the file's rows, whatever the chunk


def test_prediction_takes_the_context_from_the_whole_file_not_the_chunk(straddling, tmp_path):
    cfg, data, _ = straddling
    path = tmp_path / "test.csv"
    data.frame.drop(columns=["label"]).to_csv(path, index=False)
    whole_cfg = TrainConfig(**{**cfg.to_dict(), "train_file": None})
    frame, whole = load_prediction_inputs(whole_cfg, {}, path, data.tokenizer, LOG)
    assert whole_cfg.template == "{anchor} [SEP] {target} [SEP] {group_context}"  # what explain rebuilds from
    assert frame[CONTEXT_FIELD].tolist()[0] == "t1; t2; t3; t4; t5"
    inputs = PredictionInputs(TrainConfig(**{**cfg.to_dict(), "train_file": None}), {}, path, data.tokenizer, LOG)
    chunked = [ids for chunk in inputs.chunks(5) for ids in inputs.encode(chunk)[1]["input_ids"]]
    assert chunked == whole["input_ids"]
    request = PredictionInputs(TrainConfig(**{**cfg.to_dict(), "train_file": None}), {}, "request", data.tokenizer,
                               LOG, context_from="chunk")
    first = request.encode(data.frame.iloc[:2].drop(columns=["label"]))[1]["input_ids"]
    assert _context_words(data.tokenizer, first[0]) == {"t1"}  # a request's rows only


def test_prediction_refuses_a_file_without_the_context_columns(straddling, tmp_path):
    cfg, data, _ = straddling
    path = tmp_path / "test.csv"
    data.frame[["id", "target"]].to_csv(path, index=False)
    inputs = PredictionInputs(TrainConfig(**{**cfg.to_dict(), "train_file": None}), {}, path, data.tokenizer, LOG)
    with pytest.raises(DataError, match=re.escape(f"{path}: missing column(s) 'anchor'")):
        inputs.encode(next(iter(inputs.chunks(5))))


def test_grouped_folds_join_keys_that_differ_only_by_spaces_as_the_context_does(tmp_path):
    """'ga' and 'ga ' were two fold groups but one context group: the same anchor in training and validation."""
    anchors = [name + pad for name in ("ga", "gb", "gc", "gd", "ge", "gf") for pad in ("", " ", "  ")]
    frame = pd.DataFrame({"anchor": anchors, "target": [f"t{i}" for i in range(18)], "label": np.linspace(0, 1, 18)})
    frame.to_csv(tmp_path / "train.csv", index=False)
    _tokenizer(frame).save_pretrained(tmp_path / "tok")
    cfg = TrainConfig(train_file=str(tmp_path / "train.csv"), template="{anchor} [SEP] {target}", model=str(
        tmp_path / "tok"), group_col="anchor", folds=3)
    data = load_task(cfg, LOG)
    folds = data.make_folds(cfg)
    for name in ("ga", "gb", "gc", "gd", "ge", "gf"):
        assert len(set(folds[data.frame["anchor"].str.strip() == name])) == 1, (name, folds.tolist())


def test_groups_split_across_training_and_validation_are_warned_about(straddling, caplog):
    """Ungrouped folds gave a validation row the validation side's context only: not what training or predict see."""
    cfg, data, folds = straddling
    train, valid = data.split(folds, 0)
    with caplog.at_level(logging.WARNING):
        data.fold_encodings(cfg, train, valid, LOG)
    assert ("group context: 2 of 2 groups of the validation rows (by anchor) also have training rows" in caplog.text
            and "Keep each group in one fold: --group-col anchor" in caplog.text)
    caplog.clear()
    whole = np.array([0] * 6 + [1] * 6)  # each anchor in one fold: nothing to say
    with caplog.at_level(logging.WARNING):
        data.fold_encodings(cfg, *data.split(whole, 0), LOG)
    assert "group context" not in caplog.text


def test_a_pppm_key_the_preset_adds_is_found_when_predicting_a_file(tmp_path):
    """--group-context-by anchor context_text trained (load_pppm adds context_text) but predict's pool lacked it."""
    (tmp_path / "cpc_texts.csv").write_text("context,text\nA47,FURNITURE\nG02,OPTICS\n")
    test = pd.DataFrame({"id": ["a", "b", "c"], "anchor": ["wood", "wood", "wood"], "target": ["timber", "log", "tree"],
                         "context": ["A47", "G02", "A47"]})
    test.to_csv(tmp_path / "test.csv", index=False)
    tokenizer = _tokenizer(test.assign(text="FURNITURE OPTICS"))
    cfg = TrainConfig(preset="pppm", data_dir=str(tmp_path), group_context="target",
                      group_context_by=["anchor", "context_text"])
    inputs = PredictionInputs(cfg, {}, tmp_path / "test.csv", tokenizer, LOG)
    frame, _ = inputs.encode(next(inputs.chunks(2)))
    assert frame[CONTEXT_FIELD].tolist() == ["tree", ""]  # the rows of the same anchor and CPC text, file-wide


@pytest.mark.parametrize("options", [{"padding": True}, {"padding": "longest"}, {"return_tensors": "pt"}])
def test_tokenize_rows_refuses_to_pad_batches_it_tokenises_apart(options):
    """Context pairs are tokenised in two batches (rows that fill max_length on their own, and the rest): padded,
    each batch came out at its own length."""
    tokenizer = tiny_tokenizer()
    first, second = ["the big red cat sat on the mat", "a dog"], ["red tree", "big house"]
    with pytest.raises(ValueError, match=r"leave out padding= and return_tensors= and pad the result with "
                                         r"tokenizer\.pad"):
        tokenize_rows(tokenizer, first, second, 8, context_pair=True, **options)
    rows = tokenize_rows(tokenizer, first, second, 8, context_pair=True, padding=False)
    assert [len(ids) for ids in rows["input_ids"]] == [8, 7]
