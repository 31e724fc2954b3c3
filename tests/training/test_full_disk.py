"""A full disk while `attnpool train` saves (the fold's model, a checkpoint): one error line with the way on
(``--resume``) and exit 2, as other OSErrors; torch and safetensors word ENOSPC as errors of their own."""

from __future__ import annotations

import errno

import pytest
import transformers
from safetensors import SafetensorError

from attnpool.cli import main
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.runs import files
from model_helpers import save_tiny_encoder, write_toy_csv

FAST = ["--epochs", "1", "--batch-size", "8", "--max-length", "16", "--pooling-opt", "attn_size=8", "--folds", "2",
        "--only-folds", "0"]
SAFETENSORS_FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on ' \
                   'device" })'
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 1024 vs 980"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("full")
    write_toy_csv(folder / "train.csv", n=16)
    return save_tiny_encoder(folder / "encoder"), folder / "train.csv"


def _train(data, out):
    encoder, train_file = data
    return main(["train", "--train-file", str(train_file), "--text-cols", "first", "second", "--label", "label",
                 "--model", encoder, "--output-dir", str(out), *FAST])


def _raise(err):
    def fail(*args, **kwargs):
        raise err
    return fail


def _last_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("error:") == 1  # the fold's log lines above it, no traceback
    return err.splitlines()[-1]


def test_a_full_disk_saving_the_fold_model_is_one_line_with_resume(data, tmp_path, capsys, monkeypatch):
    keep = AttnPoolForSequenceClassification.save_pretrained

    def save_pretrained(model, folder, *args, **kwargs):  # the checkpoints fit; the fold's model no longer does
        if "checkpoints" not in str(folder):
            raise SafetensorError(SAFETENSORS_FULL)
        return keep(model, folder, *args, **kwargs)

    monkeypatch.setattr(AttnPoolForSequenceClassification, "save_pretrained", save_pretrained)
    run = tmp_path / "run"
    assert _train(data, run) == 2
    assert _last_error_line(capsys) == (
        f"attnpool train: error: [Errno 28] no space left on device while saving the model of fold 0 in "
        f"{run / 'fold_0' / 'model'}; free space, then attnpool train --output-dir {run} --resume")


def test_a_full_disk_saving_a_checkpoint_is_one_line_with_resume(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(transformers.Trainer, "_save_optimizer_and_scheduler", _raise(RuntimeError(TORCH_FULL)))
    run = tmp_path / "run"
    assert _train(data, run) == 2
    assert _last_error_line(capsys) == (
        f"attnpool train: error: [Errno 28] no space left on device while saving a checkpoint in "
        f"{(run / 'fold_0' / 'checkpoints').absolute()}; free space, then attnpool train --output-dir {run} --resume")


@pytest.mark.parametrize("err", [OSError(errno.ENOSPC, "No space left on device"), RuntimeError(TORCH_FULL),
                                 SafetensorError(SAFETENSORS_FULL)])
def test_full_disk_errors_become_one_enospc_oserror(err, tmp_path):
    with pytest.raises(OSError, match="no space left on device while saving x in y; free space") as caught:
        with files.full_disk_hint("x", "y", tmp_path):
            raise err
    assert caught.value.errno == errno.ENOSPC and caught.value.__cause__ is err


def test_other_save_errors_pass_unchanged(tmp_path):
    with pytest.raises(RuntimeError, match="^CUDA error$"), files.full_disk_hint("x", "y", tmp_path):
        raise RuntimeError("CUDA error")
