"""Review fixes in runs/: a file output that is an existing folder is refused up front, and an empty --folds says
that it names no fold (was: "has no trained fold (none given)")."""

from __future__ import annotations

import pytest

from attnpool.runs.files import check_writable
from attnpool.runs.folds import choose_folds
from attnpool.runs.run import Run, RunError


def test_a_file_output_that_is_an_existing_folder_is_refused(tmp_path):
    """Was: passed, and predict failed last with `[Errno 21] Is a directory`, leaving OUTPUT.parts/ behind."""
    folder = tmp_path / "dir.csv"
    folder.mkdir()
    with pytest.raises(ValueError) as caught:
        check_writable(folder, "--output")
    assert str(caught.value) == f"--output {folder} is a folder; give a file path such as {folder / 'predictions.csv'}"
    with pytest.raises(ValueError, match=r"^--json .* is a folder; give a file path such as .*predictions\.csv$"):
        check_writable(tmp_path, "--json")  # no suffix: a .csv example
    check_writable(folder, "--output-dir", folder=True)  # a folder output: still accepted
    check_writable(folder / "p.csv")
    assert list(folder.iterdir()) == []


def test_an_empty_folds_says_it_names_no_fold_and_lists_the_trained_ones(tmp_path):
    with pytest.raises(RunError) as caught:
        choose_folds(tmp_path, [0, 1], {}, [])
    assert str(caught.value) == (f"{tmp_path}: --folds (folds) names no fold; name one or more of its trained folds "
                                 "(0, 1), or leave --folds out to use all of them")
    with pytest.raises(RunError, match=r"has no trained fold 5; trained folds: 0, 1$"):
        choose_folds(tmp_path, [0, 1], {}, [5])


def test_create_empties_the_folder_it_checked_under_a_tilde(home):
    """Run.create("~/x", overwrite=True) checked $HOME/x (a run) and emptied ./~/x, a folder of the user's."""
    (home / "x").mkdir()
    (home / "x" / "run.json").write_text("{}")
    (home.parent / "cwd" / "~" / "x").mkdir(parents=True)
    (home.parent / "cwd" / "~" / "x" / "precious.txt").write_text("keep")
    assert Run.create("~/x", overwrite=True).path == home / "x"
    assert (home.parent / "cwd" / "~" / "x" / "precious.txt").read_text() == "keep"
    assert Run.create("~/new").path.is_dir() and not (home.parent / "cwd" / "~" / "new").exists()
