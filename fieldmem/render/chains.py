"""The chain section of the terminal and Markdown reports: per-step curve, hand-offs, steps vs fused.

Formats a :class:`~fieldmem.model.chain.Chain` and decides nothing: the statuses,
the first break, the growth per step and the cost comparison are all in the
report.
"""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fieldmem.model.chain import Chain, ChainCost
from fieldmem.model.units import format_bytes
from fieldmem.render.layout import Column, fitted_table, hanging, natural_width, wrapped
from fieldmem.render.pieces import (
    FAIL,
    PASS,
    STATUS_WORDS,
    WARN,
    chain_transfer_line,
    code,
    escape,
    footprint_curve,
    pair,
)

__all__ = ["chain_markdown", "chain_renderables"]


def _delta(value: int | None) -> str:
    if value is None:
        return ""
    if value == 0:
        return "±0"
    return ("+" if value > 0 else "−") + format_bytes(abs(value))


def _cost_label(cost: ChainCost) -> str:
    return "one jit (fused)" if cost.layout == "fused" else "separate jits (max)"


def chain_renderables(chain: Chain, verbose: bool = False, width: int = 120) -> list[RenderableType]:
    """The chain's heading, verdict, per-step table, hand-offs and cost comparison.

    The step labels (``1 advance``, ``separate jits (max)``) never wrap: where
    the whole table does not fit ``width``, the live peak and what is kept
    alive go on a line of their own under each step.
    """
    items: list[RenderableType] = []
    head = Text(f"chain {chain.name}", style="bold")
    head.append(f"  ({len(chain.steps)} steps)", style="dim")
    items.append(wrapped(head))
    style = "green" if chain.in_place else "red"
    items.append(hanging("", chain.summary, style=style))
    for check in chain.checks:
        mark, check_style = ("✓", "green") if check.passed else ("✗", "red")
        items.append(hanging(f"{mark} ", f"{check.name}: {check.message}", style=check_style))

    rows: list[tuple[str | Text, ...]] = []
    for step in chain.steps:
        words, status_style = STATUS_WORDS.get(step.status, (step.status, ""))
        rows.append(
            (
                f"{step.index + 1} {step.function}",
                Text(words, style=status_style),
                pair(step.footprint.get("plain"), step.footprint.get("donated")) if step.footprint else "",
                _delta(step.grows_by),
                pair(step.live_peak.get("plain"), step.live_peak.get("donated")) if step.live_peak else "",
                ", ".join(step.kept_alive),
            )
        )
    for cost in chain.costs:
        rows.append(
            (
                Text(_cost_label(cost), style="italic"),
                "",
                pair(cost.plain_footprint, cost.donated_footprint),
                "",
                pair(cost.plain_live_peak, cost.donated_live_peak),
                "",
            )
        )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("step", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("footprint\nplain → donated", justify="right", no_wrap=True)
    table.add_column("Δ donated", justify="right", no_wrap=True)
    table.add_column("live peak\nplain → donated", justify="right", no_wrap=True)
    table.add_column("kept alive", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    if natural_width(table) <= width:
        items.append(table)
    else:
        items.append(
            fitted_table(
                [
                    Column("step"),
                    Column("status"),
                    Column("footprint plain → donated", "right"),
                    Column("Δ donated", "right"),
                    Column("live peak plain → donated", below="live peak"),
                    Column("kept alive", below="kept alive"),
                ],
                rows,
                width,
            )
        )
    curve = footprint_curve(chain.steps)
    if curve:
        items.append(hanging("donated footprint per step  ", curve, style="dim"))
    if chain.cost_summary:
        items.append(hanging("", chain.cost_summary))
    moved = chain_transfer_line(chain)
    if moved:
        items.append(hanging("", moved, style="dim"))
    for step in chain.steps:
        for handoff in step.handoffs:
            if handoff.breaks or verbose:
                items.append(
                    hanging(
                        "• ", f"step {step.index + 1}: {handoff.message}", style="red" if handoff.breaks else "yellow"
                    )
                )
        if step.status in ("breaks", "error") and not any(h.breaks for h in step.handoffs):
            items.append(hanging("• ", f"step {step.index + 1} {step.function}: {step.summary}", style="red"))
    return items


def chain_markdown(chain: Chain) -> list[str]:
    """The chain as a Markdown section: verdict, a table of steps, the break, steps vs fused."""
    mark = PASS if chain.in_place else FAIL
    lines = [f"### {mark} chain {code(chain.name)}", "", escape(chain.summary), ""]
    for check in chain.checks:
        lines.append(f"- {PASS if check.passed else FAIL} {escape(check.name)}: {escape(check.message)}")
    if chain.checks:
        lines.append("")
    lines += [
        "| step | status | footprint plain → donated | Δ donated | live peak plain → donated | kept alive |",
        "|---|---|---:|---:|---:|---|",
    ]
    marks = {"in-place": PASS, "grows": "📈", "breaks": FAIL, "error": FAIL, "not-checked": WARN}
    for step in chain.steps:
        words = STATUS_WORDS.get(step.status, (step.status, ""))[0]
        lines.append(
            f"| {step.index + 1} {code(step.function)} | {marks.get(step.status, '')} {escape(words)} "
            f"| {pair(step.footprint.get('plain'), step.footprint.get('donated')) if step.footprint else ''} "
            f"| {escape(_delta(step.grows_by))} "
            f"| {pair(step.live_peak.get('plain'), step.live_peak.get('donated')) if step.live_peak else ''} "
            f"| {', '.join(code(k) for k in step.kept_alive)} |"
        )
    for cost in chain.costs:
        lines.append(
            f"| *{escape(_cost_label(cost))}* | | {pair(cost.plain_footprint, cost.donated_footprint)} | "
            f"| {pair(cost.plain_live_peak, cost.donated_live_peak)} | |"
        )
    lines.append("")
    if chain.cost_summary:
        lines += [escape(chain.cost_summary), ""]
    moved = chain_transfer_line(chain)
    if moved:
        lines += [escape(moved), ""]
    breaking = [(s, h) for s in chain.steps for h in s.handoffs if h.breaks]
    for step, handoff in breaking:
        lines.append(f"- {FAIL} step {step.index + 1}: {escape(handoff.message)}")
    if breaking:
        lines.append("")
    return lines
