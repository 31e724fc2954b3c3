"""The contenders of a comparison: pooler specs written ``NAME`` or ``NAME:key=value,...``."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnpool.config import TrainConfig
from attnpool.config_checks import check_pooler, same_pooler
from attnpool.options import parse_options
from attnpool.pooling import available_poolers, get_pooler_class
from attnpool.pooling.base import user_module


@dataclass(frozen=True)
class PoolerSpec:
    """One contender: a registered pooler name with its options, written ``NAME`` or ``NAME:key=value,key=value``.

    ``flag``: the option the spec was given with (``--poolings``, or ``--baseline``), named in its errors.
    """

    label: str
    pooling: str
    options: dict[str, Any] = field(default_factory=dict)
    flag: str = field(default="--poolings", compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, flag: str = "--poolings") -> PoolerSpec:
        """Parse ``attention:attn_size=128,num_heads=2`` (values are JSON when they parse, else strings).

        A value may hold commas inside JSON brackets or quotes: ``weighted_layer:pooler={"type":"attention",
        "attn_size":64},num_layers=4``. ``flag`` is the option the text came from, named in the errors.
        """
        name, _, rest = text.partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"{flag}: empty pooler name in {text!r}; expected NAME or NAME:key=value,...")
        try:  # unknown names fail here, with the closest valid one and the flag that gave them
            get_pooler_class(name)
        except ValueError as err:
            raise type(err)(f"{flag} {text.strip()}: {err}") from None
        options = parse_options(items := _top_level_items(rest), repr(text))
        keys = [item.partition("=")[0].strip() for item in items]
        if twice := next((key for i, key in enumerate(keys) if key in keys[:i]), None):  # else the later one won
            raise ValueError(f"{flag} {text.strip()}: option {twice} is given twice; give it once, with the value you "
                             "mean")
        return cls(label=text.strip(), pooling=name, options=options, flag=flag)

    @property
    def slug(self) -> str:
        """A folder name for the label."""
        return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", self.label)

    def same_pooler(self, other: PoolerSpec) -> bool:
        """Whether both specs build the same pooler: one registered class, with equal options.

        The registry ignores case, ``-``, ``_`` and a ``pooling`` suffix (``mean_pooling`` is ``mean``), and no
        options are none (``attention:`` is ``attention``); a combination is compared part by part
        (:func:`~attnpool.config_checks.same_pooler`: ``attention+mean`` is not ``max+mean``).
        """
        return same_pooler(self.pooling, other.pooling) and self.options == other.options

    def check(self, cfg: TrainConfig) -> None:
        """:func:`~attnpool.config_checks.check_pooler` of the recipe with this pooler, its errors naming :attr:`flag`.

        Raises:
            ValueError: A bad option or value, or a pooler that does not fit the recipe.
        """
        try:
            check_pooler(dataclasses.replace(cfg, pooling=self.pooling, pooling_options=self.options), self.label)
        except ValueError as err:
            if self.flag == "--poolings":
                raise
            raise ValueError(str(err).replace("--poolings", self.flag)) from None


def contenders(poolings: str | list[str], baseline: str) -> tuple[list[PoolerSpec], PoolerSpec]:
    """The specs of ``poolings`` with the baseline's (first, unless listed), and the baseline's own spec.

    A pooler listed under the baseline's spelling or another of the same pooler and options (``mean_pooling`` for
    ``mean``) is the baseline, where it is listed.

    Raises:
        ValueError: A bad spec; one pooler listed twice (spelled alike or not, as ``Attention`` and ``attention``);
            two specs that would share a run folder (names that differ only in punctuation or case).
    """
    specs = [PoolerSpec.parse(p) for p in ([poolings] if isinstance(poolings, str) else poolings)]
    for i, spec in enumerate(specs):
        other = next((o for o in specs[:i] if o.same_pooler(spec)), None)
        if other is not None:
            same = (f"names {spec.label} more than once" if other.label == spec.label else
                    f"names one pooler twice, as {other.label} and as {spec.label} (the same pooler and options)")
            raise ValueError(f"--poolings {same}: give each pooler once")
    base = PoolerSpec.parse(baseline, "--baseline")
    base = next((spec for spec in specs if spec.same_pooler(base)), base)
    if base not in specs:
        specs.insert(0, base)
    folders: dict[str, str] = {}
    for spec in specs:  # two specs that differ in punctuation only would share a run folder, and its runs
        other = folders.setdefault(spec.slug.casefold(), spec.label)  # casefold: one folder on macOS and Windows
        if other != spec.label:
            raise ValueError(f"--poolings {other} and {spec.label} would share the run folder {spec.slug}: write "
                             "one of them differently (they differ only in punctuation or case)")
    return specs, base


def _top_level_items(text: str) -> list[str]:
    """``a=1,b=[1,2],c={"x":1}`` -> ``["a=1", "b=[1,2]", 'c={"x":1}']``: commas inside brackets or quotes stay."""
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote and text[i - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def worker_imports(spec: PoolerSpec) -> tuple[list[str], dict[str, str]]:
    """What a worker process needs to build the spec's poolers: its ``--import MODULE`` arguments and environment.

    attnpool's own poolers register when the worker imports attnpool; a user's (``@attnpool.register_pooler`` in
    their module) only once their module is imported there too. The folder it was imported from goes first on the
    worker's ``PYTHONPATH``, since a ``sys.path`` entry made in this process (a script's ``sys.path.insert``) is not
    inherited. Poolers named inside the options (``weighted_layer:pooler={"type":"mine"}``) count too.

    Raises:
        ValueError: A pooler defined in ``__main__`` (a script, a notebook), which no other process can import:
            said before anything trains.
    """
    classes = {get_pooler_class(name) for name in [spec.pooling, *_names_in(spec.options, set(available_poolers()))]}
    modules = sorted({module for c in classes if (module := user_module(c))})
    if "__main__" in modules:
        defined = ", ".join(sorted(c.__name__ for c in classes if c.__module__ == "__main__"))
        raise ValueError(f"{spec.flag} {spec.label}: {defined} is defined in __main__ (this script or notebook), which "
                         "the comparison's worker processes cannot import; move it into a module (e.g. my_poolers.py "
                         "beside the script) and import it from there")
    env = dict(os.environ)
    roots = [root for module in modules if (root := _import_root(module))]
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*roots, *filter(None, env.get("PYTHONPATH", "").split(
            os.pathsep))]))
    return [arg for module in modules for arg in ("--import", module)], env


def _names_in(options: Any, registered: set[str]) -> list[str]:
    """The ``registered`` pooler names among the strings of (nested) options: the poolers a pooler builds."""
    if isinstance(options, dict):
        return [name for value in options.values() for name in _names_in(value, registered)]
    if isinstance(options, list | tuple):
        return [name for value in options for name in _names_in(value, registered)]
    return [options] if isinstance(options, str) and options in registered else []


def _import_root(module: str) -> str | None:
    """The ``sys.path`` folder ``module`` was imported from (``/r`` for ``pkg.sub`` in ``/r/pkg/sub.py``)."""
    file = getattr(sys.modules.get(module), "__file__", None)
    if not file:
        return None
    path = Path(file).absolute()
    depth = module.count(".") + (path.stem == "__init__")
    return str(path.parents[depth])
