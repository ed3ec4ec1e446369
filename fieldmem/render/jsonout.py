"""JSON renderer: the ``fieldmem.report/2`` document (named so as not to shadow ``json``).

The document is laid out for both readers: one top-level key per line, and
each result and chain on a line of its own, written compactly inside. A
program reads the same document as before (the layout is whitespace); a
person finds a target with ``grep`` or pretty-prints one with ``jq``. A
report of thousands of leaves so takes about half the bytes of an indented
one, and Python writes it with its C encoder (``indent`` falls back to the
pure-Python one, several times slower). Every string is the report's own,
exactly, in JSON's escapes; ``##[`` is written ``##\\u005b``, so that no
GitHub workflow command can be read in a line of it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

import msgspec.json

from fieldmem.model.codec import builtins
from fieldmem.model.escaping import json_defused
from fieldmem.model.report import REPORTS_SCHEMA, Report
from fieldmem.render import RenderOptions

__all__ = ["document_text", "render", "render_many"]

_ITEMS_ON_LINES = ("results", "chains")  # lists of records: one per line


def render(report: Report, options: RenderOptions) -> str:
    try:
        return _encoded_text(report)
    except (TypeError, ValueError):  # what msgspec refuses (a lone surrogate in a name): by Python's json
        return document_text(builtins(report))  # the text of report.to_dict(), by a walk in C


def render_many(reports: Sequence[Report], options: RenderOptions) -> str:
    """Several reports as one ``fieldmem.reports/1`` document (:class:`~fieldmem.model.report.Reports`): each report
    laid out as :func:`render` lays it out, inside the envelope's list."""
    inner = ",\n".join(render(report, options).rstrip("\n") for report in reports)
    return json_defused(f'{{\n"schema": {json.dumps(REPORTS_SCHEMA)},\n"reports": [\n{inner}\n]\n}}\n')


def _encoded_text(report: Report) -> str:
    """:func:`document_text` of ``report``, written by msgspec straight from the records, in one pass of C per
    line: several times faster than through builtins and Python's json for a report of thousands of leaves (the
    CHANGELOG's issue-47 entry). The values are the same; a float in exponent form is written ``1e16``, not
    ``1e+16``. As Python's json writes it by default, the text is ASCII: every other character is written as its
    ``\\uNNNN`` escape."""
    encode = msgspec.json.Encoder().encode
    lines = []
    for field in dataclasses.fields(report):
        value = getattr(report, field.name)
        key = json.dumps(field.name)
        if field.name in _ITEMS_ON_LINES and isinstance(value, (list, tuple)) and value:
            items = ",\n".join("    " + encode(item).decode() for item in value)
            lines.append(f"  {key}: [\n{items}\n  ]")
        else:
            lines.append(f"  {key}: {encode(value).decode()}")
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    if not text.isascii():  # only inside strings: each character its escape, as json's ensure_ascii writes it
        text = _NOT_ASCII.sub(_escaped, text)
    return json_defused(text)


_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _escaped(match: re.Match[str]) -> str:
    """A character outside ASCII as JSON's escape (two, a surrogate pair, beyond the basic plane)."""
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


def document_text(document: dict[str, Any]) -> str:
    """``document`` as JSON: a key per line, each item of its results and chains on a line of its own."""
    compact = json.JSONEncoder(separators=(",", ":")).encode
    lines = []
    for key, value in document.items():
        if key in _ITEMS_ON_LINES and isinstance(value, (list, tuple)) and value:
            items = ",\n".join("    " + compact(item) for item in value)
            lines.append(f"  {compact(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {compact(key)}: {compact(value)}")
    return json_defused("{\n" + ",\n".join(lines) + "\n}\n")
