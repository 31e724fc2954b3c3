"""export_onnx: an edited card kept on re-export, the fold of a run recorded, and a bad atol or opset refused before
the model is exported."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnpool.exporters import VerificationError, export_onnx
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE
from attnpool.runs import Run
from model_helpers import tiny_config, tiny_tokenizer

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=2)
    folder = tmp_path_factory.mktemp("saved") / "model"
    model.save_pretrained(folder, tokenizer=tiny_tokenizer())
    return folder


def _fake_exporter(monkeypatch):
    """A stand-in for the (slow) exporter; returns the program whose metadata the export fills."""
    import attnpool.exporters.onnx as export_module

    program = SimpleNamespace(model=SimpleNamespace(metadata_props={}, opset_imports={"": 20}),
                              save=lambda p, **kwargs: Path(p).write_bytes(b"onnx"))
    monkeypatch.setattr(export_module, "_export_program", lambda *args: program)
    return program


def _no_exporter(monkeypatch):
    """The exporter must not be reached: the options are refused first."""
    import attnpool.exporters.onnx as export_module

    def fail(*args):
        raise AssertionError("the model was exported before its options were checked")

    monkeypatch.setattr(export_module, "_export_program", fail)


def test_an_edited_export_card_is_kept_when_exporting_again(saved, tmp_path, monkeypatch, caplog):
    """Re-exporting wrote the generated card over the lines the user had added to it."""
    _fake_exporter(monkeypatch)
    out = tmp_path / "serve" / "model.onnx"
    export_onnx(saved, out, verify=False)
    card = out.parent / CARD_FILE
    edited = card.read_text(encoding="utf-8") + "\nOur notes: served behind the gateway.\n"
    card.write_text(edited, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="attnpool.export"):
        export_onnx(saved, out, verify=False)
    assert card.read_text(encoding="utf-8") == edited
    assert (f"{out.parent}: README.md was edited since attnpool wrote it, or was written by an attnpool that did not "
            "mark its cards: kept, no model card written for model.onnx (delete it and export again for a fresh "
            "card)") in caplog.text


def test_an_unedited_export_card_is_refreshed_and_a_users_own_readme_kept(saved, tmp_path, monkeypatch, caplog):
    _fake_exporter(monkeypatch)
    out = tmp_path / "serve" / "model.onnx"
    export_onnx(saved, out, verify=False)
    card = out.parent / CARD_FILE
    assert "**Tokenizer:** saved in this folder" in card.read_text(encoding="utf-8")
    assert card.read_text(encoding="utf-8").splitlines()[-1].startswith("<!-- attnpool generated card, sha256:")
    export_onnx(saved, out, verify=False, save_tokenizer=False)  # unedited: rewritten with the new facts
    assert "**Tokenizer:** not saved in this folder" in card.read_text(encoding="utf-8")
    card.write_text("# Our model\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="attnpool.export"):
        export_onnx(saved, out, verify=False)
    assert card.read_text(encoding="utf-8") == "# Our model\n"
    assert f"{out.parent}: README.md is one of your own: kept" in caplog.text


def _run(saved, root, folds):
    for k in folds:
        shutil.copytree(saved, root / f"fold_{k}" / "model")
    Run(root).write_info({})
    return root


def test_a_graph_of_a_run_says_which_fold_it_holds(saved, tmp_path, monkeypatch):
    """Exporting a 3-fold run wrote fold 0 with nothing in the graph or its card saying so."""
    program = _fake_exporter(monkeypatch)
    run = _run(saved, tmp_path / "run", [0, 1, 2])
    out = tmp_path / "serve" / "model.onnx"
    export_onnx(run, out, fold=1, verify=False)
    assert program.model.metadata_props["attnpool_fold"] == "1"
    assert program.model.metadata_props["attnpool_run_folds"] == "3"
    lines = (out.parent / CARD_FILE).read_text(encoding="utf-8").splitlines()
    graph = next(i for i, line in enumerate(lines) if line.startswith("- **Graph:** `model.onnx`"))
    assert lines[graph + 1] == (
        "- **Fold:** fold 1 of 3 of its train run (this graph holds that fold's model alone); `attnpool predict "
        "--run` averages all 3 folds (to do the same with each fold's graph, see \"Ensembling folds\" in attnpool's "
        "docs/serving.md)")


def test_a_graph_of_a_saved_model_names_no_fold(saved, tmp_path, monkeypatch):
    program = _fake_exporter(monkeypatch)
    export_onnx(saved, tmp_path / "serve" / "model.onnx", verify=False)
    assert "attnpool_fold" not in program.model.metadata_props
    assert "**Fold:**" not in (tmp_path / "serve" / CARD_FILE).read_text(encoding="utf-8")


def test_no_fold_is_named_for_a_copy_outside_a_run_nor_for_a_fold_that_did_not_finish(saved, tmp_path, monkeypatch):
    """A copied exports/fold_3/model was stamped "the only fold of its train run"; an unfinished fold was counted,
    though predict leaves it out."""
    program = _fake_exporter(monkeypatch)
    shutil.copytree(saved, tmp_path / "exports" / "fold_3" / "model")
    export_onnx(tmp_path / "exports" / "fold_3" / "model", tmp_path / "a" / "model.onnx", verify=False)
    assert "attnpool_fold" not in program.model.metadata_props
    run = _run(saved, tmp_path / "run", [0, 1, 2])
    Run(run).checkpoints_dir(2).mkdir()  # its model saved, its oof.csv not written: unfinished
    program.model.metadata_props.clear()
    export_onnx(run / "fold_2" / "model", tmp_path / "b" / "model.onnx", verify=False)
    assert "attnpool_fold" not in program.model.metadata_props
    export_onnx(run, tmp_path / "c" / "model.onnx", fold=1, verify=False)
    assert program.model.metadata_props["attnpool_run_folds"] == "2"  # the folds predict --run averages


def test_an_export_card_of_this_graph_from_before_cards_were_stamped_is_refreshed(saved, tmp_path, monkeypatch,
                                                                                  caplog):
    """Every export card written before today has no fingerprint: kept stale, with an "edited" warning each time."""
    _fake_exporter(monkeypatch)
    out = tmp_path / "serve" / "model.onnx"
    export_onnx(saved, out, verify=False)
    card = out.parent / CARD_FILE
    unstamped = "".join(card.read_text(encoding="utf-8").splitlines(keepends=True)[:-1])  # as an older attnpool's
    card.write_text(unstamped, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="attnpool.export"):
        export_onnx(saved, out, verify=False, save_tokenizer=False)
    assert "**Tokenizer:** not saved in this folder" in card.read_text(encoding="utf-8")
    assert "kept" not in caplog.text


@pytest.mark.parametrize("atol", [-1.0, math.nan, math.inf, True, "1e-4"])
def test_an_atol_that_is_not_a_finite_number_at_least_0_is_refused_first(saved, tmp_path, monkeypatch, atol):
    """A negative atol exported the model, then failed its check with advice to try another opset."""
    _no_exporter(monkeypatch)
    with pytest.raises(ValueError) as caught:
        export_onnx(saved, tmp_path / "serve" / "model.onnx", atol=atol)
    assert str(caught.value) == (f"atol (export_onnx) must be a finite number >= 0, got {atol!r}: give the largest "
                                 "|onnxruntime - PyTorch| difference the verification accepts (default 0.0001), or "
                                 "skip the check with verify=False")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("opset", [0, 6, 99, 17.0, True])
def test_an_opset_that_does_not_exist_is_refused_with_the_range(saved, tmp_path, monkeypatch, opset):
    """--opset 99 said the exporter produced opset 18 "for this model" and blamed its operators."""
    _no_exporter(monkeypatch)
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(ValueError) as caught:
        export_onnx(saved, tmp_path / "serve" / "model.onnx", opset=opset)
    assert str(caught.value) == (f"--opset (opset=) {opset!r} is not an ONNX opset this onnx {onnx.__version__} can "
                                 f"write: give a whole number from 7 to {newest}, or leave it out for the exporter's "
                                 "default (18 or newer)")
    assert list(tmp_path.iterdir()) == []


def test_the_newest_opset_and_the_default_are_accepted(saved, tmp_path, monkeypatch):
    program = _fake_exporter(monkeypatch)
    program.model.opset_imports[""] = onnx.defs.onnx_opset_version()
    assert export_onnx(saved, tmp_path / "a" / "model.onnx", opset=onnx.defs.onnx_opset_version(),
                       verify=False).path.is_file()
    assert export_onnx(saved, tmp_path / "b" / "model.onnx", verify=False).path.is_file()


def test_a_failed_export_leaves_no_folder_it_made(saved, tmp_path, monkeypatch):
    """The message said "Nothing was written to deep/a/b", and deep/a/b was left behind, empty."""
    import attnpool.exporters.onnx as export_module

    _fake_exporter(monkeypatch)

    def disagree(*args, **kwargs):
        raise VerificationError("the exported graph disagrees with PyTorch")

    monkeypatch.setattr(export_module, "verify_onnx", disagree)
    (tmp_path / "kept").mkdir()
    with pytest.raises(VerificationError, match=f"Nothing was written to {tmp_path / 'deep' / 'a' / 'b'}$"):
        export_onnx(saved, tmp_path / "deep" / "a" / "b" / "model.onnx")
    with pytest.raises(VerificationError):
        export_onnx(saved, tmp_path / "kept" / "new" / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # the folder that was there before stays
    assert list((tmp_path / "kept").iterdir()) == []
