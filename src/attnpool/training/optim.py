"""Optimiser parameter groups of the recipe: layer-wise learning-rate decay, a separate rate for the new head."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from attnpool.model.encoders import encoder_layers, parameter_depths

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight", "layernorm.weight")
# the modules a wrapper inserts into parameter names: FSDP (the Trainer creates the optimizer of an FSDP model after
# wrapping it), activation checkpointing, torch.compile; then peft's PeftModel, before the model's own names
_WRAPPERS = re.compile(r"(?:^|(?<=\.))(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")
_PEFT = re.compile(r"^base_model\.model\.")


def parameter_groups(model: nn.Module, lr: float, head_lr: float, weight_decay: float, llrd: float = 1.0, *,
                     pooler_lr: float | None = None) -> list[dict]:
    """AdamW parameter groups with layer-wise learning-rate decay and separate pooler and head rates.

    Encoder layers get ``lr * llrd ** depth`` (depth 0 = top layer and a norm after it, embeddings the deepest),
    the pooler and the recurrent layer before it (``recurrent``; both start from scratch) get ``pooler_lr``
    (``head_lr`` when ``None``), the head ``head_lr``; biases and norm weights get no weight decay.

    Args:
        model: An :class:`~attnpool.AttnPoolForSequenceClassification`, or one wrapped by FSDP (original parameters
            kept, ``use_orig_params``), activation checkpointing, ``torch.compile`` or peft (LoRA: each adapter
            matrix gets its layer's rate).
        lr: Learning rate of the top encoder layer.
        head_lr: Learning rate of the head (trained from scratch, so usually higher).
        weight_decay: Decoupled weight decay for weight matrices.
        llrd: Layer-wise decay factor in (0, 1]; 1 gives every encoder parameter ``lr``.
        pooler_lr: Learning rate of the pooler's (and the recurrent layer's) parameters; ``None``: ``head_lr``.

    Returns:
        Parameter groups for ``torch.optim.AdamW``; frozen parameters are left out.
    """
    base = model.attnpool
    encoder = base.encoder
    layers = encoder_layers(encoder) if llrd != 1.0 else None
    depth_of = parameter_depths(encoder, layers) if layers is not None else {}  # the rule freeze_layers uses too
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for wrapped_name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        name = _PEFT.sub("", _WRAPPERS.sub("", wrapped_name))  # "_fsdp_wrapped_module.attnpool.encoder...": the encoder
        in_encoder = name.startswith("attnpool.encoder.")
        if in_encoder:
            rate = lr * (llrd ** depth_of.get(id(p), 0))
        elif name.startswith(("attnpool.pooler.", "attnpool.recurrent.")) and pooler_lr is not None:
            rate = pooler_lr
        else:
            rate = head_lr
        decay = 0.0 if p.ndim < 2 or any(re.search(re.escape(k) + "$", name) for k in NO_DECAY) else weight_decay
        groups.setdefault((rate, decay), []).append(p)
    return [{"params": params, "lr": rate, "weight_decay": decay} for (rate, decay), params in groups.items()]


def build_optimizer(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    """AdamW, fused where PyTorch supports it for these tensors (CPU and CUDA float32/bf16), else foreach.

    The optimiser step matters on small models: on all-MiniLM-L6-v2 (22.7M parameters, half of them the
    embedding matrix) a plain per-parameter AdamW step costs about half as much as a forward+backward of a batch.
    """
    try:
        return torch.optim.AdamW(groups, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True)


def can_clip_in_step(optimizer: torch.optim.Optimizer) -> bool:
    """Whether :func:`clip_in_step` applies: a fused Adam(W), and PyTorch's ``get_total_norm`` (torch >= 2.6)."""
    return (isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(optimizer.defaults.get("fused"))
            and hasattr(torch.nn.utils, "get_total_norm"))


def clip_in_step(optimizer: torch.optim.Optimizer, parameters, max_norm: float) -> torch.Tensor:
    """Clip the gradients' total norm to ``max_norm`` inside the next step of a fused ``optimizer``.

    ``torch.nn.utils.clip_grad_norm_`` computes the total norm, then multiplies every gradient by
    ``min(1, max_norm / (norm + 1e-6))``: a second pass over all of them, as costly as a third of the fused AdamW
    step itself on a small encoder. The fused step divides the gradients it reads by its ``grad_scale`` (the hook
    ``torch.amp.GradScaler`` uses to unscale them), so this sets ``grad_scale`` to the inverse of that factor: the
    same update (up to rounding: a division instead of a multiplication) without the extra pass. The gradients
    themselves stay unclipped. It holds for the next ``optimizer.step()``; call it before each step.

    Args:
        optimizer: A fused ``torch.optim.AdamW`` or ``Adam`` (:func:`can_clip_in_step`), not one a ``GradScaler``
            steps (which sets ``grad_scale`` itself).
        parameters: The parameters whose gradients are clipped together.
        max_norm: The largest total L2 norm.

    Returns:
        The gradients' total norm before clipping, as ``clip_grad_norm_`` returns it.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True)
    optimizer.grad_scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0).reciprocal()
    return norm
