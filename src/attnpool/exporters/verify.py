"""The check of an exported graph: onnxruntime against PyTorch on a random padded batch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnpool.exporters.models import ExportError, OnnxWrapper, _base_model


class VerificationError(ExportError):
    """The exported graph does not load or run in onnxruntime, or disagrees with PyTorch (not the model's fault)."""


RTOL = 1e-5  # and a share of each value: float32 rounds large outputs (raw-scale regression) coarsely
ATOL = 1e-4  # onnxruntime vs PyTorch, float32: kernels differ in summation order, not in what they compute


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
        atol: Largest absolute difference accepted, plus ``RTOL`` (1e-5) times the PyTorch value.

    Returns:
        The largest absolute difference over all outputs.

    Raises:
        VerificationError: The graph does not load or run in onnxruntime, returns other outputs than ``model`` with
            ``with_weights``, or its outputs differ from PyTorch's (in shape, or by more than ``atol``).
    """
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime's own error types, e.g. an opset newer than it knows
        raise VerificationError(
            f"onnxruntime {ort.__version__} cannot load the exported graph: {str(err)[:300]}. Choose another --opset "
            "(onnxruntime releases support opsets up to a version each), or update onnxruntime"
        ) from err
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ExportError(f"the verification batch lacks the graph input(s) {missing}; it has {sorted(inputs)}")
    wrapper = OnnxWrapper(model, with_weights=with_weights, use_token_types="token_type_ids" in names)
    outputs = [o.name for o in session.get_outputs()]
    if outputs != list(wrapper.output_names):
        raise VerificationError(
            f"the graph {os.fspath(path)} returns {outputs}, but {type(model).__name__} with with_weights="
            f"{with_weights} returns {list(wrapper.output_names)}: verify with the model the graph was exported from, "
            f"and with_weights={'pooling_weights' in outputs}"
        )
    feeds = {n: inputs[n].detach().cpu().long().numpy() for n in names}
    try:
        got = session.run(None, feeds)
    except Exception as err:  # noqa: BLE001 - onnxruntime's errors derive from Exception only
        raise VerificationError(f"onnxruntime could not run the exported graph on a batch of shape "
                                f"{tuple(inputs['input_ids'].shape)}: {str(err)[:300]}") from err
    device = next(model.parameters()).device
    with torch.inference_mode():
        expected = wrapper(*(inputs[n].to(device) for n in names))
    worst = 0.0
    for name, ours, ref in zip(wrapper.output_names, got, expected, strict=True):
        ref = ref.float().cpu().numpy()
        if ours.shape != ref.shape:
            raise VerificationError(f"ONNX output {name!r} has shape {ours.shape}, PyTorch's {ref.shape}")
        gap = abs(ours.astype("float32") - ref)
        diff = float(gap.max()) if ref.size else 0.0
        # atol plus a share of the value: a regression target of 1e4 is 1e-3 apart from its float32 neighbours
        allowed = atol + RTOL * abs(ref)
        if not (gap <= allowed).all():  # also catches NaN (NaN <= x is False)
            raise VerificationError(
                f"the exported graph disagrees with PyTorch on {name!r} by up to {diff:.3g} (tolerance {atol:g} + "
                f"{RTOL:g} x |value|) on "
                f"a batch of shape {tuple(inputs['input_ids'].shape)}. Try another opset (--opset), check that the "
                "model is float32 and in eval mode, or skip the check with verify=False (--no-verify)"
            )
        worst = max(worst, diff)
    return worst
