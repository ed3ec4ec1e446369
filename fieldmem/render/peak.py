"""The bytes at the live peak by line, for the terminal (``fieldmem check --top N``) and markdown.

Lays out what :class:`~fieldmem.model.memory.PeakBreakdown` holds: its lines (the
user's line, or an argument's path) with their bytes at the plain and the
donated program's live peak, largest first, the first ``top`` of them and one
row for the rest, so that each column adds up to its peak. Decides nothing.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from fieldmem.model.memory import PeakBreakdown, PeakLine
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.render.layout import Column, fitted_table, hanging

__all__ = ["peak_rows", "peak_table", "peak_title", "space_lines"]


def _where(line: PeakLine) -> str:
    """A line of the user's code as it is; an argument's buffer named so."""
    return f"argument {line.label}" if line.kind == "argument" else line.label


def _cell(line: PeakLine | None) -> str:
    if line is None:
        return "—"
    return f"{format_bytes(line.bytes)} {line.share:>4.0%}"


def peak_rows(result: TargetResult, top: int) -> tuple[list[tuple[str, str, str]], int]:
    """Rows (where, plain, donated) of the ``top`` largest lines, then one for the others;
    and how many lines there are in all."""
    breakdowns = [result.variants[name].peak if name in result.variants else None for name in ("plain", "donated")]
    plain, donated = ({line.label: line for line in b.lines} if b else {} for b in breakdowns)
    labels = list(dict.fromkeys([*donated, *plain]))
    # largest first at either peak: a line the donation removes still shows
    labels.sort(key=lambda label: -max(plain[label].bytes if label in plain else 0, _bytes(donated.get(label))))
    rows = []
    for label in labels[:top]:
        line = donated.get(label) or plain[label]
        rows.append((_where(line), _cell(plain.get(label)), _cell(donated.get(label))))
    rest = labels[top:]
    if rest:
        totals = []
        for lines, breakdown in ((plain, breakdowns[0]), (donated, breakdowns[1])):
            size = sum(lines[label].bytes for label in rest if label in lines)
            share = size / breakdown.bytes if breakdown is not None and breakdown.bytes else 0.0
            totals.append(f"{format_bytes(size)} {share:>4.0%}" if breakdown is not None else "—")
        rows.append((f"{len(rest)} more", totals[0], totals[1]))
    return rows, len(labels)


def _bytes(line: PeakLine | None) -> int:
    return line.bytes if line is not None else 0


def peak_title(result: TargetResult, top: int, count: int) -> str:
    peaks = []
    for name in ("plain", "donated"):
        breakdown: PeakBreakdown | None = result.variants[name].peak if name in result.variants else None
        if breakdown is not None:
            peaks.append(f"{name} {format_bytes(breakdown.bytes)}")
    shown = f"the {min(top, count)} largest of {count}" if count > top else f"all {count}"
    return f"live peak by line ({', '.join(peaks)}): {shown}"


def peak_table(result: TargetResult, top: int, width: int) -> list[RenderableType]:
    """``--top``'s table for one target, or one line saying why there is none."""
    if not any(name in result.variants and result.variants[name].peak for name in ("plain", "donated")):
        reasons = [
            result.variants[name].memory.unavailable.get("live_peak_bytes")
            for name in ("plain", "donated")
            if name in result.variants
        ]
        reason = next((r for r in reasons if r), "no buffer assignment")
        return [hanging("", Text(f"live peak by line: unavailable ({reason})", style="dim"))]
    rows, count = peak_rows(result, top)
    return [
        hanging("", peak_title(result, top, count)),
        fitted_table([Column("at"), Column("plain", "right"), Column("donated", "right")], rows, width),
        *(hanging("", line, style="dim") for line in space_lines(result, top)),
    ]


_SPACE_NAMES = {1: "on a TPU, VMEM"}


def space_lines(result: TargetResult, top: int) -> list[str]:
    """One line per memory space other than the device's default memory, each at its own peak: its
    largest lines (``Variant.space_peaks``), plain and donated."""
    lines = []
    spaces = sorted({b.memory_space for name in ("plain", "donated") for b in result.variants[name].space_peaks})
    for space in spaces:
        parts = []
        for name in ("plain", "donated"):
            breakdown = next((b for b in result.variants[name].space_peaks if b.memory_space == space), None)
            if breakdown is None:
                continue
            largest = ", ".join(f"{format_bytes(line.bytes)} at {_where(line)}" for line in breakdown.lines[:top])
            parts.append(f"{name} peak {format_bytes(breakdown.bytes)} ({largest})")
        what = f" ({_SPACE_NAMES[space]})" if space in _SPACE_NAMES else ""
        lines.append(f"memory space {space}{what}: " + "; ".join(parts))
    return lines
