"""``fieldmem fit``: the search over a step's knobs, one compile at a time, for one backend.

:func:`search` takes a :class:`~fieldmem.request.fit.FitPlan` and a *checker* (a function that checks
the step at one point: the args factory called with those keyword arguments, compiled with and without
its donation for the backend, ``--expect fits``) and returns a :class:`~fieldmem.model.fit_report.FitSearch`.

The listed knobs make the rows, in the order given (the first knob's values outermost). In each row the
range knob's largest value that fits is found by bisection: the smallest and the largest value of the
range are compiled (a seed first, when there is one), then the middle of what is left between the largest
value known to fit and the smallest known not to, until they are neighbours. That is at most
⌈log2(count)⌉ + 2 compiles per row (:attr:`~fieldmem.model.fit_report.Knob.bound`), whatever the seed: row 0's
seed is the ``--at-least`` floor, each next row's the smallest value that did not fit in the row before,
so that two neighbouring rows share a point and what moved the peak between them is said at one value.
No point is compiled twice. ``--budget`` caps the compiles of a search; a row it stops keeps the bracket
it reached.

The checks run through the hands: :class:`WorkerChecker` in a worker kept between points (the CLI: the
parent never imports jax), :class:`LocalChecker` in this process (the Python API). Never prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fieldmem.findings.fit import fit_checks, fit_point, monotone_notes, peak_change, row_peak
from fieldmem.model.errors import ArgumentsError, FieldmemError, OptionError
from fieldmem.model.fit_report import FitPoint, FitRow, FitSearch, Knob, KnobValue, PeakChange, knob_text, values_text
from fieldmem.model.memory import PeakLine
from fieldmem.model.report import Report
from fieldmem.model.target import ErrorInfo, TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.parent.checker import check_targets
from fieldmem.parent.isolate import Unit, WorkerFailure
from fieldmem.request.backends import device_memory, parse_backend
from fieldmem.request.fit import TPU_OOM_FIGURES_ENV, FitPlan
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import TargetOptions, with_knobs
from fieldmem.worker.results import error_result

__all__ = ["Checker", "LocalChecker", "WorkerChecker", "search"]

#: Checks the step at one point: the factory's keyword arguments (None: its own defaults), the donation
#: (None: the step's own) and whether the advisor runs too; the report's header and the point's result.
Checker = Callable[[dict[str, KnobValue] | None, DonateSpec | None, bool], tuple[Report, TargetResult]]

Progress = Callable[[str], None]


class _OutOfBudget(Exception):
    """``--budget`` compiles are spent."""


@dataclasses.dataclass
class _Seen:
    point: FitPoint
    lines: tuple[PeakLine, ...] | None


class _Search:
    def __init__(self, plan: FitPlan, check: Checker, min_bytes: int, progress: Progress | None) -> None:
        self.plan, self.check, self.min_bytes, self.progress = plan, check, min_bytes, progress
        self.compiles = 0
        self.header: Report | None = None
        self.result: TargetResult | None = None  # the first point's, for the target's name and line
        self.donate = plan.donate
        self.seen: dict[tuple[tuple[str, str, KnobValue], ...], _Seen] = {}
        self.row_compiles = 0
        self.label = ""
        self.suggested: str | None = None  # the donation --suggest verified, once it did
        self.bracket: _Bracket | None = None  # the row being searched

    def _key(self, values: dict[str, KnobValue]) -> tuple[tuple[str, str, KnobValue], ...]:
        return tuple((name, type(value).__name__, value) for name, value in values.items())

    def point(self, values: dict[str, KnobValue] | None, suggest: bool = False) -> _Seen:
        """The point at ``values`` (None: the factory's defaults), compiled now unless it was before.

        Raises:
            _OutOfBudget: ``--budget`` compiles are spent.
        """
        key = self._key(values) if values is not None else None
        if key is not None and key in self.seen:
            return self.seen[key]
        budget = self.plan.budget
        if budget is not None and self.compiles >= budget:
            raise _OutOfBudget()
        if self.progress is not None:
            where = values_text(values) if values is not None else "the factory's defaults"
            self.progress(f"{self.label}{where} · compile {self.compiles + 1}")
        header, result = self.check(values, self.donate, suggest)
        self.compiles += 1
        if values is not None:
            self.row_compiles += 1
        if self.header is None:
            self.header = header
        if self.result is None or self.result.status != "ok":
            self.result = result
        seen = _Seen(
            fit_point(result, dict(values or {}), self.compiles, self.plan.max_peak, self.plan.top),
            row_peak(result),
        )
        if suggest and result.suggestion is not None and result.suggestion.verified_by != "none":
            self.donate = DonateSpec.parse(result.suggestion.spec, "--suggest")
            self.suggested = result.suggestion.spec
        if key is not None:
            self.seen[key] = seen
        return seen


def search(
    plan: FitPlan, check: Checker, *, backend: str, min_bytes: int, progress: Progress | None = None
) -> FitSearch:
    """Search ``plan``'s knobs, each point checked by ``check`` for ``backend`` (its name in the report).

    Never raises for what a point does: a point that cannot be compiled ends its row (``error``), one whose
    fit cannot be told is not shown to fit (a frontier that ends there is ``unknown``), and a first compile
    that cannot tell because the memory is not known is the search's error.
    """
    started = time.perf_counter()
    state = _Search(plan, check, min_bytes, progress)
    shipped: FitPoint | None = None
    rows: list[FitRow] = []
    changes: list[PeakChange] = []
    error: ErrorInfo | None = None
    searched = plan.searched
    try:
        if plan.expect_fits or plan.suggest:  # the factory's own defaults: --expect fits, and the advisor
            shipped = state.point(None, suggest=plan.suggest).point
            if shipped.fits == "error" and state.result is not None and state.result.status == "error":
                error = _error(state.result)
        if error is None:
            rows, changes, error = _rows(plan, state)
    except _OutOfBudget:  # spent on the defaults alone: nothing else was compiled
        rows = [_budget_row(fixed, searched) for fixed in _combinations(plan.listed)]
    except FieldmemError as exc:  # the whole search's (a backend that is not there, a worker that cannot start)
        error = ErrorInfo(exc.kind, exc.message)
    return _assemble(plan, state, backend, tuple(rows), tuple(changes), shipped, error, time.perf_counter() - started)


def _combinations(listed: Sequence[Knob]) -> list[dict[str, KnobValue]]:
    """Every combination of the listed knobs' values, the first knob's outermost."""
    return [dict(zip((k.name for k in listed), combo)) for combo in itertools.product(*(k.values for k in listed))]


def _budget_row(fixed: dict[str, KnobValue], searched: Knob | None) -> FitRow:
    return FitRow(fixed=fixed, status="budget", bound=searched.bound if searched is not None else 1)


def _error(result: TargetResult) -> ErrorInfo:
    error = result.error
    return ErrorInfo(error.kind if error else "error", error.message if error else "it could not be checked")


def _rows(plan: FitPlan, state: _Search) -> tuple[list[FitRow], list[PeakChange], ErrorInfo | None]:
    searched = plan.searched
    rows: list[FitRow] = []
    changes: list[PeakChange] = []
    seed: int | None = None
    if searched is not None:
        floor = next((value for name, value in plan.floors if name == searched.name), None)
        if floor is not None:
            seed = _index_at_or_below(searched, floor)
    combinations = _combinations(plan.listed)
    for n, fixed in enumerate(combinations):
        state.label = f"{values_text(fixed)} · " if fixed else ""
        state.row_compiles = 0
        state.bracket = None
        try:
            row = _search_row(fixed, searched, seed, state) if searched is not None else _one_point(fixed, state)
        except _OutOfBudget:
            rows.append(_partial_row(fixed, searched, state))
            rows += [_budget_row(f, searched) for f in combinations[n + 1 :]]
            break
        if state.compiles == 1 and row.status == "error" and state.result is not None and state.result.error:
            return [], changes, _error(state.result)  # nothing compiled at all: a target or factory that fails
        if not rows and row.points and row.points[0].fits == "unknown" and row.points[0].capacity_bytes is None:
            # the first compile cannot tell whether anything fits: no other will
            reason = row.points[0].reason
            return (
                [row],
                changes,
                ErrorInfo(
                    "unknown-memory",
                    f"cannot tell whether it fits: {reason}; on a backend whose memory is not known, give a budget "
                    "(--max-peak 16GiB)",
                ),
            )
        if rows and searched is not None:
            change = _between_rows(rows[-1], row, searched, state, plan)
            if change is not None:
                changes.append(change)
        rows.append(row)
        if searched is not None:  # the next row starts where this one stopped fitting
            if row.status == "found" and row.smallest_failing is not None:
                seed = searched.index(row.smallest_failing)
            elif row.status == "all-fit":
                seed = searched.count - 1
            elif row.status == "none-fit":
                seed = 0
            else:
                seed = None
    return rows, changes, None


def _index_at_or_below(knob: Knob, value: int) -> int:
    """The index of the largest value of ``knob`` not above ``value`` (0 when all are above it)."""
    assert knob.low is not None
    if value <= knob.low:
        return 0
    return min(knob.count - 1, (value - knob.low) // knob.step)


def _one_point(fixed: dict[str, KnobValue], state: _Search) -> FitRow:
    """A row without a range knob: the one point at ``fixed``."""
    seen = state.point(fixed)
    point = seen.point
    status = {"yes": "all-fit", "no": "none-fit", "unknown": "unknown", "error": "error"}[point.fits]
    return FitRow(
        fixed=fixed,
        status=status,  # type: ignore[arg-type]
        compiles=state.row_compiles,
        bound=1,
        points=(point,),
        error=point.reason if point.fits == "error" else None,
    )


class _Bracket:
    """What a row's compiles know: the largest index known to fit below the smallest not shown to.

    A point whose fit is not known (XLA doubted its own figures for it) is not shown to fit: the search goes
    below it as below one that does not fit, and a row whose frontier ends at such a point says so (``unknown``)
    rather than call it found. A point that could not be compiled stops the row (``stopped``).
    """

    def __init__(self) -> None:
        self.fits: int | None = None
        self.fails: int | None = None
        self.points: list[FitPoint] = []
        self.unknown: dict[int, FitPoint] = {}  # the points whose fit is not known, by index
        self.stopped: FitPoint | None = None  # a point that could not be compiled

    def add(self, index: int, point: FitPoint) -> None:
        if point not in self.points:
            self.points.append(point)
        if point.fits == "yes":
            if (self.fails is None or index < self.fails) and (self.fits is None or index > self.fits):
                self.fits = index
        elif point.fits in ("no", "unknown"):
            if point.fits == "unknown":
                self.unknown[index] = point
            if (self.fits is None or index > self.fits) and (self.fails is None or index < self.fails):
                self.fails = index
        else:
            self.stopped = point


def _search_row(fixed: dict[str, KnobValue], knob: Knob, seed: int | None, state: _Search) -> FitRow:
    bracket = _Bracket()
    state.bracket = bracket
    last = knob.count - 1

    def probe(index: int) -> bool:
        """Compile the point at ``index``; False when it could not be compiled (the row stops)."""
        seen = state.point({**fixed, knob.name: knob.value(index)})
        bracket.add(index, seen.point)
        return bracket.stopped is None

    if seed is not None and 0 <= seed <= last and not probe(seed):
        return _finished(fixed, knob, bracket, state)
    if bracket.fits is None and bracket.fails != 0 and not probe(0):
        return _finished(fixed, knob, bracket, state)
    if bracket.fits is not None and bracket.fails is None and bracket.fits != last and not probe(last):
        return _finished(fixed, knob, bracket, state)
    while bracket.fits is not None and bracket.fails is not None and bracket.fails - bracket.fits > 1:
        if not probe((bracket.fits + bracket.fails) // 2):
            break
    return _finished(fixed, knob, bracket, state)


def _finished(
    fixed: dict[str, KnobValue], knob: Knob, bracket: _Bracket, state: _Search, budget: bool = False
) -> FitRow:
    """The row of what ``bracket`` knows (``budget``: ``--budget`` stopped it)."""
    largest = knob.value(bracket.fits) if bracket.fits is not None else None
    failing = knob.value(bracket.fails) if bracket.fails is not None else None
    error = None
    if bracket.stopped is not None:
        status = "error"
        error = bracket.stopped.reason
    elif bracket.fails is not None and bracket.fails in bracket.unknown and not budget:
        status = "unknown"  # the frontier ends at a value whose fit is not known
        error = f"whether {knob.name}={knob_text(knob.value(bracket.fails))} fits is not known: {bracket.unknown[bracket.fails].reason}"
    elif budget:
        status = "budget"
    elif bracket.fits is not None and bracket.fails is not None and bracket.fails - bracket.fits == 1:
        status = "found"
    elif bracket.fits == knob.count - 1:
        status = "all-fit"
    elif bracket.fails == 0:
        status = "none-fit"
    else:
        status = "budget"
    boundary = None
    if status == "found" and largest is not None and failing is not None:
        below = state.seen.get(state._key({**fixed, knob.name: largest}))
        above = state.seen.get(state._key({**fixed, knob.name: failing}))
        if below is not None and above is not None:
            boundary = peak_change(
                "boundary", below.point, above.point, below.lines, above.lines, state.plan.top, state.min_bytes
            )
    return FitRow(
        fixed=fixed,
        status=status,  # type: ignore[arg-type]
        compiles=state.row_compiles,
        bound=knob.bound,
        largest=largest,
        smallest_failing=failing,
        points=tuple(bracket.points),
        boundary=boundary,
        notes=monotone_notes(bracket.points, knob.name, state.min_bytes),
        error=error,
    )


def _partial_row(fixed: dict[str, KnobValue], knob: Knob | None, state: _Search) -> FitRow:
    """The row ``--budget`` stopped in the middle of: what it knew by then."""
    bracket = state.bracket
    if knob is None or bracket is None or not bracket.points:
        return FitRow(fixed=fixed, status="budget", compiles=state.row_compiles, bound=knob.bound if knob else 1)
    return _finished(fixed, knob, bracket, state, budget=True)


def _between_rows(before: FitRow, after: FitRow, knob: Knob, state: _Search, plan: FitPlan) -> PeakChange | None:
    """What moved the peak from row ``before`` to row ``after``, at a value of the searched knob both
    compiled: where ``before`` stopped fitting (the next row's seed), else the largest value both did."""
    mine = {p.values.get(knob.name): p for p in after.points}
    shared = [p for p in before.points if p.values.get(knob.name) in mine and p.fits in ("yes", "no")]
    if not shared:
        return None
    wanted = before.smallest_failing
    pick = next((p for p in shared if p.values.get(knob.name) == wanted), None) or max(
        shared,
        key=lambda p: p.values[knob.name],
    )
    value = pick.values[knob.name]
    other = mine[value]
    a = state.seen.get(state._key(pick.values))
    b = state.seen.get(state._key(other.values))
    if a is None or b is None:
        return None
    return peak_change("rows", a.point, b.point, a.lines, b.lines, plan.top, state.min_bytes)


def _assemble(
    plan: FitPlan,
    state: _Search,
    backend: str,
    rows: tuple[FitRow, ...],
    changes: tuple[PeakChange, ...],
    shipped: FitPoint | None,
    error: ErrorInfo | None,
    seconds: float,
) -> FitSearch:
    searched = plan.searched
    header, result = state.header, state.result
    bound_per_row = searched.bound if searched is not None else 1
    capacity = next(
        (p.capacity_bytes for row in rows for p in row.points if p.capacity_bytes is not None),
        shipped.capacity_bytes if shipped is not None else None,
    )
    donate = _donation(plan, state, result)
    environment: dict[str, Any] = {}
    if header is not None:
        environment = dict(
            jax_version=header.jax_version,
            jaxlib_version=header.jaxlib_version,
            platform_version=header.platform_version,
            devices=header.devices,
            deviceless=header.deviceless,
            plugin_versions=dict(header.plugin_versions),
            library_versions=dict(header.library_versions),
        )
    return FitSearch(
        target=plan.target,
        name=result.name if result is not None else plan.target,
        backend=header.backend if header is not None else backend,
        knobs=plan.knobs,
        rows=rows,
        searched=searched.name if searched is not None else None,
        compiles=state.compiles,
        extra_compiles=1 if shipped is not None else 0,
        bound=bound_per_row * max(1, len(_combinations(plan.listed))),
        budget=plan.budget,
        definition=result.definition if result is not None else None,
        args=plan.args,
        capacity_bytes=capacity,
        capacity=_capacity_words(backend, capacity, plan.max_peak),
        max_peak_bytes=plan.max_peak,
        donate=donate,
        changes=changes,
        shipped=shipped,
        checks=fit_checks(rows, searched.name if searched else None, plan.floors, shipped) if error is None else (),
        error=error,
        seconds=round(seconds, 3),
        **environment,
    )


def _donation(plan: FitPlan, state: _Search, result: TargetResult | None) -> str:
    """The donation the points were compiled with, in words."""
    suggested = state.suggested
    if suggested is not None:
        return f"{suggested} (what --suggest verified at the factory's defaults)"
    own = result.donate if result is not None and result.donate else None
    donated = result.variants.get("donated") if result is not None else None
    names = ", ".join(donated.donated_arguments) if donated is not None and donated.donated_arguments else "nothing"
    source = {"jit": "the step's jit", "all": "every argument that holds arrays", "none": "--donate none"}.get(
        own or "", f"--donate {own}" if own else "the step's own"
    )
    said = f"{names} ({source})"
    if plan.suggest:
        return f"{said} (--suggest found none better at the factory's defaults)"
    return said


def _capacity_words(backend: str, capacity: int | None, max_peak: int | None) -> str:
    """The memory the points must fit in, in words."""
    device = None
    try:
        device = device_memory(parse_backend(backend)) if backend and ":" in backend else None
    except OptionError:
        device = None
    if device is not None and capacity is not None and max_peak is None and device.bytes != capacity:
        device = None  # the points were held to another figure than the kind's (a local device's allocator)
    if device is not None:
        words = device.words()
    elif capacity is not None and capacity != max_peak:
        words = f"the device has {format_bytes(capacity)}"
    else:
        words = ""  # the budget alone (the CPU: no device memory)
    if max_peak is not None and (device is None or max_peak < device.bytes):
        budget = f"the --max-peak budget is {format_bytes(max_peak)}"
        return f"{words}; {budget}" if words else budget
    return words


# ----------------------------------------------------------------------------
# Checking one point


#: How many times a point whose worker crashed on a TPU is checked again, and the seconds waited before the
#: second (twice as long before the third).
RECHECKS, RECHECK_WAIT = 3, 10.0


class WorkerChecker:
    """Checks the points of ``plan`` in a worker kept between them (:class:`~fieldmem.parent.isolate.UnitSession`):
    the spec loaded with the point's keyword arguments for its factory, on ``backend``."""

    def __init__(self, plan: FitPlan, backend: str | None, options: CheckOptions, session: Any) -> None:
        self.plan, self.backend, self.options, self.session = plan, backend, options, session

    def __call__(
        self, values: dict[str, KnobValue] | None, donate: DonateSpec | None, suggest: bool
    ) -> tuple[Report, TargetResult]:
        plan = self.plan
        options = TargetOptions(
            args=plan.args,
            donate=donate,
            static=plan.static,
            expect="fits",
            knobs=tuple(values.items()) if values is not None else None,
        )
        unit, check_options = Unit(plan.target, options), dataclasses.replace(self.options, suggest=suggest)
        header, result = _one(self.session.check(unit, self.backend, check_options), plan.target)
        if _crashed(result) and (self.backend or "").startswith("tpu:"):
            # the worker died compiling the point (libtpu 0.0.42.1 crashes compiling some programs it refused for
            # not fitting again without that check): once more, without that second compile; a worker that dies
            # again as it starts (libtpu's lockfile, held by another process that loaded libtpu) is tried again
            for attempt in range(RECHECKS):
                if attempt:
                    time.sleep(RECHECK_WAIT * attempt)
                try:
                    with _environment(TPU_OOM_FIGURES_ENV, "0"):
                        header, again = _one(self.session.check(unit, self.backend, check_options), plan.target)
                except WorkerFailure:  # the new worker could not even load libtpu
                    continue
                if not _crashed(again):
                    break
            else:
                return header, result
            if again.status == "error" and again.error is not None and again.error.kind == "out-of-memory":
                said = f"{again.error.message} (compiled again without that check, the worker crashed)"
                result = dataclasses.replace(again, error=ErrorInfo(again.error.kind, said))
            else:
                result = again
        return header, result


class LocalChecker:
    """Checks the points of a target in hand in this process (the Python API): its factory called with the
    point's keyword arguments, on ``options.backend``."""

    def __init__(self, target: Any, options: CheckOptions) -> None:
        self.target, self.options = target, options

    def __call__(
        self, values: dict[str, KnobValue] | None, donate: DonateSpec | None, suggest: bool
    ) -> tuple[Report, TargetResult]:
        target = dataclasses.replace(self.target, expect="fits", donate=donate or self.target.donate)
        options = dataclasses.replace(self.options, suggest=suggest)
        if values is not None:
            try:
                factory, origin = with_knobs(target.args_factory, target.args_origin, tuple(values.items()))
            except ArgumentsError as exc:
                report = check_targets([], options)
                return report, error_result(target.spec, target.name, exc, target.definition)
            target = dataclasses.replace(target, args_factory=factory, args_origin=origin)
        report = check_targets([target], options)
        return _one(report, target.name)


def _crashed(result: TargetResult) -> bool:
    """Whether ``result`` is a point whose worker died while checking it (killed by a signal)."""
    error = result.error
    return (
        result.status == "error"
        and error is not None
        and error.kind in ("crash", "out-of-memory")
        and ("worker process was killed" in error.message)
    )


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` in this process's environment (which the worker's next request takes) while
    inside."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _one(report: Report, spec: str) -> tuple[Report, TargetResult]:
    """The header of ``report`` and its one result.

    Raises:
        OptionError: the spec names several targets (a module registering several cases) or a chain.
    """
    if report.chains or len(report.results) != 1:
        names = ", ".join(r.name for r in report.results[:3])
        raise OptionError(
            f"fieldmem fit searches one step, and {spec} names {len(report.results)} targets ({names}"
            f"{', ...' if len(report.results) > 3 else ''}): name one, as module:function"
        )
    return dataclasses.replace(report, results=()), report.results[0]
