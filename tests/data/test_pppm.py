"""load_pppm on a tiny generated copy of the PPPM layout, and (slow) on the real data with grouped folds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnpool.data import PPPM_TEMPLATE, DataError, build_texts, load_pppm, make_folds, validate_labels
from attnpool.data.pppm import cpc_titles

REAL_PPPM = Path("/work/shared/data/pppm")


@pytest.fixture
def pppm_dir(tmp_path):
    (tmp_path / "train.csv").write_text(
        "id,anchor,target,context,score\n"
        "0a1,abatement,act of abating,A47,0.75\n"
        "0a2,abatement,eliminating process,A47,0.5\n"
        "0a3,opc drum,inorganic photoconductor drum,G02,1\n"
    )
    (tmp_path / "test.csv").write_text("id,anchor,target,context\n4112,opc drum,drum,G02\n")
    (tmp_path / "cpc_texts.csv").write_text(
        "context,text\n"
        "A47,\"HUMAN NECESSITIES. FURNITURE; DOMESTIC ARTICLES\"\n"
        "G02,PHYSICS. OPTICS\n"
        "H04,ELECTRICITY. ELECTRIC COMMUNICATION TECHNIQUE\n"
    )
    return tmp_path


def test_train_split_joins_context_text(pppm_dir):
    frame, template = load_pppm(pppm_dir)
    assert template == PPPM_TEMPLATE == "{anchor} [SEP] {target} [SEP] {context_text}"
    assert frame["id"].tolist() == ["0a1", "0a2", "0a3"]
    assert frame["context_text"].tolist() == [
        "HUMAN NECESSITIES. FURNITURE; DOMESTIC ARTICLES",
        "HUMAN NECESSITIES. FURNITURE; DOMESTIC ARTICLES",
        "PHYSICS. OPTICS",
    ]
    assert frame["score"].tolist() == [0.75, 0.5, 1.0]
    texts = build_texts(frame, template=template)
    assert texts.first[2] == "opc drum [SEP] inorganic photoconductor drum [SEP] PHYSICS. OPTICS"
    assert build_texts(frame, template=template, sep_token="</s>").first[0] == (
        "abatement </s> act of abating </s> HUMAN NECESSITIES. FURNITURE; DOMESTIC ARTICLES"
    )


def test_test_split_and_given_rows(pppm_dir):
    frame, _ = load_pppm(str(pppm_dir), split="test")
    assert frame["id"].tolist() == ["4112"] and "score" not in frame
    assert frame["context_text"].tolist() == ["PHYSICS. OPTICS"]
    rows = pd.DataFrame({"anchor": ["a"], "target": ["b"], "context": ["H04"]})
    out, _ = load_pppm(pppm_dir, split="test", frame=rows)
    assert out["context_text"].tolist() == ["ELECTRICITY. ELECTRIC COMMUNICATION TECHNIQUE"]
    assert "context_text" not in rows  # the caller's frame is not modified


def test_unknown_context_codes_are_named(pppm_dir):
    rows = pd.DataFrame({"anchor": ["a", "b", "c"], "target": ["x", "y", "z"], "context": ["Z99", "A47", "Y01"]})
    msg = ("cpc_texts.csv: no text for 2 context code(s) used by 2 rows: 'Y01', 'Z99'; add a line 'code,title' for "
           "each to cpc_texts.csv")
    with pytest.raises(DataError, match=re.escape(msg) + "$"):
        load_pppm(pppm_dir, frame=rows)


def test_context_codes_are_stripped_before_the_title_lookup(pppm_dir):
    """" B60" was refused as unknown ("add a line 'code,title'"), though the blank check, keys and folds strip it."""
    rows = pd.DataFrame({"anchor": ["a", "b", "c"], "target": ["x", "y", "z"], "context": [" A47", "G02 ", "\tH04"]})
    out, _ = load_pppm(pppm_dir, frame=rows)
    assert out["context_text"].tolist() == ["HUMAN NECESSITIES. FURNITURE; DOMESTIC ARTICLES", "PHYSICS. OPTICS",
                                            "ELECTRICITY. ELECTRIC COMMUNICATION TECHNIQUE"]
    (pppm_dir / "cpc_texts.csv").write_text("context,text\n A47 ,FURNITURE\nG02\t,OPTICS\nH04,ELECTRICITY\n")
    assert load_pppm(pppm_dir, frame=rows)[0]["context_text"].tolist() == ["FURNITURE", "OPTICS", "ELECTRICITY"]
    assert load_pppm(pppm_dir, frame=rows, titles={" A47": "F", "G02": "O", "H04 ": "E"})[0][
        "context_text"].tolist() == ["F", "O", "E"]


def test_unknown_codes_are_shown_as_written_and_lower_case_ones_told_to_be_upper_case(pppm_dir):
    rows = pd.DataFrame({"anchor": ["a", "b", "c"], "target": ["x", "y", "z"], "context": ["a47", "g02", "A47"]})
    msg = ("no text for 2 context code(s) used by 2 rows: 'a47', 'g02'; CPC codes are upper case: write 'a47' as "
           "'A47', 'g02' as 'G02' in the rows")
    with pytest.raises(DataError, match=re.escape(msg) + "$"):  # no "add a line" for them: the wrong fix
        load_pppm(pppm_dir, frame=rows)
    rows["context"] = ["a47", "B 60", "A47"]
    msg = ("no text for 2 context code(s) used by 2 rows: 'B 60', 'a47'; CPC codes are upper case: write 'a47' as "
           "'A47' in the rows; add a line 'code,title' for each other to cpc_texts.csv")
    with pytest.raises(DataError, match=re.escape(msg) + "$"):
        load_pppm(pppm_dir, frame=rows)


def test_blank_titles_and_repeated_codes_in_cpc_texts_are_refused(pppm_dir):
    """A blank title gave its rows a NaN context text; a code given twice took its last title, silently."""
    (pppm_dir / "cpc_texts.csv").write_text(
        "context,text\nA47,FURNITURE\nG02,\nH04,ELECTRICITY\nA47,HUMAN NECESSITIES\nB60,  \n,ORPHAN\nA47,X\n")
    msg = (f"{pppm_dir / 'cpc_texts.csv'}: no code on data row(s) 6; no title for 'G02' (data row(s) 2); no title "
           "for 'B60' (data row(s) 5); 'A47' given twice or more (data rows 1, 4, 7). Each line gives one CPC code "
           "and its title, once per code: fix those lines")
    with pytest.raises(DataError, match=re.escape(msg)):
        cpc_titles(pppm_dir)
    with pytest.raises(DataError, match=re.escape(msg)):
        load_pppm(pppm_dir)
    (pppm_dir / "cpc_texts.csv").write_text("context,text\nA47,FURNITURE\n A47,FURNITURE\n")  # the same code
    with pytest.raises(DataError, match=re.escape("'A47' given twice or more (data rows 1, 2)")):
        cpc_titles(pppm_dir)


def test_missing_folder_states_the_layout(tmp_path):
    with pytest.raises(DataError, match=r"PPPM data folder .*nowhere does not exist .*expected a folder holding "
                                        r"train\.csv \(id,anchor,target,context,score\)"):
        load_pppm(tmp_path / "nowhere")


@pytest.mark.parametrize(("name", "split"), [("train.csv", "train"), ("cpc_texts.csv", "train"), ("test.csv", "test")])
def test_missing_file_states_the_layout(pppm_dir, name, split):
    (pppm_dir / name).unlink()
    with pytest.raises(DataError, match=re.escape(f"{name} not found in the PPPM data folder; expected a folder")):
        load_pppm(pppm_dir, split=split)


def test_missing_columns(pppm_dir):
    (pppm_dir / "train.csv").write_text("id,anchor,target,context\n1,a,b,A47\n")
    with pytest.raises(DataError, match=re.escape("train.csv: missing column(s) 'score'; the columns present are: "
                                                  "id, anchor, target, context")):
        load_pppm(pppm_dir)
    (pppm_dir / "cpc_texts.csv").write_text("code,title\nA47,x\n")
    with pytest.raises(DataError, match=re.escape("cpc_texts.csv: missing column(s) 'context', 'text'")):
        load_pppm(pppm_dir, split="test")


def test_unknown_split(pppm_dir):
    with pytest.raises(DataError, match="unknown PPPM split 'valid'; choose one of train, test"):
        load_pppm(pppm_dir, split="valid")


@pytest.mark.slow
def test_real_pppm_with_folds_grouped_by_anchor():
    if not REAL_PPPM.is_dir():
        pytest.skip(f"{REAL_PPPM} is absent")
    frame, template = load_pppm(REAL_PPPM)
    assert len(frame) == 36_473
    assert frame["context_text"].notna().all() and frame["context"].nunique() == 106
    texts = build_texts(frame, template=template)
    assert texts.num_empty == 0
    labels = validate_labels(frame, "score", "regression")
    folds = make_folds(frame, 4, labels=labels.values, groups="anchor", seed=42)
    assert set(folds.tolist()) == {0, 1, 2, 3}
    assert (pd.Series(folds).groupby(frame["anchor"].to_numpy()).nunique() == 1).all()  # no anchor in two folds
    means = pd.Series(labels.values).groupby(folds).mean()
    assert np.abs(means - labels.values.mean()).max() < 0.01


def test_a_pppm_file_given_to_the_preset_reads_its_texts_as_written(pppm_dir):
    """--preset pppm --train-file F: a target "1.50" must stay "1.50" (predict reads it so), not become 1.5."""
    from attnpool.config import TrainConfig
    from attnpool.data.task import frame_and_template

    path = pppm_dir / "mine.csv"
    path.write_text("id,anchor,target,context,score\n007,abc,1.50,A47,0.5\n008,abd,2e3,G02,0.25\n")
    cfg = TrainConfig(preset="pppm", data_dir=str(pppm_dir), train_file=str(path))
    frame, template = frame_and_template(cfg, str(path))
    assert frame["target"].tolist() == ["1.50", "2e3"] and frame["id"].tolist() == ["007", "008"]
    assert build_texts(frame, template=template).first[0] == "abc [SEP] 1.50 [SEP] HUMAN NECESSITIES. FURNITURE; " \
                                                             "DOMESTIC ARTICLES"


def test_a_blank_context_is_named_not_a_type_error(pppm_dir):
    """A blank context cell reached the unknown codes as NaN: joining their names raised TypeError."""
    rows = pd.DataFrame({"anchor": ["a", "b", "c"], "target": ["x", "y", "z"], "context": ["A47", None, " "]},
                        index=pd.RangeIndex(100, 103))  # a chunk of a file: its rows are the file's 101 to 103
    msg = ("PPPM test rows: 2 row(s) have no context code (data rows 102, 103); every PPPM row needs its CPC context "
           "(e.g. A47), whose title cpc_texts.csv gives: fill them in or drop those rows")
    with pytest.raises(DataError, match=re.escape(msg)):
        load_pppm(pppm_dir, split="test", frame=rows)
    train = pppm_dir / "train.csv"
    train.write_text(train.read_text().splitlines()[0] + "\n1,a,b,,0.5\n2,c,d,A47,0.25\n")
    with pytest.raises(DataError, match=re.escape(f"{train}: 1 row(s) have no context code (data rows 1)")):
        load_pppm(pppm_dir)
