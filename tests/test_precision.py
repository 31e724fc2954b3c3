"""The precision rule: auto is bf16 where the hardware has native bf16 (a GPU, or a CPU with AMX / AVX512-BF16)."""

from __future__ import annotations

import pytest
import torch

from attnpool import precision as precision_module
from attnpool.precision import (
    autocast,
    check_precision,
    cpu_bf16_instructions,
    precision_reason,
    resolve_precision,
    trainer_flags,
)


@pytest.fixture
def cpu_with(monkeypatch):
    """Pretend the CPU has (or lacks) the bf16 instruction sets named."""

    def pretend(*names: str) -> None:
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: "AMX" in names, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: "AVX512-BF16" in names, raising=False)

    return pretend


def test_auto_is_bf16_on_a_cpu_with_native_bf16(cpu_with):
    cpu_with("AVX512-BF16")
    assert cpu_bf16_instructions() == ["AVX512-BF16"]
    assert resolve_precision("auto", "cpu") == "bf16"
    assert trainer_flags("auto", "cpu") == {"bf16": True, "fp16": False}
    with autocast("auto", "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    reason = precision_reason("auto", "cpu")
    assert reason.startswith("bf16 autocast (auto: this CPU has native bf16: AVX512-BF16")
    assert "--precision fp32 to change it" in reason


def test_auto_is_fp32_on_a_cpu_without_native_bf16(cpu_with):
    cpu_with()
    assert cpu_bf16_instructions() == []
    assert resolve_precision("auto", "cpu") == "fp32"
    assert trainer_flags("auto", "cpu") == {"bf16": False, "fp16": False}
    with autocast("auto", "cpu"):
        assert not torch.is_autocast_enabled("cpu")
    assert precision_reason("auto", "cpu") == ("fp32 (auto: no native bf16 on this cpu; --precision bf16 to "
                                               "change it)")


def test_asked_for_wins_and_is_said_so(cpu_with):
    cpu_with("AMX", "AVX512-BF16")
    assert resolve_precision("fp32", "cpu") == "fp32" and precision_reason("fp32", "cpu") == "fp32 (asked for)"
    cpu_with()
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert precision_reason("bf16", "cpu") == "bf16 autocast (asked for)"


def test_a_torch_without_the_probes_means_no_native_bf16(monkeypatch):
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        monkeypatch.delattr(torch.cpu, name, raising=False)
    assert precision_module.cpu_bf16_instructions() == []
    assert resolve_precision("auto", "cpu") == "fp32"


def test_unknown_precision_names_the_valid_ones():
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, fp16, got 'fp8'"):
        check_precision("fp8")


@pytest.mark.parametrize(("capability", "expected"), [((7, 5), "fp32"), ((7, 0), "fp32"), ((8, 0), "bf16"),
                                                      ((9, 0), "bf16")])
def test_auto_on_a_gpu_is_bf16_only_where_it_is_native(monkeypatch, capability, expected):
    """A T4 (7.5) or V100 (7.0) emulates bf16, and torch.cuda.is_bf16_supported() says yes there: auto says fp32."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_precision("auto", "cuda") == expected
    native = "this GPU has native bf16" if expected == "bf16" else "this GPU has no native bf16"
    assert f"(auto: {native}; --precision " in precision_reason("auto", "cuda")


def test_fp16_training_on_a_cpu_is_refused():
    """accelerate turns autocast on for fp16 on GPUs only: the CPU fold trained in float32, logged as fp16."""
    with pytest.raises(ValueError, match="--precision fp16 does not train on a CPU .*use bf16 .* or fp32"):
        trainer_flags("fp16", "cpu")
    assert trainer_flags("fp16", "cuda") == {"bf16": False, "fp16": True}


@pytest.mark.parametrize(("precision", "wanted"), [("fp32", "no"), ("bf16", "bf16")])
def test_the_accelerate_configs_mixed_precision_does_not_override_precision(precision, wanted, tmp_path, monkeypatch):
    """`accelerate launch` exports ACCELERATE_MIXED_PRECISION from its config: an fp32 run trained under autocast."""
    from attnpool.config import TrainConfig
    from attnpool.training.arguments import training_arguments

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    monkeypatch.setattr("attnpool.training.arguments.use_cpu", lambda: True)
    cfg = TrainConfig(train_file="x.csv", text_cols=["a"], precision=precision)
    assert training_arguments(cfg, tmp_path, steps_per_epoch=4).mixed_precision == wanted


def test_a_device_this_machine_lacks_is_said_at_once(monkeypatch):
    """--device cuda:0 on a CPU-only torch ended in an AssertionError deep in torch after the models loaded."""
    from attnpool.precision import inference_device

    assert inference_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"--device gpu: not a device torch knows .*; use cpu, cuda or cuda:N"):
        inference_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"--device cuda:0: no CUDA device here \(torch .*\); use --device cpu"):
        inference_device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"--device cuda:2: this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        inference_device("cuda:2")
    assert inference_device("cuda:1") == torch.device("cuda:1")


def test_an_unknown_device_keeps_torch_s_reason_whole(monkeypatch):
    """--device foo cut torch's message mid-word at 160 characters: '... privateuseone device type at s); use ...'."""
    from attnpool.precision import inference_device

    with pytest.raises(RuntimeError) as torch_error:
        torch.device("foo")
    reason = " ".join(str(torch_error.value).split())
    with pytest.raises(ValueError) as error:
        inference_device("foo")
    assert str(error.value) == f"--device foo: not a device torch knows ({reason}); use cpu, cuda or cuda:N"
    long_reason = "Expected one of " + ", ".join(f"type{i}" for i in range(60)) + "\ndevice type at start: foo"

    def refuse(name):
        raise RuntimeError(long_reason)

    monkeypatch.setattr(torch, "device", refuse)
    with pytest.raises(ValueError) as error:
        inference_device("foo")
    assert f"({long_reason.replace(chr(10), ' ')}); use cpu, cuda or cuda:N" in str(error.value)
