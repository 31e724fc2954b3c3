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
    monkeypatch.setattr(pppm_deberta, "check_model", lambda model: "model and tokenizer: not checked here")
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
    """A mistyped --data-dir printed "skipped" and exited 0; only the default places may be empty (without a GPU)."""
    monkeypatch.setattr(pppm_deberta, "DATA_CANDIDATES", (tmp_path / "beside", tmp_path / "inside"))
    monkeypatch.setattr(pppm_deberta.torch.cuda, "is_available", lambda: False)
    assert pppm_deberta.main(["--output-dir", str(tmp_path / "run")]) == 0
    assert "skipped: no PPPM train.csv in" in capsys.readouterr().out
    monkeypatch.setattr(pppm_deberta.torch.cuda, "is_available", lambda: True)
    for dry in ([], ["--dry-run"]):
        with pytest.raises(SystemExit) as exit_:
            pppm_deberta.main(["--data-dir", str(tmp_path / "typo"), "--output-dir", str(tmp_path / "run"), *dry])
        assert exit_.value.code == 2 and "--data-dir" in capsys.readouterr().err and gpu == []


@pytest.mark.parametrize("flags", [[], ["--dry-run"], ["--anchors", "60", "--epochs", "2", "--only-folds", "0"]])
def test_no_data_on_a_gpu_machine_is_an_error_saying_how_to_bring_it(tmp_path, gpu, monkeypatch, capsys, flags):
    """On a device (CUDA available) without the data it printed "skipped" and exited 0: a lent GPU spent on nothing
    looked like a success. ../shared does not travel there; the message says how the data gets there."""
    monkeypatch.setattr(pppm_deberta, "DATA_CANDIDATES", (tmp_path / "beside", tmp_path / "inside"))
    with pytest.raises(SystemExit) as exit_:
        pppm_deberta.main([*flags, "--output-dir", str(tmp_path / "run")])
    said = str(exit_.value.code)
    assert exit_.value.code not in (0, None) and gpu == [] and "skipped" not in capsys.readouterr().out
    assert "../shared does not travel" in said and "carry" in said and "--data-dir" in said
    assert "cp -r ../shared/data/pppm shared/data/" in said


def test_a_dry_run_of_a_hub_name_the_hub_cannot_give_fails(tmp_path, monkeypatch, capsys):
    """The dry run only checked that sentencepiece was installed: offline (a device machine reaches no network) a hub
    name not in the cache passed, and training failed on the GPU machine."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pppm_deberta.torch.cuda, "is_available", lambda: False)
    data = _tiny_pppm(tmp_path / "pppm")
    with pytest.raises(SystemExit) as exit_:
        pppm_deberta.main(["--dry-run", "--model", "attnpool-tests/not-in-any-cache", "--data-dir", str(data),
                           "--output-dir", str(tmp_path / "run")])
    said = str(exit_.value.code)
    assert "'attnpool-tests/not-in-any-cache' is not a local folder" in said and "HF_HUB_OFFLINE=1" in said
    assert "--random-encoder" in said and "dry run: the config is valid" not in capsys.readouterr().out


@pytest.fixture
def no_network(monkeypatch):
    """HF_HUB_OFFLINE=1, and any connection attempt fails (as on a device machine)."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("no network in this test")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("anchors", [[], ["--anchors", "4"]])
def test_a_dry_run_with_a_random_encoder_needs_no_weights_nor_network(tmp_path, no_network, monkeypatch, capsys,
                                                                      anchors):
    """The lent device has no DeBERTa weights and no network: --random-encoder is what a smoke run there can use."""
    monkeypatch.setattr(pq.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    data = _tiny_pppm(tmp_path / "pppm")
    assert pppm_deberta.main(["--dry-run", "--random-encoder", "--tiny", *anchors, "--data-dir", str(data),
                              "--output-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "tokenizer of the random encoder: loads" in out and "dry run: the config is valid" in out
    assert f"model: {tmp_path / 'run_random_encoder'}" in out
    assert not (tmp_path / "run_random_encoder").exists()  # a dry run builds nothing


def test_a_random_encoder_is_built_kept_and_gets_no_verdict(tmp_path, gpu, no_network, capsys):
    data = _tiny_pppm(tmp_path / "pppm")
    argv = ["--random-encoder", "--tiny", "--data-dir", str(data), "--output-dir", str(tmp_path / "run")]
    with pytest.raises(Trained):
        pppm_deberta.main(argv)
    folder = tmp_path / "run_random_encoder"
    assert Path(gpu[0].model) == folder.resolve() and "random encoder: built" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json", pppm_deberta.RANDOM_MARKER} <= {
        f.name for f in folder.iterdir()}
    assert "no verdict on the target" in pppm_deberta.verdict(gpu[0], True, 0.9, [0, 1, 2, 3])
    with pytest.raises(Trained):
        pppm_deberta.main(argv)
    assert "random encoder: kept" in capsys.readouterr().out
    for bad in (["--model", "x"], ["--model", str(folder)]):
        with pytest.raises(SystemExit) as exit_:
            pppm_deberta.main([*argv, *bad])
        assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        pppm_deberta.main(["--tiny", "--data-dir", str(data)])  # --tiny without --random-encoder
    assert exit_.value.code == 2


def test_a_checkpoint_comes_within_a_device_command(tmp_path):
    """Checkpoints came once per epoch: an FGM epoch of DeBERTa-v3-large (~1,700 steps x 0.38 s, ~650 s) outlasts a
    10-minute device command, so a fold resumed command after command never passed its second epoch."""
    from attnpool.training.arguments import training_arguments

    data = _tiny_pppm(tmp_path / "pppm")
    cfg = pppm_deberta.deberta_config(pppm_deberta.parse_args(["--data-dir", str(data)]))
    assert cfg.eval_steps is not None
    assert cfg.eval_steps * max(pppm_deberta.STEP_SECONDS.values()) < 600  # with the evaluation, under ~5 minutes
    assert cfg.eval_steps * pppm_deberta.STEP_SECONDS["fgm"] <= 300
    kwargs = training_arguments(cfg, tmp_path / "out", steps_per_epoch=1712).to_dict()
    assert kwargs["save_strategy"] == "steps" and kwargs["save_steps"] == cfg.eval_steps
    flags = pppm_deberta.parse_args(["--data-dir", str(data), "--eval-steps", "0"])
    assert pppm_deberta.deberta_config(flags).eval_steps is None  # 0: once per epoch
    with pytest.raises(SystemExit):
        pppm_deberta.parse_args(["--eval-steps", "-1"])
