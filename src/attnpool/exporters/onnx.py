"""Export a saved attnpool model (encoder, pooler and head) to one ONNX graph, and check it against PyTorch.

The graph takes ``input_ids``, ``attention_mask`` and, for encoders with more than one token type,
``token_type_ids``, all ``(batch, sequence)`` int64 with both axes dynamic. It returns ``logits`` (or
``pooler_output`` for an :class:`~attnpool.AttnPoolModel`) and, when asked, the pooler's ``pooling_weights``. The
tokenizer of the model folder is saved beside the ``.onnx`` file, so that the folder alone serves the model; see
``docs/serving.md``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnpool._version import __version__
from attnpool.exporters.checks import check_atol, check_opset, check_opset_number
from attnpool.exporters.export_card import stage_card, tokenizer_from
from attnpool.exporters.models import (
    ExporterFailure,
    ExportError,
    OnnxWrapper,
    _base_model,
    _check_recurrent,
    _check_weights,
    _load_tokenizer,
    _max_tokens,
    _uses_token_types,
    load_for_export,
    resolve_model_dir,
    run_fold,
    source_stamp,
)
from attnpool.exporters.staging import OWNER_FILE, make_staging, missing_folders, remove_empty
from attnpool.exporters.verify import ATOL, VerificationError, _example_batch, _pad_id, verify_onnx
from attnpool.model.card import ExportFacts
from attnpool.runs.files import check_writable

_check_opset = check_opset  # its former name here


@dataclass(frozen=True)
class OnnxExport:
    """What :func:`export_onnx` wrote.

    Attributes:
        path: The ``.onnx`` file.
        input_names: The graph's inputs, in order.
        output_names: The graph's outputs, in order.
        max_abs_diff: Largest absolute difference between onnxruntime and PyTorch over all outputs on the
            verification batch; ``None`` when not verified.
        tokenizer_saved: Whether the tokenizer was saved beside the ``.onnx`` file.
    """

    path: Path
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    max_abs_diff: float | None
    tokenizer_saved: bool


def _export_program(wrapper: OnnxWrapper, example: dict[str, Tensor], opset: int | None) -> Any:
    """``torch.onnx.export`` with the dynamo exporter, batch and sequence axes dynamic, its noise filtered."""
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    args = tuple(example[n] for n in wrapper.input_names)
    # The exporter's passes log each step at INFO and skipped optimisations or "torchvision is not installed" as
    # warnings; none says anything about the graph's correctness, which the verification checks.
    # (A requested opset below 18 is converted down to, with a warning that _check_opset replaces by an error.)
    quiet = ("onnx_ir", "onnxscript", "torch.onnx._internal.exporter._registration",
             "torch.onnx._internal.exporter._compat")
    levels = {name: logging.getLogger(name).level for name in quiet}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            # Notes of the exporter about its own internals (axis renaming, a deprecated pytree class), not ours.
            warnings.filterwarnings("ignore", message=".*axis name.*", category=UserWarning)
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            return torch.onnx.export(
                wrapper,
                args,
                None,
                input_names=list(wrapper.input_names),
                output_names=list(wrapper.output_names),
                dynamic_shapes=tuple({0: batch, 1: sequence} for _ in args),
                opset_version=opset,
                dynamo=True,
                verbose=False,
            )
    except Exception as err:  # the exporter raises many types; say which model failed, why, and what to try
        stages = {type(e).__name__ for e in _chain(err)}
        if stages & _CONVERSION_ERRORS:  # an operator without an ONNX form: another opset may have one
            what, advice = "convert this model to ONNX", "Try another opset (--opset N, opset= in Python), or report"
        else:  # no exporter option changes what torch.export can trace
            what = "trace this model" if "TorchExportError" in stages else "export this model"
            advice = "Report"
        reason = f"torch.onnx.export (dynamo) could not {what}: {_root_cause(err)}"
        raise ExporterFailure(f"{reason}. {advice} the encoder and pooler in an issue", reason=reason) from err
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# torch's classes (private to torch.onnx, so matched by name) for a failure after tracing: decomposition, dispatch,
# graph construction; and the TorchScript exporter's missing operator. Tracing fails with a TorchExportError.
_CONVERSION_ERRORS = {"ConversionError", "DispatchError", "GraphConstructionError", "UnsupportedOperatorError"}


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the errors behind it, outermost first, as a traceback prints them (a cause, else a context)."""
    chain = [err]
    while True:
        last = chain[-1]
        inner = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if inner is None or inner in chain:
            return chain
        chain.append(inner)


def _root_cause(err: BaseException, limit: int = 500) -> str:
    """The innermost error behind ``err`` as one line, ``Type: message``: torch's own is a coloured banner."""
    root = _chain(err)[-1]
    message = " ".join(_ANSI.sub("", str(root)).split())
    if len(message) > limit:
        message = message[:limit] + "..."
    return f"{type(root).__name__}: {message}" if message else type(root).__name__


def _metadata(model: nn.Module, wrapper: OnnxWrapper, fold: tuple[int, int] | None = None) -> dict[str, str]:
    """Facts a server needs besides the graph, stored in the ONNX file's ``metadata_props``.

    ``fold``: ``(K, N)`` for fold K of a train run of N folds (:func:`run_fold`): ``attnpool_fold`` and
    ``attnpool_run_folds``, as one graph holds one fold's model where ``attnpool predict --run`` averages N.
    """
    config = _base_model(model).config
    top = getattr(model, "config", config)
    meta = {
        "attnpool_version": __version__,
        "pooling": json.dumps(config.pooling, sort_keys=True),
        "inputs": ",".join(wrapper.input_names),
        "outputs": ",".join(wrapper.output_names),
    }
    if wrapper.main_output == "logits":
        meta["problem_type"] = str(top.problem_type)
        meta["output_activation"] = str(top.output_activation)
        meta["id2label"] = json.dumps({str(k): v for k, v in top.id2label.items()})
    if fold is not None:
        meta["attnpool_fold"], meta["attnpool_run_folds"] = str(fold[0]), str(fold[1])
    return meta


def export_onnx(
    model_or_path: nn.Module | str | os.PathLike,
    output: str | os.PathLike,
    *,
    fold: int | None = None,
    with_weights: bool = False,
    opset: int | None = None,
    tokenizer: Any = None,
    save_tokenizer: bool = True,
    verify: bool = True,
    verify_inputs: Mapping[str, Tensor] | None = None,
    atol: float = ATOL,
    external_data: bool = False,
) -> OnnxExport:
    """Export encoder, pooler and head as one ONNX graph with dynamic batch and sequence axes.

    The model is traced by ``torch.onnx.export(..., dynamo=True)`` on a random padded batch, then (``verify``)
    run in onnxruntime on a padded batch of another batch size and length and compared with PyTorch. Everything
    is written in a temporary folder beside ``output`` and moved into place only once verified: a failed export
    leaves no file behind, nor the folders it made for ``output``. Exported from a train run, the graph records
    which fold it holds (metadata ``attnpool_fold``, ``attnpool_run_folds``, and a line of its card). Weights
    above 1.5 GB go to an external data file ``<output>.data`` beside the graph (ONNX protobufs stop at 2 GB); keep
    the two together.

    Args:
        model_or_path: An :class:`~attnpool.AttnPoolForSequenceClassification` or
            :class:`~attnpool.AttnPoolModel`, a folder saved with ``save_pretrained`` (loaded in float32 from
            safetensors), or the output directory of ``attnpool train`` (with ``fold``).
        output: The ``.onnx`` file to write; its folder is created.
        fold: Which fold's model of a train run; default: its first trained fold. Only with a run's folder.
        with_weights: Add the pooler's token weights as a second output ``pooling_weights``, ``(B, T)`` or
            ``(B, heads, T)``.
        opset: The ONNX opset, from 7 to the newest the installed onnx knows; ``None``: the exporter's default (18
            or newer; older ones are converted to).
        tokenizer: The tokenizer to save beside the graph, for a model given as an object; a model folder's own
            tokenizer is used otherwise.
        save_tokenizer: Save the tokenizer's files (``tokenizer.json``...) into the folder of ``output``, so that
            ``AutoTokenizer.from_pretrained(that folder)`` works next to the graph.
        verify: Compare onnxruntime with PyTorch, raising :class:`ExportError` above ``atol``.
        verify_inputs: A tokenized batch (tensors) to verify on; default: a random batch with padding.
        atol: Largest absolute difference accepted by the check (plus 1e-5 times the value), a finite number >= 0.
        external_data: Write the weights to ``<output>.data`` whatever their size (they go there anyway past
            1.5 GB).

    Returns:
        :class:`OnnxExport`: the path, the graph's input and output names, the verified difference.

    Raises:
        ImportError: onnx or onnxscript (or, with ``verify``, onnxruntime) is not installed.
        FileNotFoundError: A path that is not a model folder or run (see :func:`resolve_model_dir`).
        ValueError: A bad ``fold``, or one with a model object; an ``output`` that is a directory; an ``atol`` that
            is not a finite number >= 0, or an ``opset`` that does not exist;
            :class:`ExportError` (a ``ValueError``): a folder that does not load (another kind of model, damaged
            files), ``with_weights`` for a pooler without token weights, a model the exporter cannot trace (one with
            ``recurrent``), or a verification above ``atol``.
    """
    needed = ["onnx", "onnxscript", *(["onnxruntime"] if verify else [])]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"the ONNX export needs {', '.join(missing)}: pip install 'attnpool[onnx]'")
    atol, opset = check_atol(atol), check_opset_number(opset)  # before a model is exported only to be refused
    output = Path(os.fspath(output)).expanduser()
    if output.suffix != ".onnx":
        raise ValueError(f"the output {output} should end in .onnx (the tokenizer files go beside it)")
    if output.is_dir():  # else the graph's rename fails last, once the tokenizer and README are in its folder
        raise ValueError(f"the output {output} is a directory: give a file path, e.g. {output / output.name}")
    check_writable(output)  # before the model loads and exports: not at the staging folder, last
    model_dir = None
    if isinstance(model_or_path, nn.Module):
        if fold is not None:
            raise ValueError(f"fold={fold} picks a fold of a train run directory, but a model object was given; drop "
                             "the fold, or give the run's folder")
        model = model_or_path
    else:
        model_dir = resolve_model_dir(model_or_path, fold)
        model = load_for_export(model_dir)
        if tokenizer is None and save_tokenizer:
            tokenizer = _load_tokenizer(model_dir)
    if not hasattr(model, "config") or not hasattr(_base_model(model), "pooler"):
        raise ExportError(f"export_onnx takes an attnpool model, got {type(model).__name__}")
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()
                     if p.is_floating_point() and p.dtype != torch.float32})
    if dtypes:  # onnxruntime's CPU kernels have no bf16 MatMul, and fp16 fails the float32 check
        raise ExportError(f"the model holds {', '.join(dtypes)} weights; export a float32 model: call model.float() "
                          "first (a saved folder is loaded as float32)")
    _check_recurrent(model)
    if with_weights:
        _check_weights(model)
    wrapper = OnnxWrapper(model, with_weights=with_weights, use_token_types=_uses_token_types(model))
    pad_id = _pad_id(model, tokenizer)
    limit = _max_tokens(model) or 64
    # Trace on 2 rows of 8 tokens and verify on 3 rows of 13: other sizes than traced prove the axes dynamic
    # (the exporter would otherwise bake in a size it saw, and rows of 1 would be specialised).
    example = _example_batch(model, [min(8, limit), min(5, limit)], pad_id=pad_id, token_types=wrapper.use_token_types)
    if verify_inputs is None:
        verify_inputs = _example_batch(model, [min(13, limit), min(6, limit), 1], pad_id=pad_id, seed=1,
                                      token_types=wrapper.use_token_types)
    device = next(model.parameters()).device
    modes = {module: module.training for module in model.modules()}  # each one's: a frozen encoder stays in eval
    model.eval()
    try:
        program = _export_program(wrapper.eval(), {k: v.to(device) for k, v in example.items()}, opset)
        _check_opset(program, opset)
        fold_of_run = run_fold(model_dir) if model_dir is not None else None
        program.model.metadata_props.update(_metadata(model, wrapper, fold_of_run))
        if model_dir is not None:  # predict and serve re-export a fold whose model is not this one any more
            program.model.metadata_props["attnpool_source"] = source_stamp(model_dir)
        made = missing_folders(output.parent)  # removed again, if still empty, when the export fails
        try:
            staging = make_staging(output.parent, f".{output.name}.")  # removes what a killed export left there
        except BaseException:
            remove_empty(made)
            raise
        try:
            staged = staging / output.name
            program.save(staged, external_data=external_data or None)  # None: external past 1.5 GB only
            diff = None
            if verify:
                try:
                    diff = verify_onnx(staged, model, verify_inputs, with_weights=with_weights, atol=atol)
                except VerificationError as err:
                    raise VerificationError(f"{err}. Nothing was written to {output.parent}") from err
            tokenizer_saved = False
            if tokenizer is not None and save_tokenizer:
                tokenizer.save_pretrained(staging / "tokenizer")
                tokenizer_saved = True
            facts = ExportFacts(output.name, wrapper.input_names, wrapper.output_names,
                                program.model.opset_imports.get(""), diff, tokenizer_saved,
                                None if tokenizer_saved else tokenizer_from(model, model_dir, output))
            stage_card(staging, output, model, model_dir, facts, fold_of_run)
            _move_into_place(staging, output)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            remove_empty(made)
            raise
        shutil.rmtree(staging, ignore_errors=True)
    finally:
        for module, training in modes.items():
            module.training = training
    return OnnxExport(output, wrapper.input_names, wrapper.output_names, diff, tokenizer_saved)


def _move_into_place(staging: Path, output: Path) -> None:
    """Rename the staged files beside ``output``: tokenizer and external data first, the graph last.

    What the earlier export at ``output`` wrote and this one does not (its ``.data`` file, its tokenizer's files) is
    deleted once the new graph is in place: a server would load the earlier model's tokenizer beside this graph.
    """
    _check_tokenizer_is_shared(staging, output)
    data = output.with_name(output.name + ".data")
    stale = [data] if not (staging / data.name).exists() else []
    staged = {p.name for p in (staging / "tokenizer").glob("*")} if (staging / "tokenizer").is_dir() else set()
    if output.is_file() and not _tokenizer_of_another(output):
        stale += [output.parent / name for name in _SAVED_TOKENIZER_FILES if name not in staged]
    for item in sorted((staging / "tokenizer").glob("*")) if staged else []:
        os.replace(item, output.parent / item.name)
    for item in sorted(staging.iterdir()):
        if item.is_file() and item.name not in (output.name, OWNER_FILE):
            os.replace(item, output.parent / item.name)
    os.replace(staging / output.name, output)
    for path in stale:  # deleted once no graph in place reads them
        path.unlink(missing_ok=True)


# What tokenizer.save_pretrained writes for any tokenizer (its vocabulary files vary: left alone).
_SAVED_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                          "chat_template.jinja")


def _tokenizer_of_another(output: Path) -> bool:
    """Whether the tokenizer beside ``output`` may be another model's: a model folder's, or another graph's there."""
    folder = output.parent
    return (folder / "config.json").exists() or any(p.suffix == ".onnx" and p != output and p.is_file()
                                                    for p in folder.iterdir())


def _check_tokenizer_is_shared(staging: Path, output: Path) -> None:
    """Refuse, before anything is moved, a tokenizer that would replace the one another graph there is served with.

    Raises:
        ExportError: The folder holds another ``.onnx`` graph and a tokenizer whose files differ from the staged ones.
    """
    folder, staged = output.parent, staging / "tokenizer"
    others = sorted(p.name for p in folder.glob("*.onnx") if p.name != output.name and p.is_file())
    if not others or not staged.is_dir():
        return
    ours = {item.name: item for item in staged.iterdir()}
    theirs = {p.name for p in folder.iterdir() if p.is_file() and (p.name in ours or p.name in _SAVED_TOKENIZER_FILES)}
    differ = sorted(name for name in ours.keys() | theirs if theirs and (name not in ours or name not in theirs or
                    (folder / name).read_bytes() != ours[name].read_bytes()))
    if differ:
        raise ExportError(
            f"{folder} holds the graph {', '.join(others)} with another tokenizer ({', '.join(differ)} differ from "
            f"this model's): exporting {output.name} there would replace it, and {others[0]} would read its texts "
            f"with this model's vocabulary. Export each model into its own folder (e.g. "
            f"{folder.parent / output.stem / output.name}); nothing was written"
        )
