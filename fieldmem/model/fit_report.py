"""What ``fieldmem fit`` found: the frozen records of a search and its JSON document, ``fieldmem.fit/1``.

A search varies the keyword parameters of a step's args factory (the *knobs*: ``--vary batch=1..4096
--vary remat=none,dots,full``) and compiles the step at each point it needs for one backend, without
running it. One knob may be an integer range: for each combination of the others (a *row*, in the order
given), the largest value of it that fits is found by bisection. Each compile is a :class:`FitPoint`
(fits or not, the footprint, the live peak, the headroom, the largest lines at the peak), each row a
:class:`FitRow` (its frontier, the points it compiled, what moved the peak from the largest value that fits
to the smallest that does not), and a search a :class:`FitSearch` (the rows, what moved the peak from one
row to the next, the checks, the environment). A :class:`FitReport` holds the searches of one run.

Records only: :mod:`fieldmem.parent.fit` searches, :mod:`fieldmem.findings.fit` reads a point's result,
:mod:`fieldmem.gate.fit` compares frontiers and :mod:`fieldmem.render.fit` formats them. Nothing here
imports jax or prints. docs/fit.md describes the document.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fieldmem.model.codec import decode, encode
from fieldmem.model.environment import DeviceInfo, Deviceless
from fieldmem.model.errors import FitReportError, quoted
from fieldmem.model.memory import PeakLine
from fieldmem.model.report import impossible_size
from fieldmem.model.target import ErrorInfo
from fieldmem.model.word_sets import PeakSourceKind

__all__ = [
    "FIT_SCHEMA",
    "ComparedRow",
    "ComparedSearch",
    "FitBaseline",
    "FitCheck",
    "FitComparison",
    "FitPoint",
    "FitReport",
    "FitRow",
    "FitSearch",
    "FrontierMove",
    "Knob",
    "KnobValue",
    "PeakChange",
    "PeakMove",
    "knob_text",
    "values_text",
]

FIT_SCHEMA = "fieldmem.fit/1"
SUPPORTED_FIT_SCHEMAS = (FIT_SCHEMA,)

#: A knob's value, as the args factory receives it (bool first: the codec reads JSON ``true`` as a bool).
KnobValue = bool | int | float | str

#: Whether a point fits: ``yes`` (its footprint is known and within the memory), ``no`` (above it, or the
#: compiler refused the program for not fitting), ``unknown`` (the memory or the footprint is not known),
#: ``error`` (it could not be compiled: the factory raised, the step does not trace).
Fits = Literal["yes", "no", "unknown", "error"]

#: How a row's search ended: ``found`` (the largest value that fits, and the next one up that does not),
#: ``all-fit`` (the largest value of the range fits), ``none-fit`` (not even the smallest does), ``budget``
#: (``--budget`` stopped it: the frontier is bracketed as far as it got), ``error`` (a point could not be
#: compiled), ``unknown`` (the frontier ends at a value whose fit cannot be told: ``smallest_failing`` is the
#: smallest value not shown to fit); without a range knob, a row is one point:
#: ``all-fit`` when it fits, ``none-fit`` when it does not.
RowStatus = Literal["found", "all-fit", "none-fit", "budget", "error", "unknown"]

FitCheckName = Literal["expect-fits", "at-least"]
ChangeBetween = Literal["boundary", "rows"]
FrontierChange = Literal["lower", "higher", "same", "new", "gone", "changed"]


def knob_text(value: KnobValue) -> str:
    """A knob value as the command line writes it: ``256``, ``dots``, ``true``, ``0.5``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def values_text(values: dict[str, KnobValue]) -> str:
    """``batch=256 remat=dots``."""
    return " ".join(f"{name}={knob_text(value)}" for name, value in values.items())


@dataclass(frozen=True)
class Knob:
    """One keyword parameter of the args factory that a search varies.

    A ``range`` is every integer from ``low`` to ``high`` by ``step`` (``batch=8..4096:8``): the search
    finds the largest that fits. A ``list`` is ``values`` in the order given (``remat=none,dots,full``):
    each is a row of its own. ``text``: as the user wrote it.
    """

    name: str
    kind: Literal["range", "list"]
    values: tuple[KnobValue, ...] = ()
    low: int | None = None
    high: int | None = None
    step: int = 1
    text: str = ""

    @property
    def count(self) -> int:
        """How many values the knob takes."""
        if self.kind == "list":
            return len(self.values)
        assert self.low is not None and self.high is not None
        return (self.high - self.low) // self.step + 1

    def value(self, index: int) -> KnobValue:
        """The ``index``-th value (0-based)."""
        if self.kind == "list":
            return self.values[index]
        assert self.low is not None
        return self.low + index * self.step

    def index(self, value: KnobValue) -> int | None:
        """Where ``value`` is among the knob's values (None: it is not one of them)."""
        if self.kind == "list":
            matches = [n for n, v in enumerate(self.values) if type(v) is type(value) and v == value]
            return matches[0] if matches else None
        if not isinstance(value, int) or isinstance(value, bool) or self.low is None or self.high is None:
            return None
        if value < self.low or value > self.high or (value - self.low) % self.step:
            return None
        return (value - self.low) // self.step

    @property
    def bound(self) -> int:
        """The most compiles a row's search over this range may use: ⌈log2(count)⌉ + 2."""
        return math.ceil(math.log2(self.count)) + 2 if self.count > 1 else 1

    def describe(self) -> str:
        """``batch=1..4096``, ``batch=8..4096:8``, ``remat=none,dots,full``."""
        if self.kind == "list":
            return f"{self.name}={','.join(knob_text(v) for v in self.values)}"
        step = f":{self.step}" if self.step != 1 else ""
        return f"{self.name}={self.low}..{self.high}{step}"


@dataclass(frozen=True)
class FitPoint:
    """The step compiled at one point: every varied knob's value, and what the donated program needs.

    ``capacity_bytes``: the memory it must fit in per device (the device's, or ``--max-peak``'s where
    smaller); ``headroom``: that less its footprint (negative: by how much it does not fit).
    ``footprint_at_least``: XLA gave no footprint, and ``footprint_bytes`` is its arguments and outputs
    alone. ``peak_lines``: the largest lines at its live peak (by the user's line, an argument by its
    path). ``reason``: why it does not fit, why that is not known, or its error. ``order``: its place
    among the search's compiles (1 is the first).
    """

    values: dict[str, KnobValue]
    fits: Fits
    order: int = 0
    footprint_bytes: int | None = None
    footprint_at_least: bool = False
    live_peak_bytes: int | None = None
    capacity_bytes: int | None = None
    headroom: int | None = None
    peak_lines: tuple[PeakLine, ...] = ()
    reason: str = ""
    error_kind: str | None = None
    compile_seconds: float | None = None


@dataclass(frozen=True)
class PeakMove:
    """One line's bytes at the live peak at two points: ``label`` is the user's line (``model.py:61``)
    or an argument's path."""

    label: str
    kind: PeakSourceKind
    before_bytes: int
    after_bytes: int

    @property
    def delta(self) -> int:
        return self.after_bytes - self.before_bytes


@dataclass(frozen=True)
class PeakChange:
    """What moved the live peak between two points: the lines whose bytes at it changed most, largest
    change first. ``between``: ``boundary`` (a row's largest value that fits, and the smallest that does
    not) or ``rows`` (one row and the next, at the same value of the searched knob)."""

    between: ChangeBetween
    before: dict[str, KnobValue]
    after: dict[str, KnobValue]
    live_peak_before_bytes: int | None = None
    live_peak_after_bytes: int | None = None
    footprint_before_bytes: int | None = None
    footprint_after_bytes: int | None = None
    moves: tuple[PeakMove, ...] = ()
    # the lines left out of ``moves`` (each moved less), with what they moved together
    others: int = 0
    others_delta: int = 0


@dataclass(frozen=True)
class FitRow:
    """One combination of the listed knobs (``fixed``), and what its search found.

    ``largest``: the largest value of the searched knob that fits (None: none does, or not known);
    ``smallest_failing``: the smallest value above it that does not fit (None: every value fits, or not
    known). ``compiles``: the points it compiled (each the step at one set of values), at most ``bound``
    (⌈log2 of the range's count⌉ + 2). ``points``: in the order compiled. ``boundary``: what moved the
    peak from ``largest`` to ``smallest_failing``. ``notes``: what a compile showed that the search
    assumes otherwise (a footprint that shrinks as the value grows).
    """

    fixed: dict[str, KnobValue]
    status: RowStatus
    compiles: int = 0
    bound: int = 0
    largest: KnobValue | None = None
    smallest_failing: KnobValue | None = None
    points: tuple[FitPoint, ...] = ()
    boundary: PeakChange | None = None
    notes: tuple[str, ...] = ()
    error: str | None = None

    def point_at(self, value: KnobValue, knob: str) -> FitPoint | None:
        """The point this row compiled where ``knob`` is ``value``."""
        for point in self.points:
            found = point.values.get(knob)
            if found is not None and type(found) is type(value) and found == value:
                return point
        return None


@dataclass(frozen=True)
class FitCheck:
    """A gate on a search: ``expect-fits`` (the step fits at the factory's own defaults) or ``at-least``
    (each row's largest value of ``knob`` that fits is ``floor`` or more)."""

    name: FitCheckName
    passed: bool
    message: str
    knob: str | None = None
    floor: int | None = None
    value: KnobValue | None = None
    fixed: dict[str, KnobValue] = field(default_factory=dict)


@dataclass(frozen=True)
class FrontierMove:
    """One row's frontier in two runs (a baseline and now, or two reports side by side): the largest value
    that fits in each (None: none fits, or it was not known), and how it moved (``new``: the row is only in
    the second run, ``gone``: only in the first; ``changed``: its status changed, the frontier did not)."""

    fixed: dict[str, KnobValue]
    change: FrontierChange
    before: KnobValue | None = None
    after: KnobValue | None = None
    before_status: RowStatus | None = None
    after_status: RowStatus | None = None


@dataclass(frozen=True)
class FitBaseline:
    """A search compared with its entry in a baseline (``--baseline``): each row's move, and the
    regressions (a frontier that is lower, a row that stopped fitting at all), each in words."""

    file: str
    moves: tuple[FrontierMove, ...] = ()
    regressions: tuple[str, ...] = ()
    found: bool = True  # False: the baseline has no entry for this search (nothing compared)


@dataclass(frozen=True)
class FitSearch:
    """One search: a step, its knobs, a backend, and what the compiles found.

    ``searched``: the range knob (None: every knob is a list, each combination one point). ``compiles``:
    the points compiled in all, the rows' and ``extra_compiles`` (the factory's own defaults for ``--expect
    fits``, the advisor's point for ``--suggest``); ``budget``: ``--budget`` (None: only the rows' bounds).
    ``donate``: the donation the points were compiled with. ``shipped``: the point at the factory's own
    defaults (``--expect fits``). ``changes``: what moved the peak from one row to the next.
    """

    target: str
    name: str
    backend: str
    knobs: tuple[Knob, ...]
    rows: tuple[FitRow, ...] = ()
    searched: str | None = None
    compiles: int = 0
    extra_compiles: int = 0
    bound: int = 0
    budget: int | None = None
    definition: str | None = None
    args: str | None = None
    jax_version: str = ""
    jaxlib_version: str = ""
    platform_version: str | None = None
    devices: tuple[DeviceInfo, ...] = ()
    deviceless: Deviceless | None = None
    plugin_versions: dict[str, str] = field(default_factory=dict)
    library_versions: dict[str, str] = field(default_factory=dict)
    capacity_bytes: int | None = None
    capacity: str = ""  # the device's memory in words: "a TPU v5e chip has 15.8 GiB for a program"
    max_peak_bytes: int | None = None
    donate: str = ""
    changes: tuple[PeakChange, ...] = ()
    shipped: FitPoint | None = None
    checks: tuple[FitCheck, ...] = ()
    error: ErrorInfo | None = None
    baseline: FitBaseline | None = None
    seconds: float | None = None

    @property
    def failed_checks(self) -> tuple[FitCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def key(self) -> tuple[str, str, str | None, tuple[str, ...]]:
        """What a baseline entry and a side-by-side row are matched by: the name, the backend, the searched
        knob and the listed knobs' names."""
        return (self.name, self.backend, self.searched, tuple(k.name for k in self.knobs if k.name != self.searched))

    def row_for(self, fixed: dict[str, KnobValue]) -> FitRow | None:
        for row in self.rows:
            if row.fixed == fixed and all(type(row.fixed[k]) is type(v) for k, v in fixed.items()):
                return row
        return None

    @property
    def exit_code(self) -> int:
        """2 when the search could not be made or a point could not be compiled, else 1 when a check failed
        or the frontier regressed against the baseline, else 0."""
        if self.error is not None or any(r.status == "error" for r in self.rows):
            return 2
        if self.failed_checks or (self.baseline is not None and self.baseline.regressions):
            return 1
        return 0


@dataclass(frozen=True)
class ComparedRow:
    """One row of one search in several runs: its frontier in each (None: none fits, or not known;
    ``statuses`` None where the run lacks the row), and whether it moved from the first run's."""

    label: str
    values: tuple[KnobValue | None, ...]
    statuses: tuple[RowStatus | None, ...]
    moved: tuple[bool, ...]


@dataclass(frozen=True)
class ComparedSearch:
    """One search (a step, a backend, its knobs) in several runs, row by row."""

    title: str
    searched_label: str
    rows: tuple[ComparedRow, ...] = ()


@dataclass(frozen=True)
class FitComparison:
    """Fit documents side by side (``fieldmem compare a.json b.json``, ``fieldmem fit --jax A,B``), the
    first the reference: ``labels`` name the runs."""

    labels: tuple[str, ...]
    entries: tuple[ComparedSearch, ...] = ()
    schema: str = "fieldmem.fit-compare/1"

    @property
    def moved(self) -> int:
        """How many rows have a frontier that moved from the first run's."""
        return sum(1 for entry in self.entries for row in entry.rows if any(row.moved))


@dataclass(frozen=True)
class FitReport:
    """The searches of one ``fieldmem fit`` run (one per target, backend and jax release)."""

    fieldmem_version: str
    searches: tuple[FitSearch, ...]
    min_bytes: int = 0
    created: str | None = None
    schema: str = FIT_SCHEMA

    @property
    def exit_code(self) -> int:
        return max((s.exit_code for s in self.searches), default=0)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = encode(self)
        return document

    @classmethod
    def from_dict(cls, data: Any) -> FitReport:
        """The report ``data`` holds.

        Raises:
            FitReportError: not a ``fieldmem.fit`` document of a schema this fieldmem reads, or not matching it.
        """
        if not isinstance(data, dict):
            raise FitReportError("a fieldmem fit document is a JSON object")
        schema = data.get("schema")
        if schema not in SUPPORTED_FIT_SCHEMAS:
            raise FitReportError(
                f"schema {quoted(schema)} is not one this fieldmem reads as a fit document "
                f"({', '.join(SUPPORTED_FIT_SCHEMAS)})"
            )
        try:
            report: FitReport = decode(cls, data)
        except (TypeError, ValueError, KeyError) as exc:
            raise FitReportError(f"the document does not match {schema}: {exc}") from exc
        bad = impossible_size(report, "")
        if bad is not None:
            raise FitReportError(f"the document does not match {schema}: {bad} is not a byte count (0 to 2**63-1)")
        return report

    def with_searches(self, searches: tuple[FitSearch, ...]) -> FitReport:
        return replace(self, searches=searches)
