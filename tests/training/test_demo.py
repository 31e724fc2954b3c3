from __future__ import annotations

from attnpool.training.demo import KEYS, make_key_token_data, run_demo
from model_helpers import save_tiny_encoder


def test_each_text_holds_one_key_word_whose_score_is_the_label():
    frame = make_key_token_data(60, seed=0, min_words=5, max_words=30)
    for text, label in zip(frame["text"], frame["label"], strict=True):
        words = text.split()
        assert 5 <= len(words) <= 30
        keys = [w for w in words if w in KEYS]
        assert len(keys) == 1 and KEYS[keys[0]] == label
    assert set(frame["label"]) == set(KEYS.values())


def test_demo_runs_end_to_end_on_a_tiny_encoder(tmp_path, capsys):
    scores = run_demo(output_dir=tmp_path / "demo", model=save_tiny_encoder(tmp_path / "enc"), n_train=32, n_valid=16)
    assert set(scores) == {"mean", "attention"}
    out = capsys.readouterr().out
    assert "validation Pearson:" in out and "tokens the attention pooler weighs most" in out


def test_the_demo_refuses_a_folder_that_holds_anything_but_an_earlier_demo(tmp_path):
    """`attnpool demo --output-dir runs` deleted every run in it (and `--output-dir .` the project)."""
    import pytest

    from attnpool.runs.lock import RunError

    folder = tmp_path / "runs"
    (folder / "my_run").mkdir(parents=True)
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(RunError, match=r"holds files that are not the demo's \(my_run, notes.txt\).*another "
                                       r"--output-dir"):
        run_demo(output_dir=folder, model="unused", n_train=32, n_valid=16)
    assert (folder / "notes.txt").read_text() == "keep me" and (folder / "my_run").is_dir()


def test_the_demo_refuses_an_output_dir_that_is_a_file(tmp_path):
    """mkdir ran first and raised FileExistsError, so this RunError could never be raised."""
    import pytest

    from attnpool.runs.lock import RunError

    path = tmp_path / "results.txt"
    path.write_text("keep me")
    with pytest.raises(RunError, match=r"--output-dir .*results\.txt is a file; give a folder"):
        run_demo(output_dir=path, model="unused", n_train=32, n_valid=16)
    assert path.read_text() == "keep me"


def test_a_second_demo_replaces_the_first_demos_files(tmp_path):
    from attnpool.training import demo

    folder = tmp_path / "demo"
    for name in ("train.csv", "valid.csv"):
        (folder / "mean").mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("old")
    demo._clear_demo_folder(folder)
    assert [p.name for p in folder.iterdir() if p.name != ".attnpool.lock"] == []


def test_the_demos_first_line_comes_first_in_a_log_of_both_streams(tmp_path):
    """`attnpool demo > demo.log 2>&1`: stdout, buffered in a file, put the opening line after both runs' lines."""
    import os
    import subprocess
    import sys

    encoder = save_tiny_encoder(tmp_path / "enc")
    code = ("from attnpool.training.demo import run_demo; "
            f"run_demo(output_dir={str(tmp_path / 'demo')!r}, model={encoder!r}, n_train=32, n_valid=16)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"OMP_NUM_THREADS": "1"}
    with (tmp_path / "demo.log").open("w") as log:
        subprocess.run([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, env=env, check=True,
                       timeout=300)
    lines = (tmp_path / "demo.log").read_text().splitlines()
    assert lines[0].startswith("attnpool demo: 32 training / 16 validation texts"), lines[:3]
