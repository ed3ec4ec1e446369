"""This run against a saved baseline (``--baseline``): the changes found, each a regression or an
improvement, and the targets whose failing checks the baseline accepts. Records of the report, no computation
(:mod:`fieldmem.gate.diff` finds the changes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Accepted",
    "BaselineComparison",
    "Change",
]


@dataclass(frozen=True)
class Change:
    """One thing that differs for a target between two runs (``fieldmem.gate.diff`` finds them).

    The baseline gate files each as a regression or an improvement; ``fieldmem
    compare`` places each in a column and says whether it is significant.
    """

    target: str
    kind: str  # figure | copy | alias | donation | verdict | status | check
    subject: str  # what changed: a figure name, a copy, an alias, an input leaf
    message: str  # the whole change in words: subject, before -> after, where
    before: int | str | None = None
    after: int | str | None = None
    source: str | None = None  # file.py:LINE of the copy or function concerned
    # what changed besides the code, where the run knows: "jax 0.9.2 → 0.10.2" for a baseline recorded
    # under another jax release (None: nothing else the run knows of)
    cause: str | None = None


@dataclass(frozen=True)
class Accepted:
    """A target this run compared with its baseline entry.

    What the entry recorded is accepted (its findings are not new), and
    ``checks`` names the checks that fail now as they failed when the entry was
    recorded (``--save-baseline FILE --accept-current``): they do not fail the run.
    """

    target: str  # the result's name, as in the report
    checks: tuple[str, ...] = ()  # names of its failed checks the baseline accepts


@dataclass(frozen=True)
class BaselineComparison:
    """This run against a saved baseline (``--baseline``)."""

    path: str
    regressions: tuple[Change, ...] = ()
    improvements: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()  # flagged mismatches: another backend, an older jax, new or missing targets
    tolerance: str | None = None
    # the targets compared with an entry, each with the failing checks the entry accepts; absent in reports
    # written before issue 30 (read: none compared, none accepted)
    accepted: tuple[Accepted, ...] = ()

    def accepts(self, target: str, check: str | None = None) -> bool:
        """Whether the baseline compared ``target`` and, given a check's name, accepts that check failing."""
        by_target = self.__dict__.get("_accepted")
        if by_target is None:  # read once: a report of 16,000 targets asks for each
            by_target = {a.target: frozenset(a.checks) for a in self.accepted}
            object.__setattr__(self, "_accepted", by_target)
        checks = by_target.get(target)
        return checks is not None and (check is None or check in checks)
