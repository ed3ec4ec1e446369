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

The page's parts live beside it: the chart in :mod:`fieldmem.render.html_chart`, the tables in
:mod:`fieldmem.render.html_tables`, the CSS and JavaScript in ``render/assets/``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.render import RenderOptions, asset
from fieldmem.render.flame import FLAME_CSS, FLAME_JS, MAX_BUFFERS, MAX_CHILDREN, flame_data, script_json
from fieldmem.render.html_chart import target_chart
from fieldmem.render.html_tables import (
    VARIANT_LABEL,
    aliases_table,
    code_cell,
    copies_table,
    escape,
    html_table,
    live_table,
    memory_table,
    moves_table,
    peak_lines_table,
    run_tables,
    unusable_table,
)
from fieldmem.render.pieces import (
    STATUS_WORDS,
    chain_transfer_line,
    count,
    deviceless_label,
    footprint_curve,
    judged_text,
    pair,
    plural,
    transfer_lines,
    verdict_words,
)

__all__ = ["OPEN_ALL_UP_TO", "render"]

OPEN_ALL_UP_TO = 12  # up to this many targets every section starts open; above, only those needing a look


# ----------------------------------------------------------------------------
# The flame graph of the live peak.


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
            f'{VARIANT_LABEL[name]}: live peak <b class="flame-peak">{escape(format_bytes(variant["peak"]))}</b></h4>'
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
        filter_text = escape(f"{result.name} {words}".lower())
        name = f'<a href="#{anchor}">{escape(result.name)}</a>'
        verdict = f'<span class="verdict {css}">{escape(words)}</span>'
        if result.status != "ok" or result.verdict is None:
            message = result.error.message if result.error else "unknown error"
            rows.append(
                f'<tr data-filter="{filter_text}" data-anchor="{anchor}"><td>{name}</td><td>{verdict}</td>'
                f'<td colspan="4" class="muted">{escape(message)}</td></tr>'
            )
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        copies = (
            f"{sum(c.bytes >= min_bytes for c in plain.copies)} / {sum(c.bytes >= min_bytes for c in donated.copies)}"
        )
        rows.append(
            f'<tr data-filter="{filter_text}" data-anchor="{anchor}"><td>{name}</td><td>{verdict}</td>'
            f'<td class="num">{escape(pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes))}</td>'
            f'<td class="num">{escape(pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes))}</td>'
            f'<td class="num">{escape(format_bytes(result.savings.get("footprint_bytes")))}</td>'
            f'<td class="num">{copies}</td></tr>'
        )
    return (
        '<table class="summary" id="summary"><thead><tr><th>target</th><th>verdict</th>'
        '<th class="num">footprint plain → donated</th><th class="num">live peak plain → donated</th>'
        f'<th class="num">saved</th><th class="num">copies plain / donated (≥ {escape(format_bytes(min_bytes))})</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>\n"
    )


def _findings(result: TargetResult) -> str:
    assert result.verdict is not None
    items = [
        f'<li class="sev-{escape(f.severity)}"><span class="sev">{escape(f.severity)}</span> {escape(f.message)}</li>'
        for f in result.verdict.findings
    ]
    checks = [
        f'<li class="check {"pass" if c.passed else "fail"}">{"✓" if c.passed else "✗"} '
        f"<b>{escape(c.name)}</b>: {escape(c.message)}</li>"
        for c in result.checks
    ]
    text = f'<ul class="checks">{"".join(checks)}</ul>\n' if checks else ""
    if items:
        text += f'<ul class="findings">{"".join(items)}</ul>\n'
    return text


def _section(result: TargetResult, anchor: str, opened: bool, min_bytes: int) -> str:
    css, words = _status(result)
    filter_text = escape(f"{result.name} {words}".lower())
    head = (
        f'<details class="target {css}" id="{anchor}" data-filter="{filter_text}"{" open" if opened else ""}>'
        f'<summary><span class="name">{escape(result.name)}</span> <span class="verdict {css}">{escape(words)}</span>'
    )
    if result.definition:
        head += f' <span class="src">{escape(result.definition)}</span>'
    head += "</summary>\n"
    if result.status != "ok" or result.verdict is None:
        error = result.error
        kind = f"{escape(error.kind)} error" if error else "error"
        message = escape(error.message) if error else "unknown error"
        return head + f'<p class="error-message"><b>{kind}:</b> {message}</p>\n</details>\n'
    plain, donated = result.variants["plain"], result.variants["donated"]
    body = [
        f'<p class="verdict-words {css}">{escape(result.verdict.summary)}</p>\n',
        f'<p class="muted">target <code>{escape(result.target)}</code> · donated: '
        f"{escape(', '.join(donated.donated_arguments) or '(none)')}"
        + (f" · expect {escape(result.expect)}" if result.expect else "")
        + "</p>\n",
        _findings(result),
        "<h3>Memory over the schedule</h3>\n",
        target_chart(result, anchor),
        _flame(result, anchor),
        peak_lines_table(result),
        live_table(plain),
        live_table(donated),
        memory_table(result),
        aliases_table(donated),
        unusable_table(donated),
        "".join(f'<p class="muted">{escape(line.strip())}</p>\n' for line in transfer_lines(result)),
        copies_table(plain, min_bytes),
        copies_table(donated, min_bytes),
        moves_table(plain, min_bytes),
        moves_table(donated, min_bytes),
    ]
    body.append(run_tables(result))
    warnings = [
        f"<li>jax warning ({variant.name}): {escape(w.splitlines()[0] if w else '')}</li>"
        for variant in (plain, donated)
        for w in variant.jax_warnings
    ]
    if warnings:
        body.append(f'<ul class="warnings">{"".join(warnings)}</ul>\n')
    if result.suggestion is not None:
        suggestion = result.suggestion
        body.append(f'<p class="suggestion"><b>suggestion:</b> {escape(suggestion.summary)}</p>\n')
        if suggestion.code:
            body.append(f"<pre>{escape(suggestion.code)}</pre>\n")
    return head + "".join(body) + "</details>\n"


# ----------------------------------------------------------------------------
# The page.


def _baseline(comparison: BaselineComparison) -> str:
    def items(entries: tuple[Change, ...], css: str) -> str:
        return "".join(
            f'<li class="{css}">{escape(r.message)}'
            + (f' <span class="src">{escape(r.source)}</span>' if r.source else "")
            + "</li>"
            for r in entries
        )

    tolerance = f" (tolerance {escape(comparison.tolerance)})" if comparison.tolerance else ""
    parts = [
        f'<section class="baseline"><h2>Against the baseline <code>{escape(comparison.path)}</code>{tolerance}</h2>\n',
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
            + "".join(
                f"<li>{escape(t)}: {escape(c)} fails as recorded: accepted by the baseline</li>" for t, c in accepted
            )
            + "</ul>\n"
        )
    if comparison.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in comparison.notes) + "</ul>\n")
    parts.append("</section>\n")
    return "".join(parts)


def _chains(report: Report, anchors: dict[str, str]) -> str:
    """Each chain: its verdict, a row per step linking to the step's section, steps vs fused."""
    parts = ['<section class="chains"><h2>Chains</h2>\n']
    for chain in report.chains:
        css = "ok" if chain.in_place else "bad"
        parts.append(
            f'<h3 class="{css}">chain <code>{escape(chain.name)}</code></h3>\n<p class="{css}">{escape(chain.summary)}</p>\n'
        )
        rows = []
        for step in chain.steps:
            words = STATUS_WORDS.get(step.status, (step.status, ""))[0]
            anchor = anchors.get(step.result)
            name = f'<a href="#{anchor}">{escape(step.function)}</a>' if anchor else escape(step.function)
            rows.append(
                (
                    f"{step.index + 1} {name}",
                    f'<span class="status-{escape(step.status)}">{escape(words)}</span>',
                    escape(pair(step.footprint.get("plain"), step.footprint.get("donated"))) if step.footprint else "",
                    escape(format_bytes(step.grows_by)) if step.grows_by is not None else "",
                    escape(pair(step.live_peak.get("plain"), step.live_peak.get("donated"))) if step.live_peak else "",
                    ", ".join(code_cell(k) for k in step.kept_alive),
                )
            )
        for cost in chain.costs:
            label = "one jit (fused)" if cost.layout == "fused" else "separate jits (max)"
            anchor = anchors.get(chain.fused or "") if cost.layout == "fused" else None
            rows.append(
                (
                    f'<a href="#{anchor}"><em>{label}</em></a>' if anchor else f"<em>{label}</em>",
                    "",
                    escape(pair(cost.plain_footprint, cost.donated_footprint)),
                    "",
                    escape(pair(cost.plain_live_peak, cost.donated_live_peak)),
                    "",
                )
            )
        curve = footprint_curve(chain.steps)
        parts.append(
            html_table(
                f"per step (donated footprint {escape(curve)})" if curve else "per step",
                ("step", "status", "footprint plain → donated", "Δ donated", "live peak plain → donated", "kept alive"),
                rows,
                "chain",
                {2, 3, 4},
            )
        )
        if chain.cost_summary:
            parts.append(f"<p>{escape(chain.cost_summary)}</p>\n")
        moved = chain_transfer_line(chain)
        if moved:
            parts.append(f'<p class="muted">{escape(moved)}</p>\n')
        breaking = [h for s in chain.steps for h in s.handoffs if h.breaks]
        if breaking:
            parts.append(
                '<ul class="findings">'
                + "".join(f'<li class="error">{escape(h.message)}</li>' for h in breaking)
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
    meta = "".join(f"<div><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>" for k, v in facts)
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
    links = ", ".join(f'<a href="#{a}">{escape(r.name)}</a>' for r, a in flagged[:shown])
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
        f"<title>fieldmem report · {count(len(results), 'target')} · {escape(report.backend)}</title>\n",
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


_CSS = asset("report.css")

# Enhancement only: the page shows everything without it. Builds the filter
# box and the open/close buttons, so a reader with JavaScript off never sees
# controls that do nothing; a summary link opens the section it points to.
_JS = asset("report.js")
