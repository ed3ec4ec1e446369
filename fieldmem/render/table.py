"""Terminal renderer: one row per target, plain vs donated, then the verdicts.

It formats what the report holds and decides nothing: which copies are shown
is the ``min_bytes`` threshold (the report keeps them all), everything else is
layout. ``verbose`` adds, per target, every memory figure, alias, unusable
donation, copy and finding, and a sparkline of live bytes over the schedule
for plain vs donated (resampled from the report's decimated timeline).
"""

from __future__ import annotations

import io
import threading

from rich import box
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from fieldmem.model.copies import Copy
from fieldmem.model.escaping import defused, visible, visible_strings
from fieldmem.model.memory import MEMORY_FIGURES, Timeline
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check
from fieldmem.model.vocabulary import copy_kind_label
from fieldmem.render import RenderOptions, text_console
from fieldmem.render.baseline import comparison_renderables
from fieldmem.render.chains import chain_renderables
from fieldmem.render.layout import Column, fitted_table, hanging, wrapped
from fieldmem.render.peak import peak_table
from fieldmem.render.pieces import (
    HOST_FIGURES,
    block,
    copy_kind_text,
    copy_per_call_text,
    count,
    deviceless_label,
    host_figure_label,
    host_figure_lines,
    host_figures_shown,
    judged_text,
    libraries_text,
    memory_space_lines,
    module_settings_text,
    moves_line,
    pair,
    plugins_text,
    slot_input_text,
    slot_value_text,
    source_text,
    transfer_lines,
    verdict_words,
)
from fieldmem.render.suggest import suggestion_renderables

__all__ = ["DetailsAhead", "render", "render_lines", "sparkline"]

_TOP_COPIES = 3
SPARK_WIDTH = 56
_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}
# the notes shown without -v: what donation changes (a copy it saves, a variant it makes fit the device) and a
# variant --run did not call
_INFO_SHOWN = frozenset({"plain-copy", "exceeds-device-memory", "run-not-made"})


def _copies_shown(variant: Variant, min_bytes: int) -> list:
    return [c for c in variant.copies if c.bytes >= min_bytes]


def _verdict_cell(result: TargetResult, accepted: tuple[Check, ...] = ()) -> Text:
    if result.status == "error" or result.verdict is None:
        kind = result.error.kind if result.error is not None else None
        # a run that died says how: timeout, crash, out-of-memory
        return Text(kind if kind in ("timeout", "crash", "out-of-memory") else "error", style="bold red")
    failed = [c for c in result.failed_checks if c not in accepted]
    words, style, _ = verdict_words(result.verdict.kind)
    text = Text(words, style=f"bold {style}")
    if failed:
        text.append(f" ✗ {', '.join(c.name for c in failed)}", style="red")
    if accepted:  # failing as the baseline recorded (--accept-current): shown, not hidden
        text.append(f" ✗ {', '.join(c.name for c in accepted)} (accepted)", style="yellow")
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


def sparkline_lines(plain: Variant, donated: Variant, width: int = SPARK_WIDTH + 80) -> list[RenderableType]:
    """The verbose view's "memory over the schedule": plain and donated on one scale, peaks stated.

    A heading, then per variant its name, its sparkline and its peak; where
    the peak (with its source) does not fit beside the sparkline in ``width``,
    it goes on the next line under the sparkline, whole, rather than folding
    in a narrow column. A terminal narrower than the label and the sparkline
    gets a sparkline that fits it (one block per column still shows a peak).
    """
    variants = [v for v in (plain, donated) if v.timeline is not None and v.timeline.live_bytes]
    if not variants:
        return []
    peaks = {v.name: max(v.timeline.live_bytes) for v in variants if v.timeline is not None}
    scale = max(peaks.values())
    lines: list[RenderableType] = [
        hanging(
            "",
            f"memory over the schedule, plain vs donated (each 0 → 100 % of its own schedule; █ = {format_bytes(scale)})",
            style="bold",
        )
    ]
    label = 12  # "    donated "
    spark_width = max(min(SPARK_WIDTH, width - label), 8)
    for variant in variants:
        timeline = variant.timeline
        assert timeline is not None
        where = f" at {timeline.peak_instruction}" if timeline.peak_instruction else ""
        if timeline.peak_source:
            where += f" ({timeline.peak_source})"
        peak = f"peak {format_bytes(peaks[variant.name])}{where}"
        line = Text(f"    {variant.name:<7} ")
        line.append(sparkline(timeline, scale, spark_width), style="dark_orange" if variant.name == "plain" else "blue")
        if label + spark_width + 1 + len(peak) <= width:
            line.append(f" {peak}")
            lines.append(line)
        else:
            lines.append(line)
            lines.append(hanging("", peak, indent=label))
    return lines


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
            table.add_row(Text(result.name), "", _verdict_cell(result), "", "", "", "")
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        # Text: a name is the user's text, never rich markup ("chain[fused]" would lose "[fused]")
        table.add_row(
            Text(result.name),
            Text(", ".join(donated.donated_arguments) or "(none)"),
            _verdict_cell(result, report.accepted_failures(result)),
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
    # each cell's wrapped lines hang two columns in, under their own first line (a long name folds so too)
    for result in report.results:
        if result.status == "error":
            table.add_row(wrapped(Text(result.name)), wrapped(_verdict_cell(result)), "")
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        saved = format_bytes(result.savings.get("footprint_bytes"))
        figures = "\n".join(
            (
                f"footprint {pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes)} (saves {saved})",
                f"live peak {pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes)}",
                # plain → donated, as the column's header and the lines above it read
                f"copies {len(_copies_shown(plain, options.min_bytes))} → {len(_copies_shown(donated, options.min_bytes))}"
                f" · donated {', '.join(donated.donated_arguments) or '(none)'}",
            )
        )
        table.add_row(
            wrapped(Text(result.name)),
            wrapped(_verdict_cell(result, report.accepted_failures(result))),
            wrapped(figures),
            end_section=True,
        )
    return table


def run_lines(result: TargetResult, verbose: bool = False) -> list[RenderableType]:
    """What ``--run`` showed: aliases confirmed by buffer identity, and device memory (the worst device)."""
    lines: list[RenderableType] = []
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
        lines.append(hanging(f"run ({name}, {format_seconds(run.seconds)}): ", f"{words}; {memory}", style=style))
        if verbose:
            for device in run.devices:
                if device.measured_peak is None:
                    continue
                lines.append(
                    hanging(
                        f"device {device.device}: ",
                        f"in use {format_bytes(device.in_use_before)} → "
                        f"{format_bytes(device.in_use_after)}, peak {format_bytes(device.peak)}, measured "
                        f"{format_bytes(device.measured_peak)} vs planned {format_bytes(device.predicted)}",
                        style="dim",
                        indent=4,
                    )
                )
    styles = {"slice-only": "green", "whole-buffer": "red", "inconclusive": "yellow", "not-probed": "dim"}
    for probe in result.probes:
        if probe.code == "whole-buffer":
            continue  # a warning finding of the verdict already says it
        lines.append(hanging(f"probe ({probe.code}): ", probe.message, style=styles.get(probe.code, "")))
    return lines


def format_seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _details(console: Console, result: TargetResult, options: RenderOptions, accepted: tuple[Check, ...] = ()) -> None:
    heading = Text(result.name, style="bold")
    if result.definition:
        heading.append(f"  ({result.definition})", style="dim")
    console.print(wrapped(heading))
    if result.status == "error" or result.verdict is None:
        message = (result.error.message if result.error else "") or "unknown error"
        if options.verbose:
            console.print(hanging("error: ", message, style="red"))
        else:
            # the full message is the run's `fieldmem: error:` line on stderr; here it is one line
            console.print(Text(f"  error: {message.splitlines()[0]}", style="red"), no_wrap=True, overflow="ellipsis")
        return
    console.print(hanging("", result.verdict.summary))
    for check in result.checks:
        if check in accepted:
            console.print(hanging("✗ ", f"{check.name} (accepted by the baseline): {check.message}", style="yellow"))
            continue
        mark, style = ("✓", "green") if check.passed else ("✗", "red")
        console.print(hanging(f"{mark} ", f"{check.name}: {check.message}", style=style))
    findings = (
        result.verdict.findings
        if options.verbose
        else [f for f in result.verdict.findings if f.severity != "info" or f.code in _INFO_SHOWN]
    )
    # the summary already quotes the first problem
    findings = [f for f in findings if f.message not in result.verdict.summary]
    for finding in findings[: None if options.verbose else 6]:
        console.print(hanging("• ", finding.message, style=_STYLE.get(finding.severity, "")))
    hidden = len(findings) - 6
    if not options.verbose and hidden > 0:
        console.print(Text(f"  … {hidden} more (use -v)", style="dim"))
    for line in run_lines(result, verbose=options.verbose):
        console.print(line)
    if result.suggestion is not None:
        for item in suggestion_renderables(
            result.suggestion,
            verbose=options.verbose,
            min_bytes=options.min_bytes,
            width=options.width,
            target=result.target,
        ):
            console.print(item)
    if options.top:
        for item in peak_table(result, options.top, options.width):
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
            kind = copy_kind_text(c)
            console.print(hanging(f"{name} copy: ", f"{what} {format_bytes(c.bytes)} [{kind}]{where}", style="dim"))
        moves = moves_line(result.variants["plain"], result.variants["donated"])
        if moves is not None:
            console.print(hanging("", moves, style="dim"))
        return
    _verbose(console, result, options)


def _verbose(console: Console, result: TargetResult, options: RenderOptions) -> None:
    plain, donated = result.variants["plain"], result.variants["donated"]
    width = options.width
    # the legend goes on a line of its own: as a title it wraps to the narrow table's width
    console.print(
        hanging(
            "",
            "memory (XLA memory_analysis; footprint = argument + output + temp − alias + constant; "
            "live peak = distinct slices live at once; constant = arrays compiled into the program)",
            style="dim",
        )
    )
    console.print(
        fitted_table(
            # plain − donated, not "saved": for alias_bytes the difference is what donation reuses (negative)
            [
                Column("figure"),
                Column("plain", "right"),
                Column("donated", "right"),
                Column("plain − donated", "right"),
            ],
            [
                (
                    host_figure_label(result, name),
                    format_bytes(getattr(plain.memory, name)),
                    format_bytes(getattr(donated.memory, name)),
                    format_bytes(result.savings.get(name)),
                )
                for name in MEMORY_FIGURES
            ]
            + [
                (
                    host_figure_label(result, name),
                    format_bytes(getattr(plain.memory, name)),
                    format_bytes(getattr(donated.memory, name)),
                    "",
                )
                for name in (HOST_FIGURES if host_figures_shown(result) else ())
            ],
            width,
        )
    )
    for name, reason in sorted(donated.memory.unavailable.items()):
        console.print(hanging(f"{name} unavailable: ", reason, style="dim"))
    for name, note in sorted(donated.memory.notes.items()):
        console.print(hanging(f"{name}: ", note, style="dim"))
    for note in host_figure_lines(result):
        console.print(hanging("", note, style="dim"))
    for space_line in memory_space_lines(plain, donated):
        console.print(hanging("", space_line, style="dim"))
    for line in sparkline_lines(plain, donated, width=width):
        console.print(line)

    for variant in (plain, donated):
        if not variant.live_at_peak:
            continue
        console.print(
            fitted_table(
                [
                    Column("bytes", "right"),
                    Column("kind"),
                    Column("shape"),
                    Column("input", below=""),
                    Column("value", below="value"),
                    Column("source", below="at"),
                ],
                [
                    (
                        format_bytes(b.bytes),
                        b.kind,
                        b.shape or "",
                        slot_input_text(b),
                        slot_value_text(b),
                        source_text(b.source, b.call_site) or "",
                    )
                    for b in variant.live_at_peak
                ],
                width,
                title=f"live at the {variant.name} live peak ({format_bytes(variant.memory.live_peak_bytes)})",
            )
        )
    if donated.aliases:
        console.print(
            fitted_table(
                [
                    Column("input"),
                    Column("#", "right"),
                    Column("bytes", "right"),
                    Column("output", below="→"),
                    Column("#", "right", below="output #"),
                ],
                [
                    (a.input, str(a.input_index), format_bytes(a.bytes), a.output, str(a.output_index))
                    for a in donated.aliases
                ],
                width,
                title="aliases (donated input → output reusing its buffer)",
            )
        )
    if donated.unusable_donations:
        console.print(
            fitted_table(
                [Column("input"), Column("#", "right"), Column("bytes", "right"), Column("reason", below="")],
                [(u.input, str(u.input_index), format_bytes(u.bytes), u.reason) for u in donated.unusable_donations],
                width,
                title="unusable donations",
            )
        )
    for line in transfer_lines(result):
        console.print(
            hanging("  " if line.startswith("  ") else "", line.strip(), style="dim" if line.startswith("  ") else "")
        )
    for variant in (plain, donated):
        copies = _copies_shown(variant, options.min_bytes)
        if not copies:
            continue
        console.print(
            fitted_table(
                [
                    Column("kind"),
                    Column("bytes", "right"),
                    Column("per call", "right"),
                    Column("shape"),
                    Column("of", below="of"),
                    Column("source", below="at"),
                    Column("computation", below="in"),
                ],
                [
                    (
                        copy_kind_label(c.kind),
                        format_bytes(c.bytes),
                        _per_call(c),
                        c.shape,
                        c.of_parameter or "",
                        source_text(c.source, c.call_site) or "?",
                        c.computation,
                    )
                    for c in copies
                ],
                width,
                title=f"copies in the {variant.name} variant (≥ {format_bytes(options.min_bytes)})",
            )
        )
    moves = moves_line(plain, donated)
    if moves is not None:
        console.print(hanging("", moves, style="dim"))
    for variant in (plain, donated):
        shown = [m for m in variant.moves if m.bytes >= options.min_bytes]
        if not shown:
            continue
        console.print(
            fitted_table(
                [
                    Column("from → to"),
                    Column("bytes", "right"),
                    Column("shape"),
                    Column("of", below="of"),
                    Column("source", below="at"),
                ],
                [
                    (
                        copy_kind_text(m, variant),
                        format_bytes(m.bytes),
                        m.shape,
                        m.of_parameter or "",
                        source_text(m.source, m.call_site) or "?",
                    )
                    for m in shown[:_MOVES_SHOWN]
                ],
                width,
                title=f"moves between memory spaces in the {variant.name} variant (≥ {format_bytes(options.min_bytes)})",
            )
        )
        if len(shown) > _MOVES_SHOWN:
            console.print(hanging("", f"and {len(shown) - _MOVES_SHOWN} more, each smaller", style="dim"))
    for made in result.made_static:
        if made.code != "concrete":  # a concrete one is a finding, above
            console.print(hanging(f"held static: {made.argument}: ", made.reason, style="dim"))
    for variant in (plain, donated):
        for warning in variant.jax_warnings:
            console.print(hanging(f"jax warning ({variant.name}): ", warning.splitlines()[0], style="yellow"))


_MOVES_SHOWN = 12  # moves listed per variant under -v, largest first (a training step prefetches dozens)


def _per_call(c: Copy) -> str:
    """What a copy costs per call: bytes × trips for a loop copy; what its kind declares otherwise (a conditional
    one: when its branch runs, at most the trips of its loop)."""
    declared = copy_per_call_text(c)
    if declared is not None:
        return declared + (f" (≤ ×{c.trip_count})" if c.trip_count else "")
    return format_bytes(c.bytes_per_call) + f" (×{c.trip_count})" if c.bytes_per_call is not None else ""


class DetailsAhead:
    """Each target's details, rendered as its result comes while the check still runs (the parent waits on its
    worker meanwhile), for the table of the report that holds them: at 100 targets these details were most of
    the table printed after the last compile (benchmarks/results/own-time-2cores.md).

    :meth:`take` gives a result's text only for that very result, rendered with equal options and with no
    failure the baseline accepts (its details then say so): anything else is rendered at the end, as before.
    A result with text that must be escaped is rendered at the end too: the report is escaped whole there, and
    holds another object in its place (it is not checked here as well: that check is most of the table's time
    for one target of 5,000 leaves). Safe to call from the threads of several workers.
    """

    def __init__(self, options: RenderOptions) -> None:
        self.options = options
        self._texts: dict[int, tuple[TargetResult, str]] = {}
        self._lock = threading.Lock()

    def add(self, result: TargetResult) -> None:
        """Render ``result``'s details now."""
        buffer = io.StringIO()
        _details(text_console(buffer, self.options), result, self.options)
        with self._lock:
            self._texts[id(result)] = (result, buffer.getvalue())

    def render(self, report: Report, options: RenderOptions) -> str:
        """The table of ``report`` (:func:`render`), with the details rendered here ahead."""
        return render(report, options, self)

    def take(self, result: TargetResult, options: RenderOptions, accepted: tuple[Check, ...]) -> str | None:
        """The details of ``result`` rendered ahead for ``options`` (None: render them now)."""
        with self._lock:
            kept = self._texts.pop(id(result), None)
        if kept is None or kept[0] is not result or options != self.options or accepted:
            return None
        return kept[1]


def render(report: Report, options: RenderOptions, ahead: DetailsAhead | None = None) -> str:
    """The table of ``report``; ``ahead``: details rendered while the check ran (:class:`DetailsAhead`)."""
    report = visible_strings(report)  # every name, path and message as fieldmem shows user text
    buffer = io.StringIO()
    console = text_console(buffer, options)
    devices = len(report.devices)
    console.print(
        wrapped(
            f"fieldmem {report.fieldmem_version} · jax {report.jax_version}{libraries_text(report)}"
            f" · {report.backend}{plugins_text(report)}"
            f" · {count(devices, 'device')} (figures are per device)"
            + (f" · {settings}" if (settings := module_settings_text(report)) else ""),
            style="dim",
        )
    )
    judged = judged_text(report)
    if judged is not None:
        console.print(wrapped(judged, style="bold"))
    label = deviceless_label(report)
    if label is not None:
        console.print(wrapped(label, style="yellow"))
    if not report.results:
        console.print("no targets were checked")
        return _trimmed(buffer.getvalue(), options.color)
    console.print(_summary_table(report, options, console))
    for result in report.results:
        accepted = report.accepted_failures(result)
        text = ahead.take(result, options, accepted) if ahead is not None else None
        if text is None:
            _details(console, result, options, accepted)
        else:  # the console writes each print to the buffer at once: this text sits where _details would print
            buffer.write(text)
    if report.chains:
        for chain in report.chains:
            for item in chain_renderables(chain, verbose=options.verbose, width=options.width):
                console.print(item)
    if report.baseline is not None:
        for item in comparison_renderables(report.baseline):
            console.print(item)
    return _trimmed(buffer.getvalue(), options.color)


def render_lines(lines: list[str], options: RenderOptions, indent: int = 2) -> str:
    """Lines of words (``--watch``'s changes under a target's row) at the options' width: each from column
    ``indent``, and each line it wraps to two columns further in, as the report's own lines wrap. User text
    in them is shown as fieldmem shows it."""
    buffer = io.StringIO()
    console = text_console(buffer, options)
    for line in lines:
        console.print(wrapped(visible(line), indent=indent))
    return _trimmed(buffer.getvalue(), options.color)


def _trimmed(text: str, color: bool = False) -> str:
    """Each line without the trailing blanks the grids pad their last column with; printable as it is
    (:func:`~fieldmem.model.escaping.defused`)."""
    lines = text.split("\n")  # the console's own line breaks only: anything else is escaped, not split on
    if lines[-1] == "":
        lines.pop()
    return defused("".join(line.rstrip() + "\n" for line in lines), color=color)
