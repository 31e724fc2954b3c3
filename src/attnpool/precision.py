"""Which floating-point precision a run uses: the one rule for training and prediction."""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str) -> str:
    """``precision`` itself; ``ValueError`` naming the valid ones when it is not one."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def cpu_bf16_instructions() -> list[str]:
    """The native bf16 instruction sets of this CPU that PyTorch's kernels use (AMX, AVX512-BF16); empty if none.

    Without them bf16 is emulated and slower than float32; with them (Intel Cooper Lake and later, AMD Zen 4 and
    later) bf16 matrix products run at two or more times the float32 rate.
    """
    found = []
    for name, probe in (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported")):
        check = getattr(torch.cpu, probe, None)  # private probes of torch.cpu (torch >= 2.3)
        if check is not None and check():
            found.append(name)
    return found


def cpu_fp16_native() -> bool:
    """Whether PyTorch's CPU kernels compute in fp16 natively here (AVX512-FP16 or AMX-FP16); ``False`` if unknown."""
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_fp16_supported", None)  # private probe
    try:
        return bool(check()) if check is not None else False
    except (RuntimeError, AttributeError):  # an op this build registers without a kernel
        return False


def emulated_on_cpu(precision: str, device: str | torch.device) -> str | None:
    """A warning for ``precision`` on ``device`` when it is a CPU that only emulates that type, else ``None``.

    bf16 without AMX or AVX512-BF16 (:func:`cpu_bf16_instructions`), or fp16 without native fp16 kernels
    (:func:`cpu_fp16_native`), run several times slower than float32 (a small BERT on an AVX2 CPU: 3 to 6 times).
    Predicting there is still valid, so it is only said; ``auto`` never picks an emulated type.
    """
    resolved = resolve_precision(precision, device)
    if torch.device(device).type != "cpu" or resolved == "fp32":
        return None
    if resolved == "bf16" and cpu_bf16_instructions():
        return None
    if resolved == "fp16" and cpu_fp16_native():
        return None
    return (f"--precision {resolved}: this CPU has no native {resolved}, so it is emulated here and much slower than "
            "fp32 (several times); use --precision auto or fp32")


def inference_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a ``torch.device``; by default CUDA when available, else the CPU.

    Raises:
        ValueError: A name torch does not know, or a CUDA device this machine (or this build of torch) lacks: said
            at once, not as an assertion deep inside torch once the models are loaded.
    """
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as err:
        reason = " ".join(str(err).split())  # whole (its list of device types), on one line
        raise ValueError(f"--device {device}: not a device torch knows ({reason}); use cpu, cuda or cuda:N") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = "" if torch.version.cuda else ", a build without CUDA"
            raise ValueError(f"--device {device}: no CUDA device here (torch {torch.__version__}{build}); use "
                             "--device cpu, or leave --device out to use CUDA when there is one")
        if chosen.index is not None and chosen.index >= count:
            raise ValueError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to "
                             f"cuda:{count - 1}")
    return chosen


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision that ``precision`` means on ``device``: ``fp32``, ``bf16`` or ``fp16``.

    ``auto`` is bf16 on a GPU with native bf16 (:func:`cuda_native_bf16`) and on a CPU with native bf16 instructions
    (:func:`cpu_bf16_instructions`), else fp32. bf16 and fp16 run the forward pass under ``torch.autocast``; the
    weights, gradients and optimiser state stay float32. :func:`precision_reason` says why in words.

    Raises:
        ValueError: ``precision`` is not one of ``auto``, ``fp32``, ``bf16``, ``fp16``.
    """
    if check_precision(precision) != "auto":
        return precision
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if cuda_native_bf16(device) else "fp32"
    return "bf16" if device.type == "cpu" and cpu_bf16_instructions() else "fp32"


def cuda_native_bf16(device: str | torch.device = "cuda") -> bool:
    """Whether the GPU computes in bf16 natively (compute capability 8.0 on: A100, RTX 30xx, H100...).

    ``torch.cuda.is_bf16_supported()`` also says yes where bf16 is only emulated (T4, V100, P100), where it is
    slower than fp32; ``auto`` does not pick it there, as on a CPU without bf16 instructions.
    """
    if torch.version.hip:  # ROCm: what torch reports (capabilities are numbered otherwise)
        return torch.cuda.is_bf16_supported()
    return torch.cuda.get_device_capability(device)[0] >= 8


def precision_reason(precision: str, device: str | torch.device) -> str:
    """One log line: the precision ``precision`` resolves to on ``device``, and why.

    For example ``bf16 autocast (auto: this CPU has native bf16: AMX, AVX512-BF16; --precision fp32 to change it)``.
    Training keeps float32 weights; prediction on a CPU runs copies whose linear weights are stored in that type
    (``attnpool.prediction.engine.with_encoder_in``, which says so in its own log line).
    """
    resolved = resolve_precision(precision, device)
    name = "fp32" if resolved == "fp32" else f"{resolved} autocast"
    if precision != "auto":
        return f"{name} (asked for)"
    device = torch.device(device)
    if device.type == "cuda":
        why = "this GPU has native bf16" if resolved == "bf16" else "this GPU has no native bf16"
    elif resolved == "bf16":
        why = f"this CPU has native bf16: {', '.join(cpu_bf16_instructions())}"
    else:
        why = f"no native bf16 on this {device.type}" if device.type == "cpu" else f"{device.type} device"
    other = "fp32" if resolved == "bf16" else "bf16"
    return f"{name} (auto: {why}; --precision {other} to change it)"


def autocast(precision: str, device: str | torch.device):
    """A ``torch.autocast`` context for ``precision`` on ``device`` (a no-op context for fp32)."""
    device = torch.device(device)
    dtype = AUTOCAST_DTYPES.get(resolve_precision(precision, device))
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def training_precision(precision: str, device: str | torch.device) -> str:
    """What training runs in: ``precision`` resolved on ``device``.

    Raises:
        ValueError: fp16 on a CPU, which accelerate trains in float32 whatever the flag says.
    """
    resolved = resolve_precision(precision, device)
    if resolved == "fp16" and torch.device(device).type == "cpu":
        raise ValueError("--precision fp16 does not train on a CPU (accelerate runs CPU training in float32 with it): "
                         "use bf16 (a CPU with AVX512-BF16 or AMX) or fp32")
    return resolved


def trainer_flags(precision: str, device: str | torch.device) -> dict[str, bool]:
    """``TrainingArguments``' ``bf16`` / ``fp16`` flags for ``precision`` on ``device``."""
    resolved = training_precision(precision, device)
    return {"bf16": resolved == "bf16", "fp16": resolved == "fp16"}
