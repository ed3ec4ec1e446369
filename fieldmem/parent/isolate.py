"""The parent side of the worker: user code never runs in the process that writes the report.

``fieldmem check`` (and ``--run`` from the Python API) hands its targets to a
worker process (:mod:`fieldmem.worker.main`): the worker imports the user's
modules, calls their factories, traces, compiles, analyses and runs; this
side only supervises it and collects plain results. It imports no jax and
never raises for a target's fault:

- a worker that dies without delivering a target's result (``os._exit``, a
  signal, a segfault, out of memory) makes that target an error of kind
  ``crash`` (or ``out-of-memory``), naming how it died and the last line it
  wrote; a worker that dies while loading a spec makes that spec one error;
- with ``--run`` and ``--timeout``, a target (or a spec being loaded) that
  takes longer has its worker killed and is an error of kind ``timeout``;
- after a death, the targets not yet checked go to a fresh worker. When
  several targets were in flight (compiles overlap with ``jobs`` > 1), none
  is blamed: they are checked again one at a time, and the one that takes
  its worker down again is charged.

One worker checks every target, and with ``--run`` runs them too, on a GPU or
TPU as on the CPU: the device is opened once per check (seconds, for a TPU).
``peak_bytes_in_use`` is a high-water mark over a process's life, with no
reset; each call is lifted above the mark the calls before it set
(:func:`fieldmem.driver.execute.run_variant`), so its own peak is read in the
same process.

What the worker (and the user's code in it) writes to stdout or stderr is
shown on this process's stderr as it comes; stdout carries only the report.
Results come back on a pipe of their own (:mod:`fieldmem.worker.protocol`), and
no file is shared: nothing is left behind when either side dies. The worker
dies with this process (:mod:`fieldmem.worker.main`).
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from fieldmem.model.chain import Chain
from fieldmem.model.codec import encode
from fieldmem.model.collector import collector_paused
from fieldmem.model.environment import ModuleSettings
from fieldmem.model.errors import FieldmemError, OptionError, RunError, TargetError
from fieldmem.model.files import remove_stale_scratch, scratch_folder
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.spawn import Interpreter, end_group, prestart, spawn, take_prestarted
from fieldmem.worker.protocol import PIPE_LOST, read_event
from fieldmem.worker.readers import HandsLost
from fieldmem.worker.results import contained, error_result

__all__ = [
    "Recheck",
    "Rechecked",
    "Unit",
    "UnitSession",
    "WatchSession",
    "WorkerFailure",
    "check_isolated",
    "supervise",
]


_Checked = tuple[list[TargetResult], list[Chain]]
_TAIL = 8192  # characters of the worker's output kept, for the last line of a dying worker
_HELD = 1 << 20  # bytes of a worker's output held back before its first word (the last of them kept)
_GRACE = 10.0  # seconds a worker may take to exit once its answers ended
# seconds a worker under another interpreter (--python, --jax) may take to say a first word: one that never
# answers (a program that is no Python with fieldmem's worker, a hung one) ends the run in one line
STARTUP_LIMIT = 120.0
_LINE = 300  # at most this many characters of that line go into an error message


class WorkerFailure(FieldmemError):
    """The worker could not do what a whole run needs (it died before jax started, or a backend is missing)."""

    kind = "crash"


@dataclasses.dataclass(frozen=True)
class Unit:
    """One spec the worker loads: as typed, with its target options; ``names``: only these of its targets."""

    spec: str
    options: Any = None  # TargetOptions
    names: tuple[str, ...] | None = None
    definition: str | None = None  # of its one named target, for an error result
    call: str | None = None  # a function in hand and its arguments (fieldmem.driver.sendable, base64): the plugin's


@dataclasses.dataclass
class Supervised:
    """What the workers gave back: per backend, its report without results, and per unit its targets' results."""

    headers: list[Report | None]
    outcomes: list[list[list[_Checked]]]  # [backend][unit] -> one (results, chains) per target, in order
    settings: tuple[ModuleSettings, ...] = ()  # what the units' modules set for jax at import, in unit order


def _still_running(process: subprocess.Popen[bytes], grace: float = 1.0) -> bool:
    """Whether ``process`` still runs ``grace`` seconds after its pipe ended: a worker that dies closes its
    pipe as it goes, one whose pipe the user's code closed goes on (until it next writes, status PIPE_LOST)."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return True
    return process.returncode == PIPE_LOST


def _death(returncode: int) -> str:
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
class _Worker:
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
class _Process:
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

    def close(self, watch: _Worker | None = None) -> None:
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


def _start_process(interpreter: Interpreter | None = None) -> _Process:
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
            f"{interpreter.python} cannot be started ({exc.strerror or exc}){_remedy(interpreter)}"
        ) from None
    process = spawned.process
    assert process.stdin is not None and process.stdout is not None
    relay = _Relay(process.stdout, held=interpreter is not None)
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    reader = threading.Thread(target=_read_events, args=(spawned.answers, events), daemon=True)
    reader.start()
    return _Process(process, relay, events, reader)


# the events about one target (or chain step) that its brain waits for; other events go on as they come
_JOB_EVENTS = frozenset(("plain", "variants", "run", "error", "answer", "step", "chain-end", "done"))
# the plain fields of a target that failed to load (fieldmem.request.target.described_target)
_NO_TARGET = {
    "definition": None,
    "donate": ["auto", []],
    "static": [],
    "expect": "any",
    "max_peak": None,
    "max_live_peak": None,
    "new": [],
}


class _Link:
    """One worker's events, read for the brain (fieldmem.parent.remote_readers.Link) and for the supervisor.

    The events of a target other than the one the brain asks about are kept until it asks; a ``start``
    of the next target (the worker pipelines) waits for the supervisor's loop, the others go to the
    supervisor at once. A worker that dies, or is killed past ``--timeout`` while it is on a target,
    raises HandsLost, after every event it sent before has been read.
    """

    def __init__(self, supervisor: _Supervisor, live: _Process, watch: _Worker, fresh: bool = False) -> None:
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
                    f"{_remedy(interpreter)}"
                )
            busy = watch.resolving is not None or bool(watch.in_flight)  # on the user's code, not starting up
            if self.timeout is not None and busy and time.monotonic() - self.clock > self.timeout:
                live.kill()
                live.process.wait()
                watch.timed_out = True
                raise HandsLost()

    def wait(self, key: tuple[Any, ...], kinds: frozenset[str]) -> dict[str, Any]:
        """The next event of a kind in ``kinds`` about ``key``, for the brain."""
        from fieldmem.parent.remote_readers import event_key

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


_SWEPT: list[list[str]] = []  # the stale scratch folders this process removed, once


class _Supervisor:
    def __init__(
        self,
        units: Sequence[Unit],
        backends: Sequence[str | None],
        options: Any,
        check_backends: bool,
        progress: Callable[[str, int, int], None] | None,
    ) -> None:
        self.units, self.backends, self.options = list(units), list(backends), options
        self.check_backends = check_backends
        self.progress = progress
        self.names: dict[int, list[str]] = {}
        self.spec_errors: dict[int, TargetResult] = {}
        self.got: dict[tuple[int, int, str], _Checked] = {}
        self.headers: list[Report | None] = [None] * len(backends)
        self.reported: set[int] = set()  # the backends whose header this run has: the first worker's stands
        self.need_headers = True
        self.devices: int | None = None  # --devices: it wins over a module's own count of CPU devices
        self.settings: dict[int, dict[str, Any]] = {}  # per unit: what its module set for jax at import
        self.one_at_a_time = False
        # the workers trace args factories rather than run them (fieldmem.driver.traced), until one finds a
        # factory that keeps what it made: from then on they run them
        self.trace_arguments = os.environ.get(TRACE_ENV, "1") != "0"
        # --watch: one worker kept between requests (serve), the files to load again, whether unchanged
        # targets may be answered "same", and what each target gave when last checked
        self.serve = False
        self.kept: _Process | None = None
        self.reload: list[str] = []
        self.skip_same = False
        self.previous: dict[tuple[int, int, str], _Checked] = {}
        self.same: set[tuple[int, int, str]] = set()
        self.files: dict[int, set[str]] = {}
        self.started = 0  # workers started
        self.deaths = 0  # workers that died (or were killed) before answering
        self.lock = threading.Lock()  # what the threads of several workers share: progress, counts
        self.running: list[_Process] = []  # the workers now running
        self.check_timeout: float | None = None  # seconds a target may take, run or not (the pytest plugin)
        self.interpreter: Interpreter | None = None  # the workers' Python, where not this one (--jax, --python)
        # what the workers' environment sets beside this process's: the pytest plugin's deviceless backends
        # (fieldmem check sets them in its own process before it starts a worker)
        self.extra_environ: dict[str, str] = {}
        self.timeout_option = "--timeout"  # the option that set it, as the user knows it
        # what the workers write (XLA's dumps) goes under this folder, removed after each run: a worker
        # killed or aborting in XLA cannot remove its own; and those of fieldmem runs that were killed (looked
        # for once a process: a pytest session makes a supervisor per check)
        if not _SWEPT:
            _SWEPT.append(remove_stale_scratch())
        self.scratch = scratch_folder()

    # -- what is left -------------------------------------------------------------------------------

    def wanted(self, index: int) -> list[str] | None:
        """The names of spec ``index`` to check: all it has, or those its unit names (None: not loaded yet)."""
        names = self.names.get(index)
        only = self.units[index].names
        if names is None:
            return list(only) if only is not None else None
        return [n for n in names if only is None or n in only]

    def todo(self) -> list[list[list[str] | None]]:
        plan: list[list[list[str] | None]] = []
        for b in range(len(self.backends)):
            row: list[list[str] | None] = []
            for index in range(len(self.units)):
                wanted = self.wanted(index)
                if index in self.spec_errors:
                    row.append([])
                elif wanted is None:
                    row.append(None)
                else:
                    row.append([n for n in wanted if (b, index, n) not in self.got])
            plan.append(row)
        return plan

    @staticmethod
    def anything(plan: list[list[list[str] | None]]) -> bool:
        return any(todo is None or todo for row in plan for todo in row)

    def next_pending(self, plan: list[list[list[str] | None]]) -> tuple[int, int, str | None] | None:
        """The first target (or unloaded spec) still to do: whom a worker that died between targets is charged."""
        for b, row in enumerate(plan):
            for index, todo in enumerate(row):
                if todo is None:
                    return b, index, None
                if todo:
                    return b, index, todo[0]
        return None

    # -- one worker ---------------------------------------------------------------------------------

    def request(
        self, plan: list[list[list[str] | None]], jobs: int | None = None, report_idle: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """The request of a worker doing ``plan``; ``jobs``: its share of ``--jobs`` (None: all of it);
        ``report_idle``: the backends whose environment it reports though it has nothing to do on them
        (None: every backend; of several workers, one reports those no worker has work on)."""
        options = self.options
        if self.one_at_a_time:
            options = dataclasses.replace(options, jobs=1)
        elif jobs is not None:
            options = dataclasses.replace(options, jobs=jobs)
        return {
            "specs": [
                {
                    "spec": unit.spec,
                    "options": encode(unit.options) if unit.options is not None else None,
                    **({"call": unit.call} if unit.call is not None else {}),
                }
                for unit in self.units
            ],
            "todo": plan,
            "backends": self.backends,
            "check_backends": self.check_backends,
            "isolate": bool(options.isolate),
            "check_options": encode(dataclasses.replace(options, isolate=False)),
            "cwd": os.getcwd(),
            **self._paths(),
            "serve": self.serve,
            "reload": self.reload,
            "skip_same": self.skip_same,
            "report_idle": list(range(len(self.backends))) if report_idle is None else list(report_idle),
            "scratch": self.scratch,
            "devices": self.devices,
            "trace_arguments": self.trace_arguments,
        }

    def _paths(self) -> dict[str, Any]:
        """Where the worker finds modules, and its environment: this process's (as now: a prestarted worker
        began before this process set it). Under another interpreter, only the user's own folders of
        ``sys.path`` (its own installation keeps its own libraries: ``own_path``), and the environment the
        interpreter needs on top of this one's."""
        if self.interpreter is None:
            return {"sys_path": list(sys.path), "environ": {**os.environ, **self.extra_environ}}
        return {
            "sys_path": [p for p in sys.path if not _installed_here(p)],
            "own_path": True,
            "fallback_path": list(self.interpreter.fallback_path),
            "environ": {**os.environ, **dict(self.interpreter.environ), **self.extra_environ},
        }

    # -- several workers --------------------------------------------------------------------------

    def worker_count(self, plan: list[list[list[str] | None]]) -> int:
        """How many workers share ``plan``: one per (backend, spec) with work, at most ``--jobs`` and
        :func:`most_workers` (1 unless ``$FIELDMEM_WORKERS`` says more); one when
        a worker is kept between requests (``--watch``), when targets run (``--run``: a device's memory
        statistics and timings are only the target's own in a process alone), and while the targets of a
        dead worker are checked again one at a time."""
        if self.serve or self.one_at_a_time or self.options.run:
            return 1
        units = sum(1 for row in plan for todo in row if todo is None or todo)
        return max(1, min(int(self.options.jobs), units, most_workers()))

    @staticmethod
    def split(plan: list[list[list[str] | None]], count: int) -> list[list[list[list[str] | None]]]:
        """``plan`` in ``count`` parts, each (backend, spec) with work in one of them, in turn."""
        parts: list[list[list[list[str] | None]]] = [[[[] for _ in row] for row in plan] for _ in range(count)]
        n = 0
        for b, row in enumerate(plan):
            for index, todo in enumerate(row):
                if todo is None or todo:
                    parts[n % count][b][index] = todo
                    n += 1
        return parts

    def run_workers(self, plan: list[list[list[str] | None]]) -> list[tuple[_Worker, list[list[list[str] | None]]]]:
        """Do ``plan`` in :meth:`worker_count` workers at once (each followed on a thread of its own, the brain
        answering its targets there): what each saw, with its part of the plan."""
        count = self.worker_count(plan)
        if count == 1:
            return [(self.run_worker(plan), plan)]
        parts = self.split(plan, count)
        jobs = max(1, int(self.options.jobs) // count)  # the compiles of all the workers stay within --jobs
        from concurrent.futures import ThreadPoolExecutor

        idle = [b for b in range(len(self.backends)) if not any(todo is None or todo for todo in plan[b])]
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="fieldmem-worker") as pool:
            futures = [pool.submit(self.run_worker, part, jobs, idle if n == 0 else ()) for n, part in enumerate(parts)]
            try:
                return [(future.result(), part) for future, part in zip(futures, parts)]
            except BaseException:  # Ctrl-C (only this thread gets it): the workers end now, their threads with them
                with self.lock:
                    running = list(self.running)
                for live in running:
                    with contextlib.suppress(OSError):
                        live.kill()
                raise

    def run_worker(
        self, plan: list[list[list[str] | None]], jobs: int | None = None, report_idle: Sequence[int] | None = None
    ) -> _Worker:
        watch = _Worker()
        live = self.kept if self.kept is not None and self.kept.alive() else None
        fresh = live is None
        if live is None:
            if self.kept is not None:
                self.kept.close()
            self.kept = None
            live = _start_process(self.interpreter)
            with self.lock:
                self.started += 1
        with self.lock:
            self.running.append(live)
        keep = False
        try:
            live.send(self.request(plan, jobs, report_idle))
            self.follow(live, watch, fresh)
            keep = self.serve and watch.last == "end" and live.alive()
        finally:
            with self.lock:
                self.running.remove(live)
            if keep:
                self.kept = live
            else:
                self.kept = None
                live.close(watch)
        return watch

    def close(self) -> None:
        """End the worker kept between requests, if any."""
        if self.kept is not None:
            self.kept.close()
            self.kept = None

    def startup_limit(self) -> float | None:
        """Seconds a fresh worker under another interpreter may take to say its first word: the start-up limit,
        or ``--timeout`` (the plugin's ``--fieldmem-timeout``) where shorter; None under this Python."""
        if self.interpreter is None:
            return None
        timeout = self.check_timeout if self.check_timeout is not None else getattr(self.options, "timeout", None)
        return min(STARTUP_LIMIT, timeout) if timeout else STARTUP_LIMIT

    def follow(self, live: _Process, watch: _Worker, fresh: bool = False) -> None:
        """Take the worker's events until it ends, the brain answering each target it serves (the worker
        dying, or killed past ``--timeout``, ends it too: :meth:`run` charges what it was on). ``fresh``: it
        was started for this request (under another interpreter, its first word has a limit).

        Raises:
            WorkerFailure: a fresh worker under another interpreter said nothing within the start-up limit.
        """
        link = _Link(self, live, watch, fresh)
        try:
            while True:
                event = link.next()
                if event is None:  # the pipe ended: the worker is ending
                    try:
                        live.process.wait(timeout=_GRACE)
                    except subprocess.TimeoutExpired:  # stuck after its answers (an atexit hook): done with it
                        live.kill()
                    return
                if event["e"] == "start":
                    self.serve_target(event, link, watch)
                    continue
                self.on_event(event, watch)
                if self.serve and watch.last is not None:  # a serving worker waits for the next request
                    return
        except HandsLost:  # it died, or was killed past --timeout, while its targets were on
            return

    def on_start(self, event: dict[str, Any], watch: _Worker) -> None:
        """The worker started a target: it is on it until the brain has its result."""
        key = (int(event["b"]), int(event["spec"]), str(event["name"]))
        if key not in watch.in_flight:
            watch.in_flight.append(key)
            self.report_progress(key)

    def serve_target(self, event: dict[str, Any], link: _Link, watch: _Worker) -> None:
        """The brain's check of the target the worker started (``event``), from the readings it sends."""
        from fieldmem.parent.decide import check_chain, finish_job
        from fieldmem.parent.remote_readers import RemoteHands, event_key
        from fieldmem.request.target import described_chain, described_target

        self.on_start(event, watch)
        key = event_key(event)
        b = key[0]
        options = dataclasses.replace(self.options, backend=self.backends[b], isolate=False)
        if self.one_at_a_time:
            options = dataclasses.replace(options, jobs=1)
        checked: _Checked
        hands = RemoteHands(link, options, key if event.get("kind") == "chain" else None)
        with collector_paused():  # thousands of records, all kept until the report is written
            try:
                if event.get("kind") == "chain":
                    results, chain = check_chain(described_chain(event["chain"]), options, hands)
                    checked = (results, [chain])
                else:
                    if event.get("kind") == "target":
                        target = described_target(event["target"])
                    else:  # a spec that failed to load: its error result is all there is
                        target = described_target({**_NO_TARGET, "spec": self.units[key[1]].spec, "name": key[2]})
                    checked = ([finish_job(hands.job(key, target), options, hands)], [])
            except (HandsLost, KeyboardInterrupt):
                raise
            except BaseException as exc:  # what no stage of the brain contained (a chain's own analysis)
                unit = self.units[key[1]]
                checked = ([error_result(unit.spec, key[2], contained(exc, "checking it"))], [])
                hands.abandon()  # the worker may wait on it: let it go on
        self.got[key[:3]] = checked
        if key[:3] in watch.in_flight:
            watch.in_flight.remove(key[:3])
        watch.progressed = True

    def on_event(self, event: dict[str, Any], watch: _Worker) -> None:
        what = event["e"]
        if what == "resolve":
            watch.resolving = int(event["spec"])
        elif what == "resolved":
            self.names[int(event["spec"])] = [str(n) for n in event["names"]]
            watch.resolving = None
            if isinstance(event.get("settings"), dict):
                self.settings[int(event["spec"])] = event["settings"]
            else:
                self.settings.pop(int(event["spec"]), None)
            if event.get("elsewhere"):  # its module sets jax otherwise: the worker that checks it starts now
                with self.lock:
                    prestart()
            if isinstance(event.get("files"), list):
                self.files.setdefault(int(event["spec"]), set()).update(str(f) for f in event["files"])
            if isinstance(event.get("libraries"), list):  # a worker under another interpreter: its stdlib
                from fieldmem.model.libraries import add_library_folders

                add_library_folders(event["libraries"])
        elif what == "same":
            key = (int(event["b"]), int(event["spec"]), str(event["name"]))
            if key in self.previous:
                self.got[key] = self.previous[key]
                self.same.add(key)
        elif what == "environment":
            from fieldmem.model.readings import Environment
            from fieldmem.parent.decide import report_header
            from fieldmem.worker.protocol import decode_value

            b = int(event["b"])
            with self.lock:  # several workers of one run (modules that set jax otherwise): the first's stands
                if b in self.reported:
                    return
                self.reported.add(b)
            try:
                environment = decode_value(Environment, event["environment"])
            except (ValueError, TypeError, KeyError):
                self.headers[b] = None
            else:
                self.headers[b] = report_header(
                    environment, dataclasses.replace(self.options, backend=self.backends[b])
                )
        elif what == "leaked":  # a traced factory kept a tracer: that worker stopped, the next runs factories
            self.trace_arguments = False
        elif what == "fatal":
            watch.last, watch.fatal = "fatal", str(event.get("message", ""))
            watch.fatal_kind = str(event.get("kind", ""))
        elif what in ("end", "yield"):
            watch.last = what

    def report_progress(self, key: tuple[int, int, str]) -> None:
        if self.progress is None:
            return
        with self.lock:  # several workers' threads
            self._report_progress(key)

    def _report_progress(self, key: tuple[int, int, str]) -> None:
        assert self.progress is not None
        b = key[0]
        total = sum(len(self.wanted(i) or [""]) for i in range(len(self.units)))
        done = sum(1 for (gb, _, _) in self.got if gb == b)
        self.progress(key[2], min(done, max(total - 1, 0)), total)

    def error(self, index: int, name: str, error: FieldmemError) -> TargetResult:
        unit = self.units[index]
        return error_result(unit.spec, name, error, unit.definition if unit.names is not None else None)

    # -- after a worker ended -----------------------------------------------------------------------

    def failure(self, watch: _Worker, stage: str) -> RunError:
        if watch.timed_out:
            limit = self.check_timeout if self.check_timeout is not None else self.options.timeout
            message = (
                f"did not finish within {self.timeout_option} {limit:g} s; its worker process was killed "
                "(the other targets still ran)"
            )
            return RunError(message, kind="timeout")
        if watch.pipe_lost or watch.returncode == PIPE_LOST:
            return RunError(
                f"its worker process lost its pipe to fieldmem while {stage}: the code it ran closed a file "
                "descriptor it does not own (os.closerange or os.close?)",
                kind="crash",
            )
        message = f"its worker process {_death(watch.returncode)} while {stage}" + (
            f": {watch.why}" if watch.why else ""
        )
        return RunError(message, kind="out-of-memory" if watch.out_of_memory else "crash")

    def charge(self, watch: _Worker, plan: list[list[list[str] | None]]) -> None:
        """A worker died (or was killed): charge what it was on, so the next worker goes past it."""
        checking = "checking or running it" if self.options.run else "checking it"
        if watch.resolving is not None:
            index = watch.resolving
            self.spec_errors[index] = self.error(index, self.units[index].spec, self.failure(watch, "loading it"))
            return
        if len(watch.in_flight) == 1:
            b, index, name = watch.in_flight[0]
            self.got[(b, index, name)] = ([self.error(index, name, self.failure(watch, checking))], [])
            return
        if len(watch.in_flight) > 1 and not self.one_at_a_time:
            self.one_at_a_time = True  # several compiles overlapped: check them again one by one
            return
        for key in watch.in_flight:
            self.got[key] = ([self.error(key[1], key[2], self.failure(watch, checking))], [])
        if watch.in_flight:
            return
        pending = self.next_pending(plan)
        if pending is None:  # only the reports' headers were left: the worker cannot start at all
            why = f": {watch.why}" if watch.why else ""
            raise WorkerFailure(
                f"fieldmem's worker process {_death(watch.returncode)} before checking anything{why}"
                f"{_remedy(self.interpreter)}"
            )
        b, index, pending_name = pending
        if pending_name is None:
            self.spec_errors[index] = self.error(index, self.units[index].spec, self.failure(watch, "loading it"))
        else:
            self.got[(b, index, pending_name)] = ([self.error(index, pending_name, self.failure(watch, checking))], [])

    def run(self) -> Supervised:
        try:
            return self._run()
        finally:  # every worker of this run has ended or waits between requests (--watch)
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _run(self) -> Supervised:
        stalled = 0
        self.reported = set()
        while True:
            plan = self.todo()
            if not self.anything(plan) and (not self.need_headers or all(h is not None for h in self.headers)):
                break
            ran = self.run_workers(plan)
            fatal = next((watch for watch, _ in ran if watch.last == "fatal"), None)
            if fatal is not None:  # under another interpreter, an environment's failure says what to do
                remedy = _remedy(self.interpreter) if fatal.fatal_kind == "environment" else ""
                raise WorkerFailure(fatal.fatal + remedy)
            died = [(watch, part) for watch, part in ran if watch.last is None or watch.timed_out]
            for watch, part in died:
                self.deaths += 1
                self.charge(watch, part)
            if died:
                continue
            stalled = 0 if any(watch.progressed for watch, _ in ran) else stalled + 1
            if stalled >= 2:  # it ended twice without checking what is left: those targets are gone
                self.give_up(plan)
        return self.assemble()

    def give_up(self, plan: list[list[list[str] | None]]) -> None:
        for b, row in enumerate(plan):
            for index, todo in enumerate(row):
                if todo is None:
                    self.spec_errors[index] = self.error(
                        index, self.units[index].spec, TargetError("its worker did not load it")
                    )
                for name in todo or ():
                    self.got[(b, index, name)] = ([self.error(index, name, TargetError("its worker skipped it"))], [])
        if self.need_headers and any(header is None for header in self.headers):
            raise WorkerFailure("fieldmem's worker process did not report the environment it ran in")

    def assemble(self) -> Supervised:
        outcomes: list[list[list[_Checked]]] = []
        for b in range(len(self.backends)):
            row: list[list[_Checked]] = []
            for index, unit in enumerate(self.units):
                if index in self.spec_errors:
                    row.append([([self.spec_errors[index]], [])])
                    continue
                checked = [self.got[(b, index, name)] for name in self.wanted(index) or ()]
                for name in unit.names or ():
                    if name not in (self.names.get(index) or ()):
                        error = TargetError(f"{unit.spec!r} no longer has a target named {name!r}")
                        checked.append(([self.error(index, name, error)], []))
                row.append(checked)
            outcomes.append(row)
        return Supervised(self.headers, outcomes, self.module_settings())

    def module_settings(self) -> tuple[ModuleSettings, ...]:
        """What the units' modules set for jax at import, in unit order (those that set nothing left out)."""
        found = []
        for index, unit in enumerate(self.units):
            settings = self.settings.get(index)
            if settings is None or index in self.spec_errors:
                continue
            try:
                found.append(
                    ModuleSettings(
                        target=unit.spec,
                        environment={str(k): None if v is None else str(v) for k, v in settings["environment"].items()},
                        config={str(k): str(v) for k, v in settings["config"].items()},
                        note=None if settings.get("note") is None else str(settings["note"]),
                        replaced={str(k): str(v) for k, v in (settings.get("replaced") or {}).items()},
                    )
                )
            except (KeyError, AttributeError, TypeError):  # not what a worker sends: left out
                continue
        return tuple(found)


WORKERS_ENV = "FIELDMEM_WORKERS"
TRACE_ENV = "FIELDMEM_TRACE_ARGS"  # 0: the workers run every args factory, none is traced


def most_workers() -> int:
    """The most workers a check may start at once: ``$FIELDMEM_WORKERS`` (a positive number), else 1.

    One worker by default, as measured (``benchmarks/results/workers.md``): on a 2-core machine a second
    worker's start costs more than it saves, because one worker already compiles ``--jobs`` programs at once
    while the parent analyses. Where cores are many and specs or backends several, ``FIELDMEM_WORKERS=4``
    lets the parent share them among up to 4 workers (never more than ``--jobs``).

    Raises:
        OptionError: the variable holds something else.
    """
    value = os.environ.get(WORKERS_ENV, "").strip()
    if not value:
        return 1
    if not value.isdigit() or int(value) < 1:
        raise OptionError(f"{WORKERS_ENV}={value!r}: give a number of workers of at least 1, e.g. {WORKERS_ENV}=1")
    return int(value)


def _installed_here(entry: str) -> bool:
    """Whether a ``sys.path`` entry is this Python's installation (its standard library, its site-packages,
    the folder of fieldmem itself): what a worker under another interpreter must not import from."""
    if not entry:
        return False
    path = os.path.abspath(entry)
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return any(path == p or path.startswith(p + os.sep) for p in prefixes)


def _remedy(interpreter: Interpreter | None) -> str:
    """``: what to do`` for a worker under ``interpreter`` that cannot work, or ""."""
    return f": {interpreter.remedy}" if interpreter is not None and interpreter.remedy else ""


def _read_events(answers: int, events: queue.Queue[dict[str, Any] | None]) -> None:
    """Put each event the worker sends on ``events``, then None when its pipe ends."""
    import msgspec.json  # noqa: F401  (loaded here, while the worker starts, not at its answer)

    with open(answers, "rb") as pipe:
        for line in pipe:
            with collector_paused():  # a result's thousands of records, all kept until the report is written
                event = read_event(line)
            if event is not None:
                events.put(event)
    events.put(None)


def supervise(
    units: Sequence[Unit],
    backends: Sequence[str | None],
    options: Any,
    *,
    check_backends: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    headers: bool = True,
    devices: int | None = None,
    interpreter: Interpreter | None = None,
) -> Supervised:
    """Load, check (and run, as ``options`` say) every unit on every backend in worker processes.

    ``check_backends``: the first worker checks every named backend is
    available before it checks anything (as :func:`~fieldmem.parent.checker.check_backends`;
    after it imported the first module, whose settings for jax must come before jax starts).
    ``headers``: each backend's report without results is wanted (False: only the results).
    ``devices``: ``--devices``, which wins over a module's own count of CPU devices. ``interpreter``: the
    Python the workers run under (another venv, with another jax); None: this one.

    Raises:
        WorkerFailure: an error of the whole run (a backend that is not available),
            or a worker that cannot start at all.
    """
    supervisor = _Supervisor(units, backends, options, check_backends, progress)
    supervisor.need_headers = headers
    supervisor.devices = devices
    supervisor.interpreter = interpreter
    return supervisor.run()


def check_reports(
    units: Sequence[Unit],
    backends: Sequence[str | None],
    options: Any,
    *,
    check_backends: bool,
    progress: Callable[[str, int, int], None] | None = None,
    devices: int | None = None,
    interpreter: Interpreter | None = None,
) -> tuple[Report, ...]:
    """One report per backend, every target checked in worker processes (``fieldmem check``); ``devices``:
    ``--devices``, which wins over a module's own count of CPU devices; ``interpreter``: the workers'
    Python, where not this one (``--jax``, ``--python``)."""
    supervised = supervise(
        units,
        backends,
        options,
        check_backends=check_backends,
        progress=progress,
        devices=devices,
        interpreter=interpreter,
    )
    reports = _reports(supervised)
    if progress is not None:
        total = sum(len(r.results) for r in reports[:1])
        progress("", total, total)
    return reports


def _reports(supervised: Supervised) -> tuple[Report, ...]:
    """One report per backend: its header with every unit's results and chains, in order."""
    reports = []
    for header, row in zip(supervised.headers, supervised.outcomes):
        assert header is not None
        checked = [pair for unit in row for pair in unit]
        results = tuple(result for pair in checked for result in pair[0])
        chains = tuple(chain for pair in checked for chain in pair[1])
        reports.append(dataclasses.replace(header, results=results, chains=chains, module_settings=supervised.settings))
    return tuple(reports)


@dataclasses.dataclass(frozen=True)
class Rechecked:
    """One target checked again: its name, its results and chains now, and those of its last check
    (None: a new target)."""

    name: str
    now: _Checked
    before: _Checked | None


@dataclasses.dataclass(frozen=True)
class Recheck:
    """What one re-check after an edit gave (``--watch``).

    ``reports``: every target's latest results, one report per backend, as a full check would give
    them. ``units``: the units loaded again. ``checked``: per backend, the targets checked again;
    ``same``: per backend, the names of those whose code, settings and values did not change (their
    last results stand); ``gone``: per backend, the targets their units no longer have.
    ``restarted``: workers started for it (the kept one had died); ``deaths``: workers that died
    while it ran.
    """

    reports: tuple[Report, ...]
    units: tuple[int, ...]
    checked: tuple[tuple[Rechecked, ...], ...]
    same: tuple[tuple[str, ...], ...]
    gone: tuple[tuple[str, ...], ...] = ()
    restarted: int = 0
    deaths: int = 0


def _unloaded(checked: _Checked) -> bool:
    """The result of a spec that could not be loaded (a syntax error): no target of its own."""
    results = checked[0]
    return len(results) == 1 and results[0].status == "error" and results[0].name == results[0].target


class WatchSession:
    """``fieldmem check --watch``: the targets checked by one worker kept between checks (jax imported,
    compiled programs cached), and checked again after their files are edited.

    :meth:`check` is the first, full check; :meth:`files` what to watch, per unit; :meth:`recheck`
    sends the worker the edited files: it executes their modules (and the local modules importing
    them) again, loads the units that depend on them, and checks each of their targets whose
    fingerprint changed. A worker that died is replaced, and the units it did not answer are loaded
    by the new one. :meth:`close` ends the worker.
    """

    def __init__(
        self,
        units: Sequence[Unit],
        backends: Sequence[str | None],
        options: Any,
        *,
        check_backends: bool,
        progress: Callable[[str, int, int], None] | None = None,
        devices: int | None = None,
        interpreter: Interpreter | None = None,
    ) -> None:
        self._supervisor = _Supervisor(units, backends, options, check_backends, progress)
        self._supervisor.serve = True
        self._supervisor.devices = devices
        self._supervisor.interpreter = interpreter  # --python: the worker kept, and any restarted, run there
        self.started_ns = time.time_ns()  # files modified after this may have been read before their edit

    def check(self) -> tuple[Report, ...]:
        """Check every unit on every backend: the reports of ``fieldmem check`` without ``--watch``."""
        supervisor = self._supervisor
        reports = _reports(supervisor.run())
        if supervisor.progress is not None:
            total = sum(len(r.results) for r in reports[:1])
            supervisor.progress("", total, total)
        supervisor.progress = None  # a re-check draws no progress line
        return reports

    def files(self) -> dict[int, set[str]]:
        """Per unit, the files its targets depend on (its module's and the local modules it imports)."""
        return {index: set(files) for index, files in self._supervisor.files.items()}

    def recheck(self, edited: Sequence[str]) -> Recheck:
        """Load again the units depending on ``edited`` (real paths) and check what changed in them."""
        supervisor = self._supervisor
        changed = set(edited)
        units = tuple(
            index
            for index in range(len(supervisor.units))
            if supervisor.files.get(index, set()) & changed or not supervisor.files.get(index)
        )
        current = dict(supervisor.got)
        supervisor.previous = {**supervisor.previous, **current}  # each target's last check, kept
        supervisor.same = set()
        for index in units:
            supervisor.names.pop(index, None)
            supervisor.spec_errors.pop(index, None)
            for key in [key for key in supervisor.got if key[1] == index]:
                del supervisor.got[key]
        started, deaths = supervisor.started, supervisor.deaths
        supervisor.reload, supervisor.skip_same = sorted(changed), True
        try:
            reports = _reports(supervisor.run())
        finally:
            supervisor.reload, supervisor.skip_same = [], False
        checked, same, gone = [], [], []
        for b in range(len(supervisor.backends)):
            keys = [key for key in supervisor.got if key[0] == b and key[1] in units]
            # a unit whose loading killed its worker (os._exit at import): that death is its result
            failed = [
                Rechecked(supervisor.units[index].spec, ([supervisor.spec_errors[index]], []), None)
                for index in units
                if index in supervisor.spec_errors
            ]
            checked.append(
                tuple(
                    failed
                    + [
                        Rechecked(key[2], supervisor.got[key], supervisor.previous.get(key))
                        for key in keys
                        if key not in supervisor.same
                    ]
                )
            )
            same.append(tuple(key[2] for key in keys if key in supervisor.same))
            gone.append(
                tuple(
                    key[2]
                    for key in current
                    if key[0] == b and key[1] in units and key not in supervisor.got and not _unloaded(current[key])
                )
            )
        return Recheck(
            reports=reports,
            units=units,
            checked=tuple(checked),
            same=tuple(same),
            gone=tuple(gone),
            restarted=supervisor.started - started,
            deaths=supervisor.deaths - deaths,
        )

    def close(self) -> None:
        """End the kept worker."""
        self._supervisor.close()


class CallSession:
    """The pytest plugin's checks of functions in hand (:mod:`fieldmem.driver.sendable` sends each with its
    arguments), in one worker kept warm between them: the user's code traced and compiled where a crash,
    an ``os._exit`` or a hang (past ``timeout`` seconds) is that check's error, never the test session's
    end. A worker that died is replaced by the next check. :meth:`close` ends it.
    """

    def __init__(
        self, timeout: float | None, interpreter: Interpreter | None = None, environ: dict[str, str] | None = None
    ) -> None:
        self.timeout = timeout
        self.interpreter = interpreter  # the workers' Python, where not this one (--fieldmem-jax)
        self.environ = dict(environ or {})  # set in the worker's environment (a deviceless backend's)
        self._kept: _Process | None = None

    def check(self, call: bytes, label: str, options: Any) -> Report:
        """The report (one backend: ``options.backend``) of the function in hand ``call`` names; ``label``:
        its result's name, should the worker die before it loaded it."""
        import base64

        unit = Unit(label, None, None, None, base64.b64encode(call).decode("ascii"))
        supervisor = _Supervisor([unit], [options.backend], dataclasses.replace(options, isolate=True), False, None)
        supervisor.serve = True  # the worker waits for the next check
        supervisor.kept = self._kept
        supervisor.interpreter = self.interpreter
        supervisor.extra_environ = self.environ
        supervisor.check_timeout, supervisor.timeout_option = self.timeout, "--fieldmem-timeout"
        try:
            return _reports(supervisor.run())[0]
        finally:
            self._kept = supervisor.kept

    def close(self) -> None:
        """End the kept worker."""
        if self._kept is not None:
            self._kept.close()
            self._kept = None


def check_isolated(targets: Sequence[Any], options: Any) -> list[_Checked]:
    """Check and run every resolved target in worker processes (``--run`` from the Python API).

    ``targets`` are :class:`~fieldmem.request.target.Target`s or
    :class:`~fieldmem.request.target.ChainTarget`s that ``resolve_target`` made
    (each carries the options it was resolved with): the worker loads each
    spec again and checks the target of that name. Returns, per target in
    order, its results and chains.
    """
    units = []
    for target in targets:
        first = getattr(target, "first", target)
        units.append(Unit(target.spec, first.options, (target.name,), first.definition))
    supervised = supervise(units, [options.backend], dataclasses.replace(options, isolate=True), headers=False)
    return [
        (
            [r for pair in outcome for r in pair[0]],
            [c for pair in outcome for c in pair[1]],
        )
        for outcome in supervised.outcomes[0]
    ]


class UnitSession:
    """``fieldmem fit``'s points: one unit (a spec, with the options of one point: its factory's keyword
    arguments) checked at a time on one backend, in one worker kept warm between them (jax started, the
    user's modules imported), where a crash or an ``os._exit`` is that point's error. A worker that died
    is replaced by the next check. :meth:`close` ends it.
    """

    def __init__(self, interpreter: Interpreter | None = None, devices: int | None = None) -> None:
        self.interpreter = interpreter  # the workers' Python, where not this one (--jax, --python)
        self.devices = devices  # --devices, or the chips of a multi-chip deviceless backend
        self._kept: _Process | None = None
        self._checked: set[str | None] = set()  # the backends a worker said are available

    def check(self, unit: Unit, backend: str | None, options: Any) -> Report:
        """The report (one backend) of ``unit``'s targets checked on ``backend`` with ``options``.

        Raises:
            WorkerFailure: the backend is not available, or the worker cannot start at all.
        """
        # a worker about to start (the first, or one after a death) checks the backend first, as the first did
        fresh = backend not in self._checked or self._kept is None or not self._kept.alive()
        supervisor = _Supervisor([unit], [backend], dataclasses.replace(options, isolate=True), fresh, None)
        supervisor.serve = True  # the worker waits for the next point
        supervisor.kept = self._kept
        supervisor.interpreter = self.interpreter
        supervisor.devices = self.devices
        try:
            report = _reports(supervisor.run())[0]
        finally:
            self._kept = supervisor.kept
        self._checked.add(backend)
        return report

    def close(self) -> None:
        """End the kept worker."""
        if self._kept is not None:
            self._kept.close()
            self._kept = None
