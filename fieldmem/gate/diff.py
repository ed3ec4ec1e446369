"""The one diff engine: what differs between two runs of a target, as neutral deltas.

:func:`diff_targets` takes the facts of two runs (:class:`TargetFacts`: of a
report's result, :func:`facts_of_result`, or of a baseline's entry) and gives
every :class:`Delta` between them: a status or verdict that changed, a check
that now fails or passes, an alias lost, new or rerouted, a donation that
became unusable or usable again, a copy new, gone, grown or shrunk (copies
paired by :func:`match_copies`, never by HLO instruction name), a figure
that moved; each with the matched pair. What is "the same" copy, alias and
figure is decided here, once.

The front-ends only classify and word the deltas: the baseline gate
(:mod:`fieldmem.gate.baseline`: a regression, an improvement, a note),
``fieldmem compare`` (:mod:`fieldmem.gate.compare`: significant or not
against a tolerance) and ``--watch`` (compare's words, exact). Every change
they report is a :class:`~fieldmem.model.comparison.Change`; a change of bytes reads
one way (:func:`change_text`).

Pure: no jax, no files, nothing printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from fieldmem.model.copies import Copy
from fieldmem.model.memory import PeakBreakdown
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.request.tolerance import Tolerance

__all__ = [
    "FIGURES",
    "PEAK_LINES_KEPT",
    "VARIANTS",
    "AliasMatch",
    "CopyPair",
    "CopyRecord",
    "Delta",
    "TargetFacts",
    "VariantFacts",
    "array_shape",
    "change_text",
    "copy_record",
    "diff_targets",
    "facts_of_result",
    "match_aliases",
    "match_copies",
    "moved",
    "peak_line_source",
    "peak_line_text",
    "peak_lines_of",
    "signed_bytes",
]

#: The variants a diff reads, in the order deltas come.
VARIANTS = ("donated", "plain")
#: The memory figures a diff compares, in the order deltas come.
FIGURES = ("footprint_bytes", "live_peak_bytes", "temp_bytes", "peak_bytes")

_LAYOUT = re.compile(r"\{[^}]*\}")
_SOURCE_LINE = re.compile(r":\d+$")


@dataclass(frozen=True)
class CopyRecord:
    """A copy XLA kept, without its HLO instruction name (which changes between runs)."""

    kind: str
    bytes: int
    shape: str
    input: str | None  # the input leaf it copies (``of_parameter``)
    source: str | None
    bytes_per_call: int | None = None
    trip_count: int | None = None
    output: str | None = None
    cause: str | None = None

    @property
    def per_call(self) -> int:
        """Bytes copied per call: ``bytes_per_call`` for a loop copy with a known trip count, else ``bytes``."""
        return self.bytes_per_call if self.bytes_per_call is not None else self.bytes


def copy_record(copy: Copy) -> CopyRecord:
    """A report's copy as the engine (and a baseline file) records it."""
    return CopyRecord(
        kind=copy.kind,
        bytes=copy.bytes,
        shape=copy.shape,
        input=copy.of_parameter,
        source=copy.source,
        bytes_per_call=copy.bytes_per_call,
        trip_count=copy.trip_count,
        output=copy.output,
        cause=copy.cause,
    )


# ----------------------------------------------------------------------------
# Copies


@dataclass(frozen=True)
class CopyPair:
    """One copy across two runs: ``before`` None when it is new, ``after`` None when it is gone."""

    before: CopyRecord | None
    after: CopyRecord | None


def array_shape(shape: str) -> str:
    """``f32[512,512]{1,0}`` -> ``f32[512,512]``: backends lay out the same array differently."""
    return _LAYOUT.sub("", shape)


_COPY_KEYS: tuple[Callable[[CopyRecord], tuple[Any, ...]], ...] = (
    # exact: the same copy
    lambda c: (c.kind, c.input, c.output, array_shape(c.shape), c.source),
    # the same copy, grown or shrunk (its shape changed)
    lambda c: (c.kind, c.input, c.output, c.source),
    # the same copy, moved: lines above it were edited
    lambda c: (c.kind, c.input, c.output, array_shape(c.shape)),
)


def match_copies(before: Sequence[CopyRecord], after: Sequence[CopyRecord]) -> tuple[CopyPair, ...]:
    """Pair copies across runs by what they copy, never by HLO instruction name.

    Three passes, strictest first: kind + input/output + shape (without
    layout) + source line; then without the shape (a copy that grew); then
    without the source line (a copy whose line moved). Returns every copy of
    ``before`` in its order, paired or gone, then the new copies in the order
    of ``after``.
    """
    partner: dict[int, int] = {}  # index in before -> index in after
    left = list(range(len(before)))
    right = list(range(len(after)))
    for key in _COPY_KEYS:
        pool: dict[Any, list[int]] = {}
        for index in right:
            pool.setdefault(key(after[index]), []).append(index)
        still_left = []
        for index in left:
            candidates = pool.get(key(before[index]))
            if candidates:
                partner[index] = candidates.pop(0)
            else:
                still_left.append(index)
        left = still_left
        taken = set(partner.values())
        right = [index for index in right if index not in taken]
    pairs = [CopyPair(copy, after[partner[index]] if index in partner else None) for index, copy in enumerate(before)]
    return tuple(pairs + [CopyPair(None, after[index]) for index in right])


# ----------------------------------------------------------------------------
# Aliases


class _AliasLike(Protocol):
    """A report's :class:`~fieldmem.model.copies.Alias` or a baseline's ``AliasRecord``."""

    @property
    def input(self) -> str: ...

    @property
    def output(self) -> str: ...

    @property
    def bytes(self) -> int: ...


A = TypeVar("A", bound=_AliasLike)


@dataclass(frozen=True)
class AliasMatch(Generic[A]):
    """Aliases of two runs matched by donated input leaf (an alias is a leaf whose buffer is reused).

    ``rerouted``: the leaf's buffer is reused in both runs, by another output.
    """

    lost: tuple[A, ...]
    new: tuple[A, ...]
    rerouted: tuple[tuple[A, A], ...]


def match_aliases(before: Iterable[A], after: Iterable[A]) -> AliasMatch[A]:
    """The aliases lost, new and rerouted, each in the order of its run."""
    old = {a.input: a for a in before}
    now = {a.input: a for a in after}
    return AliasMatch(
        lost=tuple(a for name, a in old.items() if name not in now),
        new=tuple(a for name, a in now.items() if name not in old),
        rerouted=tuple((a, now[name]) for name, a in old.items() if name in now and now[name].output != a.output),
    )


# ----------------------------------------------------------------------------
# Figures and sizes


def moved(tolerance: Tolerance, before: int, after: int) -> int:
    """+1: grew beyond the tolerance; -1: shrank by more than it; 0: within it.

    Both directions measure the allowance on ``before`` (the reference).
    """
    if not tolerance.allows(before, after):
        return 1
    if before - after > tolerance.allowance(before):
        return -1
    return 0


def signed_bytes(value: int) -> str:
    """``+4.0 KiB`` / ``-4.0 KiB`` / ``+0 B``."""
    return f"+{format_bytes(value)}" if value >= 0 else f"-{format_bytes(-value)}"


def change_text(before: int, after: int) -> str:
    """``4.0 KiB → 8.0 KiB (+4.0 KiB, +100.0%)``: the one way a change of bytes is written."""
    diff = after - before
    percent = f", {diff / before:+.1%}" if before else ""
    return f"{format_bytes(before)} → {format_bytes(after)} ({signed_bytes(diff)}{percent})"


# ----------------------------------------------------------------------------
# The facts of one run, and the deltas between two


class _DonationLike(Protocol):
    """A report's :class:`~fieldmem.model.copies.UnusableDonation` or a baseline's ``DonationRecord``."""

    @property
    def input(self) -> str: ...

    @property
    def bytes(self) -> int: ...

    @property
    def code(self) -> str: ...

    @property
    def reason(self) -> str: ...


@dataclass(frozen=True)
class VariantFacts:
    """What a diff reads of one variant of one run."""

    memory: Mapping[str, int | None]  # figure -> bytes (None: unavailable)
    aliases: tuple[Any, ...] = ()  # each with input, output, bytes (a report's Alias, a baseline's record)
    unusable: tuple[_DonationLike, ...] = ()  # donated leaves no output takes, each with input, bytes, code, reason
    copies: tuple[CopyRecord, ...] = ()
    unavailable: Mapping[str, str] = field(default_factory=dict)  # figure -> why it has no value
    peak_source: str | None = None  # the live peak's schedule point, where known
    # bytes at the live peak by the user's line (an argument by its path): the largest PEAK_LINES_KEPT;
    # ``peak_lines_floor``: the bytes of the smallest kept when some were left out (0: all are there)
    peak_lines: Mapping[str, int] | None = None
    peak_lines_floor: int = 0


@dataclass(frozen=True)
class TargetFacts:
    """What a diff reads of one run of a target: a report's result, or a baseline's entry."""

    name: str
    status: str  # ok | error | missing
    error: str | None = None
    in_place: bool | None = None
    verdict: str | None = None  # the verdict's summary
    failed_checks: tuple[str, ...] | None = None  # None: not recorded (a baseline keeps no checks)
    definition: str | None = None
    variants: Mapping[str, VariantFacts] = field(default_factory=dict)


def facts_of_result(result: TargetResult | None) -> TargetFacts:
    """The facts of a report's result (None: the target is missing from that report)."""
    if result is None:
        return TargetFacts(name="", status="missing")
    if result.status != "ok" or result.verdict is None:
        error = result.error.message if result.error is not None else "unknown error"
        return TargetFacts(name=result.name, status="error", error=error, definition=result.definition)
    variants = {}
    for name, variant in result.variants.items():
        variants[name] = VariantFacts(
            memory={f: getattr(variant.memory, f) for f in FIGURES},
            aliases=variant.aliases,
            unusable=variant.unusable_donations,
            copies=tuple(copy_record(c) for c in variant.copies),
            unavailable=variant.memory.unavailable,
            peak_source=variant.timeline.peak_source if variant.timeline is not None else None,
            **peak_lines_of(variant.peak),
        )
    return TargetFacts(
        name=result.name,
        status="ok",
        in_place=result.verdict.in_place,
        verdict=result.verdict.summary,
        failed_checks=tuple(c.name for c in result.failed_checks),
        definition=result.definition,
        variants=variants,
    )


#: how many lines of a variant's live peak by line a baseline keeps (the largest)
PEAK_LINES_KEPT = 256


def peak_lines_of(peak: PeakBreakdown | None) -> dict[str, Any]:
    """``peak_lines`` and ``peak_lines_floor`` of a :class:`VariantFacts` (or a baseline's record) from
    a variant's breakdown of its live peak."""
    if peak is None:
        return {"peak_lines": None, "peak_lines_floor": 0}
    kept = peak.lines[:PEAK_LINES_KEPT]
    floor = kept[-1].bytes if len(peak.lines) > len(kept) else 0
    return {"peak_lines": {line.label: line.bytes for line in kept}, "peak_lines_floor": floor}


def peak_line_source(delta: Delta) -> str | None:
    """The ``file.py:LINE`` a live-peak line's change is at (None: an argument's buffer, the constants)."""
    return delta.subject if _SOURCE_LINE.search(delta.subject) else None


def peak_line_text(delta: Delta) -> str:
    """``+8.0 MiB at model.py:61``: one line's change of bytes at the live peak."""
    before, after = delta.before or 0, delta.after or 0
    where = "at" if _SOURCE_LINE.search(delta.subject) else "in"  # a line of code, or an argument's buffer
    return f"{signed_bytes(after - before)} {where} {delta.subject}"


DeltaKind = Literal["status", "verdict", "check", "alias", "donation", "copy", "figure", "peak-line"]
DeltaChange = Literal["new", "gone", "grew", "shrank", "changed", "rerouted"]


@dataclass(frozen=True)
class Delta:
    """One thing that differs between two runs of a target, with the matched pair.

    ``before`` and ``after`` are what the runs have: a status or a verdict
    (``in_place``), a check's name, an alias or a donation record, a
    :class:`CopyRecord`, a figure's bytes; None on the side that lacks it. A
    figure or copy that ``changed`` has a value on one side only (unavailable
    on the other).
    """

    kind: DeltaKind
    change: DeltaChange
    subject: str  # the status, verdict or check name; the alias's or donation's input leaf; a figure name
    before: Any
    after: Any
    variant: str | None = None  # of alias, donation, copy and figure deltas


def diff_targets(before: TargetFacts, after: TargetFacts, min_bytes: int) -> tuple[Delta, ...]:
    """Every delta from ``before`` to ``after``; copies, aliases and donations smaller than ``min_bytes`` are
    not read (on either side: they decide no verdict, so no change of theirs is one).

    A status that differs is the only delta (nothing else compares), and so
    is none when either run could not be checked. Then, in this order: the
    verdict, the checks (where both runs record them), and per variant
    (:data:`VARIANTS`) the aliases (lost, rerouted, new), the donations no
    output takes (new, gone), the copies (in :func:`match_copies` order) and
    the figures (:data:`FIGURES`).
    """
    if before.status != after.status:
        return (Delta("status", "changed", "status", before.status, after.status),)
    if before.status != "ok":
        return ()
    deltas: list[Delta] = []
    if before.in_place != after.in_place:
        deltas.append(Delta("verdict", "changed", "verdict", before.in_place, after.in_place))
    if before.failed_checks is not None and after.failed_checks is not None:
        for name in sorted(set(before.failed_checks) ^ set(after.failed_checks)):
            deltas.append(Delta("check", "new" if name in after.failed_checks else "gone", name, name, name))
    for variant in VARIANTS:
        old, now = before.variants.get(variant), after.variants.get(variant)
        if old is None or now is None:
            continue
        deltas += _variant_deltas(variant, old, now, min_bytes)
    return tuple(deltas)


def _variant_deltas(variant: str, old: VariantFacts, now: VariantFacts, min_bytes: int) -> list[Delta]:
    deltas: list[Delta] = []
    aliases = match_aliases(
        [a for a in old.aliases if a.bytes >= min_bytes], [a for a in now.aliases if a.bytes >= min_bytes]
    )
    deltas += [Delta("alias", "gone", a.input, a, None, variant) for a in aliases.lost]
    deltas += [Delta("alias", "rerouted", a.input, a, b, variant) for a, b in aliases.rerouted]
    deltas += [Delta("alias", "new", a.input, None, a, variant) for a in aliases.new]
    unusable_before = {d.input: d for d in old.unusable if d.bytes >= min_bytes}
    unusable_after = {d.input: d for d in now.unusable if d.bytes >= min_bytes}
    deltas += [
        Delta("donation", "new", n, None, d, variant) for n, d in unusable_after.items() if n not in unusable_before
    ]
    deltas += [
        Delta("donation", "gone", n, d, None, variant) for n, d in unusable_before.items() if n not in unusable_after
    ]
    # a move between memory spaces (kind "staging": a TPU's VMEM prefetch) is no copy of state; a baseline or
    # report written before the report kept them apart lists them among its copies
    copies_before = [c for c in old.copies if c.bytes >= min_bytes and c.kind != "staging"]
    copies_after = [c for c in now.copies if c.bytes >= min_bytes and c.kind != "staging"]
    for pair in match_copies(copies_before, copies_after):
        if pair.before is None:
            deltas.append(Delta("copy", "new", "copy", None, pair.after, variant))
        elif pair.after is None:
            deltas.append(Delta("copy", "gone", "copy", pair.before, None, variant))
        elif pair.before.per_call != pair.after.per_call:
            change: DeltaChange = "grew" if pair.after.per_call > pair.before.per_call else "shrank"
            deltas.append(Delta("copy", change, "copy", pair.before, pair.after, variant))
    for figure in FIGURES:
        a, b = old.memory.get(figure), now.memory.get(figure)
        if a == b:
            continue
        change = "changed" if a is None or b is None else ("grew" if b > a else "shrank")
        deltas.append(Delta("figure", change, figure, a, b, variant))
    deltas += _peak_line_deltas(variant, old, now, min_bytes)
    return deltas


def _peak_line_deltas(variant: str, old: VariantFacts, now: VariantFacts, min_bytes: int) -> list[Delta]:
    """The lines whose bytes at the live peak moved by ``min_bytes`` or more, the largest move first.

    A line one side does not list is 0 there when that side lists every line; when it kept only the
    largest, the line is left out (its bytes there are unknown, below that side's floor)."""
    if old.peak_lines is None or now.peak_lines is None:
        return []
    found: list[Delta] = []
    for label in dict.fromkeys([*old.peak_lines, *now.peak_lines]):
        a, b = old.peak_lines.get(label), now.peak_lines.get(label)
        if (a is None and old.peak_lines_floor) or (b is None and now.peak_lines_floor):
            continue
        a, b = a or 0, b or 0
        if abs(b - a) < max(min_bytes, 1):
            continue
        change: DeltaChange = "new" if a == 0 else "gone" if b == 0 else "grew" if b > a else "shrank"
        found.append(Delta("peak-line", change, label, a, b, variant))
    found.sort(key=lambda d: (-abs(d.after - d.before), d.subject))
    return found
