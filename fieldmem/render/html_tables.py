"""The HTML page's tables: a target's figures, copies, moves, aliases, unusable donations, what lives at
the peak (by buffer and by line) and what --run and --probe showed, each as escaped HTML.

:mod:`fieldmem.render.html` lays them out; they format and decide nothing.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from fieldmem.model.copies import Copy
from fieldmem.model.memory import MEMORY_FIGURES, LiveBuffer
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.render.pieces import (
    HOST_FIGURES,
    copy_kind_text,
    copy_per_call_text,
    count,
    host_figure_label,
    host_figure_lines,
    host_figures_shown,
    memory_space_lines,
    slot_input_text,
    slot_value_text,
)

_MAX_ROWS = 200  # rows per copies/live table; the JSON report keeps the rest
VARIANTS = ("plain", "donated")
VARIANT_LABEL = {"plain": "plain (no donation)", "donated": "donated"}


def escape(value: object) -> str:
    """Escape anything that came from the user or from XLA for text and attribute use."""
    return html.escape(str(value), quote=True)


# ----------------------------------------------------------------------------
# Tables.


def html_table(caption: str, header: Sequence[str], rows: Iterable[Sequence[str]], css: str, numeric: set[int]) -> str:
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


def code_cell(value: str | None) -> str:
    return f"<code>{escape(value)}</code>" if value else ""


def _src(value: str | None, call_site: str | None = None) -> str:
    """A source cell; with ``call_site``, the user's line that led to a line of library code."""
    if not value:
        return '<span class="muted">—</span>'
    text = f'<span class="src">{escape(value)}</span>'
    if call_site:
        text += f' <span class="muted">called from</span> <span class="src">{escape(call_site)}</span>'
    return text


def live_table(variant: Variant) -> str:
    rows_all: tuple[LiveBuffer, ...] = variant.live_at_peak
    if not rows_all:
        return ""
    rows = [
        (
            escape(format_bytes(b.bytes)),
            f'<span class="kind {escape(b.kind)}">{escape(b.kind)}</span>',
            code_cell(slot_input_text(b) or None),
            code_cell(slot_value_text(b)),
            f'<span class="shape">{escape(b.shape or "")}</span>',
            _src(b.source, b.call_site),
        )
        for b in rows_all[:_MAX_ROWS]
    ]
    caption = (
        f"live at the {VARIANT_LABEL[variant.name]} live peak: "
        f"<b>{escape(format_bytes(variant.memory.live_peak_bytes))}</b> "
        f"({count(len(rows_all), 'buffer')}, largest first)"
    )
    header = ("bytes", "kind", "input", "instruction", "shape", "source")
    return html_table(caption, header, rows, f"live {variant.name}", {0}) + _more(len(rows_all), _MAX_ROWS, "buffers")


def peak_lines_table(result: TargetResult) -> str:
    """The live peak by the user's line (an argument by its path): each variant's ``peak.lines``, largest
    first at either peak, then one row for the lines beyond the table's length and the peak itself, so each
    column adds up to its variant's live peak."""
    breakdowns = {name: result.variants[name].peak for name in VARIANTS if name in result.variants}
    if not any(breakdowns.values()):
        return ""
    lines = {name: {line.label: line for line in b.lines} if b else {} for name, b in breakdowns.items()}
    labels = list(dict.fromkeys(label for name in ("donated", "plain") for label in lines.get(name, {})))
    labels.sort(key=lambda label: -max(v[label].bytes if label in v else 0 for v in lines.values()))

    def cells(label: str) -> list[str]:
        out = []
        for name in VARIANTS:
            line = lines.get(name, {}).get(label)
            out += [escape(format_bytes(line.bytes)), escape(f"{100 * line.share:.1f} %")] if line else ["", ""]
        return out

    rows = []
    for label in labels[:_MAX_ROWS]:
        line = next(v[label] for v in (lines.get("donated", {}), lines.get("plain", {})) if label in v)
        where = code_cell(label) if line.kind == "argument" else _src(label)
        rows.append((where, f'<span class="kind {escape(line.kind)}">{escape(line.kind)}</span>', *cells(label)))
    rest = labels[_MAX_ROWS:]
    totals: list[str] = []
    others: list[str] = []
    for name in VARIANTS:
        breakdown = breakdowns.get(name)
        if breakdown is None:
            totals += ["—", ""]
            others += ["", ""]
            continue
        size = sum(lines[name][label].bytes for label in rest if label in lines[name])
        others += [
            escape(format_bytes(size)),
            escape(f"{100 * size / breakdown.bytes:.1f} %") if breakdown.bytes else "",
        ]
        totals += [f"<b>{escape(format_bytes(breakdown.bytes))}</b>", "100.0 %"]
    if rest:
        rows.append((f"<em>{len(rest)} more lines</em>", "", *others))
    rows.append(("<b>live peak</b>", "", *totals))
    peaks = " → ".join(f"{name} {format_bytes(b.bytes)}" for name, b in breakdowns.items() if b is not None)
    caption = f"live peak by line ({escape(peaks)}; {count(len(labels), 'line')}, largest first)"
    header = ("line or argument", "kind", "plain", "share", "donated", "share")
    return html_table(caption, header, rows, "peak-lines", {2, 3, 4, 5})


def _figure(result: TargetResult, name: str) -> str:
    """A figure's name, with what :func:`~fieldmem.render.pieces.host_figure_label` adds to it."""
    label = host_figure_label(result, name)
    return f"<code>{escape(name)}</code>{escape(label.removeprefix(name))}"


def memory_table(result: TargetResult) -> str:
    plain, donated = result.variants["plain"], result.variants["donated"]
    rows = [
        (
            _figure(result, name),
            escape(format_bytes(getattr(plain.memory, name))),
            escape(format_bytes(getattr(donated.memory, name))),
            escape(format_bytes(result.savings.get(name))),
        )
        for name in MEMORY_FIGURES
    ] + [
        (
            _figure(result, name),
            escape(format_bytes(getattr(plain.memory, name))),
            escape(format_bytes(getattr(donated.memory, name))),
            "",
        )
        for name in (HOST_FIGURES if host_figures_shown(result) else ())
    ]
    text = html_table(
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
        text += "".join(f'<p class="muted">{escape(k)} unavailable: {escape(v)}</p>\n' for k, v in reasons)
    notes = sorted({**plain.memory.notes, **donated.memory.notes}.items())
    text += "".join(f'<p class="muted">{escape(k)}: {escape(v)}</p>\n' for k, v in notes)
    text += "".join(f'<p class="muted">{escape(line)}</p>\n' for line in host_figure_lines(result))
    text += "".join(f'<p class="muted">{escape(line)}</p>\n' for line in memory_space_lines(plain, donated))
    return text


def moves_table(variant: Variant, min_bytes: int) -> str:
    """The variant's moves between memory spaces (a TPU's HBM → VMEM prefetches), apart from its copies."""
    moves: list[Copy] = [m for m in variant.moves if m.bytes >= min_bytes]
    if not moves:
        return ""
    rows = [
        (
            escape(format_bytes(m.bytes)),
            escape(copy_kind_text(m, variant)),
            code_cell(m.of_parameter),
            f'<span class="shape">{escape(m.shape)}</span>',
            _src(m.source, m.call_site),
            f"<code>{escape(m.instruction)}</code> in <code>{escape(m.computation)}</code>",
        )
        for m in moves[:_MAX_ROWS]
    ]
    caption = (
        f"moves between memory spaces in the {VARIANT_LABEL[variant.name]} variant (≥ {escape(format_bytes(min_bytes))}): "
        "no second buffer in device memory, not copies"
    )
    header = ("bytes", "from → to", "of", "shape", "source", "instruction")
    return html_table(caption, header, rows, f"moves {variant.name}", {0}) + _more(len(moves), _MAX_ROWS, "moves")


def copies_table(variant: Variant, min_bytes: int) -> str:
    copies: list[Copy] = [c for c in variant.copies if c.bytes >= min_bytes]
    if not copies:
        return ""
    rows = [
        (
            escape(format_bytes(c.bytes)),
            f'<span class="kind {escape(c.kind)}">{escape(copy_kind_text(c))}</span>',
            code_cell(c.of_parameter),
            f'<span class="shape">{escape(c.shape)}</span>',
            escape(format_bytes(c.bytes_per_call))
            if c.bytes_per_call is not None
            else escape(copy_per_call_text(c) or ""),
            escape(c.trip_count) if c.trip_count is not None else "",
            _src(c.source, c.call_site),
            escape(c.cause or ""),
            f"<code>{escape(c.instruction)}</code> in <code>{escape(c.computation)}</code>",
        )
        for c in copies[:_MAX_ROWS]
    ]
    caption = f"copies in the {VARIANT_LABEL[variant.name]} variant (≥ {escape(format_bytes(min_bytes))})"
    header = ("bytes", "kind", "of", "shape", "per call", "trips", "source", "cause", "instruction")
    return html_table(caption, header, rows, f"copies {variant.name}", {0, 4, 5}) + _more(
        len(copies), _MAX_ROWS, "copies"
    )


def aliases_table(variant: Variant) -> str:
    if not variant.aliases:
        return ""
    rows = [
        (
            code_cell(a.input),
            escape(a.input_index),
            "→",
            code_cell(a.output),
            escape(a.output_index),
            escape(format_bytes(a.bytes)),
        )
        for a in variant.aliases[:_MAX_ROWS]
    ]
    header = ("input", "#", "", "output", "#", "bytes")
    return html_table(
        "aliases (donated input → the output reusing its buffer)", header, rows, "aliases", {1, 4, 5}
    ) + _more(len(variant.aliases), _MAX_ROWS, "aliases")


def unusable_table(variant: Variant) -> str:
    if not variant.unusable_donations:
        return ""
    rows = [
        (code_cell(u.input), escape(u.input_index), escape(format_bytes(u.bytes)), escape(u.reason))
        for u in variant.unusable_donations[:_MAX_ROWS]
    ]
    return html_table(
        "unusable donations (donated, but no output reuses the buffer)",
        ("input", "#", "bytes", "reason"),
        rows,
        "unusable",
        {1, 2},
    ) + _more(len(variant.unusable_donations), _MAX_ROWS, "donations")


def run_tables(result: TargetResult) -> str:
    """What --run showed (aliases by buffer identity, device memory) and what --probe timed."""
    parts = []
    run = result.variants["donated"].run
    if run is not None:
        parts.append("<h3>At run time</h3>\n")
        parts.append(
            html_table(
                "planned aliases checked by buffer identity",
                ("input", "output", "confirmed", "detail"),
                [
                    (
                        code_cell(a.input),
                        code_cell(a.output),
                        "✓" if a.confirmed else ("✗" if a.comparable else "–"),
                        escape(a.detail),
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
                html_table(
                    "device memory (Device.memory_stats()) around the donated call",
                    ("device", "in use before", "in use after", "peak", "measured peak", "planned", "difference"),
                    [
                        (
                            str(d.device),
                            escape(format_bytes(d.in_use_before)),
                            escape(format_bytes(d.in_use_after)),
                            escape(format_bytes(d.peak)),
                            escape(format_bytes(d.measured_peak)),
                            escape(format_bytes(d.predicted)),
                            escape(format_bytes(d.difference)),
                        )
                        for d in measured
                    ],
                    "devices",
                    {1, 2, 3, 4, 5, 6},
                )
            )
        elif run.devices:
            parts.append(f'<p class="muted">device memory not measured: {escape(run.devices[0].unavailable)}</p>\n')
    if result.probes:
        parts.append(
            '<ul class="probes">'
            + "".join(f"<li><b>probe ({escape(p.code)}):</b> {escape(p.message)}</li>" for p in result.probes)
            + "</ul>\n"
        )
    return "".join(parts)
