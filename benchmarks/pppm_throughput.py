"""Training and prediction throughput of the attnpool recipe against the PPPM notebook recipe, on the same data.

Both sides fine-tune the same encoder (all-MiniLM-L6-v2 by default, ``--model``) with the same attention-pooling
head on the same PPPM rows for the same number of epochs, then predict the same held-out rows. What differs is
how they run:

* ``attnpool``: its real code paths. ``AttnPoolForSequenceClassification.from_encoder(model, pooling="attention",
  output_activation="sigmoid")``; the PPPM rows and template through ``attnpool.data.task.load_task`` (which
  calls ``attnpool.data.load_pppm`` and tokenises without padding); the recipe's ``transformers.Trainer``, built by
  ``attnpool.training.arguments.training_arguments`` and ``make_trainer`` (``train_sampling_strategy=
  "group_by_length"``, ``DataCollatorWithPadding``, the optimiser of ``attnpool.training.optim.build_optimizer`` /
  ``parameter_groups``, ``max_grad_norm=1``, cosine schedule with 10% warm-up, fp32). One change to the arguments:
  evaluation, checkpoint saving and ``load_best_model_at_end`` are switched off (``dataclasses.replace``), i.e. the
  Trainer is driven directly instead of through the k-fold ``train()``, which would write checkpoints; none of that
  happens inside a training step anyway. Prediction: ``attnpool.prediction.engine.predict_encoded`` (length-sorted,
  dynamically padded batches of ``--predict-batch-size``, default 64 = the recipe's ``eval_batch_size``).
* ``notebook``: a re-expression of the public notebook recipe (the seed's ``AttentionPooling``): ``AutoModel`` of
  the same checkpoint, ``Linear(H, 512) -> Tanh -> Linear(512, 1) -> Softmax(dim=1)`` over all positions, the mask
  multiplied in afterwards and the weights renormalised (``+ 1e-8``), weighted sum, ``Linear(H, 1)``; loss
  ``BCEWithLogitsLoss``, sigmoid for predictions. Its pooler and head start from a copy of attnpool's initial
  pooler/head weights (Xavier, as the seed says), so both sides start from identical weights. Texts (the same
  template strings) are tokenised with ``padding="max_length"`` to the maximum token length of the *whole*
  ``train.csv`` (84 for MiniLM), as the notebook does. Training batches: a ``DataLoader`` with ``shuffle=True``
  (seeded) and batch 16, every batch padded to that maximum (``drop_last=False``, so both sides see the same rows
  and take the same number of steps); plain ``torch.optim.AdamW`` (no ``fused``/``foreach``: on CPU that is the
  per-parameter loop) with the same parameter groups and rates as attnpool (encoder ``--lr``, pooler/head
  ``--head-lr``, weight decay 0.01 except biases and norm weights), ``clip_grad_norm_(1.0)`` as the Trainer (the
  original notebook clips too), the same cosine schedule and warm-up, and its own random stream (dropout), so
  that neither side's result depends on the interleaving. Prediction: batches of 16 in file order,
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

Prediction: after a short untimed warm-up pass of each side, the two full prediction passes
over the held-out rows alternate ``--predict-repeats`` times; the median rate of each side is reported (the whole
call of ``predict_encoded``, including its padding; the notebook's tokenisation is excluded).

Quality. Pearson correlation of each side's predictions with the held-out scores after the same epochs, with a
paired bootstrap standard error of the difference (held-out sampling noise only; seed-to-seed noise of training
comes on top). Pearson "PASS" means attnpool >= notebook - 2 SE.

Rows: ``--rows`` training and ``--predict-rows`` held-out rows, a seeded random sample of ``train.csv``
(``load_task``'s ``limit``), split at random (``--seed``). ``mean padded tokens/row``: the padded length of each
batch times its rows, averaged over rows (training: the timed steps; prediction: all batches).

Usage::

    .venv/bin/python benchmarks/pppm_throughput.py             # 2,000 + 1,000 rows, 1 epoch (~5 min on 2 cores)
    .venv/bin/python benchmarks/pppm_throughput.py --quick     # smoke run: a few steps
    .venv/bin/python benchmarks/pppm_throughput.py --rows 4000 --epochs 2 --model /path/to/encoder

Targets: attnpool/notebook >= 3x on training and on prediction samples/s (PASS/MISS), Pearson no lower. On a
shared CPU compare the ratios of one run, not absolute rates of different runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from notebook_recipe import NotebookAttentionHead

TARGET_SPEEDUP = 3.0
QUIET_FACTOR = 1.5  # a notebook step slower than this times the median marks a load spike
DEFAULT_DATA_DIR = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pppm")


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from attnpool.config import default_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="encoder (hub name or folder); default: the offline MiniLM")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="PPPM folder (train.csv, cpc_texts.csv)")
    p.add_argument("--rows", type=int, default=2000, help="training rows")
    p.add_argument("--predict-rows", type=int, default=1000, help="held-out rows (prediction speed and Pearson)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16, help="training batch of both sides")
    p.add_argument("--predict-batch-size", type=int, default=64, help="attnpool prediction batch (recipe: 64)")
    p.add_argument("--notebook-predict-batch-size", type=int, default=16)
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed first training steps of each side")
    p.add_argument("--predict-repeats", type=int, default=3, help="alternating timed prediction passes per side")
    p.add_argument("--lr", type=float, default=2e-5, help="encoder learning rate (recipe default)")
    p.add_argument("--head-lr", type=float, default=1e-3, help="pooler/head learning rate (recipe default)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples for the Pearson difference")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--dump-steps", default=None, help="write every step's (rows, padded length, seconds) as JSON")
    p.add_argument("--quick", action="store_true", help="smoke run: 96 + 64 rows, 2 warm-up steps, 1 repeat")
    args = p.parse_args(argv)
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


def load_data(args: argparse.Namespace) -> Data:
    from attnpool.config import TrainConfig
    from attnpool.data import PPPM_TEMPLATE, build_texts, load_pppm
    from attnpool.data.task import load_task

    cfg = TrainConfig(preset="pppm", data_dir=args.data_dir, model=args.model, limit=args.rows + args.predict_rows,
                      seed=args.seed, epochs=args.epochs, batch_size=args.batch_size,
                      eval_batch_size=args.predict_batch_size, lr=args.lr, head_lr=args.head_lr, precision="fp32",
                      pooling="attention", output_activation="sigmoid", folds=2)
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
    return Data(task, cfg, train_idx, held_idx, dict(padded), max_len)


# --------------------------------------------------------------------------------------------------- models


def build_models(args: argparse.Namespace, data: Data):
    from transformers import set_seed

    from attnpool.model import AttnPoolForSequenceClassification

    set_seed(args.seed)
    ours = AttnPoolForSequenceClassification.from_encoder(
        args.model, pooling="attention", output_activation="sigmoid", num_labels=1, problem_type="regression",
        head_dropout=data.cfg.head_dropout)
    theirs = NotebookModel(args.model)
    pooler, head = ours.attnpool.pooler, ours.head.out
    with torch.no_grad():  # identical starting weights: the encoder from the checkpoint, pooler and head copied
        theirs.pool.attention[0].weight.copy_(pooler.proj.weight)
        theirs.pool.attention[0].bias.copy_(pooler.proj.bias)
        theirs.pool.attention[2].weight.copy_(pooler.score.weight)
        theirs.pool.attention[2].bias.zero_()  # attnpool's scorer has no bias (a softmax ignores it)
        theirs.head.weight.copy_(head.weight)
        theirs.head.bias.copy_(head.bias)
    mine = ours.attnpool.encoder.state_dict()
    for name, value in theirs.encoder.state_dict().items():
        assert torch.equal(value, mine[name]), f"encoder weights differ: {name}"
    return ours, theirs


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
    """Wraps the Trainer's collator to note each batch's ``(rows, padded length)``; nothing else changes."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """Collate as the wrapped collator does, noting the batch shape."""
        batch = self.collator(features)
        self.shapes.append(tuple(batch["input_ids"].shape))
        return batch


def make_interleaver(notebook: NotebookTrainer):
    """A TrainerCallback timing attnpool's steps and running one notebook step after each."""
    from transformers import TrainerCallback

    class Interleaver(TrainerCallback):
        def __init__(self) -> None:
            self.step_seconds: list[float] = []  # attnpool step i: on_step_begin(i) -> on_step_begin(i + 1)
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
    flags a spike; attnpool's step ``i`` runs between notebook steps ``i - 1`` and ``i``. attnpool's own steps vary
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


def train_both(args: argparse.Namespace, data: Data, ours, theirs) -> dict[str, dict[str, float]]:
    from attnpool.data.task import EncodedDataset
    from attnpool.training.arguments import training_arguments
    from attnpool.training.trainer import make_trainer

    cfg = data.cfg
    train_ds = EncodedDataset(data.task.encodings, data.task.labels, data.train_idx)
    steps_per_epoch = max(1, math.ceil(len(train_ds) / cfg.batch_size))
    total_steps = math.ceil(steps_per_epoch * cfg.epochs)
    with tempfile.TemporaryDirectory(prefix="pppm_throughput_") as tmp:
        targs = training_arguments(cfg, Path(tmp), steps_per_epoch)
        targs = dataclasses.replace(targs, eval_strategy="no", save_strategy="no", load_best_model_at_end=False)
        trainer = make_trainer(cfg, ours, targs, train_ds, None, data.task.tokenizer)
        recorder = ShapeRecorder(trainer.data_collator)
        trainer.data_collator = recorder
        notebook = NotebookTrainer(theirs, data, args, total_steps)
        timer = make_interleaver(notebook)
        trainer.add_callback(timer)
        trainer.train()
    while notebook.steps < trainer.state.global_step:  # never expected: both sides take the same steps
        notebook.step()
    ours_log = [(r, t, sec) for (r, t), sec in zip(recorder.shapes, timer.step_seconds, strict=False)]
    theirs_log = notebook.step_log
    timed = list(range(args.warmup_steps, len(ours_log)))
    if not timed:
        raise SystemExit("no timed training step: lower --warmup-steps or raise --rows")
    quiet = quiet_steps(ours_log, theirs_log, timed)
    out: dict[str, dict[str, float]] = {}
    for side, log in (("attnpool", ours_log), ("notebook", theirs_log)):
        rows = sum(log[i][0] for i in timed)
        out[side] = {
            "train_all": rows / sum(log[i][2] for i in timed),
            "train": sum(log[i][0] for i in quiet) / sum(log[i][2] for i in quiet) if quiet else float("nan"),
            "train_tokens": sum(log[i][0] * log[i][1] for i in timed) / rows,
            "median_step": statistics.median(log[i][2] for i in timed),
        }
    print(f"training: {trainer.state.global_step} steps per side (attnpool optimizer fused="
          f"{trainer.optimizer.defaults.get('fused')}); timed steps {timed[0]}..{timed[-1]}, of which {len(quiet)} "
          f"quiet; median step {out['attnpool']['median_step']:.3f} s (attnpool) vs "
          f"{out['notebook']['median_step']:.3f} s (notebook)", flush=True)
    if args.dump_steps:
        import json

        steps = {"attnpool": ours_log, "notebook": theirs_log, "timed": timed, "quiet": quiet}
        Path(args.dump_steps).write_text(json.dumps(steps), encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------------------- prediction


def predict_attnpool(model, data: Data, rows: np.ndarray, batch_size: int) -> np.ndarray:
    from attnpool.prediction.engine import predict_encoded
    from attnpool.tasks import scores_from_logits

    logits = predict_encoded([model], data.task.encodings, rows, batch_size, data.task.tokenizer, device="cpu")[0]
    return scores_from_logits("regression", logits)


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


def predict_both(args: argparse.Namespace, data: Data, ours, theirs) -> tuple[dict[str, dict[str, float]], dict]:
    from attnpool.data.batching import length_sorted_batches

    held = data.held_idx
    warm = held[: min(len(held), 2 * args.predict_batch_size)]
    predict_attnpool(ours, data, warm, args.predict_batch_size)
    predict_notebook(theirs, data, warm, args.notebook_predict_batch_size)
    rates: dict[str, list[float]] = {"attnpool": [], "notebook": []}
    preds: dict[str, np.ndarray] = {}
    for _ in range(args.predict_repeats):
        start = time.perf_counter()
        preds["attnpool"] = predict_attnpool(ours, data, held, args.predict_batch_size)
        rates["attnpool"].append(len(held) / (time.perf_counter() - start))
        start = time.perf_counter()
        preds["notebook"] = predict_notebook(theirs, data, held, args.notebook_predict_batch_size)
        rates["notebook"].append(len(held) / (time.perf_counter() - start))
    lengths = [len(data.task.encodings["input_ids"][i]) for i in held]
    padded = sum(len(b) * max(lengths[j] for j in b) for b in length_sorted_batches(lengths, args.predict_batch_size))
    out = {
        "attnpool": {"predict": statistics.median(rates["attnpool"]), "predict_tokens": padded / len(held)},
        "notebook": {"predict": statistics.median(rates["notebook"]), "predict_tokens": float(data.max_len)},
    }
    return out, preds


def pearson_stats(preds: dict[str, np.ndarray], target: np.ndarray, resamples: int, seed: int) -> dict[str, float]:
    def r(x: np.ndarray, y: np.ndarray) -> float:
        return float(np.corrcoef(x, y)[0, 1]) if np.std(x) > 0 and np.std(y) > 0 else float("nan")

    a, b = preds["attnpool"], preds["notebook"]
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(resamples):
        i = rng.integers(0, len(target), len(target))
        diffs.append(r(a[i], target[i]) - r(b[i], target[i]))
    return {"attnpool": r(a, target), "notebook": r(b, target), "se": float(np.nanstd(diffs))}


# --------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    logging.basicConfig(level=logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()
    data = load_data(args)
    ours, theirs = build_models(args, data)
    print(f"model {args.model}; {len(data.train_idx)} training + {len(data.held_idx)} held-out PPPM rows "
          f"(seed {args.seed}), {args.epochs:g} epoch(s), batch {args.batch_size}; notebook pads to {data.max_len} "
          f"tokens; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results = train_both(args, data, ours, theirs)
    predicted, preds = predict_both(args, data, ours, theirs)
    for side in results:
        results[side].update(predicted[side])
    target = np.asarray(data.task.labels[data.held_idx], dtype=np.float64)
    pearson = pearson_stats(preds, target, args.bootstrap, args.seed)

    a, b = results["attnpool"], results["notebook"]
    print(f"\ntrain samples/s: quiet steps (see the module docstring); predict batch: attnpool "
          f"{args.predict_batch_size} (length-sorted), notebook {args.notebook_predict_batch_size} (file order); "
          f"predict rates: median of {args.predict_repeats} alternating passes")
    header = (f"{'side':<9} {'train samples/s':>15} {'(all steps)':>11} {'predict samples/s':>17} {'Pearson':>8} "
              f"{'padded tok/row train':>20} {'predict':>7}")
    print(header)
    print("-" * len(header))
    for side, res in results.items():
        print(f"{side:<9} {res['train']:>15.1f} {res['train_all']:>11.1f} {res['predict']:>17.1f} "
              f"{pearson[side]:>8.4f} {res['train_tokens']:>20.1f} {res['predict_tokens']:>7.1f}")
    print()
    train_ratio, predict_ratio = a["train"] / b["train"], a["predict"] / b["predict"]
    diff = pearson["attnpool"] - pearson["notebook"]
    verdict = {True: "PASS", False: "MISS"}
    print(f"train   attnpool/notebook {train_ratio:6.2f}x  target >= {TARGET_SPEEDUP:g}x  "
          f"{verdict[train_ratio >= TARGET_SPEEDUP]}   (all timed steps: {a['train_all'] / b['train_all']:.2f}x)")
    print(f"predict attnpool/notebook {predict_ratio:6.2f}x  target >= {TARGET_SPEEDUP:g}x  "
          f"{verdict[predict_ratio >= TARGET_SPEEDUP]}")
    print(f"Pearson attnpool - notebook {diff:+.4f} (paired bootstrap SE {pearson['se']:.4f})  target >= -2 SE  "
          f"{verdict[bool(diff >= -2 * pearson['se'])]}")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
