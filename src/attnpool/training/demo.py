"""``attnpool demo``: mean vs attention pooling on a generated task where a few key tokens decide the label.

Each text is a run of 16 to 96 ordinary words (distractors) with one key word somewhere in it (terrible, poor,
average, good, excellent); the label is that word's score. Mean pooling averages the key word away among the
distractors, the more so the longer the text; attention pooling can learn to look at it. Both poolers fine-tune
the same encoder with the same recipe, data and seed (all but the top layer frozen, to fit a few minutes on 2 CPU
cores), and the demo prints both scores and the tokens the attention pooler weighs most on held-out examples.
"""

from __future__ import annotations

import logging
import math
import numbers
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml
from transformers import AutoConfig, AutoTokenizer

from attnpool.config import TrainConfig, default_model
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.encoders import check_encoder_reachable
from attnpool.runs.files import atomic_write, check_writable, not_a_folder
from attnpool.runs.lock import LOCK_NAME, RunError, RunLock
from attnpool.runs.run import Run
from attnpool.training.recipe import train

# One key word per text decides its score; everything else is filler.
KEYS = {"terrible": 0.0, "poor": 0.25, "average": 0.5, "good": 0.75, "excellent": 1.0}
DISTRACTORS = (
    "the of and to in is was for on that with as by at from his her their this which or an are were be it had "
    "not but have one all new more other some time year people city river house street school music team game "
    "during after before about into over under between through village north south east west small large old "
    "first second often also later most many several known called named built used made became began found"
).split()

logger = logging.getLogger("attnpool.demo")

# The pooler's learning rate in the demo (the recipe's default is the head's, 2e-3 here). Its scoring layer starts at
# zero (init="mean"), and AdamW moves a weight by about one learning rate per step: the demo's 50 steps at 2e-3 leave
# the weights soft (0.93 Pearson, the key word at about 0.6 of the weight) where 1e-2 lets them concentrate (0.98),
# as the 380-step CR runs do at 1e-3 (see docs/quality.md). It changes nothing for mean pooling, which has no weights.
POOLER_LR = 1e-2
_DEMO_DATA, _DEMO_RUNS = ("train.csv", "valid.csv"), ("mean", "attention")  # what a demo folder holds
_DATA_HEADER = "id,text,label"  # the columns of make_key_token_data, whose first id is demo00000


def make_key_token_data(n: int, seed: int, min_words: int = 16, max_words: int = 96) -> pd.DataFrame:
    """``n`` texts of ``min_words``..``max_words`` filler words with one key word; its score is the label.

    The longer the text, the more the key word is diluted in a mean over tokens, while a weighted sum can put
    its weight on the key word at any length.
    """
    rng = np.random.default_rng(seed)
    keys = list(KEYS)
    rows = []
    for i in range(n):
        length = int(rng.integers(min_words, max_words + 1))
        words = list(rng.choice(DISTRACTORS, size=length))
        key = keys[rng.integers(0, len(keys))]
        words[rng.integers(0, length)] = key
        rows.append({"id": f"demo{i:05d}", "text": " ".join(words), "label": KEYS[key]})
    return pd.DataFrame(rows)


def run_demo(output_dir: str | Path = "runs/demo", seconds: float = 45.0, model: str | None = None,
             n_train: int | None = None, n_valid: int = 200) -> dict[str, float]:
    """Fine-tune with ``mean`` and with ``attention`` pooling, print both Pearson scores and top-weighted tokens.

    Args:
        output_dir: Where the data and the two runs go (``~``: the home folder): a new or empty folder, or an
            earlier demo's (replaced once the model loads; a folder holding anything else, a ``train.csv`` of the
            user's too, is refused).
        seconds: Sizes the training set: ``seconds / 0.9`` steps of 16 texts per pooler (at least 10, at most 150,
            a line saying so outside 9 to 135), about that many seconds on 2 cores.
        model: Encoder (default: the bundled offline all-MiniLM-L6-v2).
        n_train: Training rows (overrides the budget).
        n_valid: Validation rows.

    Returns:
        ``{"mean": pearson, "attention": pearson}``.

    Raises:
        TypeError: ``seconds`` is not a number.
        ValueError: ``seconds`` is not positive and finite; ``model`` is a saved attnpool model or has no
            transformer layers (``num_hidden_layers``), not an encoder; ``output_dir`` cannot be written (a
            read-only folder).
        RunError: ``output_dir`` is a file, or a folder holding anything but an earlier demo's files.
        FileNotFoundError: ``model`` names a folder that does not exist (no ``output_dir`` is made).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"demo: seconds must be a positive number of seconds, got {type(seconds).__name__} "
                        f"{seconds!r}")
    if not 0 < seconds < math.inf:
        raise ValueError(f"demo: seconds must be a positive number of seconds, got {seconds!r}")
    output_dir = Path(output_dir).expanduser()  # "~/demo": in the home folder, as a shell reads it
    if output_dir.exists() and not output_dir.is_dir():  # before mkdir, which would raise FileExistsError
        raise RunError(f"demo: --output-dir {output_dir} is a file; give a folder (new, empty, or an earlier demo's)")
    if reason := not_a_folder(output_dir):  # a link to nothing: mkdir's FileExistsError too
        raise RunError(f"demo: {reason}")
    check_writable(output_dir, "--output-dir", folder=True)  # a read-only folder: before the model loads
    if output_dir.is_dir():
        _check_demo_folder(output_dir)  # before the model loads: a folder of the user's is refused at once
    model = model or default_model()
    encoder_config = _encoder_config(model)  # a model that cannot load: no folder made, nothing deleted
    output_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(output_dir, purpose="demo"):  # two demos in one folder would delete each other's runs
        _clear_demo_folder(output_dir)  # checked again, under the lock
        return _run_demo(output_dir, seconds, model, encoder_config, n_train, n_valid)


def _encoder_config(model: str) -> Any:
    """The config of the encoder ``model``; refuse a saved attnpool model or a config without transformer layers."""
    check_encoder_reachable(model)
    config = AutoConfig.from_pretrained(model)
    if getattr(config, "model_type", None) == "attnpool":
        raise ValueError(f"demo: --model {model} is a saved attnpool model (model_type 'attnpool'), not an encoder: "
                         "the demo fine-tunes an encoder under a new mean and a new attention pooler. Give the "
                         "encoder's folder or hub name, or leave --model out for the bundled all-MiniLM-L6-v2")
    if not isinstance(getattr(config, "num_hidden_layers", None), int):
        raise ValueError(f"demo: --model {model}: its config ({type(config).__name__}) has no num_hidden_layers, so "
                         "it is not a transformer encoder the demo can fine-tune. Give an encoder's folder or hub name "
                         "(BERT, RoBERTa, DeBERTa...), or leave --model out for the bundled all-MiniLM-L6-v2")
    return config


def _clear_demo_folder(output_dir: Path) -> None:
    """Delete an earlier demo's files; refuse a folder holding anything else (:func:`_check_demo_folder`)."""
    _check_demo_folder(output_dir)
    for path in output_dir.iterdir():
        if path.name != LOCK_NAME:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _check_demo_folder(output_dir: Path) -> None:
    """Refuse a folder holding anything but an earlier demo's files (``--output-dir runs``, ``.``, a data folder).

    An earlier demo's is provably so: its data files as the demo generates them (their columns and first id), and its
    ``mean``/``attention`` runs of the demo's recipe (or their starts, or empty folders); a ``train.csv`` of the
    user's is not, nor a run of the user's named ``mean``.
    """
    others = sorted(p.name for p in output_dir.iterdir() if p.name != LOCK_NAME and not _demo_entry(p))
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise RunError(f"demo: {output_dir} holds files that are not the demo's ({shown}); the demo replaces what "
                       "it writes, so it only runs in a new or empty folder or an earlier demo's: choose another "
                       "--output-dir")


def _demo_entry(path: Path) -> bool:
    """Whether ``path`` is one the demo wrote: its generated data (or a write of it cut short), or one of its runs."""
    if path.is_symlink():
        return False
    if path.name in _DEMO_RUNS and path.is_dir():
        return _demo_run(path)
    if any(path.name.startswith(f".{name}.") and path.name.endswith(".tmp") for name in _DEMO_DATA):
        return path.is_file()  # the demo's atomic write of its data, killed
    if path.name not in _DEMO_DATA or not path.is_file():
        return False
    try:
        with path.open(encoding="utf-8") as lines:
            return lines.readline().rstrip("\r\n") == _DATA_HEADER and lines.readline().startswith("demo00000,")
    except (OSError, UnicodeDecodeError):
        return False


def _demo_run(path: Path) -> bool:
    """Whether ``path`` is a run the demo trained or began: empty, its log alone, or its recipe the demo's."""
    if not any(p.name != LOCK_NAME for p in path.iterdir()):
        return True
    config = Run(path).config_file
    if not (Run.is_run(path) or Run.never_started(path)):
        return False
    if not config.is_file():
        return Run.never_started(path)  # stopped before it saved its config: its log alone
    try:
        values = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(values, dict) and (values.get("pooling"), values.get("text_cols"), values.get("label")) == (
        path.name, ["text"], "label") and Path(str(values.get("train_file"))).name == _DEMO_DATA[0]


def training_rows(seconds: float) -> tuple[int, str | None]:
    """The demo's training rows for ``seconds``: 16 per step of about 0.9 s, 10 to 150 steps; a note if bounded.

    About 0.9 s per step of 16 rows of ~70 tokens for MiniLM on 2 cores with the bottom 5 layers frozen.
    """
    steps = min(150, max(10, round(seconds / 0.9)))
    if steps == round(seconds / 0.9):
        return steps * 16, None
    return steps * 16, (f"--seconds {seconds:g} is outside 9 to 135 (10 to 150 steps of about 0.9 s): training "
                        f"{steps} steps, about {steps * 0.9:.0f} s")


def _run_demo(output_dir: Path, seconds: float, model: str, encoder_config: Any, n_train: int | None,
              n_valid: int) -> dict[str, float]:
    # Fine-tune the top layer (plus pooler and head): a few minutes on 2 CPU cores.
    frozen = max(0, encoder_config.num_hidden_layers - 1)
    if n_train is None:
        n_train, note = training_rows(seconds)
        if note:
            print(f"attnpool demo: {note}", flush=True)
    for name, rows, seed in (("train.csv", n_train, 0), ("valid.csv", n_valid, 1)):  # whole, or a .tmp the next takes
        frame = make_key_token_data(rows, seed=seed)
        atomic_write(output_dir / name, lambda tmp, frame=frame: frame.to_csv(tmp, index=False))
    print(f"attnpool demo: {n_train} training / {n_valid} validation texts of 16-96 words; the label is the score of "
          f"the one key word ({', '.join(KEYS)}) hidden among distractors", flush=True)  # before the runs' stderr
    scores = {}
    for pooling in ("mean", "attention"):
        cfg = TrainConfig(train_file=str(output_dir / "train.csv"), valid_file=str(output_dir / "valid.csv"),
                          text_cols=["text"], label="label", model=model, pooling=pooling,
                          pooling_options={"attn_size": 128} if pooling == "attention" else {},
                          output_activation="sigmoid", epochs=1, batch_size=16, lr=1e-4,
                          head_lr=2e-3, pooler_lr=POOLER_LR, warmup_ratio=0.06, freeze_layers=frozen,
                          output_dir=str(output_dir / pooling),
                          seed=0)
        result = train(cfg)
        scores[pooling] = result.metrics["overall"]["pearson"]
    print(f"\nvalidation Pearson:  mean pooling {scores['mean']:.3f}   attention pooling {scores['attention']:.3f}")
    run = Run(output_dir / "attention")  # its max_length: the default 128, or what a smaller encoder reads
    max_length = yaml.safe_load(run.config_file.read_text(encoding="utf-8"))["max_length"]
    _show_top_tokens(run.model_dir(0), output_dir / "valid.csv", max_length)
    return scores


def _show_top_tokens(model_dir: Path, valid_csv: Path, max_length: int) -> None:
    model = AttnPoolForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    frame = pd.read_csv(valid_csv).head(4)
    batch = tokenizer(list(frame["text"]), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, return_pooling_weights=True)
    print("\ntokens the attention pooler weighs most (weight), on held-out texts:")
    for i, row in frame.iterrows():
        tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][i])
        weights = out.pooling_weights[i]
        top = torch.topk(weights, k=4).indices.tolist()
        keys = [w for w in row["text"].split() if w in KEYS]
        shown = ", ".join(f"{tokens[j]} ({weights[j]:.2f})" for j in top)
        print(f"  label {row['label']:.2f} pred {out.logits[i, 0]:.2f}  key words {keys}:  {shown}")
