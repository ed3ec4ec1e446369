"""The pytest plugin: assert in tests that an update is in place and within budget.

Registered through the ``pytest11`` entry point, so it loads in every pytest
session of every project that has fieldmem installed, fieldmem's own suite
included. At load it imports nothing heavy (no jax) and does nothing but
register its options and its ``fieldmem`` marker; the work happens only when
a test calls the ``fieldmem_check`` fixture, through
:func:`fieldmem.frontends.api.check_function` (the same checker as ``fieldmem check``).

Where a limit comes from, first match wins: the fixture call's keyword, the
closest ``@pytest.mark.fieldmem(...)``, the command-line option, its ini twin,
``[tool.fieldmem]`` (the keys that make sense for a check in hand: budgets,
``min-bytes``, ``backends``, ``tolerance``, ``baseline``), the default. Every
value is parsed once (options at configure time, a marker when its test is set
up) and a bad one is a usage error naming it.

Each check is also recorded under the name ``fieldmem check`` gives the same
function in a baseline (:func:`fieldmem.request.in_hand.in_hand_key`), so the
two share one baseline file. When the session ends the checks are gated
against ``--fieldmem-baseline`` (every regression collected, listed once in
the terminal summary, and with ``--fieldmem-compare-fail`` failing the run)
and saved with ``--fieldmem-save-baseline``, by :mod:`fieldmem.gate.baseline`.
Under pytest-xdist each worker hands its checks to the controller
(``workeroutput``, read in ``pytest_testnodedown``), which alone writes the
report and the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from fieldmem.frontends.pytest_options import parse_limit, parse_session, pytest_addoption, with_limits
from fieldmem.frontends.pytest_session import (
    Limits,
    PluginSession,
    gate_session,
    write_session_report,
)
from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.request.option_table import Option, marker_options
from fieldmem.request.options import footprint_budget

if TYPE_CHECKING:
    from fieldmem.model.report import Report

__all__ = [
    "FieldmemCheck",
    "Limits",
    "fieldmem_check",
    "fieldmem_fit",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_setup",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_testnodedown",
    "pytest_unconfigure",
]

MARKER = "fieldmem"
FIXTURE = "fieldmem_check"

#: The marker's and the fixture's keywords: the option table's (its ``marker`` column), each with its row
_KEYWORDS: dict[str, Option] = {
    keyword: row for row in marker_options() for keyword in (row.marker, row.marker_older) if keyword is not None
}
_MARKER_KEYS = tuple(row.marker for row in marker_options() if row.marker is not None)
_MARKER_TAKES = tuple(_KEYWORDS)  # the older keywords too (max_peak, the footprint budget's): taken, not listed
# the marker's help: a flag with its default; a value with None (not set: the session's, else the default)
_MARKER_SHOWN = ", ".join(
    f"{row.marker}={row.marker_default if isinstance(row.marker_default, bool) else None}" for row in marker_options()
)
_MARKER_HELP = f"fieldmem({_MARKER_SHOWN}): limits for the fieldmem_check fixture in this test (sizes like '64MiB')"


_SESSION = pytest.StashKey[PluginSession]()
_UNSET: Any = object()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    try:
        config.stash[_SESSION] = parse_session(config)
    except FieldmemError as exc:
        raise pytest.UsageError(f"fieldmem: error: {exc.message}") from None


def _marker_limits(node: pytest.Item, defaults: Limits) -> Limits:
    """``defaults`` overridden by every fieldmem marker on ``node``, the closest last."""
    limits = defaults
    for marker in reversed(list(node.iter_markers(MARKER))):
        if marker.args:
            raise OptionError(
                f"@pytest.mark.fieldmem takes keywords only ({', '.join(_MARKER_KEYS)}), got {marker.args!r}"
            )
        unknown = sorted(set(marker.kwargs) - set(_MARKER_TAKES))
        if unknown:
            raise OptionError(f"@pytest.mark.fieldmem has no {unknown[0]!r}: use {', '.join(_MARKER_KEYS)}")
        limits = _override(limits, marker.kwargs, "@pytest.mark.fieldmem {}=")
    return limits


def _override(limits: Limits, values: Mapping[str, Any], label: str) -> Limits:
    """``limits`` with ``values`` (by marker or fixture keyword) parsed in (a size may be None: no budget);
    ``max_footprint`` is the budget ``Limits`` keeps as ``max_peak`` (its older name: one of the two)."""
    for row in marker_options():
        new, old = row.marker or "", row.marker_older or ""
        if new in values and old in values:  # the footprint budget's two names
            footprint_budget(values[new], values[old], label)  # both set
            raise OptionError(f"{label.format(new)} and {label.format(old)} are one budget: give one")  # one None
    return with_limits(
        limits,
        {_KEYWORDS[key].name: parse_limit(_KEYWORDS[key], value, label.format(key)) for key, value in values.items()},
    )


def _given(scope: Mapping[str, Any], chain: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The marker keywords a call of the fixture gave (``scope``: the call's ``locals()``: its parameters, and
    in ``kwargs`` a keyword of the table that the signature does not name), and ``kwargs`` without them."""
    kwargs = dict(scope["kwargs"])
    given: dict[str, Any] = {}
    for keyword, row in _KEYWORDS.items():
        if chain and not row.marker_chain:
            continue
        if keyword in scope:
            if scope[keyword] is not _UNSET:
                given[keyword] = scope[keyword]
        elif keyword in kwargs:
            given[keyword] = kwargs.pop(keyword)
    return given, kwargs


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``fieldmem`` itself must use the fixture the marker configures."""
    if any(m.name == MARKER for m in getattr(item, "own_markers", ())) and FIXTURE not in getattr(
        item, "fixturenames", ()
    ):
        pytest.fail(
            f"fieldmem: error: {item.name} is marked @pytest.mark.fieldmem but does not use the {FIXTURE} "
            f"fixture, so nothing is checked: add {FIXTURE} to its arguments and call {FIXTURE}(update, *args)",
            pytrace=False,
        )


class FieldmemCheck:
    """The ``fieldmem_check`` fixture: call it with an update function and its arguments."""

    def __init__(self, limits: Limits, session: PluginSession, nodeid: str) -> None:
        self.limits = limits
        self._session = session
        self._nodeid = nodeid

    def __call__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        in_place: bool = _UNSET,
        max_footprint: int | str | None = _UNSET,
        max_peak: int | str | None = _UNSET,
        max_live_peak: int | str | None = _UNSET,
        min_bytes: int | str = _UNSET,
        donate: Any = _UNSET,
        static: Any = _UNSET,
        name: str | None = None,
        new: Any = _UNSET,
        backend: str | list[str] | tuple[str, ...] | None = _UNSET,
        **kwargs: Any,
    ) -> Report:
        """Check ``fn(*args, **kwargs)``; fail the test when it is not in place or over budget.

        Keywords left out take the marker's, the command line's, the ini's or
        the default value; ``max_footprint=None`` drops a budget set elsewhere
        (``max_peak`` is its older name).
        ``in_place=False`` checks the budgets only. ``new`` names outputs
        meant to be new buffers (``"out[1]"``, ``"out.logits"``, as ``--new``):
        never a break of in place. ``backend`` checks on a backend as
        ``--backend`` names it (``"tpu:v5e"``), or on each of several
        (``["cpu", "tpu:v5e", "gpu:h100"]`` or ``"cpu,tpu:v5e"``): the test fails
        when the check fails on any of them. A keyword of the option table's marker column that the
        signature does not name (an option added to the table) is a limit too; the remaining keyword
        arguments go to ``fn``.

        Returns:
            The Report (one result), for further assertions; with several
            backends, the Report of the last one (each is recorded for
            ``--fieldmem-report``).

        Raises:
            NotInPlaceError: a check failed; the message is the CLI's verdict.
        """
        __tracebackhide__ = True
        given, kwargs = _given(locals(), chain=False)
        return self._check("function", fn, args, kwargs, given, name)

    def chain(
        self,
        steps: list[Callable[..., Any]] | tuple[Callable[..., Any], ...],
        *args: Any,
        in_place: bool = _UNSET,
        max_footprint: int | str | None = _UNSET,
        max_peak: int | str | None = _UNSET,
        max_live_peak: int | str | None = _UNSET,
        min_bytes: int | str = _UNSET,
        donate: Any = _UNSET,
        static: Any = _UNSET,
        name: str | None = None,
        step_args: Any = None,
        backend: str | list[str] | tuple[str, ...] | None = _UNSET,
        **kwargs: Any,
    ) -> Report:
        """Check the update chain ``steps`` started on ``steps[0](*args, **kwargs)`` (see docs/chains.md);
        fail the test when a step breaks in place (``in_place``) or a step or the fused chain is over budget.

        The limits are taken as for a single function. ``step_args`` gives steps
        extras besides the state, as :func:`fieldmem.check_chain` takes them.

        Returns:
            The Report (``report.chains[0]``, and a result per step and for the fused chain).

        Raises:
            NotInPlaceError: a check failed; the message names the step, the leaf and the line.
        """
        __tracebackhide__ = True
        given, kwargs = _given(locals(), chain=True)
        if step_args is not None:
            kwargs = {**kwargs, "step_args": step_args}
        return self._check("chain", steps, args, kwargs, given, name)

    def _check(
        self,
        kind: str,
        subject: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        given: dict[str, Any],
        name: str | None,
    ) -> Report:
        """Check ``subject`` (a function, or a chain's steps: ``kind``) on ``args`` under the limits in force
        (``given`` overriding them), record the report for --fieldmem-report, and fail the test when a check
        failed."""
        __tracebackhide__ = True
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.frontends.api import NotInPlaceError
        from fieldmem.request.in_hand import in_hand_key, in_hand_name

        limits = _override(self.limits, given, "{}=")
        settings: dict[str, Any] = dict(
            donate=limits.donate,
            static=limits.static,
            name=name,
            expect="in-place" if limits.in_place else "any",
            max_peak=limits.max_peak,
            max_live_peak=limits.max_live_peak,
        )
        if kind == "function":  # a chain's outputs are its steps'
            settings["new"] = limits.new
        elif "step_args" in kwargs:
            kwargs = dict(kwargs)
            settings["step_args"] = kwargs.pop("step_args")
        report: Report | None = None
        failed: NotInPlaceError | None = None
        display, key = in_hand_name(kind, subject, name), in_hand_key(kind, subject, name)
        for backend in limits.backend or (None,):
            report = self._session.check(kind, subject, args, kwargs, settings, limits, backend)
            several = limits.backend is not None and len(limits.backend) > 1
            self._session.record(report, self._nodeid, backend if several else None, display, key)
            broken = next((r for r in report.results if r.status == "error" and r.error is not None), None)
            if broken is not None and broken.error is not None:  # recorded, then the test's failure
                on = f" on {backend}" if several else ""
                problem = f"fieldmem: error: {broken.name}{on}: {broken.error.message}"
                pytest.fail(problem, pytrace=False)
            if report.exit_code != 0 and failed is None:
                failed = NotInPlaceError(report)
                if several:  # say which backend failed, and keep checking the others
                    failed.args = (f"on {backend}: {failed.args[0]}",)
        if failed is not None:
            raise failed
        assert report is not None
        return report


@pytest.fixture
def fieldmem_check(request: pytest.FixtureRequest) -> FieldmemCheck:
    """Assert that an update is in place with donation and within its memory budgets::

    @pytest.mark.fieldmem(max_live_peak="64MiB")
    def test_step(fieldmem_check):
        fieldmem_check(step, params, opt_state, grads, donate="params,opt_state")
    """
    session = request.config.stash[_SESSION]
    try:
        limits = _marker_limits(request.node, session.defaults)
    except FieldmemError as exc:
        problem = exc.message
    else:
        return FieldmemCheck(limits, session, request.node.nodeid)
    # outside the except block, so pytest shows one line, not a chained exception
    pytest.fail(f"fieldmem: error: {problem}", pytrace=False)


@pytest.fixture
def fieldmem_fit() -> Callable[..., Any]:
    """Search what of a step fits (:func:`fieldmem.fit`, in the test's process) and fail the test when a
    floor (``at_least=``), ``expect="fits"`` or a compile does not hold; returns the
    :class:`~fieldmem.model.fit_report.FitReport`::

    def test_batch_still_fits(fieldmem_fit):
        fieldmem_fit(train_step, make_args, vary={"batch": "1..4096"}, at_least={"batch": 256}, backend="tpu:v5e")
    """

    def fit(step: Callable[..., Any], make_args: Callable[..., Any], **settings: Any) -> Any:
        __tracebackhide__ = True
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.frontends.fit_api import fit as search
        from fieldmem.frontends.fit_api import fit_failure_message

        try:
            report = search(step, make_args, **settings)
        except FieldmemError as exc:
            problem = f"fieldmem: error: {exc.message}"
        else:
            if report.exit_code == 0:
                return report
            problem = fit_failure_message(report)
        pytest.fail(problem, pytrace=False)

    return fit


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, in the controller: take the checks a worker handed over when it ended."""
    state = node.config.stash.get(_SESSION, None)
    handed = getattr(node, "workeroutput", {}).get("fieldmem")
    if state is not None and handed:
        state.take_over(handed)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A pytest-xdist worker hands its checks to the controller; the controller (or pytest without xdist)
    writes --fieldmem-report (atomically) once every test has run, then gates against and saves the baseline."""
    state = session.config.stash.get(_SESSION, None)
    if state is None:
        return
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["fieldmem"] = state.handed_over()  # type: ignore[attr-defined]
        return
    if state.from_workers:  # in the order the tests are named, not the order the workers ended
        state.reports.sort(key=lambda r: r.results[0].target)
        state.keyed.sort(key=lambda pair: pair[0])
    write_session_report(session, state)
    if state.baseline is not None or state.save_to is not None:
        gate_session(state, session.testsfailed or exitstatus != pytest.ExitCode.OK)
        if state.gate_failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the worker the session's checks kept warm."""
    state = config.stash.get(_SESSION, None)
    if state is not None:
        state.close()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None:
        return
    if state.write_error is not None:
        terminalreporter.write_line(f"fieldmem: error: {state.write_error}", red=True)
    elif state.written is not None:
        terminalreporter.write_line(f"fieldmem: {state.written}")
    for line in state.summary:
        terminalreporter.write_line(line, red=line.startswith(("fieldmem: error:", "  ✗")))
