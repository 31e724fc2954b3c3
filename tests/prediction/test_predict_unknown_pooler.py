"""Predicting with a run whose folds hold a user's pooler that is not imported: the registry's message alone.

``load_fold_models`` appended "Its files are readable, so keep them: check that this environment can build it
(transformers ... knows its encoder, ...)" after the registry's "import it before loading (CLI: --import ...)",
as export did before it found the registry's error in the chain: predict, serve and explain load through it.
"""

from __future__ import annotations

import pytest

import attnpool
from attnpool.pooling.registry import UnknownPoolerError
from attnpool.runs.run import RunError
from model_helpers import UNIMPORTED_POOLER_ERROR, unimported_pooler_run, write_toy_csv


def test_predict_says_only_what_to_import(tmp_path):
    run = unimported_pooler_run(tmp_path)
    write_toy_csv(tmp_path / "test.csv", n=4, seed=1)
    with pytest.raises(RunError) as err:
        attnpool.predict(run, tmp_path / "test.csv", tmp_path / "out.csv", progress=False, device="cpu")
    assert str(err.value) == f"cannot load the fold model in {run / 'fold_0' / 'model'}: {UNIMPORTED_POOLER_ERROR}"
    assert isinstance(err.value.__cause__, UnknownPoolerError)  # the registry's error stays in the chain
    assert not (tmp_path / "out.csv").exists()


def test_explain_names_the_folder_of_the_model_it_cannot_build(tmp_path):
    """explain gave the registry's message without the folder (it loads the fold model itself, not through
    load_fold_models): which model of which run was not said."""
    run = unimported_pooler_run(tmp_path)
    write_toy_csv(tmp_path / "test.csv", n=4, seed=1)
    with pytest.raises(RunError) as err:
        attnpool.explain_file(run, tmp_path / "test.csv", tmp_path / "report.html")
    assert str(err.value) == f"cannot load the model in {run / 'fold_0' / 'model'}: {UNIMPORTED_POOLER_ERROR}"
    assert not (tmp_path / "report.html").exists()
