"""Lookup of poolers by name, config dict or instance."""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from attnpool.pooling.base import Pooler

_REGISTRY: dict[str, type[Pooler]] = {}

# A spec such as "attention+mean" builds the pooler registered under this name with poolers=["attention", "mean"].
COMBINED_NAME = "combined"

P = TypeVar("P", bound=type[Pooler])


def _normalize(name: str) -> str:
    """``"Multi-Head_Attention"``, ``"multihead attention pooling"`` -> ``"multiheadattention"``."""
    key = re.sub(r"[\s_\-]+", "", name.lower())
    for suffix in ("pooling", "pooler", "pool"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key


def register_pooler(cls: P) -> P:
    """Class decorator adding a :class:`Pooler` subclass to the registry under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} must set a registry `name` before it is registered")
    key = _normalize(cls.name)
    if key in _REGISTRY and _REGISTRY[key] is not cls:
        raise ValueError(f"pooler name {cls.name!r} is already registered by {_REGISTRY[key].__name__}")
    _REGISTRY[key] = cls
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
    if "+" in name:
        name = COMBINED_NAME
    key = _normalize(name)
    if key in _REGISTRY:
        return _REGISTRY[key]
    names = available_poolers()
    by_key = {_normalize(n): n for n in names}
    close = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.5)
    hint = f" Did you mean {by_key[close[0]]!r}?" if close else ""
    raise ValueError(f"Unknown pooler {name!r}.{hint} Available poolers: {', '.join(names)}")


def inner_spec(pooler: Pooler) -> dict[str, Any]:
    """A built pooler's config without ``hidden_size``: how a pooler that holds others saves them.

    The holder rebuilds its parts at its own ``hidden_size``, so theirs is not repeated in its config.
    """
    return {k: v for k, v in pooler.get_config().items() if k != "hidden_size"}


def _constructor_options(cls: type[Pooler]) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    return [p for p in params if p not in ("self", "hidden_size") and params[p].kind != inspect.Parameter.VAR_KEYWORD]


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
        ValueError: Unknown name (with the closest valid one), unknown option (with the valid ones).
    """
    _resolve(name, dict(options or {}))


def _resolve(name: str, options: dict[str, Any]) -> tuple[type[Pooler], dict[str, Any]]:
    """The class a name builds and its constructor options (a combination's parts added); unknown options refused."""
    if "+" in name:
        parts = [part.strip() for part in name.split("+")]
        if any(not part for part in parts):
            raise ValueError(f"pooler combination {name!r} has an empty part; expected e.g. 'attention+mean'")
        if "poolers" in options:
            raise ValueError(f"pooler combination {name!r} names its poolers already; drop the 'poolers' option")
        options = {"poolers": parts, **options}
        name = COMBINED_NAME
    cls = get_pooler_class(name)
    valid = _constructor_options(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"pooler {cls.name!r} got unknown option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(valid) if valid else '(none)'}"
        )
    return cls, options
