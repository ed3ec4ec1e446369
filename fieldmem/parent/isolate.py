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

This module holds the entry points (a check, ``--watch``'s session, the
plugin's and fit's workers kept warm); :mod:`fieldmem.parent.supervisor` runs
the units over the workers and charges their deaths, and
:mod:`fieldmem.parent.worker_process` starts one worker and reads what it says.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.spawn import Interpreter
from fieldmem.parent.supervisor import Checked, Supervised, Supervisor, Unit
from fieldmem.parent.worker_process import WorkerFailure, WorkerProcess

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
    on_result: Callable[[TargetResult], None] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Supervised:
    """Load, check (and run, as ``options`` say) every unit on every backend in worker processes.

    ``check_backends``: the first worker checks every named backend is
    available before it checks anything (as :func:`~fieldmem.parent.checker.check_backends`;
    after it imported the first module, whose settings for jax must come before jax starts).
    ``headers``: each backend's report without results is wanted (False: only the results).
    ``devices``: ``--devices``, which wins over a module's own count of CPU devices. ``interpreter``: the
    Python the workers run under (another venv, with another jax); None: this one. ``on_result``: called with
    each target's result as it is made (from the thread that made it; what it raises is not the check's).
    ``meanwhile``: called once, right after the first request is sent, while the worker loads jax (what the
    caller needs only once the results are in: its output's modules).

    Raises:
        WorkerFailure: an error of the whole run (a backend that is not available),
            or a worker that cannot start at all.
    """
    supervisor = Supervisor(units, backends, options, check_backends, progress)
    supervisor.need_headers = headers
    supervisor.devices = devices
    supervisor.interpreter = interpreter
    supervisor.on_result = on_result
    supervisor.meanwhile = meanwhile
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
    on_result: Callable[[TargetResult], None] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[Report, ...]:
    """One report per backend, every target checked in worker processes (``fieldmem check``); ``devices``:
    ``--devices``, which wins over a module's own count of CPU devices; ``interpreter``: the workers'
    Python, where not this one (``--jax``, ``--python``); ``on_result``, ``meanwhile``: as :func:`supervise`
    takes them."""
    supervised = supervise(
        units,
        backends,
        options,
        check_backends=check_backends,
        progress=progress,
        devices=devices,
        interpreter=interpreter,
        on_result=on_result,
        meanwhile=meanwhile,
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
    now: Checked
    before: Checked | None


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


def _unloaded(checked: Checked) -> bool:
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
        self._supervisor = Supervisor(units, backends, options, check_backends, progress)
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
        self._kept: WorkerProcess | None = None

    def check(self, call: bytes, label: str, options: Any) -> Report:
        """The report (one backend: ``options.backend``) of the function in hand ``call`` names; ``label``:
        its result's name, should the worker die before it loaded it."""
        import base64

        unit = Unit(label, None, None, None, base64.b64encode(call).decode("ascii"))
        supervisor = Supervisor([unit], [options.backend], dataclasses.replace(options, isolate=True), False, None)
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


def check_isolated(targets: Sequence[Any], options: Any) -> list[Checked]:
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
        self._kept: WorkerProcess | None = None
        self._checked: set[str | None] = set()  # the backends a worker said are available

    def check(self, unit: Unit, backend: str | None, options: Any) -> Report:
        """The report (one backend) of ``unit``'s targets checked on ``backend`` with ``options``.

        Raises:
            WorkerFailure: the backend is not available, or the worker cannot start at all.
        """
        # a worker about to start (the first, or one after a death) checks the backend first, as the first did
        fresh = backend not in self._checked or self._kept is None or not self._kept.alive()
        supervisor = Supervisor([unit], [backend], dataclasses.replace(options, isolate=True), fresh, None)
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
