"""A baseline file's records (``fieldmem.baseline/2``, documented in ``docs/baselines.md``): one entry per
target name, backend and device kind, and how a report's result becomes one (:func:`entry_from_result`).

Saving and loading them is :mod:`fieldmem.gate.baseline`'s; naming the targets is
:mod:`fieldmem.gate.target_names`'s, and comparing a run against them :mod:`fieldmem.gate.regressions`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fieldmem.gate.diff import (
    CopyRecord,
    copy_record,
    peak_lines_of,
)
from fieldmem.model.codec import encode
from fieldmem.model.errors import FieldmemError
from fieldmem.model.memory import MEMORY_FIGURES
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant

SCHEMA = "fieldmem.baseline/2"
LEGACY_SCHEMA = "fieldmem.baseline/1"  # file targets named relative to the folder it was saved from
SUPPORTED_SCHEMAS = (SCHEMA, LEGACY_SCHEMA)
VARIANTS = ("plain", "donated")
LOCK_TIMEOUT = 60.0  # seconds a save waits for another process's save of the same baseline
LARGEST = 2**63  # a byte count at or above this is no real size


class BaselineError(FieldmemError):
    """A baseline file cannot be read, or this run must not be saved as one. Exit code 2."""

    kind = "baseline"


# ----------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class AliasRecord:
    """A donated input leaf whose buffer an output reuses."""

    input: str
    output: str
    bytes: int


@dataclass(frozen=True)
class DonationRecord:
    """A donated input leaf no output reuses, with the analysis' code and reason."""

    input: str
    bytes: int
    code: str
    reason: str


@dataclass(frozen=True)
class AcceptedCheck:
    """A check that failed when the entry was recorded (``--accept-current``): the gate accepts it while it
    fails the same way, i.e. a check of this name with this limit (a budget's bytes; None for an
    expectation)."""

    name: str
    limit: int | None = None


@dataclass(frozen=True)
class VariantRecord:
    memory: dict[str, int | None]
    aliases: tuple[AliasRecord, ...] = ()
    unusable_donations: tuple[DonationRecord, ...] = ()
    copies: tuple[CopyRecord, ...] = ()
    # bytes at the live peak by the user's line (an argument by its path), the largest kept:
    # gate.diff.peak_lines_of (None: not recorded, as in baselines written before them)
    peak_lines: dict[str, int] | None = None
    peak_lines_floor: int = 0


@dataclass(frozen=True)
class BaselineEntry:
    """One target's findings on one backend and device kind."""

    name: str
    target: str  # the spec as typed: an entry whose spec ran but whose name is gone has disappeared
    backend: str
    device_kind: str | None
    status: str
    in_place: bool | None
    verdict: str | None
    definition: str | None
    donate: str | None
    expect: str | None
    min_bytes: int
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    variants: dict[str, VariantRecord] = field(default_factory=dict)
    # the checks failing when it was recorded, accepted while they fail the same way; written only when there
    # are some, absent in files before issue 30 (none accepted)
    accepted_checks: tuple[AcceptedCheck, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.backend, self.device_kind or "")


@dataclass(frozen=True)
class Baseline:
    """A baseline file as read (``path``) or as written."""

    path: str
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    device_kinds: tuple[str, ...]
    entries: tuple[BaselineEntry, ...]
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        data = encode(self)
        del data["path"]
        for entry in data["entries"]:
            for name in OPTIONAL_ENTRY_FIELDS:
                if not entry.get(name):
                    del entry[name]  # none: the file stays as a fieldmem before the field wrote it
        return {"schema": data.pop("schema"), **data}


#: entry fields written only when they hold something (older files lack them, and mean "none")
OPTIONAL_ENTRY_FIELDS = ("accepted_checks",)


@dataclass(frozen=True)
class SavedBaseline:
    """What :func:`save_baseline` wrote: the entries of this run, those kept, those pruned."""

    baseline: Baseline
    written: tuple[str, ...]
    kept: tuple[str, ...]
    pruned: tuple[str, ...]
    # fields a newer fieldmem wrote that this one does not know, in entries this run wrote again (or at
    # the top of the file): not kept, and said so. Those of the entries kept are kept as they were.
    dropped: tuple[str, ...] = ()


# ----------------------------------------------------------------------------
# From a report


def first_device_kind(report: Report) -> str | None:
    """The kind of the run's first device (``cpu``, ``NVIDIA H100 80GB HBM3``, ``TPU v5 lite``)."""
    if not report.devices:
        return None
    first = report.devices[0]
    return first.kind or first.platform


def _variant_record(variant: Variant) -> VariantRecord:
    memory = {name: getattr(variant.memory, name) for name in MEMORY_FIGURES}
    return VariantRecord(
        memory=memory,
        aliases=tuple(AliasRecord(a.input, a.output, a.bytes) for a in variant.aliases),
        unusable_donations=tuple(
            DonationRecord(d.input, d.bytes, d.code, d.reason) for d in variant.unusable_donations
        ),
        copies=tuple(copy_record(c) for c in variant.copies),
        **peak_lines_of(variant.peak),
    )


def entry_from_result(result: TargetResult, report: Report, *, accept_current: bool = False) -> BaselineEntry:
    """The baseline entry recording ``result`` (a checked target of ``report``).

    Its accepted checks: every failed check with ``accept_current``, else those the report's own
    baseline comparison accepted (a refresh keeps accepting what still fails the same way).
    """
    failed = result.failed_checks if accept_current else report.accepted_failures(result)
    return BaselineEntry(
        name=result.name,
        target=result.target,
        backend=report.backend,
        device_kind=first_device_kind(report),
        status=result.status,
        in_place=result.verdict.in_place if result.verdict is not None else None,
        verdict=result.verdict.summary if result.verdict is not None else None,
        definition=result.definition,
        donate=result.donate,
        expect=result.expect,
        min_bytes=report.min_bytes,
        fieldmem_version=report.fieldmem_version,
        jax_version=report.jax_version,
        jaxlib_version=report.jaxlib_version,
        variants={name: _variant_record(result.variants[name]) for name in VARIANTS},
        accepted_checks=tuple(AcceptedCheck(c.name, c.limit) for c in failed),
    )


def check_name(name: str) -> str:
    """A check's name as this fieldmem names it: ``max-peak`` (the footprint budget before issue 48) is
    ``max-footprint``."""
    return "max-footprint" if name == "max-peak" else name
