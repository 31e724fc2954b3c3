"""Export a saved attnpool model (encoder, pooler and head) to one ONNX graph, and check it against PyTorch.

The graph takes ``input_ids``, ``attention_mask`` and, for encoders with more than one token type,
``token_type_ids``, all ``(batch, sequence)`` int64 with both axes dynamic. It returns ``logits`` (or
``pooler_output`` for an :class:`~attnpool.AttnPoolModel`) and, when asked, the pooler's ``pooling_weights``. The
tokenizer of the model folder is saved beside the ``.onnx`` file, so that the folder alone serves the model; see
``docs/serving.md``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnpool import __version__
from attnpool.training.runs import fold_model_dirs

ATOL = 1e-4  # onnxruntime vs PyTorch, float32: kernels differ in summation order, not in what they compute
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class ExportError(ValueError):
    """A model that cannot be exported as asked, or whose exported graph disagrees with PyTorch."""


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


class OnnxWrapper(nn.Module):
    """The model as exporters want it: positional tensors in, a tuple of tensors out.

    Args:
        model: An :class:`~attnpool.AttnPoolForSequenceClassification` (output ``logits``) or
            :class:`~attnpool.AttnPoolModel` (output ``pooler_output``).
        with_weights: Also return the pooler's token weights.
        use_token_types: Take ``token_type_ids`` as a third input.

    Shapes:
        - input_ids, attention_mask, token_type_ids: ``(B, T)`` int64
        - logits: ``(B, num_labels)``; pooler_output: ``(B, output_dim)``
        - pooling_weights: ``(B, T)`` or ``(B, heads, T)``
    """

    def __init__(self, model: nn.Module, *, with_weights: bool = False, use_token_types: bool = False) -> None:
        super().__init__()
        from attnpool.model import AttnPoolModel

        self.model = model
        self.with_weights = with_weights
        self.use_token_types = use_token_types
        self.main_output = "pooler_output" if isinstance(model, AttnPoolModel) else "logits"

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the graph inputs."""
        return ("input_ids", "attention_mask", *(("token_type_ids",) if self.use_token_types else ()))

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the graph outputs."""
        return (self.main_output, *(("pooling_weights",) if self.with_weights else ()))

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, ...]:
        """Run the model; return the main output and, when asked, the pooling weights."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_pooling_weights=self.with_weights,
        )
        if not self.with_weights:
            return (getattr(out, self.main_output),)
        return getattr(out, self.main_output), out.pooling_weights


def resolve_model_dir(path: str | os.PathLike, fold: int | None = None) -> Path:
    """The saved model folder meant by ``path``: a ``save_pretrained`` folder, or a fold of a train run.

    Args:
        path: A folder holding ``config.json`` (and ``model.safetensors``), or the output directory of
            ``attnpool train`` holding ``fold_K/model/`` folders.
        fold: Which fold of a run. Needed when the run has several trained folds (one graph holds one model).

    Returns:
        The model folder.

    Raises:
        FileNotFoundError: ``path`` does not exist, is a file, or is neither a model folder nor a run.
        ValueError: ``fold`` given for a model folder, missing for a run of several folds, or not trained.
    """
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model folder {str(path)!r} does not exist; give a folder saved with save_pretrained (config.json + "
            "model.safetensors) or the --output-dir of attnpool train"
        )
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is a file; give the folder that holds config.json and model.safetensors")
    if (path / "config.json").is_file():
        if fold is not None:
            raise ValueError(f"fold={fold} is for a train run, but {path} is a single saved model; drop the fold")
        return path
    model_dirs = fold_model_dirs(path)
    if not model_dirs:
        present = ", ".join(sorted(p.name for p in path.iterdir())) or "nothing"
        raise FileNotFoundError(
            f"{path} is neither a saved model folder (no config.json) nor a train run (no fold_K/model/); it "
            f"contains: {present}"
        )
    folds = [int(p.parent.name.split("_")[1]) for p in model_dirs]
    listed = ", ".join(map(str, folds))
    if fold is None:
        if len(model_dirs) == 1:
            return model_dirs[0]
        raise ValueError(
            f"{path} is a run with {len(folds)} trained folds ({listed}) and one graph holds one model; choose one "
            "with fold=K (--fold K)"
        )
    if fold not in folds:
        raise ValueError(f"{path} has no trained fold {fold}; trained folds: {listed}")
    return path / f"fold_{fold}" / "model"


def load_for_export(model_dir: str | os.PathLike) -> nn.Module:
    """Load a saved attnpool model in float32 on the CPU, as the class its ``config.json`` names.

    Raises:
        FileNotFoundError: No ``config.json`` or no safetensors weights (see ``from_pretrained``).
    """
    from attnpool.model import AttnPoolForSequenceClassification, AttnPoolModel

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    cls = AttnPoolModel if "AttnPoolModel" in (config.get("architectures") or []) else AttnPoolForSequenceClassification
    # float32 whatever the weights were saved in: onnxruntime's CPU kernels and the 1e-4 check want it.
    return cls.from_pretrained(model_dir, dtype=torch.float32).eval()


def _load_tokenizer(model_dir: Path) -> Any:
    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _base_model(model: nn.Module) -> nn.Module:
    return model._base() if hasattr(model, "_base") else model


def _uses_token_types(model: nn.Module) -> bool:
    """Whether the encoder takes ``token_type_ids`` and has more than one token type to tell apart."""
    base = _base_model(model)
    types = getattr(base.config.encoder, "type_vocab_size", 0) or 0
    return bool(getattr(base, "_accepts_token_type_ids", False)) and types > 1


def _check_weights(model: nn.Module) -> None:
    from attnpool.pooling import available_poolers, get_pooler_class

    pooler = _base_model(model).pooler
    if pooler.has_weights:
        return
    with_weights = [n for n in available_poolers() if get_pooler_class(n).has_weights]
    raise ExportError(
        f"pooler {pooler.name!r} gives no token weights, so there is no pooling_weights output to export; export "
        f"without with_weights (--with-weights), or train with a pooler that has them: {', '.join(with_weights)}"
    )


def _max_tokens(model: nn.Module) -> int | None:
    """Longest sequence the encoder's position embeddings allow (RoBERTa-style offsets take two)."""
    positions = getattr(_base_model(model).config.encoder, "max_position_embeddings", None)
    return positions - 2 if isinstance(positions, int) and positions > 2 else None


def _example_batch(
    model: nn.Module, lengths: list[int], *, pad_id: int = 0, seed: int = 0, token_types: bool = False
) -> dict[str, Tensor]:
    """Random token ids (never ``pad_id``) padded on the right with ``pad_id``, the mask, and token types.

    The second half of each row's real tokens gets token type 1, so a graph that ignored them would fail the check.
    """
    vocab = int(getattr(_base_model(model).config.encoder, "vocab_size", 100) or 100)
    gen = torch.Generator().manual_seed(seed)
    seq_len = max(lengths)
    ids = torch.randint(0, vocab - 1, (len(lengths), seq_len), generator=gen)
    ids = ids + (ids >= pad_id).long()  # skips pad_id: RoBERTa-style encoders derive positions from it
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        types[i, n // 2 : n] = 1
    ids = ids.masked_fill(mask == 0, pad_id)
    batch = {"input_ids": ids, "attention_mask": mask}
    if token_types:
        batch["token_type_ids"] = types
    return batch


def _pad_id(model: nn.Module, tokenizer: Any) -> int:
    for source in (tokenizer, _base_model(model).config.encoder):
        value = getattr(source, "pad_token_id", None) if source is not None else None
        if isinstance(value, int):
            return value
    return 0


def verify_onnx(
    path: str | os.PathLike,
    model: nn.Module,
    inputs: Mapping[str, Tensor],
    *,
    with_weights: bool = False,
    atol: float = ATOL,
) -> float:
    """Run the graph in onnxruntime on ``inputs`` and compare every output with PyTorch's.

    Args:
        path: The ``.onnx`` file.
        model: The PyTorch model it was exported from, in eval mode.
        inputs: A tokenized batch (``input_ids``, ``attention_mask``, ``token_type_ids`` when the graph takes
            them), as tensors; inputs the graph does not take are ignored.
        with_weights: Whether the graph returns the pooling weights.
        atol: Largest absolute difference accepted.

    Returns:
        The largest absolute difference over all outputs.

    Raises:
        ExportError: A difference above ``atol``, or outputs of different shapes.
    """
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime's own error types, e.g. an opset newer than it knows
        raise ExportError(
            f"onnxruntime {ort.__version__} cannot load the exported graph: {str(err)[:300]}. Choose another --opset "
            "(onnxruntime releases support opsets up to a version each), or update onnxruntime"
        ) from err
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ExportError(f"the verification batch lacks the graph input(s) {missing}; it has {sorted(inputs)}")
    feeds = {n: inputs[n].detach().cpu().long().numpy() for n in names}
    got = session.run(None, feeds)
    wrapper = OnnxWrapper(model, with_weights=with_weights, use_token_types="token_type_ids" in names)
    device = next(model.parameters()).device
    with torch.inference_mode():
        expected = wrapper(*(inputs[n].to(device) for n in names))
    worst = 0.0
    for name, ours, ref in zip(wrapper.output_names, got, expected, strict=True):
        ref = ref.float().cpu().numpy()
        if ours.shape != ref.shape:
            raise ExportError(f"ONNX output {name!r} has shape {ours.shape}, PyTorch's {ref.shape}")
        diff = float(abs(ours.astype("float32") - ref).max()) if ref.size else 0.0
        if not diff <= atol:  # also catches NaN
            raise ExportError(
                f"the exported graph disagrees with PyTorch on {name!r} by up to {diff:.3g} (tolerance {atol:g}) on "
                f"a batch of shape {tuple(inputs['input_ids'].shape)}. Try another opset (--opset), check that the "
                "model is float32 and in eval mode, or skip the check with verify=False (--no-verify)"
            )
        worst = max(worst, diff)
    return worst


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
    except Exception as err:  # the exporter raises many types; say which model failed and what to try
        raise ExportError(
            f"torch.onnx.export (dynamo) could not export this model: {type(err).__name__}: {str(err)[:500]}. Try "
            "another opset (--opset 18), or report the encoder and pooler in an issue"
        ) from err
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _check_opset(program: Any, opset: int | None) -> None:
    """The exporter writes opset 18 or newer and converts down when asked; it keeps 18 when conversion fails."""
    got = program.model.opset_imports.get("")
    if opset is not None and got != opset:
        raise ExportError(
            f"asked for ONNX opset {opset}, but the exporter produced opset {got} for this model: it writes opsets "
            "from 18 on and converts to others only where every operator has a form there; choose another --opset, "
            "or leave it out for the exporter's default"
        )


def _metadata(model: nn.Module, wrapper: OnnxWrapper) -> dict[str, str]:
    """Facts a server needs besides the graph, stored in the ONNX file's ``metadata_props``."""
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
    leaves no file behind. Weights above 1.5 GB go to an external data file ``<output>.data`` beside the graph
    (ONNX protobufs stop at 2 GB); keep the two together.

    Args:
        model_or_path: An :class:`~attnpool.AttnPoolForSequenceClassification` or
            :class:`~attnpool.AttnPoolModel`, a folder saved with ``save_pretrained`` (loaded in float32 from
            safetensors), or the output directory of ``attnpool train`` (with ``fold``).
        output: The ``.onnx`` file to write; its folder is created.
        fold: Which fold's model of a train run; needed when the run has several.
        with_weights: Add the pooler's token weights as a second output ``pooling_weights``, ``(B, T)`` or
            ``(B, heads, T)``.
        opset: The ONNX opset; ``None``: the exporter's default (18 or newer; older ones are converted to).
        tokenizer: The tokenizer to save beside the graph, for a model given as an object; a model folder's own
            tokenizer is used otherwise.
        save_tokenizer: Save the tokenizer's files (``tokenizer.json``...) into the folder of ``output``, so that
            ``AutoTokenizer.from_pretrained(that folder)`` works next to the graph.
        verify: Compare onnxruntime with PyTorch, raising :class:`ExportError` above ``atol``.
        verify_inputs: A tokenized batch (tensors) to verify on; default: a random batch with padding.
        atol: Largest absolute difference accepted by the check.
        external_data: Write the weights to ``<output>.data`` whatever their size (they go there anyway past
            1.5 GB).

    Returns:
        :class:`OnnxExport`: the path, the graph's input and output names, the verified difference.

    Raises:
        FileNotFoundError: A path that is not a model folder or run (see :func:`resolve_model_dir`).
        ValueError: A bad ``fold``; :class:`ExportError` (a ``ValueError``): ``with_weights`` for a pooler without
            token weights, a model the exporter cannot trace, or a verification above ``atol``.
    """
    output = Path(os.fspath(output)).expanduser()
    if output.suffix != ".onnx":
        raise ValueError(f"the output {output} should end in .onnx (the tokenizer files go beside it)")
    if isinstance(model_or_path, nn.Module):
        model = model_or_path
    else:
        model_dir = resolve_model_dir(model_or_path, fold)
        model = load_for_export(model_dir)
        if tokenizer is None and save_tokenizer:
            tokenizer = _load_tokenizer(model_dir)
    if not hasattr(model, "config") or not hasattr(_base_model(model), "pooler"):
        raise ExportError(f"export_onnx takes an attnpool model, got {type(model).__name__}")
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
    was_training = model.training
    model.eval()
    try:
        program = _export_program(wrapper.eval(), {k: v.to(device) for k, v in example.items()}, opset)
        _check_opset(program, opset)
        program.model.metadata_props.update(_metadata(model, wrapper))
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
        try:
            staged = staging / output.name
            program.save(staged, external_data=external_data or None)  # None: external past 1.5 GB only
            diff = None
            if verify:
                try:
                    diff = verify_onnx(staged, model, verify_inputs, with_weights=with_weights, atol=atol)
                except ExportError as err:
                    raise ExportError(f"{err}. Nothing was written to {output.parent}") from err
            tokenizer_saved = False
            if tokenizer is not None and save_tokenizer:
                tokenizer.save_pretrained(staging / "tokenizer")
                tokenizer_saved = True
            _move_into_place(staging, output)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        model.train(was_training)
    return OnnxExport(output, wrapper.input_names, wrapper.output_names, diff, tokenizer_saved)


def _move_into_place(staging: Path, output: Path) -> None:
    """Rename the staged files beside ``output``: tokenizer and external data first, the graph last."""
    data = output.with_name(output.name + ".data")
    if not (staging / data.name).exists():
        data.unlink(missing_ok=True)  # a stale one from an earlier, larger export would mislead
    for item in sorted((staging / "tokenizer").glob("*")) if (staging / "tokenizer").is_dir() else []:
        os.replace(item, output.parent / item.name)
    for item in sorted(staging.iterdir()):
        if item.is_file() and item.name != output.name:
            os.replace(item, output.parent / item.name)
    os.replace(staging / output.name, output)
