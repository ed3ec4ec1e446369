"""What was decided about a target: the verdict, the findings behind it, and the checks of its
expectations and budgets. Records of the report, no computation (:mod:`fieldmem.findings.verdict` decides).
"""

from __future__ import annotations

from dataclasses import dataclass

from fieldmem.model.word_sets import IN_PLACE_KINDS, CheckName, FindingCode, Severity, VerdictKind

__all__ = [
    "Check",
    "Finding",
    "Verdict",
]


@dataclass(frozen=True)
class Finding:
    """One reason behind a verdict, in words a user can act on."""

    severity: Severity
    code: FindingCode
    message: str
    input: str | None = None
    output: str | None = None
    source: str | None = None
    call_site: str | None = None  # source is library code: the user's line that led there
    # the memory it costs per call (a loop copy: its bytes times the trip count): what ranks the findings
    bytes: int | None = None


@dataclass(frozen=True)
class Verdict:
    """What the verdict rule (:mod:`fieldmem.findings.verdict`) decided, the headline and the reasons,
    ranked: what breaks in place first, then warnings, then notes, each by the bytes at stake."""

    in_place: bool  # kind in IN_PLACE_KINDS: kept for readers of report/2 that know only this
    summary: str
    findings: tuple[Finding, ...] = ()
    # None only in a report written before the kind existed: read there from in_place
    kind: VerdictKind | None = None

    def __post_init__(self) -> None:
        # the kind decides; in_place follows it, except for a kind a newer fieldmem wrote ("unknown")
        if self.kind is None:
            object.__setattr__(self, "kind", "in-place" if self.in_place else "not-in-place")
        elif self.kind != "unknown" and self.in_place != (self.kind in IN_PLACE_KINDS):
            object.__setattr__(self, "in_place", self.kind in IN_PLACE_KINDS)


@dataclass(frozen=True)
class Check:
    """An expectation or budget evaluated on the donated variant."""

    name: CheckName
    passed: bool
    message: str
    limit: int | None = None
    value: int | None = None
