"""Tiny random encoder configs of each supported family, built in code."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import torch
from transformers import (
    BertConfig,
    DebertaV2Config,
    ElectraConfig,
    GPT2Config,
    LlamaConfig,
    ModernBertConfig,
    RobertaConfig,
)

from attnpool.pooling import Pooler, register_pooler, registry

VOCAB = 99
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 37}


def tiny_config(family: str):
    if family == "bert":
        return BertConfig(**COMMON, max_position_embeddings=64)
    if family == "roberta":
        return RobertaConfig(**COMMON, max_position_embeddings=70, pad_token_id=1)
    if family == "deberta-v3":
        return DebertaV2Config(**COMMON, max_position_embeddings=64, relative_attention=True,
                               position_biased_input=False, pos_att_type=["p2c", "c2p"], position_buckets=16,
                               max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
                               type_vocab_size=0)
    if family == "electra":
        return ElectraConfig(**COMMON, embedding_size=16, max_position_embeddings=64)
    if family == "modernbert":
        return ModernBertConfig(**COMMON, max_position_embeddings=64, global_attn_every_n_layers=1, pad_token_id=0,
                                bos_token_id=2, eos_token_id=3, sep_token_id=3, cls_token_id=2)
    if family == "llama":
        return LlamaConfig(**COMMON, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)
    if family == "gpt2":
        return GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    raise ValueError(family)


ENCODER_FAMILIES = ["bert", "roberta", "deberta-v3", "electra", "modernbert"]
DECODER_FAMILIES = ["llama", "gpt2"]


def batch(lengths, seed=0, seq_len=None, side="right", low=4):
    """Random ids (>= low, so no special ids) with padding id 0 on the given side, and the mask."""
    gen = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(lengths)
    ids = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    mask = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    for i, n in enumerate(lengths):
        tokens = torch.randint(low, VOCAB, (n,), generator=gen)
        span = slice(0, n) if side == "right" else slice(seq_len - n, seq_len)
        ids[i, span] = tokens
        mask[i, span] = 1
    return ids, mask


def tiny_tokenizer():
    """A word-level fast tokenizer over a handful of words, built in code (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = "the a cat dog sat ran on mat fast slow red blue big small tree house".split()
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def save_tiny_encoder(path, family="bert", seed=0):
    """A tiny random encoder and its tokenizer saved as a local 'pre-trained' folder."""
    from transformers import AutoModel

    torch.manual_seed(seed)
    AutoModel.from_config(tiny_config(family)).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


WORDS = "the a cat dog sat ran on mat fast slow red blue big small tree house".split()


def write_toy_csv(path, n=48, seed=0, task="regression"):
    """A small text-pair data set whose label depends on a few key words, as CSV (id, first, second, label)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        first = " ".join(rng.choice(WORDS, size=rng.integers(2, 6)))
        second = " ".join(rng.choice(WORDS, size=rng.integers(1, 8)))
        score = 0.25 * (("cat" in first.split()) + ("dog" in second.split())) + 0.5 * ("red" in second.split())
        label = float(min(score, 1.0)) if task == "regression" else ("pos" if score >= 0.25 else "neg")
        rows.append({"id": f"{i:04d}", "first": first, "second": second, "label": label})
    frame = pd.DataFrame(rows)
    frame.to_csv(path, index=False)
    return frame


def make_run(path, encoder, task="regression", classes=None, folds=2, seed=0, **options):
    """A run directory as `attnpool train` leaves it, with random fold models (different seeds, so they differ).

    ``seed``: the first fold's model seed (the fold models are seeded ``seed``, ``seed + 1``...).
    """
    import json

    import torch
    import yaml
    from transformers import AutoTokenizer

    from attnpool.config import TrainConfig
    from attnpool.model import AttnPoolForSequenceClassification
    from attnpool.runs import Run

    options = {"train_file": "train.csv", "text_cols": ["first", "second"], **options}
    cfg = TrainConfig(label="label", task=task, model=encoder, folds=folds, max_length=16,
                      pooling_options={"attn_size": 8}, **options)
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    Run(path).write_info({"task": task, "classes": classes, "label": "label", "id_col": "id", "num_folds": folds})
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    extra = {}
    if classes:
        extra = {"num_labels": len(classes), "problem_type": "single_label_classification",
                 "id2label": dict(enumerate(map(str, classes))), "label2id": {str(c): i for i, c in enumerate(classes)}}
    for fold in range(folds):
        torch.manual_seed(seed + fold)
        model = AttnPoolForSequenceClassification.from_encoder(encoder, pooling="attention",
                                                               pooling_options={"attn_size": 8}, **extra)
        model.save_pretrained(path / f"fold_{fold}" / "model", tokenizer=tokenizer)
        (path / f"fold_{fold}" / "metrics.json").write_text(json.dumps({"pearson": 0.3 + 0.4 * fold,
                                                                         "accuracy": 0.3 + 0.4 * fold}))
    return path


UNIMPORTED_POOLER_ERROR = (
    "Unknown pooler 'mine': this model's pooler 'mine' is defined in module 'mypoolers' (see its config); import it "
    "before loading (CLI: --import mypoolers; run from the folder holding mypoolers.py, or add that folder to "
    "PYTHONPATH)")


def unimported_pooler_run(path):
    """A one-fold run under ``path`` whose fold model names the pooler ``mine`` of the module ``mypoolers``, which
    nothing imported (its loading error: :data:`UNIMPORTED_POOLER_ERROR`)."""
    run = make_run(path / "run", save_tiny_encoder(path / "encoder"), folds=1)
    config_file = run / "fold_0" / "model" / "config.json"
    config = json.loads(config_file.read_text())
    config["pooling"] = {"type": "mine", "module": "mypoolers", "hidden_size": config["pooling"]["hidden_size"]}
    config_file.write_text(json.dumps(config))
    return run


def add_oof(path, task="regression", classes=None, *, center=0.5, scale=0.1, rows=40, seed=0):
    """Out-of-fold files for each fold of a `make_run` run: fold K validated the rows with row % folds == K."""
    import numpy as np

    from attnpool.runs import Run
    from attnpool.runs.tables import oof_frame

    run = Run(path)
    folds = run.trained_folds()
    rng = np.random.default_rng(seed)
    target_rng = np.random.default_rng(1234)  # the same targets in every run: they trained on the same data
    all_rows = np.arange(rows)
    if task == "regression":
        target, scores = target_rng.random(rows), center + scale * rng.standard_normal(rows)
    else:
        target = target_rng.integers(0, len(classes), rows)
        scores = rng.dirichlet(np.ones(len(classes)), rows)
    for fold in folds:
        mine = all_rows % len(folds) == fold
        frame = oof_frame(task, classes, all_rows[mine], None, target[mine], scores[mine], fold)
        frame.to_csv(run.fold_dir(fold) / "oof.csv", index=False)
    return path


_KILL_AFTER_SAVE = """
import json, os, signal, sys
import transformers
from attnpool import TrainConfig, train

options, fold, step = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])

class KillAfterSave(transformers.TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        if f"fold_{fold}" in args.output_dir and state.global_step >= step:
            os.kill(os.getpid(), signal.SIGKILL)

train(TrainConfig(**options), callbacks=[KillAfterSave()])
"""


def train_killed_after_save(options: dict, fold: int, step: int):
    """``attnpool.train(TrainConfig(**options))`` in a subprocess, SIGKILLed after fold ``fold`` saves the checkpoint
    of step ``step`` or later, as a machine that goes down would leave it; returns the finished process."""
    return subprocess.run([sys.executable, "-c", _KILL_AFTER_SAVE, json.dumps(options), str(fold), str(step)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@contextlib.contextmanager
def users_item_pooler(name: str, *, has_weights: bool = False, needs_all_layers: bool = False) -> Iterator[type]:
    """A user's pooler, registered as ``name`` for the block: a scaled mean whose ``__init__`` calls ``.item()``.

    The meta device cannot build it (``Tensor.item() cannot be called on meta tensors``): what trial builds of a
    pooler (``validate``, the model card) must survive.
    """
    class ScaledMean(Pooler):
        config_keys = ("scale",)  # every constructor option is saved, or register_pooler refuses the class

        def __init__(self, hidden_size: int, scale: float = 1.0) -> None:
            super().__init__(hidden_size)
            self.scale = scale
            self.weight = torch.nn.Parameter(torch.tensor(scale))
            if not self.weight.item() > 0:
                raise ValueError(f"scale must be positive, got {scale}")

        def pool(self, hidden_states, mask):
            weights = mask.float() / mask.float().sum(1, keepdim=True).clamp(min=1)
            pooled = torch.einsum("bt,bth->bh", weights, hidden_states) * self.weight
            return pooled, weights if self.has_weights else None

    ScaledMean.name, ScaledMean.has_weights, ScaledMean.needs_all_layers = name, has_weights, needs_all_layers
    register_pooler(ScaledMean)
    try:
        yield ScaledMean
    finally:
        registry._REGISTRY.pop(registry._normalize(name))
