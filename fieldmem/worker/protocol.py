"""What a worker's parent (:mod:`fieldmem.parent.isolate`) and the worker (:mod:`fieldmem.worker.main`) say to each other.

The worker is the hands, the parent the brain: the worker loads the user's
modules, makes arguments, traces, compiles, runs and probes, and answers with
**readings** (:mod:`fieldmem.model.readings`); the parent analyses them and writes the
report. No file is shared, so nothing is left behind when either dies. The parent
writes its request, one JSON line, to the worker's stdin and keeps stdin open:
its end (the worker then sees end-of-file) is how the worker learns that the
parent is gone. The worker answers on a pipe of its own (its file descriptor is
the worker's first argument), one JSON object per line (:func:`write_event`, read
back by :func:`read_event`). Records cross as :func:`fieldmem.model.codec.dumps` writes
them and :func:`decode_value` reads them: the codec of the report and the
baseline (bytes as base64).

Events of the whole run:

- ``{"e": "resolve", "spec": i}`` before it loads spec ``i`` (imports the user's module),
  ``{"e": "resolved", "spec": i, "names": [...]}`` after, with the names of its targets; and
  ``"settings": {"environment", "config", "note"}`` (and ``"replaced"``: what it replaced in jax's
  public modules, ``jax.jit`` to ``patch.my_jit``) where its module set anything for jax at
  import (:mod:`fieldmem.driver.settings`), ``"elsewhere": true`` where that is not what this
  worker's jax runs with: its targets are not checked here, and the worker ends with ``yield``
  so that a fresh one (the request's ``"devices"``: ``--devices``, winning over a module's own
  count) loads it first; the worker's first ``resolved`` also carries ``"libraries"``: its
  interpreter's installation folders (:func:`fieldmem.model.libraries.library_folders`), whose files
  the parent counts as library code when it picks a value's source line;
- ``{"e": "environment", "b": b, "environment": Environment}``: the versions, backend and
  devices of backend ``b``, after its targets;
- ``{"e": "leaked", "origin": ...}``: an args factory it traced (the request's
  ``"trace_arguments": true``, :mod:`fieldmem.driver.traced`) kept a traced array, so this
  process must not call it again: the targets it started are answered, it ends with
  ``yield``, and the parent's next workers run every factory (``"trace_arguments": false``);
- ``{"e": "fatal", "message": ..., "kind": ...}``: an error that stops the whole run (a backend that
  is not available; ``"kind": "environment"``: jax cannot be imported or started under this
  interpreter, where the parent adds what to do about it), ``{"e": "yield"}``: it stops so the next target gets a fresh
  process, ``{"e": "end"}``: it did all it was asked.

Events of one target, each with its ``b``, ``spec`` and ``name`` (and, for a chain's
step, ``step``: its index, or ``"fused"``):

- ``{"e": "start", "kind": "target", "target": {...}}`` as it starts it (its plain fields:
  :func:`fieldmem.request.target.describe_target`; ``"kind": "chain"`` with ``"chain"``,
  or ``"kind": "error"`` for a spec that failed to load);
- ``{"e": "plain", "variant": CompiledVariant}`` as soon as the plain variant is compiled,
  ``{"e": "variants", "donated": CompiledVariant, "call": CallShape}`` then;
- ``{"e": "run", "readings": {"donated": RunReading, "plain": RunReading}}`` with
  ``--run`` (or ``"error": {"type", "kind", "message"}`` when the run failed);
- ``{"e": "error", "result": TargetResult}``: the hands could not go on (arguments,
  tracing, compile, a run that crashed), and this is the target's error result;
- ``{"e": "step", "at", "index", "step_name", "target", "extras", "passed"}`` for each
  step of a chain (its events follow, keyed with ``step``), ``{"e": "chain-end"}`` after the last;
- ``{"e": "answer", "value": ...}`` (or ``"error": {...}``) to a question of the parent;
- ``{"e": "done"}``: the worker is done with it.

With ``--suggest`` or ``--probe``, and for every chain step, the worker waits after
``variants`` (and ``run``) for the parent's questions, one JSON line each on stdin:
``{"op": "compile_donation", "positions", "names", "fast"}``, ``{"op": "probe",
"input_index", "output_index", "factor"}``, each answered by an ``answer``, and
``{"op": "release"}`` (for a chain step ``{"op": "release", "ok": went_through}``:
whether the next step is given its outputs), after which it goes on.

A worker asked to serve (``"serve": true`` in its request, ``fieldmem check --watch``) does not
exit after ``end``: it waits for the next request, one more JSON line on stdin, and answers it the
same way. Such a request may name ``"reload"``: files edited since, whose modules (and the local
modules importing them) are executed again before its specs are loaded; and ``"skip_same"``: a
target whose fingerprint (:func:`fieldmem.worker.fingerprint.target_fingerprint`) is the one it had when this
worker last checked it is not checked again but answered ``{"e": "same", "b": b, "spec": i,
"name": n}``. Its ``resolved`` events also carry ``"files"``: the spec's module file and the local
modules it imports, which the parent watches.

A worker under another interpreter (``--jax``, ``--python``) is given ``"fallback_path"``: folders it
looks in last (after its own installation), for what that lacks and the user's modules import (the
pytest of the parent's installation, for the plugin's ``--fieldmem-jax``). The parent waits a limited
time for such a worker's first event (the start-up limit of :mod:`fieldmem.parent.isolate`), and shows
what it printed only once it has said one.

A worker that ends without ``end``, ``yield`` or ``fatal`` died: the parent
charges the target (or spec) it was on. A worker whose pipe is gone (the user's
code closed its descriptor: ``os.closerange``, ``os.close``) cannot answer: it
exits with status :data:`PIPE_LOST`, printing nothing, and the parent says so
(as it does when the pipe ends while the worker still runs). The worker's
stdout and stderr carry only what it and the user's code print, never a
reading. No jax.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any, TypeVar

from fieldmem.model.codec import decode, unbounded_integers
from fieldmem.model.errors import (
    ArgumentsError,
    CompileError,
    DonationError,
    FieldmemError,
    OptionError,
    RunError,
    TargetError,
)

T = TypeVar("T")

__all__ = [
    "PIPE_LOST",
    "decode_error",
    "decode_value",
    "encode_error",
    "read_event",
    "write_event",
]

#: the exit status of a worker whose pipe to its parent is gone: the code it ran closed it (a status no
#: Python or fieldmem exit gives, and one a target's own ``sys.exit`` is unlikely to pick)
PIPE_LOST = 86

_compact = json.JSONEncoder(separators=(",", ":")).encode


def write_event(channel: IO[str], what: str, encoded: Mapping[str, str] | None = None, **fields: Any) -> None:
    """Send one event and flush it, so the parent has it even if the worker dies right after.

    ``encoded``: fields given as JSON text already (a reading, written once by
    :func:`fieldmem.model.codec.dumps`). The line is compact JSON: a reading of thousands of
    leaves crosses the pipe in one pass of the C encoder.
    """
    line = _compact({"e": what, **fields})
    if encoded:
        line = line[:-1] + "".join(f",{_compact(name)}:{text}" for name, text in encoded.items()) + "}"
    channel.write(line + "\n")
    channel.flush()


def decode_value(kind: type[T], data: Any) -> T:
    """The record of type ``kind`` that :func:`fieldmem.model.codec.dumps` wrote (``data``: its JSON, read as plain
    data), by :func:`fieldmem.model.codec.decode` without the walk for integers past int64: every count a worker
    sends is one XLA or jax measured.

    Raises:
        TypeError, ValueError, KeyError: ``data`` is not such a record (the message names the path).
    """
    with unbounded_integers():
        return decode(kind, data)


# the errors a worker's answer can name, rebuilt as themselves on this side (another name: a FieldmemError)
def encode_error(error: FieldmemError) -> dict[str, str]:
    """A target's error as plain data: its class, kind and message (read back by :func:`decode_error`)."""
    return {"type": type(error).__name__, "kind": error.kind, "message": error.message}


def decode_error(data: Mapping[str, Any]) -> FieldmemError:
    """The error :func:`encode_error` wrote: a :class:`~fieldmem.model.errors.RunError` as one (its kind kept), a
    known :class:`~fieldmem.model.errors.FieldmemError` subclass as itself, any other as a FieldmemError of its kind."""
    message, kind, name = str(data.get("message", "")), str(data.get("kind", "error")), str(data.get("type", ""))
    if name == "RunError":
        return RunError(message, kind=kind)
    error = _ERRORS.get(name, FieldmemError)(message)
    error.kind = kind
    return error


_ERRORS: dict[str, type[FieldmemError]] = {
    cls.__name__: cls for cls in (OptionError, TargetError, ArgumentsError, DonationError, CompileError)
}


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
    return event if isinstance(event, dict) and isinstance(event.get("e"), str) else None
