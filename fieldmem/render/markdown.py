"""Markdown renderer: a job summary for ``$GITHUB_STEP_SUMMARY`` (GitHub-flavoured Markdown).

A heading with the outcome, (for ``--format github``'s job summary: a
one-line headline per target), one table row per target (verdict, footprint
and live peak plain → donated, what donation saves, copies), the baseline's
regressions first, then its improvements, the failing checks it accepts and
its notes when the run had a baseline, the findings of each target that is
not fine with their source lines, and the environment. A failed check the
baseline accepts is shown as accepted (☑️), never hidden. It formats the report and decides nothing; ``escape`` and
``code`` (from :mod:`fieldmem.render.pieces`) make user names (which may
hold ``|``, backticks or ``*``) safe in table cells and prose, after the
one rule of :mod:`fieldmem.model.escaping` made them visible.
"""

from __future__ import annotations

from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check
from fieldmem.render import RenderOptions
from fieldmem.render.chains import chain_markdown
from fieldmem.render.pieces import (
    FAIL,
    PASS,
    WARN,
    code,
    count,
    deviceless_label,
    escape,
    host_figure_lines,
    host_memory_line,
    judged_text,
    libraries_text,
    pair,
    plugins_text,
    transfer_lines,
    verdict_words,
)

__all__ = ["ACCEPTED", "headline", "render", "verdict_text"]

_SEVERITY = {"error": FAIL, "warning": WARN, "info": "ℹ️"}
ACCEPTED = "☑️"  # a failed check the baseline accepts (recorded failing with --accept-current)


def verdict_text(result: TargetResult, accepted: tuple[Check, ...] = ()) -> str:
    """✅ in place / ❌ not in place / ❌ error, with the failed checks named (☑️ those ``accepted``)."""
    if result.status == "error" or result.verdict is None:
        return f"{FAIL} error"
    text = f"{PASS if result.verdict.in_place else FAIL} {verdict_words(result.verdict.kind)[0]}"
    failed = [c for c in result.failed_checks if c not in accepted]
    if failed:
        text += f"; {FAIL} " + ", ".join(escape(c.name) for c in failed)
    if accepted:
        text += f"; {ACCEPTED} " + ", ".join(escape(c.name) for c in accepted) + " (accepted)"
    return text


def headline(report: Report, result: TargetResult) -> str:
    """One list item saying where ``result`` stands: its mark, name and verdict, and what the gate says of
    it (regressions, failed checks, checks the baseline accepts, a target new to the baseline)."""
    name = code(result.name)
    if result.status == "error" or result.verdict is None:
        message = result.error.message if result.error is not None else "unknown error"
        kind = f"{result.error.kind}: " if result.error is not None else ""
        return f"- {FAIL} {name} could not be checked: {escape(kind + message.splitlines()[0] if message else kind)}"
    baseline = report.baseline
    regressions = [r for r in baseline.regressions if r.target == result.name] if baseline is not None else []
    improvements = [r for r in baseline.improvements if r.target == result.name] if baseline is not None else []
    accepted = report.accepted_failures(result)
    failed = report.unaccepted_failures(result)
    parts = [escape(result.verdict.summary)]
    if regressions:
        first = regressions[0].message.removeprefix(f"{result.name}: ")
        more = f" (and {len(regressions) - 1} more)" if len(regressions) > 1 else ""
        parts.append(f"**{count(len(regressions), 'regression')}**: {escape(first)}{more}")
    if failed:
        parts.append(", ".join(escape(c.name) for c in failed) + " failed")
    if accepted:
        parts.append(", ".join(escape(c.name) for c in accepted) + " failing, accepted by the baseline")
    if improvements:
        parts.append(count(len(improvements), "improvement"))
    if baseline is not None and baseline.accepted and not baseline.accepts(result.name):
        parts.append("new: not in the baseline")
    if regressions or failed:
        mark = FAIL
    elif accepted:
        mark = ACCEPTED
    else:
        mark = PASS if result.verdict.in_place else WARN
    return f"- {mark} {name}: " + " · ".join(parts)


def _copies(variant: Variant, min_bytes: int) -> int:
    return sum(1 for c in variant.copies if c.bytes >= min_bytes)


def _table(report: Report, options: RenderOptions) -> list[str]:
    lines = [
        "| target | verdict | footprint plain → donated | live peak plain → donated | saved | copies plain/donated |",
        "|:--|:--|--:|--:|--:|--:|",
    ]
    for result in report.results:
        verdict = verdict_text(result, report.accepted_failures(result))
        if result.status == "error" or "plain" not in result.variants or "donated" not in result.variants:
            lines.append(f"| {code(result.name)} | {verdict} | | | | |")
            continue
        plain, donated = result.variants["plain"], result.variants["donated"]
        lines.append(
            f"| {code(result.name)} | {verdict}"
            f" | {pair(plain.memory.footprint_bytes, donated.memory.footprint_bytes)}"
            f" | {pair(plain.memory.live_peak_bytes, donated.memory.live_peak_bytes)}"
            f" | {format_bytes(result.savings.get('footprint_bytes'))}"
            f" | {_copies(plain, options.min_bytes)}/{_copies(donated, options.min_bytes)} |"
        )
    return lines


def _needs_details(result: TargetResult, verbose: bool) -> bool:
    if verbose or result.status == "error" or result.verdict is None or result.failed_checks:
        return True
    return not result.verdict.in_place or any(f.severity != "info" for f in result.verdict.findings)


def _with_source(message: str, source: str | None, call_site: str | None = None) -> str:
    text = escape(message)
    if source and source not in message:
        text += f" ({code(source)})"
    if call_site and call_site not in message:
        text += f" (called from {code(call_site)})"
    return text


def _details(report: Report, result: TargetResult, verbose: bool) -> list[str]:
    where = f" ({code(result.definition)})" if result.definition else ""
    accepted = report.accepted_failures(result)
    lines = ["", f"### {code(result.name)}: {verdict_text(result, accepted)}{where}", ""]
    if result.status == "error" or result.verdict is None:
        message = result.error.message if result.error is not None else "unknown error"
        kind = f"{result.error.kind}: " if result.error is not None else ""
        lines.append(f"- {FAIL} could not be checked: {escape(kind + message)}")
        return lines
    lines.append(escape(result.verdict.summary))
    lines.append("")
    for check in result.checks:
        if check in accepted:
            lines.append(
                f"- {ACCEPTED} {escape(check.name)} (failing, accepted by the baseline): {escape(check.message)}"
            )
        elif verbose or not check.passed:
            mark = PASS if check.passed else FAIL
            lines.append(f"- {mark} {escape(check.name)}: {escape(check.message)}")
    for finding in result.verdict.findings:
        if finding.severity == "info" and not verbose:
            continue
        summary = result.verdict.summary
        if finding.message in summary and (finding.source is None or finding.source in summary):
            continue  # the summary line above already says it, with its source
        lines.append(
            f"- {_SEVERITY.get(finding.severity, '-')} {_with_source(finding.message, finding.source, finding.call_site)}"
        )
    moved = transfer_lines(result, verbose)
    if moved:
        lines += [f"- {escape(moved[0])}", *(f"  - {escape(line.strip())}" for line in moved[1:])]
    host = host_memory_line(result)
    if host is not None:
        lines += [f"- {escape(host)}", *(f"  - {escape(line)}" for line in host_figure_lines(result))]
    return lines


def _regression_lines(items: tuple[Change, ...], mark: str) -> list[str]:
    return [f"- {mark} {code(r.target)}: {_with_source(r.message, r.source)}" for r in items]


def _baseline(report: Report, baseline: BaselineComparison) -> list[str]:
    lines = ["", f"### Against the baseline {code(baseline.path)}", ""]
    if baseline.tolerance:
        lines += [f"Tolerance: {escape(baseline.tolerance)}", ""]
    if baseline.regressions:
        lines.append(f"**{count(len(baseline.regressions), 'regression')}**")
        lines.append("")
        lines += _regression_lines(baseline.regressions, FAIL)
    else:
        lines.append(f"{PASS} no regression")
    if baseline.improvements:
        lines += ["", f"**{count(len(baseline.improvements), 'improvement')}**", ""]
        lines += _regression_lines(baseline.improvements, PASS)
    accepted = [(r, c) for r in report.results for c in report.accepted_failures(r)]
    if accepted:
        lines += ["", f"**{count(len(accepted), 'failing check')} accepted by the baseline**", ""]
        lines += [f"- {ACCEPTED} {code(r.name)}: {escape(c.name)}: {escape(c.message)}" for r, c in accepted]
    if baseline.notes:
        lines += ["", "**Notes**", ""]
        lines += [f"- {WARN} {escape(note)}" for note in baseline.notes]
    return lines


def _environment(report: Report, options: RenderOptions) -> list[str]:
    kinds: dict[str, int] = {}
    for device in report.devices:
        label = device.kind or device.platform
        kinds[label] = kinds.get(label, 0) + 1
    devices = ", ".join(f"{n} × {escape(kind)}" for kind, n in kinds.items()) or "none"
    platform = f" ({escape(report.platform_version)})" if report.platform_version else ""
    return [
        "",
        "<sub>",
        "",
        f"fieldmem {escape(report.fieldmem_version)} · jax {escape(report.jax_version)}"
        f"{escape(libraries_text(report))}"
        f" · jaxlib {escape(report.jaxlib_version)} · backend {escape(report.backend)}{platform}"
        f"{escape(plugins_text(report))}"
        f" · devices: {devices} · figures are per device · copies of at least {format_bytes(options.min_bytes)} counted"
        + (f" · {escape(report.created)}" if report.created else ""),
        "",
        "</sub>",
    ] + (
        ([] if judged_text(report) is None else ["", f"**{escape(judged_text(report) or '')}**"])
        + ([] if deviceless_label(report) is None else ["", f"> **{escape(deviceless_label(report) or '')}**"])
    )


def _heading(report: Report) -> str:
    results = report.results
    in_place = sum(1 for r in results if r.status == "ok" and r.verdict is not None and r.verdict.in_place)
    parts = [f"{in_place} of {count(len(results), 'target')} in place"]
    errors = sum(1 for r in results if r.status == "error")
    if errors:
        parts.append(f"{errors} could not be checked")
    failed = sum(len(report.unaccepted_failures(r)) for r in results) + sum(len(c.failed_checks) for c in report.chains)
    if failed:
        parts.append(f"{count(failed, 'check')} failed")
    accepted = sum(len(report.accepted_failures(r)) for r in results)
    if accepted:
        parts.append(f"{count(accepted, 'failing check')} accepted by the baseline")
    if report.baseline is not None and report.baseline.regressions:
        parts.append(count(len(report.baseline.regressions), "regression"))
    mark = PASS if report.exit_code == 0 else FAIL
    return f"## {mark} fieldmem: " + ", ".join(parts)


def render(report: Report, options: RenderOptions, *, headlines: bool = False) -> str:
    """The Markdown summary; ``headlines``: a one-line headline per target (and chain) after the heading."""
    report = visible_strings(report)  # every name, path and message as fieldmem shows user text
    lines = [_heading(report), ""]
    if headlines:
        lines += [headline(report, result) for result in report.results]
        for chain in report.chains:
            failed = ", ".join(escape(c.name) for c in chain.failed_checks)
            mark = FAIL if failed else (PASS if chain.in_place else WARN)
            lines.append(
                f"- {mark} chain {code(chain.name)}: {escape(chain.summary)}"
                + (f" · {failed} failed" if failed else "")
            )
        lines.append("")
    if report.results:
        lines += _table(report, options)
    else:
        lines.append("No targets were checked.")
    if report.baseline is not None:  # regressions first
        lines += _baseline(report, report.baseline)
    for result in report.results:
        if _needs_details(result, options.verbose):
            lines += _details(report, result, options.verbose)
    if report.chains:
        for chain in report.chains:
            lines += chain_markdown(chain)
    lines += _environment(report, options)
    return defused("\n".join(lines) + "\n")
