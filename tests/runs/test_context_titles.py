"""A PPPM run's copy of its CPC titles (cpc_texts.csv): predict reads it, and a resume with other titles is refused.

The run keeps the titles its folds learned; predict, serve and explain read the data folder's file whenever it was
there, so an edit of it after training silently changed the texts the models were given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import attnpool
from attnpool.config import TrainConfig
from attnpool.data import DataError, load_pppm
from attnpool.runs import Run
from attnpool.runs.run import CONTEXT_TITLES
from attnpool.training.recipe import PER_CALL_SAVED, keep_context_titles
from model_helpers import save_tiny_encoder

TITLES = "context,text\nA47,HUMAN NECESSITIES. FURNITURE\nG02,PHYSICS. OPTICS\nH04,ELECTRICITY\n"


def _pppm_run(tmp_path: Path) -> tuple[Path, Path]:
    """A PPPM run (config saved, titles kept, as a start leaves it) and its data folder."""
    data, run = tmp_path / "pppm", tmp_path / "run"
    data.mkdir()
    (data / CONTEXT_TITLES).write_text(TITLES)
    cfg = TrainConfig(preset="pppm", data_dir=str(data), output_dir=str(run))
    Run.create(run).write_config({**cfg.to_dict(), **PER_CALL_SAVED})
    keep_context_titles(Run(run), cfg)
    return run, data


def _titles_predict_reads(run: Path) -> list[str]:
    rows = pd.DataFrame({"anchor": ["a", "b"], "target": ["x", "y"], "context": ["A47", "G02"]})
    return load_pppm(Run(run).config().data_dir, split="test", frame=rows)[0]["context_text"].tolist()


def test_predict_reads_the_titles_the_run_kept_not_the_edited_data_folder(tmp_path):
    run, data = _pppm_run(tmp_path)
    assert Run(run).config().data_dir == str(data)  # the same file: the data folder is read, as before
    assert _titles_predict_reads(run) == ["HUMAN NECESSITIES. FURNITURE", "PHYSICS. OPTICS"]
    (data / CONTEXT_TITLES).write_text(TITLES.replace("PHYSICS. OPTICS", "PHYSICS. LENSES"))  # edited after training
    assert Run(run).config().data_dir == str(run)
    assert _titles_predict_reads(run) == ["HUMAN NECESSITIES. FURNITURE", "PHYSICS. OPTICS"]
    (data / CONTEXT_TITLES).unlink()  # and gone (the run copied elsewhere), as before
    assert _titles_predict_reads(run) == ["HUMAN NECESSITIES. FURNITURE", "PHYSICS. OPTICS"]


def test_a_resume_with_other_titles_is_refused_naming_what_changed(tmp_path):
    run, data = _pppm_run(tmp_path)
    cfg = Run(run).config()
    (data / CONTEXT_TITLES).write_text(TITLES.replace("PHYSICS. OPTICS", "PHYSICS. LENSES") + "B60,VEHICLES\n")
    msg = (f"--resume: {data / CONTEXT_TITLES} changed since the run started (other titles for 'G02'; codes added "
           f"'B60'): the run's finished folds learned the titles of its copy {run / CONTEXT_TITLES}. Put the file "
           "back as it was")
    with pytest.raises(DataError, match=re.escape(msg)):
        keep_context_titles(Run(run), cfg)
    (data / CONTEXT_TITLES).write_text("context,text\nA47,HUMAN NECESSITIES. FURNITURE\nG02,PHYSICS. OPTICS\n")
    with pytest.raises(DataError, match=re.escape("(codes removed 'H04')")):
        keep_context_titles(Run(run), cfg)
    assert (run / CONTEXT_TITLES).read_text() == TITLES  # the run's copy is never replaced


def test_the_same_titles_written_otherwise_resume(tmp_path):
    run, data = _pppm_run(tmp_path)
    (data / CONTEXT_TITLES).write_text(TITLES.replace("\n", "\r\n").replace("A47,HUMAN NECESSITIES. FURNITURE",
                                                                          'A47,"HUMAN NECESSITIES. FURNITURE"'))
    keep_context_titles(Run(run), Run(run).config())
    assert (run / CONTEXT_TITLES).read_text() == TITLES
    # and the run reads on from its data folder (serve --quantize calibrates on its train.csv there)
    assert Run(run).config().data_dir == str(data)


def test_train_resume_refuses_edited_titles(tmp_path):
    data = tmp_path / "pppm"
    data.mkdir()
    rows = [{"id": f"{a}{t}", "anchor": f"cat {a}", "target": f"dog {t}", "context": ["A47", "G02"][a % 2],
             "score": "0.5"} for a in range(4) for t in range(3)]
    pd.DataFrame(rows).to_csv(data / "train.csv", index=False)
    (data / CONTEXT_TITLES).write_text(TITLES)
    recipe = {"preset": "pppm", "data_dir": str(data), "model": str(save_tiny_encoder(tmp_path / "encoder")),
              "folds": 2, "epochs": 1, "max_length": 16, "only_folds": [0]}
    attnpool.train(recipe, output_dir=str(tmp_path / "run"))
    (data / CONTEXT_TITLES).write_text(TITLES.replace("PHYSICS. OPTICS", "PHYSICS. LENSES"))
    with pytest.raises(DataError, match=re.escape("changed since the run started (other titles for 'G02')")):
        attnpool.train({**recipe, "only_folds": None}, output_dir=str(tmp_path / "run"), resume=True)
    assert not Run(tmp_path / "run").fold_done(1)


@pytest.mark.parametrize("damaged", ["context,text\nA47,\n", "context,text\nA47,X\nA47,Y\n", "code,title\nA47,X\n", "",
                                     "\xff\xfe"])
def test_a_data_folder_whose_titles_do_not_read_leaves_the_run_its_copy(tmp_path, damaged):
    """Comparing the titles parsed raised the data folder's file's own errors: predict failed on a file it no
    longer needs, where it read the run's copy before."""
    run, data = _pppm_run(tmp_path)
    (data / CONTEXT_TITLES).write_bytes(damaged.encode("latin-1"))
    assert Run(run).config().data_dir == str(run)
