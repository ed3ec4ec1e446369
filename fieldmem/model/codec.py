"""Frozen dataclasses <-> JSON, driven by their type hints.

The one codec for everything fieldmem writes and reads back: the report, the
baseline and what a worker and its parent say to each other (readings,
results). :func:`encode` turns records into dicts and lists (bytes as base64
text), :func:`dumps` into compact JSON text (the same document), and
:func:`decode` rebuilds them and refuses a value of the wrong JSON type with
the path of the offending key (``entries[0].variants.donated.memory.temp_bytes
should be int, not str '4'``), and a word outside a ``Literal`` set the same
way (``results[0].status should be one of 'ok', 'error', not 'fine'``).
Unknown keys are ignored and missing fields with a default take it, so a
newer fieldmem reads older documents. An older fieldmem reads a newer one too:
a ``Literal`` set registered as open (:func:`read_unknown_as`: a copy kind, a
finding code) reads a word it does not know as its stand-in (``"unknown"``),
and :func:`unknown_values` says where and what it was; a closed set refuses it. A set
whose words are declared in :mod:`fieldmem.model.vocabulary` (:func:`declare_words`: the
copy kinds, causes and finding codes) holds each declared word too (:func:`words_of`).

Hand-edited or hostile documents are refused the same way: an integer
outside int64 (every count and size fieldmem writes is one) and a word of a
``Literal`` set that is not valid Unicode (a lone surrogate such as
``"\\ud800"``) are errors naming their path, and every value quoted in a
message is cut short (:func:`fieldmem.model.errors.quoted`). Free text (a name, a
message) is read as written, a lone surrogate included: JSON holds one as an
escape, fieldmem writes it so for a case named so, and every output shows it
escaped (:mod:`fieldmem.model.escaping`), so a baseline or report fieldmem wrote
reads back.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import json
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from fieldmem.model.errors import quoted

__all__ = [
    "builtins",
    "decode",
    "dumps",
    "encode",
    "read_unknown_as",
    "stand_in_for",
    "unbounded_integers",
    "unknown_values",
]


_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # per dataclass: its fields' names, read once


def encode(value: Any) -> Any:
    """``value`` with every dataclass a dict, every tuple or set a list and bytes base64 text."""
    cls = value.__class__
    if cls in _PLAIN:  # most values of a report: nothing to do
        return value
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(value))
        elif isinstance(value, (tuple, list, set, frozenset)):
            return [encode(v) for v in value]
        elif isinstance(value, dict):
            return {str(k): encode(v) for k, v in value.items()}
        elif isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        else:
            return value
    return {name: encode(getattr(value, name)) for name in names}


def builtins(value: Any) -> Any:
    """What :func:`encode` gives, for a JSON writer (a tuple may stay a tuple): by msgspec's walk in C where
    msgspec is here and takes ``value`` (a report of thousands of leaves: several times faster), else by
    :func:`encode`. Either way Python's json writes the same text from it."""
    try:
        import msgspec
    except ImportError:
        return encode(value)
    try:
        return msgspec.to_builtins(value)
    except (TypeError, ValueError):
        return encode(value)


_compact = json.JSONEncoder(separators=(",", ":")).encode


def dumps(value: Any) -> str:
    """``value`` as compact JSON text: the document of :func:`encode`, written by msgspec in one pass of C
    (a reading of thousands of leaves); what msgspec refuses (a lone surrogate in a name) and a process without
    msgspec (a worker under another interpreter, with jax and the standard library only) write it by Python's
    json, which escapes what UTF-8 cannot hold.

    Raises:
        TypeError, ValueError: a value neither can write.
    """
    try:
        import msgspec.json
    except ImportError:
        return _compact(encode(value))
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return _compact(encode(value))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}


_INT64 = 2**63
_BOUNDED: contextvars.ContextVar[bool] = contextvars.ContextVar("fieldmem_codec_bounded", default=True)


@contextlib.contextmanager
def unbounded_integers() -> typing.Iterator[None]:
    """Decode integers of any size in this block: for what one fieldmem process hands another (the options
    of a target, as the user gave them, which the checker then refuses in its own words), not for files."""
    token = _BOUNDED.set(False)
    try:
        yield
    finally:
        _BOUNDED.reset(token)


# Literal sets a newer document may hold more words of: the set -> the word an unknown one reads as
_OPEN: dict[Any, str] = {}
# where unknown words were read as their stand-in, while unknown_values() collects them
_FOUND: contextvars.ContextVar[list[tuple[str, str, str]] | None] = contextvars.ContextVar(
    "fieldmem_codec_unknown", default=None
)


def read_unknown_as(hint: Any, stand_in: str) -> None:
    """Read a string outside the ``Literal`` set ``hint`` as ``stand_in`` (one of the set), not refuse it."""
    if stand_in not in typing.get_args(hint):
        raise ValueError(f"{stand_in!r} is not one of {typing.get_args(hint)}")
    _OPEN[hint] = stand_in


# Literal sets whose words are declared elsewhere (fieldmem.model.vocabulary): the set -> the declared words, read
# when needed (a test may declare one); a declared word is one of the set even where the Literal does not name it
_DECLARED: dict[Any, Callable[[], tuple[str, ...]]] = {}


def declare_words(hint: Any, names: Callable[[], tuple[str, ...]]) -> None:
    """Read and write every word ``names()`` gives as one of the ``Literal`` set ``hint``, beside its own."""
    _DECLARED[hint] = names


def words_of(hint: Any) -> tuple[Any, ...]:
    """The words of the ``Literal`` set ``hint``: its own, then those declared for it that it does not name."""
    words = typing.get_args(hint)
    declared = _DECLARED.get(hint)
    if declared is None:
        return words
    return words + tuple(name for name in declared() if name not in words)


def stand_in_for(hint: Any) -> str | None:
    """The word an unknown word of the open ``Literal`` set ``hint`` reads as; None for a closed set."""
    return _OPEN.get(hint)


@contextlib.contextmanager
def unknown_values() -> typing.Iterator[list[tuple[str, str, str]]]:
    """Inside, each word of an open set that :func:`decode` did not know is listed as
    ``(path, word, stand-in)`` in the list given, in the order read."""
    found: list[tuple[str, str, str]] = []
    token = _FOUND.set(found)
    try:
        yield found
    finally:
        _FOUND.reset(token)


def _type_name(data: Any) -> str:
    return f"{type(data).__name__} {quoted(data)}" if isinstance(data, (bool, int, float, str)) else type(data).__name__


def decode(hint: Any, data: Any, where: str = "") -> Any:
    """Rebuild a value of type ``hint`` from ``data`` (JSON read as plain data); ``where`` names it in errors.

    msgspec rebuilds a valid document in C (``msgspec.convert``: it accepts what
    :func:`_decode` accepts, ints as floats included), after a walk that finds
    any integer outside int64 (msgspec takes any size) unless
    :func:`unbounded_integers` says not to look. When either refuses anything,
    and where msgspec is missing or cannot hold ``hint``, the document is read
    by :func:`_decode`, which names the path of the first value it refuses and
    reads a word it does not know of an open set as its stand-in.

    Raises:
        TypeError: a value of the wrong JSON type (message names its path).
        ValueError: a value outside its ``Literal`` set (message names its path).
        KeyError: a required field is missing.
    """
    if _msgspec_holds(hint) and (not _BOUNDED.get() or _within_int64(data)):
        import msgspec

        try:
            return msgspec.convert(data, hint, str_keys=True)
        except TypeError:  # a type msgspec cannot hold (or a record's own TypeError): not asked again
            _NOT_MSGSPEC.add(hint)
        except Exception:  # ValidationError, or what a record raised: the careful reading says where, or reads it
            pass
    return _decode(hint, data, where)


# hints msgspec cannot hold (a union of two records): read by _decode alone, without asking msgspec each time
_NOT_MSGSPEC: set[Any] = set()


def _msgspec_holds(hint: Any) -> bool:
    """Whether to ask msgspec for ``hint``: it is installed (a worker under another interpreter may lack it),
    the hint is hashable and msgspec has not refused its type."""
    try:
        if hint in _NOT_MSGSPEC:
            return False
    except TypeError:  # an unhashable hint
        return False
    try:
        import msgspec  # noqa: F401
    except ImportError:
        return False
    return True


def _within_int64(data: Any) -> bool:
    """Whether every integer in ``data`` (plain JSON data) fits int64."""
    stack = [data]
    pop, extend = stack.pop, stack.extend
    while stack:
        value = pop()
        kind = type(value)
        if kind is dict:
            extend(value.values())
        elif kind is list:
            extend(value)
        elif kind is int and not -_INT64 <= value < _INT64:
            return False
    return True


def _decode(hint: Any, data: Any, where: str = "") -> Any:
    """:func:`decode`, keeping the path of each value for its error."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return _literal(hint, data, where)
    if origin in (Union, types.UnionType):
        return _union(hint, data, where)
    if hint in _SCALARS:
        return _scalar(hint, data, where)
    if hint is bytes:
        return _bytes(data, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, data, where)
    if origin is tuple:
        return _tuple(hint, data, where)
    if origin in (frozenset, set):
        if not isinstance(data, list):
            raise TypeError(f"{where or 'value'} should be a list, not {_type_name(data)}")
        (item,) = typing.get_args(hint) or (Any,)
        return origin(_decode(item, v, f"{where}[{n}]") for n, v in enumerate(data))
    if origin is dict:
        _key, item = typing.get_args(hint)
        if not isinstance(data, dict):
            raise TypeError(f"{where or 'value'} should be an object, not {_type_name(data)}")
        return {
            _scalar(str, k, where or "key"): _decode(item, v, f"{where}.{k}" if where else k) for k, v in data.items()
        }
    return data


def _literal(hint: Any, data: Any, where: str) -> Any:
    allowed = typing.get_args(hint)
    if not any(type(data) is type(a) and data == a for a in allowed):
        if hint in _DECLARED and isinstance(data, str) and data in _DECLARED[hint]():
            return data  # declared, and not (yet) in the Literal
        stand_in = _OPEN.get(hint)
        if stand_in is not None and isinstance(data, str):
            _word(data, where)
            found = _FOUND.get()
            if found is not None:
                found.append((where or "value", data, stand_in))
            return stand_in
        raise ValueError(f"{where or 'value'} should be one of {', '.join(map(repr, allowed))}, not {_type_name(data)}")
    return data


def _union(hint: Any, data: Any, where: str) -> Any:
    if data is None:
        return None
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    errors: list[Exception] = []
    for option in options:
        try:
            return _decode(option, data, where)
        except (TypeError, ValueError, KeyError) as exc:
            errors.append(exc)
    raise (
        errors[0]
        if len(errors) == 1
        else TypeError(
            f"{where or 'value'} should be one of "
            f"{', '.join(getattr(o, '__name__', str(o)) for o in options)}, not {_type_name(data)}"
        )
    )


def _is_scalar(hint: type, data: Any) -> bool:
    # JSON has no int/bool distinction in Python's eyes: True is an int, so refuse it by hand
    return isinstance(data, _SCALARS[hint]) and (hint is bool or not isinstance(data, bool))


def _scalar(hint: type, data: Any, where: str) -> Any:
    if not _is_scalar(hint, data):
        raise TypeError(f"{where or 'value'} should be {hint.__name__}, not {_type_name(data)}")
    if hint is int and _BOUNDED.get() and not -_INT64 <= data < _INT64:
        raise ValueError(f"{where or 'value'} should be a 64-bit integer, not {quoted(data)}")
    if hint is float:
        try:
            return float(data)
        except OverflowError:
            raise ValueError(f"{where or 'value'} should be a number, not {quoted(data)}") from None
    return data


def _bytes(data: Any, where: str) -> bytes:
    if isinstance(data, str):
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            pass
    raise TypeError(f"{where or 'value'} should be base64 text, not {_type_name(data)}")


def _word(data: str, where: str) -> None:
    """A word of an open set is never a lone surrogate (no fieldmem writes such a word): refused."""
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{where or 'value'} is not valid Unicode text (it holds {exc.object[exc.start : exc.end]!r}, "
            f"a lone surrogate): {quoted(data)}"
        ) from None


def _dataclass(hint: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"{where or hint.__name__} should be an object, not {_type_name(data)}")
    hints = _hints(hint)
    kwargs = {}
    for f in dataclasses.fields(hint):
        inner = f"{where}.{f.name}" if where else f.name
        if f.name in data:
            kwargs[f.name] = _decode(hints[f.name], data[f.name], inner)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise KeyError(f"{inner} is missing")
    return hint(**kwargs)


def _tuple(hint: Any, data: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(data, list):
        raise TypeError(f"{where or 'value'} should be a list, not {_type_name(data)}")
    args = typing.get_args(hint)
    if len(args) >= 1 and not (len(args) == 2 and args[1] is Ellipsis):
        # a fixed-length tuple: tuple[str, tuple[int, ...]]
        if len(args) != len(data):
            raise TypeError(f"{where or 'value'} should have {len(args)} items, not {len(data)}")
        return tuple(_decode(item, v, f"{where}[{n}]") for n, (item, v) in enumerate(zip(args, data)))
    item = args[0] if args else Any
    return tuple(_decode(item, v, f"{where}[{n}]") for n, v in enumerate(data))
