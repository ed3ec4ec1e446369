"""The report's sets of words: one ``Literal`` type per set, with the tuple of the words fieldmem emits.

Every closed set of words the report uses (a result's ``status``, a copy's
``kind``, a finding's ``code``, ...) is a ``Literal`` type defined here once,
with the tuple of its words; code that compares against them is checked by
mypy. The meaning, label and severity of each word are declared in
:mod:`fieldmem.model.vocabulary`. This module imports nothing of fieldmem but the codec,
which it tells how to read a word of an open set that it does not know.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from fieldmem.model import vocabulary
from fieldmem.model.codec import declare_words, read_unknown_as

__all__ = [
    "ARGUMENT_CODES",
    "CHAIN_STEP_STATUSES",
    "CHECK_NAMES",
    "COPY_CAUSES",
    "COPY_KINDS",
    "COST_LAYOUTS",
    "DONATION_CODES",
    "EXPECTATIONS",
    "FINDING_CODES",
    "HANDOFF_CODES",
    "IN_PLACE_KINDS",
    "LEAF_CODES",
    "LIVE_BUFFER_KINDS",
    "PEAK_SOURCE_KINDS",
    "PROBE_CODES",
    "SEVERITIES",
    "SOURCE_ROLES",
    "STATIC_CODES",
    "TARGET_STATUSES",
    "TRANSFER_KINDS",
    "VERDICT_KINDS",
    "VERIFICATIONS",
    "ArgumentCode",
    "ChainStepStatus",
    "CheckName",
    "CopyCause",
    "CopyKind",
    "CostLayout",
    "DonationCode",
    "Expectation",
    "FindingCode",
    "HandOffCode",
    "LeafCode",
    "LiveBufferKind",
    "PeakSourceKind",
    "ProbeCode",
    "Severity",
    "SourceRole",
    "StaticCode",
    "TargetStatus",
    "TransferKind",
    "VerdictKind",
    "Verification",
]


# The report's sets of words, one definition each. ``Literal`` lets the type
# checker catch a misspelt comparison; the tuples below list the values
# fieldmem emits, for code that lists or checks them at run time.
# docs/report-schema.md describes each.
#
# Most sets are *open*: a newer fieldmem may add a value (a copy kind, a
# finding code), and a report it wrote must still read here. Each open set
# holds ``"unknown"``, which no analysis emits: the codec reads a value it does
# not know there as ``"unknown"`` and says where (:func:`fieldmem.model.codec.unknown_values`).
# The *closed* sets decide exit codes and the verdict's weight (a target's
# status, an expectation, a finding's severity): a value outside them is refused.
UNKNOWN = "unknown"
TargetStatus = Literal["ok", "error"]
Expectation = Literal["in-place", "fits", "any"]
CopyKind = Literal["parameter", "loop", "conditional", "layout", "other", "staging", "unknown"]
SourceRole = Literal["copy", "operand", "user", "definition", "unknown"]
CopyCause = Literal[
    "input-kept-intact",
    "old-carry-read-after-update",
    "new-value-via-temporary",
    "output-via-temporary",
    "layout-change",
    "unknown",
]
LiveBufferKind = Literal["parameter", "aliased", "output", "temporary", "constant", "unknown"]
# what a group of the bytes at the peak is (PeakSource.kind): an argument's buffer, a computed
# output or temporary, the executable's constants
PeakSourceKind = Literal["argument", "output", "temporary", "constant", "unknown"]
DonationCode = Literal["unused", "no-output-of-size", "outputs-taken", "not-reused", "unknown"]
LeafCode = Literal["reused", DonationCode, "copied", "via-temporary"]
ArgumentCode = Literal["donate", LeafCode, "too-small", "no-saving", "mixed"]
Verification = Literal["suggested", "donated", "plain", "none", "unknown"]
ProbeCode = Literal["slice-only", "whole-buffer", "inconclusive", "not-probed", "unknown"]
Severity = Literal["error", "warning", "info"]
FindingCode = Literal[
    "new-buffer",
    "new-output",
    "new-unmatched",
    "parameter-copy",
    "loop-copy",
    "conditional-copy",
    "output-copy",
    "compiler-copy",
    "donation-dropped",
    "unusable-donation",
    "layout-copy",
    "other-copy",
    "plain-copy",
    "constant",
    "run-alias-missing",
    "run-alias-not-comparable",
    "run-not-made",
    "run-unplanned-alias",
    "run-peak-above-plan",
    "probe-whole-buffer",
    "made-static",
    "state-grows",
    "exceeds-device-memory",
    "resharded-donation",
    "shared-donation",
    "shared-argument",
    "transfer",
    "run-transfer-mismatch",
    "unknown",
]
# max-peak: the footprint budget's name before issue 48 (read in older reports and baselines as max-footprint)
CheckName = Literal["expect-in-place", "expect-fits", "max-footprint", "max-live-peak", "max-peak", "unknown"]
HandOffCode = Literal[
    "dtype-change", "shape-change", "sharding-change", "layout-change", "reshard", "relayout", "unknown"
]
ChainStepStatus = Literal["in-place", "grows", "breaks", "error", "not-checked", "unknown"]
CostLayout = Literal["steps", "fused", "unknown"]
StaticCode = Literal["concrete", "not-traceable", "unknown"]
# how jax gets an argument leaf to the program before each call (Transfer.kind)
TransferKind = Literal["host-to-device", "across-devices", "memory-kind", "unknown"]
# what the verdict rule (fieldmem.findings.verdict) decided: docs/verdicts.md has the table
VerdictKind = Literal["in-place", "in-place-as-written", "not-in-place", "nothing-to-update", "does-not-fit", "unknown"]
#: the verdicts that are in place: ``Verdict.in_place``, and what ``--expect in-place`` passes
IN_PLACE_KINDS: tuple[VerdictKind, ...] = ("in-place", "in-place-as-written")

#: The open sets: a value a newer fieldmem wrote, unknown here, reads as ``"unknown"``.
OPEN_SETS = (
    CopyKind,
    SourceRole,
    CopyCause,
    LiveBufferKind,
    PeakSourceKind,
    DonationCode,
    LeafCode,
    ArgumentCode,
    Verification,
    ProbeCode,
    FindingCode,
    CheckName,
    HandOffCode,
    ChainStepStatus,
    CostLayout,
    StaticCode,
    VerdictKind,
    TransferKind,
)
for _open in OPEN_SETS:
    read_unknown_as(_open, UNKNOWN)
del _open
# the words fieldmem.model.vocabulary declares are the sets' (tests/model/test_words.py holds each Literal to them)
declare_words(CopyKind, vocabulary.copy_kind_names)
declare_words(CopyCause, vocabulary.copy_cause_names)
declare_words(FindingCode, vocabulary.finding_code_names)


def _emitted(values: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of a set that fieldmem emits: all but ``"unknown"``."""
    return tuple(v for v in values if v != UNKNOWN)


TARGET_STATUSES: tuple[TargetStatus, ...] = get_args(TargetStatus)
EXPECTATIONS: tuple[Expectation, ...] = get_args(Expectation)
COPY_KINDS: tuple[CopyKind, ...] = _emitted(get_args(CopyKind))
SOURCE_ROLES: tuple[SourceRole, ...] = _emitted(get_args(SourceRole))
COPY_CAUSES: tuple[CopyCause, ...] = _emitted(get_args(CopyCause))
LIVE_BUFFER_KINDS: tuple[LiveBufferKind, ...] = _emitted(get_args(LiveBufferKind))
PEAK_SOURCE_KINDS: tuple[PeakSourceKind, ...] = _emitted(get_args(PeakSourceKind))
DONATION_CODES: tuple[DonationCode, ...] = _emitted(get_args(DonationCode))
LEAF_CODES: tuple[LeafCode, ...] = _emitted(get_args(LeafCode))
ARGUMENT_CODES: tuple[ArgumentCode, ...] = _emitted(get_args(ArgumentCode))
VERIFICATIONS: tuple[Verification, ...] = _emitted(get_args(Verification))
PROBE_CODES: tuple[ProbeCode, ...] = _emitted(get_args(ProbeCode))
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
FINDING_CODES: tuple[FindingCode, ...] = _emitted(get_args(FindingCode))
CHECK_NAMES: tuple[CheckName, ...] = _emitted(get_args(CheckName))
HANDOFF_CODES: tuple[HandOffCode, ...] = _emitted(get_args(HandOffCode))
CHAIN_STEP_STATUSES: tuple[ChainStepStatus, ...] = _emitted(get_args(ChainStepStatus))
COST_LAYOUTS: tuple[CostLayout, ...] = _emitted(get_args(CostLayout))
STATIC_CODES: tuple[StaticCode, ...] = _emitted(get_args(StaticCode))
VERDICT_KINDS: tuple[VerdictKind, ...] = _emitted(get_args(VerdictKind))
TRANSFER_KINDS: tuple[TransferKind, ...] = _emitted(get_args(TransferKind))
