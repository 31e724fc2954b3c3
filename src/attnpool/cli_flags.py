"""The ``train`` and ``compare`` flags, built from :class:`~attnpool.config.TrainConfig`'s field metadata.

Help, group and choices come from the config, so the flags cannot drift from it. They default to "not given" so
that a value of ``--config FILE.yaml`` is only replaced by a flag actually given; ``--help`` shows the config's
defaults, and the word ``none`` resets an optional option, a list of numbers (alone: ``--only-folds none``) or an
on/off/computed switch (``--freeze-word-embeddings none``) to its default; for an optional option whose default is
not none, ``none`` turns it off (``--id-col none``: no id column, as ``id_col: null`` in a config file; its default
is ``id``). A list of words takes ``none`` as a word: ``--text-cols None`` is the column named None.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import importlib
import os
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from attnpool.config import GROUPS, ConfigError, TrainConfig, parse_options
from attnpool.pooling.registry import import_hint

_TYPES = typing.get_type_hints(TrainConfig)


def shown_default(value: Any) -> str:
    """A default as ``--help`` says it."""
    if value is None or value == [] or value == {}:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def help_line(text: str, default: str) -> str:
    """A help line ending with its default (``%`` escaped for argparse)."""
    return f"{text} (default: {default})".replace("%", "%%")


def _default_text(f: dataclasses.Field) -> str:
    """How ``--help`` states a ``TrainConfig`` field's default: its ``default_text``, else the value."""
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return f.metadata.get("default_text", shown_default(value))


class _NoneWord(str):
    """The word ``none`` given to an optional flag: it resets the option to None.

    ``--ema-decay none`` over a config file's ``ema_decay: 0.999`` trains without EMA; a flag left out (None) keeps
    the file's value.
    """


NONE = _NoneWord("none")
# What none means for an optional option whose default is not none: it turns the option off, not back to its default.
_NONE_TURNS_OFF = {"id_col": "none: no id column, the rows of the out-of-fold and prediction files matched by order"}


class _ListOnce(argparse._StoreAction):
    """The default action of :class:`Parser`: a list option (``nargs="+"``) given a second time is refused.

    argparse keeps the last one: ``--text-cols first --text-cols second`` trained on ``second`` alone, silently.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if self.nargs == "+" and getattr(namespace, self.dest, self.default) is not self.default:  # set before
            raise argparse.ArgumentError(self, f"given twice; give all its values after one {option_string}: "
                                         f"{option_string} A B (argparse would keep the last one's only)")
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    """The ``attnpool`` parser (its subcommands' too): a list option is given once (:class:`_ListOnce`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _ListOnce)


def _or_none(kind: type) -> Callable[[str], Any]:
    """``kind`` of the text, or :data:`NONE` for ``none`` (any case)."""
    def convert(text: str) -> Any:
        return NONE if text.strip().lower() == "none" else kind(text)
    convert.__name__ = kind.__name__  # argparse names the type in its errors: "invalid float value: 'x'"
    return convert


class _SwitchOrNone(argparse.BooleanOptionalAction):
    """``--x`` on, ``--no-x`` off, ``--x none`` back to the default: a ``bool | None`` option, None meaning computed.

    ``--freeze-word-embeddings none`` over a config file's ``freeze_word_embeddings: false`` freezes them or not as
    the default does (yes, except with adversarial fgm).
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.nargs, self.metavar = "?", "none"  # the one word a switch takes

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is None:
            super().__call__(parser, namespace, values, option_string)
        elif values.strip().lower() == "none" and not (option_string or "").startswith("--no-"):
            setattr(namespace, self.dest, NONE)
        else:
            raise argparse.ArgumentError(self, f"got {values!r}: the switch takes no value, except none after "
                                         f"{self.option_strings[0]} to reset a config file's value")


def _shown(action: argparse.Action) -> argparse.Action:
    """The action as ``--help`` shows it: a switch as the flag pair it is (``--x, --no-x``, usage ``[--x | --no-x]``).

    Its ``nargs="?"`` (for ``--x none``) would otherwise show ``--x [none], --no-x [none]``, as if both took a word;
    the reset is in its help text instead.
    """
    if not isinstance(action, _SwitchOrNone):
        return action
    shown = copy.copy(action)
    shown.nargs = 0
    return shown


class _SwitchHelp(argparse.HelpFormatter):
    """Shows every :class:`_SwitchOrNone` as a plain switch pair (parsing is unchanged)."""

    def add_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, [_shown(a) for a in actions], groups, prefix)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(_shown(action))


def _kinds(f: dataclasses.Field) -> tuple[Any, ...]:
    """The types of a field's annotation: ``int | None`` -> ``(int, NoneType)``, ``int`` -> ``(int,)``."""
    kind = _TYPES[f.name]
    union = isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
    return typing.get_args(kind) if union else (kind,)


def _optional(f: dataclasses.Field) -> bool:
    return type(None) in _kinds(f)


def _members(f: dataclasses.Field) -> list[Any]:
    """The types a field may hold, ``None`` left out: ``int | None`` -> ``[int]``."""
    return [m for m in _kinds(f) if m is not type(None)]


def _is_mapping(f: dataclasses.Field) -> bool:
    return any((typing.get_origin(m) or m) is dict for m in _members(f))


def _flag(f: dataclasses.Field) -> tuple[str, dict[str, Any]]:
    """The flag of a ``TrainConfig`` field and its ``add_argument`` keywords, from the field's type and metadata."""
    meta, members = f.metadata, _members(f)
    flag = meta.get("flag", "--" + f.name.replace("_", "-"))
    kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": help_line(meta["help"], _default_text(f))}
    kwargs.update({key: meta[key] for key in ("choices", "metavar") if key in meta})
    lists = [m for m in members if typing.get_origin(m) is list]
    if members == [bool] and _optional(f):  # on, off, or none: computed
        kwargs["action"] = _SwitchOrNone
        kwargs["help"] = kwargs["help"].removesuffix(")") + "; none after the flag resets a config file's value)"
    elif members == [bool]:
        kwargs["action"] = argparse.BooleanOptionalAction if meta.get("negatable", True) else "store_true"
    elif _is_mapping(f):
        kwargs["action"] = "append"  # KEY=VALUE items, parsed by parse_options
    elif lists and len(members) == 1 and typing.get_args(lists[0])[0] is not str:  # ints; none alone: the default
        kwargs.update(nargs="+", type=_or_none(typing.get_args(lists[0])[0]))
        kwargs["help"] = kwargs["help"].removesuffix(")") + "; none alone resets a config file's value)"
    elif lists and len(members) == 1:  # words taken as given: a column may be named None (--text-cols None)
        kwargs.update(nargs="+", type=str)
    elif lists:  # a list or a word (pooling_layers: last | all | indices) -> words TrainConfig parses
        kwargs.update(nargs="+", type=str)
    elif _optional(f):  # none resets it
        kwargs["type"] = _or_none(members[0])
        if "choices" in kwargs:
            kwargs["choices"] = (*kwargs["choices"], NONE)
        none = ("none resets a config file's value" if f.default is None
                else _NONE_TURNS_OFF.get(f.name, "none: turned off, not the default"))
        kwargs["help"] = kwargs["help"].removesuffix(")") + f"; {none})"
    else:
        kwargs["type"] = members[0]
    return flag, kwargs


class _OneConfig(argparse.Action):
    """``--config FILE``, refused when given twice: a plain store kept the last file, silently dropping the first."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        earlier = getattr(namespace, self.dest, None)
        if earlier is not None:
            parser.exit(2, f"{parser.prog}: error: {option_string} given twice ({earlier}, {values}): give one file "
                           "(flags override its options)\n")  # one line, as the command's other errors
        setattr(namespace, self.dest, values)


def add_train_options(parser: argparse.ArgumentParser, skip: Sequence[str] = (), hide: Sequence[str] = ()) -> None:
    """One flag per ``TrainConfig`` field (``text_cols`` -> ``--text-cols``) in the config's groups.

    ``skip``: fields without a flag; ``hide``: fields whose flag is parsed (to be refused) but not in ``--help``.
    """
    parser.add_argument("--config", metavar="FILE", action=_OneConfig, help=help_line(
        "a YAML (or .json) file of these options, keys as the flags with _ for -; flags override it", "none"))
    if not issubclass(parser.formatter_class, _SwitchHelp):  # the switches' help, in the parser's own style
        parser.formatter_class = type("SwitchHelp", (_SwitchHelp, parser.formatter_class), {})
    groups = {name: parser.add_argument_group(f"{name} options", about) for name, about in GROUPS.items()}
    for f in dataclasses.fields(TrainConfig):
        if f.name not in skip:
            flag, kwargs = _flag(f)
            if f.name in hide:
                kwargs["help"] = argparse.SUPPRESS
            groups[f.metadata["group"]].add_argument(flag, **kwargs)


def overrides(args: argparse.Namespace, skip: Sequence[str] = ()) -> dict[str, Any]:
    """The ``TrainConfig`` fields given as flags, as keyword arguments of the API."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(TrainConfig):
        given = getattr(args, f.name, None)
        if given is None or f.name in skip:
            continue
        if given is NONE:
            values[f.name] = None
        elif isinstance(given, list) and any(item is NONE for item in given):
            if len(given) > 1:
                raise ConfigError(f"{f.metadata.get('flag', '--' + f.name.replace('_', '-'))}: none stands alone "
                                  f"(it resets a config file's value), got {' '.join(map(str, given))}")
            values[f.name] = f.default_factory() if f.default is dataclasses.MISSING else f.default
        else:
            mapping = _is_mapping(f)  # --pooling-opt: a key given twice refused (it adds to a file's, key by key)
            values[f.name] = parse_options(given, f.metadata.get("flag", f.name), once=True) if mapping else given
    return values


# The top-level options that take a value: the word after one is no command (attnpool --import mine train ...).
_VALUED = ("--import",)


def add_import_option(parser: argparse.ArgumentParser, dest: str) -> None:
    """``--import MODULE``, repeatable, before the command (``dest`` ``imports``) or after it (``imports_after``).

    Two destinations: a command's parser would otherwise replace the modules given before its name.
    """
    parser.add_argument("--import", dest=dest, action="append", default=[], metavar="MODULE", help=help_line(
        "import this module first, so that the poolers it registers can be named (repeatable)", "none"))


def import_modules(names: Sequence[str]) -> None:
    """Import the modules of ``--import`` (a user's poolers register themselves on import).

    The working directory goes first on ``sys.path``, as ``python -m`` puts it: the console script's lacks it, so
    ``attnpool --import mine`` would not find the ``mine.py`` beside the user.

    Raises:
        ImportError: One line naming the module and the error; for a module not found, where it is looked for.
    """
    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as err:
            # the module itself not found (not one that it imports): say where it is looked for
            missing = isinstance(err, ModuleNotFoundError) and err.name is not None and (
                name == err.name or name.startswith(err.name + "."))
            hint = f" ({import_hint(name)})" if missing else ""
            raise ImportError(f"--import {name}: {type(err).__name__}: {err}{hint}") from err


def commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers by name (argparse has no public way to them: its actions are read, as its help does)."""
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def unknown_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The command in ``argv`` and the ``--flags`` after it that it does not know (nor abbreviate).

    Each with the values that follow it: the commands take no positional arguments, so argparse leaves those over too.
    """
    commands = commands_of(parser)
    valued = [i + 1 for i, arg in enumerate(argv) if len(arg) > 2 and any(f.startswith(arg) for f in _VALUED)]
    at = next((i for i, arg in enumerate(argv) if not arg.startswith("-") and i not in valued), None)
    if at is None or argv[at] not in commands:
        return None, []
    flags = [flag for action in commands[argv[at]]._actions for flag in action.option_strings]
    rest = list(argv[at + 1:])
    unknown: list[str] = []
    taking = False  # the values of an unknown flag
    for arg in rest[:rest.index("--")] if "--" in rest else rest:
        if arg.startswith("-") and not (" " in arg and "=" not in arg.split(" ", 1)[0]):  # as argparse: with a
            # space (and no `=` before it) an argument is a value, e.g. --template '-- {text}'; a flag's unique
            # prefix is that flag
            taking = arg.startswith("--") and not any(flag.startswith(arg.split("=", 1)[0]) for flag in flags)
        if taking:
            unknown.append(arg)
    return argv[at], unknown


def refuse_unknown(parser: argparse.ArgumentParser, command: str, unknown: Sequence[str]) -> None:
    """Exit 2 with the command's usage and, for a misspelt flag, the closest (``--max-lenght``: ``--max-length``)."""
    command_parser = commands_of(parser)[command]
    flags = [flag for action in command_parser._actions for flag in action.option_strings]
    hints = [f"{arg} (did you mean {close[0]}?)" if arg.startswith("--") and (
        close := difflib.get_close_matches(arg.split("=", 1)[0], flags, 1)) else arg for arg in unknown]
    command_parser.error(f"unrecognized arguments: {' '.join(hints)}")


__all__ = ["NONE", "add_import_option", "add_train_options", "help_line", "import_modules", "overrides",
           "refuse_unknown", "shown_default", "unknown_flags"]
