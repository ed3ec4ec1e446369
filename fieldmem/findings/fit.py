"""A point of ``fieldmem fit``: whether the step fits at it, and what moved its live peak from another point.

:func:`fit_point` reads one point's checked result (the step compiled at those knob values for the
backend, with ``--expect fits``) into a :class:`~fieldmem.model.fit_report.FitPoint`: it fits when its donated
program's footprint is known and within the memory it must fit in (the device's, as the ``expect-fits``
check gives it, or ``--max-peak``'s where smaller); it does not when the footprint is above it, or when the
compiler refused the program for not fitting (libtpu's out-of-memory, even with its check off). Whether
it fits is never guessed: a memory or a footprint that is not known makes it ``unknown``.

:func:`peak_change` says what moved the live peak between two points, by the user's lines
(:mod:`fieldmem.findings.peak`'s breakdown of the donated program), :func:`monotone_notes` what the
compiles of a row show against the search's assumption that the footprint grows with the searched value,
and :func:`fit_checks` decides ``--expect fits`` and ``--at-least``.

Pure: records in, records out. Never prints, never imports jax.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from fieldmem.findings.capacity import need
from fieldmem.model.fit_report import (
    FitCheck,
    FitPoint,
    FitRow,
    KnobValue,
    PeakChange,
    PeakMove,
    knob_text,
    values_text,
)
from fieldmem.model.memory import PeakLine
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes

__all__ = ["fit_checks", "fit_point", "monotone_notes", "peak_change", "row_peak", "signed"]


def signed(size: int) -> str:
    """``+1.0 GiB``, ``−512.0 MiB``."""
    return f"{'+' if size >= 0 else '−'}{format_bytes(abs(size))}"


def fit_point(
    result: TargetResult,
    values: dict[str, KnobValue],
    order: int,
    max_peak: int | None = None,
    top: int = 5,
) -> FitPoint:
    """The point of ``result`` (the step checked at ``values`` with ``--expect fits``).

    ``max_peak``: a budget per device the footprint must fit too; ``top``: how many of the lines at its
    live peak the point keeps.
    """
    if result.status != "ok":
        error = result.error
        message = error.message if error is not None else "it could not be checked"
        if error is not None and error.kind == "out-of-memory" and message.startswith("does not fit"):
            return FitPoint(values, "no", order, reason=message, error_kind=error.kind)
        return FitPoint(values, "error", order, reason=message, error_kind=error.kind if error else None)
    donated = result.variants.get("donated")
    if donated is None:  # a result always has both variants; one without is not a compile of the step
        return FitPoint(values, "error", order, reason="no donated program was compiled")
    program = need(donated.memory)
    check = next((c for c in result.checks if c.name == "expect-fits"), None)
    device = check.limit if check is not None else None
    limits = [c for c in (device, max_peak) if c is not None]
    capacity = min(limits) if limits else None
    refused = result.verdict is not None and result.verdict.kind == "does-not-fit"
    seconds = [v.compile_seconds for v in result.variants.values() if v.compile_seconds is not None]
    headroom = capacity - program.bytes if capacity is not None and program.bytes is not None else None
    lines = donated.peak.lines[:top] if donated.peak is not None else ()
    common = dict(
        footprint_bytes=program.bytes,
        footprint_at_least=program.at_least,
        live_peak_bytes=donated.memory.live_peak_bytes,
        capacity_bytes=capacity,
        headroom=headroom,
        peak_lines=tuple(lines),
        compile_seconds=round(sum(seconds), 3) if seconds else None,
    )
    if refused or (program.bytes is not None and capacity is not None and program.bytes > capacity):
        finding = (
            next(
                (f for f in result.verdict.findings if f.code == "exceeds-device-memory" and f.severity == "error"),
                None,
            )
            if result.verdict is not None
            else None
        )
        if finding is not None and (max_peak is None or (device is not None and max_peak >= device)):
            reason = finding.message
        else:
            reason = f"{program.words()}, above {_memory_words(device, max_peak)}"
        return FitPoint(values, "no", order, reason=reason, **common)  # type: ignore[arg-type]
    if capacity is None:
        why = (
            check.message.removeprefix("expected to fit, but ")
            if check is not None
            else "the device's memory is not known"
        )
        return FitPoint(values, "unknown", order, reason=why, **common)  # type: ignore[arg-type]
    if program.bytes is None or program.at_least:
        return FitPoint(
            values,
            "unknown",
            order,
            reason=f"what it needs is not known ({program.why})",
            **common,  # type: ignore[arg-type]
        )
    return FitPoint(values, "yes", order, **common)  # type: ignore[arg-type]


def _memory_words(device: int | None, max_peak: int | None) -> str:
    if max_peak is not None and (device is None or max_peak < device):
        return f"the --max-peak budget of {format_bytes(max_peak)}"
    return f"the device's {format_bytes(device)}"


def row_peak(result: TargetResult) -> tuple[PeakLine, ...] | None:
    """Every line at the live peak of ``result``'s donated program, largest first (None: no breakdown)."""
    if result.status != "ok":
        return None
    donated = result.variants.get("donated")
    if donated is None or donated.peak is None:
        return None
    return donated.peak.lines


def peak_change(
    between: str,
    before: FitPoint,
    after: FitPoint,
    before_lines: Sequence[PeakLine] | None,
    after_lines: Sequence[PeakLine] | None,
    top: int,
    min_bytes: int,
) -> PeakChange | None:
    """What moved the live peak from ``before`` to ``after``: the ``top`` lines whose bytes at it moved
    most (each by ``min_bytes`` or more), the rest counted together. None where either point has no
    breakdown of its peak (it did not compile, or its backend gives no buffer assignment)."""
    if before_lines is None or after_lines is None:
        return None
    old = {line.label: line for line in before_lines}
    new = {line.label: line for line in after_lines}
    moves = []
    for label in dict.fromkeys([*new, *old]):
        a, b = old.get(label), new.get(label)
        size_a, size_b = (a.bytes if a else 0), (b.bytes if b else 0)
        if abs(size_b - size_a) < max(min_bytes, 1):
            continue
        kind = (b or a).kind  # type: ignore[union-attr]
        moves.append(PeakMove(label=label, kind=kind, before_bytes=size_a, after_bytes=size_b))
    moves.sort(key=lambda m: (-abs(m.delta), m.label))
    kept, rest = moves[:top], moves[top:]
    return PeakChange(
        between=between,  # type: ignore[arg-type]
        before=dict(before.values),
        after=dict(after.values),
        live_peak_before_bytes=before.live_peak_bytes,
        live_peak_after_bytes=after.live_peak_bytes,
        footprint_before_bytes=before.footprint_bytes,
        footprint_after_bytes=after.footprint_bytes,
        moves=tuple(kept),
        others=len(rest),
        others_delta=sum(m.delta for m in rest),
    )


def monotone_notes(points: Sequence[FitPoint], knob: str, min_bytes: int) -> tuple[str, ...]:
    """What the compiles of one row show against the search's assumption that a larger value needs at least
    as much: a point that fits above one that does not, or a footprint that shrinks (by ``min_bytes`` or
    more) as the value grows. The bisection may then have passed over a value that fits."""
    ordered = sorted(
        (p for p in points if isinstance(p.values.get(knob), (int, float)) and p.fits in ("yes", "no")),
        key=lambda p: p.values[knob],
    )
    notes = []
    for low, high in itertools.pairwise(ordered):
        a, b = low.values[knob], high.values[knob]
        if low.fits == "no" and high.fits == "yes":
            notes.append(
                f"not monotone: {knob}={knob_text(a)} does not fit but {knob}={knob_text(b)} does; the search "
                f"assumes a larger {knob} never needs less, so the frontier it reports may not be the largest"
            )
        elif (
            low.footprint_bytes is not None
            and high.footprint_bytes is not None
            and not low.footprint_at_least
            and not high.footprint_at_least
            and low.footprint_bytes - high.footprint_bytes >= max(min_bytes, 1)
        ):
            notes.append(
                f"not monotone: {knob}={knob_text(b)} needs {format_bytes(high.footprint_bytes)}, less than "
                f"{knob}={knob_text(a)} ({format_bytes(low.footprint_bytes)}); the search assumes a larger {knob} "
                "never needs less, so a value it passed over may differ"
            )
    return tuple(notes)


def fit_checks(
    rows: Sequence[FitRow],
    searched: str | None,
    floors: Sequence[tuple[str, int]],
    shipped: FitPoint | None,
) -> tuple[FitCheck, ...]:
    """``expect-fits`` on the point at the factory's own defaults (``shipped``; None: not asked for), and
    ``--at-least`` per row and floor: the row's largest value that fits is the floor or more. A row whose
    frontier the search could not tell (an error, ``--budget``, a point whose fit is unknown) fails it
    unless what it did find already settles it."""
    checks: list[FitCheck] = []
    if shipped is not None:
        if shipped.fits == "yes":
            message = (
                f"fits at the factory's defaults: needs {format_bytes(shipped.footprint_bytes)} of "
                f"{format_bytes(shipped.capacity_bytes)}"
            )
        else:
            word = {"no": "it does not", "unknown": "whether it does is not known", "error": "it could not be compiled"}
            message = f"expected to fit at the factory's defaults, but {word[shipped.fits]}: {shipped.reason}"
        checks.append(FitCheck("expect-fits", shipped.fits == "yes", message))
    for name, floor in floors:
        for row in rows:
            checks.append(_floor_check(row, name, floor, searched))
    return tuple(checks)


def _floor_check(row: FitRow, name: str, floor: int, searched: str | None) -> FitCheck:
    where = f" ({values_text(row.fixed)})" if row.fixed else ""
    largest = row.largest
    known_fits = [p.values[name] for p in row.points if p.fits == "yes" and isinstance(p.values.get(name), int)]
    known_fails = [p.values[name] for p in row.points if p.fits == "no" and isinstance(p.values.get(name), int)]
    best = max(known_fits, default=None)

    def check(passed: bool, message: str, value: KnobValue | None = None) -> FitCheck:
        return FitCheck("at-least", passed, message, knob=name, floor=floor, value=value, fixed=dict(row.fixed))

    if row.status in ("found", "all-fit") and isinstance(largest, int):
        if largest >= floor:
            return check(True, f"the largest {name} that fits{where} is {largest}, at least {floor}", largest)
        return check(False, f"the largest {name} that fits{where} is {largest}, below the floor of {floor}", largest)
    if row.status == "none-fit":
        low = row.smallest_failing
        smallest = knob_text(low) if low is not None else "the smallest"
        return check(False, f"no {name} fits{where}: not even {smallest}, below the floor of {floor}")
    if best is not None and best >= floor:  # type: ignore[operator]
        stopped = f"the search stopped before its largest: {row.status}"
        return check(True, f"{name}={best} fits{where}, at least {floor} ({stopped})", best)
    smallest_fail = min((v for v in known_fails if isinstance(v, int)), default=None)
    if smallest_fail is not None and smallest_fail <= floor:
        below = f"so the largest that fits is below the floor of {floor}"
        return check(False, f"{name}={smallest_fail} does not fit{where}, {below}")
    why = row.error or {"budget": "--budget stopped the search", "unknown": "whether it fits is not known"}.get(
        row.status, row.status
    )
    return check(
        False, f"the largest {name} that fits{where} is not known ({why}), so the floor of {floor} is not shown to hold"
    )
