"""Frozen dataclasses <-> JSON-ready values, driven by their type hints.

One codec for every document fieldmem writes and reads back (the report,
the baseline): :func:`encode` turns records into dicts and lists,
:func:`decode` rebuilds them and refuses a value of the wrong JSON type with
the path of the offending key (``entries[0].variants.donated.memory.temp_bytes
should be int, not str '4'``), and a word outside a ``Literal`` set the same
way (``results[0].status should be one of 'ok', 'error', not 'fine'``).
Unknown keys are ignored and missing fields with a default take it, so a
newer fieldmem reads older documents. An older fieldmem reads a newer one too:
a ``Literal`` set registered as open (:func:`read_unknown_as`: a copy kind, a
finding code) reads a word it does not know as its stand-in (``"unknown"``),
and :func:`unknown_values` says where and what it was; a closed set refuses it.

Hand-edited or hostile documents are refused the same way: an integer
outside int64 (every count and size fieldmem writes is one) and a word of a
``Literal`` set that is not valid Unicode (a lone surrogate such as
``"\\ud800"``) are errors naming their path, and every value quoted in a
message is cut short (:func:`fieldmem.errors.quoted`). Free text (a name, a
message) is read as written, a lone surrogate included: JSON holds one as an
escape, fieldmem writes it so for a case named so, and every output shows it
escaped (:mod:`fieldmem.escaping`), so a baseline or report fieldmem wrote
reads back.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import types
import typing
from typing import Any, Literal, Union

from fieldmem.errors import quoted

__all__ = ["decode", "encode", "read_unknown_as", "stand_in_for", "unbounded_integers", "unknown_values"]


_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # per dataclass: its fields' names, read once


def encode(value: Any) -> Any:
    """``value`` with every dataclass a dict and every tuple a list."""
    cls = value.__class__
    if cls in _PLAIN:  # most values of a report: nothing to do
        return value
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(value))
        elif isinstance(value, (tuple, list)):
            return [encode(v) for v in value]
        elif isinstance(value, dict):
            return {str(k): encode(v) for k, v in value.items()}
        else:
            return value
    return {name: encode(getattr(value, name)) for name in names}


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
    """Rebuild a value of type ``hint`` from ``data``; ``where`` names it in errors.

    A decoder made once per type (:func:`_fast`) rebuilds a valid document
    without keeping track of where it is; when it meets anything it does not
    accept, the document is read again by :func:`_decode`, which accepts
    exactly the same values and names the path of the first one it refuses.

    Raises:
        TypeError: a value of the wrong JSON type (message names its path).
        ValueError: a value outside its ``Literal`` set (message names its path).
        KeyError: a required field is missing.
    """
    if _BOUNDED.get():
        try:
            return _fast(hint)(data)
        except Exception:  # refused somewhere: the careful reading says where
            pass
    return _decode(hint, data, where)


def _decode(hint: Any, data: Any, where: str = "") -> Any:
    """:func:`decode`, keeping the path of each value for its error."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return _literal(hint, data, where)
    if origin in (Union, types.UnionType):
        return _union(hint, data, where)
    if hint in _SCALARS:
        return _scalar(hint, data, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, data, where)
    if origin is tuple:
        return _tuple(hint, data, where)
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


# -- the fast decoders: one closure per type, no paths; any refusal raises and _decode reads again ------------

_Decoder = typing.Callable[[Any], Any]
_FAST: dict[Any, _Decoder] = {}


class _Refused(Exception):
    """A value the fast decoders do not accept (its path and words are :func:`_decode`'s to give)."""


def _fast(hint: Any) -> _Decoder:
    try:
        return _FAST[hint]
    except KeyError:
        pass
    except TypeError:  # an unhashable hint: built each time
        return _build(hint)
    # a placeholder first: a dataclass that refers to itself finds its own decoder
    made: list[_Decoder] = []
    _FAST[hint] = lambda data: made[0](data)
    decoder = _build(hint)
    made.append(decoder)
    _FAST[hint] = decoder
    return decoder


def _build(hint: Any) -> _Decoder:
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = frozenset((type(a), a) for a in typing.get_args(hint))

        def literal(data: Any) -> Any:
            if (type(data), data) not in allowed:
                raise _Refused
            return data

        return literal
    if origin in (Union, types.UnionType):
        options = [_fast(a) for a in typing.get_args(hint) if a is not type(None)]

        def union(data: Any) -> Any:
            if data is None:
                return None
            for option in options:
                try:
                    return option(data)
                except (_Refused, TypeError, ValueError, KeyError):  # as _union: the next option
                    continue
            raise _Refused

        return union
    if hint is bool:
        return _bool
    if hint is int:
        return _int
    if hint is float:
        return _float
    if hint is str:
        return _str
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) >= 1 and not (len(args) == 2 and args[1] is Ellipsis):
            items = [_fast(a) for a in args]

            def fixed(data: Any) -> Any:
                if not isinstance(data, list) or len(data) != len(items):
                    raise _Refused
                return tuple(item(v) for item, v in zip(items, data))

            return fixed
        item = _fast(args[0]) if args else _any

        def variadic(data: Any) -> Any:
            if not isinstance(data, list):
                raise _Refused
            return tuple(map(item, data))

        return variadic
    if origin is dict:
        value = _fast(typing.get_args(hint)[1])

        def mapping(data: Any) -> Any:
            if not isinstance(data, dict):
                raise _Refused
            return {_str(k): value(v) for k, v in data.items()}

        return mapping
    return _any


def _any(data: Any) -> Any:
    return data


def _bool(data: Any) -> Any:
    if not isinstance(data, bool):
        raise _Refused
    return data


def _int(data: Any) -> Any:
    if not isinstance(data, int) or isinstance(data, bool) or not -_INT64 <= data < _INT64:
        raise _Refused
    return data


def _float(data: Any) -> Any:
    if not isinstance(data, (int, float)) or isinstance(data, bool):
        raise _Refused
    return float(data)


def _str(data: Any) -> Any:
    if not isinstance(data, str):
        raise _Refused
    return data


def _dataclass_decoder(hint: type) -> _Decoder:
    hints = _hints(hint)
    fields = [
        (
            f.name,
            _fast(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(hint)
    ]

    def record(data: Any) -> Any:
        if not isinstance(data, dict):
            raise _Refused
        kwargs = {}
        for name, field, required in fields:
            if name in data:
                kwargs[name] = field(data[name])
            elif required:
                raise _Refused
        return hint(**kwargs)

    return record
