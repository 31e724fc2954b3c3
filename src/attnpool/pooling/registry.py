"""Lookup of poolers by name, config dict or instance."""

from __future__ import annotations

import difflib
import inspect
import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from attnpool.pooling.base import Pooler

_REGISTRY: dict[str, type[Pooler]] = {}

# A spec such as "attention+mean" builds the pooler registered under this name with poolers=["attention", "mean"].
COMBINED_NAME = "combined"

P = TypeVar("P", bound=type[Pooler])


class UnknownPoolerError(ValueError):
    """No pooler is registered under a name; a ``ValueError``, whose message says what to do.

    It names the closest valid name, or, for a saved model's pooler defined outside attnpool, the module to import
    before loading: a loader tells this from its other errors and passes the message on alone.
    """


def unknown_pooler_in(err: BaseException) -> UnknownPoolerError | None:
    """The UnknownPoolerError in ``err`` or the errors it was raised from or while handling, or ``None``.

    A loader passes its message on alone (it says what to import): transformers may wrap it in errors of its own.
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:  # a cycle of causes ends the search
        if isinstance(current, UnknownPoolerError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def import_hint(module: str) -> str:
    """Where ``--import MODULE`` finds a module: the working directory, or ``PYTHONPATH``."""
    return f"run from the folder holding {module.replace('.', '/')}.py, or add that folder to PYTHONPATH"


def _normalize(name: str) -> str:
    """``"Multi-Head_Attention"``, ``"multihead attention pooling"`` -> ``"multiheadattention"``."""
    key = re.sub(r"[\s_\-]+", "", name.lower())
    for suffix in ("pooling", "pooler", "pool"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key


# Characters that pooler specs split on: "attention+mean" (a combination), compare's "NAME:key=value,key=value".
_SPEC_SEPARATORS = "+:=,"

# Constructor options that get_config need not save, each for a reason: `combined` takes num_layers from the model
# only to pass it on to its multi-layer parts, whose own configs save it.
_UNSAVED_OPTIONS = {COMBINED_NAME: ("num_layers",)}


def register_pooler(cls: P) -> P:
    """Class decorator adding a :class:`Pooler` subclass to the registry under ``cls.name``.

    Registering the same class again (``importlib.reload``, a notebook cell run twice), told by its module and
    qualified name, replaces the entry.

    Raises:
        ValueError: No ``name``, a name holding one of ``+ : = ,`` (spec separators) or without letters or
            digits, a name taken by another class, or a constructor option missing from ``config_keys`` (it
            would not be saved, and a reloaded model would silently use its default).
    """
    if not cls.name:
        raise ValueError(f"{cls.__name__} must set a registry `name` before it is registered")
    key = _normalize(cls.name)
    if any(sep in cls.name for sep in _SPEC_SEPARATORS) or not key:
        raise ValueError(f"{cls.__name__}: pooler name {cls.name!r} cannot be registered: names must not contain "
                         f"{' '.join(_SPEC_SEPARATORS)} (pooler specs split on them) and need a letter or digit; "
                         "use e.g. 'my_pooler'")
    unsaved = set(_UNSAVED_OPTIONS.get(cls.name, ()))
    missing = [option for option in _constructor_options(cls)
               if option not in cls.config_keys and option not in unsaved]
    if missing:
        raise ValueError(
            f"{cls.__name__}: constructor option(s) {', '.join(missing)} are not in its config_keys "
            f"{tuple(cls.config_keys)}, so get_config() would not save them and a reloaded pooler would take their "
            f"defaults; add them to config_keys (each kept as an attribute of the same name), e.g. "
            f"config_keys = {tuple(cls.config_keys) + tuple(missing)!r}"
        )
    old = _REGISTRY.get(key)
    if old is not None and old is not cls and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(
            f"pooler name {cls.name!r} is already registered by {old.__qualname__} (module {old.__module__!r}); "
            f"{cls.__qualname__} (module {cls.__module__!r}) needs another `name`, e.g. {cls.name + '_2'!r}"
        )
    _REGISTRY[key] = cls  # a re-registered class (same module and qualified name) replaces its earlier version
    return cls


def available_poolers() -> list[str]:
    """Names of all registered poolers, sorted."""
    return sorted(cls.name for cls in _REGISTRY.values())


def get_pooler_class(name: str) -> type[Pooler]:
    """The pooler class registered under ``name`` (case, ``-``, ``_`` and a ``pooling`` suffix ignored).

    A combination spec such as ``"attention+mean"`` gives the ``combined`` pooler class.

    Raises:
        ValueError: For an unknown name, naming the closest valid one and listing all of them.
    """
    return _get_class(name)


def _get_class(name: str, module: str | None = None) -> type[Pooler]:
    """:func:`get_pooler_class`; ``module``, where a config names the one defining the pooler, goes in the error."""
    if "+" in name:
        name = COMBINED_NAME
    key = _normalize(name)
    if key in _REGISTRY:
        return _REGISTRY[key]
    names = available_poolers()
    if module == "__main__":
        raise UnknownPoolerError(f"Unknown pooler {name!r}: this model's pooler {name!r} was defined in the script "
                                 "that saved it (module '__main__', see its config); define it in a module and import "
                                 f"that before loading. Available poolers: {', '.join(names)}")
    if module:
        raise UnknownPoolerError(f"Unknown pooler {name!r}: this model's pooler {name!r} is defined in module "
                                 f"{module!r} (see its config); import it before loading (CLI: --import {module}; "
                                 f"{import_hint(module)})")
    by_key = {_normalize(n): n for n in names}
    # 0.7: "atention" -> attention and "meen" -> mean, but no hint for an unrelated name ("mine" -> combined)
    close = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.7)
    hint = f" Did you mean {by_key[close[0]]!r}?" if close else ""
    raise UnknownPoolerError(f"Unknown pooler {name!r}.{hint} Available poolers: {', '.join(names)}")


def check_rebuildable(pooler: Pooler, what: str = "pooling") -> None:
    """Refuse a pooler instance that its config would not rebuild: a model saves its pooler by name.

    The poolers it holds and saves by name (:meth:`~attnpool.pooling.base.Pooler.held_poolers`: a ``combined``
    pooler's parts, a ``weighted_layer``'s token pooler) are checked the same way, at any depth. Any other pooler
    inside (a helper the constructor builds, which the config rebuilds; or one a wrapper of the user's saves without
    declaring it in ``held_poolers``) is refused only as a subclass keeping a registered parent's ``name``.

    Raises:
        ValueError: ``type(pooler)``, or the type of a pooler it holds, is not the class registered under its
            ``name`` (an unregistered class, or a subclass keeping its parent's ``name``, which would reload as the
            parent and lose its changes).
    """
    _check_registered(pooler, f"{what}={type(pooler).__name__}(...)")
    held, checked = list(pooler.held_poolers().items()), {id(pooler)}
    while held:
        path, module = held.pop(0)
        checked.add(id(module))
        _check_registered(module, f"{what}={type(pooler).__name__}(...) holds {path}={type(module).__name__}(...), "
                                  "which")
        held += [(f"{path}.{inner}", deeper) for inner, deeper in module.held_poolers().items()]
    for path, module in pooler.named_modules():  # any other: a subclass under its registered parent's name is refused
        key = _normalize(type(module).name or "") if isinstance(module, Pooler) and id(module) not in checked else ""
        if key and _REGISTRY.get(key) not in (None, type(module)):
            _check_registered(module, f"{what}={type(pooler).__name__}(...) holds {path}={type(module).__name__}(...), "
                                      "which")


def _check_registered(pooler: Pooler, subject: str) -> None:
    """:func:`check_rebuildable` for one pooler; ``subject`` names it in the error."""
    cls = type(pooler)
    key = _normalize(cls.name) if cls.name else ""
    registered = _REGISTRY.get(key) if key and "+" not in cls.name else None
    if registered is cls:
        return
    why = (f"it would reload as {registered.__name__}, registered under that name, without {cls.__name__}'s changes"
           if registered is not None else "a class not in the registry cannot be rebuilt when the model is loaded")
    raise ValueError(
        f"{subject} is not the pooler registered as {cls.name!r}: a model saves its pooler by name, "
        f"and {why}. Give {cls.__name__} its own `name` and decorate it with @attnpool.register_pooler, so that it "
        "saves and reloads"
    )


def inner_spec(pooler: Pooler) -> dict[str, Any]:
    """A built pooler's config without ``hidden_size``: how a pooler that holds others saves them.

    The holder rebuilds its parts at its own ``hidden_size``, so theirs is not repeated in its config.
    """
    return {k: v for k, v in pooler.get_config().items() if k != "hidden_size"}


def _constructor_options(cls: type[Pooler]) -> list[str]:
    """The options a pooler's constructor takes by name: all its parameters but self, hidden_size, *args, **kwargs."""
    params = inspect.signature(cls.__init__).parameters
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in params if p not in ("self", "hidden_size") and params[p].kind not in variadic]


def build_pooler(spec: str | Mapping[str, Any] | Pooler, hidden_size: int | None = None, **options: Any) -> Pooler:
    """Build a pooler from a registered name, a config dict from ``get_config()``, or pass an instance through.

    Args:
        spec: A registered name (``"attention"``, ``"Multi-Head-Attention"``...), a combination of names joined by
            ``+`` (``"attention+mean"``: their outputs concatenated, see
            :class:`~attnpool.pooling.combine.CombinedPooling`), a dict with a ``"type"`` key such as
            :meth:`Pooler.get_config` returns, or a :class:`Pooler` instance.
        hidden_size: The encoder's hidden size. Optional when ``spec`` is a config holding ``hidden_size``.
        **options: Constructor options of the pooler, e.g. ``attn_size=128``; they override the config's.

    Returns:
        The pooler.

    Raises:
        ValueError: Unknown name, unknown option, a missing or conflicting ``hidden_size``.

    Example:
        >>> pooler = build_pooler("attention", 768, attn_size=128)
        >>> rebuilt = build_pooler(pooler.get_config())
        >>> both = build_pooler("attention+mean", 768, combine="project")
    """
    if isinstance(spec, Pooler):
        if options:
            raise ValueError(f"build_pooler got options {sorted(options)} together with a built pooler instance")
        if hidden_size is not None and spec.hidden_size != hidden_size:
            raise ValueError(
                f"{type(spec).__name__} was built for hidden_size={spec.hidden_size}, but the encoder's hidden "
                f"size is {hidden_size}; build the pooler with hidden_size={hidden_size}"
            )
        return spec
    if isinstance(spec, Mapping):
        config = dict(spec)
        if "type" not in config:
            raise ValueError(f"pooler config {config!r} has no 'type' key; expected e.g. {{'type': 'attention'}}")
        name = config.pop("type")
        config_hidden = config.pop("hidden_size", None)
        if config_hidden is not None and hidden_size is not None and config_hidden != hidden_size:
            raise ValueError(
                f"pooler config has hidden_size={config_hidden} but hidden_size={hidden_size} was requested"
            )
        hidden_size = hidden_size if hidden_size is not None else config_hidden
        options = {**config, **options}
    elif isinstance(spec, str):
        name = spec
    else:
        raise TypeError(f"pooler spec must be a name, a config dict or a Pooler, got {type(spec).__name__}")
    cls, options = _resolve(name, options)
    if hidden_size is None:
        raise ValueError(f"build_pooler({name!r}) needs hidden_size, the encoder's config.hidden_size")
    return cls(hidden_size, **options)


def check_pooler_options(name: str, options: Mapping[str, Any] | None = None) -> None:
    """Check a pooler name (or ``+`` combination) and its option names without building it.

    What :func:`build_pooler` would refuse, found before an encoder is loaded or any data read (a config's
    ``validate``); the values themselves are checked by the pooler when it is built.

    Raises:
        ValueError: Unknown name or ``+`` part (:class:`UnknownPoolerError`, with the closest valid one), unknown
            option (with the valid ones).
    """
    _resolve(name, dict(options or {}))


def _resolve(name: str, options: dict[str, Any]) -> tuple[type[Pooler], dict[str, Any]]:
    """The class a name builds and its constructor options (a combination's parts added); unknown options refused."""
    spec, parts = name, []
    if "+" in name:
        parts = [part.strip() for part in name.split("+")]
        if any(not part for part in parts):
            raise ValueError(f"pooler combination {name!r} has an empty part; expected e.g. 'attention+mean'")
        if "poolers" in options:
            raise ValueError(f"pooler combination {name!r} names its poolers already; drop the 'poolers' option")
        for part in parts:  # each part a known name, as build_pooler would find (check_pooler_options builds none)
            _get_class(part)
        options = {"poolers": parts, **options}
        name = COMBINED_NAME
    # which module defined a user's pooler (see Pooler.get_config): for the error only, never imported from here,
    # since importing a module that a config file names would run its code
    module = options.pop("module", None)
    cls = _get_class(name, module)
    valid = _constructor_options(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown and parts:
        _refuse_part_options(spec, parts, options, unknown)
    if unknown:
        raise ValueError(
            f"pooler {cls.name!r} got unknown option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(valid) if valid else '(none)'}"
        )
    return cls, options


def _refuse_part_options(spec: str, parts: list[str], options: Mapping[str, Any], unknown: list[str]) -> None:
    """Refuse the options of a ``+`` combination's parts (``attention+mean`` with attn_size), showing where they go.

    The ``combined`` pooler takes its own options alone; a part's go inside its ``poolers`` list, a form the user of
    ``attention+mean`` never saw. Returns where no part takes any of ``unknown`` (the plain error follows).
    """
    takes = {part: [key for key in unknown if key in _constructor_options(_get_class(part))] for part in parts}
    if not any(takes.values()):
        return
    poolers = [{"type": part, **{key: options[key] for key in keys}} if keys else part for part, keys in takes.items()]
    own = "".join(f" --pooling-opt {key}={value if isinstance(value, str) else json.dumps(value, default=str)}"
                  for key, value in options.items() if key not in unknown and key != "poolers")
    whose = "; ".join(f"{', '.join(keys)} (an option of its part {part})" for part, keys in takes.items() if keys)
    nobody = [key for key in unknown if not any(key in keys for keys in takes.values())]
    none = f", and drop {', '.join(nobody)}, which no part takes" if nobody else ""
    raise ValueError(
        f"pooler combination {spec!r} takes only its own options "
        f"({', '.join(_constructor_options(get_pooler_class(COMBINED_NAME)))}), got {whose}: give each part its "
        f"options inside poolers, --pooling combined --pooling-opt 'poolers={json.dumps(poolers, default=str)}'"
        f"{own}{none}"
    )
