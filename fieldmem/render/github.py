"""GitHub Actions renderer: one workflow command per offending thing, then a summary.

``fieldmem check --format github`` in a workflow step turns each problem into
an annotation at the line that causes it (for a line in library code, at the
user's call site that led there, the finding's ``call_site``). ``::error`` is
for what fails the run, one per cause (:mod:`fieldmem.gate.causes`: what one
change of code brings is one error at that change's line, the rest its detail),
regressions first (GitHub shows only the first 10 annotations of each kind in a
step): the baseline's regressions, a failed check the baseline does not accept,
a target that could not be checked, and, without a baseline, the error
findings (a failed ``expect-in-place`` with the cause its verdict names). With a baseline, what it accepts is no error: a
compared target's findings are left to the job summary, and a failed check it
accepts is a ``::notice``; a target new to it has its findings as warnings.
``::warning`` is also for a warning finding and a baseline note. A target that
is fine emits nothing; the last line is always one ``::notice::`` summary,
which says how many annotations went beyond GitHub's limits.
:func:`job_summary` is the Markdown the CLI appends to ``$GITHUB_STEP_SUMMARY``:
everything, a one-line headline per target first. Like every renderer it
decides nothing: severities, sources, messages and what the baseline accepts
are the report's.

User text is first made visible by fieldmem's one rule
(:mod:`fieldmem.model.escaping`: a line break or ESC in a name shows as ``\\n`` or
``\\x1b``, ``##[`` as ``##\\[``), then escaped as GitHub's toolkit
(``@actions/core``) escapes it: in a message ``%``, ``\\r`` and ``\\n`` become
``%25``, ``%0D`` and ``%0A``; in a property (file, title) ``:`` and ``,`` are
escaped too, as ``%3A`` and ``%2C``. So every line is one of fieldmem's own
commands, and no user text can start another or end one early.
"""

from __future__ import annotations

import os
from pathlib import Path

from fieldmem.gate.causes import Cause, finding_causes, regression_causes
from fieldmem.model.chain import Chain
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.verdict import Check
from fieldmem.render import RenderOptions
from fieldmem.render.markdown import render as markdown
from fieldmem.render.pieces import count, judged_text, libraries_text, plugins_text

__all__ = ["annotation", "annotations_by_level", "escape_data", "escape_property", "job_summary", "location", "render"]

_NAMES_IN_SUMMARY = 10  # target names listed per group in the summary line
# GitHub shows 10 error, 10 warning and 10 notice annotations of a step (and 50 of a job); the rest stay in
# the log (actions/toolkit, docs/problem-matchers.md, "Limitations")
ANNOTATIONS_SHOWN = 10
SUMMARY_LIMIT = 1024 * 1024  # bytes GitHub keeps of one step's summary ($GITHUB_STEP_SUMMARY)


def escape_data(text: str) -> str:
    """Escape a workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command property's value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def location(source: str | None) -> tuple[str, int] | None:
    """``'pkg/model.py:14'`` -> ``('pkg/model.py', 14)``, the path relative to the working
    directory when it lies below it (the workspace root in Actions), with ``/`` separators.

    None when there is no source or it does not end in ``:LINE``.
    """
    if not source:
        return None
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit():
        return None
    if os.path.isabs(path):
        try:
            relative = os.path.relpath(path)
        except ValueError:  # another drive on Windows
            relative = path
        if not relative.startswith(".."):
            path = relative
    return Path(path).as_posix(), int(line)


def annotation(level: str, message: str, *, title: str | None = None, source: str | None = None) -> str:
    """One workflow command: ``::LEVEL file=F,line=N,title=T::message``."""
    properties = []
    where = location(source)
    if where is not None:
        properties += [f"file={escape_property(where[0])}", f"line={where[1]}"]
    if title:
        properties.append(f"title={escape_property(title)}")
    head = f"::{level} {','.join(properties)}" if properties else f"::{level}"
    return f"{head}::{escape_data(message)}"


def _error_annotation(result: TargetResult) -> str:
    message = result.error.message if result.error is not None else "unknown error"
    kind = f"{result.error.kind}: " if result.error is not None else ""
    return annotation(
        "error",
        f"{kind}{message}",
        title=f"fieldmem: {result.name} could not be checked",
        source=result.definition,
    )


def _check_annotation(level: str, result: TargetResult, check: Check, accepted: bool = False) -> str:
    title = (
        f"fieldmem: {result.name}: {check.name} failing, accepted by the baseline"
        if accepted
        else f"fieldmem: {result.name}: {check.name} failed"
    )
    return annotation(level, check.message, title=title, source=result.definition)


def _finding_annotations(result: TargetResult, demoted: bool) -> tuple[list[str], list[str]]:
    """The target's error and warning findings, at their lines; ``demoted``: both as warnings."""
    errors: list[str] = []
    warnings: list[str] = []
    assert result.verdict is not None
    for finding in result.verdict.findings:
        if finding.severity not in ("error", "warning"):
            continue
        level = "warning" if demoted else finding.severity
        (errors if level == "error" else warnings).append(
            annotation(
                level,
                finding.message,
                title=f"fieldmem: {result.name}: {finding.code}",
                # a line in library code (site-packages) is not in the workspace: the annotation goes
                # to the user's line that led there, and the message names both
                source=finding.call_site or finding.source or result.definition,
            )
        )
    return errors, warnings


def _chain_annotations(chain: Chain) -> tuple[list[str], list[str]]:
    """The chain's failed checks as errors at its first break; without a failed check, the break as a warning."""
    errors = [
        annotation(
            "error",
            check.message,
            title=f"fieldmem: chain {chain.name}: {check.name} failed",
            source=chain.first_break.source if chain.first_break else None,
        )
        for check in chain.failed_checks
    ]
    warnings = []
    if chain.first_break is not None and not chain.failed_checks:
        brk = chain.first_break
        warnings.append(
            annotation(
                "warning",
                chain.summary,
                title=f"fieldmem: chain {chain.name} breaks in place at step {brk.step + 1}",
                source=brk.source,
            )
        )
    return errors, warnings


def _cause_annotation(cause: Cause) -> str:
    """One error for one cause (:mod:`fieldmem.gate.causes`): at the line its message names first."""
    return annotation("error", cause.message, title=cause.title, source=cause.source)


def _names(results: list[TargetResult]) -> str:
    names = [r.name for r in results[:_NAMES_IN_SUMMARY]]
    more = len(results) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _summary(report: Report, left_out: dict[str, int]) -> str:
    results = list(report.results)
    environment = f"jax {report.jax_version}{libraries_text(report)}, {report.backend}{plugins_text(report)}" + (
        ", compiled without the device" if report.deviceless is not None else ""
    )
    judged = judged_text(report)
    if judged is not None:
        environment += f"; {judged}"
    if not results:
        return f"fieldmem ({environment}): no targets were checked"
    groups = (
        (
            "in place",
            [r for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "in-place"],
        ),
        (
            "in place as written",
            [
                r
                for r in results
                if r.status == "ok" and r.verdict is not None and r.verdict.kind == "in-place-as-written"
            ],
        ),
        (
            "not in place",
            [r for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "not-in-place"],
        ),
        (
            "with nothing to update in place",
            [
                r
                for r in results
                if r.status == "ok" and r.verdict is not None and r.verdict.kind == "nothing-to-update"
            ],
        ),
        (
            "do not fit the device",
            [r for r in results if r.status == "ok" and r.verdict is not None and r.verdict.kind == "does-not-fit"],
        ),
        ("could not be checked", [r for r in results if r.status == "error" or r.verdict is None]),
    )
    parts = [f"{len(group)} {label} ({_names(group)})" for label, group in groups if group]
    failed = sum(len(report.unaccepted_failures(r)) for r in results)
    if failed:
        parts.append(f"{count(failed, 'check')} failed")
    accepted = sum(len(report.accepted_failures(r)) for r in results)
    if accepted:
        parts.append(f"{count(accepted, 'failing check')} accepted by the baseline")
    if report.baseline is not None:
        regressions, improvements = len(report.baseline.regressions), len(report.baseline.improvements)
        parts.append(
            f"against {report.baseline.path}: {count(regressions, 'regression')}, {count(improvements, 'improvement')}"
        )
    text = f"fieldmem ({environment}): {count(len(results), 'target')}: " + "; ".join(parts)
    beyond = [f"{n} {level}" for level, n in left_out.items() if n]
    if beyond:
        text += (
            f"; beyond what GitHub shows per step ({ANNOTATIONS_SHOWN} of each kind): "
            f"{', '.join(beyond)} not annotated: the job summary lists everything"
        )
    return text


def annotations_by_level(report: Report) -> dict[str, list[str]]:
    """The annotations of ``report`` (its strings already visible), by level, each in the order GitHub
    should show them.

    Errors are what fails the run, regressions first: the regressions, the failed checks the baseline
    does not accept, the targets that could not be checked; then, without a baseline, the error
    findings. With a baseline, what it accepts is not an error: a compared target's findings are left
    to the job summary and each failed check it accepts is a notice; a target new to it has its
    findings as warnings (nothing accepted them, nothing fails on them).
    """
    errors: list[str] = []
    warnings: list[str] = []
    notices: list[str] = []
    comparison = report.baseline
    regressed: set[str] = set()  # the targets whose regressions are annotated: their own causes
    if comparison is not None:
        for cause in regression_causes(comparison, report.results):
            errors.append(_cause_annotation(cause))
            regressed.add(cause.target)
    for result in report.results:
        if result.status != "ok" or result.verdict is None:
            continue
        failed = report.unaccepted_failures(result)
        expect = [c for c in failed if c.name == "expect-in-place"]
        errors.extend(_check_annotation("error", result, c) for c in failed if c not in expect)
        if comparison is None:
            # one error per cause, at the line to change; the failed expectation is the detail of its own
            causes = finding_causes(result, expect)
            errors.extend(_cause_annotation(cause) for cause in causes)
            if causes:
                continue
        if expect and result.name not in regressed:
            errors.append(_check_annotation("error", result, expect[0]))
    for chain in report.chains:
        chain_errors, chain_warnings = _chain_annotations(chain)
        errors += chain_errors
        warnings += chain_warnings
    # a target the baseline had, and that now errors, is that regression's error already
    now_erroring = {r.target for r in comparison.regressions if r.kind == "status"} if comparison is not None else set()
    for result in report.results:
        if (result.status == "error" or result.verdict is None) and result.name not in now_erroring:
            errors.append(_error_annotation(result))
    for result in report.results:
        if result.status != "ok" or result.verdict is None:
            continue
        accepted = comparison is not None and comparison.accepts(result.name)
        if accepted:
            notices.extend(
                _check_annotation("notice", result, c, accepted=True) for c in report.accepted_failures(result)
            )
            continue
        finding_errors, finding_warnings = _finding_annotations(result, demoted=comparison is not None)
        if comparison is not None:  # without a baseline, the errors are the causes above
            errors += finding_errors
        warnings += finding_warnings
    if comparison is not None:
        warnings.extend(
            annotation("warning", note, title=f"fieldmem: baseline {comparison.path}") for note in comparison.notes
        )
    return {"error": errors, "warning": warnings, "notice": notices}


def render(report: Report, options: RenderOptions) -> str:
    report = visible_strings(report)  # every name, path and message as fieldmem shows user text
    by_level = annotations_by_level(report)
    # errors and warnings are all written (the log keeps them; GitHub shows the first of each kind, so what
    # fails the run comes first); notices stop short of the limit, so that the summary's is shown
    notices = by_level["notice"][: ANNOTATIONS_SHOWN - 1]
    left_out = {
        "errors": max(0, len(by_level["error"]) - ANNOTATIONS_SHOWN),
        "warnings": max(0, len(by_level["warning"]) - ANNOTATIONS_SHOWN),
        "notices": len(by_level["notice"]) - len(notices),
    }
    lines = [*by_level["error"], *by_level["warning"], *notices, annotation("notice", _summary(report, left_out))]
    return defused("\n".join(lines) + "\n", commands=True)


def job_summary(report: Report, options: RenderOptions) -> str:
    """The Markdown ``--format github`` appends to ``$GITHUB_STEP_SUMMARY``: everything, annotated or not.

    The outcome, a one-line headline per target, the table, the baseline's regressions, improvements,
    accepted checks and notes, and every target's checks and findings (``-v``'s Markdown). Over GitHub's
    limit for one step's summary, what ``-v`` adds (``info`` findings, passed checks, the sections of fine
    targets) is left out first; what still does not fit is cut, and the summary says so.
    """
    from dataclasses import replace

    text = markdown(report, replace(options, verbose=True), headlines=True)
    if len(text.encode("utf-8", "backslashreplace")) <= SUMMARY_LIMIT:
        return text
    text = markdown(report, replace(options, verbose=False), headlines=True)
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= SUMMARY_LIMIT:
        return text
    cut = data[: SUMMARY_LIMIT - 512].decode("utf-8", "ignore").rsplit("\n", 1)[0]
    return (
        cut + "\n\n> **Cut here: the summary is larger than the 1 MiB GitHub keeps for a step. "
        "`--format json -o FILE` writes the whole report.**\n"
    )
