"""Renderers for ``fieldmem compare``: a Comparison as a terminal table, JSON or Markdown.

Same interface as the report renderers, ``render(comparison, options) -> str``
with a file extension, so the CLI treats them alike. They format a
:class:`~fieldmem.gate.compare.Comparison` and decide nothing: which cells differ
from the reference, and whether significantly, is in its ``differences``.
A cell that differs significantly is marked ``≠`` (red in colour), one that
differs within the tolerance ``≈`` (yellow).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable

from rich import box
from rich.table import Table
from rich.text import Text

from fieldmem.gate.compare import FIGURE_LABELS, FIGURES, VARIANTS, Cell, Column, Comparison, Difference, Row
from fieldmem.model.escaping import defused, json_defused, visible_strings
from fieldmem.model.units import format_bytes
from fieldmem.render import RenderOptions, text_console
from fieldmem.render.formats import COMPARISON, Renderer, get_renderer, renderers
from fieldmem.render.layout import hanging, natural_width, wrapped
from fieldmem.render.pieces import FAIL, PASS, code, count, escape, verdict_words

__all__ = [
    "COMPARE_RENDERERS",
    "get_compare_renderer",
    "render_json",
    "render_markdown",
    "render_table",
]

SIGNIFICANT, WITHIN = "≠", "≈"
_FIELDS: tuple[tuple[str, str], ...] = (
    ("verdict", "verdict"),
    *((f"{v}.{f}", f"{FIGURE_LABELS[f]} ({v})") for v in VARIANTS for f in FIGURES),
    ("donated.aliases", "aliases (donated)"),
    *((f"{v}.copies", f"copies ({v})") for v in VARIANTS),
)


def _value(cell: Cell, field_name: str, verbose: bool) -> str:
    """The text of one cell for one field."""
    if cell.status != "ok":  # the status row says why; one word in the verdict row is enough
        return ("missing" if cell.status == "missing" else "error") if field_name == "verdict" else ""
    if field_name == "verdict":
        text = verdict_words(cell.kind)[0]
        return text + (f" ✗ {', '.join(cell.failed_checks)}" if cell.failed_checks else "")
    variant, _, what = field_name.partition(".")
    if what == "aliases":
        if verbose and cell.aliases:
            return "\n".join(f"{a.input} → {a.output}" for a in cell.aliases)
        return str(len(cell.aliases))
    if what == "copies":
        totals = cell.copies[variant]
        return f"{totals.count} ({format_bytes(totals.bytes)})" if totals.count else "0"
    return format_bytes(cell.figures[variant][what])


def _mark(differences: tuple[Difference, ...]) -> str:
    if not differences:
        return ""
    return SIGNIFICANT if any(d.significant for d in differences) else WITHIN


def _row_fields(row: Row) -> tuple[tuple[str, str], ...]:
    """Every field, plus ``status`` when a target is missing or failed somewhere; only
    ``status`` when it was checked nowhere."""
    if all(c.status != "ok" for c in row.cells):
        return (("status", "status"),)
    if any(c.status != "ok" for c in row.cells):
        return (("status", "status"), *_FIELDS)
    return _FIELDS


def _status_text(cell: Cell) -> str:
    return {"ok": "checked", "missing": "missing", "error": f"error: {cell.error}"}[cell.status]


def _cell_text(row: Row, column: int, field_name: str, verbose: bool) -> tuple[str, str]:
    """(text, mark) for one cell of the side-by-side table."""
    cell = row.cells[column]
    text = _status_text(cell) if field_name == "status" else _value(cell, field_name, verbose)
    return text, _mark(row.differences_in(column, field_name)) if column else ""


def _summary(comparison: Comparison) -> str:
    significant = len(comparison.significant)
    within = sum(1 for row in comparison.rows for d in row.differences if not d.significant)
    reference = comparison.columns[0].label
    if not significant and not within:
        return f"no differences from {reference} (tolerance: {comparison.tolerance})"
    parts = [f"{count(significant, 'significant difference')}"]
    if within:
        parts.append(f"{within} within the tolerance")
    return f"{', '.join(parts)} from {reference} (tolerance: {comparison.tolerance})"


def _column_header(column: Column, libraries: Iterable[str] = ()) -> str:
    """The report's label, then its backend and jax (each unless the label already says it) with the
    ``libraries`` whose releases differ between the columns (``--jax`` environments), then its devices: one
    short line each, so that three or four reports fit side by side."""
    kind = column.device_kind or "no device"
    how_many = f"{column.device_count} × " if column.device_count > 1 else ""
    said = set(column.label.split(" · "))
    jax = "" if f"jax {column.jax_version}" in said else f"jax {column.jax_version}"
    versions = column.library_versions
    shown = ", ".join(f"{name} {versions.get(name, '—')}" for name in sorted(libraries))
    middle = " · ".join(part for part in (column.backend if column.backend not in said else "", jax, shown) if part)
    return "\n".join(part for part in (column.label, middle, f"{how_many}{kind}") if part)


# ----------------------------------------------------------------------------
# Table


_STYLE = {SIGNIFICANT: "bold red", WITHIN: "yellow", "": ""}


def _table(comparison: Comparison, columns: list[int], options: RenderOptions) -> Table:
    """The comparison table of the reports ``columns`` (indices into ``comparison.columns``)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("target", overflow="fold")
    table.add_column("")
    everyone = [comparison.columns[column].library_versions for column in columns]
    differing = {name for versions in everyone for name in versions if len({v.get(name) for v in everyone}) > 1}
    for column in columns:
        table.add_column(_column_header(comparison.columns[column], differing), justify="right", overflow="fold")
    for row in comparison.rows:
        fields = _row_fields(row)
        for n, (field_name, label) in enumerate(fields):
            cells = []
            for column in columns:
                text, mark = _cell_text(row, column, field_name, options.verbose)
                cells.append(Text(f"{text} {mark}" if mark else text, style=_STYLE[mark]))
            name = wrapped(Text(row.name)) if n == 0 else ""  # a long name folds under itself
            table.add_row(name, label, *cells, end_section=n == len(fields) - 1)
    return table


def _column_groups(comparison: Comparison, options: RenderOptions) -> list[list[int]]:
    """The reports of each table: all of them when they fit the width, else the reference and as many
    others as fit, table after table (squeezed into one, 50 reports leave every cell empty)."""
    everything = list(range(len(comparison.columns)))
    if natural_width(_table(comparison, everything, options)) <= options.width:
        return [everything]
    groups: list[list[int]] = []
    group = [0]
    for column in everything[1:]:
        if len(group) > 1 and natural_width(_table(comparison, [*group, column], options)) > options.width:
            groups.append(group)
            group = [0]
        group.append(column)
    groups.append(group)
    return groups


def render_table(comparison: Comparison, options: RenderOptions) -> str:
    comparison = visible_strings(comparison)  # every label, name and message as fieldmem shows user text
    buffer = io.StringIO()
    console = text_console(buffer, options)
    # every line that wraps continues under its own text (fieldmem.render.layout)
    console.print(
        wrapped(
            f"fieldmem compare · reference: {comparison.columns[0].label} · tolerance: {comparison.tolerance}"
            f" · copies ≥ {format_bytes(comparison.min_bytes)} · figures are per device",
            style="dim",
        )
    )
    if not comparison.rows:
        console.print("no targets in these reports")
        return defused(_trimmed(buffer.getvalue()), color=options.color)
    groups = _column_groups(comparison, options)
    for n, group in enumerate(groups):
        if len(groups) > 1:
            first, last = group[1] if len(group) > 1 else group[0], group[-1]
            console.print(
                wrapped(
                    f"reports {first + 1}–{last + 1} of {len(comparison.columns)}, beside the reference "
                    f"({n + 1}/{len(groups)}: too many to fit one table)",
                    style="dim",
                )
            )
        console.print(_table(comparison, group, options))
    for row in comparison.rows:
        if not row.differences and row.suggestion is None:
            continue
        console.print(wrapped(row.name, style="bold"))
        if row.suggestion is not None:
            console.print(hanging("suggest ", row.suggestion.summary, style="bold green"))
        for d in row.differences:
            mark = SIGNIFICANT if d.significant else WITHIN
            console.print(hanging(f"{mark} ", d.change.message, style=_STYLE[mark]))
    console.print(wrapped(_summary(comparison), style="bold red" if comparison.significant else "green"))
    console.print(
        wrapped(f"{SIGNIFICANT} differs from the reference · {WITHIN} differs within the tolerance", style="dim")
    )
    for note in comparison.notes:
        console.print(hanging("note: ", note, style="yellow", indent=0))
    return defused(_trimmed(buffer.getvalue()), color=options.color)


def _trimmed(text: str) -> str:
    """Each line without the blanks a grid pads its last column with."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return "".join(line.rstrip(" ") + "\n" for line in lines)


# ----------------------------------------------------------------------------
# JSON


def render_json(comparison: Comparison, options: RenderOptions) -> str:
    return json_defused(json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------
# Markdown


def _md_cell(text: str, mark: str) -> str:
    body = "<br>".join(escape(line) for line in text.splitlines()) if text else ""
    return f"**{body}** {mark}" if mark and body else (mark or body)


def _md_environment(comparison: Comparison) -> list[str]:
    columns = comparison.columns
    lines = [
        "| | " + " | ".join(code(c.label) for c in columns) + " |",
        "|:--|" + "--:|" * len(columns),
    ]
    rows = (
        ("backend", lambda c: c.backend),
        ("devices", lambda c: f"{c.device_count} × {c.device_kind or 'none'}"),
        ("jax / jaxlib", lambda c: f"{c.jax_version} / {c.jaxlib_version}"),
        ("libraries", lambda c: ", ".join(f"{n} {v}" for n, v in sorted(c.library_versions.items()))),
        ("fieldmem", lambda c: c.fieldmem_version),
        ("created", lambda c: c.created or ""),
    )
    for label, value in rows:
        if label == "libraries" and not any(c.library_versions for c in columns):
            continue  # none checked under --jax or --python
        lines.append(f"| {label} | " + " | ".join(escape(value(c)) for c in columns) + " |")
    return lines


def render_markdown(comparison: Comparison, options: RenderOptions) -> str:
    comparison = visible_strings(comparison)  # every label, name and message as fieldmem shows user text
    mark = FAIL if comparison.significant else PASS
    lines = [f"## {mark} fieldmem compare: {escape(_summary(comparison))}", ""]
    lines += _md_environment(comparison)
    if not comparison.rows:
        lines += ["", "No targets in these reports."]
    header = "| | " + " | ".join(code(c.label) for c in comparison.columns) + " |"
    rule = "|:--|" + "--:|" * len(comparison.columns)
    for row in comparison.rows:
        lines += ["", f"### {code(row.name)}", "", header, rule]
        for field_name, label in _row_fields(row):
            cells = [_md_cell(*_cell_text(row, n, field_name, options.verbose)) for n in range(len(comparison.columns))]
            lines.append(f"| {escape(label)} | " + " | ".join(cells) + " |")
        if row.suggestion is not None:
            lines += ["", f"**suggest** {escape(row.suggestion.summary)}"]
        if row.differences:
            lines.append("")
            for d in row.differences:
                change = d.change
                where = f" ({code(change.source)})" if change.source and change.source not in change.message else ""
                lines.append(f"- {SIGNIFICANT if d.significant else WITHIN} {escape(change.message)}{where}")
    lines += [
        "",
        f"{SIGNIFICANT} differs from the reference ({code(comparison.columns[0].label)}) · {WITHIN} differs within the tolerance",
    ]
    if comparison.notes:
        lines += ["", *(f"> note: {escape(note)}" for note in comparison.notes)]
    return defused("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------
# Registry


#: compare's formats by name: the registry's own table (fieldmem.render.formats holds their rows)
COMPARE_RENDERERS: dict[str, Renderer] = renderers(COMPARISON)


def get_compare_renderer(name: str) -> Renderer:
    """The renderer of ``name`` for a Comparison (:func:`fieldmem.render.formats.get_renderer`)."""
    return get_renderer(name, COMPARISON)
