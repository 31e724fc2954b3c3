"""attnpool.predict, explain_file and export keep transformers' loading bars off stderr, as the CLI and train do.

They printed "Loading weights: 100%|...| N/N" once per fold model loaded. The caller's own transformers and
huggingface_hub bar settings (huggingface_hub's per group too) are as they were after the call, and the warnings raised
during the call reach the caller's own ``warnings.showwarning`` (``logging.captureWarnings``).
"""

from __future__ import annotations

import importlib
import logging
import warnings
from pathlib import Path

import huggingface_hub.utils
import pytest
import transformers

import attnpool
import attnpool.api as api
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


@pytest.fixture
def hub_group_off():
    """The caller's setting: one group of huggingface_hub's bars off, the others on; the states put back after."""
    states = importlib.import_module("huggingface_hub.utils.tqdm").progress_bar_states
    before = dict(states)
    huggingface_hub.utils.enable_progress_bars()
    huggingface_hub.utils.disable_progress_bars("huggingface_hub.http_get")
    yield
    states.clear()
    states.update(before)


@pytest.mark.parametrize("name", CALLS)
def test_the_callers_per_group_hub_settings_survive_the_call(name, run, bars_on, hub_group_off):
    CALLS[name](run)
    assert huggingface_hub.utils.are_progress_bars_disabled("huggingface_hub.http_get")  # was cleared by the call
    assert not huggingface_hub.utils.are_progress_bars_disabled()
    assert transformers.utils.logging.is_progress_bar_enabled()


@pytest.fixture
def captured_warnings():
    """The caller's ``logging.captureWarnings(True)``: its warnings as records of the ``py.warnings`` logger."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("py.warnings")
    logger.addHandler(handler)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)
        try:
            yield records
        finally:
            logging.captureWarnings(False)
            logger.removeHandler(handler)


def test_warnings_raised_in_predict_reach_the_callers_logging(run, monkeypatch, captured_warnings, capfd):
    library = Path(transformers.__file__).parent / "modeling_utils.py"
    predict = api._predict

    def warn_then_predict(*args, **kwargs):
        warnings.warn_explicit("a warning the caller should see", UserWarning, "/home/user/script.py", 1)
        warnings.warn_explicit("a deprecation inside transformers", FutureWarning, str(library), 1)
        return predict(*args, **kwargs)

    monkeypatch.setattr(api, "_predict", warn_then_predict)
    CALLS["predict"](run)
    logged = " ".join(r.getMessage() for r in captured_warnings)
    assert "a warning the caller should see" in logged and "a deprecation inside transformers" in logged
    assert "a warning the caller should see" not in capfd.readouterr().err  # in the caller's log, not raw on stderr
