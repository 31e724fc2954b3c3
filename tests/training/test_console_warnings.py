"""attnpool.train's quiet_third_party leaves a caller's warnings and huggingface_hub bar groups as the caller set them.

A ``logging.captureWarnings(True)`` caller got the warnings it should see raw on stderr (the run's own
``showwarning`` replaced the caller's), and ``enable_progress_bars()`` on the way out cleared every per-group switch
of huggingface_hub (``disable_progress_bars("huggingface_hub.http_get")``).
"""

from __future__ import annotations

import importlib
import logging
import warnings
from pathlib import Path

import huggingface_hub.utils
import transformers

from attnpool.training.progress import quiet_library_call, quiet_third_party


def test_a_run_passes_the_warnings_it_shows_to_the_callers_showwarning(capfd):
    records, kept = [], []
    caller, run_log = logging.Handler(), logging.Handler()
    caller.emit, run_log.emit = records.append, kept.append
    logger = logging.getLogger("py.warnings")
    logger.addHandler(caller)
    library = Path(transformers.__file__).parent / "trainer.py"
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)
        try:
            with quiet_third_party(run_log):
                warnings.warn_explicit("a warning of the user's code", UserWarning, "/home/user/script.py", 1)
                warnings.warn_explicit("a deprecation inside transformers", FutureWarning, str(library), 1)
        finally:
            logging.captureWarnings(False)
            logger.removeHandler(caller)
    assert [r.getMessage().count("a warning of the user's code") for r in records] == [1]  # the caller's log
    assert "a warning of the user's code" not in capfd.readouterr().err
    assert any("a deprecation inside transformers" in r.getMessage() for r in kept)  # still train.log's only


def test_a_run_restores_huggingface_hubs_groups_and_transformers_bars():
    states = importlib.import_module("huggingface_hub.utils.tqdm").progress_bar_states
    before, bars = dict(states), transformers.utils.logging.is_progress_bar_enabled()
    try:
        transformers.utils.logging.disable_progress_bar()  # the caller's: transformers' off, one hub group back on
        huggingface_hub.utils.enable_progress_bars("huggingface_hub.http_get")
        expected = dict(states)
        with quiet_third_party():
            assert huggingface_hub.utils.are_progress_bars_disabled("huggingface_hub.http_get")
        assert dict(states) == expected and not transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.enable_progress_bar()
        huggingface_hub.utils.disable_progress_bars("huggingface_hub.http_get")
        expected = dict(states)
        with quiet_third_party():
            assert huggingface_hub.utils.are_progress_bars_disabled()
        assert dict(states) == expected and transformers.utils.logging.is_progress_bar_enabled()
        assert huggingface_hub.utils.are_progress_bars_disabled("huggingface_hub.http_get")
    finally:
        (transformers.utils.logging.enable_progress_bar if bars else transformers.utils.logging.disable_progress_bar)()
        states.clear()
        states.update(before)


def test_a_handler_shared_with_the_root_logger_keeps_everyone_else_s_records():
    """Turning transformers' handlers down to ERROR by level also silenced a handler the caller (or pytest's capture)
    had on the root logger too: attnpool's own warnings during predict vanished from it."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.name, record.levelno))

    shared, library, root = Keep(), logging.getLogger("transformers"), logging.getLogger()
    library.addHandler(shared)
    root.addHandler(shared)
    try:
        with quiet_library_call():
            logging.getLogger("attnpool.runs.folds").warning("leaving out fold 1")
            logging.getLogger("transformers.modeling_utils").warning("a library warning")
            logging.getLogger("transformers.modeling_utils").error("a library error")
        assert ("attnpool.runs.folds", logging.WARNING) in records
        assert ("transformers.modeling_utils", logging.WARNING) not in records
        assert ("transformers.modeling_utils", logging.ERROR) in records
        assert shared.filters == [] and shared.level == logging.NOTSET  # as it was
    finally:
        library.removeHandler(shared)
        root.removeHandler(shared)
