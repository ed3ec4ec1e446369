"""A run's reports against a baseline: gating them (:func:`gate_reports`) and saving them (:func:`save_reports`),
the one path that ``fieldmem check --baseline/--save-baseline`` and the pytest plugin's
``--fieldmem-baseline/--fieldmem-save-baseline`` both take. It never prints: each caller says what was gated
and saved, or why not, where its user reads it (stderr, pytest's terminal summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fieldmem.gate.baseline import BaselineError, compare_to_baseline, gate_as_recorded, save_baseline

if TYPE_CHECKING:
    from fieldmem.gate.baseline import Baseline, SavedBaseline
    from fieldmem.model.report import Report
    from fieldmem.request.tolerance import Tolerances

__all__ = ["gate_reports", "save_reports"]


def gate_reports(
    reports: Sequence[Report],
    baseline: Baseline | None,
    tolerances: Tolerances,
    *,
    root: Path | None = None,
    record_to: Path | None = None,
) -> tuple[Report, ...]:
    """Each report (one per backend) with its comparison against ``baseline`` (None: as they are).

    ``record_to`` (``--accept-current``): each report gated as it will be recorded in that file instead, so
    that the run shows, and exits as, what the next run against the file will. File targets are named
    relative to ``root`` (the config's folder; None: the baseline's).
    """
    if record_to is not None:
        return tuple(gate_as_recorded(report, record_to, root=root) for report in reports)
    if baseline is None:
        return tuple(reports)
    return tuple(compare_to_baseline(report, baseline, tolerances, root=root) for report in reports)


def save_reports(
    reports: Sequence[Report],
    path: Path,
    *,
    prune: bool = False,
    root: Path | None = None,
    accept_current: bool = False,
) -> tuple[list[SavedBaseline], tuple[Report, BaselineError] | None]:
    """Record every report (one per backend) in the baseline file at ``path``; what was saved, and the report
    whose save was refused with its error (None: every one was saved).

    A failing report is tried first, so that a refused save writes no backend's entries; the first refusal
    ends the loop. File targets are named relative to ``root`` (the config's folder; None: the baseline's).
    """
    saved: list[SavedBaseline] = []
    for report in sorted(reports, key=lambda r: r.exit_code == 0):  # a refused save writes no backend
        try:
            saved.append(save_baseline(path, report, prune=prune, root=root, accept_current=accept_current))
        except BaselineError as exc:
            return saved, (report, exc)
    return saved, None
