"""Saving a run's reports in a baseline: the one loop that ``fieldmem check --save-baseline`` and the pytest
plugin's ``--fieldmem-save-baseline`` both run. It never prints: each caller says what was saved, or why not,
where its user reads it (stderr, pytest's terminal summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fieldmem.gate.baseline import BaselineError, save_baseline

if TYPE_CHECKING:
    from fieldmem.gate.baseline import SavedBaseline
    from fieldmem.model.report import Report

__all__ = ["save_reports"]


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
