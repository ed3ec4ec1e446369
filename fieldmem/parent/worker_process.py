"""One worker process as the parent sees it: starting it, relaying its output, reading its events.

:func:`start_process` starts a worker (or takes the one :func:`~fieldmem.parent.spawn.prestart` started),
with a thread copying its output to this process's stderr (:class:`_Relay`, keeping its tail for the
message of a worker that dies) and one reading its answers into a queue. :class:`WorkerLink` reads those events
for the brain and for the supervisor (:mod:`fieldmem.parent.supervisor`), and raises HandsLost when the
worker dies or runs past ``--timeout``. Like the rest of the parent, this imports no jax.
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from fieldmem.model.collector import collector_paused
from fieldmem.model.errors import FieldmemError
from fieldmem.parent.remote_readers import event_key
from fieldmem.parent.spawn import Interpreter, end_group, spawn, take_prestarted
from fieldmem.worker.protocol import PIPE_LOST, read_event
from fieldmem.worker.readers import HandsLost

if TYPE_CHECKING:
    from fieldmem.parent.supervisor import Supervisor

__all__ = [
    "WorkerFailure",
    "WorkerLink",
    "WorkerProcess",
    "WorkerSeen",
    "death_cause",
    "remedy_suffix",
    "start_process",
]

_TAIL = 8192  # characters of the worker's output kept, for the last line of a dying worker
_HELD = 1 << 20  # bytes of a worker's output held back before its first word (the last of them kept)
_LINE = 300  # at most this many characters of that line go into an error message


class WorkerFailure(FieldmemError):
    """The worker could not do what a whole run needs (it died before jax started, or a backend is missing)."""

    kind = "crash"


def _still_running(process: subprocess.Popen[bytes], grace: float = 1.0) -> bool:
    """Whether ``process`` still runs ``grace`` seconds after its pipe ended: a worker that dies closes its
    pipe as it goes, one whose pipe the user's code closed goes on (until it next writes, status PIPE_LOST)."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return True
    return process.returncode == PIPE_LOST


def death_cause(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class _Relay:
    """Copies the worker's output to this process's standard error (file descriptor 2) as it comes, keeping
    its tail. Byte for byte, to the descriptor: as the C-level logs of jax reach it in a process of its own."""

    def __init__(self, source: IO[bytes], held: bool = False) -> None:
        self.tail = ""
        self._source = source
        # held: kept back until release() (a worker under another interpreter, until it says its first word:
        # a program that is no fieldmem worker never floods stderr, with the request it echoes or its traceback)
        self._lock = threading.Lock()
        self._held: bytearray | None = bytearray() if held else None
        self._thread = threading.Thread(target=self._copy, name="fieldmem-worker-output", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        source = self._source.fileno()
        while True:
            try:
                chunk = os.read(source, 65536)
            except OSError:
                chunk = b""
            self.tail = (self.tail + decoder.decode(chunk, final=not chunk))[-_TAIL:]
            if not chunk:
                return
            with self._lock:
                if self._held is not None:
                    self._held += chunk
                    del self._held[: max(0, len(self._held) - _HELD)]
                    continue
            _write_out(chunk)

    def release(self) -> None:
        """Show what was held back, and from now on what comes, as it comes."""
        with self._lock:
            held, self._held = self._held, None
            if held:
                _write_out(bytes(held))

    def last_line(self) -> str:
        self._thread.join(timeout=5)
        lines = [line.strip() for line in self.tail.strip().splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        return line if len(line) <= _LINE else line[: _LINE - 1] + "…"

    def out_of_memory(self) -> bool:
        return "RESOURCE_EXHAUSTED" in self.tail or "MemoryError" in self.tail


def _write_out(chunk: bytes) -> None:
    try:
        while chunk:
            chunk = chunk[os.write(2, chunk) :]
    except OSError:  # a closed or broken stderr: keep reading, show nothing
        pass


@dataclasses.dataclass
class WorkerSeen:
    """What the parent saw of one worker."""

    returncode: int = 0
    last: str | None = None  # its last event: end, yield or fatal; None: it died
    fatal: str = ""
    fatal_kind: str = ""  # the kind of its fatal error (environment: jax cannot be imported there)
    timed_out: bool = False
    resolving: int | None = None  # the spec it was loading
    in_flight: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)  # (backend, spec, name)
    progressed: bool = False
    why: str = ""
    out_of_memory: bool = False
    pipe_lost: bool = False  # its pipe ended while it still ran: the code it ran closed it


@dataclasses.dataclass
class WorkerProcess:
    """A running worker: its process, the relay of its output and the events read from its answers."""

    process: subprocess.Popen[bytes]
    relay: _Relay
    events: queue.Queue[dict[str, Any] | None]
    reader: threading.Thread

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()  # stdin stays open: its end tells the worker this process is gone
        except OSError:  # it died before it read the request: charged like any death
            pass

    def kill(self) -> None:
        """End the worker and what it started (its process group), now."""
        end_group(self.process)

    def close(self, watch: WorkerSeen | None = None) -> None:
        end_group(self.process)  # also after the worker ended: a child it left running goes with it
        if watch is not None:
            watch.returncode = self.process.returncode
            watch.why = self.relay.last_line()
            watch.out_of_memory = self.relay.out_of_memory()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


def start_process(interpreter: Interpreter | None = None) -> WorkerProcess:
    """A worker: the one :func:`~fieldmem.parent.spawn.prestart` started, if still alive, else a new one;
    under ``interpreter``, always a new one under it.

    Raises:
        WorkerFailure: ``interpreter`` cannot be started (not a program: an empty file, another format).
    """
    try:
        spawned = spawn(interpreter) if interpreter is not None else (take_prestarted() or spawn())
    except OSError as exc:
        if interpreter is None:
            raise
        raise WorkerFailure(
            f"{interpreter.python} cannot be started ({exc.strerror or exc}){remedy_suffix(interpreter)}"
        ) from None
    process = spawned.process
    assert process.stdin is not None and process.stdout is not None
    relay = _Relay(process.stdout, held=interpreter is not None)
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    reader = threading.Thread(target=_read_events, args=(spawned.answers, events), daemon=True)
    reader.start()
    return WorkerProcess(process, relay, events, reader)


# the events about one target (or chain step) that its brain waits for; other events go on as they come
_JOB_EVENTS = frozenset(("plain", "variants", "run", "error", "answer", "step", "chain-end", "done"))


class WorkerLink:
    """One worker's events, read for the brain (fieldmem.parent.remote_readers.Link) and for the supervisor.

    The events of a target other than the one the brain asks about are kept until it asks; a ``start``
    of the next target (the worker pipelines) waits for the supervisor's loop, the others go to the
    supervisor at once. A worker that dies, or is killed past ``--timeout`` while it is on a target,
    raises HandsLost, after every event it sent before has been read.
    """

    def __init__(self, supervisor: Supervisor, live: WorkerProcess, watch: WorkerSeen, fresh: bool = False) -> None:
        self.supervisor, self.live, self.watch = supervisor, live, watch
        # a worker just started under another interpreter: its first word must come within the start-up limit
        self.startup: float | None = supervisor.startup_limit() if fresh else None
        self.timeout = (
            supervisor.check_timeout
            if supervisor.check_timeout is not None
            else supervisor.options.timeout
            if supervisor.options.run
            else None
        )
        self.clock = time.monotonic()
        self.deferred: collections.deque[dict[str, Any]] = collections.deque()  # starts, for the loop
        self.kept: dict[tuple[Any, ...], list[dict[str, Any]]] = {}  # by target: events not yet asked for
        self.left: collections.deque[dict[str, Any] | None] | None = None  # a dead worker's last events

    def next(self) -> dict[str, Any] | None:
        """The next event for the supervisor's loop: a deferred start first; None when the pipe ended."""
        if self.deferred:
            return self.deferred.popleft()
        return self.pull()

    def pull(self) -> dict[str, Any] | None:
        """The worker's next event; None when its pipe ended (it is ending).

        Raises:
            HandsLost: it died (after its last events were read), or ran past --timeout on a target.
        """
        if self.left is not None:
            if self.left:
                return self.left.popleft()
            raise HandsLost()
        live, watch = self.live, self.watch
        while True:
            try:
                event = live.events.get(timeout=0.05)
            except queue.Empty:
                if live.process.poll() is not None:
                    live.reader.join(timeout=5)  # its pipe ends with it: take what is left
                    self.left = collections.deque()
                    while not live.events.empty():
                        remaining = live.events.get()
                        if remaining is not None:
                            self.left.append(remaining)
                    return self.pull()
            else:
                self.clock = time.monotonic()
                if self.startup is not None:  # it is fieldmem's worker: what it printed so far is shown
                    self.startup = None
                    live.relay.release()
                return event
            if self.startup is not None and time.monotonic() - self.clock > self.startup:
                live.kill()
                live.process.wait()
                interpreter = self.supervisor.interpreter
                label = interpreter.label if interpreter is not None else "fieldmem's worker"
                raise WorkerFailure(
                    f"the worker under {label} did not answer within {self.startup:g} s of its start"
                    f"{remedy_suffix(interpreter)}"
                )
            busy = watch.resolving is not None or bool(watch.in_flight)  # on the user's code, not starting up
            if self.timeout is not None and busy and time.monotonic() - self.clock > self.timeout:
                live.kill()
                live.process.wait()
                watch.timed_out = True
                raise HandsLost()

    def wait(self, key: tuple[Any, ...], kinds: frozenset[str]) -> dict[str, Any]:
        """The next event of a kind in ``kinds`` about ``key``, for the brain."""
        kept = self.kept.get(key)
        for n, earlier in enumerate(kept or ()):
            if earlier["e"] in kinds:
                assert kept is not None
                return kept.pop(n)
        self.clock = time.monotonic()  # the brain's own time before it asked is not the worker's
        while True:
            event = self.pull()
            if event is None:  # the worker ended without answering: it is gone as far as this target goes
                self.watch.pipe_lost = _still_running(self.live.process)
                raise HandsLost()
            what = event["e"]
            if what == "start":
                self.supervisor.on_start(event, self.watch)  # on it from now: a death charges it too
                self.deferred.append(event)
            elif what in _JOB_EVENTS:
                found = event_key(event)
                if found == key and what in kinds:
                    return event
                if what != "done":
                    self.kept.setdefault(found, []).append(event)
            else:
                self.supervisor.on_event(event, self.watch)

    def send(self, request: dict[str, Any]) -> None:
        self.live.send(request)


def remedy_suffix(interpreter: Interpreter | None) -> str:
    """``: what to do`` for a worker under ``interpreter`` that cannot work, or ""."""
    return f": {interpreter.remedy}" if interpreter is not None and interpreter.remedy else ""


_READ_BUFFER = 1 << 20


def _read_events(answers: int, events: queue.Queue[dict[str, Any] | None]) -> None:
    """Put each event the worker sends on ``events``, then None when its pipe ends."""
    import msgspec.json  # noqa: F401  (loaded here, while the worker starts, not at its answer)

    # up to a megabyte a read where the pipe holds it, not a pipe's default 4 KiB: each read lets go of the GIL
    # and takes it back from the brain's analysis (no gain measured at 100 functions: results/own-time-ab.md)
    with open(answers, "rb", buffering=_READ_BUFFER) as pipe:
        for line in pipe:
            with collector_paused():  # a result's thousands of records, all kept until the report is written
                event = read_event(line)
            if event is not None:
                events.put(event)
    events.put(None)
