"""What fails a run, one cause at a time: the regressions, failed checks and breaking findings of a report
grouped so that one change of code is one error, at the line of that change.

Removing one ``donate_argnums`` loses every alias of that argument, adds a copy of each of its leaves, grows
the footprint, the live peak and XLA's peak, and turns the verdict: eight regressions, one change. Here they
are one :class:`Cause`, at the line where the jit sets its donation (``TargetResult.jit_definition``), with
the others as its detail. A new copy is one cause at the line that writes it, with the figures it grows; a
state argument left out of a donation is one cause at the jit's line, however many outputs it leaves in new
buffers; a failed ``expect-in-place`` check is the detail of the cause its verdict names. Each cause's
message names first the line it is at (``source``), so that an annotation there says what its line is.

:mod:`fieldmem.render.github` annotates one error per cause; the job summary lists everything, grouped or not.
Pure: it reads the report, computes nothing new, never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.target import TargetResult
from fieldmem.model.verdict import Check, Finding

__all__ = ["Cause", "finding_causes", "regression_causes"]

# the regressions of a donation changed, and the findings of a donation missing: fixed where the jit donates
_DONATION_CHANGES = ("alias", "donation")
_DONATION_FINDINGS = ("unusable-donation", "donation-dropped")
# what a change of code brings with it: the figures it grows, the verdict it turns, the checks it fails
_CONSEQUENCES = ("figure", "verdict", "check")


@dataclass(frozen=True)
class Cause:
    """One change of code and what it accounts for: one error annotation.

    ``source``: the line the change is at (the annotation's), which ``message`` names first; ``message``:
    what the change did, then the rest of what it accounts for; ``details``: those, one each; ``title``:
    what failed, in a few words."""

    target: str
    title: str
    message: str
    source: str | None
    details: tuple[str, ...] = ()


def _without_name(message: str, target: str) -> str:
    prefix = f"{target}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def _joined(head: str, details: Sequence[str]) -> str:
    if not details:
        return head
    return f"{head}; with it ({len(details)} more): " + "; ".join(details)


def _cause(target: str, title: str, head: str, source: str | None, details: Sequence[str]) -> Cause:
    return Cause(target, title, _joined(head, details), source, tuple(details))


def _regression_groups(changes: list[Change]) -> list[tuple[str, Change, list[Change]]]:
    """The regressions of one target, each in the group of its cause: (what changed, the change heading it,
    the changes it brings with it)."""
    donation = [c for c in changes if c.kind in _DONATION_CHANGES]
    copies = [c for c in changes if c.kind == "copy"]
    rest = [c for c in changes if c.kind in _CONSEQUENCES]
    status = [c for c in changes if c not in donation and c not in copies and c not in rest]
    groups: list[tuple[str, Change, list[Change]]] = [("status", c, []) for c in status]
    if donation:
        # the leaves whose alias was lost: a copy of one of them comes with the donation that left
        lost = {c.subject.split(" → ")[0] for c in donation if c.kind == "alias"} | {
            c.subject for c in donation if c.kind == "donation"
        }
        followers = [c for c in copies if any(c.subject.endswith(f"of {leaf}") for leaf in lost)]
        copies = [c for c in copies if c not in followers]
        groups.append(("donation changed", donation[0], donation[1:] + followers + rest))
        rest = []
    by_line: dict[str | None, list[Change]] = {}
    for change in copies:  # largest first (the gate's order): each line's largest heads its group
        by_line.setdefault(change.source, []).append(change)
    for n, (_, found) in enumerate(by_line.items()):
        groups.append(("new copy", found[0], found[1:] + (rest if n == 0 else [])))
    if rest and not by_line:
        groups.append(("grew", rest[0], rest[1:]))
    return groups


def regression_causes(comparison: BaselineComparison, results: Sequence[TargetResult]) -> list[Cause]:
    """Every regression of ``comparison`` in exactly one :class:`Cause`, in the order of the regressions'
    targets (a change that concerns no target of ``results``, such as a baseline that matches none, is a
    cause of its own)."""
    by_name = {r.name: r for r in results}
    by_target: dict[str, list[Change]] = {}
    for change in comparison.regressions:
        by_target.setdefault(change.target, []).append(change)
    causes: list[Cause] = []
    for target, changes in by_target.items():
        result = by_name.get(target)
        for what, head, followers in _regression_groups(changes):
            source = head.source or (result.definition if result is not None else None)
            details = [_without_name(c.message, target) for c in followers]
            count = 1 + len(followers)
            title = f"fieldmem: {target}: {what}, {count} regression{'s' if count != 1 else ''} against the baseline"
            causes.append(_cause(target, title, head.message, source, details))
    return causes


def _annotated_at(finding: Finding, result: TargetResult) -> str | None:
    """Where a finding's annotation goes: the user's line that led to library code, else its own."""
    return finding.call_site or finding.source or result.definition


def _donation_finding(finding: Finding, donated: dict[str, bool]) -> bool:
    """Whether ``finding`` is fixed in the donation (the jit's ``donate_argnums``): an output in a new buffer,
    or an input copied, because the input is not donated; a donation chosen that nothing can use; one jax
    dropped."""
    if finding.code in ("new-buffer", "parameter-copy"):  # an input not donated: written anew, or copied
        return finding.input is not None and not donated.get(finding.input, True)
    return finding.code in _DONATION_FINDINGS


def finding_causes(result: TargetResult, failed: Sequence[Check]) -> list[Cause]:
    """The breaking findings of ``result`` (severity ``error``) in causes: those fixed in the donation as one
    cause at the line where the jit sets it (else the function's definition), the others one per line they
    are at; ``failed``, the target's failed ``expect-in-place`` check (or none), is the detail of the cause
    that holds the verdict's headline finding."""
    if result.verdict is None:
        return []
    errors = [f for f in result.verdict.findings if f.severity == "error"]
    if not errors:
        return []
    donated = {leaf.path: leaf.donated for leaf in result.inputs}
    jit = result.jit_definition or result.definition
    groups: dict[tuple[str, str | None], list[Finding]] = {}
    for finding in errors:  # ranked: the largest first, so each group's head is its largest
        if _donation_finding(finding, donated):
            groups.setdefault(("donation", jit), []).append(finding)
        else:
            groups.setdefault(("line", _annotated_at(finding, result)), []).append(finding)
    headline = errors[0]
    causes: list[Cause] = []
    for (kind, source), found in groups.items():
        head = found[0]
        details = [f.message for f in found[1:]]
        checks = [c for c in failed if headline in found]
        what = "the donation" if kind == "donation" else head.code
        if kind == "donation":
            where = "where the jit sets its donation" if result.jit_definition else "where the function is defined"
            message = f"at {source}, {where}: {head.message}"
        else:
            message = head.message
        title = f"fieldmem: {result.name}: {what}" + (
            f" ({', '.join(c.name for c in checks)} failed)" if checks else ""
        )
        causes.append(_cause(result.name, title, message, source, details))
    return causes
