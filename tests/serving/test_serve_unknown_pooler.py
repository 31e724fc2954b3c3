"""Serving a run whose folds hold a user's pooler that is not imported: start-up stops with the registry's message.

Start-up loads the folds through ``load_fold_models``, which appended the generic "Its files are readable, so keep
them: check that this environment can build it (transformers ...)" after the registry's "import it before loading".
"""

from __future__ import annotations

import json

import pytest
import torch

from attnpool.runs.run import RunError
from attnpool.serving.service import Service
from model_helpers import make_run, save_tiny_encoder


def test_serving_a_run_with_an_unimported_user_pooler_says_only_what_to_import(tmp_path):
    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)
    config_file = run / "fold_0" / "model" / "config.json"
    config = json.loads(config_file.read_text())
    config["pooling"] = {"type": "mine", "module": "mypoolers", "hidden_size": config["pooling"]["hidden_size"]}
    config_file.write_text(json.dumps(config))
    with pytest.raises(RunError) as err:
        Service.load(run, device="cpu", precision="fp32", threads=torch.get_num_threads())
    assert str(err.value) == (
        f"cannot load the fold model in {run / 'fold_0' / 'model'}: Unknown pooler 'mine': this model's pooler "
        "'mine' is defined in module 'mypoolers' (see its config); import it before loading (CLI: --import mypoolers; "
        "run from the folder holding mypoolers.py, or add that folder to PYTHONPATH)")


def test_serving_a_model_folder_with_an_unimported_user_pooler_says_only_what_to_import(tmp_path):
    """A model folder's start-up added "Give a folder saved with model.save_pretrained(...)" to the registry's
    message, though the folder was saved so and only lacked the import."""
    run = make_run(tmp_path / "run", save_tiny_encoder(tmp_path / "encoder"), folds=1)
    folder = run / "fold_0" / "model"
    config = json.loads((folder / "config.json").read_text())
    config["pooling"] = {"type": "mine", "module": "mypoolers", "hidden_size": config["pooling"]["hidden_size"]}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(RunError) as err:
        Service.load(folder, device="cpu", precision="fp32", threads=torch.get_num_threads())
    assert str(err.value).startswith(f"cannot load the model in {folder}: Unknown pooler 'mine': ")
    assert str(err.value).endswith("add that folder to PYTHONPATH)")
