"""A PPPM row whose context code the run has no title for: the error names the titles read and a fix that works.

It named the data folder's ``cpc_texts.csv`` and said to add the code there; once that file differed from the run's
copy (the titles its folds learned), predict read the copy and failed again, now naming the run's file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from attnpool.data import DataError
from attnpool.explanations.files import explain_file
from attnpool.prediction import predict
from attnpool.runs import Run
from attnpool.training.recipe import keep_context_titles
from model_helpers import make_run, save_tiny_encoder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


def test_an_unknown_context_code_is_refused_as_unknown_to_the_run_with_the_file_read(encoder, tmp_path):
    pppm = tmp_path / "pppm"
    pppm.mkdir()
    (pppm / "cpc_texts.csv").write_text("context,text\nA01,red house\nB02,fast dog\n")
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    keep_context_titles(Run(run), Run(run).config())  # as train does: the run's own copy
    pd.DataFrame({"id": ["a", "b", "c"], "anchor": ["cat", "mat", "dog"], "target": ["big cat", "on mat", "a dog"],
                  "context": ["A01", "ZZZ", "a01"]}).to_csv(tmp_path / "test.csv", index=False)
    tail = ("'ZZZ', 'a01'; CPC codes are upper case: write 'a01' as 'A01' in the rows; correct or drop the rows "
            "with the other code(s): a code new to the model needs a model trained with its title")
    msg = (f"2 context code(s) used by 2 rows are unknown to the CPC titles this run was trained with "
           f"({pppm / 'cpc_texts.csv'}): " + tail)
    with pytest.raises(DataError, match=re.escape(msg) + "$"):
        predict(run, tmp_path / "test.csv", tmp_path / "out.csv", progress=False)
    # what the old message said to do: the run now reads its own copy, and the error names that file
    with open(pppm / "cpc_texts.csv", "a") as file:
        file.write("ZZZ,new title\n")
    msg = (f"2 context code(s) used by 2 rows are unknown to the CPC titles this run was trained with "
           f"({run / 'cpc_texts.csv'}): " + tail)
    with pytest.raises(DataError, match=re.escape(msg) + "$"):
        predict(run, tmp_path / "test.csv", tmp_path / "out.csv", progress=False)
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("limit", [None, 10])
def test_explain_names_an_unknown_code_as_predict_does_with_or_without_a_limit(encoder, tmp_path, limit):
    """Without --limit explain read the rows with the data folder's message: "add a line 'code,title'", no fix."""
    pppm = tmp_path / "pppm"
    pppm.mkdir()
    (pppm / "cpc_texts.csv").write_text("context,text\nA01,red house\nB02,fast dog\n")
    run = make_run(tmp_path / "run", encoder, train_file=None, text_cols=[], preset="pppm", data_dir=str(pppm))
    keep_context_titles(Run(run), Run(run).config())
    pd.DataFrame({"id": ["a", "b"], "anchor": ["cat", "mat"], "target": ["big cat", "on mat"],
                  "context": ["A01", "ZZZ"]}).to_csv(tmp_path / "test.csv", index=False)
    titles = Run(run).config().data_dir
    msg = (f"1 context code(s) used by 1 rows are unknown to the CPC titles this run was trained with "
           f"({Path(titles, 'cpc_texts.csv')}): 'ZZZ'; correct or drop the rows with those code(s): a code new to the "
           "model needs a model trained with its title")
    with pytest.raises(DataError, match=re.escape(msg) + "$"):
        explain_file(run, tmp_path / "test.csv", tmp_path / "report.html", limit=limit)
    assert not (tmp_path / "report.html").exists()
