"""A tiny recipe Trainer built in code: a 2-layer random BERT, a word-level tokenizer, a few dozen rows."""

from __future__ import annotations

import math

import numpy as np
import torch
import transformers

from attnpool.config import TrainConfig
from attnpool.data.batching import ENCODING_KEYS
from attnpool.data.datasets import EncodedDataset
from attnpool.model import AttnPoolConfig, AttnPoolForSequenceClassification
from attnpool.training.arguments import training_arguments
from attnpool.training.pooling_stats import PoolingMonitor
from attnpool.training.trainer import make_trainer
from model_helpers import WORDS, tiny_config, tiny_tokenizer

FAST = {"epochs": 2.0, "batch_size": 4, "eval_batch_size": 8, "lr": 1e-3, "head_lr": 1e-3, "max_length": 16,
        "warmup_ratio": 0.0, "pooling_options": {"attn_size": 8}, "precision": "fp32"}


def tiny_model(seed: int = 0, dropout: float = 0.1) -> AttnPoolForSequenceClassification:
    torch.manual_seed(seed)
    encoder = tiny_config("bert")
    encoder.hidden_dropout_prob = encoder.attention_probs_dropout_prob = dropout
    config = AttnPoolConfig(encoder=encoder, pooling={"type": "attention", "attn_size": 8}, num_labels=1,
                            problem_type="regression", head_dropout=dropout)
    return AttnPoolForSequenceClassification(config)


def tiny_rows(n: int = 24, seed: int = 0):
    """Tokenised rows whose label counts a key word, and their labels."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 8))) for _ in range(n)]
    labels = np.array([t.split().count("cat") / 4 + 0.1 * ("red" in t) for t in texts], dtype=np.float32)
    tokenizer = tiny_tokenizer()
    encoded = tokenizer(texts, truncation=True, max_length=16)
    return {k: encoded[k] for k in ENCODING_KEYS if k in encoded}, labels, tokenizer


def tiny_trainer(out_dir, *, model=None, n=24, monitor=False, callbacks=(), **options):
    """``make_trainer`` of a ``TrainConfig`` with ``options`` over ``FAST``, on 2/3 training and 1/3 validation rows."""
    cfg = TrainConfig(train_file="unused.csv", text_cols=["text"], **{**FAST, **options}).validate()
    model = tiny_model() if model is None else model
    encodings, labels, tokenizer = tiny_rows(n)
    rows = np.arange(n)
    train_ds = EncodedDataset(encodings, labels, rows[: 2 * n // 3])
    eval_ds = EncodedDataset(encodings, labels, rows[2 * n // 3:])
    steps_per_epoch = math.ceil(len(train_ds) / (cfg.batch_size * cfg.grad_accum))
    args = training_arguments(cfg, out_dir, steps_per_epoch)
    pooling = PoolingMonitor(model, tokenizer.all_special_ids) if monitor else None
    trainer = make_trainer(cfg, model, args, train_ds, eval_ds, tokenizer, pooling)
    for callback in callbacks:
        trainer.add_callback(callback)
    return trainer


def weights(model) -> dict[str, torch.Tensor]:
    """A copy of the model's trainable parameters, on the CPU (where the test compares them)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


class StopAt2(transformers.TrainerCallback):
    """Stops training after step 2, as a run killed there would: checkpoint-2 is its last checkpoint."""

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= 2
