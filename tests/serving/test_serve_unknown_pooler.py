"""Serving a run whose folds hold a user's pooler that is not imported: start-up stops with the registry's message.

Start-up loads the folds through ``load_fold_models``, which appended the generic "Its files are readable, so keep
them: check that this environment can build it (transformers ...)" after the registry's "import it before loading".
"""

from __future__ import annotations

import pytest
import torch

from attnpool.runs.run import RunError
from attnpool.serving.service import Service
from model_helpers import UNIMPORTED_POOLER_ERROR, unimported_pooler_run


def test_serving_a_run_with_an_unimported_user_pooler_says_only_what_to_import(tmp_path):
    run = unimported_pooler_run(tmp_path)
    with pytest.raises(RunError) as err:
        Service.load(run, device="cpu", precision="fp32", threads=torch.get_num_threads())
    assert str(err.value) == f"cannot load the fold model in {run / 'fold_0' / 'model'}: {UNIMPORTED_POOLER_ERROR}"


def test_serving_a_model_folder_with_an_unimported_user_pooler_says_only_what_to_import(tmp_path):
    """A model folder's start-up added "Give a folder saved with model.save_pretrained(...)" to the registry's
    message, though the folder was saved so and only lacked the import."""
    folder = unimported_pooler_run(tmp_path) / "fold_0" / "model"
    with pytest.raises(RunError) as err:
        Service.load(folder, device="cpu", precision="fp32", threads=torch.get_num_threads())
    assert str(err.value) == f"cannot load the model in {folder}: {UNIMPORTED_POOLER_ERROR}"
