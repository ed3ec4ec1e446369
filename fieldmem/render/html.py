"""HTML renderer: one self-contained page per report, readable with JavaScript off.

The page holds everything inline — CSS, an SVG chart per target drawn here
in Python, and a few lines of JavaScript that only add a filter box and
open/close buttons. It fetches nothing (no CDN, no fonts, no images), so it
can be attached to a CI run or mailed and still open offline.

Like every renderer it formats the Report and decides nothing: the curves
are the report's already decimated ``Timeline`` points (never raw schedule
data), the copies shown are those at or above ``min_bytes`` (the report keeps
them all), and everything user-supplied (names, paths, messages, shapes) is
escaped. To stay usable with hundreds of targets, each target is a
``<details>`` section; when there are many, only the ones that need a look
(not in place, a failed check, an error) start open.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.copies import Copy
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.memory import MEMORY_FIGURES, LiveBuffer, Timeline
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.render import RenderOptions
from fieldmem.render.flame import FLAME_CSS, FLAME_JS, MAX_BUFFERS, MAX_CHILDREN, flame_data, script_json
from fieldmem.render.pieces import (
    HOST_FIGURES,
    STATUS_WORDS,
    chain_transfer_line,
    copy_kind_text,
    count,
    deviceless_label,
    footprint_curve,
    host_figure_label,
    host_figure_lines,
    host_figures_shown,
    judged_text,
    memory_space_lines,
    pair,
    plural,
    slot_input_text,
    slot_value_text,
    transfer_lines,
    verdict_words,
)

__all__ = ["OPEN_ALL_UP_TO", "render"]

OPEN_ALL_UP_TO = 12  # up to this many targets every section starts open; above, only those needing a look
_MAX_ROWS = 200  # rows per copies/live table; the JSON report keeps the rest
_VARIANTS = ("plain", "donated")
_VARIANT_LABEL = {"plain": "plain (no donation)", "donated": "donated"}


def _e(value: object) -> str:
    """Escape anything that came from the user or from XLA for text and attribute use."""
    return html.escape(str(value), quote=True)


# ----------------------------------------------------------------------------
# The chart: plain vs donated live bytes over schedule progress, one SVG.

_VIEW_W, _VIEW_H = 960, 330
_PLOT_X0, _PLOT_X1 = 86, 936
_PLOT_Y0, _PLOT_Y1 = 34, 284  # top, bottom
_MAX_Y_TICKS = 6


@dataclass(frozen=True)
class _Axis:
    """The byte scale shared by both curves: 0 .. ``top`` in ``step`` increments."""

    top: int
    step: int

    def y(self, value: float) -> float:
        return _PLOT_Y1 - (value / self.top) * (_PLOT_Y1 - _PLOT_Y0)


def _byte_axis(largest: int) -> _Axis:
    """A power-of-two tick step (bytes read best in binary units) with at most six steps."""
    largest = max(largest, 1)
    step = 1
    while math.ceil(largest / step) > _MAX_Y_TICKS:
        step *= 2
    return _Axis(top=step * math.ceil(largest / step), step=step)


def _x(position: float, length: int) -> float:
    """Schedule position -> x: each variant's own schedule spans the whole width."""
    return _PLOT_X0 + (position / max(length, 1)) * (_PLOT_X1 - _PLOT_X0)


def _peak_value(timeline: Timeline) -> int | None:
    """The plotted value at the timeline's peak position (the decimation keeps it exactly)."""
    if not timeline.live_bytes:
        return None
    if timeline.peak_position is not None and timeline.peak_position in timeline.positions:
        return timeline.live_bytes[timeline.positions.index(timeline.peak_position)]
    return max(timeline.live_bytes)


def _peak_index(timeline: Timeline) -> int:
    if timeline.peak_position is not None and timeline.peak_position in timeline.positions:
        return timeline.peak_position
    return timeline.positions[timeline.live_bytes.index(max(timeline.live_bytes))]


def _step_path(timeline: Timeline, axis: _Axis) -> str:
    """An SVG path of the step curve: each kept sample's value holds until the next sample.

    Only ``H``/``V`` moves, integer coordinates (about a screen pixel at the
    chart's natural size), and a move that goes nowhere is left out: a page
    of hundreds of 800-point curves stays a few megabytes and renders fast.
    """
    sx = (_PLOT_X1 - _PLOT_X0) / max(timeline.length, 1)
    sy = (_PLOT_Y1 - _PLOT_Y0) / axis.top
    xs = [round(_PLOT_X0 + p * sx) for p in timeline.positions]
    ys = [round(_PLOT_Y1 - v * sy) for v in timeline.live_bytes]
    moves = [f"M{xs[0]} {ys[0]}"]
    last_x, last_y = xs[0], ys[0]
    for x, y in zip(xs[1:], ys[1:]):
        if x != last_x:
            moves.append(f"H{x}")
            last_x = x
        if y != last_y:
            moves.append(f"V{y}")
            last_y = y
    moves.append(f"H{_PLOT_X1}")
    return "".join(moves)


def _peak_words(variant: Variant) -> str:
    timeline = variant.timeline
    if timeline is None or not timeline.live_bytes:
        return "no timeline in this report"
    where = f"at {timeline.peak_instruction}" if timeline.peak_instruction else ""
    if timeline.peak_source:
        where += f" ({timeline.peak_source})"
    point = _peak_index(timeline)
    return (
        f"peak {format_bytes(_peak_value(timeline))} {where}, schedule point {point + 1} of {timeline.length}".replace(
            "  ", " "
        )
    )


def _chart(result: TargetResult, anchor: str) -> str:
    variants = {name: result.variants[name] for name in _VARIANTS if name in result.variants}
    timelines = {name: v.timeline for name, v in variants.items() if v.timeline is not None and v.timeline.live_bytes}
    if not timelines:
        return '<p class="muted">No memory timeline in this report (it was saved by a fieldmem without one).</p>\n'
    peaks = {name: _peak_value(t) or 0 for name, t in timelines.items()}
    axis = _byte_axis(max(peaks.values()))
    parts = [
        f'<svg class="timeline" id="{anchor}-chart" viewBox="0 0 {_VIEW_W} {_VIEW_H}" role="img" '
        f'aria-labelledby="{anchor}-chart-title" data-ymax="{axis.top}">',
        f'<title id="{anchor}-chart-title">live bytes over schedule progress, plain vs donated</title>',
        f'<rect class="plot" x="{_PLOT_X0}" y="{_PLOT_Y0}" width="{_PLOT_X1 - _PLOT_X0}" height="{_PLOT_Y1 - _PLOT_Y0}"/>',
    ]
    for tick in range(0, axis.top + 1, axis.step):
        y = axis.y(tick)
        parts.append(
            f'<g class="ytick" data-bytes="{tick}"><line x1="{_PLOT_X0}" x2="{_PLOT_X1}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{_PLOT_X0 - 8}" y="{y + 4:.1f}" text-anchor="end">{_e(format_bytes(tick))}</text></g>'
        )
    for percent in (0, 25, 50, 75, 100):
        x = _PLOT_X0 + percent / 100 * (_PLOT_X1 - _PLOT_X0)
        parts.append(
            f'<g class="xtick"><line x1="{x:.1f}" x2="{x:.1f}" y1="{_PLOT_Y0}" y2="{_PLOT_Y1}"/>'
            f'<text x="{x:.1f}" y="{_PLOT_Y1 + 18}" text-anchor="middle">{percent} %</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{(_PLOT_X0 + _PLOT_X1) / 2:.0f}" y="{_VIEW_H - 6}" text-anchor="middle">'
        "schedule progress (each variant's own schedule, 0–100 %)</text>"
    )
    parts.append(f'<text class="axis-label" x="{_PLOT_X0 - 8}" y="{_PLOT_Y0 - 14}" text-anchor="end">live bytes</text>')
    for name, timeline in timelines.items():
        parts.append(
            f'<path class="curve {name}" data-variant="{name}" data-samples="{len(timeline.positions)}" '
            f'd="{_step_path(timeline, axis)}"><title>{name}: {_e(_peak_words(variants[name]))}</title></path>'
        )
    marks = {name: (_x(_peak_index(t) + 0.5, t.length), axis.y(peaks[name])) for name, t in timelines.items()}
    for name, (x, y) in marks.items():
        other = [m for n, m in marks.items() if n != name]
        below = name == "donated" and any(abs(oy - y) < 18 and abs(ox - x) < 160 for ox, oy in other)
        anchor_side = "end" if x > (_PLOT_X0 + _PLOT_X1) / 2 else "start"
        dx = -10 if anchor_side == "end" else 10
        dy = 20 if below else -10
        parts.append(
            f'<g class="peak {name}" data-variant="{name}" data-bytes="{peaks[name]}">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5"><title>{name}: {_e(_peak_words(variants[name]))}</title></circle>'
            f'<text x="{x + dx:.1f}" y="{y + dy:.1f}" text-anchor="{anchor_side}">'
            f"{name} peak {_e(format_bytes(peaks[name]))}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts) + "\n" + _chart_legend(variants, timelines)


def _chart_legend(variants: dict[str, Variant], timelines: dict[str, Timeline]) -> str:
    items = []
    for name in variants:
        timeline = timelines.get(name)
        if timeline is None:
            items.append(f'<li><span class="swatch {name}"></span><b>{_VARIANT_LABEL[name]}</b>: no timeline</li>')
            continue
        where = ""
        if timeline.peak_instruction:
            where += f" at <code>{_e(timeline.peak_instruction)}</code>"
        if timeline.peak_source:
            where += f' <span class="src">{_e(timeline.peak_source)}</span>'
        kept = len(timeline.positions)
        decimated = f", decimated to {kept} points" if kept < timeline.length else ""
        items.append(
            f'<li><span class="swatch {name}"></span><b>{_VARIANT_LABEL[name]}</b>: peak '
            f"<b>{_e(format_bytes(_peak_value(timeline)))}</b>{where} — schedule point "
            f"{_peak_index(timeline) + 1} of {timeline.length}{decimated}</li>"
        )
    lengths = [t.length for t in timelines.values()]
    note = ""
    if len(set(lengths)) > 1:
        note = (
            " The two schedules differ in length ("
            + ", ".join(f"{n} {t.length} points" for n, t in timelines.items())
            + "), so each is stretched to the full width: compare shapes and heights, not positions."
        )
    return (
        f'<ul class="legend">{"".join(items)}</ul>\n'
        '<p class="chart-note">x: schedule progress, 0–100 % of each variant\'s own schedule (loop bodies inline at '
        "their <code>while</code>). y: bytes of distinct allocation slices live at each point, an instruction's "
        f"operands included; both curves on one scale.{note}</p>\n"
    )


# ----------------------------------------------------------------------------
# Tables.


def _table(caption: str, header: Sequence[str], rows: Iterable[Sequence[str]], css: str, numeric: set[int]) -> str:
    """A table whose cells are already escaped HTML; ``numeric`` columns align right."""
    head = "".join(f"<th{' class=num' if i in numeric else ''}>{h}</th>" for i, h in enumerate(header))
    body = []
    for row in rows:
        cells = "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<table class="{css}"><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>\n"
    )


def _more(total: int, shown: int, what: str) -> str:
    if total <= shown:
        return ""
    return f'<p class="muted">… {total - shown} more {what} in the JSON report.</p>\n'


def _code(value: str | None) -> str:
    return f"<code>{_e(value)}</code>" if value else ""


def _src(value: str | None, call_site: str | None = None) -> str:
    """A source cell; with ``call_site``, the user's line that led to a line of library code."""
    if not value:
        return '<span class="muted">—</span>'
    text = f'<span class="src">{_e(value)}</span>'
    if call_site:
        text += f' <span class="muted">called from</span> <span class="src">{_e(call_site)}</span>'
    return text


def _live_table(variant: Variant) -> str:
    rows_all: tuple[LiveBuffer, ...] = variant.live_at_peak
    if not rows_all:
        return ""
    rows = [
        (
            _e(format_bytes(b.bytes)),
            f'<span class="kind {_e(b.kind)}">{_e(b.kind)}</span>',
            _code(slot_input_text(b) or None),
            _code(slot_value_text(b)),
            f'<span class="shape">{_e(b.shape or "")}</span>',
            _src(b.source, b.call_site),
        )
        for b in rows_all[:_MAX_ROWS]
    ]
    caption = (
        f"live at the {_VARIANT_LABEL[variant.name]} live peak: "
        f"<b>{_e(format_bytes(variant.memory.live_peak_bytes))}</b> "
        f"({count(len(rows_all), 'buffer')}, largest first)"
    )
    header = ("bytes", "kind", "input", "instruction", "shape", "source")
    return _table(caption, header, rows, f"live {variant.name}", {0}) + _more(len(rows_all), _MAX_ROWS, "buffers")


def _peak_lines_table(result: TargetResult) -> str:
    """The live peak by the user's line (an argument by its path): each variant's ``peak.lines``, largest
    first at either peak, then one row for the lines beyond the table's length and the peak itself, so each
    column adds up to its variant's live peak."""
    breakdowns = {name: result.variants[name].peak for name in _VARIANTS if name in result.variants}
    if not any(breakdowns.values()):
        return ""
    lines = {name: {line.label: line for line in b.lines} if b else {} for name, b in breakdowns.items()}
    labels = list(dict.fromkeys(label for name in ("donated", "plain") for label in lines.get(name, {})))
    labels.sort(key=lambda label: -max(v[label].bytes if label in v else 0 for v in lines.values()))

    def cells(label: str) -> list[str]:
        out = []
        for name in _VARIANTS:
            line = lines.get(name, {}).get(label)
            out += [_e(format_bytes(line.bytes)), _e(f"{100 * line.share:.1f} %")] if line else ["", ""]
        return out

    rows = []
    for label in labels[:_MAX_ROWS]:
        line = next(v[label] for v in (lines.get("donated", {}), lines.get("plain", {})) if label in v)
        where = _code(label) if line.kind == "argument" else _src(label)
        rows.append((where, f'<span class="kind {_e(line.kind)}">{_e(line.kind)}</span>', *cells(label)))
    rest = labels[_MAX_ROWS:]
    totals: list[str] = []
    others: list[str] = []
    for name in _VARIANTS:
        breakdown = breakdowns.get(name)
        if breakdown is None:
            totals += ["—", ""]
            others += ["", ""]
            continue
        size = sum(lines[name][label].bytes for label in rest if label in lines[name])
        others += [_e(format_bytes(size)), _e(f"{100 * size / breakdown.bytes:.1f} %") if breakdown.bytes else ""]
        totals += [f"<b>{_e(format_bytes(breakdown.bytes))}</b>", "100.0 %"]
    if rest:
        rows.append((f"<em>{len(rest)} more lines</em>", "", *others))
    rows.append(("<b>live peak</b>", "", *totals))
    peaks = " → ".join(f"{name} {format_bytes(b.bytes)}" for name, b in breakdowns.items() if b is not None)
    caption = f"live peak by line ({_e(peaks)}; {count(len(labels), 'line')}, largest first)"
    header = ("line or argument", "kind", "plain", "share", "donated", "share")
    return _table(caption, header, rows, "peak-lines", {2, 3, 4, 5})


def _flame(result: TargetResult, anchor: str) -> str:
    """The icicle of each variant's live peak, side by side on one byte scale; drawn by the page's script
    from the JSON block (:mod:`fieldmem.render.flame`)."""
    data = flame_data(result)
    if data is None:
        return ""
    panels = []
    for variant in data["variants"]:
        name = variant["variant"]
        panels.append(
            f'<div class="flame-panel" data-variant="{name}"><h4><span class="swatch {name}"></span>'
            f'{_VARIANT_LABEL[name]}: live peak <b class="flame-peak">{_e(format_bytes(variant["peak"]))}</b></h4>'
            f'<div class="icicle" id="{anchor}-icicle-{name}" role="group" '
            f'aria-label="flame graph of the {name} live peak"></div></div>'
        )
    capped = sum(v["capped"] for v in data["variants"])
    buffers_capped = sum(v["buffers_capped"] for v in data["variants"])
    notes = []
    if capped:
        notes.append(
            f"each frame shows its {MAX_CHILDREN - 1} largest children and one striped “… more” frame for the "
            f"rest ({count(capped, 'such frame')}; search does not reach inside them)"
        )
    if buffers_capped:
        notes.append(f"the panel lists at most {MAX_BUFFERS} buffers of each source")
    capping = f" On this target {'; '.join(notes)}: the JSON report keeps them all." if notes else ""
    legend = "".join(
        f'<li><span class="box k-{kind}"></span>{words}</li>'
        for kind, words in (
            ("argument", "argument"),
            ("frame", "your code"),
            ("library", "library code"),
            ("output", "output"),
            ("temporary", "temporaries"),
            ("constant", "constants"),
        )
    )
    return (
        f'<section class="flame" id="{anchor}-flame" data-json="{anchor}-flame-data">\n'
        "<h3>Where the live peak comes from</h3>\n"
        f'<script type="application/json" id="{anchor}-flame-data">{script_json(data)}</script>\n'
        '<p class="muted flame-nojs">The flame graph is drawn by the page\'s JavaScript; the table below has '
        "the same numbers.</p>\n"
        '<div class="flame-controls"></div>\n'
        f'<div class="flame-panels">{"".join(panels)}</div>\n'
        f'<ul class="flame-legend">{legend}</ul>\n'
        '<div class="flame-detail" hidden></div>\n'
        '<p class="chart-note">Every byte live at each variant\'s live peak, by where it comes from: the '
        "arguments by pytree path, the values the program computes by the Python stack of the operation that "
        "made them (your outermost frame on top; library frames dashed; an output's path under its frames), "
        "and the constants. Widths are bytes, both variants on one scale. Hover a frame for its bytes and share; "
        f"click one to list its buffers and zoom into it (click the root to zoom out).{capping}</p>\n"
        "</section>\n"
    )


def _figure(result: TargetResult, name: str) -> str:
    """A figure's name, with what :func:`~fieldmem.render.pieces.host_figure_label` adds to it."""
    label = host_figure_label(result, name)
    return f"<code>{_e(name)}</code>{_e(label.removeprefix(name))}"


def _memory_table(result: TargetResult) -> str:
    plain, donated = result.variants["plain"], result.variants["donated"]
    rows = [
        (
            _figure(result, name),
            _e(format_bytes(getattr(plain.memory, name))),
            _e(format_bytes(getattr(donated.memory, name))),
            _e(format_bytes(result.savings.get(name))),
        )
        for name in MEMORY_FIGURES
    ] + [
        (
            _figure(result, name),
            _e(format_bytes(getattr(plain.memory, name))),
            _e(format_bytes(getattr(donated.memory, name))),
            "",
        )
        for name in (HOST_FIGURES if host_figures_shown(result) else ())
    ]
    text = _table(
        "memory figures",
        ("figure", "plain", "donated", "plain − donated"),  # alias_bytes: negative, what donation reuses
        rows,
        "figures",
        {1, 2, 3},
    )
    text += (
        '<p class="muted">XLA\'s figures verbatim (<code>memory_analysis()</code>), plus footprint = argument + '
        "output + temp − alias + constant, live peak = distinct allocation slices live at once and constant = the "
        "arrays compiled into the program (held as long as it lives: in XLA's peak and in both of fieldmem's).</p>\n"
    )
    reasons = sorted({**plain.memory.unavailable, **donated.memory.unavailable}.items())
    if reasons:
        text += "".join(f'<p class="muted">{_e(k)} unavailable: {_e(v)}</p>\n' for k, v in reasons)
    notes = sorted({**plain.memory.notes, **donated.memory.notes}.items())
    text += "".join(f'<p class="muted">{_e(k)}: {_e(v)}</p>\n' for k, v in notes)
    text += "".join(f'<p class="muted">{_e(line)}</p>\n' for line in host_figure_lines(result))
    text += "".join(f'<p class="muted">{_e(line)}</p>\n' for line in memory_space_lines(plain, donated))
    return text


def _moves_table(variant: Variant, min_bytes: int) -> str:
    """The variant's moves between memory spaces (a TPU's HBM → VMEM prefetches), apart from its copies."""
    moves: list[Copy] = [m for m in variant.moves if m.bytes >= min_bytes]
    if not moves:
        return ""
    rows = [
        (
            _e(format_bytes(m.bytes)),
            _e(copy_kind_text(m, variant)),
            _code(m.of_parameter),
            f'<span class="shape">{_e(m.shape)}</span>',
            _src(m.source, m.call_site),
            f"<code>{_e(m.instruction)}</code> in <code>{_e(m.computation)}</code>",
        )
        for m in moves[:_MAX_ROWS]
    ]
    caption = (
        f"moves between memory spaces in the {_VARIANT_LABEL[variant.name]} variant (≥ {_e(format_bytes(min_bytes))}): "
        "no second buffer in device memory, not copies"
    )
    header = ("bytes", "from → to", "of", "shape", "source", "instruction")
    return _table(caption, header, rows, f"moves {variant.name}", {0}) + _more(len(moves), _MAX_ROWS, "moves")


def _copies_table(variant: Variant, min_bytes: int) -> str:
    copies: list[Copy] = [c for c in variant.copies if c.bytes >= min_bytes]
    if not copies:
        return ""
    rows = [
        (
            _e(format_bytes(c.bytes)),
            f'<span class="kind {_e(c.kind)}">{_e(copy_kind_text(c))}</span>',
            _code(c.of_parameter),
            f'<span class="shape">{_e(c.shape)}</span>',
            _e(format_bytes(c.bytes_per_call))
            if c.bytes_per_call is not None
            else (_e(f"when branch {c.branch} runs") if c.branch is not None else ""),
            _e(c.trip_count) if c.trip_count is not None else "",
            _src(c.source, c.call_site),
            _e(c.cause or ""),
            f"<code>{_e(c.instruction)}</code> in <code>{_e(c.computation)}</code>",
        )
        for c in copies[:_MAX_ROWS]
    ]
    caption = f"copies in the {_VARIANT_LABEL[variant.name]} variant (≥ {_e(format_bytes(min_bytes))})"
    header = ("bytes", "kind", "of", "shape", "per call", "trips", "source", "cause", "instruction")
    return _table(caption, header, rows, f"copies {variant.name}", {0, 4, 5}) + _more(len(copies), _MAX_ROWS, "copies")


def _aliases_table(variant: Variant) -> str:
    if not variant.aliases:
        return ""
    rows = [
        (_code(a.input), _e(a.input_index), "→", _code(a.output), _e(a.output_index), _e(format_bytes(a.bytes)))
        for a in variant.aliases[:_MAX_ROWS]
    ]
    header = ("input", "#", "", "output", "#", "bytes")
    return _table(
        "aliases (donated input → the output reusing its buffer)", header, rows, "aliases", {1, 4, 5}
    ) + _more(len(variant.aliases), _MAX_ROWS, "aliases")


def _unusable_table(variant: Variant) -> str:
    if not variant.unusable_donations:
        return ""
    rows = [
        (_code(u.input), _e(u.input_index), _e(format_bytes(u.bytes)), _e(u.reason))
        for u in variant.unusable_donations[:_MAX_ROWS]
    ]
    return _table(
        "unusable donations (donated, but no output reuses the buffer)",
        ("input", "#", "bytes", "reason"),
        rows,
        "unusable",
        {1, 2},
    ) + _more(len(variant.unusable_donations), _MAX_ROWS, "donations")


# ----------------------------------------------------------------------------
# Per target.


def _status(result: TargetResult) -> tuple[str, str]:
    """(css class, words) of a target's verdict, a failed check included."""
    if result.status == "error" or result.verdict is None:
        return "error", "error"
    words, _, css = verdict_words(result.verdict.kind)
    if result.failed_checks:
        return css + " failed", words + " ✗ " + ", ".join(c.name for c in result.failed_checks)
    return css, words


def _needs_a_look(result: TargetResult) -> bool:
    return (
        result.status == "error" or result.verdict is None or not result.verdict.in_place or bool(result.failed_checks)
    )


def _anchors(results: Sequence[TargetResult]) -> list[str]:
    """Unique, URL-safe ids: the index keeps two targets of the same name apart."""
    return [f"t{i}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', r.name).strip('-')[:60]}" for i, r in enumerate(results)]


def _summary(report: Report, anchors: list[str], min_bytes: int) -> str:
    rows = []
    for result, anchor in zip(report.results, anchors):
        css, words = _status(result)
        filter_text = _e(f"{result.name} {words}".lower())
        name = f'<a href="#{anchor}">{_e(result.name)}</a>'
        verdict = f'<span class="verdict {css}">{_e(words)}</span>'
        if result.status != "ok" or result.verdict is None:
            message = result.error.message if result.error else "unknown error"
            rows.append(
                f'<tr data-filter="{filter_text}" data-anchor="{anchor}"><td>{name}</td><td>{verdict}</td>'
                f'<td colspan="4" class="muted">{_e(message)}</td></tr>'
            )
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        copies = (
            f"{sum(c.bytes >= min_bytes for c in plain.copies)} / {sum(c.bytes >= min_bytes for c in donated.copies)}"
        )
        rows.append(
            f'<tr data-filter="{filter_text}" data-anchor="{anchor}"><td>{name}</td><td>{verdict}</td>'
            f'<td class="num">{_e(pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes))}</td>'
            f'<td class="num">{_e(pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes))}</td>'
            f'<td class="num">{_e(format_bytes(result.savings.get("footprint_bytes")))}</td>'
            f'<td class="num">{copies}</td></tr>'
        )
    return (
        '<table class="summary" id="summary"><thead><tr><th>target</th><th>verdict</th>'
        '<th class="num">footprint plain → donated</th><th class="num">live peak plain → donated</th>'
        f'<th class="num">saved</th><th class="num">copies plain / donated (≥ {_e(format_bytes(min_bytes))})</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>\n"
    )


def _findings(result: TargetResult) -> str:
    assert result.verdict is not None
    items = [
        f'<li class="sev-{_e(f.severity)}"><span class="sev">{_e(f.severity)}</span> {_e(f.message)}</li>'
        for f in result.verdict.findings
    ]
    checks = [
        f'<li class="check {"pass" if c.passed else "fail"}">{"✓" if c.passed else "✗"} '
        f"<b>{_e(c.name)}</b>: {_e(c.message)}</li>"
        for c in result.checks
    ]
    text = f'<ul class="checks">{"".join(checks)}</ul>\n' if checks else ""
    if items:
        text += f'<ul class="findings">{"".join(items)}</ul>\n'
    return text


def _section(result: TargetResult, anchor: str, opened: bool, min_bytes: int) -> str:
    css, words = _status(result)
    filter_text = _e(f"{result.name} {words}".lower())
    head = (
        f'<details class="target {css}" id="{anchor}" data-filter="{filter_text}"{" open" if opened else ""}>'
        f'<summary><span class="name">{_e(result.name)}</span> <span class="verdict {css}">{_e(words)}</span>'
    )
    if result.definition:
        head += f' <span class="src">{_e(result.definition)}</span>'
    head += "</summary>\n"
    if result.status != "ok" or result.verdict is None:
        error = result.error
        kind = f"{_e(error.kind)} error" if error else "error"
        message = _e(error.message) if error else "unknown error"
        return head + f'<p class="error-message"><b>{kind}:</b> {message}</p>\n</details>\n'
    plain, donated = result.variants["plain"], result.variants["donated"]
    body = [
        f'<p class="verdict-words {css}">{_e(result.verdict.summary)}</p>\n',
        f'<p class="muted">target <code>{_e(result.target)}</code> · donated: '
        f"{_e(', '.join(donated.donated_arguments) or '(none)')}"
        + (f" · expect {_e(result.expect)}" if result.expect else "")
        + "</p>\n",
        _findings(result),
        "<h3>Memory over the schedule</h3>\n",
        _chart(result, anchor),
        _flame(result, anchor),
        _peak_lines_table(result),
        _live_table(plain),
        _live_table(donated),
        _memory_table(result),
        _aliases_table(donated),
        _unusable_table(donated),
        "".join(f'<p class="muted">{_e(line.strip())}</p>\n' for line in transfer_lines(result)),
        _copies_table(plain, min_bytes),
        _copies_table(donated, min_bytes),
        _moves_table(plain, min_bytes),
        _moves_table(donated, min_bytes),
    ]
    body.append(_run_tables(result))
    warnings = [
        f"<li>jax warning ({variant.name}): {_e(w.splitlines()[0] if w else '')}</li>"
        for variant in (plain, donated)
        for w in variant.jax_warnings
    ]
    if warnings:
        body.append(f'<ul class="warnings">{"".join(warnings)}</ul>\n')
    if result.suggestion is not None:
        suggestion = result.suggestion
        body.append(f'<p class="suggestion"><b>suggestion:</b> {_e(suggestion.summary)}</p>\n')
        if suggestion.code:
            body.append(f"<pre>{_e(suggestion.code)}</pre>\n")
    return head + "".join(body) + "</details>\n"


def _run_tables(result: TargetResult) -> str:
    """What --run showed (aliases by buffer identity, device memory) and what --probe timed."""
    parts = []
    run = result.variants["donated"].run
    if run is not None:
        parts.append("<h3>At run time</h3>\n")
        parts.append(
            _table(
                "planned aliases checked by buffer identity",
                ("input", "output", "confirmed", "detail"),
                [
                    (
                        _code(a.input),
                        _code(a.output),
                        "✓" if a.confirmed else ("✗" if a.comparable else "–"),
                        _e(a.detail),
                    )
                    for a in run.aliases + run.unplanned
                ],
                "run",
                set(),
            )
            if run.aliases or run.unplanned
            else '<p class="muted">no alias planned</p>\n'
        )
        measured = [d for d in run.devices if d.measured_peak is not None]
        if measured:
            parts.append(
                _table(
                    "device memory (Device.memory_stats()) around the donated call",
                    ("device", "in use before", "in use after", "peak", "measured peak", "planned", "difference"),
                    [
                        (
                            str(d.device),
                            _e(format_bytes(d.in_use_before)),
                            _e(format_bytes(d.in_use_after)),
                            _e(format_bytes(d.peak)),
                            _e(format_bytes(d.measured_peak)),
                            _e(format_bytes(d.predicted)),
                            _e(format_bytes(d.difference)),
                        )
                        for d in measured
                    ],
                    "devices",
                    {1, 2, 3, 4, 5, 6},
                )
            )
        elif run.devices:
            parts.append(f'<p class="muted">device memory not measured: {_e(run.devices[0].unavailable)}</p>\n')
    if result.probes:
        parts.append(
            '<ul class="probes">'
            + "".join(f"<li><b>probe ({_e(p.code)}):</b> {_e(p.message)}</li>" for p in result.probes)
            + "</ul>\n"
        )
    return "".join(parts)


# ----------------------------------------------------------------------------
# The page.


def _baseline(comparison: BaselineComparison) -> str:
    def items(entries: tuple[Change, ...], css: str) -> str:
        return "".join(
            f'<li class="{css}">{_e(r.message)}'
            + (f' <span class="src">{_e(r.source)}</span>' if r.source else "")
            + "</li>"
            for r in entries
        )

    tolerance = f" (tolerance {_e(comparison.tolerance)})" if comparison.tolerance else ""
    parts = [
        f'<section class="baseline"><h2>Against the baseline <code>{_e(comparison.path)}</code>{tolerance}</h2>\n',
        f"<p>{count(len(comparison.regressions), 'regression')}, "
        f"{count(len(comparison.improvements), 'improvement')}.</p>\n",
    ]
    if comparison.regressions:
        parts.append(f'<ul class="regressions">{items(comparison.regressions, "regression")}</ul>\n')
    if comparison.improvements:
        parts.append(f'<ul class="improvements">{items(comparison.improvements, "improvement")}</ul>\n')
    accepted = [(a.target, check) for a in comparison.accepted for check in a.checks]
    if accepted:  # failing as recorded (--accept-current): shown, not hidden
        parts.append(
            '<ul class="notes">'
            + "".join(f"<li>{_e(t)}: {_e(c)} fails as recorded: accepted by the baseline</li>" for t, c in accepted)
            + "</ul>\n"
        )
    if comparison.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in comparison.notes) + "</ul>\n")
    parts.append("</section>\n")
    return "".join(parts)


def _chains(report: Report, anchors: dict[str, str]) -> str:
    """Each chain: its verdict, a row per step linking to the step's section, steps vs fused."""
    parts = ['<section class="chains"><h2>Chains</h2>\n']
    for chain in report.chains:
        css = "ok" if chain.in_place else "bad"
        parts.append(
            f'<h3 class="{css}">chain <code>{_e(chain.name)}</code></h3>\n<p class="{css}">{_e(chain.summary)}</p>\n'
        )
        rows = []
        for step in chain.steps:
            words = STATUS_WORDS.get(step.status, (step.status, ""))[0]
            anchor = anchors.get(step.result)
            name = f'<a href="#{anchor}">{_e(step.function)}</a>' if anchor else _e(step.function)
            rows.append(
                (
                    f"{step.index + 1} {name}",
                    f'<span class="status-{_e(step.status)}">{_e(words)}</span>',
                    _e(pair(step.footprint.get("plain"), step.footprint.get("donated"))) if step.footprint else "",
                    _e(format_bytes(step.grows_by)) if step.grows_by is not None else "",
                    _e(pair(step.live_peak.get("plain"), step.live_peak.get("donated"))) if step.live_peak else "",
                    ", ".join(_code(k) for k in step.kept_alive),
                )
            )
        for cost in chain.costs:
            label = "one jit (fused)" if cost.layout == "fused" else "separate jits (max)"
            anchor = anchors.get(chain.fused or "") if cost.layout == "fused" else None
            rows.append(
                (
                    f'<a href="#{anchor}"><em>{label}</em></a>' if anchor else f"<em>{label}</em>",
                    "",
                    _e(pair(cost.plain_footprint, cost.donated_footprint)),
                    "",
                    _e(pair(cost.plain_live_peak, cost.donated_live_peak)),
                    "",
                )
            )
        curve = footprint_curve(chain.steps)
        parts.append(
            _table(
                f"per step (donated footprint {_e(curve)})" if curve else "per step",
                ("step", "status", "footprint plain → donated", "Δ donated", "live peak plain → donated", "kept alive"),
                rows,
                "chain",
                {2, 3, 4},
            )
        )
        if chain.cost_summary:
            parts.append(f"<p>{_e(chain.cost_summary)}</p>\n")
        moved = chain_transfer_line(chain)
        if moved:
            parts.append(f'<p class="muted">{_e(moved)}</p>\n')
        breaking = [h for s in chain.steps for h in s.handoffs if h.breaks]
        if breaking:
            parts.append(
                '<ul class="findings">'
                + "".join(f'<li class="error">{_e(h.message)}</li>' for h in breaking)
                + "</ul>\n"
            )
    parts.append("</section>\n")
    return "".join(parts)


def _header(report: Report) -> str:
    devices = (
        ", ".join(
            f"{d.id}: {d.platform}" + (f" ({d.kind})" if d.kind and d.kind != d.platform else "")
            for d in report.devices
        )
        or "none"
    )
    facts = [
        ("fieldmem", report.fieldmem_version),
        ("jax", report.jax_version),
        ("jaxlib", report.jaxlib_version),
        *((name, version) for name, version in sorted(report.plugin_versions.items())),
        *((name, version) for name, version in sorted(report.library_versions.items())),
        (
            "backend",
            report.backend
            + (
                f" ({report.platform_version})"
                if report.platform_version and report.platform_version != report.backend
                else ""
            ),
        ),
        (plural(len(report.devices), "device"), f"{devices} — figures are per device"),
        *([("judged", judged_text(report) or "")] if judged_text(report) is not None else []),
        *([("compiled for", deviceless_label(report) or "")] if report.deviceless is not None else []),
        ("created", report.created or "unknown"),
        ("min bytes", format_bytes(report.min_bytes)),
    ]
    meta = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    return f'<header><h1>fieldmem report</h1><dl class="meta">{meta}</dl></header>\n'


def _counts(results: Sequence[TargetResult]) -> str:
    in_place = sum(1 for r in results if r.status == "ok" and r.verdict is not None and r.verdict.in_place)
    nothing = sum(
        1 for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "nothing-to-update"
    )
    errors = sum(1 for r in results if r.status != "ok" or r.verdict is None)
    too_big = sum(1 for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "does-not-fit")
    not_in_place = len(results) - in_place - nothing - errors - too_big
    failed = sum(1 for r in results if r.failed_checks)
    as_written = sum(
        1 for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "in-place-as-written"
    )
    words = [count(len(results), "target"), f"{in_place} in place", f"{not_in_place} not in place"]
    if as_written:
        words[1] += f" ({as_written} as written)"
    if nothing:
        words.append(f"{nothing} with nothing to update")
    if too_big:
        words.append(f"{too_big} that do not fit the device")
    if errors:
        words.append(count(errors, "error"))
    if failed:
        words.append(f"{failed} with a failed check")
    return f'<p class="counts">{" · ".join(words)}</p>\n'


def _attention(results: Sequence[TargetResult], anchors: list[str], shown: int = 30) -> str:
    """With many targets, links to those needing a look, which the long summary would bury."""
    flagged = [(r, a) for r, a in zip(results, anchors) if _needs_a_look(r)]
    if not flagged:
        return f'<p class="attention ok">All {len(results)} targets are in place and pass their checks.</p>\n'
    links = ", ".join(f'<a href="#{a}">{_e(r.name)}</a>' for r, a in flagged[:shown])
    more = f", … {len(flagged) - shown} more" if len(flagged) > shown else ""
    return (
        f'<p class="attention">Needs a look ({len(flagged)}: not in place, a failed check or an error; '
        f"these sections start open, the others closed): {links}{more}</p>\n"
    )


def render(report: Report, options: RenderOptions) -> str:
    """The whole page as one string (write it with ``fieldmem.model.files.write_atomic``)."""
    report = visible_strings(report)  # every name, path and message as fieldmem shows user text
    results = report.results
    anchors = _anchors(results)
    many = len(results) > OPEN_ALL_UP_TO
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>fieldmem report · {count(len(results), 'target')} · {_e(report.backend)}</title>\n",
        f"<style>{_CSS}{FLAME_CSS}</style>\n</head>\n<body>\n",
        _header(report),
        "<main>\n",
    ]
    if not results:
        parts.append('<p class="counts">No targets were checked.</p>\n')
    else:
        parts.append(_counts(results))
        if many:
            parts.append(_attention(results, anchors))
        parts.append('<div id="controls"></div>\n')
        parts.append(_summary(report, anchors, options.min_bytes))
        if report.chains:
            parts.append(_chains(report, {r.name: a for r, a in zip(results, anchors)}))
        if report.baseline is not None:
            parts.append(_baseline(report.baseline))
        parts.extend(
            _section(result, anchor, not many or _needs_a_look(result), options.min_bytes)
            for result, anchor in zip(results, anchors)
        )
    parts.append("</main>\n")
    parts.append(f"<script>{_JS}{FLAME_JS}</script>\n</body>\n</html>\n")
    return defused("".join(parts))


_CSS = """
:root{--plain:#e8590c;--donated:#1971c2;--ok:#2b8a3e;--bad:#c92a2a;--warn:#e67700;--muted:#6b7280;
--line:#e5e7eb;--bg:#fff;--fg:#1f2328;--code:#f6f8fa}
.status-breaks,.status-error{color:var(--bad);font-weight:600}.status-in-place{color:var(--ok)}.status-grows{color:var(--donated)}
h3.ok,p.ok{color:var(--ok)}h3.bad,p.bad{color:var(--bad)}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1f2937;color:#f9fafb;padding:14px 28px 10px}
header h1{margin:0 0 6px;font-size:20px;font-weight:600}
dl.meta{display:flex;flex-wrap:wrap;gap:4px 22px;margin:0;font-size:12.5px}
dl.meta div{display:flex;gap:6px}dl.meta dt{color:#9ca3af}dl.meta dd{margin:0}
main{max-width:1240px;margin:0 auto;padding:14px 28px 40px}
h2{font-size:17px;margin:22px 0 8px}h3{font-size:14px;margin:16px 0 6px;color:#374151}
code,.shape,.src,pre{font-family:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",Menlo,monospace;font-size:12.5px}
code{background:var(--code);padding:0 3px;border-radius:3px}
.src{color:#6d28d9}.muted{color:var(--muted)}.shape{color:#374151}
pre{background:var(--code);padding:8px 10px;border-radius:6px;overflow:auto}
table{border-collapse:collapse;margin:8px 0 14px;width:100%}
caption{text-align:left;font-weight:600;padding:2px 0 6px;color:#374151}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600;background:#f9fafb}
td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
table.figures,table.aliases,table.unusable{width:auto;min-width:520px}
table.summary td:first-child a{font-weight:600;color:var(--fg);text-decoration:none}
table.summary td:first-child a:hover{text-decoration:underline}
.verdict{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;white-space:nowrap;
color:#fff;background:var(--muted)}
.verdict.in-place{background:var(--ok)}.verdict.as-written{background:var(--warn)}.verdict.not-in-place{background:var(--bad)}.verdict.nothing-to-update,.verdict.unknown{background:var(--warn)}.verdict.error{background:#4b5563}
.verdict.failed{outline:2px solid var(--warn);outline-offset:1px}
p.counts{font-size:15px;margin:6px 0 10px}
p.attention{background:#fff5f5;border:1px solid #ffc9c9;border-radius:6px;padding:8px 12px;margin:8px 0}
p.attention.ok{background:#ebfbee;border-color:#b2f2bb}p.attention a{color:var(--bad);font-weight:600}
details.target{border:1px solid var(--line);border-left:5px solid var(--muted);border-radius:6px;margin:12px 0;padding:0 16px}
details.target.in-place{border-left-color:var(--ok)}details.target.as-written{border-left-color:var(--warn)}details.target.not-in-place{border-left-color:var(--bad)}details.target.nothing-to-update{border-left-color:var(--warn)}
details.target.error{border-left-color:#4b5563}
details.target>summary{cursor:pointer;padding:10px 0;font-size:15px;list-style-position:outside}
details.target>summary .name{font-weight:600}
details.target[open]>summary{border-bottom:1px solid var(--line);margin-bottom:8px}
p.verdict-words{font-size:15px;font-weight:600;margin:8px 0}
p.verdict-words.in-place{color:var(--ok)}p.verdict-words.as-written{color:var(--warn)}p.verdict-words.not-in-place{color:var(--bad)}p.verdict-words.nothing-to-update{color:var(--warn)}
p.error-message{color:var(--bad)}
ul.findings,ul.checks,ul.warnings,ul.legend{list-style:none;padding:0;margin:6px 0}
ul.findings li,ul.checks li{padding:3px 8px;margin:3px 0;border-radius:4px;background:#f9fafb;border-left:3px solid var(--muted)}
.sev{display:inline-block;min-width:56px;font-size:11px;font-weight:700;text-transform:uppercase}
li.sev-error{border-left-color:var(--bad)!important;background:#fff5f5!important}li.sev-error .sev{color:var(--bad)}
li.sev-warning{border-left-color:var(--warn)!important;background:#fff9db!important}li.sev-warning .sev{color:var(--warn)}
li.sev-info{border-left-color:#1c7ed6!important}li.sev-info .sev{color:#1c7ed6}
li.check.pass{border-left-color:var(--ok);color:var(--ok)}li.check.fail{border-left-color:var(--bad);color:var(--bad)}
ul.warnings li{color:var(--warn)}
svg.timeline{display:block;width:100%;max-width:960px;height:auto;font:12px system-ui,"DejaVu Sans",sans-serif}
svg.timeline rect.plot{fill:#fcfcfd;stroke:#d1d5db}
svg.timeline .ytick line,svg.timeline .xtick line{stroke:#eceef1}
svg.timeline text{fill:#4b5563}svg.timeline .axis-label{fill:#6b7280;font-style:italic}
svg.timeline path.curve{fill:none;stroke-width:2.2;stroke-linejoin:round}
svg.timeline path.plain{stroke:var(--plain)}svg.timeline path.donated{stroke:var(--donated)}
svg.timeline .peak circle{stroke:#fff;stroke-width:2}
svg.timeline .peak.plain circle{fill:var(--plain)}svg.timeline .peak.donated circle{fill:var(--donated)}
svg.timeline .peak text{font-weight:700;font-size:12.5px;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg.timeline .peak.plain text{fill:var(--plain)}svg.timeline .peak.donated text{fill:var(--donated)}
ul.legend li{margin:2px 0}
.swatch{display:inline-block;width:18px;height:4px;border-radius:2px;vertical-align:middle;margin-right:6px}
.swatch.plain{background:var(--plain)}.swatch.donated{background:var(--donated)}
p.chart-note{font-size:12.5px;color:var(--muted);max-width:960px;margin:4px 0 10px}
.kind{font-size:12px;padding:0 6px;border-radius:8px;background:#f1f3f5}
.kind.parameter{background:#fff4e6;color:#9c3b00}.kind.aliased{background:#e7f5ff;color:#1864ab}
.kind.output{background:#ebfbee;color:#2b8a3e}.kind.temporary{background:#f3f0ff;color:#5f3dc4}
.kind.loop{background:#fff5f5;color:var(--bad)}.kind.conditional{background:#fff9db;color:#866200}
section.baseline{border:1px solid var(--line);border-radius:6px;padding:4px 16px 8px;margin:12px 0}
li.regression{color:var(--bad)}li.improvement{color:var(--ok)}
#controls{display:flex;gap:8px;align-items:center;margin:4px 0 2px}
#controls input{font:inherit;padding:4px 8px;width:320px;border:1px solid #d1d5db;border-radius:5px}
#controls button{font:inherit;padding:3px 10px;border:1px solid #d1d5db;border-radius:5px;background:#f9fafb;cursor:pointer}
[hidden]{display:none!important}
"""

# Enhancement only: the page shows everything without it. Builds the filter
# box and the open/close buttons, so a reader with JavaScript off never sees
# controls that do nothing; a summary link opens the section it points to.
_JS = """
(function(){
var controls=document.getElementById('controls');if(!controls)return;
var rows=[].slice.call(document.querySelectorAll('#summary tbody tr'));
var sections=[].slice.call(document.querySelectorAll('details.target'));
var box=document.createElement('input');box.type='search';box.id='filter';
box.placeholder='filter: target name or verdict';
var count=document.createElement('span');count.className='muted';
function button(label,open){var b=document.createElement('button');b.type='button';b.textContent=label;
b.addEventListener('click',function(){sections.forEach(function(s){if(!s.hidden)s.open=open;});});return b;}
function apply(){var words=box.value.toLowerCase().trim();var shown=0;
function match(el){return !words||el.getAttribute('data-filter').indexOf(words)>=0;}
rows.forEach(function(r){r.hidden=!match(r);});
sections.forEach(function(s){s.hidden=!match(s);if(!s.hidden)shown++;});
count.textContent=shown+' of '+sections.length+' shown';}
box.addEventListener('input',apply);
controls.appendChild(box);controls.appendChild(button('open all',true));controls.appendChild(button('close all',false));
controls.appendChild(count);apply();
document.querySelectorAll('#summary a, p.attention a').forEach(function(a){a.addEventListener('click',function(){
var s=document.getElementById(a.getAttribute('href').slice(1));if(s)s.open=true;});});
if(location.hash){var s=document.getElementById(location.hash.slice(1));if(s&&s.tagName==='DETAILS')s.open=true;}
})();
"""
