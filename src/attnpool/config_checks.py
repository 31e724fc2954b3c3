"""Checks of :meth:`TrainConfig.validate <attnpool.config.TrainConfig.validate>` that need more than one comparison.

Each raises ``ValueError`` naming the option and how to fix it, before the run folder is made: an option that fails
only in fold 0 leaves a run behind that a corrected command is refused on ("already exists") and that ``--resume``
replays with the bad value.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnpool.data.columns import template_fields
from attnpool.data.errors import DataError
from attnpool.data.pppm import PPPM_TEMPLATE
from attnpool.data.readers import table_columns
from attnpool.options import ConfigError
from attnpool.pooling import Pooler, build_pooler, check_pooler_options, get_pooler_class
from attnpool.pooling.base import user_module
from attnpool.runs.lock import RunError

TrainConfig = Any  # attnpool.config.TrainConfig: that module imports this one

# The hidden size of the pooler's trial build: divisible by every head count up to 10, 12, 14, 16 and by the powers
# of two up to 1024, so that the heads of a real encoder are not refused for not splitting it. Built on the meta
# device, which allocates nothing, its size costs nothing.
TRIAL_HIDDEN_SIZE = 2**10 * 3**2 * 5 * 7
# The retry's hidden size is at most this many times the stand-in: (H, H) weights of a larger one overflow int64.
TRIAL_SPLIT_BOUND = 2**10
SEED_BOUND = 2**32  # numpy's and torch's seeds are in [0, 2**32)
DATA_PATHS = ("train_file", "valid_file", "data_dir")  # saved absolute with the run's config
PATH_OPTIONS = (*DATA_PATHS, "model")  # the model too where it is a local folder


def check_numbers(cfg: TrainConfig) -> None:
    """Every float option finite (the pooler's: :func:`check_pooler`), the seeds in range (``lr: .inf`` gave NaN)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value}")
    for name in ("seed", "split_seed"):
        value = getattr(cfg, name)
        if value is not None and not 0 <= value < SEED_BOUND:
            raise ValueError(f"{name} must be in [0, 2**32 - 1], the seeds numpy and torch take, got {value}; give "
                             f"--{name.replace('_', '-')} N with N >= 0")


def _nested_floats(value: Any, key: str) -> list[tuple[str, float]]:
    """The floats in ``value`` (a pooler option), with where: ``key``, ``key.inner`` or ``key[0]``."""
    if isinstance(value, float):
        return [(key, value)]
    if isinstance(value, Mapping):
        return [found for k, v in value.items() for found in _nested_floats(v, f"{key}.{k}")]
    if isinstance(value, list | tuple):
        return [found for i, v in enumerate(value) for found in _nested_floats(v, f"{key}[{i}]")]
    return []


def checked_lists(cfg: TrainConfig) -> None:
    """The list options' items as their type: column names text (a YAML ``2021`` is the column "2021"), folds ints.

    A config file's items went unchecked: ``text_cols: [first, null]`` failed in a traceback, ``[[a, b]]`` too,
    ``[2021, b]`` as a missing column 2021 the file has, and ``only_folds: [true]`` trained fold 1. Then the path
    options' ``~`` is expanded (:func:`expand_home`): this runs as every config is made.

    Raises:
        ConfigError: Not a list, or an item that is not a column name (text or a whole number) or a fold number.
    """
    for name in ("text_cols", "group_context_by"):
        value = getattr(cfg, name)
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, str | int)] if isinstance(
            value, list | tuple) else [value]
        if bad:
            hint = "; quote a column named true, no, null..." if bad[0] is None or isinstance(bad[0], bool) else ""
            raise ConfigError(f"{name} must be a list of column names (text), got {value!r}: {bad[0]!r} is not a "
                              f"column name{hint}; e.g. {name}: [first, second]")
        setattr(cfg, name, [str(v) for v in value])
    folds = cfg.only_folds
    if folds is not None and (not isinstance(folds, list | tuple) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in folds)):
        raise ConfigError(f"only_folds must be a list of fold numbers (whole numbers from 0), got {folds!r}; e.g. "
                          "only_folds: [0, 2] (--only-folds 0 2)")
    if folds is not None:
        cfg.only_folds = list(folds)
    expand_home(cfg)


def expand_home(cfg: TrainConfig) -> None:
    """``~`` in the path options (and ``output_dir``) expanded once, so that every reader of the config sees the path.

    ``output_dir: ~/x`` made a folder named ``~`` in the current one, and ``train_file: ~/t.csv`` was looked for
    there, while the run's saved paths and ``--overwrite``'s checks expanded it.
    """
    for name in (*PATH_OPTIONS, "output_dir"):
        value = getattr(cfg, name)
        if isinstance(value, str | os.PathLike) and str(value).startswith("~"):
            setattr(cfg, name, os.path.expanduser(str(value)))


def columns_hint(path: Any) -> str:
    """``"; FILE has the columns a, b, c"``, to say which names are there to choose from; ``""`` if unreadable."""
    try:
        return f"; {path} has the columns {', '.join(table_columns(path))}"
    except (DataError, OSError):
        return ""  # the file's own error comes when it is read


def check_text(cfg: TrainConfig) -> None:
    """The text: columns or a template (not both), one with a placeholder; and a ``valid_file`` not the train file.

    A template with no ``{column}`` (``first second``, ``{{first}} [SEP] {{second}}``) built no text and failed in
    the tokenizer with an ``IndexError``; a ``valid_file`` that is the train file validated in-sample, silently.

    Raises:
        ValueError: No text options (without a preset), both, a template without a placeholder, or the
            ``valid_file`` resolving to the ``train_file``.
        DataError: The template's braces do not parse (:func:`~attnpool.data.columns.template_fields`).
    """
    if cfg.preset is None and not cfg.text_cols and not cfg.template:
        raise ValueError("say which columns hold the text: --text-cols COL [COL ...] or --template '{a} [SEP] {b}'"
                         + columns_hint(cfg.train_file))
    if cfg.text_cols and cfg.template:  # make_config keeps one where the other overrides a file's
        raise ValueError(f"give the text columns or a template, not both (got text_cols={cfg.text_cols!r} and "
                         f"template={cfg.template!r}): drop --text-cols or --template")
    if cfg.template and not template_fields(cfg.template):
        raise ValueError(f"template {cfg.template!r} has no placeholder, so no column's text goes in: write each "
                         "column as {column}, e.g. --template '{first} [SEP] {second}' (template: \"{first} [SEP] "
                         "{second}\" in a config file); {{ and }} are literal braces, not placeholders"
                         + columns_hint(cfg.train_file))
    same = cfg.valid_file and cfg.train_file and Path(cfg.valid_file).resolve() == Path(cfg.train_file).resolve()
    if same and not getattr(cfg, "resume", False):  # a run begun so before this check resumes as it was
        raise ValueError(f"--valid-file {cfg.valid_file} is the training file (--train-file {cfg.train_file}): the "
                         "model would be validated on the rows it trains on, so the best checkpoint, early stopping "
                         "and the scores would be in-sample; give a held-out file as --valid-file, or leave it out "
                         "for k-fold cross-validation (--folds)")


PRESET_SETS = {"group_col": "anchor", "output_activation": "sigmoid"}  # what --preset pppm fills in where unset


def check_preset_resets(given: Mapping[str, Any], text_cols_from: str | None = None) -> None:
    """Refuse ``none`` for what ``--preset pppm`` sets (it came back as the preset's value), and its text_cols.

    ``given``: the options set explicitly (a config file's or dict's, and the flags over them); ``text_cols_from``:
    the config file its ``text_cols`` came from, named in the error (else they are the flag's).
    """
    if given.get("preset") != "pppm":
        return
    if given.get("text_cols") and not given.get("template"):  # else "not both" with a template never given
        source = f"text_cols (from {text_cols_from}: drop them there)" if text_cols_from else "--text-cols"
        raise ConfigError(_pppm_template_only(source))
    for name, value in PRESET_SETS.items():
        if name in given and given[name] is None:
            flag = "--" + name.replace("_", "-")
            other = ", or give another column" if name == "group_col" else ""
            raise ConfigError(f"--preset pppm sets {name} {value}, so {flag} none (or {name}: null in a config file) "
                              f"would be replaced by it: drop it{other} (without the preset: --train-file and "
                              "--text-cols or --template)")


def _pppm_template_only(source: str) -> str:
    """Why ``--preset pppm`` refuses text columns (given by ``source``): its texts come from its template."""
    return (f"--preset pppm builds each text from its template {PPPM_TEMPLATE!r}: change it with --template (e.g. "
            f"'{{anchor}} [SEP] {{target}}'), not {source}")


PRESETS = ("pppm",)


def check_preset(cfg: TrainConfig) -> None:
    """The data-free checks of a preset and of ``group_context``: run by validate, before the run folder is made.

    Then :func:`check_comma_names`, which reads the train file's header alone.

    :func:`attnpool.data.task.apply_preset` runs them too, for a config that skipped validate.

    Raises:
        DataError: An unknown preset, pppm without its data folder, with another task or with text_cols (not a
            template); group_context without its keys (pppm has its own) or on the label column.
        ConfigError: ``text_cols: first, second``, one name, where the train file has first and second.
    """
    if cfg.preset not in (None, *PRESETS):
        raise DataError(f"unknown preset {cfg.preset!r}; available presets: {', '.join(PRESETS)}")
    pppm = cfg.preset == "pppm"
    if pppm and not cfg.data_dir:
        raise DataError("--preset pppm needs --data-dir DIR, the folder holding train.csv and cpc_texts.csv")
    if pppm and cfg.task != "regression":
        raise DataError(f"--preset pppm is a regression task (scores 0 to 1), got --task {cfg.task}; drop --task")
    if pppm and cfg.text_cols and not cfg.template:  # else refused as "not both" with the preset's template
        raise DataError(_pppm_template_only("--text-cols"))
    if cfg.group_context and not cfg.group_context_by and not pppm:  # pppm's: anchor context
        raise DataError(f"--group-context {cfg.group_context} needs --group-context-by COL [COL ...]: the columns "
                        "whose shared values make a group (PPPM: anchor context)")
    label = "score" if pppm and cfg.label == "label" else cfg.label  # the preset's label column
    if cfg.group_context and cfg.group_context == label:
        raise DataError(f"--group-context {cfg.group_context}: that is the label column; the labels of the other "
                        "rows are not there at prediction time. Give a text column, e.g. target")
    check_comma_names(cfg)


def check_comma_names(cfg: TrainConfig) -> None:
    """Refuse ``text_cols: first, second`` (``--text-cols first,second``): one column named "first, second", not two.

    The data error then listed first and second as present. Checked on the train file's header: a column that is
    named with a comma is used as named.

    Raises:
        ConfigError: One name holding ``,`` that the train file lacks and whose parts it has, showing the list form.
    """
    for name in ("text_cols", "group_context_by"):
        value = getattr(cfg, name)
        if len(value) != 1 or "," not in value[0] or not cfg.train_file:
            continue
        parts = [part.strip() for part in value[0].split(",")]
        try:
            columns = table_columns(cfg.train_file)
        except (DataError, OSError):
            return  # the file's own error comes when it is read
        if value[0] not in columns and all(part in columns for part in parts):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{name} {value[0]!r} is one column name, which {cfg.train_file} lacks (a comma does "
                              f"not split columns, after {flag} or in a config file): give the columns as a list, "
                              f"{name}: [{', '.join(parts)}] ({flag} {' '.join(parts)})")


def check_output_flags(cfg: TrainConfig) -> None:
    """``overwrite`` and ``resume`` not both: checked before the run opens, also where ``resume`` skips validate."""
    if cfg.overwrite and cfg.resume:
        raise ValueError("overwrite deletes the run that resume would continue: give one of them (--no-overwrite or "
                         "--no-resume undoes a config file's)")


def check_overwrite_inputs(cfg: TrainConfig, config_file: str | os.PathLike | None = None, *,
                           output_dir: str | os.PathLike | None = None, folder: str = "run folder") -> None:
    """With ``overwrite``, none of this call's inputs may lie in the run folder, which is emptied before they are read.

    ``config_file``: the ``--config`` file the options were read from (the caller's recipe, deleted with the run).
    ``output_dir``: the folder to be emptied instead of ``cfg.output_dir`` (``compare --overwrite``'s comparison
    folder, called only when it will be emptied: ``cfg.overwrite`` and ``cfg.resume`` are then not read); ``folder``
    names it in the message.

    Raises:
        RunError: ``config_file``, ``train_file``, ``valid_file``, ``data_dir`` or a local ``model`` inside
            ``output_dir`` (reached through a link too; a link inside the folder counts, since deleting it loses the
            path).
    """
    if output_dir is None and (not cfg.overwrite or cfg.resume):  # both: refused by check_output_flags
        return
    shown = cfg.output_dir if output_dir is None else output_dir
    run_dir = Path(shown).expanduser().resolve()
    inputs = {"--config": config_file, "--train-file": cfg.train_file, "--valid-file": cfg.valid_file,
              "--data-dir": cfg.data_dir, "--model": cfg.model}
    for option, value in inputs.items():
        path = Path(os.path.abspath(Path(value or "").expanduser()))  # a link in the run: deleted, not its target
        if value and path.exists() and (path.parent.resolve() / path.name).is_relative_to(run_dir):  # not a hub name
            raise RunError(f"--overwrite would delete {option} {value} (in the {folder} {shown}) before "
                           f"reading it; move it out of {shown} first or choose another --output-dir")


def check_pearson_loss(cfg: TrainConfig) -> None:
    """The Pearson loss: a regression's, over batches of 2 rows or more.

    A batch of one row has no correlation: the loss returns 1 with no gradient, so nothing trained, with or without
    ``grad_accum`` (each micro-batch is correlated alone), and the run reported itself complete.
    """
    if cfg.loss == "pearson" and cfg.task != "regression":
        raise ValueError(f"loss pearson needs task regression, got task {cfg.task}; use cross_entropy or bce")
    if cfg.loss == "pearson" and cfg.batch_size < 2:
        raise ValueError(f"loss pearson correlates the rows of each batch, and batch_size {cfg.batch_size} has no "
                         "correlation to learn from (no gradient, with grad_accum too): use batch_size 2 or more")


def same_pooler(first: Any, second: Any) -> bool:
    """Whether two ``pooling`` values name one pooler: ``Attention``, ``attention_pooling`` and ``attention`` do.

    Each part of a combination (``attention+mean``) is compared by its registered class; a name the registry does
    not know (a user's pooler not imported yet) is compared as written.
    """
    def classes(spec: Any) -> tuple[Any, ...]:
        if not isinstance(spec, str):
            return (spec,)
        found: list[Any] = []
        for name in spec.split("+"):
            try:
                found.append(get_pooler_class(name.strip()))
            except ValueError:
                found.append(name.strip())
        return tuple(found)

    return classes(first) == classes(second)


def check_pooler(cfg: TrainConfig, spec: str | None = None) -> None:
    """The pooler's name, its options and their values, and whether it fits the recurrent layer.

    The names are checked first (a miss lists the valid ones); then the pooler is built on the meta device at a
    stand-in hidden size (:func:`_trial_pooler`), so that a bad value (``attn_size=-3``, ``eps=abc``) is refused before
    an encoder loads or data is read. The encoder's own hidden size is only known then: a value that fails at it alone
    (heads that do not split it) is refused when the model is built, as is one a user's pooler refuses.

    ``spec``: the ``compare --poolings`` spec the pooler comes from, named in the errors instead of the options.
    """
    options = cfg.pooling_options
    if not isinstance(options, Mapping):
        raise ValueError(f"pooling_options must be a mapping of option names to values (--pooling-opt KEY=VALUE, or "
                         f"key: value lines under pooling_options: in a config file), got {options!r}")
    for name, option in options.items():  # a NaN temperature trained, and the run said "complete" with NaN scores
        for key, value in _nested_floats(option, str(name)):
            if not math.isfinite(value):
                fix = f"--poolings {spec}" if spec else (f"--pooling-opt {name}=VALUE (or {name}: under "
                                                         "pooling_options: in a config file)")
                raise ValueError(f"pooling option {key} must be a finite number, got {value}: fix {fix}")
    where = f"--poolings {spec}" if spec else "pooling" if not options else (
        "pooling with pooling_options " + ", ".join(f"{k}={v}" for k, v in options.items()))
    try:
        check_pooler_options(cfg.pooling, options)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    fix = ("--poolings NAME:key=value,..." if spec else
           "--pooling-opt KEY=VALUE (or under pooling_options: in a config file)")
    pooler = _trial_pooler(cfg.pooling, options, f"{where}: the pooler does not build", f"; fix the value in {fix}")
    # a pooler the trial cannot build (a user's needing real tensors) answers from its class
    known = pooler if pooler is not None else get_pooler_class(cfg.pooling)
    if cfg.recurrent is not None and known.needs_all_layers:
        raise ValueError(f"recurrent {cfg.recurrent} runs over one sequence of token states, but pooler "
                         f"{known.name!r} reads several encoder layers stacked (needs_all_layers): use a token pooler "
                         "(e.g. --pooling attention; --pooling-layers then picks the layers averaged into the "
                         "recurrent layer's input), or drop --recurrent (--recurrent none over a config file's)")


def _trial_pooler(name: str, options: Mapping[str, object], failed: str, fix: str) -> Pooler | None:
    """The pooler built on the meta device, or None where its build says nothing about the options.

    A build that fails at :data:`TRIAL_HIDDEN_SIZE` is tried again at a multiple of it that every positive integer
    option divides, so that heads or groups that a real encoder's hidden size would split are not refused for not
    splitting the stand-in (that pooler is returned). A failure at both sizes is a bad value and refused, except where
    it is not the options' fault, when None is returned and the real build decides: an operation the meta device
    lacks (``NotImplementedError``, ``.item()``...), or a pooler defined outside attnpool taking part in the build
    (its code may need real tensors or a real size).

    Raises:
        ValueError: ``failed``, whatever the build raised (a negative size, a value of the wrong type...), ``fix``.
    """
    pooling_logger = logging.getLogger("attnpool.pooling")
    level = pooling_logger.level
    pooling_logger.setLevel(logging.ERROR)  # its warnings come again, once, when the model is built
    sizes, errors = [TRIAL_HIDDEN_SIZE], []
    split = math.lcm(TRIAL_HIDDEN_SIZE, *(v for v in options.values() if type(v) is int and v > 0))
    if split != TRIAL_HIDDEN_SIZE and split <= TRIAL_HIDDEN_SIZE * TRIAL_SPLIT_BOUND:
        sizes.append(split)
    try:
        for size in sizes:
            try:
                with torch.device("meta"):
                    return build_pooler(name, size, **options)
            except Exception as err:  # any failure at every size is a bad value: said in one line, not a traceback
                if isinstance(err, NotImplementedError) or "meta" in str(err) or _raised_in_outside_pooler(err):
                    return None
                errors.append(err)
        first = errors[0]  # the stand-in's: the same value fails the same way at the retry's size
        raise ValueError(f"{failed} (tried at a stand-in hidden size of {TRIAL_HIDDEN_SIZE}): "
                         f"{type(first).__name__}: {' '.join(str(first).split())}{fix}") from None
    finally:
        pooling_logger.setLevel(level)


def _raised_in_outside_pooler(err: BaseException) -> bool:
    """Whether the constructor of a pooler defined outside attnpool (a user's, registered) is on ``err``'s trace."""
    trace = err.__traceback__
    while trace is not None:
        owner = trace.tb_frame.f_locals.get("self")
        if isinstance(owner, Pooler) and user_module(type(owner)) is not None:
            return True
        trace = trace.tb_next
    return False


__all__ = ["DATA_PATHS", "PATH_OPTIONS", "PRESETS", "SEED_BOUND", "TRIAL_HIDDEN_SIZE", "check_numbers",
           "check_output_flags", "check_overwrite_inputs", "check_pooler", "check_preset", "check_preset_resets",
           "check_text", "checked_lists", "columns_hint", "expand_home"]
