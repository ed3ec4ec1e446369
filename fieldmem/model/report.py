"""The report: frozen dataclasses, and their JSON form ``fieldmem.report/2``.

Everything a user sees is rendered from a :class:`Report`; nothing is computed
in a renderer. ``Report.to_dict()`` is the JSON contract documented in
``docs/report-schema.md``; ``Report.from_dict()`` reads it back (unknown keys
are ignored, missing optional keys take their defaults) so later versions of
fieldmem can compare against reports saved by earlier ones. A document that
is not such a report (another schema, a required key missing, a value of the
wrong JSON type, a word outside its set) raises :class:`ReportError`.

Every closed set of words the report uses (a result's ``status``, a copy's
``kind``, a finding's ``code``, ...) is a ``Literal`` type defined here once,
with the tuple of its words; code that compares against them is checked by
mypy. This module imports nothing of fieldmem but the codec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from fieldmem.model.codec import decode, encode, read_unknown_as, unknown_values
from fieldmem.model.errors import quoted

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
    "REPORTS_SCHEMA",
    "SCHEMA",
    "SEVERITIES",
    "SOURCE_ROLES",
    "STATIC_CODES",
    "TARGET_STATUSES",
    "TRANSFER_KINDS",
    "VERDICT_KINDS",
    "VERIFICATIONS",
    "Accepted",
    "Alias",
    "AliasCheck",
    "ArgumentAdvice",
    "ArgumentCode",
    "BaselineComparison",
    "Chain",
    "ChainBreak",
    "ChainCost",
    "ChainStep",
    "ChainStepStatus",
    "Change",
    "Check",
    "CheckName",
    "Copy",
    "CopyCause",
    "CopyKind",
    "CostLayout",
    "DeviceInfo",
    "DeviceMemory",
    "Deviceless",
    "DonationCode",
    "ErrorInfo",
    "Expectation",
    "Finding",
    "FindingCode",
    "HandOff",
    "HandOffCode",
    "HostFromShardings",
    "InPlaceProbe",
    "InputInfo",
    "LeafAdvice",
    "LeafCode",
    "LiveBuffer",
    "LiveBufferKind",
    "MadeStatic",
    "MeasuredDonation",
    "MemoryFigures",
    "MemorySpace",
    "ModuleSettings",
    "OutputInfo",
    "PeakBreakdown",
    "PeakBuffer",
    "PeakLine",
    "PeakSource",
    "PeakSourceKind",
    "ProbeCode",
    "Report",
    "ReportError",
    "Reports",
    "RunCheck",
    "Severity",
    "SourceRole",
    "StackFrame",
    "StaticCode",
    "Suggestion",
    "TargetResult",
    "TargetStatus",
    "Timeline",
    "Transfer",
    "TransferKind",
    "TransferRun",
    "Transfers",
    "UnusableDonation",
    "Variant",
    "Verdict",
    "VerdictKind",
    "Verification",
]

# /2: ``backend`` may name a device kind compiled for without the device (``tpu:v5e:2x2``), and
# ``deviceless`` says so; a /1 report reads as one compiled on a real device
SCHEMA = "fieldmem.report/2"
SUPPORTED_SCHEMAS = ("fieldmem.report/1", "fieldmem.report/2")

MEMORY_FIGURES = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "generated_code_bytes",
    "peak_bytes",
    "footprint_bytes",
    "live_peak_bytes",
    "constant_bytes",
)

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


class ReportError(ValueError):
    """A JSON document is not a fieldmem report this version can read."""


@dataclass(frozen=True)
class MemorySpace:
    """The figures of one memory space of the buffer assignment (an allocation's color).

    ``memory_space`` 0 is the device's default memory (HBM on a GPU or TPU), which
    XLA's argument, output and temp figures and fieldmem's footprint and live peak
    count; on a TPU, 1 is VMEM (``S(1)`` in a shape's layout); docs/peaks.md
    lists the others seen.
    ``allocated_bytes``: the space's allocations (constants included, thread-local
    ones not); ``live_peak_bytes``: the peak of the bytes live in them; ``name``: what
    the space is on the program's platform (``HBM``, ``VMEM``: fieldmem.xla.spaces;
    None where not known); ``device``: whether it is the device's own memory, which
    the footprint and the live peak count (a TPU's VMEM is not; a GPU's collective
    memory is).
    """

    memory_space: int
    allocated_bytes: int
    live_peak_bytes: int
    name: str | None = None
    device: bool = True


@dataclass(frozen=True)
class HostFromShardings:
    """A ``host_*`` figure that is fieldmem's reading, not XLA's: ``memory_analysis()`` gives 0 for it
    although the compiled program takes or returns leaves in a host memory kind (``pinned_host``), because
    the backend counts host memory in its device figures (XLA:CPU does).

    ``figure``: the figure (``host_argument_bytes``, ``host_output_bytes``, ``host_alias_bytes``);
    ``bytes``: its value in :class:`MemoryFigures`, the bytes per device of ``leaves``, the input or output
    leaves the program's own input or output shardings put in host memory (for ``host_alias_bytes``, the
    aliased inputs among them); ``xla_bytes``: what ``memory_analysis()`` gave (0), kept so nothing is
    hidden; ``counted_in``: the device figure that holds these bytes instead (``argument_bytes``);
    ``note``: all of it in words, for the renderers.
    """

    figure: str
    bytes: int
    xla_bytes: int
    counted_in: str
    leaves: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class MemoryFigures:
    """XLA's figures verbatim (``memory_analysis()``), plus ``footprint_bytes``.

    ``footprint_bytes`` = argument + output + temp - alias + constant: what the
    executable holds at once. ``live_peak_bytes``: the maximum over the schedule of the
    bytes the allocation slices live at one point cover (per allocation, the
    union of their byte ranges; fieldmem.xla.buffers).
    ``constant_bytes``: the arrays compiled into the program as constants (a
    closed-over array), which XLA holds for the executable's lifetime, outside
    the argument, output and temp figures (docs/peaks.md). A figure the backend
    does not give is None, and ``unavailable`` says why. The ``host_*`` figures are XLA's too, except each
    one ``host_from_shardings`` lists: XLA gave 0 for it although the program holds leaves in host memory,
    and the figure is fieldmem's reading of the compiled program's own shardings, XLA's 0 kept beside it.
    """

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    peak_bytes: int | None = None
    footprint_bytes: int | None = None
    live_peak_bytes: int | None = None
    constant_bytes: int | None = None
    host_argument_bytes: int | None = None
    host_output_bytes: int | None = None
    host_alias_bytes: int | None = None
    host_temp_bytes: int | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    # every memory space of the buffer assignment, ascending (empty without one):
    # live_peak_bytes above is memory space 0's
    memory_spaces: tuple[MemorySpace, ...] = ()
    # the host_* figures read from the program's shardings, where XLA gives 0 (XLA:CPU); empty: all XLA's
    host_from_shardings: tuple[HostFromShardings, ...] = ()
    # a figure's meaning where it is not what its name says on every backend, in words, by figure name: on a
    # TPU, XLA's peak_bytes counts the on-chip memory (VMEM) beside HBM, and the HBM peak is live_peak_bytes
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Alias:
    """A donated input leaf whose buffer an output reuses."""

    input: str
    input_index: int
    output: str
    output_index: int
    bytes: int


@dataclass(frozen=True)
class UnusableDonation:
    """A donated input leaf that no output reuses."""

    input: str
    input_index: int
    bytes: int
    reason: str
    code: DonationCode


@dataclass(frozen=True)
class Copy:
    """A ``copy`` XLA kept in the compiled program."""

    bytes: int
    shape: str
    kind: CopyKind
    of_parameter: str | None
    input_index: int | None
    computation: str
    instruction: str
    source: str | None
    source_role: SourceRole | None
    output: str | None = None  # the output this copy is returned as, if any
    cause: CopyCause | None = None  # why XLA kept this copy
    trip_count: int | None = None  # loop copies: iterations per call, when known
    bytes_per_call: int | None = None  # bytes x trip count, when known
    call_site: str | None = None  # source is library code: the user's line that led there
    # conditional copies: the branch that makes it ("true"/"false", or its index) and
    # the conditional's source line; the copy runs only when that branch runs
    branch: str | None = None
    branch_source: str | None = None
    # the memory spaces it copies from and to (0: the device's default memory; on a TPU,
    # 1 is VMEM); a "staging" copy is one between two of them that makes no second buffer
    source_memory_space: int = 0
    memory_space: int = 0


@dataclass(frozen=True)
class LiveBuffer:
    """An allocation slice live at the live peak, with the value that took it."""

    bytes: int
    kind: LiveBufferKind
    instruction: str | None
    shape: str | None
    source: str | None
    input: str | None = None  # the input leaf the value is (the parameter, or a copy of it)
    call_site: str | None = None  # source is library code: the user's line that led there
    # the value occupies a donated input's buffer without being that input (an update written into it, after the
    # input's last read): the input whose buffer it is; the value is named by ``instruction`` and ``output``
    buffer_of: str | None = None
    output: str | None = None  # the output the value is returned as, by path


@dataclass(frozen=True)
class StackFrame:
    """One frame of the Python stack jax recorded with an operation: a file (as fieldmem shows paths),
    a line, the function; ``library``: code the user does not edit (flax, optax, jax, the interpreter)."""

    file: str
    line: int
    function: str | None = None
    library: bool = False


@dataclass(frozen=True)
class PeakBuffer:
    """One allocation slice live at the live peak, as counted in its :class:`PeakSource`."""

    bytes: int  # what it adds to the peak: its size less bytes a slice counted before it shares
    kind: LiveBufferKind
    instruction: str | None
    shape: str | None
    padding_bytes: int = 0  # its size beyond its elements' (tiled layouts of a TPU or GPU)


@dataclass(frozen=True)
class PeakSource:
    """The bytes live at the peak that come from one place of the user's program.

    An argument's buffer (``kind`` "argument": ``input`` names the leaf; a donated input's
    buffer holding what was written into it stays its input's), a value the program computes
    (``stack``: the Python stack of the operation that made it, outermost first, from the user's
    outermost frame; ``output``: the result leaf it is, when it is returned), or the executable's
    constants. ``line`` is the user's own line it comes from: the innermost frame of the user's code.
    """

    kind: PeakSourceKind
    bytes: int
    line: str | None = None
    stack: tuple[StackFrame, ...] = ()
    input: str | None = None
    output: str | None = None
    padding_bytes: int = 0
    buffers: tuple[PeakBuffer, ...] = ()  # largest first


@dataclass(frozen=True)
class PeakLine:
    """The bytes at the peak by the user's line (an argument by its path): what ``--top`` lists and a
    change of peak is worded by. ``label``: ``model.py:61``, or the argument's path."""

    label: str
    kind: PeakSourceKind
    bytes: int
    buffers: int
    share: float  # of the live peak


@dataclass(frozen=True)
class PeakBreakdown:
    """Where the live peak comes from: every byte live at it, grouped by source (docs/peaks.md).

    ``sources`` and ``lines`` each add up to ``bytes`` exactly: for memory space 0 (the device's
    default memory) the variant's ``live_peak_bytes``; for another space (a TPU's VMEM, host memory) that
    space's own live peak (:class:`MemorySpace`).
    """

    bytes: int
    memory_space: int = 0  # 0: the device's default memory (the live peak); else that space at its own peak
    sources: tuple[PeakSource, ...] = ()  # largest first
    lines: tuple[PeakLine, ...] = ()  # largest first
    padding_bytes: int = 0
    peak_instruction: str | None = None  # the operation at which the peak is reached


@dataclass(frozen=True)
class Timeline:
    """Bytes the live allocation slices cover over the schedule, decimated for display.

    ``positions`` are indices into the flattened schedule (0 .. ``length`` - 1,
    a loop body's instructions inline at their ``while``), ascending;
    ``live_bytes`` the bytes live at each. At most a few hundred buckets are
    kept, each by its lowest and highest point, so the envelope of the curve
    and its peak survive decimation exactly.
    """

    length: int
    positions: tuple[int, ...]
    live_bytes: tuple[int, ...]
    peak_position: int | None = None
    peak_instruction: str | None = None
    peak_source: str | None = None


@dataclass(frozen=True)
class AliasCheck:
    """One alias (planned, or found) checked at run time by buffer identity (``--run``)."""

    input: str
    input_index: int
    output: str
    output_index: int
    confirmed: bool  # the output's buffer is the input's on every shard
    detail: str
    # False: one side has no device buffer the run can read (a Python scalar at call time), so the alias
    # can be neither confirmed nor refuted; ``detail`` says why. Such a check never fails the run.
    comparable: bool = True


@dataclass(frozen=True)
class DeviceMemory:
    """``Device.memory_stats()`` of one device around the call (``--run``); None figures and
    ``unavailable`` where the backend has none (cpu), never 0.

    ``measured_peak`` = ``peak_bytes_in_use`` after the call minus ``bytes_in_use``
    before the arguments were made (and minus what fieldmem held beside the call to
    lift it above the device's high-water mark: docs/runtime.md); ``predicted`` what
    the device's allocator is planned to hold at the call's peak, per device, by the
    rule of its backend (docs/peaks.md): on a TPU the arguments, the outputs that
    reuse no donated input and the executable's code (``code_bytes``, libtpu loads
    it into HBM), elsewhere the variant's ``footprint_bytes``; ``code_resident``: the
    code was on the device before the call (an identical program loaded it), and the
    plan leaves it out; ``reserved_peak``: the allocator's reserved memory at its
    peak less before the arguments were made, where the device gives it;
    ``difference`` measured minus predicted.
    """

    device: int
    in_use_before: int | None = None
    in_use_after: int | None = None
    peak: int | None = None
    measured_peak: int | None = None
    predicted: int | None = None
    difference: int | None = None
    unavailable: str | None = None
    code_bytes: int | None = None  # the part of ``predicted`` that is the executable's code (None: none counted)
    code_resident: bool = False
    reserved_peak: int | None = None


@dataclass(frozen=True)
class RunCheck:
    """What one call of the variant did (``--run``): the plan's aliases confirmed or not, per device memory."""

    aliases: tuple[AliasCheck, ...] = ()  # every alias of the plan
    unplanned: tuple[AliasCheck, ...] = ()  # an output found in an input's buffer the plan does not alias
    deleted: tuple[str, ...] = ()  # donated input leaves jax deleted (consumed)
    kept: tuple[str, ...] = ()  # donated input leaves still alive after the call
    devices: tuple[DeviceMemory, ...] = ()
    seconds: float | None = None
    worst_device: int | None = None  # the device with the largest measured peak (None: none measured)

    @property
    def confirmed(self) -> bool:
        """Every alias that could be compared was confirmed."""
        return all(a.confirmed for a in self.aliases if a.comparable)


@dataclass(frozen=True)
class InPlaceProbe:
    """A slice update timed at two buffer sizes (``--probe``): does its run time grow with the buffer as
    a rewrite of it would?

    ``code``: ``slice-only`` (what the call adds at the larger size is a
    tenth or less of one pass over the added bytes: only the slice is
    written), ``whole-buffer`` (it adds 0.3 passes or more, beyond the
    calls' spread: the update rewrites the buffer although the HLO is in
    place), ``inconclusive``, or ``not-probed`` (with ``message`` saying
    why). ``passes`` = (large − small) / (pass_large − pass_small): the
    call's added time in in-place passes over the added bytes, timed beside
    it (None: no pass was timed, or its time did not grow enough with the
    buffer to measure against). ``growth`` = (time ratio − 1) / (size ratio
    − 1): 0 for a constant time, 1 for a time proportional to the buffer.
    """

    input: str
    output: str
    update: str  # dynamic-update-slice | scatter
    code: ProbeCode
    message: str
    dimension: int | None = None
    small_bytes: int | None = None
    large_bytes: int | None = None
    small_seconds: float | None = None  # median
    large_seconds: float | None = None  # median
    growth: float | None = None
    repeats: int | None = None
    pass_small_seconds: float | None = None  # median of one in-place pass over a buffer like input
    pass_large_seconds: float | None = None
    passes: float | None = None


@dataclass(frozen=True)
class Variant:
    """One compile of the target: ``plain`` (no donation) or ``donated``."""

    name: str
    donated_arguments: tuple[str, ...]
    memory: MemoryFigures
    aliases: tuple[Alias, ...] = ()
    unusable_donations: tuple[UnusableDonation, ...] = ()
    copies: tuple[Copy, ...] = ()
    jax_warnings: tuple[str, ...] = ()
    # the copies that move a value between memory spaces without a second buffer of it in device memory
    # (kind "staging": a TPU's HBM -> VMEM prefetches, an offload to the host): never copies of state, apart
    # from ``copies``; largest first
    moves: tuple[Copy, ...] = ()
    live_at_peak: tuple[LiveBuffer, ...] = ()  # largest first
    timeline: Timeline | None = None
    peak: PeakBreakdown | None = None  # every byte at the live peak by source (None: no buffer assignment)
    # the same for each other memory space with bytes live in it (a TPU's VMEM, host memory), at its own peak
    space_peaks: tuple[PeakBreakdown, ...] = ()
    lower_seconds: float | None = None
    compile_seconds: float | None = None
    run: RunCheck | None = None  # only with --run
    # compiled with XLA:CPU's code generation at -O0 (--fast-compile, on for static checks); None: not recorded
    fast_compile: bool | None = None


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


@dataclass(frozen=True)
class InputInfo:
    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    donated: bool
    used: bool  # False: jit dropped it as unused
    sharding: str | None = None  # where the compiled program expects it (see docs/report-schema.md)
    layout: str | None = None
    device_shape: tuple[int, ...] | None = None  # the piece each device holds, where the program splits it
    memory_kind: str | None = None  # a memory kind other than the device's ("pinned_host": offloaded); None: device


@dataclass(frozen=True)
class OutputInfo:
    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None
    layout: str | None = None
    device_shape: tuple[int, ...] | None = None
    memory_kind: str | None = None  # a memory kind other than the device's ("pinned_host": offloaded); None: device


@dataclass(frozen=True)
class ErrorInfo:
    kind: str
    message: str


@dataclass(frozen=True)
class LeafAdvice:
    """What donating one array leaf does, as the advisor found it (``--suggest``).

    ``code`` (see docs/report-schema.md): ``reused`` (an output reuses its
    buffer in the verification compile), ``unused``, ``no-output-of-size``,
    ``outputs-taken``, ``not-reused``, ``copied`` (reused, but XLA still copies
    the input: it is read after the output is written), ``via-temporary``
    (reused, but the output is computed into a temporary and copied back).
    """

    input: str
    input_index: int
    bytes: int  # per device
    code: LeafCode
    reason: str
    output: str | None = None  # the output reusing its buffer, when one does
    saved_bytes: int = 0  # buffer reused minus the copies donation adds; <= 0: it does not pay


@dataclass(frozen=True)
class ArgumentAdvice:
    """Donate one argument or not, and why: JAX donates whole arguments, so this is the unit."""

    argument: str
    position: int | None  # positional index; None for an argument passed by keyword
    donate: bool
    code: ArgumentCode  # donate | a leaf code shared by its leaves | too-small | no-saving | mixed
    reason: str
    bytes: int  # per device, every leaf
    saved_bytes: int  # what donating it saves (sum over its leaves); 0 or less: it does not pay
    leaves: tuple[LeafAdvice, ...] = ()
    # a suggested argument: the footprint the suggestion would need more without it, the other suggested
    # arguments still donated (measured: one compile without it); None: not measured
    marginal_bytes: int | None = None


@dataclass(frozen=True)
class MeasuredDonation:
    """One donation the advisor measured (compiled for ``--suggest``, or one of the check's two compiles): the
    arguments it donates, in the call's order (none: the plain compile), and the figures of that compile."""

    arguments: tuple[str, ...]
    footprint_bytes: int | None
    live_peak_bytes: int | None


@dataclass(frozen=True)
class Suggestion:
    """The donation spec that saves the most, verified by compiling it (``--suggest``).

    ``savings`` and ``memory`` are measured: plain minus the verification
    compile, and that compile's figures. ``compiles`` counts the compiles the
    advisor added to the two of the check (0 when the donated variant or the
    plain one already is the suggestion); ``tried`` lists the specs it
    compiled, in order.
    """

    summary: str
    spec: str  # for --donate: "params,opt_state", or "none"
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    code: str | None = None  # jax.jit(fn, donate_argnums=(0, 1)); None when nothing is worth donating
    alternative_code: str | None = None  # the same donation in the other form, when expressible
    arguments: tuple[ArgumentAdvice, ...] = ()
    verified_by: Verification = "none"  # none: the verification failed
    compiles: int = 0
    tried: tuple[str, ...] = ()
    memory: MemoryFigures | None = None
    savings: dict[str, int | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # the backend it was computed for, as --backend names it ("cpu", "tpu:v5e"); None: not known (older reports)
    backend: str | None = None
    # every donation measured on the way, the plain compile and the suggestion among them: across several
    # backends, the donation best on all of them is read from these (fieldmem.gate.compare)
    measured: tuple[MeasuredDonation, ...] = ()
    # every donation of the arguments that could lend a buffer was measured: the suggestion is the best there is
    searched: bool = False


@dataclass(frozen=True)
class MadeStatic:
    """An argument, or a leaf of one, the analysed program holds static where ``jax.jit`` would trace it.

    ``code``: ``concrete`` (a Python scalar that tracing needs concrete, a
    shape, a loop bound, a Python ``if``: ``reason`` is jax's error when it is
    traced) or ``not-traceable`` (a pytree leaf that is no JAX type, a function
    or a string: held static as ``equinox.filter_jit`` holds it).
    """

    argument: str  # the argument's name, or the leaf's path (``config['n']``, ``model.activation``)
    code: StaticCode
    reason: str


@dataclass(frozen=True)
class Transfer:
    """One argument leaf jax copies onto the devices before every call, because the call gives it elsewhere than
    the program takes it.

    ``kind``: ``host-to-device`` (a NumPy array, a Python number the program takes as an array),
    ``across-devices`` (a jax array on another device or sharding: an uncommitted one, which jax moves) or
    ``memory-kind`` (the same devices, another memory). ``donated``: jax donates the copy it made, so the
    given buffer stays alive (on a device, the donation is lost: a ``resharded-donation`` finding).
    """

    input: str
    input_index: int
    kind: TransferKind
    given: str  # where the call gives it, in words ("cpu:0 (uncommitted)", "a NumPy array on the host")
    wanted: str | None  # where the program takes it (its sharding, in words)
    bytes: int  # what jax writes onto the devices per call, every shard counted
    device_bytes: int  # the most of it on one device: the copy that device holds beside the rest
    devices: int = 1  # the devices it is written to
    donated: bool = False
    fix: str = ""
    held_bytes: int = 0  # the given array's own buffer on one device: what a donation lost to the move leaves alive


@dataclass(frozen=True)
class TransferRun:
    """The copies jax's transfer guard logged during the donated run (``--run``) against the plan's.

    ``bytes``: what it logged copying the arguments onto the devices (None: not measured, ``unavailable``
    says why); ``agrees``: every leaf moved as many bytes as planned, and nothing else was logged.
    """

    planned: int
    bytes: int | None
    agrees: bool
    detail: str
    unavailable: str | None = None


@dataclass(frozen=True)
class Transfers:
    """What jax copies onto the devices before every call of the program, the arguments given as the check
    gives them, and which leaves the program holds in host memory (``pinned_host``: offloaded).

    ``bytes_per_call``: every :class:`Transfer`'s ``bytes``; ``summary``: the section in words, with the fix.
    ``offloaded_*``: the leaves the program takes or returns in a host memory kind, and their bytes per device
    (fieldmem's from the leaves, beside XLA's ``host_*`` figures).
    """

    leaves: tuple[Transfer, ...] = ()
    bytes_per_call: int = 0
    summary: str = ""
    offloaded_inputs: tuple[str, ...] = ()
    offloaded_outputs: tuple[str, ...] = ()
    offloaded_argument_bytes: int = 0
    offloaded_output_bytes: int = 0
    run: TransferRun | None = None  # only with --run


@dataclass(frozen=True)
class TargetResult:
    """Everything fieldmem found for one target, or why it could not look."""

    target: str
    name: str
    status: TargetStatus
    definition: str | None = None
    error: ErrorInfo | None = None
    donate: str | None = None
    expect: Expectation | None = None
    inputs: tuple[InputInfo, ...] = ()
    outputs: tuple[OutputInfo, ...] = ()
    variants: dict[str, Variant] = field(default_factory=dict)
    verdict: Verdict | None = None
    savings: dict[str, int | None] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    suggestion: Suggestion | None = None  # only with --suggest
    devices: tuple[int, ...] = ()  # ids of the devices the program runs on (one program per device)
    probes: tuple[InPlaceProbe, ...] = ()  # only with --probe
    made_static: tuple[MadeStatic, ...] = ()  # held static where jax.jit would trace (or refuse) them
    # what jax copies onto the devices before each call, and what the program holds in host memory (None: nothing)
    transfers: Transfers | None = None
    # file.py:LINE where the target's own jax.jit sets its donation (its donate_argnums): where a donation is
    # changed, and where an annotation of a missing or lost donation goes; None for a plain function
    jit_definition: str | None = None

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)


@dataclass(frozen=True)
class HandOff:
    """A leaf whose dtype, shape, sharding or layout changes on its way through a chain.

    ``code``: ``dtype-change``, ``shape-change``, ``sharding-change`` or
    ``layout-change`` (step ``step`` returns the leaf changed), or
    ``reshard`` / ``relayout`` (step ``step`` expects its input otherwise
    than step ``step - 1`` returns it, so jax moves it between the calls).
    ``breaks``: the change stops the leaf's buffer from being reused.
    """

    step: int  # 0-based
    code: HandOffCode
    leaf: str  # the step's input leaf
    output: str | None  # the step's output leaf, for changes within a step
    before: str
    after: str
    message: str
    breaks: bool = True
    source: str | None = None


@dataclass(frozen=True)
class ChainStep:
    """One step of a chain, checked like a target (its result is in ``Report.results``).

    ``status``: ``in-place`` (donated, every output reuses an input or is
    small), ``grows`` (the only new buffers are what the state grows by),
    ``breaks`` (an output that could reuse an input does not), ``error``
    (it could not be checked) or ``not-checked`` (an earlier step failed, so
    its arguments are unknown).
    """

    index: int  # 0-based
    function: str
    result: str  # the name of its TargetResult
    status: ChainStepStatus
    summary: str
    definition: str | None = None
    argument_bytes: int | None = None  # per device, what the step is given
    output_bytes: int | None = None  # per device, what it returns
    footprint: dict[str, int | None] = field(default_factory=dict)  # plain, donated
    live_peak: dict[str, int | None] = field(default_factory=dict)  # plain, donated
    kept_alive: tuple[str, ...] = ()  # input leaves still held after the donated step
    handoffs: tuple[HandOff, ...] = ()
    grows_by: int | None = None  # donated footprint minus the previous step's (None for the first)
    extras: tuple[str, ...] = ()  # the arguments it takes besides the state (step_args): not state
    transfer_bytes: int | None = None  # what jax copies onto the devices before each call of it (None: not known)


@dataclass(frozen=True)
class ChainBreak:
    """The first step at which the chain stops being in place, and why."""

    step: int
    function: str
    reason: str
    leaf: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class ChainCost:
    """What the chain needs at once, run one way: ``steps`` (each step its own jit, the
    worst step counts) or ``fused`` (one jit of the whole chain)."""

    layout: CostLayout
    plain_footprint: int | None = None
    donated_footprint: int | None = None
    plain_live_peak: int | None = None
    donated_live_peak: int | None = None
    worst_step: int | None = None  # steps: the step with the largest donated footprint


@dataclass(frozen=True)
class Chain:
    """An update chain: each step's outputs are the next step's arguments (``pkg.mod:a,b,c``)."""

    target: str
    name: str
    in_place: bool
    summary: str
    steps: tuple[ChainStep, ...] = ()
    fused: str | None = None  # the name of the fused chain's TargetResult
    first_break: ChainBreak | None = None
    costs: tuple[ChainCost, ...] = ()
    cost_summary: str | None = None  # separate steps against the fused chain, in words
    expect: Expectation = "any"
    checks: tuple[Check, ...] = ()
    # what jax copies onto the devices for one pass through the steps, each its own jit (None: a step not known)
    transfer_bytes: int | None = None

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)


@dataclass(frozen=True)
class DeviceInfo:
    id: int
    platform: str
    kind: str | None = None


@dataclass(frozen=True)
class Deviceless:
    """What a report compiled for without the device (``--backend tpu:v5e:2x2``, ``gpu:h100``).

    ``note`` says what compiling without the device changes (GPU: XLA's
    autotuning did not run, so gemm and convolution choices and their
    workspace may differ from a compile on the GPU).
    """

    backend: str  # the --backend name: "tpu:v5e:2x2"
    platform: str  # "tpu", "gpu"
    kind: str  # "v5e", "h100"
    device_kind: str | None = None  # jax's device_kind: "TPU v5 lite", "NVIDIA H100 80GB HBM3"
    topology: str | None = None  # "2x2", "8"; None: one chip
    chips: int = 1
    compiled_without_device: bool = True
    note: str = ""
    # the memory a program has on one chip (GPU: its target config's device_memory_size; TPU: what libtpu
    # leaves a program of the chip's HBM); None in reports written before it was recorded
    device_memory_bytes: int | None = None


@dataclass(frozen=True)
class ModuleSettings:
    """What a target's module set for jax when it was imported, in force while its targets were checked:
    the ``XLA_*`` and ``JAX_*`` variables it changed from fieldmem's environment (None: removed) and the
    ``jax.config.update`` calls it made (name to the value as Python writes it). ``note``: what fieldmem did
    not take of it, in one line (``--devices 8 wins over its own count of 4 CPU devices``). ``replaced``:
    what it replaced in jax's public modules (``jax.jit`` to what holds it now, ``patch.my_jit``), in force
    for its own targets only (empty in reports written before issue 49)."""

    target: str  # the spec as typed
    environment: dict[str, str | None] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    replaced: dict[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True)
class Report:
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    devices: tuple[DeviceInfo, ...]
    results: tuple[TargetResult, ...]
    min_bytes: int = 0
    created: str | None = None
    baseline: BaselineComparison | None = None
    chains: tuple[Chain, ...] = ()
    schema: str = SCHEMA
    deviceless: Deviceless | None = None  # compiled for a device kind this machine does not have
    # what the targets' modules set for jax at import (XLA_FLAGS, JAX_*, jax.config.update); () where none did
    module_settings: tuple[ModuleSettings, ...] = ()
    # the compiler plugins of the backend the report was made with, by distribution: libtpu for a TPU, the
    # CUDA plugin, its PJRT and nvcc for a GPU (empty: the CPU, or none installed)
    plugin_versions: dict[str, str] = field(default_factory=dict)
    # the releases of the libraries built on jax (flax, optax…) that the worker imported for these targets, by
    # distribution: under --jax or --python that environment's, which can differ from yours (empty: none)
    library_versions: dict[str, str] = field(default_factory=dict)
    # the backends the run judges, as named (--backend, or [tool.fieldmem] backends: where the user's code is
    # deployed), and who named them ("--backend", "[tool.fieldmem] backends"); () and None: jax's default
    judged_backends: tuple[str, ...] = ()
    judged_by: str | None = None

    @property
    def exit_code(self) -> int:
        """2 when a target could not be checked, else 1 when a check failed that the
        baseline does not accept or a baseline regressed, else 0."""
        if any(r.status == "error" for r in self.results):
            return 2
        if any(self.unaccepted_failures(r) for r in self.results) or any(c.failed_checks for c in self.chains):
            return 1
        if self.baseline is not None and self.baseline.regressions:
            return 1
        return 0

    def accepted_failures(self, result: TargetResult) -> tuple[Check, ...]:
        """``result``'s failed checks that the baseline accepts (recorded failing, failing the same way)."""
        baseline = self.baseline
        if baseline is None or not baseline.accepted:
            return ()
        return tuple(c for c in result.failed_checks if baseline.accepts(result.name, c.name))

    def unaccepted_failures(self, result: TargetResult) -> tuple[Check, ...]:
        """``result``'s failed checks that fail the run: all of them, but those the baseline accepts."""
        accepted = self.accepted_failures(result)
        return tuple(c for c in result.failed_checks if c not in accepted)

    def to_dict(self) -> dict[str, Any]:
        document = encode(replace(self, results=()))
        document["results"] = [encode(result) for result in self.results]  # in its place: keys keep their order
        return document

    @classmethod
    def from_dict(cls, data: dict[str, Any], unknown: list[str] | None = None) -> Report:
        """The report ``data`` holds; each word of an open set this fieldmem does not know (a newer
        fieldmem wrote it) reads as ``"unknown"``, and is said in ``unknown`` when a list is given.

        Raises:
            ReportError: not a report of a schema this fieldmem reads, or not matching it (a closed
                set's unknown word included).
        """
        if not isinstance(data, dict):
            raise ReportError("a fieldmem report is a JSON object")
        schema = data.get("schema")
        if schema not in SUPPORTED_SCHEMAS:
            raise ReportError(f"schema {schema!r} is not one this fieldmem reads ({', '.join(SUPPORTED_SCHEMAS)})")
        try:
            with unknown_values() as found:
                report = decode(cls, data)
        except (TypeError, ValueError, KeyError) as exc:
            raise ReportError(f"the report does not match {schema}: {exc}") from exc
        bad = _impossible_size(report, "")
        if bad is not None:
            raise ReportError(f"the report does not match {schema}: {bad} is not a byte count (0 to 2**63-1)")
        report = _moves_apart(report)
        if unknown is not None:
            writer = report.fieldmem_version
            unknown.extend(
                f"{where} is {quoted(word)}, which this fieldmem does not know (the report is from fieldmem "
                f"{quoted(writer)}): read as {stand_in!r}"
                for where, word, stand_in in found
            )
        return report


def _moves_apart(report: Report) -> Report:
    """``report`` with each variant's staging copies among its ``moves``: a report written before the two were
    apart lists them among its copies, where they would count as copies of state."""

    def apart(variant: Variant) -> Variant:
        staged = tuple(c for c in variant.copies if c.kind == "staging")
        if not staged:
            return variant
        copies = tuple(c for c in variant.copies if c.kind != "staging")
        return replace(variant, copies=copies, moves=variant.moves + staged)

    def result_apart(result: TargetResult) -> TargetResult:
        variants = {name: apart(v) for name, v in result.variants.items()}
        if all(variants[name] is v for name, v in result.variants.items()):
            return result
        return replace(result, variants=variants)

    results = tuple(result_apart(r) for r in report.results)
    if all(a is b for a, b in zip(results, report.results)):
        return report
    return replace(report, results=results)


REPORTS_SCHEMA = "fieldmem.reports/1"


@dataclass(frozen=True)
class Reports:
    """Several reports as one document: what ``fieldmem check --format json`` prints on stdout for several
    backends or jax releases (``-o FILE`` writes one file per report instead), so that one ``json.load``
    reads the whole run. Each report is a ``fieldmem.report/2`` document, in the order of the run."""

    reports: tuple[Report, ...]
    schema: str = REPORTS_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "reports": [report.to_dict() for report in self.reports]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], unknown: list[str] | None = None) -> Reports:
        """The reports ``data`` holds (see :meth:`Report.from_dict`).

        Raises:
            ReportError: not a ``fieldmem.reports/1`` document, or a report in it that is not one.
        """
        if not isinstance(data, dict) or data.get("schema") != REPORTS_SCHEMA:
            raise ReportError(f"a document of several reports has the schema {REPORTS_SCHEMA!r}")
        items = data.get("reports")
        if not isinstance(items, list):
            raise ReportError(f"{REPORTS_SCHEMA}: 'reports' is a list of reports")
        return cls(tuple(Report.from_dict(item, unknown) for item in items))


_DIFFERENCES = frozenset({"savings", "baseline", "changes"})  # fields of differences, which may be negative


def _is_size(name: str) -> bool:
    """A field that holds a size or a count of bytes (not a difference, which may be negative)."""
    return ("bytes" in name and not name.startswith(("saved", "marginal", "delta"))) or name == "trip_count"


def _impossible_size(value: Any, where: str) -> str | None:
    """The first byte count (a field named ``*bytes*``, a trip count) in ``value`` that no run could have
    measured, negative or 2**63 and more, named by its path; None: none."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            if item.name in _DIFFERENCES:
                continue
            inner = getattr(value, item.name)
            at = f"{where}.{item.name}" if where else item.name
            if isinstance(inner, int) and not isinstance(inner, bool):
                if _is_size(item.name) and not 0 <= inner < 2**63:
                    return (
                        f"{at} = {inner if abs(inner) < 10**30 else 'a ' + str(len(str(abs(inner)))) + '-digit number'}"
                    )
            elif inner is not None and not isinstance(inner, (str, float, bool)):
                found = _impossible_size(inner, at)
                if found is not None:
                    return found
    elif isinstance(value, (tuple, list)):
        for n, inner in enumerate(value):
            found = _impossible_size(inner, f"{where}[{n}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, inner in value.items():
            at = f"{where}.{key}"
            if isinstance(inner, int) and not isinstance(inner, bool):
                if _is_size(str(key)) and not 0 <= inner < 2**63:
                    return f"{at} = {inner}"
            elif inner is not None and not isinstance(inner, (str, float)):
                found = _impossible_size(inner, at)
                if found is not None:
                    return found
    return None
