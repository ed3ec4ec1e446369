"""Running units over worker processes: what each worker is asked, following it to its end, charging a death.

:class:`Supervisor` plans what is left (per backend and spec, the targets not checked yet), shares it among
workers (:func:`most_workers`), has the brain (:mod:`fieldmem.parent.decide`) check each target a worker
starts from the readings it sends, and, after a worker died or was killed, charges the target it was on
and goes on with a fresh worker. The entry points (a check, ``--watch``'s session, the plugin's and fit's
workers kept warm) are in :mod:`fieldmem.parent.isolate`. Like the rest of the parent, this imports no jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from fieldmem.model.chain import Chain
from fieldmem.model.codec import encode
from fieldmem.model.collector import collector_paused
from fieldmem.model.environment import ModuleSettings
from fieldmem.model.errors import FieldmemError, OptionError, RunError, TargetError
from fieldmem.model.files import remove_stale_scratch, scratch_folder
from fieldmem.model.libraries import add_library_folders
from fieldmem.model.readings import Environment
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.remote_readers import RemoteHands, event_key
from fieldmem.parent.spawn import Interpreter, prestart
from fieldmem.parent.worker_process import (
    WorkerFailure,
    WorkerLink,
    WorkerProcess,
    WorkerSeen,
    death_cause,
    remedy_suffix,
    start_process,
)
from fieldmem.request.target import described_chain, described_target
from fieldmem.worker.protocol import PIPE_LOST, decode_value
from fieldmem.worker.readers import HandsLost
from fieldmem.worker.results import contained, error_result

__all__ = ["Checked", "Supervised", "Supervisor", "Unit", "most_workers"]


Checked = tuple[list[TargetResult], list[Chain]]
_GRACE = 10.0  # seconds a worker may take to exit once its answers ended
# seconds a worker under another interpreter (--python, --jax) may take to say a first word: one that never
# answers (a program that is no Python with fieldmem's worker, a hung one) ends the run in one line
STARTUP_LIMIT = 120.0


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
    outcomes: list[list[list[Checked]]]  # [backend][unit] -> one (results, chains) per target, in order
    settings: tuple[ModuleSettings, ...] = ()  # what the units' modules set for jax at import, in unit order


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

_SWEPT: list[list[str]] = []  # the stale scratch folders this process removed, once


class Supervisor:
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
        self.got: dict[tuple[int, int, str], Checked] = {}
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
        self.kept: WorkerProcess | None = None
        self.reload: list[str] = []
        self.skip_same = False
        self.previous: dict[tuple[int, int, str], Checked] = {}
        self.same: set[tuple[int, int, str]] = set()
        self.files: dict[int, set[str]] = {}
        self.started = 0  # workers started
        self.deaths = 0  # workers that died (or were killed) before answering
        self.lock = threading.Lock()  # what the threads of several workers share: progress, counts
        self.running: list[WorkerProcess] = []  # the workers now running
        self.check_timeout: float | None = None  # seconds a target may take, run or not (the pytest plugin)
        self.interpreter: Interpreter | None = None  # the workers' Python, where not this one (--jax, --python)
        # called with each result as it is made (the front end renders the table's details meanwhile)
        self.on_result: Callable[[TargetResult], None] | None = None
        # called once, right after the first request is sent: what the front end needs only later (its output's
        # modules), loaded while the worker loads jax (:meth:`while_worker_starts`)
        self.meanwhile: Callable[[], None] | None = None
        self._meanwhile_done = False
        self._meanwhile_lock = threading.Lock()
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

    def run_workers(self, plan: list[list[list[str] | None]]) -> list[tuple[WorkerSeen, list[list[list[str] | None]]]]:
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
    ) -> WorkerSeen:
        watch = WorkerSeen()
        live = self.kept if self.kept is not None and self.kept.alive() else None
        fresh = live is None
        if live is None:
            if self.kept is not None:
                self.kept.close()
            self.kept = None
            live = start_process(self.interpreter)
            with self.lock:
                self.started += 1
        with self.lock:
            self.running.append(live)
        keep = False
        try:
            live.send(self.request(plan, jobs, report_idle))
            self.while_worker_starts()
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

    def while_worker_starts(self) -> None:
        """Once a run, right after the first request is sent: load the brain's findings and what the front end
        needs later (:attr:`meanwhile`). A fresh worker says nothing before it has loaded jax and the user's
        module, which takes longer, so this costs the run nothing; before the request, the worker waited for it,
        and at the first target (or the last answer), the answer waited for it. The workers' other threads
        wait here until it is done (their first targets need the findings)."""
        with self._meanwhile_lock:
            if self._meanwhile_done:
                return
            self._meanwhile_done = True
            # here, not at the top: the findings cost +600 ms to ``import fieldmem.parent.supervisor`` (-X
            # importtime, median of 7, 2026-12-06), which a run that checks nothing (a usage error) never needs
            import fieldmem.parent.decide  # noqa: F401

            if self.meanwhile is not None:
                self.meanwhile()

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

    def follow(self, live: WorkerProcess, watch: WorkerSeen, fresh: bool = False) -> None:
        """Take the worker's events until it ends, the brain answering each target it serves (the worker
        dying, or killed past ``--timeout``, ends it too: :meth:`run` charges what it was on). ``fresh``: it
        was started for this request (under another interpreter, its first word has a limit).

        Raises:
            WorkerFailure: a fresh worker under another interpreter said nothing within the start-up limit.
        """
        link = WorkerLink(self, live, watch, fresh)
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

    def on_start(self, event: dict[str, Any], watch: WorkerSeen) -> None:
        """The worker started a target: it is on it until the brain has its result."""
        key = (int(event["b"]), int(event["spec"]), str(event["name"]))
        if key not in watch.in_flight:
            watch.in_flight.append(key)
            self.report_progress(key)

    def serve_target(self, event: dict[str, Any], link: WorkerLink, watch: WorkerSeen) -> None:
        """The brain's check of the target the worker started (``event``), from the readings it sends."""
        # here, not at the top: loaded while the first worker starts (:meth:`while_worker_starts`)
        from fieldmem.parent.decide import check_chain, finish_job

        self.on_start(event, watch)
        key = event_key(event)
        b = key[0]
        options = dataclasses.replace(self.options, backend=self.backends[b], isolate=False)
        if self.one_at_a_time:
            options = dataclasses.replace(options, jobs=1)
        checked: Checked
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
        if self.on_result is not None:
            with collector_paused():
                for result in checked[0]:
                    try:
                        self.on_result(result)
                    except Exception:  # the front end's own work ahead: never the check's error
                        pass

    def on_event(self, event: dict[str, Any], watch: WorkerSeen) -> None:
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
                add_library_folders(event["libraries"])
        elif what == "same":
            key = (int(event["b"]), int(event["spec"]), str(event["name"]))
            if key in self.previous:
                self.got[key] = self.previous[key]
                self.same.add(key)
        elif what == "environment":
            # here, not at the top: the brain loads the findings (+600 ms to ``import fieldmem.parent.supervisor``,
            # -X importtime, median of 7, 2026-12-06), at the first target a worker starts, not before
            from fieldmem.parent.decide import report_header

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

    def failure(self, watch: WorkerSeen, stage: str) -> RunError:
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
        message = f"its worker process {death_cause(watch.returncode)} while {stage}" + (
            f": {watch.why}" if watch.why else ""
        )
        return RunError(message, kind="out-of-memory" if watch.out_of_memory else "crash")

    def charge(self, watch: WorkerSeen, plan: list[list[list[str] | None]]) -> None:
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
                f"fieldmem's worker process {death_cause(watch.returncode)} before checking anything{why}"
                f"{remedy_suffix(self.interpreter)}"
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
                remedy = remedy_suffix(self.interpreter) if fatal.fatal_kind == "environment" else ""
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
        outcomes: list[list[list[Checked]]] = []
        for b in range(len(self.backends)):
            row: list[list[Checked]] = []
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
