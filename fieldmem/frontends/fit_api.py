"""``fieldmem fit`` from Python: :func:`fit` and :func:`assert_fits`, for a step and its args factory in hand.

The same search as the command line (:func:`fieldmem.parent.fit.search`), each point checked in the
caller's process as :func:`fieldmem.check_function` checks (the caller already runs jax). It computes
nothing of its own and never prints.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fieldmem.model import __version__
from fieldmem.model.errors import OptionError
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.fit_report import FitReport
from fieldmem.model.units import parse_bytes
from fieldmem.request.options import MIN_BYTES, CheckOptions, parse_backends

__all__ = ["FitError", "assert_fits", "fit", "fit_failure_message"]


class FitError(AssertionError):
    """A search whose checks failed: the step does not fit at its defaults (``expect="fits"``), a row's
    largest value that fits is below its floor (``at_least=``), or a point could not be compiled.

    An ``AssertionError``, so pytest reports it as a test failure; ``report`` holds the whole
    :class:`~fieldmem.model.fit_report.FitReport`.
    """

    __module__ = "fieldmem"

    def __init__(self, report: FitReport) -> None:
        super().__init__(fit_failure_message(report))
        self.report = report


def fit_failure_message(report: FitReport, width: int = 160) -> str:
    """One line per failed check or error, then the frontier as the command line prints it."""
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.render import RenderOptions
    from fieldmem.render.fit import render_table, search_title

    shown = visible_strings(report)
    lines = []
    for search in shown.searches:
        title = search_title(search)
        if search.error is not None:
            lines.append(f"{title}: error: {search.error.message}")
        for row in search.rows:
            if row.status == "error":
                lines.append(f"{title}: error: {row.error}")
        for check in search.failed_checks:
            lines.append(f"{title}: {check.name}: {check.message}")
        if search.baseline is not None:
            lines += [f"{title}: regression: {r}" for r in search.baseline.regressions]
    table = render_table(report, RenderOptions(min_bytes=report.min_bytes, width=width))
    return defused("\n".join([*lines, table.rstrip()]))


def fit(
    step: Callable[..., Any],
    make_args: Callable[..., Any],
    *,
    vary: Mapping[str, Any] | Iterable[str],
    backend: str | None = None,
    at_least: Mapping[str, int] | Iterable[str] | None = None,
    budget: int | None = None,
    expect: str | None = None,
    max_peak: int | str | None = None,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    suggest: bool = False,
    min_bytes: int | str = MIN_BYTES,
    top: int = 5,
    name: str | None = None,
    fast_compile: bool = True,
) -> FitReport:
    """Search what of ``step`` fits ``backend``: ``make_args`` called with each point's keyword arguments.

    Arguments:
        step: the update function (a ``jax.jit`` object keeps its own donation).
        make_args: its args factory: returns the positional arguments, or ``(args, kwargs)``; the knobs
            are its keyword parameters.
        vary: the knobs, ``{"batch": "1..4096", "remat": ["none", "dots", "full"]}`` (a range as
            ``"LOW..HIGH[:STEP]"`` or a Python ``range``, a list, or one value) or ``--vary`` strings
            (``["batch=1..4096", "remat=none,dots,full"]``).
        backend: one backend, as ``--backend`` names it (``"tpu:v5e"``, ``"gpu:h100"``); default jax's.
        at_least: floors on the range knob's largest value that fits, ``{"batch": 256}``.
        budget: the most compiles the search may use.
        expect: ``"fits"``: also check the step at the factory's own defaults, which must fit.
        max_peak: a memory budget per device the footprint must fit too (the only one on the CPU).
        donate, static: as :func:`fieldmem.check_function` takes them.
        suggest: compile once at the factory's defaults with the advisor, and search with the donation it
            verified.
        min_bytes: smaller moves of the peak are not named; top: the lines each point keeps at its peak.
        name: the name shown (default ``module:qualname`` of ``step``).

    Returns:
        A :class:`~fieldmem.model.fit_report.FitReport` with one search; ``report.exit_code`` is 1 when a check
        failed, 2 when a point could not be compiled.

    Raises:
        OptionError: a knob, floor or option fieldmem cannot use.

    Example::

        report = fieldmem.fit(train_step, make_args, vary={"batch": "1..512", "remat": ["none", "full"]},
                              backend="tpu:v5e")
        print({r.fixed["remat"]: r.largest for r in report.searches[0].rows})
    """
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.parent.fit import LocalChecker, search
    from fieldmem.request.fit import fit_plan, parse_budget, parse_floors, parse_knobs
    from fieldmem.request.in_hand import callable_name, in_hand
    from fieldmem.request.spec import DonateSpec, StaticSpec
    from fieldmem.request.target import Target

    if not callable(make_args):
        raise OptionError(f"make_args is {type(make_args).__name__}, not a callable returning the step's arguments")
    if isinstance(vary, str) or (at_least is not None and isinstance(at_least, str)):
        raise OptionError("vary= and at_least= take a mapping or a list of NAME=SPEC strings, not one string")
    knobs = parse_knobs(vary if isinstance(vary, Mapping) else list(vary), "vary=")
    floors = (
        parse_floors(at_least if isinstance(at_least, Mapping) else list(at_least), "at_least=") if at_least else ()
    )
    backends = parse_backends(backend, "backend=") if backend is not None else (None,)
    if len(backends) > 1:
        raise OptionError(f"backend={backend!r} names {len(backends)} backends: search one per call")
    made = in_hand("function", step, (), {}, donate=donate, static=static, name=name, expect="fits")
    assert isinstance(made, Target)
    target = dataclasses.replace(made, args_factory=make_args, args_origin=callable_name(make_args))
    plan = fit_plan(
        target.name,
        knobs,
        floors=floors,
        budget=parse_budget(budget, "budget="),
        expect=expect,
        max_peak=parse_bytes(max_peak, "max_peak=") if max_peak is not None else None,
        donate=DonateSpec.parse(donate, "donate=") if donate is not None else None,
        static=StaticSpec.parse(static, "static=") if static is not None else None,
        suggest=suggest,
        top=top,
    )
    options = CheckOptions(
        min_bytes=parse_bytes(min_bytes, "min_bytes="), isolate=False, fast_compile=fast_compile, backend=backends[0]
    )
    found = search(plan, LocalChecker(target, options), backend=backends[0] or "", min_bytes=options.min_bytes)
    return FitReport(
        fieldmem_version=__version__,
        searches=(found,),
        min_bytes=options.min_bytes,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )


def assert_fits(step: Callable[..., Any], make_args: Callable[..., Any], **settings: Any) -> FitReport:
    """:func:`fit`, raising :class:`FitError` unless every check passed (``at_least=``, ``expect="fits"``)
    and every point compiled. Works with or without pytest.

    Example::

        fieldmem.assert_fits(train_step, make_args, vary={"batch": "1..4096"}, at_least={"batch": 256},
                             backend="tpu:v5e")
    """
    __tracebackhide__ = True
    report = fit(step, make_args, **settings)
    if report.exit_code != 0:
        raise FitError(report)
    return report
