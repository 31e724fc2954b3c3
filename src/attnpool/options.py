"""Option values written as text (flags, pooler specs, YAML config files), turned into what TrainConfig holds."""

from __future__ import annotations

import json
import numbers
import operator
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """An option or config file that cannot be used; the message is one line saying where and why."""


OFF_VALUES = ("0", "false", "no", "off")


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns a default off: ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(variable, "").strip().lower() in OFF_VALUES


TRUE_WORDS = ("true", "yes", "on")
FALSE_WORDS = ("false", "no", "off")


def parse_switch(text: str) -> bool | None:
    """True for ``true``, ``yes``, ``on``; False for ``false``, ``no``, ``off`` (any case, spaces around); else None."""
    word = text.strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def parse_value(text: str) -> Any:
    """A ``KEY=VALUE`` option's value: a switch word as a bool, else JSON when it parses (numbers, lists), else text.

    ``true``, ``yes``, ``on`` and ``false``, ``no``, ``off`` are read as bools in any case (``learnable_p=False`` is
    False: as text it was a non-empty string, which the pooler took for True). Text that is one of these words is
    written quoted, as JSON: ``label="no"``.
    """
    switch = parse_switch(text)
    if switch is not None:
        return switch
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(items: Iterable[str], where: str, once: bool = False) -> dict[str, Any]:
    """``["attn_size=128", "num_heads=2"]`` -> ``{"attn_size": 128, "num_heads": 2}``; a later key wins unless ``once``.

    Values go through :func:`parse_value`. ``where`` names the source in errors (``--pooling-opt``, or a pooler
    spec such as ``'attention:attn_size'``). ``once``: a key given twice is refused (``--pooling-opt``'s flags,
    where the last one silently won), as list flags given twice and a config file's duplicate keys are.

    Raises:
        ConfigError: An item without ``=`` or with an empty key, naming the item, ``where`` and the expected form;
            with ``once``, a key given twice, naming both items.
    """
    options: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"option {item!r} of {where} is not key=value; expected KEY=VALUE, e.g. attn_size=128")
        if once and key.strip() in given:
            raise ConfigError(f"{where} gives {key.strip()} twice ({given[key.strip()]} and {item}): give "
                              f"{where} {key.strip()}=VALUE once, with the value you mean")
        given[key.strip()] = item
        options[key.strip()] = parse_value(value)
    return options


def parse_pooling_layers(value: Any) -> Any:
    """``pooling_layers`` as the model takes it: ``"last"``, ``"all"`` or a list of layer indices.

    Command-line words are accepted: ``["last"]`` -> ``"last"``, ``["all"]`` -> ``"all"``, ``["0", "-1"]`` ->
    ``[0, -1]``; a config file's one index (``-2``) or words (``"0 -1"``) too. A list of ints passes through.

    Raises:
        ConfigError: Neither one of those words nor integers.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        value = value.split() or [value]
    if not isinstance(value, list | tuple):
        raise ConfigError(f"pooling_layers must be last, all or layer indices (e.g. 0 -1), got {value!r}")
    if list(value) in (["last"], ["all"]):
        return value[0]
    layers = []
    for item in value:
        if isinstance(item, str) and item.strip().lstrip("+-").isdigit():
            layers.append(int(item))
        elif isinstance(item, int) and not isinstance(item, bool):
            layers.append(item)
        else:
            raise ConfigError(f"pooling_layers must be last, all or layer indices (e.g. 0 -1), got {list(value)!r}")
    return layers


def _yaml_problem(path: Path, err: Any, lines: list[str]) -> str:
    """One line for a YAML syntax error: ``FILE:LINE:COLUMN: problem (context at line L, column C)``.

    On a ``key: {...`` line (the file's ``lines``), it adds how to quote the text: YAML reads an unquoted ``{`` as
    the start of a mapping, so ``template: {first} [SEP] {second}`` failed as "expected <block end>" alone.
    """
    mark = err.problem_mark or err.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    text = err.problem or err.context or "invalid YAML"
    if err.context and err.problem and err.context_mark is not None:
        text += f" ({err.context} at line {err.context_mark.line + 1}, column {err.context_mark.column + 1})"
    line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    # a top-level option's text (a template): not pooling_options, the one option that is a mapping, nor its items
    braced = re.fullmatch(r"([\w-]+)\s*:\s*(\{.*?)\s*", line)
    text_option = braced is not None and braced[1].replace("-", "_") != "pooling_options"
    hint = f"; {_quote_hint(braced[1], braced[2], 'a mapping')}" if text_option else ""
    return f"{where}: {' '.join(text.split())}{hint}"


def _quote_hint(name: str, text: str, kind: str) -> str:
    """How to write ``text``, which YAML read as ``kind`` (a mapping: ``{first}``), as the text of option ``name``."""
    quoted = text.replace("'", "''")
    return f"YAML reads an unquoted {text} as {kind}: quote the text, {name}: '{quoted}'"


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing a key given twice in one mapping (the safe loader kept the last, silently).

    Numbers with leading zeros (``042``) and in base 60 (``1:30``) are text, as a flag's value is: YAML 1.1 read
    ``seed: 042`` as the octal 34 and ``epochs: 1:00`` as 60, where ``--seed 042`` is 42, and ``label: 0123`` as the
    column ``"83"`` (:data:`_INT` and :data:`_FLOAT`; ``0x1F``, ``0b101``, ``0o17`` and ``1_000`` stay numbers).
    """

    def construct_document(self, node: yaml.Node) -> Any:
        # Checked on the composed nodes, before construction: merging (`<<: *base`) rewrites a merged mapping's
        # nodes in place, which would then show its overridden keys twice.
        self._refuse_repeated_keys(node, set())
        return super().construct_document(node)

    def _refuse_repeated_keys(self, node: yaml.Node, visited: set[int]) -> None:
        """A ConstructorError at the second of two equal keys (``1`` and ``0x1`` too) in a mapping under ``node``.

        A ``<<`` merge's keys may be overridden, as YAML says; each anchored node is walked once.
        """
        if id(node) in visited:
            return
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Mark] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = self.construct_object(key_node)  # a scalar: its value, as the mapping will hold it
                    if key in first:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key_node.value!r} (first at line {first[key].line + 1}); "
                            "keep one of them", key_node.start_mark)
                    first[key] = key_node.start_mark
                self._refuse_repeated_keys(value_node, visited)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self._refuse_repeated_keys(item, visited)



# YAML 1.1's int and float patterns (PyYAML's resolver) without the octal written 0NNN and the base-60 forms.
_INT = re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?0o[0-7_]+)$""")
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _NUMBER_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(_NUMBER_TAGS[0], _INT, list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_NUMBER_TAGS[1], _FLOAT, list("-+0123456789."))

def _unique_pairs(path: Path) -> Any:
    """A ``json.loads`` ``object_pairs_hook`` refusing a key given twice in one object (json kept the last)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if twice is not None:
            raise ConfigError(f"{path}: duplicate key {twice!r} in one object; keep one of them")
        return dict(items)
    return pairs


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON, by the ``.json`` extension) config file into a dict of options (``~``: the home folder).

    Raises:
        FileNotFoundError: There is no such file.
        ConfigError: ``path`` is a folder, or the file is not UTF-8 (a byte-order mark is allowed), does not parse
            (one line, ``FILE:LINE:COLUMN: problem``, saying how to quote a ``{...}`` text), holds a key twice in
            one mapping (``head-lr`` and ``head_lr`` too), or does not hold a mapping of option names.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file: give the YAML or JSON file of the options")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is no JSON error
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        values = (json.loads(text, object_pairs_hook=_unique_pairs(path)) if path.suffix.lower() == ".json" else
                  yaml.load(text, Loader=_UniqueKeyLoader))  # a SafeLoader: safe
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}:{err.colno}: {err.msg}") from None
    except yaml.MarkedYAMLError as err:
        raise ConfigError(_yaml_problem(path, err, text.splitlines())) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {' '.join(str(err).split())}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of option: value, got {type(values).__name__}")
    bad = [k for k in values if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{path}: option names must be text, got {bad[0]!r}")
    named: dict[str, str] = {}
    for key in values:  # head-lr and head_lr are one option: the later one was kept, silently
        if named.setdefault(key.replace("-", "_"), key) != key:
            raise ConfigError(f"{path}: {named[key.replace('-', '_')]} and {key} are one option, "
                              f"{key.replace('-', '_')}; keep one of them")
    return {k.replace("-", "_"): v for k, v in values.items()}


_KINDS = {float: "a number", int: "a whole number", bool: "true or false", str: "text"}


def typed_value(name: str, kind: Any, value: Any, where: str) -> Any:
    """A config file's ``value`` of option ``name`` as its declared type ``kind`` (a resolved annotation).

    YAML 1.1 reads ``1e-4`` (no dot) as the string "1e-4": it becomes 1e-4, as ``16.0`` becomes 16 for an int and a
    number becomes text for a text option. An optional option's ``none`` is None, as the flag's is; a dict option's
    text values are read as ``--pooling-opt`` reads them. A value of another kind fails here, naming the option, not
    in fold 0.

    Raises:
        ConfigError: A missing value where one is needed, a string for a number or a switch, a fraction for a count,
            a switch, a mapping or a list for text (saying how to quote it), or no mapping for a dict option.
    """
    value = _builtin(value)
    if (typing.get_origin(kind) or kind) is dict:
        return _mapping(name, value, where)
    union = typing.get_origin(kind) in (typing.Union, types.UnionType)
    options = [a for a in typing.get_args(kind) if a is not type(None)] if union else [kind]
    if union and type(None) in typing.get_args(kind) and isinstance(value, str) and value.strip().lower() == "none":
        return None  # the word --help offers (--recurrent {lstm,gru,none}), which YAML reads as text
    if len(options) != 1 or options[0] not in _KINDS:
        return value  # lists and mixed kinds: their own checks
    if value is None:
        if union:
            return None
        raise ConfigError(f"{where}: {name} needs a value; remove the line to keep its default")
    want = options[0]
    if want is float and isinstance(value, int | float) and not isinstance(value, bool):
        return value  # an int is a number: epochs 1 stays 1
    if want is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    elif want is int and isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    elif want is bool and isinstance(value, bool) or want is str and isinstance(value, str):
        return value
    elif want is str and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a column named 2021
    elif want is str and isinstance(value, os.PathLike) and isinstance(os.fspath(value), str):
        return os.fspath(value)  # train_file=Path("train.csv") from the Python API
    hint = " (unquoted true or false)" if want is bool else _number_text_hint(value) if want is int else ""
    if want is str and isinstance(value, bool):  # the text is lost: YAML 1.1 read `label: no` as false
        hint = "; YAML reads an unquoted yes, no, on, off, true or false as a switch: quote the text ('no')"
    elif name == "report_to" and isinstance(value, list):  # not a list quoted: one tracker, or all of them
        hint = ("; report_to takes one tracker (none, tensorboard, mlflow or wandb), or all for every installed one: "
                "report_to: all")
    elif want is str and isinstance(value, Mapping | list):  # YAML read `template: {first}` as {"first": None}
        hint = "; " + _quote_hint(name, _as_written(value), "a mapping" if isinstance(value, Mapping) else "a list")
    raise ConfigError(f"{where}: {name} must be {_KINDS[want]}, got {shown(value)}{hint or frame_hint(value)}")


def _as_written(value: Mapping | list) -> str:
    """A mapping or list as YAML's flow form writes it: ``{"first": None}`` -> ``{first}``, ``["a"]`` -> ``[a]``."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}" if v is None else f"{k}: {v}" for k, v in value.items()) + "}"
    return "[" + ", ".join(map(str, value)) + "]"


def shown(value: Any) -> str:
    """``value`` for an error message: its repr when short, else its type (a DataFrame's repr is pages long)."""
    text = repr(value)
    return text if len(text) <= 80 and "\n" not in text else f"a {type(value).__name__}"


def frame_hint(value: Any) -> str:
    """How to pass a table where a file path is wanted (a DataFrame); else ``""``."""
    if not hasattr(value, "to_csv"):
        return ""
    return (f"; attnpool reads tables from files: write the {type(value).__name__} first, e.g. "
            "df.to_csv('data.csv', index=False), and pass the path")


def whole_number(value: Any, name: str, least: int, why: str = "") -> int:
    """``value`` as an ``int`` (a Python or numpy integer, not a bool) of at least ``least``.

    ``name``: the option as the caller knows it (``erasure_k``, ``--erasure-k``); ``why``: what the least value
    means, shown after it (`` (0 skips the erasure test)``).

    Raises:
        ValueError: Not a whole number (``2.0``, ``"3"``, ``True``), or below ``least``, naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        whole = not isinstance(value, bool) and isinstance(value, numbers.Real) and float(value).is_integer()
        raise ValueError(f"{name} must be a whole number >= {least}{why}, got {shown(value)}"
                         + (f"; give {int(value)}" if whole else ""))
    if value < least:
        raise ValueError(f"{name} must be >= {least}{why}, got {value}")
    return operator.index(value)


def file_path(value: Any, name: str) -> Path:
    """``value``, a file path given as text or ``os.PathLike``, as a :class:`~pathlib.Path` (``~`` is the home folder).

    Raises:
        TypeError: Anything else (a DataFrame, None), naming ``name`` and the type given.
    """
    if isinstance(value, str | os.PathLike):
        return Path(value).expanduser()  # "~/data.csv": in the home folder, as a shell reads it
    raise TypeError(f"{name} must be a file path (str or pathlib.Path), got {shown(value)}{frame_hint(value)}")


def _number_text_hint(value: Any) -> str:
    """Why a whole number is text (``limit: 1e3``, ``seed: 042``), and how to write it; else ``""``."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?0[0-9_]+", value.strip()):
        return (f"; a number with leading zeros is read as text (an id or a code; YAML 1.1 read {value.strip()} as "
                f"octal): write {int(value.strip().replace('_', ''))}")
    try:
        number = float(value) if isinstance(value, str) and "e" in value.lower() else None
    except ValueError:
        return ""
    if number is None or not number.is_integer():
        return ""
    return (f"; YAML reads {value.strip()} as text, not a number (its exponent form needs a dot and a sign: "
            f"1.0e+3): write {int(number)}")


def _builtin(value: Any) -> Any:
    """``value`` with its numbers as Python's own: a NumPy ``int64`` an int, a ``float32``/``float64`` a float.

    From the Python API (``train(lr=np.float64(2e-5))``) a NumPy number passed as a float and failed only when the
    run saved its config, after the data loaded; an ``int64`` batch size was refused as no whole number. Lists and
    mappings (``only_folds``, ``pooling_options``) are converted item by item.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Number | list | tuple | Mapping):
        return value
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple):
        return type(value)(_builtin(v) for v in value) if type(value) in (list, tuple) else value
    if isinstance(value, Mapping):
        return {k: _builtin(v) for k, v in value.items()}
    return value


def _mapping(name: str, value: Any, where: str) -> dict[str, Any]:
    """A config file's dict option (``pooling_options``): text values read as ``--pooling-opt`` reads them.

    YAML 1.1 reads ``eps: 1e-7`` (no dot) as the string "1e-7", which the pooler took as is and failed on in fold 0;
    :func:`parse_value` makes it the number, as ``--pooling-opt eps=1e-7`` does. An empty line is no options.

    Raises:
        ConfigError: Not a mapping (a list ``[attn_size=128]`` or a string ``attn_size=128``), naming the form.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {name} must be a mapping: key: value lines indented under {name}: (e.g. "
                          f"'  attn_size: 128'), got {value!r}")
    return {key: parse_value(item) if isinstance(item, str) else item for key, item in value.items()}
