"""Plain text for a baseline comparison, and for what ``--save-baseline`` wrote.

The table renderer ends with :func:`render_comparison`; the CLI prints
:func:`render_saved` on stderr after ``--save-baseline``. It formats what the comparison holds and
decides nothing: every regression, improvement and note, in the order found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fieldmem.errors import listing
from fieldmem.escaping import defused, visible, visible_strings
from fieldmem.render.pieces import count
from fieldmem.report import BaselineComparison

if TYPE_CHECKING:
    from fieldmem.gate.baseline import SavedBaseline

__all__ = ["render_comparison", "render_saved"]


def render_comparison(comparison: BaselineComparison) -> str:
    """``baseline PATH (tolerance T): N regressions, M improvements`` and one line per item: each regression,
    improvement, failing check the baseline accepts, and note."""
    comparison = visible_strings(comparison)  # paths, names and messages as fieldmem shows user text
    tolerance = comparison.tolerance or "exact"
    lines = [
        f"baseline {comparison.path} (tolerance {tolerance}): "
        f"{count(len(comparison.regressions), 'regression')}, "
        f"{count(len(comparison.improvements), 'improvement')}"
    ]
    lines += [f"  ✗ {r.message}" for r in comparison.regressions]
    lines += [f"  ✓ {r.message}" for r in comparison.improvements]
    lines += [
        f"  = {a.target}: {check} fails as recorded: accepted by the baseline"
        for a in comparison.accepted
        for check in a.checks
    ]
    lines += [f"  • {note}" for note in comparison.notes]
    return defused("\n".join(lines) + "\n")


def render_saved(saved: SavedBaseline) -> str:
    """One line: where the baseline went and which entries it holds."""
    parts = [f"{count(len(saved.written), 'target')} recorded"]
    if saved.kept:
        parts.append(f"{len(saved.kept)} kept from earlier runs ({listing(saved.kept)})")
    if saved.pruned:
        parts.append(f"{len(saved.pruned)} pruned ({listing(saved.pruned)})")
    if saved.dropped:
        parts.append(
            f"{count(len(saved.dropped), 'field')} a newer fieldmem wrote and this one does not know not kept "
            f"({listing(saved.dropped)})"
        )
    # the names went through listing (one_line: visible); the path is the user's text too
    return defused(f"fieldmem: saved the baseline {visible(saved.baseline.path)}: {'; '.join(parts)}\n")
