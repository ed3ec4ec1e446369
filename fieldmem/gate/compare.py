"""Saved reports side by side: the core of ``fieldmem compare A.json B.json [C.json ...]``.

Each report (``fieldmem check --format json -o FILE``) becomes a column: cpu
against gpu, jax 0.10 against 0.11, main against a branch. Targets are matched
by name into rows; per target and report a :class:`Cell` holds the figures
of both variants, the aliases, the copies and the verdict, and each row lists
its :class:`Difference`\\ s from the first report (the reference): each a
:class:`~fieldmem.model.comparison.Change` placed in the table. Which copies and aliases
are the same in two reports, and whether a size moved beyond its tolerance, is
:mod:`fieldmem.gate.diff`'s to say, exactly as for a baseline. A figure or
copy that changed by no more than the tolerance (``--tolerance``, default
exact; ``copies:`` for a copy's size per call) is a difference that is *not
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldmem.gate.diff import (
    FIGURES,
    VARIANTS,
    CopyRecord,
    Delta,
    TargetFacts,
    array_shape,
    change_text,
    diff_targets,
    facts_of_result,
    moved,
    peak_line_text,
)
from fieldmem.model.comparison import Change
from fieldmem.model.copies import Alias, Copy
from fieldmem.model.errors import FieldmemError, OptionError, ReportError
from fieldmem.model.files import read_json
from fieldmem.model.report import REPORTS_SCHEMA, Report, Reports
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.request.tolerance import COPIES, Tolerance, Tolerances

__all__ = [
    "COMPARE_SCHEMA",
    "FIGURES",
    "FIGURE_LABELS",
    "VARIANTS",
    "AcrossSuggestion",
    "Cell",
    "Column",
    "Comparison",
    "CopyTotals",
    "Difference",
    "ReportFileError",
    "Row",
    "across_suggestion",
    "compare_files",
    "compare_reports",
    "load_report",
    "load_reports",
    "result_changes",
]

COMPARE_SCHEMA = "fieldmem.compare/1"
FIGURE_LABELS = {
    "footprint_bytes": "footprint",
    "live_peak_bytes": "live peak",
    "temp_bytes": "temp",
    "peak_bytes": "XLA peak",
}


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
    # the libraries built on jax of a report made under --jax or --python (empty: the user's own environment)
    library_versions: dict[str, str] = field(default_factory=dict)


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
    kind: str | None = None  # the verdict's kind (fieldmem.findings.verdict)
    verdict: str | None = None  # the verdict's summary sentence
    failed_checks: tuple[str, ...] = ()
    figures: dict[str, dict[str, int | None]] = field(default_factory=dict)  # variant -> figure -> bytes
    aliases: tuple[Alias, ...] = ()  # of the donated variant
    copies: dict[str, CopyTotals] = field(default_factory=dict)  # variant -> totals


@dataclass(frozen=True)
class Difference:
    """A :class:`~fieldmem.model.comparison.Change` of one report's cell from the reference's, placed in the table.

    ``field`` names the row of the table it concerns: ``status``,
    ``verdict``, ``checks``, ``donated.aliases``, ``donated.unusable_donations``, ``<variant>.copies`` or
    ``<variant>.<figure>`` (e.g. ``donated.live_peak_bytes``). The change's
    ``before`` is the reference's value; its ``message`` starts with the
    report's label.
    """

    column: int  # index of the report that differs from column 0
    field: str
    change: Change
    significant: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The difference as ``fieldmem.compare/1`` writes it (the change's target is the row's name)."""
        change = self.change
        return {
            "column": self.column,
            "field": self.field,
            "kind": change.kind,
            "subject": change.subject,
            "message": change.message,
            "before": change.before,
            "after": change.after,
            "significant": self.significant,
            "source": change.source,
        }


@dataclass(frozen=True)
class AcrossSuggestion:
    """The donation best across the reports of one target, each made with ``--suggest`` (one backend each):
    of the donations every report measured, the one with the least footprint in all (then the least that
    any report needs beyond its own best, then the fewest arguments), beside each report's own best.

    ``complete``: every report measured every donation that could lend a buffer, so no other donation does
    better in all; else it is the best of those measured everywhere (each report's best, verified there)."""

    arguments: tuple[str, ...]  # the donation best across the reports (empty: donate nothing)
    footprints: tuple[int | None, ...]  # per report: that donation's footprint there
    bests: tuple[tuple[str, ...], ...]  # per report: its own best donation
    best_footprints: tuple[int | None, ...]  # per report: its own best's footprint
    complete: bool
    summary: str


@dataclass(frozen=True)
class Row:
    """One target across every report, and its differences from the reference."""

    name: str
    cells: tuple[Cell, ...]
    differences: tuple[Difference, ...] = ()
    suggestion: AcrossSuggestion | None = None  # where every report has a --suggest of it

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
    notes: tuple[str, ...] = ()  # what the reading of a report could not take as written (a newer report's words)

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
            "rows": [
                {
                    "name": row.name,
                    "cells": [dataclasses.asdict(c) for c in row.cells],
                    "differences": [d.to_dict() for d in row.differences],
                    "suggestion": dataclasses.asdict(row.suggestion) if row.suggestion is not None else None,
                }
                for row in self.rows
            ],
            "significant_differences": len(self.significant),
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------
# Loading


def load_report(path: str | os.PathLike[str], notes: list[str] | None = None) -> Report:
    """Read a report saved by ``fieldmem check --format json -o FILE``; a word a newer fieldmem wrote that
    this one does not know (a copy kind) reads as ``"unknown"``, said in ``notes`` (named by the file).

    Raises:
        ReportFileError: the file is missing, a folder, unreadable, not JSON, or
            not a fieldmem report this version reads.
    """
    shown = str(path)
    hint = "give a JSON report written by `fieldmem check --format json -o FILE`"
    data = read_json(path, "report", ReportFileError, missing=hint, hint=hint)
    unknown: list[str] = []
    try:
        report = Report.from_dict(data, unknown)
    except ReportError as exc:
        raise ReportFileError(f"{shown!r} is not a fieldmem report: {exc}") from None
    if notes is not None:
        notes.extend(f"{shown}: {note}" for note in unknown)
    return report


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
        library_versions=dict(report.library_versions),
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
        kind=result.verdict.kind,
        verdict=result.verdict.summary,
        failed_checks=tuple(c.name for c in result.failed_checks),
        figures=figures,
        aliases=donated.aliases if donated is not None else (),
        copies=copies,
    )


# ----------------------------------------------------------------------------
# Differences


@dataclass(frozen=True)
class _Against:
    """Where the differences of one report's cell go: its column, its label, the row's target."""

    column: int
    label: str
    target: str

    def difference(
        self,
        field_name: str,
        kind: str,
        subject: str,
        message: str,
        before: int | str | None = None,
        after: int | str | None = None,
        significant: bool = True,
        source: str | None = None,
    ) -> Difference:
        change = Change(
            self.target, kind, subject, f"{self.label}: {message}" if self.label else message, before, after, source
        )
        return Difference(self.column, field_name, change, significant)


def _figure_difference(
    against: _Against, delta: Delta, tolerances: Tolerances | None, lines: Sequence[Delta] = ()
) -> Difference:
    """A figure's change; ``lines``: for the live peak, the lines whose bytes at it moved (named, the
    largest three)."""
    before, after = delta.before, delta.after
    subject = f"{delta.variant} {FIGURE_LABELS[delta.subject]}"
    if before is None or after is None:
        message = (
            f"{subject}: {format_bytes(before)} → {format_bytes(after)} (not comparable: unavailable in one report)"
        )
        significant = True
    else:
        message = f"{subject}: {change_text(before, after)}"
        if lines:
            message += " (" + ", ".join(peak_line_text(line) for line in lines[:3]) + ")"
        tolerance = tolerances.for_figure(delta.subject) if tolerances is not None else Tolerance()
        significant = moved(tolerance, before, after) != 0
    return against.difference(
        f"{delta.variant}.{delta.subject}", "figure", subject, message, before, after, significant
    )


def _alias_text(alias: Alias) -> str:
    return f"{alias.input} → {alias.output}"


def _alias_differences(against: _Against, deltas: Sequence[Delta]) -> list[Difference]:
    differences = []
    for delta in sorted((d for d in deltas if d.change == "gone"), key=lambda d: _alias_text(d.before)):
        subject = _alias_text(delta.before)
        differences.append(against.difference("donated.aliases", "alias", subject, f"alias lost: {subject}", subject))
    for delta in (d for d in deltas if d.change == "rerouted"):
        subject, after = _alias_text(delta.before), _alias_text(delta.after)
        message = f"alias rerouted: {subject} is now {after}"
        differences.append(against.difference("donated.aliases", "alias", subject, message, subject, after))
    for delta in sorted((d for d in deltas if d.change == "new"), key=lambda d: _alias_text(d.after)):
        subject = _alias_text(delta.after)
        message = f"new alias: {subject}"
        differences.append(against.difference("donated.aliases", "alias", subject, message, None, subject))
    return differences


def _describe_copy(variant: str, copy: CopyRecord) -> str:
    """``donated copy [loop] of f32[64,64] (returned as out.u) at model.py:14``."""
    what = copy.input or array_shape(copy.shape)
    text = f"{variant} copy [{copy.kind}] of {what}"
    if copy.output:
        text += f" (returned as {copy.output})"
    return text + (f" at {copy.source}" if copy.source else "")


def _copy_difference(against: _Against, delta: Delta, tolerance: Tolerance) -> Difference:
    """A copy new, gone, or of another size per call than in the reference."""
    field_name, old, now = f"{delta.variant}.copies", delta.before, delta.after
    variant = str(delta.variant)
    if old is None:
        subject = _describe_copy(variant, now)
        message = f"new {subject} ({format_bytes(now.per_call)})"
        return against.difference(field_name, "copy", subject, message, None, now.per_call, source=now.source)
    if now is None:
        subject = _describe_copy(variant, old)
        message = f"{subject} is gone ({format_bytes(old.per_call)})"
        return against.difference(field_name, "copy", subject, message, old.per_call, None, source=old.source)
    subject = _describe_copy(variant, now)
    significant = moved(tolerance, old.per_call, now.per_call) != 0
    return against.difference(
        field_name,
        "copy",
        subject,
        f"{subject}: {change_text(old.per_call, now.per_call)}",
        old.per_call,
        now.per_call,
        significant,
        now.source,
    )


# the field of a donation's difference: a row of its own in the documents, not the aliases' (whose count
# it does not change: a table would mark equal counts as differing)
_DONATIONS = "donated.unusable_donations"


def _donation_difference(against: _Against, delta: Delta) -> Difference:
    """A donated leaf no output could take, now (new) or no longer (gone)."""
    if delta.change == "new":
        donation = delta.after
        message = f"donation of {delta.subject} is now unusable ({format_bytes(donation.bytes)}): {donation.reason}"
        return against.difference(_DONATIONS, "donation", delta.subject, message, None, donation.bytes)
    message = f"donation of {delta.subject} is usable again ({format_bytes(delta.before.bytes)})"
    return against.difference(_DONATIONS, "donation", delta.subject, message, delta.before.bytes, None)


def _status_word(status: str) -> str:
    return {"missing": "missing", "error": "could not be checked"}.get(status, "checked")


def _below(delta: Delta, min_bytes: int) -> bool:
    """A figure's or a copy's size that moved by less than ``min_bytes`` (with a value on both sides)."""
    if delta.kind == "figure" and delta.before is not None and delta.after is not None:
        return bool(abs(delta.after - delta.before) < max(min_bytes, 1))
    if delta.kind == "copy" and delta.change in ("grew", "shrank"):
        return bool(abs(delta.after.per_call - delta.before.per_call) < max(min_bytes, 1))
    return False


def _differences(
    against: _Against,
    before: TargetFacts,
    after: TargetFacts,
    min_bytes: int,
    tolerances: Tolerances | None,
) -> list[Difference]:
    """The deltas from ``before`` to ``after`` (:func:`~fieldmem.gate.diff.diff_targets`) as compare words
    them: the status alone when it differs; else the verdict, the checks, the donated variant's
    aliases, both variants' copies and figures, then the donated variant's donations."""
    deltas = diff_targets(before, after, min_bytes)
    if tolerances is None:  # exact, as no one set it: a move below --min-bytes is no difference (4 B of alignment)
        deltas = tuple(d for d in deltas if not _below(d, min_bytes))
    differences = []
    for delta in deltas:
        if delta.kind == "status":
            detail = f": {after.error}" if after.error else ""
            message = f"{_status_word(delta.before)} in the reference, {_status_word(delta.after)} here{detail}"
            return [against.difference("status", "status", "status", message, delta.before, delta.after)]
        if delta.kind == "verdict":
            words = {True: "in place", False: "not in place"}
            was, now = words[bool(delta.before)], words[bool(delta.after)]
            message = f"verdict {was} → {now} ({after.verdict})"
            differences.append(against.difference("verdict", "verdict", "verdict", message, was, now))
        elif delta.kind == "check":
            state = "fails" if delta.change == "new" else "passes"
            was_state, now_state = ("passed", "failed") if delta.change == "new" else ("failed", "passed")
            message = f"check {delta.subject} now {state}"
            differences.append(against.difference("checks", "check", delta.subject, message, was_state, now_state))
    donated = [d for d in deltas if d.variant == "donated"]
    differences += _alias_differences(against, [d for d in donated if d.kind == "alias"])
    tolerance = tolerances.for_figure(COPIES) if tolerances is not None else Tolerance()
    differences += [_copy_difference(against, d, tolerance) for d in deltas if d.kind == "copy"]
    lines = {v: [d for d in deltas if d.kind == "peak-line" and d.variant == v] for v in ("donated", "plain")}
    differences += [
        _figure_difference(
            against, d, tolerances, lines.get(d.variant or "", []) if d.subject == "live_peak_bytes" else []
        )
        for d in deltas
        if d.kind == "figure"
    ]
    differences += [_donation_difference(against, d) for d in donated if d.kind == "donation"]
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
    tolerances: Tolerances | None = None,
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
        facts = [facts_of_result(result) for result in results]
        differences: list[Difference] = []
        for column in range(1, len(cells)):
            against = _Against(column, labels[column], name)
            differences += _differences(against, facts[0], facts[column], threshold, tolerances)
        across = across_suggestion(results, labels)
        rows.append(Row(name=name, cells=cells, differences=tuple(differences), suggestion=across))
    return Comparison(
        columns=columns,
        rows=tuple(rows),
        tolerance=tolerances.describe() if tolerances is not None else "exact",
        min_bytes=threshold,
    )


def _spec(arguments: Sequence[str]) -> str:
    return ", ".join(arguments) if arguments else "nothing"


def across_suggestion(results: Sequence[TargetResult | None], labels: Sequence[str]) -> AcrossSuggestion | None:
    """The donation best across ``results`` (one target in each report, each with a ``--suggest``): see
    :class:`AcrossSuggestion`. None where a report lacks the target or its suggestion, or no donation was
    measured in all."""
    suggestions = [r.suggestion if r is not None else None for r in results]
    if len(suggestions) < 2 or any(s is None or not s.measured for s in suggestions):
        return None
    tables: list[dict[frozenset[str], int]] = []
    order: dict[str, int] = {}
    for suggestion in suggestions:
        assert suggestion is not None
        for advice in suggestion.arguments:  # the call's order
            order.setdefault(advice.argument, len(order))
        table: dict[frozenset[str], int] = {}
        for measured in suggestion.measured:
            for name in measured.arguments:
                order.setdefault(name, len(order))
            if measured.footprint_bytes is not None:
                table[frozenset(measured.arguments)] = measured.footprint_bytes
        tables.append(table)
    common = set(tables[0]).intersection(*tables[1:])
    if not common:
        return None
    # each report's own best: the donation its suggestion chose (within --min-bytes of the least, the fewest
    # arguments), where it measured it; else the least it measured
    bests = []
    for suggestion, table in zip(suggestions, tables):
        assert suggestion is not None
        chose = frozenset(a.argument for a in suggestion.arguments if a.donate)
        bests.append(chose if chose in table else min(table, key=lambda key: (table[key], len(key))))

    def regret(key: frozenset[str]) -> int:
        return max(table[key] - table[best] for table, best in zip(tables, bests))

    chosen = min(
        common,
        key=lambda key: (sum(t[key] for t in tables), regret(key), len(key), sorted(order[name] for name in key)),
    )
    arguments = tuple(sorted(chosen, key=order.__getitem__))
    own = [tuple(sorted(best, key=order.__getitem__)) for best in bests]
    complete = all(s is not None and s.searched for s in suggestions)
    parts = []
    for label, table, best, named in zip(labels, tables, bests, own):
        if table[chosen] == table[best] or best == chosen:
            parts.append(f"{format_bytes(table[chosen])} on {label} (its best)")
        else:
            parts.append(
                f"{format_bytes(table[chosen])} on {label} ({format_bytes(table[chosen] - table[best])} more than its "
                f"best, {_spec(named)}: {format_bytes(table[best])})"
            )
    how = (
        "of every donation measured on each"
        if complete
        else "of the donations measured on every one (not every donation was measured on each)"
    )
    summary = f"across {', '.join(labels)}: donate {_spec(arguments)}, the least footprint in all {how}: " + "; ".join(
        parts
    )
    return AcrossSuggestion(
        arguments=arguments,
        footprints=tuple(table[chosen] for table in tables),
        bests=tuple(own),
        best_footprints=tuple(table[best] for table, best in zip(tables, bests)),
        complete=complete,
        summary=summary,
    )


def result_changes(before: TargetResult | None, after: TargetResult | None, min_bytes: int) -> tuple[Change, ...]:
    """What changed for one target between two checks of it (``fieldmem check --watch``): every delta as
    ``fieldmem compare`` words it (exact), without a column's label. None ``before``: a new target."""
    named = after if after is not None else before
    against = _Against(0, "", named.name if named is not None else "")
    return tuple(
        d.change for d in _differences(against, facts_of_result(before), facts_of_result(after), min_bytes, None)
    )


def compare_files(
    paths: Sequence[str | os.PathLike[str]],
    tolerances: Tolerances | None = None,
    min_bytes: int | None = None,
) -> Comparison:
    """Load each saved report and compare them (see :func:`compare_reports`).

    Raises:
        OptionError: fewer than two reports (a file of several reports counts each).
        ReportFileError: a file that is not a readable fieldmem report.
    """
    if not paths:
        raise OptionError("compare needs at least two reports, got 0: e.g. fieldmem compare cpu.json gpu.json")
    notes: list[str] = []
    loaded = [pair for p in paths for pair in load_reports(p, notes)]
    comparison = compare_reports(loaded, tolerances, min_bytes)
    return dataclasses.replace(comparison, notes=tuple(notes))


def load_reports(path: str | os.PathLike[str], notes: list[str] | None = None) -> list[tuple[str, Report]]:
    """The reports of one file, each with its label: a report (``-o FILE``), or each report of a document of
    several (``fieldmem.reports/1``: ``fieldmem check --backend cpu,tpu:v5e -f json > FILE``), labelled
    ``FILE (cpu)``.

    Raises:
        ReportFileError: as :func:`load_report`.
    """
    shown = str(path)
    hint = "give a JSON report written by `fieldmem check --format json -o FILE`"
    data = read_json(path, "report", ReportFileError, missing=hint, hint=hint)
    if not (isinstance(data, dict) and data.get("schema") == REPORTS_SCHEMA):
        return [(shown, load_report(path, notes))]
    unknown: list[str] = []
    try:
        several = Reports.from_dict(data, unknown)
    except ReportError as exc:
        raise ReportFileError(f"{shown!r} is not a fieldmem report: {exc}") from None
    if notes is not None:
        notes.extend(f"{shown}: {note}" for note in unknown)
    versions = {r.jax_version for r in several.reports}
    return [
        (f"{shown} ({r.backend}{f' · jax {r.jax_version}' if len(versions) > 1 else ''})", r) for r in several.reports
    ]
