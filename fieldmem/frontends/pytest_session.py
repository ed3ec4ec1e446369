"""The pytest plugin's session: the limits a ``fieldmem_check`` asserts, the checks of the session (in
fieldmem's supervised worker or in pytest's process), and what is done with them at the end: the report
written, the checks gated against the baseline and saved.

Nothing here registers a hook or reads an option (:mod:`fieldmem.frontends.pytest_plugin`,
:mod:`fieldmem.frontends.pytest_options`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldmem.model.errors import OptionError
from fieldmem.request.option_table import option
from fieldmem.request.options import MIN_BYTES
from fieldmem.request.tolerance import Tolerances

if TYPE_CHECKING:
    from fieldmem.model.report import Report
    from fieldmem.request.options import CheckOptions

__all__ = [
    "DEFAULT_TIMEOUT",
    "FieldmemWarning",
    "Limits",
    "PluginSession",
    "check_options",
    "gate_session",
    "write_session_report",
]

DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class Limits:
    """What a fieldmem_check asserts: in place or not, the budgets, the size threshold.

    A field per keyword of the plugin's marker and fixture (the option table's ``marker`` column,
    :func:`~fieldmem.request.option_table.marker_options`, in its order and with its defaults:
    tests/request/test_option_table.py holds them equal); the table's other limits, an option added to the
    table, are in ``table_options``.
    """

    in_place: bool = True
    max_peak: int | None = None
    max_live_peak: int | None = None
    min_bytes: int = MIN_BYTES
    donate: Any = None
    static: Any = None
    new: tuple[str, ...] | None = None  # output paths declared new (single functions; not chains)
    backend: tuple[str, ...] | None = None  # check on each of these backends (None: jax's default)
    # the option table's limits not named above, by option name (those set): each sets the CheckOptions
    # field of its name (check_options)
    table_options: tuple[tuple[str, Any], ...] = ()


def check_options(min_bytes: int, backend: str | None, table_options: Iterable[tuple[str, Any]] = ()) -> CheckOptions:
    """How a fieldmem_check is checked on ``backend`` (None: jax's default) in the supervised worker: as the
    API checks a function in hand, with fast compiles, and the option table's limits that ``Limits`` does not
    name (``Limits.table_options``) set in the :class:`~fieldmem.request.options.CheckOptions` field of their
    name (the plugin's parsing refuses one with no such field)."""
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.frontends.api import worker_options

    options = worker_options(min_bytes, backend)
    table = dict(table_options)
    return dataclasses.replace(options, **table) if table else options


def _api_keywords(limits: Limits) -> dict[str, Any]:
    """The option table's limits that ``Limits`` does not name, as the keywords of the API's checks (in
    pytest's own process the API builds the check's options from them, as :func:`check_options` does).

    Raises:
        OptionError: one the API does not take.
    """
    keywords: dict[str, Any] = {}
    for name, value in limits.table_options:
        row = option(name)
        if row.api is None:
            raise OptionError(
                f"{row.pytest or row.marker} is not taken by a check in pytest's own process (the API has no "
                "keyword for it): check in the supervised worker (--fieldmem-isolate yes)"
            )
        keywords[row.api] = value
    return keywords


@dataclass
class PluginSession:
    """The parsed options and every report checked in this session."""

    defaults: Limits
    report_path: Path | None
    reports: list[Report] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)
    written: str | None = None
    write_error: str | None = None
    isolate: bool = True
    timeout: float | None = DEFAULT_TIMEOUT
    # fieldmem.parent.isolate.CallSession by (interpreter, environment), each started by its first check
    workers: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = field(default_factory=dict)
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # the environments in use
    jax: str | None = None  # --fieldmem-jax: the workers run under a cached environment of this release
    # (test node id, the check's report with every result named by its baseline key)
    keyed: list[tuple[str, Report]] = field(default_factory=list)
    baseline: Path | None = None  # compared with at the end
    compare_fail: bool = False  # a regression fails the session
    save_to: Path | None = None  # --fieldmem-save-baseline
    tolerances: Tolerances = Tolerances()
    root: Path | None = None  # baseline names are relative to it: the [tool.fieldmem] folder; None: the baseline's
    from_workers: bool = False  # pytest-xdist: the checks came from the workers, in the order they ended
    summary: list[str] = field(default_factory=list)  # what the baseline gate and save say, for the summary
    gate_failed: bool = False

    def check(
        self,
        kind: str,
        subject: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        settings: dict[str, Any],
        limits: Limits,
        backend: str | None,
    ) -> Report:
        """One check of a function (``kind`` ``"function"``) or chain in hand: in the supervised worker when
        it can be sent there (a function that could not be checked, a worker that died or hung, is an error
        result of the report), else (and with ``--fieldmem-isolate no``) in this process. ``settings``: the
        target's (donation, budgets, ...), ``limits``: the check's options besides (:func:`check_options`).

        Raises:
            FieldmemError: in this process, the function could not be checked (as check_function).
        """
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.frontends.api import check_chain, check_function

        if self.isolate:
            # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
            from fieldmem.driver.sendable import NotSendable, dumps, tracing_config

            try:  # with jax's settings as the test has them (jax_enable_x64...): the program the test builds
                call = dumps((tracing_config(), dumps((kind, subject, args, kwargs, settings))))
            except NotSendable as exc:
                _warn_in_process(kind, subject, settings, str(exc))
            else:
                return self._check_in_worker(
                    kind, subject, call, settings, limits.min_bytes, backend, limits.table_options
                )
        options = dict(settings, min_bytes=limits.min_bytes, backend=backend, **_api_keywords(limits))
        with _forks_end_in_the_child():
            if kind == "function":
                return check_function(subject, *args, **options, **kwargs)
            return check_chain(subject, *args, **options, **kwargs)

    def _check_in_worker(
        self,
        kind: str,
        subject: Any,
        call: bytes,
        settings: dict[str, Any],
        min_bytes: int,
        backend: str | None,
        table_options: tuple[tuple[str, Any], ...] = (),
    ) -> Report:
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.parent.isolate import CallSession
        from fieldmem.request.in_hand import in_hand_name

        interpreter, environ = _worker_for(backend, self.jax)
        key = (interpreter.label if interpreter is not None else "", tuple(sorted(environ.items())))
        worker = self.workers.get(key)
        if worker is None:
            # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
            from fieldmem.parent.interpreters import in_use

            self.held.enter_context(in_use(interpreter))  # not removed while the session's checks run
            worker = self.workers[key] = CallSession(self.timeout, interpreter, environ)
        label = in_hand_name(kind, subject, settings.get("name"))
        report: Report = worker.check(call, label, check_options(min_bytes, backend, table_options))
        return report

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
        self.held.close()

    def record(self, report: Report, nodeid: str, backend: str | None = None, display: str = "", key: str = "") -> None:
        """Keep ``report`` for --fieldmem-report, its result keyed by the test's node id (and the backend,
        when the test checks on several); and for the baseline, its results named by ``key`` (what
        ``fieldmem check`` names the function checked as ``display``) instead."""
        result = report.results[0]
        base = f"{nodeid}::{result.name}" + (f"[{backend}]" if backend is not None else "")
        target = base
        n = 2
        while target in self.targets:  # one test may check the same function twice
            target = f"{base}#{n}"
            n += 1
        self.targets.add(target)
        self.reports.append(dataclasses.replace(report, results=(dataclasses.replace(result, target=target),)))
        if display and key:
            renamed = tuple(
                dataclasses.replace(
                    r, name=key + r.name[len(display) :] if r.name.startswith(display) else r.name, target=key
                )
                for r in report.results
            )
            self.keyed.append((nodeid, dataclasses.replace(report, results=renamed)))

    def handed_over(self) -> str:
        """This worker's checks as the controller reads them back (:meth:`take_over`)."""
        return json.dumps(
            {
                "reports": [r.to_dict() for r in self.reports],
                "keyed": [[nodeid, r.to_dict()] for nodeid, r in self.keyed],
            }
        )

    def take_over(self, text: str) -> None:
        """The checks a pytest-xdist worker handed over (:meth:`handed_over`)."""
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.model.report import Report

        data = json.loads(text)
        self.reports.extend(Report.from_dict(r) for r in data["reports"])
        self.keyed.extend((str(nodeid), Report.from_dict(r)) for nodeid, r in data["keyed"])
        self.from_workers = True


# the process that checks in pytest's own process now (--fieldmem-isolate no), while it traces and compiles
_CHECKING: list[int] = []
_FORK_HOOKED: list[bool] = []


def _after_fork_in_child() -> None:
    """A process forked while pytest's own process traced or compiled a check (the traced function called
    os.fork): jax does not run in a forked copy (its threads stay behind), so the copy would hang for ever
    holding pytest's output, or return into pytest and run the session a second time. It ends now."""
    if _CHECKING and _CHECKING[-1] != os.getpid():
        message = b"fieldmem: a process forked while fieldmem checked a function in pytest's process has ended\n"
        try:
            os.write(2, message)
        finally:
            os._exit(1)


@contextlib.contextmanager
def _forks_end_in_the_child() -> Iterator[None]:
    """For the block (a check in pytest's own process): a process forked from it ends at once."""
    if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _FORK_HOOKED.append(True)
    _CHECKING.append(os.getpid())
    try:
        yield
    finally:
        _CHECKING.pop()


class FieldmemWarning(UserWarning):
    """A fieldmem_check that could not be checked the way the session asked (in the supervised worker)."""


def _worker_for(backend: str | None, jax: str | None) -> tuple[Any, dict[str, str]]:
    """The interpreter (None: this Python) and the environment a worker checking on ``backend`` needs, as
    ``fieldmem check`` gives its own: a deviceless backend's variables (``JAX_PLATFORMS=cpu``...), and where
    its compiler is not installed here, a cached environment of this jax that has it, made on first use
    (saying so on stderr, before anything a library prints); ``jax``: ``--fieldmem-jax``'s release."""
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.request.backends import deviceless_environment, extra_installed, parse_backend

    named = parse_backend(backend) if backend is not None else None
    environ = deviceless_environment([named] if named is not None else None)
    if jax is not None:
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.parent.envs import borrowed_folder
        from fieldmem.parent.interpreters import worker_interpreters

        (interpreter,) = worker_interpreters([jax], None, [backend] if backend else None, _say)
        assert interpreter is not None
        # the test modules the worker imports import pytest: its own, where that environment lacks one
        borrowed = borrowed_folder(("pytest",))
        if borrowed is not None:
            interpreter = dataclasses.replace(interpreter, fallback_path=(borrowed,))
        return interpreter, environ
    if named is not None and not extra_installed(named):
        from importlib import metadata

        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.parent.interpreters import compilers_interpreter

        _say(f"{named.name}: its compiler is not installed here; checking in a cached environment that has it")
        return compilers_interpreter([named.platform], metadata.version("jax"), _say), environ
    return None, environ


def _say(line: str) -> None:
    """What fieldmem is doing before a check (making an environment), on the terminal, past pytest's capture."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"fieldmem: {line}\n")
    stream.flush()


def _warn_in_process(kind: str, subject: Any, settings: dict[str, Any], why: str) -> None:
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.request.in_hand import in_hand_name

    name = in_hand_name(kind, subject, settings.get("name"))
    warnings.warn(
        FieldmemWarning(
            f"fieldmem: {name} was checked in pytest's own process, not the supervised worker: {why} "
            "(define it at module level to have it supervised)"
        ),
        stacklevel=4,
    )


def write_session_report(session: pytest.Session, state: PluginSession) -> None:
    if state.report_path is None:
        return
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.frontends.api import combine_reports
    from fieldmem.model.files import write_atomic
    from fieldmem.render import RenderOptions, get_renderer

    report = combine_reports(state.reports, state.defaults.min_bytes)
    text = get_renderer("json").render(report, RenderOptions(min_bytes=report.min_bytes))
    try:
        write_atomic(state.report_path, text)
    except OSError as exc:
        state.write_error = f"cannot write {str(state.report_path)!r}: {exc.strerror or exc}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    state.written = f"{len(report.results)} fieldmem check(s) written to {state.report_path}"


def _by_backend(state: PluginSession) -> list[Report]:
    """The session's checks as one report per backend and device kind (a baseline entry's key), their results
    named by their baseline keys.

    Raises:
        BaselineError: two checks have one key on one backend (a baseline holds one entry per key).
    """
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.frontends.api import combine_reports
    from fieldmem.gate.baseline import BaselineError, project_name

    groups: dict[tuple[str, str], list[Report]] = {}
    checked_by: dict[tuple[str, str, str], list[str]] = {}
    for nodeid, report in state.keyed:
        kind = (report.devices[0].kind or report.devices[0].platform) if report.devices else ""
        groups.setdefault((report.backend, kind), []).append(report)
        root = state.root or (state.baseline or state.save_to or Path()).absolute().parent
        for result in report.results:
            checked_by.setdefault((report.backend, kind, project_name(result.name, result.target, root)), []).append(
                nodeid
            )
    clashes = [(key, nodeids) for key, nodeids in checked_by.items() if len(nodeids) > 1]
    if clashes:
        (backend, _, name), nodeids = clashes[0]
        more = f" ({len(clashes) - 1} more name(s) likewise)" if len(clashes) > 1 else ""
        raise BaselineError(
            f"{name} is checked {len(nodeids)} times on {backend} ({', '.join(dict.fromkeys(nodeids))}){more}: "
            "a baseline holds one entry per name, so give each check its own, "
            "e.g. fieldmem_check(update, *args, name='update-64x64')"
        )
    return [combine_reports(reports, state.defaults.min_bytes) for reports in groups.values()]


def gate_session(state: PluginSession, failed: int | bool = 0) -> None:
    """Compare the session's checks with the baseline (every regression collected, said once) and save them,
    with :mod:`fieldmem.gate.baseline` as ``fieldmem check`` does; what it says goes to the terminal summary.
    ``failed``: the tests that failed (True: the session failed otherwise: an error, an interruption), where
    nothing is saved: the baseline records a session where every test passed."""
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.frontends.saving import gate_reports
    from fieldmem.gate.baseline import BaselineError, load_baseline
    from fieldmem.render.baseline import render_comparison, render_saved

    if not state.keyed:
        state.summary.append("fieldmem: no fieldmem_check ran: nothing compared with or saved in the baseline")
        return
    try:
        reports = _by_backend(state)
        baseline = load_baseline(state.baseline) if state.baseline is not None else None
        reports = list(gate_reports(reports, baseline, state.tolerances, root=state.root))
    except BaselineError as exc:
        state.summary.append(f"fieldmem: error: {exc.message}")
        state.gate_failed = True
        return
    regressions = 0
    unmatched: list[str] = []
    for report in reports:
        if report.baseline is not None:
            state.summary.extend(render_comparison(report.baseline).rstrip("\n").splitlines())
            regressions += len(report.baseline.regressions)
            unmatched += [
                c.message for c in report.baseline.regressions if c.kind == "status" and c.subject == "missing"
            ]
    if unmatched:
        # a baseline that matches none of the session's checks gates nothing: that fails, asked or not
        state.summary.append(f"fieldmem: error: {unmatched[0]}")
        state.gate_failed = True
    elif regressions and state.compare_fail:
        state.summary.append(
            f"fieldmem: error: {regressions} regression(s) against the baseline {str(state.baseline)!r}: "
            "the session fails (--fieldmem-compare-fail)"
        )
        state.gate_failed = True
    elif regressions:
        state.summary.append(
            f"fieldmem: {regressions} regression(s) against the baseline {str(state.baseline)!r} "
            "(add --fieldmem-compare-fail to fail the session on them)"
        )
    if state.save_to is None:
        return
    if failed:
        tests = "the session did not pass" if failed is True else f"{failed} test(s) failed"
        state.summary.append(
            f"fieldmem: not saving the baseline {str(state.save_to)!r}: {tests}, and a baseline records a "
            "session where every test passed"
        )
        return
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.frontends.saving import save_reports

    saved, refused = save_reports(reports, state.save_to, root=state.root)
    for done in saved:
        state.summary.extend(render_saved(done).rstrip("\n").splitlines())
    if refused is not None:
        state.summary.append(f"fieldmem: error: {refused[1].message}")
        state.gate_failed = True
