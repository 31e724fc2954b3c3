"""attnpool.predict, explain_file and export keep transformers' loading bars off stderr, as the CLI and train do.

They printed "Loading weights: 100%|...| N/N" once per fold model loaded. The caller's own transformers and
huggingface_hub bar settings are as they were after the call.
"""

from __future__ import annotations

import huggingface_hub.utils
import pytest
import transformers

import attnpool
from model_helpers import make_run, save_tiny_encoder, write_toy_csv


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bars")
    write_toy_csv(folder / "test.csv", n=6, seed=1)
    return make_run(folder / "run", save_tiny_encoder(folder / "encoder"))


@pytest.fixture
def bars_on():
    """The caller's setting: bars on (the libraries' default), whatever an earlier test left."""
    before = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.enable_progress_bar()
    yield
    if not before:
        transformers.utils.logging.disable_progress_bar()


CALLS = {
    "predict": lambda run: attnpool.predict(run, run.parent / "test.csv", run.parent / "out.csv", progress=False,
                                            device="cpu", precision="fp32"),
    "explain_file": lambda run: attnpool.explain_file(run, run.parent / "test.csv", run.parent / "report.html",
                                                      limit=2, device="cpu"),
    "export": lambda run: attnpool.export(run, run.parent / "onnx" / "model.onnx", fold=0, verify=False),
}


@pytest.mark.parametrize("name", CALLS)
def test_the_api_prints_no_loading_bars_and_restores_the_callers_settings(name, run, bars_on, capfd):
    assert transformers.utils.logging.is_progress_bar_enabled()
    CALLS[name](run)
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s]" not in err, err
    assert transformers.utils.logging.is_progress_bar_enabled()
    assert not huggingface_hub.utils.are_progress_bars_disabled()
