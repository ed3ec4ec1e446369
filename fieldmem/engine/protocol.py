"""What a worker's parent (:mod:`fieldmem.engine.isolate`) and the worker (:mod:`fieldmem.engine.worker`) say to each other.

No file is shared, so nothing is left behind when either dies. The parent
writes the request, one JSON line, to the worker's stdin and keeps stdin
open: its end (the worker then sees end-of-file) is how the worker learns
that the parent is gone. The worker answers on a pipe of its own (its file
descriptor is the worker's first argument), one JSON object per line
(:func:`write_event`, read back by :func:`read_event`):

- ``{"e": "resolve", "spec": i}`` before it loads spec ``i`` (imports the user's module),
  ``{"e": "resolved", "spec": i, "names": [...]}`` after, with the names of its targets;
- ``{"e": "start", "b": b, "spec": i, "name": n}`` before it checks target ``n`` of spec
  ``i`` on backend ``b``, ``{"e": "done", ..., "result": WorkerResult}`` after;
- ``{"e": "header", "b": b, "report": Report}``: the report of backend ``b`` without its
  results (the versions, backend and devices only the worker can read);
- ``{"e": "fatal", "message": ...}``: an error that stops the whole run (a backend that
  is not available), ``{"e": "yield"}``: it stops so the next target gets a fresh
  process, ``{"e": "end"}``: it did all it was asked.

A worker asked to serve (``"serve": true`` in its request, ``fieldmem check --watch``) does not
exit after ``end``: it waits for the next request, one more JSON line on stdin, and answers it the
same way. Such a request may name ``"reload"``: files edited since, whose modules (and the local
modules importing them) are executed again before its specs are loaded; and ``"skip_same"``: a
target whose fingerprint (:func:`fieldmem.watch.fingerprint.target_fingerprint`) is the one it had when this
worker last checked it is not checked again but answered ``{"e": "same", "b": b, "spec": i,
"name": n}``. Its ``resolved`` events also carry ``"files"``: the spec's module file and the local
modules it imports, which the parent watches.

A worker that ends without ``end``, ``yield`` or ``fatal`` died: the parent
charges the target (or spec) it was on. The worker's stdout and stderr carry
only what it and the user's code print, never a result. No jax.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import IO, Any

from fieldmem.codec import decode, encode
from fieldmem.report import Chain, TargetResult

__all__ = ["READ_BY_JSON", "WorkerResult", "decode_result", "encode_json", "encode_result", "read_event", "write_event"]

_compact = json.JSONEncoder(separators=(",", ":")).encode


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """What a worker gives back for one target: its results and, for a chain, the chain."""

    results: tuple[TargetResult, ...]
    chains: tuple[Chain, ...] = ()


def write_event(channel: IO[str], what: str, encoded: Mapping[str, str] | None = None, **fields: Any) -> None:
    """Send one event and flush it, so the parent has it even if the worker dies right after.

    ``encoded``: fields given as JSON text already (a result, written once by
    :func:`encode_json`). The line is compact JSON: a result of thousands of
    leaves crosses the pipe in one pass of the C encoder.
    """
    line = _compact({"e": what, **fields})
    if encoded:
        line = line[:-1] + "".join(f",{_compact(name)}:{text}" for name, text in encoded.items()) + "}"
    channel.write(line + "\n")
    channel.flush()


def encode_json(value: Any) -> str:
    """``value`` (plain data, :func:`fieldmem.codec.encode` gave it) as compact JSON text.

    Raises:
        TypeError, ValueError: a value JSON cannot hold.
    """
    return _compact(value)


def encode_result(written: WorkerResult) -> str:
    """``written`` as compact JSON text: the same text :func:`encode_json` gives for
    :func:`fieldmem.codec.encode`'s plain data, but written by msgspec straight from the
    records (several times faster than the codec on big results: benchmarks/results/wire.md).

    What msgspec refuses (a lone surrogate in a name, which UTF-8 cannot hold) is
    written by the codec, which escapes it as JSON does; a value neither can write raises.

    Raises:
        TypeError, ValueError: a value JSON cannot hold.
    """
    import msgspec.json

    try:
        return msgspec.json.encode(written).decode()
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return encode_json(encode(written))


# set by read_event on an event msgspec could not read (Python's json read it): its result goes by the
# codec, which refuses what msgspec would let through from such a line (a lone surrogate); no worker
# writes a key that starts with "_"
READ_BY_JSON = "_read_by_json"


def decode_result(encoded: Any, careful: bool = False) -> WorkerResult:
    """The :class:`WorkerResult` a worker wrote (``encoded``: its JSON, read as plain data by
    :func:`read_event`), rebuilt by msgspec (faster than ``json.loads`` and :func:`fieldmem.codec.decode`
    on big results: benchmarks/results/wire.md).

    What msgspec refuses is read again by the codec, which accepts the same documents
    and names the path of what it refuses; so is all of it with ``careful`` (an event
    marked :data:`READ_BY_JSON`).

    Raises:
        TypeError, ValueError, KeyError: as :func:`fieldmem.codec.decode`.
    """
    import msgspec

    if not careful:
        try:
            return msgspec.convert(encoded, WorkerResult)
        except msgspec.ValidationError:
            pass
    result: WorkerResult = decode(WorkerResult, encoded)
    return result


def read_event(line: bytes) -> dict[str, Any] | None:
    """The event on one line; None for a line that is not one (cut short by the worker's death)."""
    import msgspec.json

    try:
        event = msgspec.json.decode(line)
    except msgspec.DecodeError:  # not JSON to msgspec: what the codec wrote for a value msgspec refused
        try:
            event = json.loads(line)
        except ValueError:
            return None
        if isinstance(event, dict):
            event[READ_BY_JSON] = True
    return event if isinstance(event, dict) and isinstance(event.get("e"), str) else None
