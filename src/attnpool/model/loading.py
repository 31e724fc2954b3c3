"""What loading checks and fixes: weights from safetensors only, weights a checkpoint lacks, aligned CPU tensors."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.utils import hub as transformers_hub

from attnpool.model.heads import PredictionHead

SAFE_INDEX = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME
# ``from_pretrained`` options that say where a model's files are: the files checked here are looked up with them.
FILE_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "subfolder", "proxies", "force_download")
ALIGNMENT = 64  # bytes: what PyTorch's CPU allocator guarantees, and what its vectorised kernels assume


def check_safetensors_only(name_or_path: str | os.PathLike, kwargs: dict[str, Any]) -> None:
    """Refuse a model whose weights transformers would read from a pickle although ``use_safetensors=True``.

    ``use_safetensors=True`` does not keep transformers from unpickling: a ``model.safetensors.index.json`` (the
    index of sharded weights) whose ``weight_map`` names ``.bin`` shards has them ``torch.load``-ed, and a config's
    ``transformers_weights`` may name ``adapter_model.bin``. Both files are read here (a local folder, or a hub
    name's through the cache; one that cannot be reached is left to ``from_pretrained`` to report) before any
    weights are.

    Args:
        name_or_path: The model's folder or hub name, as given to ``from_pretrained``.
        kwargs: The ``from_pretrained`` options (``subfolder``, ``revision``, ``variant``, ``config``...).

    Raises:
        ValueError: The index or the config names a weights file that is not a ``*.safetensors`` file.
    """
    name = os.fspath(name_or_path)
    config = kwargs.get("config")
    if isinstance(config, PretrainedConfig):  # the config given is the one transformers reads
        explicit = getattr(config, "transformers_weights", None)
    else:
        explicit = _read_json(name, "config.json", kwargs).get("transformers_weights")
    if explicit is not None and not str(explicit).endswith((".safetensors", ".safetensors.index.json")):
        raise ValueError(f"refusing to load {name!r}: its config's transformers_weights names {explicit!r}, which "
                         "is not a safetensors file, and attnpool never loads pickled weights. Convert the weights "
                         "to safetensors and point transformers_weights to them (or remove it)")
    sharded = explicit is not None and str(explicit).endswith(".safetensors.index.json")
    index = str(explicit) if sharded else _with_variant(kwargs.get("variant"))
    shards = sorted({str(f) for f in _read_json(name, index, kwargs).get("weight_map", {}).values()})
    pickles = [shard for shard in shards if not shard.endswith(".safetensors")]
    if pickles:
        raise ValueError(
            f"refusing to load {name!r}: its weights index {index} maps weights to {', '.join(map(repr, pickles))}, "
            "not safetensors files, which transformers would unpickle (pickle files can run code) and attnpool never "
            "loads. Convert those shards to safetensors (load them once where you trust them and save_pretrained "
            "the model again), or remove the index if the folder holds model.safetensors"
        )


def _with_variant(variant: str | None) -> str:
    """The index file's name with transformers' ``variant`` (``model.safetensors.index.fp16.json``)."""
    if not variant:
        return SAFE_INDEX
    stem, suffix = SAFE_INDEX.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def _read_json(name: str, filename: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A JSON file of the model (``{}`` when it has none, or a hub name cannot be reached)."""
    options = {key: kwargs[key] for key in FILE_KWARGS if kwargs.get(key) is not None}
    try:
        path = transformers_hub.cached_file(name, filename, _raise_exceptions_for_missing_entries=False,
                                            _raise_exceptions_for_connection_errors=False,
                                            _raise_exceptions_for_gated_repo=False, **options)
    except OSError:  # an unknown repository, an invalid name: from_pretrained says what is wrong
        return {}
    if path is None:
        return {}
    with open(path, encoding="utf-8") as file:
        content = json.load(file)
    return content if isinstance(content, dict) else {}


@torch.no_grad()
def init_unloaded(model: nn.Module, unloaded: set[str]) -> None:
    """Give our pooler, head and recurrent layer's weights that the checkpoint did not load a new model's values.

    transformers 5 builds the model on the meta device and initialises only the modules it finds uninitialised,
    which for ours (weights in child modules, set in constructors) it does not: a new head (``num_labels=3,
    ignore_mismatched_sizes=True``), a head on an embedding model's folder, a ``pooling=`` or ``recurrent=`` given
    on load kept uninitialised memory (logits of 1e26, or NaN). Fresh modules are built from the config as a new
    model builds them, and only the parameters and buffers (GeM's fixed ``p``) that were not loaded are copied
    from them.
    """
    base = getattr(model, "attnpool", model)  # the AttnPoolModel, alone or under a task head
    if not unloaded or not hasattr(base, "pooler"):
        return
    pooler = base._build_pooler(model.config)
    fresh = {id(base.pooler): pooler, id(base.recurrent): base._build_recurrent(model.config, pooler)}
    if isinstance(getattr(model, "head", None), PredictionHead):
        fresh[id(model.head)] = model._build_head(model.config, pooler.output_dim)
    for name, module in model.named_modules():
        new = fresh.get(id(module))
        if new is None or module is None:
            continue
        new_tensors = dict(new.state_dict(keep_vars=True))
        for tensor_name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if f"{name}.{tensor_name}" in unloaded:
                tensor.copy_(new_tensors[tensor_name])


def align_cpu_tensors(model: nn.Module) -> None:
    """Copy CPU parameters and buffers that sit at an address not a multiple of :data:`ALIGNMENT` bytes.

    Weights loaded from safetensors may be views into the memory-mapped file at its header's offset (8-byte
    aligned). The matrix products then take other code paths than on PyTorch's own 64-byte-aligned memory, and
    on some CPUs (an AMD EPYC here) the loaded model's outputs differed from the saved model's in the last bit.
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.device.type == "cpu" and tensor.numel() and tensor.data_ptr() % ALIGNMENT:
                tensor.data = tensor.data.clone()
