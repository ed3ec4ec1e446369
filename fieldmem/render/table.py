"""Terminal renderer: one row per target, plain vs donated, then the verdicts.

It formats what the report holds and decides nothing: which copies are shown
is the ``min_bytes`` threshold (the report keeps them all), everything else is
layout. ``verbose`` adds, per target, every memory figure, alias, unusable
donation, copy and finding, and a sparkline of live bytes over the schedule
for plain vs donated (resampled from the report's decimated timeline).
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from fieldmem.render import RenderOptions, text_console
from fieldmem.render.pieces import block, count, pair, source_text
from fieldmem.report import MEMORY_FIGURES, Report, TargetResult, Timeline, Variant
from fieldmem.units import format_bytes

__all__ = ["render", "sparkline"]

_TOP_COPIES = 3
SPARK_WIDTH = 56
_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


def _copies_shown(variant: Variant, min_bytes: int) -> list:
    return [c for c in variant.copies if c.bytes >= min_bytes]


def _verdict_cell(result: TargetResult) -> Text:
    if result.status == "error" or result.verdict is None:
        kind = result.error.kind if result.error is not None else None
        # a run that died says how: timeout, crash, out-of-memory
        return Text(kind if kind in ("timeout", "crash", "out-of-memory") else "error", style="bold red")
    failed = result.failed_checks
    if result.verdict.in_place:
        text = Text("in place", style="bold green")
    else:
        text = Text("not in place", style="bold red")
    if failed:
        text.append(f" ✗ {', '.join(c.name for c in failed)}", style="red")
    return text


def sparkline(timeline: Timeline, scale: int, width: int = SPARK_WIDTH) -> str:
    """Live bytes over schedule progress as ``width`` block characters, 0 .. ``scale``.

    Each sample of the (decimated) timeline holds its value from its position
    up to the next sample's; a column covers ``length / width`` schedule
    points and shows the largest value held anywhere in it, so a short peak
    is never averaged away. A column's block is its value in eighths of ``scale``,
    rounded to the nearest (at least one eighth for any value above zero); zero is a blank.
    Both variants are drawn with the same ``scale`` so their heights compare.
    """
    positions, values, length = timeline.positions, timeline.live_bytes, max(timeline.length, 1)
    if not positions or scale <= 0:
        return " " * width
    ends = positions[1:] + (length,)
    cells = []
    k = 0
    for column in range(width):
        low, high = column * length, (column + 1) * length  # schedule range x width, in integers
        while k < len(positions) - 1 and ends[k] * width <= low:
            k += 1
        value, j = values[k], k
        while j < len(positions) and positions[j] * width < high:
            value = max(value, values[j])
            j += 1
        cells.append(block(value, scale))
    return "".join(cells)


def sparkline_lines(plain: Variant, donated: Variant, width: int = SPARK_WIDTH) -> list[Text | Table]:
    """The verbose view's "memory over the schedule": plain and donated on one scale, peaks stated.

    A heading, then a borderless grid (so a long peak source wraps in its own
    column, under itself, and never breaks the sparkline).
    """
    variants = [v for v in (plain, donated) if v.timeline is not None and v.timeline.live_bytes]
    if not variants:
        return []
    peaks = {v.name: max(v.timeline.live_bytes) for v in variants if v.timeline is not None}
    scale = max(peaks.values())
    heading = Text(
        f"  memory over the schedule, plain vs donated (each 0 → 100 % of its own schedule; █ = {format_bytes(scale)})",
        style="bold",
    )
    grid = Table.grid(padding=(0, 1), pad_edge=False)
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for variant in variants:
        timeline = variant.timeline
        assert timeline is not None
        where = f" at {timeline.peak_instruction}" if timeline.peak_instruction else ""
        if timeline.peak_source:
            where += f" ({timeline.peak_source})"
        grid.add_row(
            f"    {variant.name:<7}",
            Text(sparkline(timeline, scale, width), style="dark_orange" if variant.name == "plain" else "blue"),
            f"peak {format_bytes(peaks[variant.name])}{where}",
        )
    return [heading, grid]


def _copy_counts(plain: Variant, donated: Variant, min_bytes: int) -> str:
    return f"{len(_copies_shown(plain, min_bytes))}/{len(_copies_shown(donated, min_bytes))}"


def _summary_table(report: Report, options: RenderOptions, console: Console) -> Table:
    """One row per target; when that does not fit the terminal, the stacked narrow form.

    The wide table is used only at its natural width: squeezed, rich folds the
    target names mid-word and can push the last column off the screen.
    """
    table = _wide_summary_table(report, options)
    if Measurement.get(console, console.options.update_width(100_000), table).maximum > options.width:
        return _narrow_summary_table(report, options)
    return table


def _wide_summary_table(report: Report, options: RenderOptions) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    # target names are what a reader scans for: they get their width before the
    # figures do (up to 40 columns, folding beyond); figure headers take two lines
    longest = max((len(r.name) for r in report.results), default=6)
    table.add_column("target", overflow="fold", min_width=min(longest, 40))
    table.add_column("donated")
    table.add_column("verdict", min_width=len("not in place"))
    table.add_column("footprint\nplain → donated", justify="right", no_wrap=True)
    table.add_column("saved", justify="right", no_wrap=True)
    table.add_column("live peak\nplain → donated", justify="right", no_wrap=True)
    table.add_column("copies\nplain/donated", justify="right")
    for result in report.results:
        if result.status == "error":
            table.add_row(result.name, "", _verdict_cell(result), "", "", "", "")
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        table.add_row(
            result.name,
            ", ".join(donated.donated_arguments) or "(none)",
            _verdict_cell(result),
            pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes),
            format_bytes(result.savings.get("footprint_bytes")),
            pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes),
            _copy_counts(plain, donated, options.min_bytes),
        )
    return table


def _narrow_summary_table(report: Report, options: RenderOptions) -> Table:
    """The same facts for a narrow terminal: target and verdict, then its figures stacked in one cell."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("target", overflow="fold", ratio=2)
    table.add_column("verdict", ratio=2)
    table.add_column("plain → donated", overflow="fold", ratio=5)
    for result in report.results:
        if result.status == "error":
            table.add_row(result.name, _verdict_cell(result), "")
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        saved = format_bytes(result.savings.get("footprint_bytes"))
        figures = "\n".join(
            (
                f"footprint {pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes)} (saves {saved})",
                f"live peak {pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes)}",
                f"copies {_copy_counts(plain, donated, options.min_bytes)}"
                f" · donated {', '.join(donated.donated_arguments) or '(none)'}",
            )
        )
        table.add_row(result.name, _verdict_cell(result), figures, end_section=True)
    return table


def run_lines(result: TargetResult, verbose: bool = False) -> list[Text]:
    """What ``--run`` showed: aliases confirmed by buffer identity, and device memory (the worst device)."""
    lines: list[Text] = []
    for name in ("donated", "plain"):
        variant = result.variants.get(name)
        run = variant.run if variant is not None else None
        if run is None or (name == "plain" and not verbose and not run.unplanned):
            continue
        confirmed = sum(1 for a in run.aliases if a.confirmed)
        comparable = sum(1 for a in run.aliases if a.comparable)
        if run.aliases:
            words = f"{confirmed}/{comparable} aliases confirmed by buffer identity"
            if comparable < len(run.aliases):
                words += f", {len(run.aliases) - comparable} not comparable (no device buffer to read)"
        else:
            words = "no alias planned"
        if run.kept:
            words += f"; donated but not consumed: {', '.join(run.kept)}"
        devices = len(run.devices)
        worst = next((d for d in run.devices if d.device == run.worst_device), None)
        if worst is not None:
            where = f"device {worst.device}" + (f" (worst of {devices})" if devices > 1 else "")
            memory = (
                f"{where}: measured peak {format_bytes(worst.measured_peak)}, planned {format_bytes(worst.predicted)}"
                + (
                    f" ({'+' if (worst.difference or 0) >= 0 else '−'}{format_bytes(abs(worst.difference))})"
                    if worst.difference is not None
                    else ""
                )
            )
        elif run.devices:
            memory = f"device memory not measured: {run.devices[0].unavailable}"
        else:
            memory = "device memory not measured"
        style = "green" if confirmed == comparable else "red"
        lines.append(Text(f"  run ({name}, {format_seconds(run.seconds)}): {words}; {memory}", style=style))
        if verbose:
            for device in run.devices:
                if device.measured_peak is None:
                    continue
                lines.append(
                    Text(
                        f"    device {device.device}: in use {format_bytes(device.in_use_before)} → "
                        f"{format_bytes(device.in_use_after)}, peak {format_bytes(device.peak)}, measured "
                        f"{format_bytes(device.measured_peak)} vs planned {format_bytes(device.predicted)}",
                        style="dim",
                    )
                )
    styles = {"slice-only": "green", "whole-buffer": "red", "inconclusive": "yellow", "not-probed": "dim"}
    for probe in result.probes:
        if probe.code == "whole-buffer":
            continue  # a warning finding of the verdict already says it
        lines.append(Text(f"  probe ({probe.code}): {probe.message}", style=styles.get(probe.code, "")))
    return lines


def format_seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _details(console: Console, result: TargetResult, options: RenderOptions) -> None:
    console.print(Text(result.name, style="bold"), end="")
    if result.definition:
        console.print(Text(f"  ({result.definition})", style="dim"), end="")
    console.print()
    if result.status == "error" or result.verdict is None:
        message = result.error.message if result.error else "unknown error"
        console.print(Text(f"  error: {message}", style="red"))
        return
    console.print(Text(f"  {result.verdict.summary}"))
    for check in result.checks:
        mark, style = ("✓", "green") if check.passed else ("✗", "red")
        console.print(Text(f"  {mark} {check.name}: {check.message}", style=style))
    findings = (
        result.verdict.findings
        if options.verbose
        else [f for f in result.verdict.findings if f.severity != "info" or f.code == "plain-copy"]
    )
    # the summary already quotes the first problem
    findings = [f for f in findings if f.message not in result.verdict.summary]
    for finding in findings[: None if options.verbose else 6]:
        console.print(Text(f"  • {finding.message}", style=_STYLE.get(finding.severity, "")))
    hidden = len(findings) - 6
    if not options.verbose and hidden > 0:
        console.print(Text(f"  … {hidden} more (use -v)", style="dim"))
    for line in run_lines(result, verbose=options.verbose):
        console.print(line)
    if result.suggestion is not None:
        from fieldmem.render.suggest import suggestion_renderables

        for item in suggestion_renderables(result.suggestion, verbose=options.verbose, min_bytes=options.min_bytes):
            console.print(item)
    if not options.verbose:
        shown = [
            (name, c)
            for name in ("plain", "donated")
            for c in _copies_shown(result.variants[name], options.min_bytes)[:_TOP_COPIES]
        ]
        for name, c in shown:
            what = c.of_parameter or c.shape
            where = f" at {source_text(c.source, c.call_site)}" if c.source else ""
            kind = f"{c.kind}, branch {c.branch} only" if c.branch is not None else c.kind
            console.print(Text(f"  {name} copy: {what} {format_bytes(c.bytes)} [{kind}]{where}", style="dim"))
        return
    _verbose(console, result, options)


def _verbose(console: Console, result: TargetResult, options: RenderOptions) -> None:
    plain, donated = result.variants["plain"], result.variants["donated"]
    # the legend goes on a line of its own: as a title it wraps to the narrow table's width
    console.print(
        Text(
            "  memory (XLA memory_analysis; footprint = argument + output + temp − alias; "
            "live peak = distinct slices live at once; constant = arrays compiled into the program)",
            style="dim",
        )
    )
    figures = Table(box=box.SIMPLE)
    figures.add_column("figure")
    figures.add_column("plain", justify="right")
    figures.add_column("donated", justify="right")
    figures.add_column("saved", justify="right")
    for name in MEMORY_FIGURES:
        figures.add_row(
            name,
            format_bytes(getattr(plain.memory, name)),
            format_bytes(getattr(donated.memory, name)),
            format_bytes(result.savings.get(name)),
        )
    console.print(figures)
    for name, reason in sorted(donated.memory.unavailable.items()):
        console.print(Text(f"  {name} unavailable: {reason}", style="dim"))
    for line in sparkline_lines(plain, donated):
        console.print(line)

    for variant in (plain, donated):
        if not variant.live_at_peak:
            continue
        live = Table(
            box=box.SIMPLE,
            title=f"live at the {variant.name} live peak ({format_bytes(variant.memory.live_peak_bytes)})",
        )
        for column in ("bytes", "kind", "value", "input", "shape", "source"):
            live.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
        for b in variant.live_at_peak:
            live.add_row(
                format_bytes(b.bytes),
                b.kind,
                b.instruction or "?",
                b.input or "",
                b.shape or "",
                source_text(b.source, b.call_site) or "",
            )
        console.print(live)
    if donated.aliases:
        aliases = Table(box=box.SIMPLE, title="aliases (donated input → output reusing its buffer)")
        for column in ("input", "#", "output", "#", "bytes"):
            aliases.add_column(column, justify="right" if column in ("#", "bytes") else "left")
        for a in donated.aliases:
            aliases.add_row(a.input, str(a.input_index), a.output, str(a.output_index), format_bytes(a.bytes))
        console.print(aliases)
    if donated.unusable_donations:
        unusable = Table(box=box.SIMPLE, title="unusable donations")
        for column in ("input", "#", "bytes", "reason"):
            unusable.add_column(column, overflow="fold")
        for u in donated.unusable_donations:
            unusable.add_row(u.input, str(u.input_index), format_bytes(u.bytes), u.reason)
        console.print(unusable)
    for variant in (plain, donated):
        copies = _copies_shown(variant, options.min_bytes)
        if not copies:
            continue
        table = Table(
            box=box.SIMPLE, title=f"copies in the {variant.name} variant (≥ {format_bytes(options.min_bytes)})"
        )
        for column in ("kind", "of", "shape", "bytes", "per call", "source", "computation"):
            table.add_column(column, overflow="fold")
        for c in copies:
            per_call = format_bytes(c.bytes_per_call) + f" (×{c.trip_count})" if c.bytes_per_call is not None else ""
            if c.branch is not None:  # a conditional copy: made only when its branch runs
                per_call = f"when branch {c.branch} runs" + (f" (≤ ×{c.trip_count})" if c.trip_count else "")
            table.add_row(
                c.kind,
                c.of_parameter or "",
                c.shape,
                format_bytes(c.bytes),
                per_call,
                source_text(c.source, c.call_site) or "?",
                c.computation,
            )
        console.print(table)
    for made in result.made_static:
        if made.code != "concrete":  # a concrete one is a finding, above
            console.print(Text(f"  held static: {made.argument}: {made.reason}", style="dim"))
    for variant in (plain, donated):
        for warning in variant.jax_warnings:
            console.print(Text(f"  jax warning ({variant.name}): {warning.splitlines()[0]}", style="yellow"))


def render(report: Report, options: RenderOptions) -> str:
    buffer = io.StringIO()
    console = text_console(buffer, options)
    devices = len(report.devices)
    console.print(
        Text(
            f"fieldmem {report.fieldmem_version} · jax {report.jax_version} · {report.backend}"
            f" · {count(devices, 'device')} (figures are per device)",
            style="dim",
        )
    )
    if not report.results:
        console.print("no targets were checked")
        return buffer.getvalue()
    console.print(_summary_table(report, options, console))
    for result in report.results:
        _details(console, result, options)
    if report.chains:
        from fieldmem.render.chains import chain_renderables

        for chain in report.chains:
            for item in chain_renderables(chain, verbose=options.verbose):
                console.print(item)
    if report.baseline is not None:
        from fieldmem.render.baseline import render_comparison

        console.print(Text(render_comparison(report.baseline).rstrip("\n")))
    return buffer.getvalue()
