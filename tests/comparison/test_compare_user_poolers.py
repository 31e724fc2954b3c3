"""`compare` with a user's pooler: each run's worker process imports the module that registers it."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

import attnpool
from attnpool.comparison import PoolerSpec, runner, worker
from attnpool.comparison.specs import worker_imports
from attnpool.pooling import Pooler, registry
from model_helpers import save_tiny_encoder, write_toy_csv

USER_MODULE = '''
"""A user's pooler, registered on import."""
import torch
from attnpool import Pooler, register_pooler


@register_pooler
class UserScoredPooling(Pooler):
    name = "user_scored"
    has_weights = True

    def __init__(self, hidden_size: int):
        super().__init__(hidden_size)
        self.score = torch.nn.Linear(hidden_size, 1)

    def pool(self, hidden_states, mask):
        scores = self.score(hidden_states).squeeze(-1)  # bf16 under a bf16 autocast: its own dtype's minimum
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores.float(), dim=-1).to(hidden_states.dtype) * mask
        return torch.einsum("bt,bth->bh", weights, hidden_states), weights
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``user_cmp_poolers`` in a folder of its own on ``sys.path``, imported; unregistered and forgotten after."""
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "user_cmp_poolers.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the registration goes with the test
    try:
        __import__("user_cmp_poolers")
        yield folder
    finally:
        sys.modules.pop("user_cmp_poolers", None)


def _data(root):
    encoder = save_tiny_encoder(root / "encoder")
    write_toy_csv(root / "train.csv", n=40, seed=0)
    return {"train_file": str(root / "train.csv"), "text_cols": ["first", "second"], "model": encoder, "epochs": 1,
            "batch_size": 8, "max_length": 16, "folds": 2}


def test_a_user_pooler_trains_in_the_comparison_s_worker_processes(user_module, tmp_path):
    """The workers, fresh processes, failed with Unknown pooler 'user_scored' after the baseline trained."""
    result = attnpool.compare(poolings=["user_scored"], seeds=1, output_dir=tmp_path / "c", bootstrap=20,
                              **_data(tmp_path))
    assert [row["pooler"] for row in result.rows] == ["mean", "user_scored"] and result.trained == 2
    command = (tmp_path / "c" / "runs" / "user_scored" / "seed_42.log").read_text().splitlines()[0]
    assert "--import user_cmp_poolers" in command


def test_the_worker_is_told_the_user_module_and_where_it_was_imported_from(user_module, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    imports, env = worker_imports(PoolerSpec.parse("user_scored"))
    assert imports == ["--import", "user_cmp_poolers"]
    assert env["PYTHONPATH"].split(":") == [str(user_module), "/elsewhere"]
    nested = PoolerSpec.parse('weighted_layer:pooler={"type":"user_scored"}')  # a pooler inside another's options
    assert worker_imports(nested)[0] == ["--import", "user_cmp_poolers"]
    assert worker_imports(PoolerSpec.parse("attention"))[0] == []  # attnpool's own: the worker has them


def test_the_worker_imports_its_modules_before_training_and_names_one_that_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(worker, "train", lambda cfg: pytest.fail("trained without its pooler's module"))
    request = tmp_path / "seed_1.yaml"
    request.write_text("train_file: x.csv\n")
    assert worker.main([str(request), "--import", "no_such_user_module"]) == runner.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err == ("attnpool train: error: --import no_such_user_module: ModuleNotFoundError: No module named "
                   "'no_such_user_module' (run from the folder holding no_such_user_module.py, or add that folder to "
                   "PYTHONPATH)")


def test_a_pooler_defined_in_main_is_refused_before_anything_trains(tmp_path, monkeypatch):
    """A notebook's pooler passed the parent's checks, the baseline trained, then every worker failed on it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(runner, "_train_missing", lambda *args: pytest.fail("trained before refusing"))

    class NotebookPooling(Pooler):
        __module__ = "__main__"
        name = "notebook_mean"

        def pool(self, hidden_states, mask):
            weights = mask.to(hidden_states.dtype) / mask.sum(1, keepdim=True).clamp(min=1)
            return torch.einsum("bt,bth->bh", weights, hidden_states), None

    attnpool.register_pooler(NotebookPooling)
    with pytest.raises(ValueError, match=r"notebook_mean: NotebookPooling is defined in __main__ .* move it into a "
                       r"module"):
        attnpool.compare(poolings=["notebook_mean"], seeds=1, output_dir=tmp_path / "c", **_data(tmp_path))
    assert not (tmp_path / "c").exists()
