"""docs/poolers.md against the code: every registered pooler's constructor options are listed with their defaults.

A new option, a renamed one or a changed default fails here until the "Options" section of docs/poolers.md says so.
Each pooler has one bullet there, ``* `name`: `option=default`, ...``; the option names are those
:func:`~attnpool.build_pooler` accepts (``registry._constructor_options``: the constructor's arguments without
``hidden_size`` and ``**kwargs``), and each default is compared by value (``1e-6`` and ``1e-06`` are the same).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from attnpool.pooling import available_poolers, get_pooler_class
from attnpool.pooling.registry import _constructor_options

POOLERS_DOC = Path(__file__).resolve().parents[1] / "docs" / "poolers.md"
OPTION = re.compile(r"`(\w+)=([^`]+)`")  # `name=value`


def options_section(text: str) -> str:
    """The text of the ``## Options`` section, up to the next ``## `` heading."""
    match = re.search(r"^## Options\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, "docs/poolers.md has no '## Options' section"
    return match.group(1)


def entries(section: str) -> dict[str, str]:
    """Each pooler's bullet in the section, by name: ``* `name`: ...`` and its indented continuation lines."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^\* `(\w+)`:(.*?)(?=^\S|\Z)", section, re.S | re.M):
        name = match.group(1)
        assert name not in found, f"docs/poolers.md lists the options of {name!r} twice"
        found[name] = match.group(2)
    return found


def documented_values(entry: str) -> dict[str, list[object]]:
    """The values written as `` `option=value` `` in one entry, per option (literals; others as their text)."""
    values: dict[str, list[object]] = {}
    for name, text in OPTION.findall(entry):
        try:
            value: object = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        values.setdefault(name, []).append(value)
    return values


def same(documented: object, default: object) -> bool:
    """Equal as values: a list for a tuple default, but not the text "0.0" for 0.0, nor 1 for True."""
    if isinstance(default, tuple | list) and isinstance(documented, tuple | list):
        return list(documented) == list(default)
    if any(isinstance(default, kind) != isinstance(documented, kind) for kind in (str, bool)):
        return False
    return documented == default


def problems(name: str, entry: str) -> list[str]:
    """What the entry of pooler ``name`` gets wrong: options missing, defaults that differ, options that are not."""
    cls = get_pooler_class(name)
    params = inspect.signature(cls.__init__).parameters
    options = _constructor_options(cls)
    values = documented_values(entry)
    found = [f"no `{o}=...` for option {o!r}" for o in options if o not in values]
    found += [f"`{o}` is documented as {values[o]}, its default is {params[o].default!r}" for o in options
              if o in values and params[o].default is not inspect.Parameter.empty
              and not any(same(v, params[o].default) for v in values[o])]
    found += [f"`{o}=...` is not an option of {cls.__name__}" for o in sorted(set(values) - set(options))]
    if not options and "no options" not in entry:
        found.append("takes no options: say 'no options'")
    return found


ENTRIES = entries(options_section(POOLERS_DOC.read_text(encoding="utf-8")))


def test_the_section_is_read():
    """The parser finds the bullets: a broken pattern would otherwise leave nothing to check."""
    assert len(ENTRIES) >= 20 and "attention" in ENTRIES
    assert documented_values(ENTRIES["attention"])["cls_share"] == [0.0]


def test_every_registered_pooler_has_an_entry_and_every_entry_a_pooler():
    assert sorted(ENTRIES) == available_poolers()


@pytest.mark.parametrize("name", available_poolers())
def test_every_option_is_documented_with_its_default(name):
    found = problems(name, ENTRIES.get(name, ""))
    assert not found, f"docs/poolers.md, section Options, `{name}`:\n" + "\n".join(found)


def test_a_missing_option_or_a_wrong_default_is_caught():
    """Not vacuous: an entry without one option's mention, or with another default, fails."""
    entry = ENTRIES["acmil"]
    assert not problems("acmil", entry)
    assert problems("acmil", re.sub(r"`mask_rate=[^`]*`", "the masking rate", entry)) == [
        "no `mask_rate=...` for option 'mask_rate'"]
    assert problems("acmil", entry.replace("`attn_size=128`", "`attn_size=None`")) == [
        "`attn_size` is documented as [None], its default is 128"]
    assert problems("cls", "no parameters") == ["takes no options: say 'no options'"]
