"""GitHub Actions renderer: one workflow command per offending thing, then a summary.

``fieldmem check --format github`` in a workflow step turns each problem into
an annotation at the line that causes it (for a line in library code, at the
user's call site that led there, the finding's ``call_site``): ``::error`` for an error finding, a
failed check, a baseline regression or a target that could not be checked;
``::warning`` for a warning finding or a baseline note. A target that is fine
emits nothing; the last line is always one ``::notice::`` summary. Like every
renderer it decides nothing: severities, sources and messages are the report's.

User text is first made visible by fieldmem's one rule
(:mod:`fieldmem.escaping`: a line break or ESC in a name shows as ``\\n`` or
``\\x1b``, ``##[`` as ``##\\[``), then escaped as GitHub's toolkit
(``@actions/core``) escapes it: in a message ``%``, ``\\r`` and ``\\n`` become
``%25``, ``%0D`` and ``%0A``; in a property (file, title) ``:`` and ``,`` are
escaped too, as ``%3A`` and ``%2C``. So every line is one of fieldmem's own
commands, and no user text can start another or end one early.
"""

from __future__ import annotations

import os
from pathlib import Path

from fieldmem.escaping import defused, visible_strings
from fieldmem.render import RenderOptions
from fieldmem.render.pieces import count
from fieldmem.report import Chain, Change, Report, TargetResult

__all__ = ["annotation", "escape_data", "escape_property", "location", "render"]

_NAMES_IN_SUMMARY = 10  # target names listed per group in the summary line


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


def _target_annotations(result: TargetResult) -> list[str]:
    if result.status == "error" or result.verdict is None:
        message = result.error.message if result.error is not None else "unknown error"
        kind = f"{result.error.kind}: " if result.error is not None else ""
        return [
            annotation(
                "error",
                f"{kind}{message}",
                title=f"fieldmem: {result.name} could not be checked",
                source=result.definition,
            )
        ]
    lines = [
        annotation(
            "error", check.message, title=f"fieldmem: {result.name}: {check.name} failed", source=result.definition
        )
        for check in result.failed_checks
    ]
    for finding in result.verdict.findings:
        if finding.severity not in ("error", "warning"):
            continue
        lines.append(
            annotation(
                finding.severity,
                finding.message,
                title=f"fieldmem: {result.name}: {finding.code}",
                # a line in library code (site-packages) is not in the workspace: the annotation goes
                # to the user's line that led there, and the message names both
                source=finding.call_site or finding.source or result.definition,
            )
        )
    return lines


def _chain_annotations(chain: Chain) -> list[str]:
    """The chain's first break at its line: an error when the chain's expectation fails, else a warning."""
    lines = [
        annotation(
            "error",
            check.message,
            title=f"fieldmem: chain {chain.name}: {check.name} failed",
            source=chain.first_break.source if chain.first_break else None,
        )
        for check in chain.failed_checks
    ]
    if chain.first_break is not None and not chain.failed_checks:
        brk = chain.first_break
        lines.append(
            annotation(
                "warning",
                chain.summary,
                title=f"fieldmem: chain {chain.name} breaks in place at step {brk.step + 1}",
                source=brk.source,
            )
        )
    return lines


def _definitions(report: Report) -> dict[str, str]:
    """Where each target is defined, by name and by target spec (regressions name either)."""
    where: dict[str, str] = {}
    for result in report.results:
        if result.definition:
            where.setdefault(result.target, result.definition)
            where[result.name] = result.definition
    return where


def _regression_annotation(regression: Change, definitions: dict[str, str]) -> str:
    return annotation(
        "error",
        regression.message,
        title=f"fieldmem: {regression.target}: {regression.kind} regressed against the baseline",
        source=regression.source or definitions.get(regression.target),
    )


def _names(results: list[TargetResult]) -> str:
    names = [r.name for r in results[:_NAMES_IN_SUMMARY]]
    more = len(results) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _summary(report: Report) -> str:
    results = list(report.results)
    environment = f"jax {report.jax_version}, {report.backend}" + (
        ", compiled without the device" if report.deviceless is not None else ""
    )
    if not results:
        return f"fieldmem ({environment}): no targets were checked"
    groups = (
        ("in place", [r for r in results if r.status == "ok" and r.verdict is not None and r.verdict.in_place]),
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
    failed = sum(len(r.failed_checks) for r in results)
    if failed:
        parts.append(f"{count(failed, 'check')} failed")
    if report.baseline is not None:
        regressions, improvements = len(report.baseline.regressions), len(report.baseline.improvements)
        parts.append(
            f"against {report.baseline.path}: {count(regressions, 'regression')}, {count(improvements, 'improvement')}"
        )
    return f"fieldmem ({environment}): {count(len(results), 'target')}: " + "; ".join(parts)


def render(report: Report, options: RenderOptions) -> str:
    report = visible_strings(report)  # every name, path and message as fieldmem shows user text
    lines: list[str] = []
    for result in report.results:
        lines.extend(_target_annotations(result))
    for chain in report.chains:
        lines.extend(_chain_annotations(chain))
    if report.baseline is not None:
        definitions = _definitions(report)
        lines.extend(_regression_annotation(r, definitions) for r in report.baseline.regressions)
        lines.extend(
            annotation("warning", note, title=f"fieldmem: baseline {report.baseline.path}")
            for note in report.baseline.notes
        )
    lines.append(annotation("notice", _summary(report)))
    return defused("\n".join(lines) + "\n", commands=True)
