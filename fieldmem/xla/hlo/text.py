"""The lowest layer of reading HLO text: brackets, quoted strings, top-level splitting.

Shared by the shape arithmetic of :mod:`.model` and the parser of :mod:`.parse`.
Pure text functions: no jax, no knowledge of what an instruction is. Text that is
cut off (an unclosed bracket or string) raises :class:`HloParseError`.
"""

from __future__ import annotations

import json
import re

__all__ = ["HloParseError", "matching_bracket", "split_top_level", "string_end", "unquote"]


class HloParseError(ValueError):
    """The text is not an HLO module this parser understands."""


_CLOSE = {"(": ")", "{": "}", "[": "]"}
# the only characters that change the scanners' state; everything between them is skipped
# in one regex step, which makes scanning megabytes of HLO text fast
_BRACKETS_OR_QUOTE = re.compile(r'[(){}\[\]"]')
_STRING_END = re.compile(r'\\.|"', re.DOTALL)  # an escape pair, or the closing quote


def string_end(text: str, start: int) -> int:
    """Index just past the quote closing the string that opens at ``text[start]``, or -1."""
    i = start + 1
    while True:
        match = _STRING_END.search(text, i)
        if match is None:
            return -1
        if match.group() == '"':
            return match.end()
        i = match.end()


def matching_bracket(text: str, start: int) -> int:
    """Index just past the bracket that closes ``text[start]``, honouring quotes."""
    stack = [_CLOSE[text[start]]]
    i = start + 1
    while True:
        match = _BRACKETS_OR_QUOTE.search(text, i)
        if match is None:
            raise HloParseError(f"unclosed bracket in {text[:120]!r}")
        char, i = match.group(), match.end()
        if char == '"':
            i = string_end(text, match.start())
            if i < 0:
                raise HloParseError(f"unclosed bracket in {text[:120]!r}")
        elif char in _CLOSE:
            stack.append(_CLOSE[char])
        else:
            if char != stack[-1]:
                raise HloParseError(f"unbalanced {char!r} in {text[:120]!r}")
            stack.pop()
            if not stack:
                return i


_SEPARATOR_SCANNERS: dict[str, re.Pattern[str]] = {}


def split_top_level(text: str, sep: str = ",", strict: bool = False) -> list[str]:
    """``text`` split at ``sep`` outside brackets and strings.

    With ``strict``, unbalanced brackets or an unterminated string raise
    :class:`HloParseError` (the text was cut off).
    """
    scanner = _SEPARATOR_SCANNERS.get(sep)
    if scanner is None:
        scanner = _SEPARATOR_SCANNERS[sep] = re.compile(r'[(){}\[\]"]|' + re.escape(sep))
    parts: list[str] = []
    depth = 0
    begin = i = 0
    while True:
        match = scanner.search(text, i)
        if match is None:
            break
        char, i = match.group(), match.end()
        if char == '"':
            end = string_end(text, match.start())
            if end < 0:
                if strict:
                    raise HloParseError(f"unclosed bracket or string in {text[:120]!r}")
                break
            i = end
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
            if depth < 0 and strict:
                raise HloParseError(f"unbalanced {char!r} in {text[:120]!r}")
        elif depth == 0:  # the separator, outside brackets
            parts.append(text[begin : match.start()])
            begin = i
    if strict and depth != 0:
        raise HloParseError(f"unclosed bracket or string in {text[:120]!r}")
    parts.append(text[begin:])
    return parts


# the escapes of a JSON string, read left to right as json reads them
_JSON_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')


def unquote(text: str) -> str:
    """The characters of a quoted HLO string (JSON escapes undone); unquoted text as it is."""
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        if "\\" not in text:
            # without an escape, JSON gives the characters between the quotes or fails
            # (and then they are taken as they are): the same either way
            return text[1:-1]
        if "\\" in _JSON_ESCAPE.sub("", text[1:-1]):
            # a backslash that starts no JSON escape (jax writes a path's quote as \'): JSON would fail
            # on it, and raising costs more than the rest (one per leaf of a large pytree)
            return text[1:-1]
        try:
            return json.loads(text)
        except ValueError:
            return text[1:-1]
    return text
