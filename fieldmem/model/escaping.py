"""User text as every output shows it: the one escaping rule, and the last check of each output.

A name, a path or a message that came from the user (a case name, a target, a
file name, a pytree path, an exception's text) is shown, never obeyed. In
every format (the table, GitHub annotations, Markdown, HTML, stderr's error
lines, the baseline's summary) :func:`visible` writes each character that
would act on a terminal or a log rather than show as Python writes it in a
string literal:

- ``\\n``, ``\\r``, ``\\t`` for a line break, a carriage return and a tab inside
  a name, a path or a word (the format's own line breaks stay line breaks; so
  do those of a message, :data:`PROSE`, which each format writes its way:
  ``%0A`` in an annotation, a space in a Markdown cell, a new line in the table);
- ``\\xNN`` for every other control character: C0 (NUL, BEL, ESC, ...), DEL
  and C1;
- ``\\uNNNN`` for a lone surrogate (``\\udcff``: no UTF-8 for it), the line and
  paragraph separators (U+2028, U+2029) and the bidirectional controls
  (U+202A–U+202E, U+2066–U+2069), which reorder the text around them;
- ``##\\[`` for ``##[``, the start of a GitHub workflow command anywhere in a
  line.

A backslash of the text itself is shown as it is, so ``\\x1b`` can be an
escape or the four characters; the JSON report and the baseline keep the text
exactly (JSON's own escapes). Nothing else changes: the rule is a no-op on
ordinary text, and applying it twice is applying it once.

Each output then goes through :func:`defused` (:func:`json_defused` for JSON)
as it leaves its renderer: whatever control character is still there is
escaped the same way (the format's own line breaks and tabs, and the table's
colours, kept), and no line can start a workflow command (``::`` after
blanks, which the GitHub runner reads even when a terminal table wraps a long
name there) unless it is one of fieldmem's own annotations.

Pure: no I/O, imports nothing of fieldmem.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

__all__ = ["PROSE", "defused", "json_defused", "visible", "visible_strings"]

T = TypeVar("T")

#: the fields of a record that hold sentences (what fieldmem or the user's code wrote: an error, a finding, a
#: summary, a reason, a note, jax's warnings): their own line breaks (LF, CR) are kept, every other
#: character the rule escapes is escaped; every other string is a name, a path or a word
PROSE = frozenset(
    ("message", "summary", "cost_summary", "reason", "detail", "note", "notes", "jax_warnings", "unavailable")
)

# the characters that act rather than show, as classes for re (lone surrogates included): in a name, in
# prose (less LF and CR), and in a whole output (less the format's own LF and tab)
_OTHERS = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ACTING = "\x00-\x1f" + _OTHERS
_PROSE_ACTING = "\x00-\x09\x0b\x0c\x0e-\x1f" + _OTHERS
_OUTPUT_ACTING = "\x00-\x08\x0b-\x1f" + _OTHERS
_COMMAND_V1 = "##["  # GitHub's older workflow commands (##[error]message), read anywhere in a line
_SGR = "\x1b\\[[0-9;]*m"  # a colour code (ESC [ digits m): a coloured table's own

_UNSAFE = re.compile(f"[{_ACTING}]|##\\[")
_UNSAFE_PROSE = re.compile(f"[{_PROSE_ACTING}]|##\\[")
# the quick test of the text that needs nothing (most of it): a character class alone, then "##[" by `in`
_FIND = re.compile(f"[{_ACTING}]").search
_FIND_PROSE = re.compile(f"[{_PROSE_ACTING}]").search
_OUTPUT_UNSAFE = re.compile(f"[{_OUTPUT_ACTING}]|##\\[")
_COLORED_UNSAFE = re.compile(f"({_SGR})|[{_OUTPUT_ACTING}]|##\\[")
# JSON: its own line breaks and indents are structure, never inside a string (its encoder escapes those)
_JSON_UNSAFE = _OUTPUT_UNSAFE
_ASCII_OUTPUT_ACTING = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])  # _OUTPUT_ACTING's ASCII part
# a line whose text starts with "::" after blanks (or colour codes): what the runner reads as a command
_COMMAND_START = re.compile(f"^((?:[^\\S\\n]|{_SGR})*)::", re.MULTILINE)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    found = match.group()
    if found == _COMMAND_V1:
        return "##\\["
    named = _NAMED.get(found)
    if named is not None:
        return named
    code = ord(found)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, prose: bool = False) -> str:
    """``text`` with every character that would act rather than show written as its escape (the module's
    rule); ``text`` itself when it has none. ``prose``: a message, whose line breaks (LF, CR) are its own.

    ``visible("a\\nb\\x1b[31m")`` is ``a\\nb\\x1b[31m`` written out: one line, no colour.
    """
    if (_FIND_PROSE if prose else _FIND)(text) is None and _COMMAND_V1 not in text:
        return text
    return (_UNSAFE_PROSE if prose else _UNSAFE).sub(_escape, text)


def visible_strings(value: T) -> T:
    """``value`` (a report, a comparison: frozen dataclasses, tuples, lists and dicts) with every string in
    it, dictionary keys included, made :func:`visible` (those under a field named in :data:`PROSE` as prose);
    ``value`` itself, not a copy, when none changes.

    Renderers call it first, so every name, path and message they format is already safe to show.
    """
    if _clean(value):
        return value
    result: T = _walk(value)
    return result


def _clean(value: Any) -> bool:
    """Whether no string in ``value`` needs escaping, told from msgspec's JSON of it (one pass in C, several
    times faster than the walk): ASCII with no backslash holds no escaped character (msgspec writes every
    control character as an escape and every other character as it is), no DEL and no ``##[``. False where
    that cannot tell (no msgspec, a value it cannot write, a string with a quote or a backslash): the walk
    then decides."""
    try:
        import msgspec.json
    except ImportError:
        return False
    try:
        data = msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):  # a lone surrogate, a type msgspec does not write
        return False
    return data.isascii() and b"\\" not in data and b"\x7f" not in data and b"##[" not in data


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}  # per record class: its fields, and whether prose
_ATOMS = frozenset((int, float, bool, type(None), bytes))


def _walk(value: Any, prose: bool = False) -> Any:
    cls = value.__class__
    if cls is str:
        return visible(value, prose=prose)
    if cls in _ATOMS:
        return value
    if cls is tuple or cls is list:
        if not value or (value[0].__class__ in _ATOMS and all(item.__class__ in _ATOMS for item in value)):
            return value  # a timeline's numbers, a shape
        items = [_walk(item, prose) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else cls(items)
    if cls is dict:
        pairs = [(_walk(k), _walk(v, prose)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    fields = _FIELDS.get(cls)
    if fields is None:
        if not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            return value  # anything else (an enum, a path) is formatted by its renderer as it is
        fields = _FIELDS[cls] = tuple((f.name, f.name in PROSE) for f in dataclasses.fields(value) if f.init)
    changed = {}
    for name, is_prose in fields:  # the loop every record of a report of thousands of leaves goes through
        old = getattr(value, name)
        kind = old.__class__
        if kind in _ATOMS:
            continue
        if kind is str:
            if (_FIND_PROSE if is_prose else _FIND)(old) is None and _COMMAND_V1 not in old:
                continue
            new = visible(old, prose=is_prose)
        else:
            new = _walk(old, is_prose)
        if new is not old:
            changed[name] = new
    return dataclasses.replace(value, **changed) if changed else value


def defused(text: str, *, color: bool = False, commands: bool = False) -> str:
    """A whole output (any number of lines) as it may be printed, also into a GitHub Actions log.

    Each character :func:`visible` escapes that is still in ``text`` is escaped, except the format's own
    line breaks and tabs (``color``: and the SGR colour codes of a coloured table); a ``##[`` becomes
    ``##\\[``; a line that starts with ``::`` after blanks gets a backslash before them (``\\::``), so that
    the runner reads no workflow command in it. ``commands``: ``text`` is fieldmem's own workflow commands
    (``--format github``), each line one command whose user text is escaped already: line starts are kept.
    """
    if color:
        text = _COLORED_UNSAFE.sub(lambda m: m.group(1) or _escape(m), text)
    else:
        text = _OUTPUT_UNSAFE.sub(_escape, text)
    if not commands and "::" in text:
        text = _COMMAND_START.sub(lambda m: f"{m.group(1)}\\::", text)
    return text


def json_defused(text: str) -> str:
    """A JSON document as it may be printed: each character :func:`visible` escapes that the encoder wrote
    as it is (DEL, C1, a separator, a bidirectional control, a lone surrogate with ``ensure_ascii=False``)
    becomes its ``\\uNNNN`` escape, and ``##[`` becomes ``##\\u005b``. Outside its strings a JSON document
    holds none of these, so the document means what it meant: every string reads back the same."""
    if text.isascii():  # what Python's json writes by default: the quick test, in C, without the class
        ascii_text = text.encode("ascii")
        if _COMMAND_V1 not in text and len(ascii_text.translate(None, _ASCII_OUTPUT_ACTING)) == len(ascii_text):
            return text
    elif _JSON_UNSAFE.search(text) is None:
        return text
    return _JSON_UNSAFE.sub(
        lambda m: "##\\u005b" if m.group() == _COMMAND_V1 else f"\\u{ord(m.group()):04x}",
        text,
    )
