"""``--import MODULE`` for a module not found says where it is looked for; a module that fails inside does not.

From the parent of the folder holding my_poolers.py, ``--import my_poolers`` said only "ModuleNotFoundError: No
module named 'my_poolers'", without saying that the module is looked for in the working directory and PYTHONPATH.
"""

from __future__ import annotations

import sys

import pytest

from attnpool import api
from attnpool.cli import main


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A folder mine/ holding my_poolers.py (which imports fine) and broken_poolers.py (which imports a missing one)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # import_modules puts the working directory first
    monkeypatch.setattr(api, "train", lambda *args, **kwargs: pytest.fail("ran without the module"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "my_poolers_hint.py").write_text("VALUE = 1\n")
    (tmp_path / "mine" / "broken_poolers_hint.py").write_text("import no_such_dependency_here\n")
    yield tmp_path
    for name in ("my_poolers_hint", "broken_poolers_hint"):
        sys.modules.pop(name, None)


def test_a_module_not_found_says_to_run_from_its_folder_or_add_it_to_pythonpath(scratch, monkeypatch, capsys):
    monkeypatch.chdir(scratch)
    assert main(["--import", "my_poolers_hint", "train", "--train-file", "a.csv"]) == 2
    assert capsys.readouterr().err == (
        "attnpool train: error: --import my_poolers_hint: ModuleNotFoundError: No module named 'my_poolers_hint' "
        "(run from the folder holding my_poolers_hint.py, or add that folder to PYTHONPATH)\n")


def test_a_dotted_module_names_its_file(scratch, monkeypatch, capsys):
    monkeypatch.chdir(scratch)
    assert main(["--import", "nowhere_pkg.my_poolers_hint", "train", "--train-file", "a.csv"]) == 2
    assert capsys.readouterr().err.endswith(
        "(run from the folder holding nowhere_pkg/my_poolers_hint.py, or add that folder to PYTHONPATH)\n")


def test_a_missing_dependency_of_the_module_gets_no_hint(scratch, monkeypatch, capsys):
    monkeypatch.chdir(scratch / "mine")
    assert main(["--import", "broken_poolers_hint", "train", "--train-file", "a.csv"]) == 2
    assert capsys.readouterr().err == ("attnpool train: error: --import broken_poolers_hint: ModuleNotFoundError: No "
                                       "module named 'no_such_dependency_here'\n")
