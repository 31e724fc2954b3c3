"""Two reference recipes trained on exactly the rows attnpool trains a fold on, for paired quality comparisons.

Both functions take attnpool's own inputs (a :class:`~attnpool.config.TrainConfig` and the
:class:`~attnpool.data.task.TaskData` of ``load_task``) and the row indices of one fold, and return the
predictions of the validation rows in attnpool's convention (what ``attnpool.tasks.scores_from_logits``
gives): regression ``(len(valid_idx),)`` values, classification ``(len(valid_idx), num_classes)`` probabilities
with the columns in ``data.classes`` order; rows in the order of ``valid_idx``. So they pair row by row with
attnpool's out-of-fold predictions.

``notebook_scores``: the public PPPM baseline notebook (Y. Nakama, "PPPM / Deberta-v3-large baseline [train]",
Kaggle 2022), transcribed:

* model: ``AutoModel`` of ``cfg.model``; the attention head ``Linear(H, 512) -> Tanh -> Linear(512, 1) ->
  Softmax(dim=1)`` (``notebook_recipe.NotebookAttentionHead``) over *all* positions, padding included, with no mask,
  as the notebook (the encoder itself gets the attention mask); ``Dropout(0.2)`` (``fc_dropout``); ``Linear(H,
  n_out)``. Every ``Linear`` of the attention and the output layer starts from normal(0, ``initializer_range`` of
  the encoder config) with zero bias, the notebook's ``_init_weights``. (The notebook calls ``_init_weights`` on the
  ``nn.Sequential`` of the attention itself, which, read literally, is not an ``nn.Linear`` and stays at PyTorch's
  default initialisation; here its Linears are initialised as the fc is, as the benchmark specifies.)
* inputs: the token ids attnpool trains on (``data.encodings``: same template, same truncation), right-padded to
  one length, the longest row of the data capped at ``cfg.max_length``, as the notebook pads every text to its
  ``max_len``; padding id of the tokenizer, mask 0, token type 0 (what ``padding="max_length"`` writes).
* optimiser: ``torch.optim.AdamW`` with one learning rate, 2e-5 (the notebook's ``encoder_lr = decoder_lr``),
  ``eps=1e-6``, ``betas=(0.9, 0.999)``; the notebook's three groups: encoder weights with weight decay 0.01, encoder
  biases and LayerNorm parameters (names containing ``bias``, ``LayerNorm.bias``, ``LayerNorm.weight``) without, and
  the new layers (attention and fc) without (its third group has ``weight_decay=0``).
* schedule: ``get_cosine_schedule_with_warmup`` with 0 warm-up steps and 0.5 cycles, stepped every batch.
* data order: a ``DataLoader`` with ``shuffle=True`` and a generator seeded by ``seed``, batch ``cfg.batch_size``.
  ``drop_last=False`` (the notebook drops the last partial batch): every training row is seen, as attnpool sees
  them. ``torch.manual_seed(seed)`` before the model is built seeds the new layers and the dropout.
* loss: ``BCEWithLogitsLoss`` (mean) for regression (targets in [0, 1], sigmoid for predictions, as the notebook on
  PPPM), for binary (one logit; the probabilities are ``[1 - p, p]`` in ``data.classes`` order) and for multilabel
  (one logit per class); ``CrossEntropyLoss`` over ``len(data.classes)`` logits for multiclass.
* steps: ``ceil(ceil(rows / batch) * cfg.epochs)`` in all (``cfg.epochs`` may be fractional; ``ceil`` as the
  ``Trainer`` counts attnpool's steps); gradients clipped at norm 1000 (``max_grad_norm``); fp32 (the notebook's
  ``apex`` fp16 autocast is left out), on CUDA when there is one, else the CPU.
* selection: the validation rows are predicted after every epoch (and after the last, partial one) in batches of
  ``cfg.eval_batch_size``; the predictions of the best epoch by the task's primary metric
  (``attnpool.tasks.primary_metric``: Pearson for regression, accuracy for classification) are returned,
  as the notebook keeps its best epoch and attnpool its best evaluation.

``cross_encoder_scores``: sentence-transformers' cross-encoder fine-tuning recipe (the v4+ training API, checked
against the installed v6: ``CrossEncoder`` + ``CrossEncoderTrainer`` + ``CrossEncoderTrainingArguments`` +
``losses.BinaryCrossEntropyLoss``), regression only:

* model: ``CrossEncoder(cfg.model, num_labels=1, max_length=cfg.max_length)``. On a plain encoder checkpoint (or a
  SentenceTransformer one such as all-MiniLM-L6-v2, which it converts) this is ``AutoModelForSequenceClassification``
  with one label: the model's own head on ``[CLS]`` (for BERT: the pre-trained pooler, then a new ``Linear(H, 1)``).
  ``transformers.set_seed(seed)`` before it is built seeds the new layer.
* inputs: text pairs from :func:`pair_texts`, tokenised by the cross-encoder as pairs (``[CLS] a [SEP] b [SEP]``,
  segment ids 0 / 1), truncated to ``cfg.max_length``.
* loss: ``BinaryCrossEntropyLoss`` (``BCEWithLogitsLoss`` on the one logit) with the [0, 1] targets.
* recipe: the library's documented defaults for cross-encoder training, which its STS-benchmark and reranker examples
  use: learning rate 2e-5 (also the default of the old ``CrossEncoder.fit``), a linear schedule with 10% warm-up
  (``warmup_steps=0.1``, transformers 5's ratio form), the ``TrainingArguments`` defaults otherwise (AdamW, weight
  decay 0, gradient clipping at 1.0); batch ``cfg.batch_size``, ``cfg.epochs`` epochs, ``seed=seed`` (also the
  shuffling seed of its batch sampler), fp32 (no ``bf16``/``fp16``).
* selection: a callback predicts the validation rows at the end of every epoch (``CrossEncoder.predict`` with
  ``nn.Sigmoid()`` as activation, which v6 also uses by default for one label) and keeps the best epoch's
  predictions by Pearson in memory, the same selection as ``notebook_scores``; nothing is saved
  (``save_strategy="no"``; the ``Trainer``'s ``output_dir`` is a temporary folder, removed afterwards).
* quiet: ``disable_tqdm=True``, ``report_to=[]``, the ``Trainer``'s ``PrinterCallback`` removed; one log line per
  epoch (train loss, validation Pearson) through ``logging``, as for the notebook. Both functions switch off
  transformers' "Loading weights" bar while the model loads (and restore the setting); transformers' load report of
  the newly initialised ``classifier`` weights (a warning) is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnpool.config import TrainConfig
from attnpool.data.task import TaskData
from attnpool.metrics import task_metrics
from attnpool.tasks import primary_metric
from notebook_recipe import NotebookAttentionHead

log = logging.getLogger(__name__)

NOTEBOOK_LR = 2e-5  # the notebook's encoder_lr and decoder_lr
NOTEBOOK_WEIGHT_DECAY = 0.01
NOTEBOOK_NO_DECAY = ("bias", "LayerNorm.bias", "LayerNorm.weight")  # substrings, as the notebook matches them
NOTEBOOK_EPS = 1e-6
NOTEBOOK_BETAS = (0.9, 0.999)
NOTEBOOK_DROPOUT = 0.2  # fc_dropout
NOTEBOOK_MAX_GRAD_NORM = 1000.0
CROSS_ENCODER_LR = 2e-5
CROSS_ENCODER_WARMUP = 0.1  # a ratio of the training steps
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class NotebookClassifier(nn.Module):
    """The notebook's ``CustomModel``: encoder, attention pooling over every position, dropout, one linear layer.

    Args:
        model_name: Encoder checkpoint (hub name or folder) for ``AutoModel.from_pretrained``.
        num_outputs: Logits per row: 1 for one regression target or a binary task, else targets or classes.

    Shapes:
        ``input_ids``, ``attention_mask``, ``token_type_ids`` ``(B, T)`` -> logits ``(B, num_outputs)``.
    """

    def __init__(self, model_name: str, num_outputs: int) -> None:
        super().__init__()
        from transformers import AutoModel

        self.model = AutoModel.from_pretrained(model_name)  # `model`: the notebook's name, which its groups test
        hidden = self.model.config.hidden_size
        self.attention = NotebookAttentionHead(hidden)
        self.fc_dropout = nn.Dropout(NOTEBOOK_DROPOUT)
        self.fc = nn.Linear(hidden, num_outputs)
        std = getattr(self.model.config, "initializer_range", 0.02)
        for module in (*self.attention.modules(), self.fc):
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0, std=std)
                module.bias.data.zero_()

    def forward(self, **inputs: Tensor) -> Tensor:
        """Raw logits ``(B, num_outputs)``."""
        hidden = self.model(**inputs).last_hidden_state  # (B, T, H)
        pooled = self.attention(hidden)  # (B, H); no mask: the softmax spans the padding too, as in the notebook
        return self.fc(self.fc_dropout(pooled))  # (B, num_outputs)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Switch off transformers' progress bars (its "Loading weights" bar) for the block, then restore the setting."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _check_unit_targets(data: TaskData, rows: np.ndarray) -> None:
    """BCE needs regression targets in [0, 1]; refuse others rather than train on a meaningless loss."""
    values = np.asarray(data.labels[rows], dtype=np.float64)
    if len(values) and (np.nanmin(values) < 0 or np.nanmax(values) > 1):
        raise ValueError(f"the reference recipes train regression with BCE, which needs targets in [0, 1]; "
                         f"{data.label_name!r} ranges over [{np.nanmin(values):g}, {np.nanmax(values):g}]")


def _padded_inputs(data: TaskData, rows: np.ndarray, max_len: int) -> dict[str, Tensor]:
    """The rows' token lists right-padded to ``max_len``, as ``padding="max_length"`` pads them.

    Shapes:
        each value ``(len(rows), max_len)``.
    """
    pad_id = data.tokenizer.pad_token_id if data.tokenizer.pad_token_id is not None else 0
    fill = {"input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0}
    out = {}
    for key in (k for k in INPUT_KEYS if k in data.encodings):
        values = torch.full((len(rows), max_len), fill[key], dtype=torch.long)
        for i, row in enumerate(rows):
            ids = list(data.encodings[key][int(row)])[:max_len]
            values[i, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        out[key] = values
    return out


def _notebook_groups(model: NotebookClassifier) -> list[dict[str, Any]]:
    """The notebook's ``get_optimizer_params``: encoder with / without decay, the new layers without."""
    encoder = list(model.model.named_parameters())
    return [
        {"params": [p for n, p in encoder if not any(nd in n for nd in NOTEBOOK_NO_DECAY)], "lr": NOTEBOOK_LR,
         "weight_decay": NOTEBOOK_WEIGHT_DECAY},
        {"params": [p for n, p in encoder if any(nd in n for nd in NOTEBOOK_NO_DECAY)], "lr": NOTEBOOK_LR,
         "weight_decay": 0.0},
        {"params": [p for n, p in model.named_parameters() if not n.startswith("model.")], "lr": NOTEBOOK_LR,
         "weight_decay": 0.0},
    ]


def _notebook_targets(task: str, labels: np.ndarray) -> Tensor:
    """Loss targets: class ids (multiclass) or floats shaped like the logits."""
    if task == "multiclass":
        return torch.as_tensor(labels, dtype=torch.long)
    values = torch.as_tensor(labels, dtype=torch.float32)
    return values.view(len(values), -1)  # (N, n_out): one column, or one per target / label


def _notebook_probabilities(task: str, logits: Tensor) -> np.ndarray:
    """Logits ``(N, n_out)`` -> attnpool's scores: values ``(N,)`` / ``(N, k)``, or class probabilities ``(N, C)``."""
    logits = logits.double()
    if task == "multiclass":
        return torch.softmax(logits, dim=1).numpy()
    p = torch.sigmoid(logits)
    if task == "binary":
        return torch.cat([1 - p, p], dim=1).numpy()  # (N, 2): classes[0], classes[1]
    if task == "regression" and p.shape[1] == 1:
        return p[:, 0].numpy()
    return p.numpy()


class _BestEpoch:
    """Keeps the predictions of the best evaluation by the task's primary metric (NaN never wins)."""

    def __init__(self, task: str, target: np.ndarray) -> None:
        self.task, self.target = task, target
        self.metric, self.greater = primary_metric(task)
        self.value = math.nan
        self.scores: np.ndarray | None = None

    def update(self, scores: np.ndarray) -> tuple[float, bool]:
        """Score one evaluation; returns its metric and whether it is the best so far."""
        value = float(task_metrics(self.task, self.target, scores)[self.metric])
        better = value > self.value if self.greater else value < self.value
        best = self.scores is None or (not math.isnan(value) and (math.isnan(self.value) or better))
        if best:
            self.value, self.scores = value, scores
        return value, best


def notebook_scores(cfg: TrainConfig, data: TaskData, train_idx: np.ndarray, valid_idx: np.ndarray,
                    seed: int) -> np.ndarray:
    """Train the PPPM notebook's recipe on ``train_idx`` and predict ``valid_idx`` (see the module docstring).

    Args:
        cfg: Uses ``model``, ``epochs``, ``batch_size``, ``eval_batch_size``, ``max_length`` and ``task``.
        data: ``load_task(cfg, log)``: its token lists, labels and classes.
        train_idx: Rows of ``data`` to train on.
        valid_idx: Rows to evaluate after every epoch and to predict.
        seed: Seeds the new layers, the dropout and the data order.

    Returns:
        The best epoch's predictions of ``valid_idx``, in that order: values ``(n,)`` for one regression target
        (``(n, k)`` for ``k``), probabilities ``(n, num_classes)`` in ``data.classes`` order for classification.

    Raises:
        ValueError: Regression targets outside [0, 1] (the recipe's BCE needs them there).
    """
    from transformers import get_cosine_schedule_with_warmup

    task = cfg.task
    train_idx, valid_idx = np.asarray(train_idx), np.asarray(valid_idx)
    if task == "regression":
        _check_unit_targets(data, np.concatenate([train_idx, valid_idx]))
    device = _device()
    num_outputs = 1 if task == "binary" else data.num_outputs
    max_len = min(max((len(ids) for ids in data.encodings["input_ids"]), default=1), cfg.max_length)

    torch.manual_seed(seed)
    with _no_progress_bars():
        model = NotebookClassifier(cfg.model, num_outputs).to(device)
    train_inputs = _padded_inputs(data, train_idx, max_len)
    keys = list(train_inputs)
    dataset = torch.utils.data.TensorDataset(*train_inputs.values(), _notebook_targets(task, data.labels[train_idx]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=False,
                                         generator=torch.Generator().manual_seed(seed))
    valid_inputs = _padded_inputs(data, valid_idx, max_len)
    optimizer = torch.optim.AdamW(_notebook_groups(model), lr=NOTEBOOK_LR, eps=NOTEBOOK_EPS, betas=NOTEBOOK_BETAS)
    total_steps = max(1, math.ceil(len(loader) * cfg.epochs))
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=total_steps,
                                                num_cycles=0.5)
    criterion = nn.CrossEntropyLoss() if task == "multiclass" else nn.BCEWithLogitsLoss()
    best = _BestEpoch(task, data.labels[valid_idx])
    epochs, steps = math.ceil(total_steps / len(loader)), 0
    for epoch in range(epochs):
        model.train()
        losses = []
        for *features, target in loader:
            if steps == total_steps:
                break
            inputs = {k: v.to(device) for k, v in zip(keys, features, strict=True)}
            logits = model(**inputs)  # (B, n_out)
            loss = criterion(logits, target.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), NOTEBOOK_MAX_GRAD_NORM)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            steps += 1
        scores = _notebook_probabilities(task, _notebook_logits(model, valid_inputs, cfg.eval_batch_size, device))
        value, is_best = best.update(scores)
        log.info("notebook: epoch %d/%d (%d steps), train loss %.4f, valid %s %.4f%s", epoch + 1, epochs, steps,
                 float(np.mean(losses)), best.metric, value, " (best)" if is_best else "")
    return best.scores


@torch.no_grad()
def _notebook_logits(model: NotebookClassifier, inputs: dict[str, Tensor], batch_size: int,
                     device: torch.device) -> Tensor:
    """Logits ``(N, n_out)`` of padded inputs, in their order, in eval mode."""
    model.eval()
    n = len(next(iter(inputs.values())))
    out = [model(**{k: v[i : i + batch_size].to(device) for k, v in inputs.items()}).float().cpu()
           for i in range(0, n, batch_size)]
    return torch.cat(out) if out else torch.zeros(0, model.fc.out_features)


def pair_texts(cfg: TrainConfig, data: TaskData) -> tuple[list[str], list[str]]:
    """The two texts of every row of ``data.frame`` for a cross-encoder, carrying what attnpool's text carries.

    * PPPM preset: ``(anchor, target [SEP] context_text)``, where attnpool trains on the one text
      ``"{anchor} [SEP] {target} [SEP] {context_text}"``; ``[SEP]`` is the tokenizer's separator, as
      ``attnpool.data.build_texts`` writes it.
    * two ``cfg.text_cols``: the two columns, the text pair attnpool tokenises too.

    Missing or blank cells become ``""``, as in ``build_texts``.

    Args:
        cfg: The config ``data`` was loaded with (``preset``, ``text_cols``).
        data: The loaded rows (``frame``, ``tokenizer``).

    Returns:
        ``(first, second)``, one string per row of ``data.frame``.

    Raises:
        ValueError: Any other text construction (one column, three or more, a custom template).
    """
    from attnpool.data import build_texts

    sep = data.tokenizer.sep_token or "[SEP]"
    if cfg.preset == "pppm":
        first = build_texts(data.frame, ["anchor"], sep_token=sep).first
        second = build_texts(data.frame, template="{target} [SEP] {context_text}", sep_token=sep).first
        return first, second
    cols = list(cfg.text_cols or [])
    if len(cols) == 2 and not cfg.template:
        first, second, _ = build_texts(data.frame, cols, sep_token=sep)
        return first, second
    raise ValueError(f"pair_texts builds text pairs for the PPPM preset or two text_cols; got preset={cfg.preset!r}, "
                     f"text_cols={cols!r}, template={cfg.template!r}")


def cross_encoder_scores(cfg: TrainConfig, data: TaskData, train_idx: np.ndarray, valid_idx: np.ndarray,
                         seed: int) -> np.ndarray:
    """Fine-tune a sentence-transformers ``CrossEncoder`` on ``train_idx`` and predict ``valid_idx``.

    See the module docstring for the recipe. Regression on [0, 1] targets only (the benchmark runs it on PPPM).

    Args:
        cfg: Uses ``model``, ``epochs``, ``batch_size``, ``eval_batch_size``, ``max_length``, ``task`` and the text
            construction (see :func:`pair_texts`).
        data: ``load_task(cfg, log)``: its frame and labels.
        train_idx: Rows of ``data`` to train on.
        valid_idx: Rows to evaluate after every epoch and to predict.
        seed: Seeds the new output layer, the dropout and the data order.

    Returns:
        The best epoch's (by Pearson) sigmoid scores of ``valid_idx``, in that order, shape ``(n,)``.

    Raises:
        ValueError: A task other than regression with one target, targets outside [0, 1], or a text construction
            :func:`pair_texts` does not handle.
    """
    import datasets
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers import PrinterCallback, TrainerCallback, set_seed

    if cfg.task != "regression" or data.labels.ndim != 1:
        raise ValueError(f"cross_encoder_scores supports regression with one target in [0, 1] only (a BCE "
                         f"cross-encoder with one label); got task={cfg.task!r} with labels of shape "
                         f"{tuple(data.labels.shape)}")
    train_idx, valid_idx = np.asarray(train_idx), np.asarray(valid_idx)
    _check_unit_targets(data, np.concatenate([train_idx, valid_idx]))
    first, second = pair_texts(cfg, data)
    train_ds = datasets.Dataset.from_dict({
        "sentence1": [first[i] for i in train_idx],
        "sentence2": [second[i] for i in train_idx],
        "label": [float(data.labels[i]) for i in train_idx],
    })
    valid_pairs = [(first[i], second[i]) for i in valid_idx]
    best = _BestEpoch("regression", data.labels[valid_idx])
    epochs = math.ceil(cfg.epochs)

    set_seed(seed)
    with _no_progress_bars():
        model = CrossEncoder(cfg.model, num_labels=1, max_length=cfg.max_length, device=str(_device()))

    class EpochEvaluation(TrainerCallback):
        """Predict the validation rows at each epoch's end; log one line when the epoch's train loss comes."""

        def __init__(self) -> None:
            self.pending: tuple[float, bool] | None = None

        def on_epoch_end(self, args, state, control, **kwargs):
            scores = model.predict(valid_pairs, batch_size=cfg.eval_batch_size, show_progress_bar=False,
                                   activation_fn=nn.Sigmoid())
            self.pending = best.update(np.asarray(scores, dtype=np.float64).reshape(-1))

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.pending is None or "loss" not in (logs or {}):
                return
            (value, is_best), self.pending = self.pending, None
            log.info("cross-encoder: epoch %d/%d (%d steps), train loss %.4f, valid pearson %.4f%s",
                     math.ceil(state.epoch or 0), epochs, state.global_step, logs["loss"], value,
                     " (best)" if is_best else "")

    with tempfile.TemporaryDirectory(prefix="references_ce_") as tmp:
        args = CrossEncoderTrainingArguments(
            output_dir=tmp,
            num_train_epochs=cfg.epochs,
            per_device_train_batch_size=cfg.batch_size,
            per_device_eval_batch_size=cfg.eval_batch_size,
            learning_rate=CROSS_ENCODER_LR,
            warmup_steps=CROSS_ENCODER_WARMUP,  # < 1: a ratio of the training steps (transformers 5)
            seed=seed,
            data_seed=seed,
            eval_strategy="no",  # the callback evaluates, without the Trainer's eval loss pass
            save_strategy="no",
            logging_strategy="epoch",
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            use_cpu=not torch.cuda.is_available(),
        )
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds,
                                      loss=BinaryCrossEntropyLoss(model), callbacks=[EpochEvaluation()])
        trainer.remove_callback(PrinterCallback)  # with disable_tqdm the Trainer prints every log dict
        trainer.train()
    return best.scores
