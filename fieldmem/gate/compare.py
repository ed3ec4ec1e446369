"""Saved reports side by side: the core of ``fieldmem compare A.json B.json [C.json ...]``.

Each report (``fieldmem check --format json -o FILE``) becomes a column: cpu
against gpu, jax 0.10 against 0.11, main against a branch. Targets are matched
by name into rows; per target and report a :class:`Cell` holds the figures
of both variants, the aliases, the copies and the verdict, and each row lists
its :class:`Difference`\\ s from the first report (the reference). A figure or
copy that changed by no more than the tolerance (``--tolerance``, default
exact; ``copies:`` for a copy's size) is a difference that is *not
significant*, in either direction; a verdict, an alias, a new or vanished
copy, a failed check or a missing target always is significant.

Everything here is immutable and computed once; the renderers in
:mod:`fieldmem.render.compare` only format it, and ``Comparison.to_dict()`` is
the ``fieldmem.compare/1`` JSON documented in ``docs/ci.md``. This module never
prints, never exits and imports no jax: comparing needs no compiler.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from fieldmem.errors import FieldmemError, OptionError
from fieldmem.files import read_json
from fieldmem.report import Alias, Copy, Report, ReportError, TargetResult
from fieldmem.units import format_bytes

if TYPE_CHECKING:
    from fieldmem.gate.tolerance import Tolerance, Tolerances

__all__ = [
    "COMPARE_SCHEMA",
    "FIGURES",
    "FIGURE_LABELS",
    "VARIANTS",
    "Cell",
    "Column",
    "Comparison",
    "CopyTotals",
    "Difference",
    "ReportFileError",
    "Row",
    "compare_files",
    "compare_reports",
    "load_report",
]

COMPARE_SCHEMA = "fieldmem.compare/1"
VARIANTS = ("donated", "plain")
FIGURES = ("footprint_bytes", "live_peak_bytes", "temp_bytes", "peak_bytes")
FIGURE_LABELS = {
    "footprint_bytes": "footprint",
    "live_peak_bytes": "live peak",
    "temp_bytes": "temp",
    "peak_bytes": "XLA peak",
}
_LAYOUT = re.compile(r"\{[^}]*\}")


class ReportFileError(FieldmemError):
    """A file given to ``compare`` is missing, unreadable, not JSON or not a fieldmem report."""

    kind = "report"


@dataclass(frozen=True)
class Column:
    """One report: where it came from and what produced it."""

    label: str  # the file name, or the path as given when two files share a name
    path: str
    backend: str
    device_kind: str | None
    device_count: int
    jax_version: str
    jaxlib_version: str
    fieldmem_version: str
    created: str | None


@dataclass(frozen=True)
class CopyTotals:
    """The copies of one variant that are at least ``min_bytes``: how many, how many bytes."""

    count: int
    bytes: int


@dataclass(frozen=True)
class Cell:
    """One target in one report. ``status``: ``ok``, ``error`` (could not be checked) or ``missing``."""

    status: str
    error: str | None = None
    in_place: bool | None = None
    verdict: str | None = None  # the verdict's summary sentence
    failed_checks: tuple[str, ...] = ()
    figures: dict[str, dict[str, int | None]] = field(default_factory=dict)  # variant -> figure -> bytes
    aliases: tuple[Alias, ...] = ()  # of the donated variant
    copies: dict[str, CopyTotals] = field(default_factory=dict)  # variant -> totals


@dataclass(frozen=True)
class Difference:
    """How one report's cell differs from the reference's.

    ``field`` names what differs, as the renderers' rows do: ``status``,
    ``verdict``, ``checks``, ``donated.aliases``, ``<variant>.copies`` or
    ``<variant>.<figure>`` (e.g. ``donated.live_peak_bytes``).
    """

    column: int  # index of the report that differs from column 0
    field: str
    kind: str  # status | verdict | check | alias | copy | figure
    subject: str  # the figure, alias, copy or check concerned, in words
    message: str  # the whole change in words
    before: int | str | None = None  # the reference's value
    after: int | str | None = None
    significant: bool = True
    source: str | None = None  # file.py:LINE of the copy concerned


@dataclass(frozen=True)
class Row:
    """One target across every report, and its differences from the reference."""

    name: str
    cells: tuple[Cell, ...]
    differences: tuple[Difference, ...] = ()

    def differences_in(self, column: int, field_name: str) -> tuple[Difference, ...]:
        """The differences of report ``column`` in one field (what a renderer highlights)."""
        return tuple(d for d in self.differences if d.column == column and d.field == field_name)


@dataclass(frozen=True)
class Comparison:
    """Reports side by side; column 0 is the reference every difference is taken against."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    tolerance: str  # "exact", or the tolerances in words
    min_bytes: int  # copies smaller than this are not counted or compared
    schema: str = COMPARE_SCHEMA

    @property
    def significant(self) -> tuple[tuple[str, Difference], ...]:
        """Every significant difference, with the name of its target."""
        return tuple((row.name, d) for row in self.rows for d in row.differences if d.significant)

    def exit_code(self, fail_on_diff: bool) -> int:
        """1 when ``fail_on_diff`` and any difference is significant, else 0."""
        return 1 if fail_on_diff and self.significant else 0

    def to_dict(self) -> dict[str, Any]:
        """The ``fieldmem.compare/1`` document (see docs/ci.md)."""
        return {
            "schema": self.schema,
            "tolerance": self.tolerance,
            "min_bytes": self.min_bytes,
            "columns": [dataclasses.asdict(c) for c in self.columns],
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "significant_differences": len(self.significant),
        }


# ----------------------------------------------------------------------------
# Loading


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read a report saved by ``fieldmem check --format json -o FILE``.

    Raises:
        ReportFileError: the file is missing, a folder, unreadable, not JSON, or
            not a fieldmem report this version reads.
    """
    shown = str(path)
    hint = "give a JSON report written by `fieldmem check --format json -o FILE`"
    data = read_json(path, "report", ReportFileError, missing=hint, hint=hint)
    try:
        return Report.from_dict(data)
    except ReportError as exc:
        raise ReportFileError(f"{shown!r} is not a fieldmem report: {exc}") from None


def _labels(paths: Sequence[str]) -> list[str]:
    """File names, unless two share one: then the paths as given (numbered if still equal)."""
    names = [Path(p).name or p for p in paths]
    labels = names if len(set(names)) == len(names) else list(paths)
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return unique


def _column(label: str, path: str, report: Report) -> Column:
    kinds = [d.kind or d.platform for d in report.devices]
    return Column(
        label=label,
        path=path,
        backend=report.backend,
        device_kind=kinds[0] if kinds else None,
        device_count=len(kinds),
        jax_version=report.jax_version,
        jaxlib_version=report.jaxlib_version,
        fieldmem_version=report.fieldmem_version,
        created=report.created,
    )


# ----------------------------------------------------------------------------
# Cells


def _shown(copies: Iterable[Copy], min_bytes: int) -> list[Copy]:
    return [c for c in copies if c.bytes >= min_bytes]


def _cell(result: TargetResult | None, min_bytes: int) -> Cell:
    if result is None:
        return Cell(status="missing")
    if result.status != "ok" or result.verdict is None:
        return Cell(status="error", error=result.error.message if result.error is not None else "unknown error")
    figures: dict[str, dict[str, int | None]] = {}
    copies: dict[str, CopyTotals] = {}
    for name in VARIANTS:
        variant = result.variants.get(name)
        figures[name] = {f: getattr(variant.memory, f) if variant is not None else None for f in FIGURES}
        shown = _shown(variant.copies, min_bytes) if variant is not None else []
        copies[name] = CopyTotals(count=len(shown), bytes=sum(c.bytes for c in shown))
    donated = result.variants.get("donated")
    return Cell(
        status="ok",
        in_place=result.verdict.in_place,
        verdict=result.verdict.summary,
        failed_checks=tuple(c.name for c in result.failed_checks),
        figures=figures,
        aliases=donated.aliases if donated is not None else (),
        copies=copies,
    )


# ----------------------------------------------------------------------------
# Differences


def _change(before: int, after: int) -> str:
    delta = after - before
    text = f"{'+' if delta > 0 else ''}{format_bytes(delta)}"
    if before:
        text += f", {'+' if delta > 0 else ''}{100 * delta / before:.1f}%"
    return text


def _within(tolerance: "Tolerance | None", before: int, after: int) -> bool:
    """Equal within the tolerance in either direction (None: exact)."""
    if tolerance is None:
        return before == after
    return tolerance.allows(before, after) and tolerance.allows(after, before)


def _figure_differences(
    column: int, label: str, ref: Cell, other: Cell, tolerances: "Tolerances | None"
) -> list[Difference]:
    differences = []
    for variant in VARIANTS:
        for figure in FIGURES:
            before, after = ref.figures[variant][figure], other.figures[variant][figure]
            if before == after:
                continue
            subject = f"{variant} {FIGURE_LABELS[figure]}"
            if before is None or after is None:
                message = f"{subject}: {format_bytes(before)} → {format_bytes(after)} (not comparable: unavailable in one report)"
                significant = True
            else:
                message = f"{subject}: {format_bytes(before)} → {format_bytes(after)} ({_change(before, after)})"
                tolerance = tolerances.for_figure(figure) if tolerances is not None else None
                significant = not _within(tolerance, before, after)
            differences.append(
                Difference(column, f"{variant}.{figure}", "figure", subject, f"{label}: {message}", before, after, significant)
            )
    return differences


def _alias_differences(column: int, label: str, ref: Cell, other: Cell) -> list[Difference]:
    before = {(a.input, a.output) for a in ref.aliases}
    after = {(a.input, a.output) for a in other.aliases}
    differences = []
    for pair in sorted(before - after):
        subject = f"{pair[0]} → {pair[1]}"
        differences.append(
            Difference(column, "donated.aliases", "alias", subject, f"{label}: alias lost: {subject}", subject, None)
        )
    for pair in sorted(after - before):
        subject = f"{pair[0]} → {pair[1]}"
        differences.append(
            Difference(column, "donated.aliases", "alias", subject, f"{label}: new alias: {subject}", None, subject)
        )
    return differences


_CopyKey = tuple[str, str, str, str]  # kind, what it copies, output, source


def _copy_key(copy: Copy) -> _CopyKey:
    # layouts differ between backends for the same array: identify a copy without it
    what = copy.of_parameter or _LAYOUT.sub("", copy.shape)
    return (copy.kind, what, copy.output or "", copy.source or "")


def _copy_groups(copies: Iterable[Copy]) -> dict[_CopyKey, tuple[int, int]]:
    groups: dict[_CopyKey, tuple[int, int]] = {}
    for copy in copies:
        count, total = groups.get(_copy_key(copy), (0, 0))
        groups[_copy_key(copy)] = (count + 1, total + copy.bytes)
    return groups


def _describe_copy(variant: str, key: _CopyKey) -> str:
    kind, what, output, source = key
    text = f"{variant} copy [{kind}] of {what}"
    if output:
        text += f" (returned as {output})"
    return text + (f" at {source}" if source else "")


def _copy_differences(
    column: int,
    label: str,
    ref_result: TargetResult,
    other_result: TargetResult,
    min_bytes: int,
    tolerances: "Tolerances | None",
) -> list[Difference]:
    differences = []
    for variant in VARIANTS:
        ref_variant, other_variant = ref_result.variants.get(variant), other_result.variants.get(variant)
        before = _copy_groups(_shown(ref_variant.copies, min_bytes) if ref_variant else [])
        after = _copy_groups(_shown(other_variant.copies, min_bytes) if other_variant else [])
        for key in list(before) + [k for k in after if k not in before]:
            (count_before, bytes_before), (count_after, bytes_after) = before.get(key, (0, 0)), after.get(key, (0, 0))
            if (count_before, bytes_before) == (count_after, bytes_after):
                continue
            subject = _describe_copy(variant, key)
            source = key[3] or None
            if count_before == 0:
                message, significant = f"new {subject} ({format_bytes(bytes_after)})", True
            elif count_after == 0:
                message, significant = f"{subject} is gone ({format_bytes(bytes_before)})", True
            elif count_before != count_after:
                message = f"{subject}: {count_before} → {count_after} copies ({format_bytes(bytes_before)} → {format_bytes(bytes_after)})"
                significant = True
            else:
                message = f"{subject}: {format_bytes(bytes_before)} → {format_bytes(bytes_after)} ({_change(bytes_before, bytes_after)})"
                tolerance = tolerances.for_figure("copies") if tolerances is not None else None
                significant = not _within(tolerance, bytes_before, bytes_after)
            differences.append(
                Difference(
                    column, f"{variant}.copies", "copy", subject, f"{label}: {message}",
                    bytes_before if count_before else None, bytes_after if count_after else None, significant, source,
                )
            )
    return differences


def _status_word(cell: Cell) -> str:
    return {"missing": "missing", "error": "could not be checked"}.get(cell.status, "checked")


def _differences(
    column: int,
    label: str,
    reference: tuple[Cell, TargetResult | None],
    other: tuple[Cell, TargetResult | None],
    min_bytes: int,
    tolerances: "Tolerances | None",
) -> list[Difference]:
    (ref, ref_result), (cell, result) = reference, other
    if ref.status != cell.status:
        detail = f": {cell.error}" if cell.error else ""
        message = f"{label}: {_status_word(ref)} in the reference, {_status_word(cell)} here{detail}"
        return [Difference(column, "status", "status", "status", message, ref.status, cell.status)]
    if ref.status != "ok" or ref_result is None or result is None:
        return []
    differences = []
    if ref.in_place != cell.in_place:
        words = {True: "in place", False: "not in place"}
        before, after = words[bool(ref.in_place)], words[bool(cell.in_place)]
        differences.append(
            Difference(column, "verdict", "verdict", "verdict", f"{label}: verdict {before} → {after} ({cell.verdict})", before, after)
        )
    for name in sorted(set(ref.failed_checks) ^ set(cell.failed_checks)):
        now = "fails" if name in cell.failed_checks else "passes"
        before_state, after_state = ("passed", "failed") if now == "fails" else ("failed", "passed")
        differences.append(
            Difference(column, "checks", "check", name, f"{label}: check {name} now {now}", before_state, after_state)
        )
    differences += _alias_differences(column, label, ref, cell)
    differences += _copy_differences(column, label, ref_result, result, min_bytes, tolerances)
    differences += _figure_differences(column, label, ref, cell, tolerances)
    return differences


# ----------------------------------------------------------------------------
# The comparison


def _by_name(report: Report) -> dict[str, TargetResult]:
    """Results keyed by name; a name checked twice in one report keeps both (``name #2``)."""
    results: dict[str, TargetResult] = {}
    for result in report.results:
        name, n = result.name, 1
        while name in results:
            n += 1
            name = f"{result.name} #{n}"
        results[name] = result
    return results


def compare_reports(
    reports: Sequence[tuple[str, Report]],
    tolerances: "Tolerances | None" = None,
    min_bytes: int | None = None,
) -> Comparison:
    """Compare ``(path, report)`` pairs side by side against the first.

    Arguments:
        reports: two or more; the first is the reference.
        tolerances: how much a figure or a copy's size may change and still be
            equal (``Tolerances.parse("peak:5%,temp:1MiB")``); None: exact.
        min_bytes: copies smaller than this are neither counted nor compared;
            None: the largest ``min_bytes`` the reports were made with.

    Raises:
        OptionError: fewer than two reports.
    """
    if len(reports) < 2:
        raise OptionError(
            f"compare needs at least two reports, got {len(reports)}: e.g. fieldmem compare cpu.json gpu.json"
        )
    threshold = min_bytes if min_bytes is not None else max(r.min_bytes for _, r in reports)
    labels = _labels([path for path, _ in reports])
    columns = tuple(_column(label, path, report) for label, (path, report) in zip(labels, reports))
    indexed = [_by_name(report) for _, report in reports]
    names = list(dict.fromkeys(name for results in indexed for name in results))
    rows = []
    for name in names:
        results = [results.get(name) for results in indexed]
        cells = tuple(_cell(result, threshold) for result in results)
        differences: list[Difference] = []
        for column in range(1, len(cells)):
            differences += _differences(
                column, labels[column], (cells[0], results[0]), (cells[column], results[column]), threshold, tolerances
            )
        rows.append(Row(name=name, cells=cells, differences=tuple(differences)))
    return Comparison(
        columns=columns,
        rows=tuple(rows),
        tolerance=tolerances.describe() if tolerances is not None else "exact",
        min_bytes=threshold,
    )


def compare_files(
    paths: Sequence[str | os.PathLike[str]],
    tolerances: "Tolerances | None" = None,
    min_bytes: int | None = None,
) -> Comparison:
    """Load each saved report and compare them (see :func:`compare_reports`).

    Raises:
        OptionError: fewer than two paths.
        ReportFileError: a file that is not a readable fieldmem report.
    """
    if len(paths) < 2:
        raise OptionError(
            f"compare needs at least two reports, got {len(paths)}: e.g. fieldmem compare cpu.json gpu.json"
        )
    return compare_reports([(str(p), load_report(p)) for p in paths], tolerances, min_bytes)
