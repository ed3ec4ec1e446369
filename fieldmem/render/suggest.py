"""The ``--suggest`` section of the terminal view: a Suggestion as rich text.

It formats what :class:`~fieldmem.report.Suggestion` holds and decides
nothing. The table renderer calls :func:`suggestion_renderables` under each
target's verdict; the default view gives the code to write and one line per
argument, the verbose view adds every leaf and the measured figures.
"""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fieldmem.report import MEMORY_FIGURES, Suggestion
from fieldmem.units import format_bytes

__all__ = ["suggestion_renderables"]


def suggestion_renderables(suggestion: Suggestion, verbose: bool = False, min_bytes: int = 0) -> list[RenderableType]:
    """Lines (and, verbose, tables) showing ``suggestion``, indented like the verdict's findings.

    Without ``verbose``, arguments left undonated that are smaller than
    ``min_bytes`` (an index, a scalar) are counted instead of listed.
    """
    items: list[RenderableType] = [Text(f"  suggest: {suggestion.summary}", style="bold")]
    if suggestion.code is not None:
        items.append(Text(f"    {suggestion.code}", style="green"))
        if suggestion.alternative_code is not None:
            items.append(Text(f"    or: {suggestion.alternative_code}", style="dim"))
    hidden = 0
    for argument in suggestion.arguments:
        if not verbose and not argument.donate and argument.bytes < min_bytes:
            hidden += 1
            continue
        mark, style = ("✓", "green") if argument.donate else ("✗", "dim")
        saved = ""
        if argument.donate and argument.marginal_bytes is not None:
            saved = f" saves {format_bytes(argument.marginal_bytes)} given the others"
        elif argument.donate:
            saved = f" lends {format_bytes(argument.saved_bytes)}"
        items.append(Text(f"    {mark} {argument.argument}{saved}: {argument.reason}", style=style))
    if hidden:
        items.append(
            Text(f"    … {hidden} argument(s) under {format_bytes(min_bytes)} not donated (use -v)", style="dim")
        )
    for note in suggestion.notes:
        items.append(Text(f"    note: {note}", style="dim"))
    if not verbose:
        return items
    tried = ", ".join(suggestion.tried) or "none"
    items.append(
        Text(
            f"    verified by: {suggestion.verified_by}; compiles added: {suggestion.compiles} (tried: {tried})",
            style="dim",
        )
    )
    leaves = Table(box=box.SIMPLE, title="suggestion per leaf (saved = buffer reused minus the copies donation adds)")
    for column in ("argument", "leaf", "#", "bytes", "outcome", "output", "saved", "reason"):
        leaves.add_column(column, overflow="fold", justify="right" if column in ("#", "bytes", "saved") else "left")
    for argument in suggestion.arguments:
        for leaf in argument.leaves:
            leaves.add_row(
                argument.argument,
                leaf.input,
                str(leaf.input_index),
                format_bytes(leaf.bytes),
                leaf.code,
                leaf.output or "",
                format_bytes(leaf.saved_bytes),
                leaf.reason,
            )
    items.append(leaves)
    if suggestion.memory is not None:
        figures = Table(box=box.SIMPLE, title="suggested variant (measured)")
        figures.add_column("figure")
        figures.add_column("suggested", justify="right")
        figures.add_column("saved vs plain", justify="right")
        for name in (
            "footprint_bytes",
            "live_peak_bytes",
            *[m for m in MEMORY_FIGURES if m not in ("footprint_bytes", "live_peak_bytes")],
        ):
            figures.add_row(
                name, format_bytes(getattr(suggestion.memory, name)), format_bytes(suggestion.savings.get(name))
            )
        items.append(figures)
    return items
