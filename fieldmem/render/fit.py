"""Renderers for ``fieldmem fit``: a :class:`~fieldmem.model.fit_report.FitReport` as a terminal table, a JSON
document (``fieldmem.fit/1``), Markdown, or an SVG picture of each search's footprint against the searched
knob, one line per row, with the device's memory across it.

Same interface as the report renderers, ``render(report, options) -> str``. They format what the search
found and decide nothing: which value fits, what moved the peak and which check failed are in the report.
Every string from the user is shown by :mod:`fieldmem.model.escaping`'s rule.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from html import escape as html_escape
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from fieldmem.model.codec import builtins
from fieldmem.model.escaping import defused, json_defused, visible_strings
from fieldmem.model.fit_report import (
    FitComparison,
    FitPoint,
    FitReport,
    FitRow,
    FitSearch,
    PeakChange,
    knob_text,
    values_text,
)
from fieldmem.model.units import format_bytes
from fieldmem.render import RenderOptions, text_console
from fieldmem.render.formats import FIT, Renderer, get_renderer, renderers
from fieldmem.render.layout import Column, fitted_table, hanging, wrapped
from fieldmem.render.pieces import FAIL, PASS, escape

__all__ = [
    "FIT_RENDERERS",
    "fit_document_text",
    "get_fit_renderer",
    "render_comparison",
    "row_label",
    "search_title",
]

_TICK, _CROSS = "✓", "✗"  # the table's marks, as fieldmem check's (Markdown has its emoji)
_FITS = {"yes": "fits", "no": "does not fit", "unknown": "not known", "error": "error"}
_STATUS = {
    "found": "",
    "all-fit": "every value fits",
    "none-fit": "none fits",
    "budget": "stopped by --budget",
    "error": "error",
    "unknown": "not known",
}


def _size(value: int | None, at_least: bool = False) -> str:
    if value is None:
        return "—"
    return ("≥ " if at_least else "") + format_bytes(value)


def _signed(value: int | None) -> str:
    if value is None:
        return "—"
    return ("−" if value < 0 else "") + format_bytes(abs(value))


def _delta(value: int) -> str:
    return f"{'+' if value >= 0 else '−'}{format_bytes(abs(value))}"


def row_label(row: FitRow) -> str:
    """A row by its listed knobs' values: ``remat=dots`` (empty: no listed knob)."""
    return values_text(row.fixed)


def search_title(search: FitSearch) -> str:
    """``fit examples/fit/block.py:train_step on tpu:v5e``."""
    return f"fit {search.name} on {search.backend}"


def _environment(search: FitSearch) -> str:
    parts = [f"jax {search.jax_version}"] if search.jax_version else []
    parts += [f"{name} {version}" for name, version in sorted(search.plugin_versions.items())]
    devices = len(search.devices)
    if devices:
        parts.append(f"{devices} device{'s' if devices != 1 else ''} (figures are per device)")
    return " · ".join(parts)


def _where(label: str, kind: str) -> str:
    return f"argument {label}" if kind == "argument" else label


def _change_head(change: PeakChange, searched: str | None) -> str:
    if change.between == "boundary":
        value = change.before.get(searched) if searched else None
        after = change.after.get(searched) if searched else None
        fixed = {k: v for k, v in change.before.items() if k != searched}
        lead = f"{values_text(fixed)}: " if fixed else ""
        head = f"{lead}{searched}={knob_text(value) if value is not None else '?'} fits, {knob_text(after) if after is not None else '?'} does not"
    else:
        at = change.before.get(searched) if searched else None
        before = {k: v for k, v in change.before.items() if k != searched}
        after_fixed = {k: v for k, v in change.after.items() if k != searched}
        head = f"{values_text(before)} → {values_text(after_fixed)} at {searched}={knob_text(at) if at is not None else '?'}"
    figures = []
    if change.live_peak_before_bytes is not None and change.live_peak_after_bytes is not None:
        figures.append(
            f"live peak {format_bytes(change.live_peak_before_bytes)} → {format_bytes(change.live_peak_after_bytes)}"
        )
    if change.footprint_before_bytes is not None and change.footprint_after_bytes is not None:
        figures.append(
            f"footprint {format_bytes(change.footprint_before_bytes)} → {format_bytes(change.footprint_after_bytes)}"
        )
    return head + (f" ({', '.join(figures)})" if figures else "")


def _change_lines(change: PeakChange) -> list[str]:
    lines = [f"{_delta(m.delta)} at {_where(m.label, m.kind)}" for m in change.moves]
    if change.others:
        lines.append(f"{_delta(change.others_delta)} at {change.others} other line{'s' if change.others != 1 else ''}")
    if not lines:
        lines.append("no line moved by the --min-bytes threshold or more")
    return lines


def _point_text(point: FitPoint) -> str:
    parts = [_FITS[point.fits]]
    if point.footprint_bytes is not None:
        parts.append(f"needs {_size(point.footprint_bytes, point.footprint_at_least)}")
    if point.headroom is not None:
        parts.append(f"headroom {_signed(point.headroom)}")
    if point.live_peak_bytes is not None:
        parts.append(f"live peak {format_bytes(point.live_peak_bytes)}")
    if point.reason and (point.fits in ("unknown", "error") or point.footprint_bytes is None):
        parts.append(point.reason)
    return ", ".join(parts)


def _row_cells(search: FitSearch, row: FitRow) -> list[str]:
    searched = search.searched
    cells = [" ".join(knob_text(v) for v in row.fixed.values())] if row.fixed else []
    if searched is None:
        point = row.points[0] if row.points else None
        cells += [
            _FITS[point.fits] if point is not None else _STATUS[row.status],
            _size(point.footprint_bytes, point.footprint_at_least) if point else "—",
            _signed(point.headroom) if point else "—",
            _size(point.live_peak_bytes) if point else "—",
        ]
        return cells
    below = row.point_at(row.largest, searched) if row.largest is not None else None
    above = row.point_at(row.smallest_failing, searched) if row.smallest_failing is not None else None
    largest = knob_text(row.largest) if row.largest is not None else "none"
    if row.status not in ("found",):
        largest += f" ({_STATUS[row.status]})" if _STATUS[row.status] else ""
    cells += [
        largest,
        _size(below.footprint_bytes, below.footprint_at_least) if below else "—",
        _signed(below.headroom) if below else "—",
        knob_text(row.smallest_failing) if row.smallest_failing is not None else "—",
        _size(above.footprint_bytes, above.footprint_at_least) if above else "—",
        f"{row.compiles} of ≤ {row.bound}",
    ]
    return cells


def _columns(search: FitSearch) -> list[Column]:
    listed = [k.name for k in search.knobs if k.name != search.searched]
    columns = [Column(" ".join(listed))] if listed else []
    if search.searched is None:
        return columns + [
            Column("fits"),
            Column("needs", "right"),
            Column("headroom", "right"),
            Column("live peak", "right"),
        ]
    name = search.searched
    return columns + [
        Column(f"largest {name}"),
        Column("needs", "right", below="needs"),
        Column("headroom", "right", below="headroom"),
        Column("next up", "right", below="next up"),
        Column("needs", "right", below="which needs"),
        Column("compiles", "right", below="compiles"),
    ]


def _compiles_line(search: FitSearch) -> str:
    """``varied batch=1..4096 × remat=none,full: 21 compiles for the rows (at most 28), 1 at the factory's
    defaults; 84.2 s``."""
    varied = " × ".join(k.describe() for k in search.knobs)
    rows = search.compiles - search.extra_compiles
    parts = [f"{rows} compile{'s' if rows != 1 else ''} for the rows (at most {search.bound})"]
    if search.extra_compiles:
        parts.append(f"{search.extra_compiles} at the factory's defaults")
    if search.budget is not None:
        parts.append(f"--budget {search.budget}")
    seconds = f"; {search.seconds:.1f} s" if search.seconds is not None else ""
    return f"varied {varied}: {', '.join(parts)}{seconds}"


def _search_items(search: FitSearch, options: RenderOptions) -> list[RenderableType]:
    items: list[RenderableType] = [wrapped(Text(search_title(search), style="bold"))]
    if search.error is not None and not search.rows:  # nothing was searched: why is all there is to say
        items.append(hanging(f"{_CROSS} ", f"error: {search.error.message}", indent=2))
        return items
    environment = _environment(search)
    if environment:
        items.append(wrapped(environment, indent=2))
    if search.capacity:
        items.append(
            wrapped(f"{search.capacity}; donated: {search.donate}" if search.donate else search.capacity, indent=2)
        )
    items.append(wrapped(_compiles_line(search), indent=2))
    if search.error is not None:
        items.append(hanging(f"{_CROSS} ", f"error: {search.error.message}", indent=2))
    if search.rows:
        rows = [_row_cells(search, row) for row in search.rows]
        items.append(fitted_table(_columns(search), rows, options.width))
    for row in search.rows:
        if row.error and row.status in ("error", "unknown"):
            label = f"{row_label(row)}: " if row.fixed else ""
            items.append(hanging(f"{_CROSS} ", f"{label}{_STATUS[row.status]}: {row.error}", indent=2))
        for note in row.notes:
            label = f"{row_label(row)}: " if row.fixed else ""
            items.append(hanging("• ", f"{label}{note}", indent=2))
    changes = [row.boundary for row in search.rows if row.boundary is not None] + list(search.changes)
    if changes:
        items.append(wrapped("what moved the peak", style="bold", indent=2))
        for change in changes:
            items.append(hanging("", _change_head(change, search.searched), indent=4))
            for line in _change_lines(change):
                items.append(hanging("", line, indent=8))
    if search.shipped is not None and not any(c.name == "expect-fits" for c in search.checks):
        items.append(hanging("• ", f"at the factory's defaults: {_point_text(search.shipped)}", indent=2))
    for check in search.checks:
        mark = _TICK if check.passed else _CROSS
        items.append(hanging(f"{mark} ", f"{check.name}: {check.message}", indent=2))
    baseline = search.baseline
    if baseline is not None:
        if not baseline.found:
            items.append(
                hanging("• ", f"baseline {baseline.file}: no entry for this search (nothing compared)", indent=2)
            )
        else:
            for move in baseline.moves:
                label = f"{values_text(move.fixed)}: " if move.fixed else ""
                before = knob_text(move.before) if move.before is not None else (move.before_status or "none")
                after = knob_text(move.after) if move.after is not None else (move.after_status or "none")
                if move.change == "same":
                    continue
                items.append(hanging("• ", f"baseline: {label}{before} → {after} ({move.change})", indent=2))
            for regression in baseline.regressions:
                items.append(hanging(f"{_CROSS} ", f"regression: {regression}", indent=2))
            if not baseline.regressions and all(m.change == "same" for m in baseline.moves):
                items.append(hanging(f"{_TICK} ", f"baseline {baseline.file}: the frontier is where it was", indent=2))
    if options.verbose:
        items.append(wrapped("every compile, in order", style="bold", indent=2))
        points = sorted(
            [p for row in search.rows for p in row.points] + ([search.shipped] if search.shipped else []),
            key=lambda p: p.order,
        )
        for point in points:
            where = values_text(point.values) or "the factory's defaults"
            items.append(hanging(f"{point.order:>3}. ", f"{where}: {_point_text(point)}", indent=2))
            for peak_line in point.peak_lines:
                items.append(
                    hanging(
                        "",
                        f"{format_bytes(peak_line.bytes)} {peak_line.share:>4.0%} at "
                        f"{_where(peak_line.label, peak_line.kind)}",
                        indent=9,
                    )
                )
    return items


def render_table(report: FitReport, options: RenderOptions) -> str:
    report = visible_strings(report)
    buffer = io.StringIO()
    console = text_console(buffer, options)
    items: list[RenderableType] = []
    for n, search in enumerate(report.searches):
        if n:
            items.append(Text(""))
        items += _search_items(search, options)
    console.print(Group(*items))
    return defused(buffer.getvalue(), color=options.color)


def render_json(report: FitReport, options: RenderOptions) -> str:
    """The ``fieldmem.fit/1`` document: a key per line, each search on a line of its own."""
    return fit_document_text(builtins(report))


def fit_document_text(document: dict[str, Any]) -> str:
    """A fit ``document`` as JSON, laid out as :func:`render_json` writes it."""
    compact = json.JSONEncoder(separators=(",", ":")).encode
    lines = []
    for key, value in document.items():
        if key == "searches" and value:
            items = ",\n".join("    " + compact(item) for item in value)
            lines.append(f"  {compact(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {compact(key)}: {compact(value)}")
    return json_defused("{\n" + ",\n".join(lines) + "\n}\n")


def _md_cell(text: str) -> str:
    return escape(text).replace("|", "\\|") if text else ""


def render_markdown(report: FitReport, options: RenderOptions) -> str:
    report = visible_strings(report)
    out: list[str] = []
    for search in report.searches:
        out.append(f"### {_md_cell(search_title(search))}\n")
        details = [
            d
            for d in (_environment(search), search.capacity, f"donated: {search.donate}" if search.donate else "")
            if d
        ]
        if details:
            out.append(_md_cell(" · ".join(details)) + "\n")
        out.append(_md_cell(_compiles_line(search)[0].upper() + _compiles_line(search)[1:]) + ".\n")
        if search.error is not None:
            out.append(f"{FAIL} error: {_md_cell(search.error.message)}\n")
        if search.rows:
            headers = [c.header for c in _columns(search)]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join("---:" if c.justify == "right" else "---" for c in _columns(search)) + "|")
            for row in search.rows:
                out.append("| " + " | ".join(_md_cell(c) for c in _row_cells(search, row)) + " |")
            out.append("")
        changes = [row.boundary for row in search.rows if row.boundary is not None] + list(search.changes)
        for change in changes:
            out.append(
                f"- {_md_cell(_change_head(change, search.searched))}: "
                + "; ".join(_md_cell(line) for line in _change_lines(change))
            )
        for row in search.rows:
            for note in row.notes:
                out.append(f"- {_md_cell(note)}")
        for check in search.checks:
            out.append(f"- {PASS if check.passed else FAIL} {check.name}: {_md_cell(check.message)}")
        if search.baseline is not None:
            for regression in search.baseline.regressions:
                out.append(f"- {FAIL} regression: {_md_cell(regression)}")
        out.append("")
    return defused("\n".join(out).rstrip() + "\n")


# ----------------------------------------------------------------------------
# The picture

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _svg_text(text: str) -> str:
    return html_escape(text, quote=True)


def _nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < top:
        ticks.append(ticks[-1] + step)
    return ticks


@dataclass(frozen=True)
class _Chart:
    left: int = 78
    right: int = 150
    top: int = 44
    bottom: int = 52
    width: int = 760
    height: int = 340


def _search_svg(search: FitSearch, y0: int, chart: _Chart) -> list[str]:
    """One chart: each row's compiled points, footprint against the searched knob, joined by value."""
    name = search.searched
    out: list[str] = []
    plot_w = chart.width - chart.left - chart.right
    plot_h = chart.height - chart.top - chart.bottom
    gib = 2**30
    series: list[tuple[FitRow, list[tuple[float, float, bool]]]] = []  # per row: (value, GiB needed, fits)
    for row in search.rows:
        marks = []
        for p in row.points:
            value = p.values.get(name) if name is not None else None
            if p.footprint_bytes is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                marks.append((float(value), p.footprint_bytes / gib, p.fits == "yes"))
        series.append((row, sorted(marks)))
    values = [mark[0] for _, marks in series for mark in marks]
    needs = [mark[1] for _, marks in series for mark in marks]
    capacity = search.capacity_bytes / gib if search.capacity_bytes else None
    title = f"{search.name} on {search.backend}: footprint per device against {name or 'the knobs'}"
    out.append(f'<text x="{chart.left}" y="{y0 + 22}" font-size="15" font-weight="bold">{_svg_text(title)}</text>')
    if not values or not needs:
        out.append(f'<text x="{chart.left}" y="{y0 + 60}" font-size="13">no point with a footprint to draw</text>')
        return out
    low, high = min(values), max(values)
    logarithmic = low > 0 and high / low >= 16

    def x_of(v: float) -> float:
        if high == low:
            return chart.left + plot_w / 2
        if logarithmic:
            return chart.left + plot_w * (math.log(v) - math.log(low)) / (math.log(high) - math.log(low))
        return chart.left + plot_w * (v - low) / (high - low)

    y_top = max(needs + ([capacity * 1.15] if capacity else []))
    y_top = min(y_top, (capacity or y_top) * 3) if capacity else y_top  # a point far above is clipped
    ticks = _nice_ticks(y_top)
    y_max = ticks[-1]

    def y_of(v: float) -> float:
        return y0 + chart.top + plot_h * (1 - min(v, y_max) / y_max)

    base = y0 + chart.top + plot_h
    out.append(f'<line x1="{chart.left}" y1="{base}" x2="{chart.left + plot_w}" y2="{base}" stroke="#444"/>')
    out.append(f'<line x1="{chart.left}" y1="{y0 + chart.top}" x2="{chart.left}" y2="{base}" stroke="#444"/>')
    for tick in ticks:
        y = y_of(tick)
        out.append(
            f'<line x1="{chart.left - 4}" y1="{y:.1f}" x2="{chart.left + plot_w}" y2="{y:.1f}" stroke="#e4e4e4"/>'
        )
        out.append(f'<text x="{chart.left - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{tick:g} GiB</text>')
    if logarithmic:
        first = 2 ** math.ceil(math.log2(low))
        xticks = []
        v = first
        while v <= high:
            xticks.append(v)
            v *= 2
        while len(xticks) > 9:
            xticks = xticks[::2]
    else:
        xticks = sorted(set(_nice_ticks(high)[:-1] + [low, high])) if high > low else [low]
        xticks = [t for t in xticks if low <= t <= high]
    for tick in xticks:
        x = x_of(tick)
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#444"/>')
        out.append(f'<text x="{x:.1f}" y="{base + 17}" font-size="11" text-anchor="middle">{tick:g}</text>')
    axis = f"{name}{' (log scale)' if logarithmic else ''}"
    out.append(
        f'<text x="{chart.left + plot_w / 2}" y="{base + 36}" font-size="12" text-anchor="middle">{_svg_text(axis)}</text>'
    )
    if capacity:
        y = y_of(capacity)
        out.append(
            f'<line x1="{chart.left}" y1="{y:.1f}" x2="{chart.left + plot_w}" y2="{y:.1f}" stroke="#000" stroke-dasharray="6,4"/>'
        )
        out.append(
            f'<text x="{chart.left + plot_w - 4}" y="{y - 6:.1f}" font-size="11" text-anchor="end">'
            f"{_svg_text(format_bytes(search.capacity_bytes))} per device</text>"
        )
    for n, (row, marks) in enumerate(series):
        colour = _COLOURS[n % len(_COLOURS)]
        if len(marks) > 1:
            path = " ".join(f"{x_of(value):.1f},{y_of(need):.1f}" for value, need, _ in marks)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for value, need, fits in marks:
            x, y = x_of(value), y_of(need)
            fill = colour if fits else "#fff"
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{fill}" stroke="{colour}" stroke-width="2"/>')
        legend_y = y0 + chart.top + 8 + n * 36
        label = row_label(row) or "frontier"
        frontier = (
            f"largest {name}: {knob_text(row.largest)}"
            if row.largest is not None
            else _STATUS[row.status] or "none fits"
        )
        lx = chart.left + plot_w + 16
        out.append(
            f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 18}" y2="{legend_y}" stroke="{colour}" stroke-width="3"/>'
        )
        out.append(f'<text x="{lx + 24}" y="{legend_y + 4}" font-size="12">{_svg_text(label)}</text>')
        out.append(f'<text x="{lx + 24}" y="{legend_y + 19}" font-size="11" fill="#555">{_svg_text(frontier)}</text>')
    note = "filled: fits · hollow: does not fit · each mark one compile"
    out.append(f'<text x="{chart.left}" y="{y0 + chart.top - 12}" font-size="11" fill="#555">{note}</text>')
    return out


def render_svg(report: FitReport, options: RenderOptions) -> str:
    """Each search as a chart: its rows' footprints against the searched knob, the device's memory dashed."""
    report = visible_strings(report)
    chart = _Chart()
    body: list[str] = []
    for n, search in enumerate(report.searches):
        body += _search_svg(search, n * chart.height, chart)
    height = max(1, len(report.searches)) * chart.height
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{chart.width}" height="{height}" '
        f'viewBox="0 0 {chart.width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">\n'
        f'<rect width="100%" height="100%" fill="#fff"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


#: fit's formats by name: the registry's own table (fieldmem.render.formats holds their rows)
FIT_RENDERERS: dict[str, Renderer] = renderers(FIT)


def get_fit_renderer(name: str) -> Renderer:
    """The renderer of ``name`` for a FitReport (:func:`fieldmem.render.formats.get_renderer`)."""
    return get_renderer(name, FIT)


# ----------------------------------------------------------------------------
# Side by side (fieldmem compare of fit documents, --jax A,B)


def _frontier_cell(value: object, status: str | None) -> str:
    """One run's frontier of a row: the largest value that fits, and why where it is not one."""
    if status is None:
        return "missing"
    text = knob_text(value) if value is not None else "none"  # type: ignore[arg-type]
    why = _STATUS.get(status, status)
    return f"{text} ({why})" if why else text


def render_comparison(comparison: FitComparison, options: RenderOptions, output_format: str = "table") -> str:
    """Frontiers side by side: per search and row, the largest value that fits in each run, the first run
    the reference; a row whose frontier moved is marked ``≠``."""
    comparison = visible_strings(comparison)
    if output_format == "json":
        return json_defused(json.dumps(builtins(comparison), indent=1) + "\n")
    labels = list(comparison.labels)
    if output_format == "markdown":
        out = []
        for entry in comparison.entries:
            out.append(f"### {_md_cell(entry.title)}\n")
            out.append("| row | " + " | ".join(_md_cell(label) for label in labels) + " |")
            out.append("|---|" + "---|" * len(labels))
            for row in entry.rows:
                marks = ["" if n == 0 or not row.moved[n] else " ≠" for n in range(len(labels))]
                texts = [_frontier_cell(v, s) for v, s in zip(row.values, row.statuses)]
                out.append(
                    f"| {_md_cell(row.label or '—')} | "
                    + " | ".join(_md_cell(c) + m for c, m in zip(texts, marks))
                    + " |"
                )
            out.append("")
        return defused("\n".join(out).rstrip() + "\n")
    buffer = io.StringIO()
    console = text_console(buffer, options)
    items: list[RenderableType] = []
    for entry in comparison.entries:
        items.append(wrapped(Text(entry.title, style="bold")))
        columns = [Column(entry.searched_label)] + [Column(label) for label in labels]
        rows = []
        for row in entry.rows:
            cells: list[str | Text] = [row.label or "—"]
            for n, cell in enumerate(_frontier_cell(v, s) for v, s in zip(row.values, row.statuses)):
                marked = n > 0 and row.moved[n]
                cells.append(
                    Text(f"{cell} ≠" if marked else cell, style="bold red" if marked and options.color else "")
                )
            rows.append(cells)
        items.append(fitted_table(columns, rows, options.width))
    moved = comparison.moved
    items.append(wrapped(f"{moved} frontier{'s' if moved != 1 else ''} moved" if moved else "no frontier moved"))
    console.print(Group(*items))
    return defused(buffer.getvalue(), color=options.color)
