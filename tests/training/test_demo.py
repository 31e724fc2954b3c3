from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoTokenizer

from attnpool import AttnPoolForSequenceClassification
from attnpool.config import TrainConfig
from attnpool.runs import Run
from attnpool.runs.lock import RunError
from attnpool.training.demo import KEYS, make_key_token_data, run_demo, training_rows
from attnpool.training.recipe import PER_CALL_SAVED
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
    # run again in its own folder: the earlier demo's files are recognised as its own and replaced
    again = run_demo(output_dir=tmp_path / "demo", model=str(tmp_path / "enc"), n_train=24, n_valid=16)
    assert set(again) == {"mean", "attention"}
    assert len(pd.read_csv(tmp_path / "demo" / "train.csv")) == 24
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["attention", "mean", "train.csv", "valid.csv"]


def _earlier_demo(folder: Path, n: int = 32) -> None:
    """A folder as an earlier demo left it: its generated data and its two runs (run.json, config.yaml)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, seed in (("train.csv", 0), ("valid.csv", 1)):
        make_key_token_data(n, seed=seed).to_csv(folder / name, index=False)
    for pooling in ("mean", "attention"):
        run = Run.create(folder / pooling)
        cfg = TrainConfig(train_file=str((folder / "train.csv").resolve()), valid_file=str(folder / "valid.csv"),
                          text_cols=["text"], label="label", pooling=pooling, output_dir=str(folder / pooling))
        run.write_config({**cfg.to_dict(), **PER_CALL_SAVED})
        run.write_info({"task": "regression"})


def test_the_demo_refuses_a_folder_of_the_users_own_data(tmp_path):
    """`attnpool demo --output-dir mydata` deleted the user's train.csv and valid.csv: the names alone made a demo."""
    folder = tmp_path / "mydata"
    folder.mkdir()
    mine = {"train.csv": "text,label\ngreat film,1\n", "valid.csv": "text,label\nawful,0\n"}
    for name, text in mine.items():
        (folder / name).write_text(text)
    with pytest.raises(RunError, match=r"holds files that are not the demo's \(train.csv, valid.csv\).*another "
                                       r"--output-dir"):
        run_demo(output_dir=folder, model="unused", n_train=32, n_valid=16)
    assert {name: (folder / name).read_text() for name in mine} == mine
    _earlier_demo(tmp_path / "runs")  # ... nor a run of the user's named like the demo's
    (tmp_path / "runs" / "mean" / "config.yaml").write_text(
        (tmp_path / "runs" / "mean" / "config.yaml").read_text().replace("- text\n", "- review\n"))
    with pytest.raises(RunError, match=r"not the demo's \(mean\)"):
        run_demo(output_dir=tmp_path / "runs", model="unused", n_train=32, n_valid=16)
    assert Run.is_run(tmp_path / "runs" / "mean")


def test_an_earlier_demo_is_kept_when_the_model_cannot_load(tmp_path):
    """The folder was cleared before the model was even looked at: a mistyped --model lost the earlier demo."""
    folder = tmp_path / "demo"
    _earlier_demo(folder)
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    with pytest.raises(OSError):
        run_demo(output_dir=folder, model=str(tmp_path / "no-such-model"), n_train=32, n_valid=16)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == before


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
    _earlier_demo(folder)
    (folder / ".valid.csv.x1y2z3.tmp").write_text("id,text")  # a write of its data, killed
    (folder / "attention" / "fold_0").mkdir()
    demo._clear_demo_folder(folder)
    assert [p.name for p in folder.iterdir() if p.name != ".attnpool.lock"] == []
    (folder / "mean").mkdir()  # a demo killed as its first run began
    (folder / "mean" / "train.log").write_text("...")
    make_key_token_data(8, seed=0).to_csv(folder / "train.csv", index=False)
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


def test_the_demo_refuses_a_saved_attnpool_model_and_keeps_the_earlier_demo(tmp_path):
    """`demo --model SAVED_MODEL` cleared the earlier demo, then failed: 'AttnPoolConfig' has no num_hidden_layers."""
    encoder = save_tiny_encoder(tmp_path / "enc")
    saved = tmp_path / "saved"
    AttnPoolForSequenceClassification.from_encoder(encoder, pooling="mean").save_pretrained(
        saved, tokenizer=AutoTokenizer.from_pretrained(encoder))
    folder = tmp_path / "demo"
    _earlier_demo(folder)
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    with pytest.raises(ValueError, match=rf"^demo: --model {saved} is a saved attnpool model \(model_type 'attnpool'"
                                         r"\), not an encoder: .*leave --model out for the bundled"):
        run_demo(output_dir=folder, model=str(saved), n_train=32, n_valid=16)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == before


def test_a_demo_whose_model_is_missing_makes_no_output_folder(tmp_path):
    """A bad --model left an empty --output-dir behind: the folder was made before the model was looked at."""
    with pytest.raises(FileNotFoundError, match="no such folder"):
        run_demo(output_dir=tmp_path / "new" / "demo", model=str(tmp_path / "nonexistent"), n_train=32, n_valid=16)
    assert not (tmp_path / "new").exists()


def test_the_demos_output_dir_reads_a_tilde_as_the_home_folder(tmp_path, monkeypatch):
    """`run_demo(output_dir="~/mydata")` made a folder named "~" in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    (tmp_path / "home" / "mydata").mkdir(parents=True)
    (tmp_path / "home" / "mydata" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match=rf"demo: {tmp_path / 'home' / 'mydata'} holds files that are not the demo's"):
        run_demo(output_dir="~/mydata", model=str(tmp_path / "nonexistent"), n_train=32, n_valid=16)
    assert list((tmp_path / "cwd").iterdir()) == []


def test_the_demo_runs_on_an_encoder_whose_positions_are_offset(tmp_path, capsys):
    """RoBERTa's 70 positions read 68 tokens (2 reserved): the demo passed max_length 70 and was refused, pointed at
    a --max-length flag the demo does not have."""
    encoder = save_tiny_encoder(tmp_path / "enc", family="roberta")
    scores = run_demo(output_dir=tmp_path / "demo", model=encoder, n_train=32, n_valid=16)
    assert set(scores) == {"mean", "attention"}
    assert "tokens the attention pooler weighs most" in capsys.readouterr().out


def test_the_demo_refuses_an_output_dir_that_links_to_nothing(tmp_path):
    """Was: `[Errno 17] File exists` from mkdir."""
    link = tmp_path / "dangling"
    os.symlink("gone/demo", link)
    with pytest.raises(RunError, match=rf"demo: output path {link} is a symbolic link to gone/demo .*which does not "
                                       "exist; create that folder, or remove the link"):
        run_demo(output_dir=link, model="unused", n_train=32, n_valid=16)
    assert not (tmp_path / "gone").exists()


def test_the_demo_refuses_an_output_dir_it_cannot_write_before_the_model_loads():
    """Was `[Errno 2] No such file or directory: '/proc/demo'` from mkdir, after the model had loaded."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc, a folder that takes no new files")
    with pytest.raises(ValueError, match=r"^cannot write --output-dir /proc/attnpool-demo: folder /proc is not "
                                         r"writable \(read-only or no permission\); choose another --output-dir$"):
        run_demo(output_dir="/proc/attnpool-demo", model="unused", n_train=32, n_valid=16)


@pytest.mark.parametrize(("seconds", "rows", "note"), [
    (45, 800, None),
    (5, 160, "--seconds 5 is outside 9 to 135 (10 to 150 steps of about 0.9 s): training 10 steps, about 9 s"),
    (600, 2400, "--seconds 600 is outside 9 to 135 (10 to 150 steps of about 0.9 s): training 150 steps, about 135 s"),
])
def test_seconds_outside_the_demos_range_are_said_not_silently_bounded(seconds, rows, note):
    """`attnpool demo --seconds 5` trained 10 steps (about 9 s) and said nothing of it."""
    assert training_rows(seconds) == (rows, note)
