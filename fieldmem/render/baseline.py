"""Plain text for a baseline comparison, and for what ``--save-baseline`` wrote.

The table renderer ends with :func:`comparison_renderables` (the same lines as
:func:`render_comparison`, each wrapping under its own text at the terminal's
width); the CLI prints :func:`render_saved` on stderr after ``--save-baseline``.
It formats what the comparison holds and decides nothing: every regression,
improvement and note, in the order found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import RenderableType

from fieldmem.model.comparison import BaselineComparison
from fieldmem.model.errors import listing
from fieldmem.model.escaping import defused, visible, visible_strings
from fieldmem.render.layout import hanging
from fieldmem.render.pieces import count

if TYPE_CHECKING:
    from fieldmem.gate.baseline import SavedBaseline

__all__ = ["comparison_renderables", "render_comparison", "render_saved"]


def _comparison_lines(comparison: BaselineComparison) -> list[tuple[str, str, str]]:
    """(prefix, text, style) per line: the headline (``baseline PATH (tolerance T): N regressions, M
    improvements``), then each regression, improvement, failing check the baseline accepts, and note."""
    comparison = visible_strings(comparison)  # paths, names and messages as fieldmem shows user text
    tolerance = comparison.tolerance or "exact"
    headline = (
        f"{comparison.path} (tolerance {tolerance}): {count(len(comparison.regressions), 'regression')}, "
        f"{count(len(comparison.improvements), 'improvement')}"
    )
    lines = [("baseline ", headline, "")]
    lines += [("✗ ", r.message, "red") for r in comparison.regressions]
    lines += [("✓ ", r.message, "green") for r in comparison.improvements]
    lines += [
        ("= ", f"{a.target}: {check} fails as recorded: accepted by the baseline", "yellow")
        for a in comparison.accepted
        for check in a.checks
    ]
    lines += [("• ", note, "dim") for note in comparison.notes]
    return lines


def render_comparison(comparison: BaselineComparison) -> str:
    """The comparison as plain lines, one per item (no wrapping)."""
    lines = [
        f"{'' if n == 0 else '  '}{prefix}{text}" for n, (prefix, text, _) in enumerate(_comparison_lines(comparison))
    ]
    return defused("\n".join(lines) + "\n")


def comparison_renderables(comparison: BaselineComparison) -> list[RenderableType]:
    """The lines of :func:`render_comparison` for the terminal: a line that wraps continues under its
    text (after ``baseline``, after its mark), a long target name included."""
    return [
        hanging(prefix, text, style=style, indent=0 if n == 0 else 2)
        for n, (prefix, text, style) in enumerate(_comparison_lines(comparison))
    ]


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
