"""benchmarks/pppm_deberta.py, the prepared GPU run, without a GPU: bad arguments are refused before anything loads
(a GPU run must not be spent on them), and the data is found where a device machine has it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pppm_deberta  # noqa: E402
import pppm_quality as pq  # noqa: E402


class Trained(Exception):
    """Raised by the stand-in of attnpool.train: the run got as far as training."""


def _tiny_pppm(folder: Path, anchors: int = 6) -> Path:
    rows = [{"id": f"{a}{t}", "anchor": f"anchor {a}", "target": f"target {t}", "context": "A01", "score": "0.5"}
            for a in range(anchors) for t in range(a + 2)]
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "train.csv", index=False)
    (folder / "cpc_texts.csv").write_text("context,text\nA01,HUMAN NECESSITIES\n", encoding="utf-8")
    return folder


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    """A machine that says it has a GPU, whose training is a stand-in recording the config it was given."""
    calls = []

    def train(cfg, resume=False):
        calls.append(cfg)
        raise Trained

    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(pppm_deberta, "check_tokenizer", lambda model: "tokenizer: not checked here")
    monkeypatch.setattr(pppm_deberta, "torch", SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True)))
    monkeypatch.setattr(pppm_deberta.attnpool, "train", train)
    return calls


@pytest.mark.parametrize("flags, says", [
    (["--epochs", "1"], "adversarial_start must be in \\[0, epochs=1.0\\)"),  # FGM starts at epoch 1 by default
    (["--only-folds", "7"], "only_folds names folds \\[7\\]"),
    (["--combo", "fgm+awp"], "fgm and awp both set adversarial"),
    (["--lr", "-1"], "lr must be >= 0"),
    (["--anchors", "0"], "--anchors 0: 4 folds grouped by anchor need 4 anchors or more"),  # 0: the full data
    (["--anchors", "3"], "--anchors 3: 4 folds"),  # passed --dry-run, failed after loading the data
])
@pytest.mark.parametrize("dry", [True, False])
def test_bad_arguments_are_usage_errors_before_anything_trains(tmp_path, gpu, capsys, flags, says, dry):
    """They ended in tracebacks (or, --anchors 0, in training on the full data) instead of a usage error."""
    data = _tiny_pppm(tmp_path / "pppm")
    with pytest.raises(SystemExit) as exit_:
        pppm_deberta.main([*flags, "--data-dir", str(data), "--output-dir", str(tmp_path / "run"),
                           *(["--dry-run"] if dry else [])])
    assert exit_.value.code == 2 and gpu == []
    assert __import__("re").search(says, capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_the_data_inside_the_repository_is_found(tmp_path, gpu, monkeypatch, capsys):
    """The default was ../shared/data/pppm alone: on a machine whose copy of the repository holds shared/data/pppm
    it printed "skipped" and exited 0, having trained nothing."""
    assert pppm_deberta.DATA_CANDIDATES == (pq.ROOT.parent / "shared" / "data" / "pppm",
                                           pq.ROOT / "shared" / "data" / "pppm")
    inside = _tiny_pppm(tmp_path / "repo" / "shared" / "data" / "pppm")
    monkeypatch.setattr(pppm_deberta, "DATA_CANDIDATES", (tmp_path / "beside" / "pppm", inside))
    with pytest.raises(Trained):
        pppm_deberta.main(["--anchors", "4", "--output-dir", str(tmp_path / "run")])
    assert pq.subset_of(gpu[0].data_dir)["source"] == str(inside.resolve())  # drawn from the data found
    assert "skipped" not in capsys.readouterr().out
    gpu.clear()
    with pytest.raises(Trained):
        pppm_deberta.main(["--output-dir", str(tmp_path / "full")])
    assert Path(gpu[0].data_dir) == inside and gpu[0].folds == 4 and gpu[0].only_folds is None


def test_a_data_dir_given_without_train_csv_is_an_error(tmp_path, gpu, monkeypatch, capsys):
    """A mistyped --data-dir printed "skipped" and exited 0; only the default places may be empty."""
    monkeypatch.setattr(pppm_deberta, "DATA_CANDIDATES", (tmp_path / "beside", tmp_path / "inside"))
    assert pppm_deberta.main(["--output-dir", str(tmp_path / "run")]) == 0
    assert "skipped: no PPPM train.csv in" in capsys.readouterr().out
    for dry in ([], ["--dry-run"]):
        with pytest.raises(SystemExit) as exit_:
            pppm_deberta.main(["--data-dir", str(tmp_path / "typo"), "--output-dir", str(tmp_path / "run"), *dry])
        assert exit_.value.code == 2 and "--data-dir" in capsys.readouterr().err and gpu == []
