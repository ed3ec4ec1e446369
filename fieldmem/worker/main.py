"""The worker: ``python -m fieldmem.worker.main FD PARENT`` loads, checks (and runs) targets for its parent.

Started by :mod:`fieldmem.parent.isolate`, never by a user: the user's code
(their modules, factories, tracing, ``--run``) runs here, never in the process
that writes the report and decides the exit code. It reads the request, one
JSON line, from stdin (:mod:`fieldmem.worker.protocol`), takes the parent's
environment, working directory and ``sys.path``, loads every spec it is asked for (the
first before jax starts, so that what its module sets for jax is in force; a spec whose
module sets jax otherwise is left to a fresh worker: :mod:`fieldmem.driver.settings`), then
checks each target on each backend through the checker (which imports jax),
sending an event around each step and each result on the pipe ``FD``. What it
or the user's code prints goes to its stdout and stderr, which the parent
shows on its stderr: results never travel that way. The user's code sees an
empty stdin, as before.

It dies with its parent: on Linux the kernel kills it when the parent dies
(``PR_SET_PDEATHSIG``), and everywhere a thread watches stdin, whose other
end only the parent holds, and exits at its end. It writes no file. A crash
or a hang here is the parent's to report.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import dataclasses
import errno
import gc
import importlib
import json
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, cast

from fieldmem.model.codec import decode, dumps, unbounded_integers
from fieldmem.model.collector import collector_paused, collector_resumed, collector_stays_paused
from fieldmem.model.errors import EnvError, FieldmemError, one_line
from fieldmem.model.libraries import library_folders
from fieldmem.model.machine import HEAP_PAD, glibc, heap_pad_set, malloc_arenas, usable_cores
from fieldmem.worker.protocol import PIPE_LOST, write_event

# fieldmem's driver, request and serve modules are imported in the functions that use them, not here (those every
# check needs are loaded ahead by _warm_up, after numpy and jaxlib: AHEAD): at the top they load before the heap
# is padded and jaxlib loaded, ``import fieldmem.worker.main`` 40 ms -> 400 ms (python -X importtime, measured 2026-12-06). What each adds to
# ``import fieldmem.worker.main`` on its own (-X importtime, median of 7, loaded 2-core machine, 2026-12-06):
# driver (the package) 296 ms, driver.quiet 296, driver.lowering 301, driver.sendable 359, driver.early 197,
# worker.serve 301, worker.user_modules 331, worker.fingerprint 292, worker.local_readers 167, worker.readers
# 157, request.target 91, request.options 53, request.in_hand 64, worker.results 65.
__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """(Linux) Have the kernel kill this process when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the pipe still watches
            pass
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def _watch_parent(watched: int, requests: queue.Queue[bytes] | None = None) -> None:
    """Exit when the pipe ``watched``, whose other end only the parent holds, ends.

    ``requests``: the parent's later lines on ``watched`` (its questions about a target being served, and
    a serving worker's next requests, ``--watch``) are put there, one line each; None: ignored.
    """

    def watch() -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(watched, 65536)
            except InterruptedError:  # pragma: no cover - retried by Python anyway
                continue
            except OSError:
                break
            if not chunk:
                break
            if requests is not None:
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    requests.put(line)
        os._exit(1)

    threading.Thread(target=watch, name="fieldmem-parent-watch", daemon=True).start()


def _warm_up() -> None:
    """Load what importing jax takes most of (:func:`fieldmem.driver.quiet.preload_jaxlib`), read which
    installed libraries require jax (:func:`fieldmem.driver.backends.read_libraries_ahead`) and load the
    modules of fieldmem's own that every check runs (:data:`AHEAD`), while the request is awaited, not from
    the working directory (``-m`` put it first): a numpy.py of the user's must not stand in."""
    # here, not at the top: see the figures above __all__
    from fieldmem.driver.backends import read_libraries_ahead
    from fieldmem.driver.quiet import preload_jaxlib

    saved = sys.path[:]
    here = os.getcwd()
    sys.path[:] = [p for p in saved if p and os.path.abspath(p) != here]
    try:
        preload_jaxlib()
        # the report's libraries read from this interpreter's folders now, not after the last answer: a folder
        # the request adds (the user's), or one changed since, is read then. Only while the request is awaited:
        # where it came first, they are read while the first compile is waited for (read_libraries_meanwhile)
        if not _request_waiting():
            with contextlib.suppress(Exception):
                read_libraries_ahead()
        for name in AHEAD:  # none imports jax (tests/frontends/test_import_cost.py)
            with contextlib.suppress(Exception):  # a failure is left for the import after the request to report
                importlib.import_module(name)
    finally:
        sys.path[:] = saved


def _request_waiting() -> bool:
    """Whether the parent's request is on stdin already (it is read after the warm-up)."""
    import select

    try:
        return bool(select.select([0], [], [], 0)[0])
    except (OSError, ValueError):  # pragma: no cover - no descriptor 0 to ask (it is read, and refused, later)
        return False


#: fieldmem's modules every check imports once it has its request (the user's module first: none of them imports
#: jax), loaded while the worker waits for it (:func:`_warm_up`), after numpy and jaxlib (which most of them use):
#: where the request comes first (on 2 cores it always does), they cost what they cost after it
AHEAD = (
    "fieldmem.request.options",
    "fieldmem.request.target",
    "fieldmem.driver",
    "fieldmem.driver.early",
    "fieldmem.driver.lowering",
    "fieldmem.driver.placement",
    "fieldmem.driver.settings",
    "fieldmem.driver.traced",
    "fieldmem.worker.local_readers",
    "fieldmem.worker.readers",
    "fieldmem.worker.serve",
)

#: glibc's ``mallopt`` parameters (malloc.h): the most malloc arenas (``M_ARENA_MAX``), the padding a heap grows by
#: (``M_TOP_PAD``)
M_ARENA_MAX = -8
M_TOP_PAD = -2


def _mallopt(libc: Any) -> Any:
    """glibc's ``mallopt`` (from ``libc``, else this process's C library); None off glibc or where it is missing."""
    if libc is None:
        if not glibc():
            return None
        try:
            libc = ctypes.CDLL(None)
        except OSError:  # no libc to load
            return None
    return getattr(libc, "mallopt", None)


def fewer_malloc_arenas(
    environ: Mapping[str, str] | None = None, libc: Any = None, cores: int | None = None, at_once: bool = False
) -> int:
    """Let glibc's malloc keep at most :func:`fieldmem.model.machine.malloc_arenas` arenas in this process: one per
    usable core, at least two, for a worker that compiles one program at a time; two per core, at least 16, for
    one that compiles several at once (``at_once``); ``cores``: the usable cores, read when None. The number
    asked for, 0 where nothing was set.

    glibc gives a thread that allocates an arena of its own, up to 8 per core, and keeps the memory freed in
    each for that arena's next use. A compile's threads (libtpu's code generation, LLVM's) spread over many
    arenas, so the memory one compile freed is held where the next does not reuse it, and compiles at once
    each hold their own; fewer arenas than the threads that allocate at once make them wait on each other's
    locks (two arenas made the pod example's ``--jobs 1`` check three times slower on 13 cores, eight its
    two compiles at once 1.7 times slower). benchmarks/bench_arenas.py and benchmarks/study_pod_pad measure both.

    Nothing is set where ``MALLOC_ARENA_MAX`` is in the environment (the user's choice, read by glibc at the
    start), off glibc, or where ``mallopt`` is missing. glibc fixes its arena limit once it has made more than
    8 arenas, so this holds only where the worker has not made that many before its request (otherwise the
    setting changes nothing). It holds for the rest of the process.
    """
    environ = os.environ if environ is None else environ
    if "MALLOC_ARENA_MAX" in environ:
        return 0
    mallopt = _mallopt(libc)
    if mallopt is None:
        return 0
    arenas = malloc_arenas(usable_cores() if cores is None else cores, at_once)
    return arenas if mallopt(M_ARENA_MAX, arenas) else 0


def pad_malloc_heap(environ: Mapping[str, str] | None = None, libc: Any = None) -> int:
    """Have glibc's malloc grow this process's heaps :data:`fieldmem.model.machine.HEAP_PAD` past what it needs
    each time it grows one (``M_TOP_PAD``, 128 KiB by default); the padding asked for, 0 where nothing was set.

    A compile allocates and frees memory in many small steps as it grows: with the default each step of the
    heap's growth is a system call, and on a machine where those are dear (the 13-core host: 5 s of the
    compile-heavy step's first compile were in the kernel) that was most of a compile's time. The padding is
    address space, resident only once written. Nothing is set where the environment sets it
    (:func:`fieldmem.model.machine.heap_pad_set`), off glibc, or where ``mallopt`` is missing. Called first in a worker, before
    anything large is allocated; it holds for the rest of the process.
    """
    environ = os.environ if environ is None else environ
    if heap_pad_set(environ):
        return 0
    mallopt = _mallopt(libc)
    if mallopt is None:
        return 0
    return HEAP_PAD if mallopt(M_TOP_PAD, HEAP_PAD) else 0


@dataclasses.dataclass
class _Kept:
    """What a serving worker (``--watch``) keeps between requests: per (backend, spec, target name), the
    fingerprint of the target as last checked (:func:`~fieldmem.worker.fingerprint.target_fingerprint`); and
    the jax settings of the process (:class:`~fieldmem.driver.settings.ImportSettings`: those of the first
    module it imported are in force)."""

    prints: dict[tuple[int, str, str], str] = dataclasses.field(default_factory=dict)
    settings: Any = None


class _Worker:
    """One worker's run over its request, answering on ``events``."""

    def __init__(
        self, request: dict[str, Any], events: IO[str], requests: queue.Queue[bytes], kept: _Kept | None = None
    ) -> None:
        # here, not at the top: see the figures above __all__
        from fieldmem.request.options import CheckOptions, early_stop_wanted

        self.request = request
        self.events = events
        self.requests = requests  # the parent's questions about the target being served, one line each
        self.serve = bool(request.get("serve"))
        self.kept = kept if kept is not None else _Kept()
        # what the checks leave to free (fieldmem.parent.checker.releases_held): freed before each next target
        # and after the last answer (a one-shot worker leaves by os._exit instead)
        self.held: list[Any] = []
        self.elsewhere = False  # a spec whose module sets jax otherwise than the one in force: a fresh worker's
        self.libraries_sent = False  # its first resolved event names its interpreter's installation folders
        with unbounded_integers():
            self.options = decode(CheckOptions, request["check_options"])
        fewer_malloc_arenas(at_once=self.options.jobs > 1)
        # here, not at the top: see the figures above __all__
        from fieldmem.driver.early import stop_early

        # unless FIELDMEM_EARLY_STOP=0, a static check's XLA:CPU compiles stop once what it reads is dumped (with
        # the persistent cache off): the code generation they leave ends with this process, which leaves by
        # os._exit (fieldmem.driver.early)
        stop_early(self.options.compile_fast and early_stop_wanted(os.environ))

    def event(self, what: str, **fields: Any) -> None:
        write_event(self.events, what, **fields)

    def resolve(self) -> dict[int, list[Any]]:
        """Every spec some backend still needs, loaded: its items (targets, or ``(spec, error)``)."""
        # here, not at the top: see the figures above __all__
        from fieldmem.request.target import TargetOptions
        from fieldmem.worker.local_readers import LocalHands

        def load(spec: dict[str, Any]) -> list[Any]:
            if spec.get("call") is not None:  # a function in hand (the pytest plugin), with its arguments
                return _in_hand(spec)
            with unbounded_integers():  # the options as the user gave them: the checker refuses what it must
                target_options = decode(TargetOptions, spec["options"] or {})
            return LocalHands(modules_first=True).load([spec["spec"]], target_options)

        loaded: dict[int, list[Any]] = {}
        for index, spec in enumerate(self.request["specs"]):
            if spec is None or all(todo[index] == [] for todo in self.request["todo"]):
                continue
            self.event("resolve", spec=index)
            # imported before jax starts (the first), what it sets for jax in force as under python
            items, found, here = self.kept.settings.load(lambda spec=spec: load(spec), _start_jax)
            if here:
                loaded[index] = items
            else:  # it sets jax otherwise than the module in force here: a fresh worker checks it, first
                self.elsewhere = True
            files: dict[str, Any] = {}
            if self.serve and spec.get("call") is None:  # what to watch: its module's file and the local modules
                # here, not at the top: see the figures above __all__
                from fieldmem.worker.user_modules import spec_files

                files["files"] = spec_files(spec["spec"], _modules(items))
            if found:
                files["settings"] = found.as_dict()
            if not here:
                files["elsewhere"] = True
            if not self.libraries_sent:  # whose files are library code, for the parent's source lines
                files["libraries"] = list(library_folders())
                self.libraries_sent = True
            self.event("resolved", spec=index, names=[_name(item) for item in items], **files)
        return loaded

    def unchanged(self, b: int, todo: list[Any]) -> tuple[list[Any], dict[int, str]]:
        """``todo`` less the targets whose fingerprint is the one they had when last checked (each
        answered ``same``); and the fingerprints of those left, by their place in what is returned."""
        # here, not at the top: see the figures above __all__
        from fieldmem.worker.fingerprint import target_fingerprint

        left, prints = [], {}
        for index, position, item in todo:
            if isinstance(item, tuple):  # a spec that failed to load: nothing to compare
                left.append((index, position, item))
                continue
            digest = target_fingerprint(item)
            key = (b, self.request["specs"][index]["spec"], _name(item))
            if digest is not None and self.request.get("skip_same") and self.kept.prints.get(key) == digest:
                self.event("same", b=b, spec=index, name=_name(item))
                continue
            self.kept.prints.pop(key, None)
            if digest is not None:
                prints[len(left)] = digest
            left.append((index, position, item))
        return left, prints

    def emit(self, what: str, key: Mapping[str, Any], encoded: Mapping[str, str] | None = None, **fields: Any) -> None:
        """An event about one target (or chain step) for the parent's brain (fieldmem.worker.serve.Channel)."""
        write_event(self.events, what, encoded, **key, **fields)

    def ask(self) -> dict[str, Any]:
        """The parent's next request about the target being served."""
        request = json.loads(self.requests.get())
        if not isinstance(request, dict):
            raise FieldmemError(f"fieldmem's worker was sent {request!r}, which is not a request")
        return request

    def run(self) -> str:
        """Serve what the request asks; the last event's name (``end`` or ``yield``)."""
        # here, not at the top: see the figures above __all__
        from fieldmem.driver import backend_devices
        from fieldmem.driver.placement import forget_stand_ins
        from fieldmem.driver.settings import ImportSettings
        from fieldmem.driver.traced import ArgumentsLeaked
        from fieldmem.worker.local_readers import LocalHands
        from fieldmem.worker.readers import releases_held
        from fieldmem.worker.serve import serve_items

        # the stand-ins of the requests before (the plugin's arrays of earlier calls, a serving worker's traced
        # arguments), held no longer: those of this request are made from here on
        forget_stand_ins()
        if self.request.get("reload"):  # edited files (--watch): their modules are executed again
            # here, not at the top: see the figures above __all__
            from fieldmem.worker.user_modules import forget

            forget(self.request["reload"])
        if self.kept.settings is None:
            self.kept.settings = ImportSettings()
        self.kept.settings.begin(self.request.get("environ", os.environ), self.request.get("devices"))
        with collector_resumed():  # the user's modules are imported; jax starts after the first
            loaded = self.resolve()
        _start_jax()  # where no module was imported: quiet about the plugins' start-up noise
        backends: list[str | None] = self.request["backends"]
        if self.request["check_backends"]:
            for backend in backends:
                if backend is not None:
                    backend_devices(backend)
        # factories traced, not run, unless an earlier worker of this check found one that keeps a tracer
        hands = LocalHands(trace_arguments=bool(self.request.get("trace_arguments")))
        for b, backend in enumerate(backends):
            options = dataclasses.replace(self.options, backend=backend, isolate=False)
            todo = [
                (index, position, item)
                for index, items in loaded.items()
                for position, item in enumerate(items)
                if self.request["todo"][b][index] is None or _name(item) in self.request["todo"][b][index]
            ]
            prints: dict[int, str] = {}
            if self.serve:
                with collector_resumed():  # a fingerprint makes the target's arguments
                    todo, prints = self.unchanged(b, todo)
            if not todo and b not in self.request.get("report_idle", range(len(backends))):
                continue  # another worker has this backend's targets, and reports its environment
            keys = [{"b": b, "spec": index, "name": _name(item)} for index, _, item in todo]

            def before(n: int) -> None:
                self.held.clear()  # the targets answered before this one: freed now, not while answering them

            def after(
                n: int, failed: bool, todo: list[Any] = todo, b: int = b, prints: dict[int, str] = prints
            ) -> None:
                index, _, item = todo[n]
                if n in prints and not failed:
                    # an error may have a cause outside the user's code (a data file): checked again
                    self.kept.prints[(b, self.request["specs"][index]["spec"], _name(item))] = prints[n]

            with hands.session(options):
                with releases_held(self.held):
                    try:
                        serve_items([item for _, _, item in todo], keys, options, hands, self, before, after)
                    except ArgumentsLeaked as exc:  # no more here: a fresh worker runs the factories
                        self.event("leaked", origin=exc.origin)
                        return "yield"
                # its libraries built on jax: those this worker imported for these targets (driver.environment)
                environment = hands.environment(backend)
                self.event("environment", b=b, environment=json.loads(dumps(environment)))
        return "yield" if self.elsewhere else "end"


def _start_jax() -> None:
    """Start jax's backends, quiet about the plugins' start-up noise (:func:`fieldmem.driver.start_jax`): after
    the first module is imported, with what it set for jax in force.

    Raises:
        EnvError: jax cannot be imported or started under this Python (none installed, a file of it gone):
            the whole run's error, in one line, never jax's traceback.
    """
    try:
        # here, not at the top: see the figures above __all__
        from fieldmem.driver import start_jax

        start_jax()
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}".strip()
        raise EnvError(one_line(f"jax cannot be imported under {sys.executable} ({text})")) from None
    _freeze_imports()


_frozen = False


def _freeze_imports() -> None:
    """Move what importing jax made (its modules, functions, tables: live as long as the process) out of
    the collector's sight, once: every full collection while the user's code is traced, and fieldmem's
    records are read, would walk them all again. ``gc.freeze`` leaves them to reference counting as
    before; only cycles among them would never be collected, and these live until the process ends.
    """
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True


# what the last check of a one-shot worker left to free (_Worker.held): the process ends by os._exit, which
# frees nothing, so nothing frees it on the way (time that grows with the leaves, after the parent has its answers)
_LEFT_TO_EXIT: list[Any] = []


def _modules(items: list[Any]) -> set[str]:
    """The modules the functions and factories of ``items`` come from (a factory of ``--args`` may live
    in a module of its own)."""
    names = set()
    for item in items:
        if isinstance(item, tuple):
            continue
        first = getattr(item, "first", item)
        steps = [step.function for step in getattr(item, "steps", ())]
        for obj in (first.function, first.args_factory, *steps):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                names.add(module)
    return names


def _in_hand(spec: Mapping[str, Any]) -> list[Any]:
    """The target of a function in hand that the pytest plugin sent (:mod:`fieldmem.driver.sendable`), or
    why it could not be made here."""
    # here, not at the top: see the figures above __all__
    from fieldmem.driver.sendable import apply_tracing_config, loads
    from fieldmem.request.in_hand import in_hand
    from fieldmem.worker.results import contained

    try:
        with collector_resumed():  # the test's module may be imported
            config, call = loads(base64.b64decode(spec["call"]))
            apply_tracing_config(config)  # jax_enable_x64 and the like, as the caller's jax has them, first
            kind, subject, args, kwargs, settings = loads(call)
            return [in_hand(kind, subject, args, kwargs, **settings)]
    except FieldmemError as exc:
        return [(spec["spec"], exc)]
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the test's code may call sys.exit: that target's error
        return [(spec["spec"], contained(exc, "loading what the test gave it"))]


def _name(item: Any) -> str:
    return item[0] if isinstance(item, tuple) else item.name


def main(argv: Sequence[str] | None = None) -> int:
    """Do the request read from stdin for parent ``argv[1]``, answering on the pipe ``argv[0]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not all(a.isdigit() for a in args):
        print("usage: python -m fieldmem.worker.main FD PARENT (started by fieldmem check)", file=sys.stderr)
        return 2
    _die_with_parent(int(args[1]))
    pad_malloc_heap()  # first: before importing jaxlib allocates
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends this process
    _warm_up()
    # buffered: the parent writes nothing more before this request is answered (a serving worker's next
    # requests come then, on the same pipe, and are read below it)
    line = sys.stdin.buffer.readline()
    if not line:  # the parent ended (or never needed this worker: it was started ahead of the request)
        return 0
    watched = os.dup(0)  # the rest of stdin ends when the parent does; a serving worker's next requests
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the user's code reads an empty stdin
    os.close(devnull)
    request = json.loads(line)
    # the parent's questions about a target being served, and (a serving worker, --watch) its next requests
    requests: queue.Queue[bytes] = queue.Queue()
    _watch_parent(watched, requests)
    serving = bool(request.get("serve"))
    os.set_inheritable(int(args[0]), False)  # a process the user's code starts does not hold it open
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:  # what the user's code prints reaches the parent's stderr as it is printed
        reconfigure(line_buffering=True)
    if "environ" in request:  # the parent's environment now, not when this process started
        os.environ.clear()
        os.environ.update(request["environ"])
    os.chdir(request["cwd"])
    # the parent's sys.path; under another interpreter (another jax), the user's folders the parent sent,
    # then this interpreter's own libraries
    sys.path[:] = request["sys_path"] + (
        [p for p in sys.path if p not in request["sys_path"]] if request.get("own_path") else []
    )
    # last: what this interpreter's installation lacks and the user's modules import (pytest, for the plugin)
    sys.path.extend(p for p in request.get("fallback_path", ()) if p not in sys.path)
    # here, not at the top: see the figures above __all__
    from fieldmem.driver.lowering import dump_under

    dump_under(request.get("scratch"))  # XLA's dumps where the parent removes them, also after a crash
    kept = _Kept()
    answers = int(args[0])
    try:
        return _answer(cast(IO[str], _Answers(answers)), request, requests, serving, kept)
    except _PipeLost:  # the user's code closed the pipe: nothing more can reach the parent; the status says why
        return PIPE_LOST
    finally:  # never by a with: closing a descriptor the user's code closed must not raise
        with contextlib.suppress(OSError):
            os.close(answers)


def _answer(events: IO[str], request: dict[str, Any], requests: queue.Queue[bytes], serving: bool, kept: _Kept) -> int:
    """Answer ``request`` on ``events`` (and, serving, each next request); the worker's exit status."""
    while True:
        worker = _Worker(request, events, requests, kept)
        try:
            # fieldmem's own work runs with the collector paused, to the last event: a pass after the
            # answer of the last target would walk every record it made, and hold up the end. The
            # user's code resumes it (loading modules here, making arguments and tracing in the checker)
            with collector_paused():
                last = worker.run()
                write_event(events, last)
                ending = not serving or last != "end"
                if ending:  # it ends by os._exit now: no pass of the collector on the way
                    collector_stays_paused()
        except FieldmemError as exc:  # the whole run's error (a backend not available): one line, exit 2
            write_event(events, "fatal", message=exc.message, kind=exc.kind)
            return 0
        if ending:
            _LEFT_TO_EXIT.append(worker.held)  # not freed on the way out: os._exit ends the process
            return 0
        worker.held.clear()  # answered: what the last target left is freed while the parent reads it
        request = json.loads(requests.get())  # serving (--watch): the next request, when the parent sends it


class _PipeLost(BaseException):
    """The pipe to the parent refused a write: the user's code closed its descriptor (``os.closerange``).
    A BaseException, so that no handler of a target's errors takes it for one: it ends the worker."""


class _Answers:
    """The pipe to the parent, as :func:`~fieldmem.worker.protocol.write_event` writes to it: each event whole, at
    once (:meth:`flush` has nothing left to write); a write it refuses (a closed descriptor, a parent gone)
    raises :class:`_PipeLost`, never a traceback of its own.

    An event is written holding the GIL (:func:`_write_holding_gil`): a write that lets go of it takes it back
    only when the thread that took it lets go in turn, up to the switch interval (5 ms) where that thread runs
    Python (an abandoned compile's end, the compile gate's sampler). An event's write took 1.4-1.7 ms on
    average over a 100-function check on 2 cores, 0.7-0.9 ms holding the GIL
    (``benchmarks/results/worker-syscalls.md``). A pipe the parent drains takes such a write at once; an
    answer larger than a pipe holds (:data:`_HOLD_LIMIT`: the reading of thousands of leaves) waits for the
    parent to read it, and is written letting go of the GIL, as before.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> int:
        try:
            _write_holding_gil(self.fd, text.encode("utf-8"))
        except OSError:
            raise _PipeLost() from None
        return len(text)

    def flush(self) -> None:
        """Nothing: :meth:`write` wrote it all."""


def _libc_write() -> Callable[[int, bytes, int], int] | None:
    """libc's ``write``, called without letting go of the GIL (``ctypes.PyDLL``); None where there is none."""
    try:
        write = ctypes.PyDLL(None, use_errno=True).write
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no C library to load (not POSIX)
        return None
    write.restype = ctypes.c_ssize_t
    write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    return cast(Callable[[int, bytes, int], int], write)


_WRITE = _libc_write()


#: the most an event written holding the GIL may take: a pipe's default capacity on Linux, so that a write waits
#: for the parent only where the pipe still holds earlier answers (a larger one, the reading of thousands of
#: leaves, lets go of the GIL as it waits for the parent to read it)
_HOLD_LIMIT = 1 << 16


def _write_holding_gil(fd: int, data: bytes, write: Callable[[int, bytes, int], int] | None = _WRITE) -> None:
    """Write all of ``data`` to ``fd``, holding the GIL where it is at most :data:`_HOLD_LIMIT` bytes
    (``write``: libc's, as :func:`_libc_write` gives it; None: by ``os.write``, which lets go of it). A write
    a signal interrupted, and the rest of one cut short, go by ``os.write``, which runs Python's signal
    handlers and tries again.

    Raises:
        OSError: the descriptor refused it.
    """
    if write is not None and 0 < len(data) <= _HOLD_LIMIT:
        written = write(fd, data, len(data))
        if written < 0:
            number = ctypes.get_errno()
            if number != errno.EINTR:
                raise OSError(number, os.strerror(number))
            written = 0
        data = data[written:]
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":  # pragma: no cover - run as a process
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # no atexit hook of the user's code or teardown of jax: the answers are in
