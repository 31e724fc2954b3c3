"""Training and prediction throughput of the attnpool recipe against the PPPM notebook recipe, on the same data.

Both sides fine-tune the same encoder (all-MiniLM-L6-v2 by default, ``--model``) with the same attention-pooling
head on the same PPPM rows for the same number of epochs, then predict the same held-out rows. What differs is
how they run:

* ``attnpool``: its real code paths, with the notebook head's scorer width and initialisation (``pooling_options=
  {"attn_size": 512, "init": "xavier"}``; attnpool's own default is ``H // 2`` starting as mean pooling), at
  ``--precision`` (default ``auto``, what users get: bf16 autocast on a CPU
  with native bf16, see ``attnpool.precision``; the run prints which). ``AttnPoolForSequenceClassification.
  from_encoder(model, pooling="attention", output_activation="sigmoid")``; the PPPM rows and template through
  ``attnpool.data.task.load_task`` (which calls ``attnpool.data.load_pppm`` and tokenises without padding); the
  recipe's ``transformers.Trainer``, built by ``attnpool.training.arguments.training_arguments`` and
  ``make_trainer`` (``train_sampling_strategy="group_by_length"``, ``DataCollatorWithPadding``, the optimiser of
  ``attnpool.training.optim.build_optimizer`` / ``parameter_groups``, ``max_grad_norm=1`` clipped inside the fused
  AdamW step, cosine schedule with 10% warm-up, the precision's ``bf16`` flag), and the recipe's frozen word
  embeddings (``--no-freeze-word-embeddings`` trains them, as the notebook does). One change to the arguments:
  evaluation, checkpoint saving and ``load_best_model_at_end`` are switched off (``dataclasses.replace``), i.e. the
  Trainer is driven directly instead of through the k-fold ``train()``, which would write checkpoints; none of that
  happens inside a training step anyway.
* ``notebook``: a re-expression of the public notebook recipe (the seed's ``AttentionPooling``), always fp32:
  ``AutoModel`` of the same checkpoint, ``Linear(H, 512) -> Tanh -> Linear(512, 1) -> Softmax(dim=1)`` over all
  positions, the mask multiplied in afterwards and the weights renormalised (``+ 1e-8``), weighted sum,
  ``Linear(H, 1)``; loss ``BCEWithLogitsLoss``, sigmoid for predictions. Its pooler and head start from a copy of
  attnpool's initial pooler/head weights (Xavier, as the seed says), so both sides start from identical weights.
  Texts (the same template strings) are tokenised with ``padding="max_length"`` to the maximum token length of the
  *whole* ``train.csv`` (84 for MiniLM), as the notebook does. Training batches: a ``DataLoader`` with
  ``shuffle=True`` (seeded) and batch 16, every batch padded to that maximum (``drop_last=False``, so both sides
  see the same rows and take the same number of steps); plain ``torch.optim.AdamW`` (no ``fused``/``foreach``: on
  CPU that is the per-parameter loop) with the same parameter groups and rates as attnpool (encoder ``--lr``,
  pooler/head ``--head-lr``, weight decay 0.01 except biases and norm weights), ``clip_grad_norm_(1.0)`` as the
  Trainer (the original notebook clips too), the same cosine schedule and warm-up, and its own random stream
  (dropout), so that neither side's result depends on the interleaving. Prediction: batches of 16 in file order,
  padded to the maximum, under ``torch.no_grad()``.

Timing (steady state). Everything before the first training step is excluded: model loading, tokenisation,
Trainer and DataLoader set-up. The two trainings are interleaved step by step in one process: a
``TrainerCallback`` runs one notebook step (timed on its own) at every attnpool ``on_step_end``, so that whatever
else runs on the machine slows both alike. An attnpool step is the time from one ``on_step_begin`` to the next,
minus the time spent in that callback; so it includes all of the Trainer's per-step work (fetching and collating
the batch, forward, backward, gradient clipping, optimiser and scheduler steps, logging). A notebook step includes
fetching its batch, forward, backward, clipping, optimiser and scheduler steps. The first ``--warmup-steps`` steps
of each side are not timed (nor attnpool's last step, which has no following ``on_step_begin``); rates are timed
rows / timed seconds. Other processes on a shared machine cause load spikes that cost both sides about the same
seconds, which weighs far more on the faster side's total. ``train samples/s`` (and the verdict) therefore uses
the *quiet* steps, the same step indices on both sides: every notebook step does the same work (16 rows padded to
the maximum), so it doubles as a load probe, and step ``i`` is dropped when notebook step ``i - 1`` or ``i`` (run
just before and just after attnpool's step ``i``) took over 1.5x the notebook's median step, or when attnpool's
step took over 1.5x the time expected for its padded size (a line fitted to its other steps). ``(all steps)``
uses every timed step. Under a load that lasts the whole run the median moves with it and little is filtered.

Allocator: attnpool's Trainer raises glibc's mmap/trim thresholds on a CPU (``attnpool.allocator``); that setting
belongs to the process, so the interleaved notebook (and each peer) runs with it too, although a notebook user's
process would not. ``ATTNPOOL_MALLOC_TUNING=0`` runs both sides with glibc's defaults instead. The trainer also
swaps attnpool's dropout modules for ``attnpool.model.dropout.CPUDropout`` (``ATTNPOOL_CPU_DROPOUT=0`` keeps
``nn.Dropout``); the notebook keeps PyTorch's.

Peers trained after the main run, each interleaved with the same notebook trainer (which keeps training: its steps
are only a load probe by then), so each gets a ratio to the notebook measured under its own section's load:

* ``attnpool fp32`` (``--fp32-reference``, on by default when ``--precision`` is not fp32): a copy of attnpool's
  initial model trained again in fp32 with the same seed (same batches, same dropout stream), so the Pearson of the
  fast precision against fp32 attnpool is measured on the same rows; its speed gives the precision's own speed-up.
* ``CrossEncoder`` (``--cross-encoder``, on by default; skipped with a note, before anything trains, when the
  ``sentence-transformers`` extra is missing): sentence-transformers' ``CrossEncoder`` (the peer users pick
  for pair scoring: ``BertForSequenceClassification``, the [CLS] token through the encoder's pretrained pooler and
  a new linear classifier) trained by its own ``CrossEncoderTrainer`` with ``BinaryCrossEntropyLoss`` (soft labels,
  the PPPM scores) on the same training rows, encoder, epochs, batch size, learning rates (``--lr``; the new
  classifier at ``--head-lr`` through ``learning_rate_mapping``, as attnpool's new layers), weight decay, cosine
  schedule, warm-up, clipping and seed; its default batch sampler (random batches, each padded to its longest) and
  its default precision (fp32; ``--cross-encoder-precision bf16`` to give it bf16 autocast too). Pairs: ``(anchor,
  target [SEP] context title)``, which the tokenizer turns into the very token ids of attnpool's template
  ``{anchor} [SEP] {target} [SEP] {context_text}`` (checked on every row); only the token type ids differ (the
  pair's second segment is type 1, as a CrossEncoder is used). Its collator hands raw texts to the loss, which
  tokenises each batch inside the step; that is part of its per-step cost (a fast tokenizer on 16 short pairs: about
  a millisecond). Validation: ``CrossEncoder.predict`` (sigmoid scores) on the held-out rows.

``vs attnpool (probe)`` is the peer's speed over attnpool's (peer ÷ attnpool, as ``vs notebook`` is side ÷
notebook: above 1 the peer trains faster), load-corrected: peer/notebook of the peer's section divided by
attnpool/notebook of the main run (each on its quiet steps); ``(direct)`` divides the rates of the two sections, which
ran at different times. The verdict lines below the tables give the inverse, ``attnpool .../peer``. The peers ran
*sequentially* after the main run; only their probe ratios are interleaved.

Prediction: every path of the trained attnpool model on the same held-out rows, side by side with the notebook's
prediction. The model is saved as fold 0 of a run in a temporary folder and loaded back as ``attnpool predict``
loads it (``FoldEnsemble.load``; the model the Trainer trained with bf16 keeps accelerate's autocast wrapper on its
``forward``, so the in-memory one would predict in bf16 whatever it is asked): ``torch fp32`` (length-sorted,
dynamically padded batches of ``--predict-batch-size``, default 128 as ``attnpool predict``), ``torch
bf16`` (the same under bf16 autocast, ``predict --precision bf16``), ``onnx fp32`` and ``onnx int8``
(``OnnxFoldEnsemble.load``: the graph ``predict --backend onnx`` exports into the run, and the same dynamic int8
quantization as ``--quantize int8``; skipped, with a note before training, when the ``onnx`` extra is missing).
After an untimed warm-up pass of each path, the passes alternate ``--predict-repeats`` times; the median rate of
each is reported (the whole call, including its padding; tokenisation is excluded: it is the same for all).

Quality. Pearson correlation of each side's predictions with the held-out scores after the same epochs, with a
paired bootstrap standard error of the difference (held-out sampling noise only; seed-to-seed noise of training
comes on top, and one run cannot measure it). The training models are compared through their ``torch fp32``
predictions. "PASS" for a Pearson means the difference is >= -2 SE. For reference, bf16 against fp32 training
measured over seeds elsewhere (CR sentiment, MiniLM, 2 epochs, fold 0 of 5, 4 paired seeds): accuracy 0.8854 vs
0.8851, paired differences +0.0013, +0.0013, 0, -0.0013, bf16 1.24x faster.

Rows: ``--rows`` training and ``--predict-rows`` held-out rows, a seeded random sample of ``train.csv``
(``load_task``'s ``limit``), split at random (``--seed``). ``mean padded tokens/row``: the padded length of each
batch times its rows, averaged over rows (training: the timed steps; prediction: all batches). Without ``train.csv``
in the default ``--data-dir`` (``../shared/data/pppm``) it prints ``skipped: ...`` and exits 0; a ``--data-dir`` given
without one is a usage error (exit 2: a mistyped path must not pass as a clean skip).

Usage::

    .venv/bin/python benchmarks/pppm_throughput.py             # 2,000 + 1,000 rows, 1 epoch, both peers
    .venv/bin/python benchmarks/pppm_throughput.py --quick     # smoke run: a few steps
    .venv/bin/python benchmarks/pppm_throughput.py --precision fp32 --no-cross-encoder
    .venv/bin/python benchmarks/pppm_throughput.py --rows 4000 --epochs 2 --model /path/to/encoder

Targets (issue #16; PASS/MISS lines): training >= 5x the notebook's samples/s at a Pearson no lower than fp32
attnpool's (-2 SE); prediction >= 6x the notebook's rows/s on the fastest path whose Pearson is within 0.005 of
the torch fp32 prediction's; attnpool >= 1.5x the CrossEncoder's training samples/s at an equal or better Pearson.
On a shared CPU compare the ratios of one run, not absolute rates of different runs.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import logging
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from notebook_recipe import NotebookAttentionHead

TRAIN_TARGET = 5.0  # attnpool / notebook training samples/s
PREDICT_TARGET = 6.0  # attnpool's fastest accurate path / notebook prediction rows/s
CROSS_ENCODER_TARGET = 1.5  # attnpool / CrossEncoder training samples/s
PEARSON_TOLERANCE = 0.005  # a prediction path's Pearson may differ from torch fp32's by this much
NOTEBOOK_POOLER = {"attn_size": 512, "init": "xavier"}  # the notebook head's width and initialisation
QUIET_FACTOR = 1.5  # a notebook step slower than this times the median marks a load spike
DEFAULT_DATA_DIR = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pppm")
VERDICT = {True: "PASS", False: "MISS"}
CROSS_ENCODER_MODULES = ("sentence_transformers", "datasets")  # the sentence-transformers extra
ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")  # the onnx extra: export and ONNX Runtime


class NotebookModel(nn.Module):
    """The notebook's model: ``AutoModel`` encoder, attention pooling, one linear output (raw logit)."""

    def __init__(self, model_name: str) -> None:
        super().__init__()
        from transformers import AutoModel

        self.encoder = AutoModel.from_pretrained(model_name)
        h = self.encoder.config.hidden_size
        self.pool = NotebookAttentionHead(h)
        self.head = nn.Linear(h, 1)

    def forward(self, **inputs: Tensor) -> Tensor:
        """Raw logits ``(batch, 1)``."""
        hidden = self.encoder(**inputs).last_hidden_state
        pooled = self.pool(hidden, inputs.get("attention_mask"))
        return self.head(pooled)


def build_parser() -> argparse.ArgumentParser:
    from attnpool.precision import PRECISIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="encoder (hub name or folder); default: the offline MiniLM")
    p.add_argument("--data-dir", default=None, help="PPPM folder (train.csv, cpc_texts.csv; default: "
                   "../shared/data/pppm)")
    p.add_argument("--rows", type=int, default=2000, help="training rows")
    p.add_argument("--predict-rows", type=int, default=1000, help="held-out rows (prediction speed and Pearson)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16, help="training batch of every side")
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="attnpool's training precision (default auto: what `attnpool train` picks here); the "
                        "notebook side is always fp32")
    p.add_argument("--freeze-word-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="attnpool's word embeddings frozen or trained (default: the recipe's, frozen)")
    p.add_argument("--fp32-reference", action=argparse.BooleanOptionalAction, default=True,
                   help="also train attnpool in fp32 from the same start (skipped when --precision gives fp32)")
    p.add_argument("--cross-encoder", action=argparse.BooleanOptionalAction, default=True,
                   help="also train sentence-transformers' CrossEncoder on the same rows")
    p.add_argument("--cross-encoder-precision", default="fp32", choices=("fp32", "bf16"),
                   help="the CrossEncoder's precision (default: its trainer's default, fp32)")
    p.add_argument("--predict-batch-size", type=int, default=128,
                   help="attnpool prediction batch (default: `attnpool predict`'s 128; the recipe's eval batch: 64)")
    p.add_argument("--notebook-predict-batch-size", type=int, default=16)
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed first training steps of each side")
    p.add_argument("--predict-repeats", type=int, default=3, help="alternating timed prediction passes per path")
    p.add_argument("--lr", type=float, default=2e-5, help="encoder learning rate (recipe default)")
    p.add_argument("--head-lr", type=float, default=1e-3, help="pooler/head learning rate (recipe default)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples for the Pearson difference")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads and ONNX Runtime's intra-op threads (default: each one's choice)")
    p.add_argument("--dump-steps", default=None, help="write every step's (rows, padded length, seconds) as JSON")
    p.add_argument("--quick", action="store_true", help="smoke run: 96 + 64 rows, 2 warm-up steps, 1 repeat")
    return p


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The arguments; ``args.data_dir_given`` says whether ``--data-dir`` was given (see :func:`main`)."""
    from attnpool.config import default_model

    args = (parser or build_parser()).parse_args(argv)
    args.data_dir_given = args.data_dir is not None
    args.data_dir = args.data_dir if args.data_dir_given else DEFAULT_DATA_DIR
    args.model = args.model or default_model()
    if args.quick:
        args.rows, args.predict_rows, args.warmup_steps, args.predict_repeats, args.bootstrap = 96, 64, 2, 1, 200
    return args


# --------------------------------------------------------------------------------------------------- data


@dataclasses.dataclass
class Data:
    """The rows of the benchmark, tokenised both ways."""

    task: Any  # attnpool.data.task.TaskData (unpadded encodings)
    cfg: Any  # attnpool.config.TrainConfig
    train_idx: np.ndarray
    held_idx: np.ndarray
    padded: dict[str, Tensor]  # the notebook's encodings of every row, padded to max_len
    max_len: int
    precision: str  # attnpool's training precision, resolved (fp32, bf16...)


def load_data(args: argparse.Namespace) -> Data:
    from attnpool.config import TrainConfig
    from attnpool.data import PPPM_TEMPLATE, build_texts, load_pppm
    from attnpool.data.task import load_task
    from attnpool.precision import resolve_precision

    cfg = TrainConfig(preset="pppm", data_dir=args.data_dir, model=args.model, limit=args.rows + args.predict_rows,
                      seed=args.seed, epochs=args.epochs, batch_size=args.batch_size,
                      freeze_word_embeddings=args.freeze_word_embeddings,
                      eval_batch_size=args.predict_batch_size, lr=args.lr, head_lr=args.head_lr,
                      precision=args.precision, pooling="attention", pooling_options=NOTEBOOK_POOLER,
                      output_activation="sigmoid", folds=2)
    task = load_task(cfg.validate(), log=logging.getLogger("pppm_throughput"))
    n = task.num_rows
    if n < args.rows + args.predict_rows:
        raise SystemExit(f"the data has {n} rows, fewer than --rows + --predict-rows = {args.rows + args.predict_rows}")
    order = np.random.default_rng(args.seed).permutation(n)
    train_idx, held_idx = order[: args.rows], order[args.rows :]

    tok = task.tokenizer
    sep = tok.sep_token or "[SEP]"
    full, template = load_pppm(args.data_dir)
    assert template == PPPM_TEMPLATE
    full_first, full_second, _ = build_texts(full, template=template, sep_token=sep)
    max_len = max(len(ids) for ids in tok(full_first, full_second, verbose=False)["input_ids"])
    max_len = min(max_len, cfg.max_length)
    first, second, _ = build_texts(task.frame, template=template, sep_token=sep)
    padded = tok(first, second, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
    # The same token ids on both sides, only the padding differs.
    for i in range(0, n, max(1, n // 50)):
        real = int(padded["attention_mask"][i].sum())
        assert padded["input_ids"][i, :real].tolist() == list(task.encodings["input_ids"][i]), i
    return Data(task, cfg, train_idx, held_idx, dict(padded), max_len, resolve_precision(cfg.precision, "cpu"))


# --------------------------------------------------------------------------------------------------- models


def build_models(args: argparse.Namespace, data: Data):
    from transformers import set_seed

    from attnpool.model import AttnPoolForSequenceClassification

    set_seed(args.seed)
    ours = AttnPoolForSequenceClassification.from_encoder(
        args.model, pooling="attention", pooling_options=data.cfg.pooling_options, output_activation="sigmoid",
        num_labels=1, problem_type="regression", head_dropout=data.cfg.head_dropout,
        freeze_word_embeddings=data.cfg.resolved_freeze_word_embeddings())
    theirs = NotebookModel(args.model)
    pooler, head = ours.attnpool.pooler, ours.head.out
    with torch.no_grad():  # identical starting weights: the encoder from the checkpoint, pooler and head copied
        theirs.pool.attention[0].weight.copy_(pooler.proj.weight)
        theirs.pool.attention[0].bias.copy_(pooler.proj.bias)
        theirs.pool.attention[2].weight.copy_(pooler.score.weight)
        theirs.pool.attention[2].bias.zero_()  # attnpool's scorer has no bias (a softmax ignores it)
        theirs.head.weight.copy_(head.weight)
        theirs.head.bias.copy_(head.bias)
    check_same_encoder(ours.attnpool.encoder, theirs.encoder)
    return ours, theirs


def check_same_encoder(mine: nn.Module, notebook: nn.Module) -> None:
    """Assert both encoders hold the same weights.

    Every one of attnpool's, and no other than the encoder's own pooler (``pooler.*``), which attnpool drops
    (``_drop_encoder_pooler``) and the notebook keeps unused.
    """
    ours, theirs = mine.state_dict(), notebook.state_dict()
    missing = sorted(set(ours) - set(theirs))
    extra = sorted(k for k in set(theirs) - set(ours) if not k.startswith("pooler."))
    assert not missing and not extra, (f"encoder weights differ in names: only attnpool's {missing}, "
                                       f"only the notebook's {extra}")
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), f"encoder weights differ: {name}"


def notebook_optimizer_groups(model: NotebookModel, lr: float, head_lr: float, weight_decay: float) -> list[dict]:
    """The same groups as ``attnpool.training.optim.parameter_groups`` (llrd 1): encoder / new layers, decay or not."""
    from attnpool.training.optim import NO_DECAY

    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        rate = lr if name.startswith("encoder.") else head_lr
        decay = 0.0 if p.ndim < 2 or any(name.endswith(k) for k in NO_DECAY) else weight_decay
        groups.setdefault((rate, decay), []).append(p)
    return [{"params": ps, "lr": rate, "weight_decay": decay} for (rate, decay), ps in groups.items()]


class NotebookTrainer:
    """The notebook's training loop, one step per call, each timed."""

    def __init__(self, model: NotebookModel, data: Data, args: argparse.Namespace, total_steps: int) -> None:
        from transformers import get_cosine_schedule_with_warmup

        self.model = model.train()
        rows = torch.as_tensor(data.train_idx)
        tensors = [data.padded[k][rows] for k in ("input_ids", "attention_mask", "token_type_ids") if k in data.padded]
        self.keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in data.padded]
        labels = torch.as_tensor(data.task.labels[data.train_idx], dtype=torch.float32)
        dataset = torch.utils.data.TensorDataset(*tensors, labels)
        generator = torch.Generator().manual_seed(args.seed)
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                                  drop_last=False, generator=generator)
        cfg = data.cfg
        self.optimizer = torch.optim.AdamW(notebook_optimizer_groups(model, cfg.lr, cfg.head_lr, cfg.weight_decay))
        warmup = math.ceil(total_steps * cfg.warmup_ratio)  # as TrainingArguments.get_warmup_steps
        self.scheduler = get_cosine_schedule_with_warmup(self.optimizer, warmup, total_steps)
        self.criterion = nn.BCEWithLogitsLoss()
        self.batches = self._forever()
        self.steps = 0
        # Its own random stream (dropout), so that neither side's results depend on the interleaving.
        self.rng_state = torch.Generator().manual_seed(args.seed + 1).get_state()
        self.step_log: list[tuple[int, int, float]] = []  # (rows, padded length, seconds) of every step

    def _forever(self) -> Iterator[list[Tensor]]:
        while True:
            yield from self.loader

    def step(self) -> None:
        """One training step: next batch, forward, backward, clip, optimiser and scheduler steps."""
        outer_rng = torch.get_rng_state()
        torch.set_rng_state(self.rng_state)
        start = time.perf_counter()
        *features, labels = next(self.batches)
        inputs = dict(zip(self.keys, features, strict=True))
        logits = self.model(**inputs)
        loss = self.criterion(logits.view(-1), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        seconds = time.perf_counter() - start
        self.rng_state = torch.get_rng_state()
        torch.set_rng_state(outer_rng)
        self.step_log.append((len(labels), features[0].shape[1], seconds))
        self.steps += 1


# --------------------------------------------------------------------------------------------------- training


class ShapeRecorder:
    """Wraps a Trainer's collator to note each batch's ``(rows, padded length)``; nothing else changes."""

    def __init__(self, collator: Any, shape: Callable[[dict[str, Any]], tuple[int, int]] | None = None) -> None:
        self.collator = collator
        self.shape = shape or (lambda batch: tuple(batch["input_ids"].shape))
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """Collate as the wrapped collator does, noting the batch shape."""
        batch = self.collator(features)
        self.shapes.append(self.shape(batch))
        return batch

    def __getattr__(self, name: str) -> Any:  # the collator's own attributes (valid_label_columns...)
        return getattr(self.collator, name)


def make_interleaver(notebook: NotebookTrainer):
    """A TrainerCallback timing a Trainer's steps and running one notebook step after each."""
    from transformers import TrainerCallback

    class Interleaver(TrainerCallback):
        def __init__(self) -> None:
            self.step_seconds: list[float] = []  # step i: on_step_begin(i) -> on_step_begin(i + 1)
            self.begin: float | None = None
            self.excluded = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            now = time.perf_counter()
            if self.begin is not None:
                self.step_seconds.append(now - self.begin - self.excluded)
            self.begin, self.excluded = now, 0.0

        def on_step_end(self, args, state, control, **kwargs):
            start = time.perf_counter()
            notebook.step()
            self.excluded += time.perf_counter() - start

    return Interleaver()


def quiet_steps(ours_log: list, theirs_log: list, timed: list[int]) -> list[int]:
    """The timed steps free of load spikes from other processes, the same indices for both sides.

    Every notebook step does the same work (16 rows x max_len), so one slower than ``QUIET_FACTOR`` x its median
    flags a spike; the other side's step ``i`` runs between notebook steps ``i - 1`` and ``i``. Its own steps vary
    with their padded size, so a step slower than ``QUIET_FACTOR`` x the time expected for its size (a
    least-squares line in padded tokens, fitted on the remaining steps, twice) flags one too.
    """
    limit = QUIET_FACTOR * statistics.median(theirs_log[i][2] for i in timed)
    quiet = [i for i in timed if theirs_log[i][2] <= limit and (i == 0 or theirs_log[i - 1][2] <= limit)]
    for _ in range(2):
        tokens = np.array([ours_log[i][0] * ours_log[i][1] for i in quiet], dtype=np.float64)
        seconds = np.array([ours_log[i][2] for i in quiet])
        if len(quiet) < 3 or np.ptp(tokens) == 0:
            break
        slope, intercept = np.polyfit(tokens, seconds, 1)
        expected = np.maximum(intercept + slope * tokens, seconds.min())
        quiet = [i for i, e, t in zip(quiet, expected, seconds, strict=True) if t <= QUIET_FACTOR * e]
    return quiet


@dataclasses.dataclass
class Section:
    """One training interleaved with the notebook: both sides' rates over the same timed and quiet steps."""

    name: str
    steps: int
    timed: list[int]
    quiet: list[int]
    rate: float  # samples/s over the quiet steps
    rate_all: float  # samples/s over every timed step
    tokens: float  # mean padded tokens per row, timed steps
    median_step: float
    probe: float  # the notebook's samples/s over the same quiet steps
    probe_all: float
    probe_median_step: float
    log: list = dataclasses.field(repr=False, default_factory=list)
    probe_log: list = dataclasses.field(repr=False, default_factory=list)

    @classmethod
    def of(cls, name: str, log: list, probe_log: list, warmup: int) -> Section:
        """Rates from the per-step ``(rows, padded length, seconds)`` of a side and of its notebook probe."""
        timed = list(range(warmup, len(log)))
        if not timed:
            raise SystemExit(f"{name}: no timed training step: lower --warmup-steps or raise --rows")
        quiet = quiet_steps(log, probe_log, timed)

        def rate(entries: list, steps: list[int]) -> float:
            seconds = sum(entries[i][2] for i in steps)
            return sum(entries[i][0] for i in steps) / seconds if steps and seconds else float("nan")

        rows = sum(log[i][0] for i in timed)
        return cls(name, len(log), timed, quiet, rate(log, quiet), rate(log, timed),
                   sum(log[i][0] * log[i][1] for i in timed) / rows, statistics.median(log[i][2] for i in timed),
                   rate(probe_log, quiet), rate(probe_log, timed), statistics.median(probe_log[i][2] for i in timed),
                   log, probe_log)

    @property
    def vs_probe(self) -> float:
        """This side's samples/s over the notebook's, on the same quiet steps."""
        return self.rate / self.probe

    def line(self) -> str:
        """One summary line of the section."""
        return (f"{self.name}: {self.steps} steps; timed steps {self.timed[0]}..{self.timed[-1]}, of which "
                f"{len(self.quiet)} quiet; median step {self.median_step:.3f} s vs notebook "
                f"{self.probe_median_step:.3f} s")


def run_interleaved(name: str, trainer, recorder: ShapeRecorder, notebook: NotebookTrainer, warmup: int) -> Section:
    """Train ``trainer`` with one notebook step after each of its steps; the section's rates."""
    notebook.model.train()  # a probe after the notebook's prediction: dropout on again, the same work per step
    first = notebook.steps
    timer = make_interleaver(notebook)
    trainer.add_callback(timer)
    trainer.train()
    log = [(r, t, sec) for (r, t), sec in zip(recorder.shapes, timer.step_seconds, strict=False)]
    return Section.of(name, log, notebook.step_log[first:], warmup)


def attnpool_trainer(cfg, model, data: Data, out_dir: Path):
    """The recipe's Trainer for ``model`` on the training rows (no evaluation, no checkpoints), its shape recorder."""
    from attnpool.data.task import EncodedDataset
    from attnpool.training.arguments import training_arguments
    from attnpool.training.trainer import make_trainer

    train_ds = EncodedDataset(data.task.encodings, data.task.labels, data.train_idx)
    steps_per_epoch = max(1, math.ceil(len(train_ds) / cfg.batch_size))
    targs = training_arguments(cfg, out_dir, steps_per_epoch)
    targs = dataclasses.replace(targs, eval_strategy="no", save_strategy="no", load_best_model_at_end=False)
    trainer = make_trainer(cfg, model, targs, train_ds, None, data.task.tokenizer)
    recorder = ShapeRecorder(trainer.data_collator)
    trainer.data_collator = recorder
    return trainer, recorder, math.ceil(steps_per_epoch * cfg.epochs)


def train_both(args: argparse.Namespace, data: Data, ours, theirs, tmp: Path) -> tuple[Section, NotebookTrainer]:
    """Train attnpool and the notebook, interleaved step by step."""
    trainer, recorder, total_steps = attnpool_trainer(data.cfg, ours, data, tmp / "attnpool")
    notebook = NotebookTrainer(theirs, data, args, total_steps)
    section = run_interleaved(f"attnpool {data.precision}", trainer, recorder, notebook, args.warmup_steps)
    while notebook.steps < trainer.state.global_step:  # never expected: both sides take the same steps
        notebook.step()
    print(f"training {section.line()} (attnpool optimizer fused={trainer.optimizer.defaults.get('fused')})",
          flush=True)
    if args.dump_steps:
        from attnpool.runs.files import atomic_write_json

        steps = {"attnpool": section.log, "notebook": notebook.step_log, "timed": section.timed,
                 "quiet": section.quiet}
        atomic_write_json(args.dump_steps, steps)
    return section, notebook


def train_fp32_reference(args: argparse.Namespace, data: Data, model, notebook: NotebookTrainer,
                         tmp: Path) -> Section:
    """Train attnpool again from the same initial weights, in fp32, interleaved with the notebook probe."""
    cfg = dataclasses.replace(data.cfg, precision="fp32")
    trainer, recorder, _ = attnpool_trainer(cfg, model, data, tmp / "attnpool_fp32")
    section = run_interleaved("attnpool fp32", trainer, recorder, notebook, args.warmup_steps)
    print(f"training {section.line()}", flush=True)
    return section


def cross_encoder_pairs(data: Data) -> list[tuple[str, str]]:
    """``(anchor, target [SEP] context title)`` of every row: the token ids of attnpool's template, as a pair."""
    from attnpool.data import build_texts

    sep = data.task.tokenizer.sep_token or "[SEP]"
    second = build_texts(data.task.frame, template="{target} [SEP] {context_text}", sep_token=sep).first
    pairs = list(zip(data.task.frame["anchor"].astype(str), second, strict=True))
    ids = data.task.tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation=True,
                              max_length=data.cfg.max_length)["input_ids"]
    for i, row in enumerate(ids):
        if list(row) != list(data.task.encodings["input_ids"][i]):
            raise SystemExit(f"row {i}: the CrossEncoder pair tokenises differently from attnpool's template: "
                             f"{pairs[i]!r}")
    return pairs


def train_cross_encoder(args: argparse.Namespace, data: Data, notebook: NotebookTrainer,
                        tmp: Path) -> tuple[Section, np.ndarray, float]:
    """sentence-transformers' CrossEncoder on the same rows, interleaved with the notebook probe.

    Returns the section, its sigmoid scores on the held-out rows and its prediction rows/s (one timed pass after an
    untimed one; not interleaved with anything).
    """
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers import set_seed

    cfg = data.cfg
    pairs = cross_encoder_pairs(data)
    lengths = dict(zip(pairs, map(len, data.task.encodings["input_ids"]), strict=True))
    labels = np.asarray(data.task.labels, dtype=np.float64)
    set_seed(args.seed)
    model = CrossEncoder(args.model, num_labels=1, max_length=cfg.max_length, device="cpu")
    rows = [pairs[i] for i in data.train_idx]
    train = Dataset.from_dict({"sentence1": [a for a, _ in rows], "sentence2": [b for _, b in rows],
                               "label": labels[data.train_idx].tolist()})
    steps_per_epoch = max(1, math.ceil(len(rows) / cfg.batch_size))
    targs = CrossEncoderTrainingArguments(
        output_dir=str(tmp / "cross_encoder"), num_train_epochs=cfg.epochs, per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr, learning_rate_mapping={r"classifier\.": cfg.head_lr}, weight_decay=cfg.weight_decay,
        lr_scheduler_type=cfg.scheduler, warmup_steps=cfg.warmup_ratio, max_grad_norm=1.0, seed=cfg.seed,
        bf16=args.cross_encoder_precision == "bf16", use_cpu=True, eval_strategy="no", save_strategy="no",
        report_to="none", disable_tqdm=True, logging_steps=max(1, min(50, steps_per_epoch // 4 or 1)),
        dataloader_num_workers=0, dataloader_pin_memory=False)
    trainer = CrossEncoderTrainer(model=model, args=targs, train_dataset=train, loss=BinaryCrossEntropyLoss(model))
    recorder = ShapeRecorder(trainer.data_collator, shape=lambda batch: (
        len(batch["sentence1"]), max(lengths[pair] for pair in zip(batch["sentence1"], batch["sentence2"],
                                                                   strict=True))))
    trainer.data_collator = recorder
    section = run_interleaved(f"CrossEncoder {args.cross_encoder_precision}", trainer, recorder, notebook,
                              args.warmup_steps)
    rates = sorted({group.get("initial_lr", group["lr"]) for group in trainer.optimizer.param_groups})
    print(f"training {section.line()} (learning rates {', '.join(f'{r:g}' for r in rates)})", flush=True)
    held = [pairs[i] for i in data.held_idx]
    model.predict(held[: 2 * args.predict_batch_size], batch_size=args.predict_batch_size, show_progress_bar=False)
    start = time.perf_counter()
    scores = model.predict(held, batch_size=args.predict_batch_size, show_progress_bar=False)
    rate = len(held) / (time.perf_counter() - start)
    return section, np.asarray(scores, dtype=np.float64).reshape(-1), rate


# --------------------------------------------------------------------------------------------------- prediction


@torch.no_grad()
def predict_notebook(model: NotebookModel, data: Data, rows: np.ndarray, batch_size: int) -> np.ndarray:
    model.eval()
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in data.padded]
    selected = torch.as_tensor(rows)
    tensors = {k: data.padded[k][selected] for k in keys}
    out = []
    for i in range(0, len(rows), batch_size):
        out.append(torch.sigmoid(model(**{k: v[i : i + batch_size] for k, v in tensors.items()})).view(-1))
    return torch.cat(out).numpy().astype(np.float64)


def one_fold_run(folder: Path, data: Data, model):
    """``model`` saved as fold 0 of a run in ``folder``: what ``OnnxFoldEnsemble.load`` (``predict``) reads."""
    from attnpool.runs import Run

    run = Run.create(folder)
    run.write_config(data.cfg.to_dict())
    run.write_info({"task": "regression", "classes": None, "label": "score", "id_col": "id", "num_folds": 1})
    model.save_pretrained(run.model_dir(0), tokenizer=data.task.tokenizer)
    return run


def prediction_paths(args: argparse.Namespace, data: Data, run, theirs) -> dict[str, Callable]:
    """Every prediction path of the held-out rows: the notebook's, then attnpool's backends and precisions.

    attnpool's paths load the model saved in ``run``, as ``attnpool predict`` does: the Trainer leaves the model it
    trained with bf16 wrapped in accelerate's autocast (its ``forward`` runs in bf16 whatever the caller asks).
    """
    from attnpool.prediction.engine import FoldEnsemble

    held, bs = data.held_idx, args.predict_batch_size
    encodings = held_encodings(data)
    models = FoldEnsemble.load(run)
    paths: dict[str, Callable[[], np.ndarray]] = {
        "notebook fp32": lambda: predict_notebook(theirs, data, held, args.notebook_predict_batch_size),
        "torch fp32": lambda: models.scores(encodings, batch_size=bs, device="cpu", precision="fp32"),
        "torch bf16": lambda: models.scores(encodings, batch_size=bs, device="cpu", precision="bf16"),
    }
    if missing_modules(ONNX_MODULES):  # said before training (drop_missing_peers)
        return paths
    from attnpool.prediction.onnx_engine import OnnxFoldEnsemble

    for name, quantize in (("onnx fp32", "none"), ("onnx int8", "int8")):
        ensemble = OnnxFoldEnsemble.load(run, quantize=quantize, threads=args.threads)
        paths[name] = lambda e=ensemble: e.scores(encodings, batch_size=bs)
    return paths


def held_encodings(data: Data) -> dict[str, list]:
    """The unpadded token lists of the held-out rows."""
    return {k: [v[i] for i in data.held_idx] for k, v in data.task.encodings.items()}


def predict_saved(run, data: Data, batch_size: int) -> np.ndarray:
    """The torch fp32 scores of the held-out rows by the model saved in ``run``."""
    from attnpool.prediction.engine import FoldEnsemble

    return FoldEnsemble.load(run).scores(held_encodings(data), batch_size=batch_size, device="cpu", precision="fp32")


def predict_all(paths: dict[str, Callable], repeats: int) -> tuple[dict[str, float], dict]:
    """Each path's median rows/s over ``repeats`` alternating passes (after an untimed one) and its predictions."""
    preds = {name: np.asarray(fn(), dtype=np.float64).reshape(-1) for name, fn in paths.items()}  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    rows = len(next(iter(preds.values())))
    return {name: rows / statistics.median(s) for name, s in seconds.items()}, preds


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; else ``platform.processor()``): ratios differ by CPU."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def padded_tokens(data: Data, batch_size: int) -> float:
    """The mean padded tokens per held-out row of attnpool's length-sorted batches."""
    from attnpool.data.batching import length_sorted_batches

    lengths = [len(data.task.encodings["input_ids"][i]) for i in data.held_idx]
    padded = sum(len(b) * max(lengths[j] for j in b) for b in length_sorted_batches(lengths, batch_size))
    return padded / len(lengths)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1]) if np.std(x) > 0 and np.std(y) > 0 else float("nan")


def pearson_diff(a: np.ndarray, b: np.ndarray, target: np.ndarray, resamples: int, seed: int) -> dict[str, float]:
    """Pearson of ``a`` and of ``b`` with ``target``, their difference and its paired bootstrap SE."""
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(resamples):
        i = rng.integers(0, len(target), len(target))
        diffs.append(pearson(a[i], target[i]) - pearson(b[i], target[i]))
    ra, rb = pearson(a, target), pearson(b, target)
    return {"a": ra, "b": rb, "diff": ra - rb, "se": float(np.nanstd(diffs))}


def compare_line(label: str, stats: dict[str, float]) -> str:
    """``label`` Pearson difference, its SE and the verdict (difference >= -2 SE)."""
    return (f"{label} {stats['diff']:+.4f} ({stats['a']:.4f} vs {stats['b']:.4f}; paired bootstrap SE "
            f"{stats['se']:.4f})  target >= -2 SE  {VERDICT[bool(stats['diff'] >= -2 * stats['se'])]}")


def fp32_reference_line(precision: str, stats: dict[str, float], main_run: Section, fp32_run: Section) -> str:
    """One line: the Pearson difference of attnpool at ``precision`` from its fp32 copy, their training speed ratio.

    The label named bf16 whatever the precision (an fp16 run printed "bf16/fp32 training speed").
    """
    return (compare_line(f"Pearson attnpool {precision} - attnpool fp32", stats)
            + f"   ({precision}/fp32 training speed {main_run.vs_probe / fp32_run.vs_probe:.2f}x, probe-corrected)")


# --------------------------------------------------------------------------------------------------- report


def print_training(main_run: Section, peers: list[Section], notebook_tokens: float) -> None:
    print("\ntraining samples/s: quiet steps (see the module docstring); each peer interleaved with the notebook in "
          "its own section, after the main run (sequentially)")
    header = (f"{'side':<18} {'samples/s':>9} {'(all steps)':>11} {'notebook probe':>14} {'vs notebook':>11} "
              f"{'vs attnpool (probe)':>19} {'(direct)':>8} {'padded tok/row':>14}")
    print(header)
    print("-" * len(header))
    print(f"{'notebook fp32':<18} {main_run.probe:>9.1f} {main_run.probe_all:>11.1f} {'':>14} {1:>10.2f}x "
          f"{'':>19} {'':>8} {notebook_tokens:>14.1f}")
    for s in (main_run, *peers):  # every ratio is this row's side over the column's: > 1 means this side is faster
        against = s.vs_probe / main_run.vs_probe
        print(f"{s.name:<18} {s.rate:>9.1f} {s.rate_all:>11.1f} {s.probe:>14.1f} {s.vs_probe:>10.2f}x "
              f"{against:>18.2f}x {s.rate / main_run.rate:>7.2f}x {s.tokens:>14.1f}")


def print_prediction(rates: dict[str, float], preds: dict[str, np.ndarray], target: np.ndarray,
                     tokens: dict[str, float]) -> None:
    base, ref = rates["notebook fp32"], preds["torch fp32"]
    print("\n| path | rows/s | vs notebook | vs torch fp32 | Pearson (labels) | Pearson vs torch fp32 | "
          "max abs diff vs fp32 | padded tok/row |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rate in rates.items():
        out = preds[name]
        print(f"| {name} | {rate:.0f} | {rate / base:.2f}x | {rate / rates['torch fp32']:.2f}x | "
              f"{pearson(out, target):.4f} | {pearson(out, ref):.5f} | {np.max(np.abs(out - ref)):.2e} | "
              f"{tokens[name]:.1f} |")


def best_accurate_path(rates: dict[str, float], preds: dict[str, np.ndarray], target: np.ndarray) -> str:
    """The fastest attnpool path whose Pearson with the labels is within ``PEARSON_TOLERANCE`` of torch fp32's."""
    reference = pearson(preds["torch fp32"], target)
    accurate = [name for name in rates if name != "notebook fp32"
                and abs(pearson(preds[name], target) - reference) <= PEARSON_TOLERANCE]
    return max(accurate, key=rates.__getitem__)


# --------------------------------------------------------------------------------------------------- main


def missing_modules(names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` that are not installed."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def drop_missing_peers(args: argparse.Namespace) -> None:
    """Turn off the sides whose optional extras are missing, with a note, before anything trains.

    The CrossEncoder needs sentence-transformers and datasets (``pip install 'attnpool[sentence-transformers]'``);
    without them it failed with ``ModuleNotFoundError`` after the main run and the fp32 peer had trained.
    """
    missing = missing_modules(CROSS_ENCODER_MODULES) if args.cross_encoder else []
    if missing:
        args.cross_encoder = False
        print(f"note: the CrossEncoder peer is skipped: {', '.join(missing)} not installed (pip install "
              "'attnpool[sentence-transformers]')", flush=True)
    missing = missing_modules(ONNX_MODULES)
    if missing:
        print(f"note: the ONNX prediction paths are skipped: {', '.join(missing)} not installed (pip install "
              "'attnpool[onnx]')", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    if not (Path(args.data_dir) / "train.csv").is_file():
        if args.data_dir_given:  # a mistyped path: an error, not a clean skip that measured nothing
            parser.error(f"--data-dir {args.data_dir}: no train.csv there (see ../shared/data/pppm/README.md)")
        print(f"skipped: no PPPM train.csv in {args.data_dir} (give --data-dir; see ../shared/data/pppm/README.md)")
        return 0
    drop_missing_peers(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    logging.basicConfig(level=logging.WARNING)
    import transformers

    from attnpool.precision import precision_reason

    transformers.logging.set_verbosity_error()
    data = load_data(args)
    ours, theirs = build_models(args, data)
    fp32_start = copy.deepcopy(ours) if args.fp32_reference and data.precision != "fp32" else None
    print(f"model {args.model}; {len(data.train_idx)} training + {len(data.held_idx)} held-out PPPM rows "
          f"(seed {args.seed}), {args.epochs:g} epoch(s), batch {args.batch_size}; notebook pads to {data.max_len} "
          f"tokens; attnpool precision: {precision_reason(args.precision, 'cpu')}; attnpool word embeddings "
          f"{'frozen' if data.cfg.resolved_freeze_word_embeddings() else 'trained'}; notebook fp32; torch "
          f"{torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads on "
          f"{cpu_model()}",
          flush=True)
    target = np.asarray(data.task.labels[data.held_idx], dtype=np.float64)
    with tempfile.TemporaryDirectory(prefix="pppm_throughput_") as folder:
        tmp = Path(folder)
        main_run, notebook = train_both(args, data, ours, theirs, tmp)
        paths = prediction_paths(args, data, one_fold_run(tmp / "run", data, ours), theirs)
        rates, preds = predict_all(paths, args.predict_repeats)
        peers: list[Section] = []
        reference = None
        if fp32_start is not None:
            peers.append(train_fp32_reference(args, data, fp32_start, notebook, tmp))
            reference = predict_saved(one_fold_run(tmp / "run_fp32", data, fp32_start), data, args.predict_batch_size)
        cross = None
        if args.cross_encoder:
            section, scores, ce_rate = train_cross_encoder(args, data, notebook, tmp)
            peers.append(section)
            cross = (section, scores, ce_rate)

    print_training(main_run, peers, float(data.max_len))
    tokens = {name: float(data.max_len) if name.startswith("notebook") else padded_tokens(data, args.predict_batch_size)
              for name in rates}
    print(f"\nprediction of the trained attnpool model ({data.precision}-trained) on {len(target)} held-out rows: "
          f"batch {args.predict_batch_size} length-sorted (notebook: {args.notebook_predict_batch_size}, file "
          f"order, padded to {data.max_len}); median of {args.predict_repeats} alternating passes after a warm-up")
    print_prediction(rates, preds, target, tokens)
    ours_scores = preds["torch fp32"]

    print()
    ratio = main_run.vs_probe
    print(f"train   attnpool {data.precision}/notebook {ratio:6.2f}x  target >= {TRAIN_TARGET:g}x  "
          f"{VERDICT[ratio >= TRAIN_TARGET]}   (all timed steps: {main_run.rate_all / main_run.probe_all:.2f}x)")
    if reference is not None:
        stats = pearson_diff(ours_scores, reference, target, args.bootstrap, args.seed)
        print(fp32_reference_line(data.precision, stats, main_run, peers[0]))
    best = best_accurate_path(rates, preds, target)
    ratio = rates[best] / rates["notebook fp32"]
    print(f"predict {best}/notebook {ratio:6.2f}x  target >= {PREDICT_TARGET:g}x with Pearson within "
          f"{PEARSON_TOLERANCE} of torch fp32's  {VERDICT[ratio >= PREDICT_TARGET]}   (the fastest path that "
          "meets the accuracy condition)")
    print(compare_line("Pearson attnpool - notebook", pearson_diff(ours_scores, preds["notebook fp32"], target,
                                                                    args.bootstrap, args.seed)))
    if cross is not None:
        section, scores, ce_rate = cross
        ratio = main_run.vs_probe / section.vs_probe
        print(f"train   attnpool {data.precision}/{section.name} {ratio:6.2f}x (probe-corrected; direct "
              f"{main_run.rate / section.rate:.2f}x, sequential sections)  target >= {CROSS_ENCODER_TARGET:g}x  "
              f"{VERDICT[ratio >= CROSS_ENCODER_TARGET]}")
        print(compare_line(f"Pearson attnpool - {section.name}", pearson_diff(ours_scores, scores, target,
                                                                              args.bootstrap, args.seed)))
        print(f"(CrossEncoder.predict {ce_rate:.0f} rows/s on the held-out rows, batch {args.predict_batch_size}, "
              f"one pass after the others; attnpool torch fp32 {rates['torch fp32']:.0f}, {best} {rates[best]:.0f})")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
