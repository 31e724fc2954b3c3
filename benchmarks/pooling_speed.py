"""Forward+backward time and peak memory of every registered pooler, with two references for ``attention``.

For each shape ``(B, T, H)`` one hidden-states tensor (a leaf that requires grad, as the encoder's output would)
and one ragged right-padded ``attention_mask`` (lengths uniform in ``[T/4, T]``, fixed seed; with ``--no-padding``
an all-ones mask, every row full length) are built, and every candidate runs on exactly these tensors:

* every registered pooler with its default options: ``pooler(h, mask)``, then backward of
  ``pooled.float().pow(2).mean()``. Multi-layer poolers (``needs_all_layers``) get their own leaf of shape
  ``(B, L, T, H)`` with their default ``L``; poolers that read attention maps (``needs_attentions``) also get one
  layer of one-head random attention maps ``(1, B, 1, T, T)``, a masked softmax over the real keys (an input, not
  differentiated: the encoder's cost of producing them is not counted);
* ``transcription``: the usual notebook head, ``nn.Sequential(Linear(H, 512), Tanh, Linear(512, 1),
  Softmax(dim=1))`` over all positions, weights multiplied by the mask and renormalised by ``sum + 1e-8``, then
  ``(weights * h).sum(1)`` (same weights as ``attention``, same loss);
* ``floor``: only ``attention.proj`` (its ``Linear(H, A)``) forward, then backward with an output gradient that is
  given (allocated before the measurement, like an input). Three matrix products of ``B*T*H*A`` multiply-adds
  each: the cost ``attention`` cannot avoid.

Time: median of ``--repeats`` runs after ``--warmup`` runs; the candidates of a shape are interleaved
round-robin so that drift of the machine hits all of them alike. Gradients are set to ``None`` (outside the
timed region) before each run. On CUDA the device is synchronised around each run.

Peak memory is the largest amount allocated beyond what existed before the run (inputs, parameters and the
floor's output gradient), measured in a separate, untimed forward+backward:

* CUDA: ``torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()`` after ``reset_peak_memory_stats``.
* CPU: ``torch.profiler.profile(profile_memory=True)`` records an event for every allocation and free of the
  c10 CPU allocator, with its size and a timestamp. Replaying them in order (running sum, maximum) gives the exact
  peak of tensor memory allocated during forward+backward. This uses the profiler's raw event list
  (``prof.profiler.kineto_results``, present in torch 2.13). Allocations made by the allocator on other threads
  (none in these ops) and memory outside the c10 allocator (e.g. oneDNN scratch space) are not seen.

For ``attention`` the script then checks three targets, with PASS/MISS:

* time / transcription <= 1.0;
* time / floor <= 1.25;
* (peak of attention - peak of floor) in units of one ``(B, T, A)`` activation of the dtype <= 1.0, i.e.
  besides what the bare matmul needs, at most one more ``(B, T, A)`` buffer (the tanh output it must keep).

Usage::

    .venv/bin/python benchmarks/pooling_speed.py                 # all poolers, the three default shapes, CPU
    .venv/bin/python benchmarks/pooling_speed.py --quick         # smallest shape only
    .venv/bin/python benchmarks/pooling_speed.py --device cuda --dtype bfloat16 --repeats 20
    .venv/bin/python benchmarks/pooling_speed.py --shapes 32x128x384,8x512x768 --poolers attention,mean
    .venv/bin/python benchmarks/pooling_speed.py --poolers attention --no-padding --threads 1   # no padding at all

On CPU, other processes competing for the cores slow OpenMP matrix products a lot: compare ratios of one run
(the candidates are interleaved), not absolute times of different runs. The profiler prints
``profiler_start``/``profiler_stop`` lines on stderr; ``2>/dev/null`` hides them.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

import attnpool
from attnpool.pooling import get_pooler_class
from attnpool.pooling.functional import masked_softmax
from notebook_recipe import NotebookAttentionHead

DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = ((32, 128, 384), (32, 512, 1024), (8, 2048, 1024))
TRANSCRIPTION = "transcription"
FLOOR = "floor"
TARGET_TIME_VS_TRANSCRIPTION = 1.0
TARGET_TIME_VS_FLOOR = 1.25
TARGET_MEMORY_VS_FLOOR_UNITS = 1.0
MIB = 2**20


@dataclass
class Candidate:
    """One thing to measure: ``step()`` runs forward+backward, ``reset()`` drops the gradients it left."""

    name: str
    step: Callable[[], None]
    reset: Callable[[], None]
    times_s: list[float] = field(default_factory=list)
    peak_bytes: int = 0

    @property
    def median_ms(self) -> float:
        """Median time of one forward+backward in milliseconds."""
        return 1e3 * statistics.median(self.times_s)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"32x128x384,8x2048x1024"`` -> ``[(32, 128, 384), (8, 2048, 1024)]``."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not BxTxH with positive integers, e.g. 32x128x384")
        shapes.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return shapes


def make_inputs(
    shape: tuple[int, int, int], device: torch.device, dtype: torch.dtype, seed: int, no_padding: bool = False
) -> tuple[Tensor, Tensor]:
    """Hidden states (leaf, requires grad) and a right-padded int64 mask.

    Lengths uniform in [T/4, T]; with ``no_padding`` every length is ``T`` (an all-ones mask).
    """
    batch, seq_len, hidden = shape
    gen = torch.Generator().manual_seed(seed)
    hidden_states = torch.randn(batch, seq_len, hidden, generator=gen).to(device=device, dtype=dtype)
    lengths = torch.randint(max(1, seq_len // 4), seq_len + 1, (batch,), generator=gen)
    if no_padding:
        lengths = torch.full_like(lengths, seq_len)
    mask = (torch.arange(seq_len).unsqueeze(0) < lengths.unsqueeze(1)).long().to(device)
    return hidden_states.requires_grad_(True), mask


def make_loss_step(module: nn.Module, hidden_states: Tensor, mask: Tensor, **kwargs: Tensor) -> Callable[[], None]:
    """Forward of ``module(h, mask, **kwargs)`` and backward of the mean squared pooled vector."""

    def step() -> None:
        pooled = module(hidden_states, mask, **kwargs)
        pooled.float().pow(2).mean().backward()

    return step


def pooler_inputs(
    pooler: attnpool.Pooler, hidden_states: Tensor, mask: Tensor, seed: int
) -> tuple[Tensor, dict[str, Tensor]]:
    """The hidden states the pooler takes (a stacked ``(B, L, T, H)`` leaf for multi-layer poolers) and extras."""
    batch, seq_len, hidden = hidden_states.shape
    device, dtype = hidden_states.device, hidden_states.dtype
    gen = torch.Generator().manual_seed(seed + 2)
    inputs = hidden_states
    if pooler.needs_all_layers:
        stacked = torch.randn(batch, pooler.num_layers, seq_len, hidden, generator=gen)
        inputs = stacked.to(device=device, dtype=dtype).requires_grad_(True)
    extras: dict[str, Tensor] = {}
    if pooler.needs_attentions:
        scores = torch.randn(1, batch, 1, seq_len, seq_len, generator=gen).to(device)
        real_keys = mask.bool()[None, :, None, None, :]
        extras["attentions"] = masked_softmax(scores, real_keys).to(dtype)
    return inputs, extras


def make_reset(hidden_states: Tensor, *modules: nn.Module) -> Callable[[], None]:
    """Drop the gradients of the input and of the modules' parameters."""

    def reset() -> None:
        hidden_states.grad = None
        for module in modules:
            module.zero_grad(set_to_none=True)

    return reset


def build_candidates(
    names: list[str], hidden_states: Tensor, mask: Tensor, grad_out_holder: list[Tensor]
) -> list[Candidate]:
    """The poolers, then the transcription and the floor (both built from ``attention``'s weights)."""
    device, dtype, hidden = hidden_states.device, hidden_states.dtype, hidden_states.shape[-1]
    candidates = []
    poolers = {}
    for index, name in enumerate(names):
        torch.manual_seed(0)
        pooler = poolers[name] = attnpool.build_pooler(name, hidden).to(device=device, dtype=dtype)
        inputs, extras = pooler_inputs(pooler, hidden_states, mask, seed=index)
        step, reset = make_loss_step(pooler, inputs, mask, **extras), make_reset(inputs, pooler)
        candidates.append(Candidate(name, step, reset))

    if "attention" in poolers:
        attention = poolers["attention"]
    else:
        attention = attnpool.build_pooler("attention", hidden).to(device=device, dtype=dtype)
    head = NotebookAttentionHead(hidden, attention.attn_size).to(device=device, dtype=dtype)
    with torch.no_grad():
        head.attention[0].load_state_dict(attention.proj.state_dict())
        head.attention[2].weight.copy_(attention.score.weight)
        head.attention[2].bias.zero_()  # attnpool's scorer has no bias (a softmax ignores it)
    candidates.append(
        Candidate(TRANSCRIPTION, make_loss_step(head, hidden_states, mask), make_reset(hidden_states, head))
    )

    proj = attention.proj
    batch, seq_len, _ = hidden_states.shape
    gen = torch.Generator().manual_seed(1)
    grad_out = torch.randn(batch, seq_len, proj.out_features, generator=gen).to(device=device, dtype=dtype)
    grad_out_holder.append(grad_out)  # an input of the floor: allocated before, not counted in its peak

    def floor_step() -> None:
        proj(hidden_states).backward(grad_out)

    candidates.append(Candidate(FLOOR, floor_step, make_reset(hidden_states, proj)))
    return candidates


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(candidate: Candidate, device: torch.device) -> float:
    """Seconds of one forward+backward, gradients reset beforehand (outside the timing)."""
    candidate.reset()
    synchronize(device)
    start = time.perf_counter()
    candidate.step()
    synchronize(device)
    return time.perf_counter() - start


def cpu_peak_bytes(step: Callable[[], None]) -> int:
    """Peak of the c10 CPU allocator's bytes in use during ``step()``, relative to before it, via the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    in_use = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        in_use += event.nbytes()
        peak = max(peak, in_use)
    return peak


def peak_bytes(candidate: Candidate, device: torch.device) -> int:
    """Peak bytes allocated beyond what existed before one forward+backward (untimed run)."""
    candidate.reset()
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        candidate.step()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        peak = cpu_peak_bytes(candidate.step)
    candidate.reset()
    return peak


def verdict(ok: bool) -> str:
    """``PASS`` or ``MISS``."""
    return "PASS" if ok else "MISS"


def run_shape(
    shape: tuple[int, int, int], names: list[str], args: argparse.Namespace, device: torch.device, dtype: torch.dtype
) -> bool:
    """Measure and print one shape; returns whether ``attention`` met all targets (True if not measured)."""
    hidden_states, mask = make_inputs(shape, device, dtype, args.seed, no_padding=args.no_padding)
    grad_out_holder: list[Tensor] = []
    candidates = build_candidates(names, hidden_states, mask, grad_out_holder)
    by_name = {c.name: c for c in candidates}

    for _ in range(args.warmup):
        for candidate in candidates:
            time_once(candidate, device)
    gc.collect()
    for _ in range(args.repeats):
        for candidate in candidates:
            candidate.times_s.append(time_once(candidate, device))
    for candidate in candidates:
        candidate.peak_bytes = peak_bytes(candidate, device)

    batch, seq_len, hidden = shape
    attn_size = grad_out_holder[0].shape[-1]
    unit_bytes = batch * seq_len * attn_size * hidden_states.element_size()
    real = mask.float().mean().item()
    print(
        f"\n=== B={batch} T={seq_len} H={hidden}  (A={attn_size}, {str(dtype).removeprefix('torch.')}, {device}, "
        f"{torch.get_num_threads()} threads, median of {args.repeats} after {args.warmup} warm-up; "
        f"real tokens {real:.0%}; (B,T,A) = {unit_bytes / MIB:.1f} MiB)"
    )
    mean_ms = by_name["mean"].median_ms if "mean" in by_name else float("nan")
    print(f"{'pooler':<22} {'ms fwd+bwd':>11} {'min ms':>9} {'x mean':>8} {'peak extra MiB':>15} {'x (B,T,A)':>10}")
    for candidate in candidates:
        if candidate.name == TRANSCRIPTION:
            print("-- references")
        print(
            f"{candidate.name:<22} {candidate.median_ms:>11.2f} {1e3 * min(candidate.times_s):>9.2f} "
            f"{candidate.median_ms / mean_ms:>8.2f} {candidate.peak_bytes / MIB:>15.1f} "
            f"{candidate.peak_bytes / unit_bytes:>10.2f}"
        )

    if "attention" not in by_name:
        return True
    attention, transcription, floor = by_name["attention"], by_name[TRANSCRIPTION], by_name[FLOOR]
    vs_transcription = attention.median_ms / transcription.median_ms
    vs_floor = attention.median_ms / floor.median_ms
    extra_units = (attention.peak_bytes - floor.peak_bytes) / unit_bytes
    extra_mib = (attention.peak_bytes - floor.peak_bytes) / MIB
    checks = [
        ("time   attention / transcription", f"{vs_transcription:.2f}", TARGET_TIME_VS_TRANSCRIPTION, vs_transcription),
        ("time   attention / floor", f"{vs_floor:.2f}", TARGET_TIME_VS_FLOOR, vs_floor),
        (
            "memory (attention - floor) / (B,T,A)",
            f"{extra_units:+.2f} ({extra_mib:+.1f} MiB)",
            TARGET_MEMORY_VS_FLOOR_UNITS,
            extra_units,
        ),
    ]
    print("attention vs references:")
    for label, value, target, measured in checks:
        print(f"  {label:<38} {value:>20}   target <= {target:<5.2f} {verdict(measured <= target)}")
    return all(measured <= target for _, _, target, measured in checks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=list(DEFAULT_SHAPES),
        help="comma-separated BxTxH shapes (default: 32x128x384,32x512x1024,8x2048x1024)",
    )
    parser.add_argument("--quick", action="store_true", help="only the smallest of the shapes")
    parser.add_argument("--poolers", default=None, help="comma-separated pooler names (default: all registered)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per candidate and shape (default: 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before timing (default: 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs and the mask lengths")
    parser.add_argument("--no-padding", action="store_true",
                        help="an all-ones mask (every row full length) instead of the ragged one")
    args = parser.parse_args(argv)

    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    if args.threads < 1:
        parser.error(f"--threads must be a positive integer, got {args.threads}")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a device: give cpu or cuda[:N], e.g. cuda:0")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:N], got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda requested but CUDA is not available; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        parser.error(f"--device {args.device!r}: only {torch.cuda.device_count()} CUDA device(s), "
                     f"give cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    dtype = getattr(torch, args.dtype)
    names = attnpool.available_poolers() if args.poolers is None else args.poolers.split(",")
    try:  # validates and canonicalises the names
        names = [get_pooler_class(name.strip()).name for name in names]
    except ValueError as err:
        parser.error(f"--poolers {args.poolers!r}: {err}; give comma-separated registered names, e.g. mean,attention")
    torch.set_num_threads(args.threads)
    shapes = [min(args.shapes, key=lambda s: s[0] * s[1] * s[2])] if args.quick else args.shapes

    print(f"torch {torch.__version__}, attnpool {attnpool.__version__}, poolers: {', '.join(names)}")
    start = time.perf_counter()
    all_ok = True
    for shape in shapes:
        all_ok &= run_shape(shape, names, args, device, dtype)
        gc.collect()
    print(f"\ntotal {time.perf_counter() - start:.0f} s; attention meets all targets: {'yes' if all_ok else 'no'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
