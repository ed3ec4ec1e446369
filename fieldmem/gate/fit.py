"""Frontiers over time: ``fieldmem fit``'s baseline gate, and fit documents side by side.

A fit baseline is a ``fieldmem.fit/1`` document (``--save-baseline``, written only by a run that passed,
atomically, keeping the searches of other steps and backends). :func:`compare_to_baseline` matches each
search with the baseline's of the same key (the step's name, the backend, the searched knob and the listed
knobs' names) and each row with the row of the same listed values: a frontier that is lower, or a row that
no longer fits at all, is a regression (the run exits 1); a higher one is said, not gated.
:func:`compare_fits` puts several runs' frontiers side by side (``fieldmem compare a.json b.json``,
``fieldmem fit --jax A,B``), the first the reference.

Pure but for reading and writing the files named; never prints, never imports jax.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fieldmem.model.errors import FieldmemError, FitReportError
from fieldmem.model.files import read_json
from fieldmem.model.fit_report import (
    ComparedRow,
    ComparedSearch,
    FitBaseline,
    FitComparison,
    FitReport,
    FitRow,
    FitSearch,
    FrontierMove,
    KnobValue,
    knob_text,
    values_text,
)

__all__ = [
    "FitBaselineError",
    "baseline_to_save",
    "compare_fits",
    "compare_to_baseline",
    "is_fit_document",
    "load_fit_report",
]


class FitBaselineError(FieldmemError):
    """A fit baseline or document cannot be read or written. Exit code 2."""

    kind = "baseline"


def is_fit_document(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a ``fieldmem.fit`` document (read cheaply: its ``schema``; anything that cannot
    be read is not one, and its own reader says why)."""
    try:
        data = read_json(path, "report", FitBaselineError, missing="", hint="")
    except FitBaselineError:
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("fieldmem.fit/")


def load_fit_report(path: str | os.PathLike[str], what: str = "fit baseline") -> FitReport:
    """The ``fieldmem.fit`` document in ``path``.

    Raises:
        FitBaselineError: the file is missing, unreadable, not JSON or not a fit document; one line naming it.
    """
    shown = os.fspath(path)
    hint = "give a document written by fieldmem fit -f json -o FILE or --save-baseline FILE"
    data = read_json(
        path, what, FitBaselineError, missing=f"create it with fieldmem fit ... --save-baseline {shown}", hint=hint
    )
    try:
        return FitReport.from_dict(data)
    except FitReportError as exc:
        extra = ""
        if isinstance(data, dict) and str(data.get("schema", "")).startswith(
            ("fieldmem.report/", "fieldmem.baseline/")
        ):
            extra = f" (it is {data['schema']}, written by fieldmem check)"
        raise FitBaselineError(f"{what} {shown!r} is not a fit document{extra}: {exc.message}") from None


def _same(a: dict[str, KnobValue], b: dict[str, KnobValue]) -> bool:
    return a == b and all(type(a[k]) is type(b[k]) for k in a)


def _row_in(search: FitSearch | None, fixed: dict[str, KnobValue]) -> FitRow | None:
    if search is None:
        return None
    return next((row for row in search.rows if _same(row.fixed, fixed)), None)


def _frontier(row: FitRow | None) -> KnobValue | None:
    return row.largest if row is not None and row.status in ("found", "all-fit") else None


def _move(fixed: dict[str, KnobValue], before: FitRow | None, after: FitRow | None) -> FrontierMove:
    if before is None:
        return FrontierMove(fixed, "new", after=_frontier(after), after_status=after.status if after else None)
    if after is None:
        return FrontierMove(fixed, "gone", before=_frontier(before), before_status=before.status)
    a, b = _frontier(before), _frontier(after)
    if a is not None and b is not None and a != b:
        change = "higher" if b > a else "lower"  # type: ignore[operator]
    elif (a is None) != (b is None) or before.status != after.status:
        change = "changed"
    else:
        change = "same"
    return FrontierMove(fixed, change, a, b, before.status, after.status)  # type: ignore[arg-type]


def _regression(move: FrontierMove, searched: str | None) -> str | None:
    """A move that gates: a lower frontier, or a row that fitted and now does not (or cannot be told)."""
    label = f"{values_text(move.fixed)}: " if move.fixed else ""
    name = searched or "it"
    if move.change == "lower":
        return f"{label}the largest {name} that fits went from {knob_text(move.before)} to {knob_text(move.after)}"  # type: ignore[arg-type]
    if move.change == "changed" and move.before is not None and move.after is None:
        now = {
            "none-fit": "none fits",
            "error": "a point could not be compiled",
            "unknown": "it is not known",
            "budget": "--budget stopped the search",
        }.get(move.after_status or "", move.after_status or "")
        return f"{label}the largest {name} that fits was {knob_text(move.before)}, now {now}"
    if move.change == "changed" and move.before_status == "all-fit" and move.after_status == "found":
        return f"{label}every {name} fitted, now the largest is {knob_text(move.after)}"  # type: ignore[arg-type]
    return None


def compare_to_baseline(report: FitReport, baseline: FitReport, file: str) -> FitReport:
    """``report`` with each search compared with its baseline entry (:class:`~fieldmem.model.fit_report.FitBaseline`)."""
    entries = {s.key: s for s in baseline.searches}
    searches = []
    for search in report.searches:
        before = entries.get(search.key)
        if before is None or search.error is not None:
            searches.append(dataclasses.replace(search, baseline=FitBaseline(file, found=before is not None)))
            continue
        fixeds = [row.fixed for row in before.rows] + [
            row.fixed for row in search.rows if _row_in(before, row.fixed) is None
        ]
        moves = tuple(_move(fixed, _row_in(before, fixed), _row_in(search, fixed)) for fixed in fixeds)
        regressions = tuple(r for r in (_regression(m, search.searched) for m in moves) if r is not None)
        searches.append(dataclasses.replace(search, baseline=FitBaseline(file, moves, regressions)))
    return dataclasses.replace(report, searches=tuple(searches))


def baseline_to_save(path: str | os.PathLike[str], report: FitReport) -> FitReport:
    """What ``--save-baseline path`` records: ``report``'s searches, each in place of the entry of its key,
    and the other entries the file already has (none when it does not exist yet).

    Raises:
        FitBaselineError: the existing file is not a fit document (it is never overwritten then).
    """
    kept: list[FitSearch] = []
    if Path(path).exists():
        old = load_fit_report(path)
        keys = {s.key for s in report.searches}
        kept = [s for s in old.searches if s.key not in keys]
    searches = tuple(dataclasses.replace(s, baseline=None) for s in (*kept, *report.searches))
    return dataclasses.replace(report, searches=searches)


def compare_fits(labelled: Sequence[tuple[str, FitReport]], across_backends: bool = False) -> FitComparison:
    """The frontiers of every search in ``labelled`` runs side by side, matched by key and row, the first run
    the reference (a row moved where its frontier or status differs from the first run's).
    ``across_backends``: each run is another backend (``cpu.json`` against ``tpu.json``), so searches are
    matched without it."""

    def key_of(search: FitSearch) -> Any:
        name, _backend, searched, listed = search.key
        return (name, searched, listed) if across_backends else search.key

    keys: list[Any] = []
    titles: dict[Any, tuple[str, str]] = {}
    for _, report in labelled:
        for search in report.searches:
            key = key_of(search)
            if key not in keys:
                keys.append(key)
                where = "" if across_backends else f" on {search.backend}"
                titles[key] = (
                    f"{search.name}{where}",
                    f"largest {search.searched} that fits" if search.searched else "fits",
                )
    entries = []
    for key in keys:
        found = [next((s for s in report.searches if key_of(s) == key), None) for _, report in labelled]
        fixeds: list[dict[str, KnobValue]] = []
        for candidate in found:
            for row in candidate.rows if candidate is not None else ():
                if not any(_same(row.fixed, f) for f in fixeds):
                    fixeds.append(row.fixed)
        rows = []
        for fixed in fixeds:
            cells = [_row_in(candidate, fixed) for candidate in found]
            values = tuple(_frontier(c) for c in cells)
            statuses = tuple(c.status if c is not None else None for c in cells)
            reference = (values[0], statuses[0])
            moved = tuple(n > 0 and (values[n], statuses[n]) != reference for n in range(len(cells)))
            rows.append(ComparedRow(values_text(fixed), values, statuses, moved))
        title, searched_label = titles[key]
        entries.append(ComparedSearch(title, searched_label, tuple(rows)))
    return FitComparison(tuple(label for label, _ in labelled), tuple(entries))
