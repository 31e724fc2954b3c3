"""Row templates: the placeholders of a template such as ``"{anchor} [SEP] {target}"`` and the columns they name."""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from attnpool.data.errors import DataError


def template_fields(template: str) -> list[str]:
    """Every placeholder of ``template`` in order (``{a} [SEP] {b}`` -> ``["a", "b"]``), repeats included.

    Raises:
        DataError: Unbalanced braces, saying how to write a literal one; a conversion or format spec (``{a!r}``,
            ``{price:.2f}``).
    """
    return [name for _, name in template_parts(template) if name is not None]


def template_parts(template: str) -> list[tuple[str, str | None]]:
    """The template as ``(literal text, placeholder)`` pairs, the placeholder ``None`` after the last one.

    A placeholder names a column verbatim: ``{review.title}`` is the column ``review.title``, not the attribute
    ``title`` of a column ``review`` as ``str.format`` would read it. Format specs and conversions are refused: the
    cells of a template's columns are read as text, as written in the file, so ``{price:.2f}`` could not apply.
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:  # e.g. a single "{" or "}"
        raise DataError(f"bad template {template!r}: {e}; write a literal brace as {{{{ or }}}}") from None
    for _, name, spec, conversion in parsed:
        if spec or conversion:
            written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise DataError(
                f"template {template!r}: placeholder {written} has a format spec or conversion, but a placeholder "
                f"inserts its column's text as written in the file: write {{{name}}} and format the values in the "
                "file. A column whose name holds ':' or '!' cannot be a placeholder (rename it); a literal brace is "
                "written {{ or }}")
    return [(literal, name) for literal, name, _, _ in parsed]


def text_fields(text_cols: Sequence[str] | None, template: str | None) -> list[str]:
    """The fields a text is built from, in order: a template's named placeholders (repeats kept), else the columns."""
    return [name for name in template_fields(template) if name] if template else list(text_cols or [])


def template_columns(template: str, columns: Sequence[Any]) -> list[str]:
    """The distinct column names a template uses, checked against a table's ``columns``."""
    fields = template_fields(template)
    names = ", ".join(map(str, columns))
    if any(name == "" or (name.isdigit() and name not in columns) for name in fields):  # str.format's {}, {0}
        raise DataError(
            f"template {template!r}: every placeholder must name a column, e.g. {{anchor}}; columns: {names}"
        )
    unknown = [name for name in dict.fromkeys(fields) if name not in columns]
    if unknown:
        raise DataError(
            f"template {template!r}: unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"placeholders must be column names: {names}"
        )
    return list(dict.fromkeys(fields))
