"""The HTML page's chart: plain vs donated live bytes over schedule progress, one SVG per target, drawn
from the report's already decimated timelines (never raw schedule data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fieldmem.model.memory import Timeline
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.render.html_tables import VARIANT_LABEL, VARIANTS, escape

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


def target_chart(result: TargetResult, anchor: str) -> str:
    variants = {name: result.variants[name] for name in VARIANTS if name in result.variants}
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
            f'<text x="{_PLOT_X0 - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(format_bytes(tick))}</text></g>'
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
            f'd="{_step_path(timeline, axis)}"><title>{name}: {escape(_peak_words(variants[name]))}</title></path>'
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
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5"><title>{name}: {escape(_peak_words(variants[name]))}</title></circle>'
            f'<text x="{x + dx:.1f}" y="{y + dy:.1f}" text-anchor="{anchor_side}">'
            f"{name} peak {escape(format_bytes(peaks[name]))}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts) + "\n" + _chart_legend(variants, timelines)


def _chart_legend(variants: dict[str, Variant], timelines: dict[str, Timeline]) -> str:
    items = []
    for name in variants:
        timeline = timelines.get(name)
        if timeline is None:
            items.append(f'<li><span class="swatch {name}"></span><b>{VARIANT_LABEL[name]}</b>: no timeline</li>')
            continue
        where = ""
        if timeline.peak_instruction:
            where += f" at <code>{escape(timeline.peak_instruction)}</code>"
        if timeline.peak_source:
            where += f' <span class="src">{escape(timeline.peak_source)}</span>'
        kept = len(timeline.positions)
        decimated = f", decimated to {kept} points" if kept < timeline.length else ""
        items.append(
            f'<li><span class="swatch {name}"></span><b>{VARIANT_LABEL[name]}</b>: peak '
            f"<b>{escape(format_bytes(_peak_value(timeline)))}</b>{where} — schedule point "
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
