"""A decoded buffer assignment over the scheduled HLO -> live ranges, the memory curve, the live peak.

Inputs are the records of :mod:`.decode` (each value read in :mod:`.values`) and a module parsed by
:mod:`fieldmem.xla.hlo` (``Compiled.as_text()``: instruction order, shapes and
source lines). Pure records -> records, no jax.

Live ranges
-----------
The schedule is XLA's flattened order, as ``HloLiveRange`` builds it: the entry
computation's instructions in order, where a ``while`` is preceded by its
condition's and then its body's instructions, a ``conditional`` by each
branch, and a ``call`` by its callee (fusion bodies are not expanded: their
insides are registers, or thread-local allocations that are no real memory).
Each :class:`SchedulePoint` also names the entry instruction it runs within, so
a caller can fold a loop's body into the one ``while`` step.

A logical buffer (an XLA ``HloValue``) is live from the point that defines it
to the last point that reads it, where an instruction's operands count as live
*at* that instruction; a value that a view (``bitcast``, ``tuple``,
``get-tuple-element``, a loop parameter, a ``while`` that passes it through)
exposes is live wherever the view is read. A ``get-tuple-element`` reads only
the tuple's index table, not the other elements. Loops follow XLA's
``HloLiveRange``: a ``while`` reads its initial state where its condition
starts; the state the condition reads and the predicate it computes stay live
until the body's first point; what the body returns stays live until the
``while`` itself. With these rules every value's range equals the one in XLA's
``*-live-range.txt`` dump on the tested functions (the tests check it). Entry
parameters are live from the start: the caller's buffer exists before the call.
One not donated stays live to the end (it is the caller's); a donated one holds
the argument until its last read, as in XLA's ``HloLiveRange``: after it XLA may
place other values in that buffer (an optimizer step's temporaries), and the
output written into it is live from where it is defined. Values the entry
returns are live to the end.

The live peak
-------------
At each point, the bytes live are the bytes covered by the allocation slices
``(allocation, offset, size)`` that hold a live value: per allocation, the
size of the **union of their byte ranges**. Two values XLA placed in one slice
(a copy and the in-place update written into it; a loop's state and the loop
parameter) count once, and so do slices that overlap (a donated parameter at
offset 0 of its allocation and a smaller value XLA placed at offset 0 of the
same allocation). ``live_peak_bytes`` is the maximum over points;
``live_at_peak`` lists the distinct slices, each with the bytes it shares with
a slice listed before it, so that their ``counted_bytes`` add up to the peak. Thread-local allocations (values inside fusions and
reducers: registers, not memory) are left out. Constant allocations (read-only
data of the executable, in none of ``memory_analysis()``'s argument, output and
temp figures, but in its peak) are live at every point: the executable holds
them before, during and after the call. So ``live_peak_bytes <= argument +
output + temp - alias + constants`` (the footprint) on XLA:CPU and GPU; a TPU's
asynchronous copies have tuple index tables that XLA's temp figure leaves out.

Memory spaces
-------------
Each allocation has a color, its memory space (0 the device's default memory;
on a TPU 1 is VMEM, ``S(1)`` in a layout). The curve, ``live_peak_bytes`` and
``live_at_peak`` are memory space 0's, as XLA's argument, output and temp
figures are; ``memory_spaces`` has every space's allocated bytes and live peak.

Asynchronous ops pass values on as XLA's dataflow does: a ``copy-start``'s
element 1 is its operand and its ``copy-done`` the destination (element 0);
any other ``X-start`` holds its result in element 1, which ``X-done`` returns.
The text prints an op run asynchronously in a computation of its own
(``slice-start``) without that computation; its result, defined at the
computation's root in the buffer assignment, is placed at element 1 of the start.

This is neither XLA's ``peak_memory_in_bytes`` (on CPU it was seen to leave
the temp block out; on a TPU it adds VMEM) nor the "peak usage" of XLA's ``*-live-range.txt`` dump,
which adds up values (counting a shared slice twice) and includes constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from fieldmem.xla.hlo import HloComputation, HloInstruction, HloModule

from .decode import Allocation, BufferAssignment, BufferAssignmentError
from .values import _SEQUENTIAL, Slice, ValueInfo, _Holdings, _value_infos

__all__ = [
    "LiveAnalysis",
    "LiveRange",
    "LiveSlice",
    "MemorySpacePeak",
    "SchedulePoint",
    "analyze_liveness",
]


@dataclass(frozen=True)
class SchedulePoint:
    """One step of the flattened schedule."""

    index: int
    computation: str
    instruction: str
    entry_instruction: str  # the entry instruction this step runs within (itself, or a while/call/...)


@dataclass(frozen=True)
class LiveRange:
    """A value live from schedule point ``start`` to ``end``, both included."""

    value: ValueInfo
    start: int
    end: int


@dataclass(frozen=True)
class LiveSlice:
    """A distinct allocation slice live at a point, with the values in it that are live there."""

    slice: Slice
    kind: str
    values: tuple[ValueInfo, ...]  # earliest-defined first
    # bytes of this slice that a slice listed before it at the same point also holds
    # (slices of one allocation that overlap): counted once, with the earlier slice
    shared_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.slice.size

    @property
    def counted_bytes(self) -> int:
        """The bytes this slice adds to the curve, beyond those listed before it."""
        return self.slice.size - self.shared_bytes

    @property
    def value(self) -> ValueInfo:
        """The value that first took the slice (a copy, rather than the update written into it)."""
        return self.values[0]


@dataclass(frozen=True)
class MemorySpacePeak:
    """The allocations of one memory space (an allocation's color: 0 the device's default
    memory, on a TPU 1 its VMEM): their bytes, and the peak of the bytes live in them."""

    memory_space: int
    allocated_bytes: int  # the space's allocations, constants included, thread-local ones not
    live_peak_bytes: int
    peak_index: int | None
    live_at_peak: tuple[LiveSlice, ...] = ()  # the space's slices live at its own peak, largest first


@dataclass(frozen=True)
class LiveAnalysis:
    """What :func:`analyze_liveness` finds: the schedule, each value's range, the curve and its peak."""

    schedule: tuple[SchedulePoint, ...]
    values: tuple[ValueInfo, ...]
    ranges: tuple[LiveRange, ...]  # values that count as memory and run in the schedule
    curve: tuple[int, ...]  # bytes the live slices cover at each schedule point
    live_peak_bytes: int
    peak_index: int | None  # the first point where the peak is reached
    live_at_peak: tuple[LiveSlice, ...]  # largest first
    constant_bytes: int  # constant allocations (live over the whole schedule)
    unscheduled: tuple[int, ...] = field(default_factory=tuple)  # value ids no point touches
    # every memory space's figures, ascending; the curve, peak and live_at_peak above are space 0's
    memory_spaces: tuple[MemorySpacePeak, ...] = ()
    # value id -> the index in the entry's result it is returned at (the first, when it is at several)
    output_index: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def peak_point(self) -> SchedulePoint | None:
        return self.schedule[self.peak_index] if self.peak_index is not None else None


# the flattened schedule: (computation, instruction, the entry instruction it runs within)
_Flat = list[tuple[HloComputation, HloInstruction, str]]


def _flatten(module: HloModule) -> _Flat:
    by_name = {c.name: c for c in module.computations}
    points: list[tuple[HloComputation, HloInstruction, str]] = []

    def visit(computation: HloComputation, entry_instruction: str | None, depth: int) -> None:
        if depth > 64:
            raise BufferAssignmentError("computations nest too deeply")
        for instruction in computation.instructions:
            outer = entry_instruction or instruction.name
            if instruction.opcode in _SEQUENTIAL:
                for callee in instruction.called:  # the parser lists a while's condition before its body
                    if callee in by_name:
                        visit(by_name[callee], outer, depth + 1)
            points.append((computation, instruction, outer))

    visit(module.entry, None, 0)
    return points


def _live_slices(ranges: Iterable[LiveRange], index: int) -> tuple[LiveSlice, ...]:
    grouped: dict[Slice, list[tuple[int, ValueInfo]]] = {}
    for live in ranges:
        if live.start <= index <= live.end and live.value.slice is not None:
            grouped.setdefault(live.value.slice, []).append((live.start, live.value))
    slices = [
        LiveSlice(
            slice=slice_,
            kind=members[0][1].kind,
            values=tuple(v for _, v in sorted(members, key=lambda m: (m[0], m[1].id))),
        )
        for slice_, members in grouped.items()
    ]
    slices.sort(key=lambda s: (-s.bytes, s.slice))
    # bytes of a slice that a slice listed before it holds too (they share or overlap
    # bytes of one allocation), so that the listing adds up to the covered bytes
    listed: dict[int, list[tuple[int, int]]] = {}
    result: list[LiveSlice] = []
    for live_slice in slices:
        s = live_slice.slice
        spans = listed.setdefault(s.allocation, [])
        shared = _overlap(spans, s.offset, s.offset + s.size)
        spans.append((s.offset, s.offset + s.size))
        result.append(replace(live_slice, shared_bytes=shared) if shared else live_slice)
    return tuple(result)


def _overlap(spans: list[tuple[int, int]], start: int, end: int) -> int:
    """The bytes of [start, end) that the union of ``spans`` covers."""
    covered, reach = 0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if a < b:
            covered += b - a
            reach = b
    return covered


def analyze_liveness(
    assignment: BufferAssignment, module: HloModule, device: frozenset[int] = frozenset({0})
) -> LiveAnalysis:
    """Live ranges, the memory curve and the live peak of a compiled module.

    Arguments:
        assignment: the decoded buffer assignment (with instruction names).
        module: the parsed optimized HLO (``fieldmem.xla.hlo.parse_hlo_module``) of
            the same executable.
        device: the memory spaces that are the device's own memory
            (:func:`fieldmem.xla.spaces.device_spaces`): the live peak is theirs together
            (0 alone, but on a GPU, whose collective memory 1 is device memory too).

    Raises:
        BufferAssignmentError: the module is not scheduled, or the logical
            buffers cannot be matched to its instructions.
    """
    _check_inputs(assignment, module)
    infos, defs = _value_infos(assignment, module)
    holdings = _Holdings(module, defs)
    flat = _flatten(module)
    schedule = tuple(SchedulePoint(i, c.name, ins.name, outer) for i, (c, ins, outer) in enumerate(flat))
    # the order matters: holdings are memoized as they are first asked for
    touches = _touches(flat, holdings)
    _extend_through_loops(module, flat, holdings, touches)
    entry = module.entry
    returned = holdings.held(entry.name, entry.root.name) if entry.root else {}
    live_out = {value for values in returned.values() for value in values}
    output_index: dict[int, tuple[int, ...]] = {}
    for index in sorted(returned):
        for value in returned[index]:
            output_index.setdefault(value, index)
    allocations = {a.index: a for a in assignment.allocations}
    ranges, unscheduled = _live_ranges(infos, allocations, touches, live_out, entry.name, len(flat) - 1)
    # one curve per memory space (the allocations' color); the headline figures are the device's memory
    # (0, as XLA's are, and a GPU's collective memory beside it); the others are listed beside them
    spaces: list[MemorySpacePeak] = []
    headline: tuple[list[int], int, int | None, tuple[LiveSlice, ...]] = ([0] * len(flat), 0, None, ())
    colors = assignment.memory_spaces() or (0,)
    if any(color in device for color in colors if color != 0):
        in_device = [
            r for r in ranges if r.value.slice is not None and allocations[r.value.slice.allocation].color in device
        ]
        curve = _curve(in_device, len(flat))
        peak = max(curve) if curve else 0
        peak_index = curve.index(peak) if curve else None
        headline = (curve, peak, peak_index, _live_slices(in_device, peak_index) if peak_index is not None else ())
    for color in colors:
        in_space = [
            r for r in ranges if r.value.slice is not None and allocations[r.value.slice.allocation].color == color
        ]
        curve = _curve(in_space, len(flat))
        peak = max(curve) if curve else 0
        peak_index = curve.index(peak) if curve else None
        live = _live_slices(in_space, peak_index) if peak_index is not None else ()
        spaces.append(
            MemorySpacePeak(
                memory_space=color,
                allocated_bytes=sum(a.size for a in assignment.allocations if a.color == color and a.counts_as_memory),
                live_peak_bytes=peak,
                peak_index=peak_index,
                live_at_peak=live,
            )
        )
        if color == 0 and not any(c in device for c in colors if c != 0):
            headline = (curve, peak, peak_index, live)
    curve, peak, peak_index, live_at_peak = headline
    return LiveAnalysis(
        schedule=schedule,
        values=tuple(infos),
        ranges=tuple(ranges),
        curve=tuple(curve),
        live_peak_bytes=peak,
        peak_index=peak_index,
        live_at_peak=live_at_peak,
        constant_bytes=sum(a.size for a in assignment.allocations if a.is_constant),
        unscheduled=tuple(unscheduled),
        memory_spaces=tuple(spaces),
        output_index=output_index,
    )


def _check_inputs(assignment: BufferAssignment, module: HloModule) -> None:
    if not module.is_scheduled:
        raise BufferAssignmentError("the HLO module is not scheduled: no instruction order to follow")
    if assignment.logical_buffers and all(b.instruction is None for b in assignment.logical_buffers):
        raise BufferAssignmentError(
            "the buffer assignment names no instructions: pass the HLO module proto "
            "(runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto())"
        )


_Touches = dict[int, list[int]]  # value id -> the schedule points that define or read it


def _loop_starts(flat: _Flat, holdings: _Holdings) -> dict[tuple[str, str], int]:
    """(computation, while) -> the loop's first point (its condition's first instruction)."""
    loop_start: dict[tuple[str, str], int] = {}
    for t, (computation, _instruction, _outer) in enumerate(flat):
        for caller_computation, caller in holdings.callers.get(computation.name, []):
            if caller.opcode == "while":
                loop_start.setdefault((caller_computation, caller.name), t)
    return loop_start


def _touches(flat: _Flat, holdings: _Holdings) -> _Touches:
    """Phase 1: the points at which each value is defined (a position of the
    instruction's output) or read (an operand)."""
    loop_start = _loop_starts(flat, holdings)
    touches: _Touches = {}
    for t, (computation, instruction, _outer) in enumerate(flat):
        seen = holdings.all_held(computation.name, instruction.name)  # positions
        if instruction.opcode == "get-tuple-element":
            # reads the tuple's index table only; the element is a position above
            if instruction.operands:
                seen |= holdings.held(computation.name, instruction.operands[0]).get((), set())
        elif instruction.opcode == "while" and (computation.name, instruction.name) in loop_start:
            # as XLA's HloLiveRange: a loop reads its initial state where its
            # condition starts (the state's phi takes over there), not at the end
            when = loop_start[(computation.name, instruction.name)]
            for operand in instruction.operands:
                for value_id in holdings.all_held(computation.name, operand):
                    touches.setdefault(value_id, []).append(when)
        elif instruction.opcode not in ("tuple", "bitcast"):
            for operand in instruction.operands:
                seen |= holdings.all_held(computation.name, operand)
        for value_id in seen:
            touches.setdefault(value_id, []).append(t)
    return touches


def _extend_through_loops(module: HloModule, flat: _Flat, holdings: _Holdings, touches: _Touches) -> None:
    """Phase 2, as XLA's HloLiveRange: the state a loop's condition reads, and the
    predicate it computes, stay live until the body takes over (the body's first
    point); what the body returns stays live until the ``while`` takes it back."""
    first_point: dict[str, int] = {}
    for t, (computation, _instruction, _outer) in enumerate(flat):
        first_point.setdefault(computation.name, t)
    point_of = {(c.name, ins.name): t for t, (c, ins, _o) in enumerate(flat)}
    for computation in module.computations:
        for instruction in computation.instructions:
            if instruction.opcode != "while" or len(instruction.called) < 2:
                continue
            condition, body = instruction.called[0], instruction.called[1]
            if body not in first_point or condition not in holdings.computations:
                continue
            body_root = holdings.computations[body].root if body in holdings.computations else None
            at_while = point_of.get((computation.name, instruction.name))
            if body_root is not None and at_while is not None:
                for value_id in holdings.all_held(body, body_root.name):
                    touches.setdefault(value_id, []).append(at_while)
            for read in holdings.computations[condition].instructions:
                # the state it was given and the predicate it computed
                if read.opcode == "parameter" or read.is_root:
                    for value_id in holdings.all_held(condition, read.name):
                        touches.setdefault(value_id, []).append(first_point[body])


def _live_ranges(
    infos: list[ValueInfo],
    allocations: dict[int, Allocation],
    touches: _Touches,
    live_out: set[int],
    entry: str,
    last: int,
) -> tuple[list[LiveRange], list[int]]:
    """Phase 3: each value that counts as memory is live from its first touch to
    its last; entry parameters for the whole program, outputs to the end. Also
    the ids of the values no point touches."""
    ranges: list[LiveRange] = []
    unscheduled: list[int] = []
    for value in infos:
        if value.slice is None:
            continue
        allocation = allocations[value.slice.allocation]
        if not allocation.counts_as_memory:
            continue
        if allocation.is_constant:
            # read-only data of the executable: there before the call and after it
            ranges.append(LiveRange(value, 0, last))
            continue
        times = touches.get(value.id)
        if not times:
            unscheduled.append(value.id)
            continue
        start, end = min(times), max(times)
        if value.computation == entry and value.opcode == "parameter":
            # the caller's buffer exists before the call; one not donated stays the
            # caller's to the end, a donated one (``aliased``) holds the argument only
            # until its last read, after which XLA may place other values in it
            start = 0
            end = end if value.kind == "aliased" else last
        if value.id in live_out:
            end = last
        ranges.append(LiveRange(value, start, end))
    ranges.sort(key=lambda r: (r.start, r.value.id))
    return ranges, unscheduled


class _Coverage:
    """The bytes covered by the live slices of one allocation, kept as slices come and go.

    The allocation's slice boundaries cut it into elementary pieces; each piece
    counts the live slices over it, and contributes its bytes while that count
    is above 0. Two slices that share or overlap bytes so count them once."""

    def __init__(self, slices: Iterable[Slice]):
        cuts = sorted({b for s in slices for b in (s.offset, s.offset + s.size)})
        self.cuts = cuts
        self.position = {b: i for i, b in enumerate(cuts)}
        self.count = [0] * max(len(cuts) - 1, 0)

    def add(self, s: Slice, step: int) -> int:
        """Add (``step`` 1) or remove (-1) a live slice; the change in covered bytes."""
        change = 0
        for i in range(self.position[s.offset], self.position[s.offset + s.size]):
            before = self.count[i]
            self.count[i] = before + step
            if (before == 0) != (self.count[i] == 0):
                change += step * (self.cuts[i + 1] - self.cuts[i])
        return change


def _curve(ranges: list[LiveRange], length: int) -> list[int]:
    """Phase 4: at each of ``length`` points, the bytes covered by the live slices
    (per allocation, the union of their byte ranges), swept once over the ranges'
    starts and ends."""
    curve: list[int] = []
    starts: dict[int, list[LiveRange]] = {}
    ends: dict[int, list[LiveRange]] = {}
    by_allocation: dict[int, set[Slice]] = {}
    for live in ranges:
        starts.setdefault(live.start, []).append(live)
        ends.setdefault(live.end, []).append(live)
        s = live.value.slice
        assert s is not None
        by_allocation.setdefault(s.allocation, set()).add(s)
    # an allocation of one distinct slice (most: a leaf's buffer) covers that slice's bytes while it is
    # live; only allocations shared by several slices count the pieces they cover
    coverage = {allocation: _Coverage(slices) for allocation, slices in by_allocation.items() if len(slices) > 1}
    counts: dict[Slice, int] = {}  # live values per distinct slice
    total = 0
    for t in range(length):
        for live in starts.get(t, []):
            s = live.value.slice
            assert s is not None
            n = counts[s] = counts.get(s, 0) + 1
            if n == 1:
                shared = coverage.get(s.allocation)
                total += shared.add(s, 1) if shared is not None else s.size
        curve.append(total)
        for live in ends.get(t, []):
            s = live.value.slice
            assert s is not None
            n = counts[s] = counts[s] - 1
            if n == 0:
                shared = coverage.get(s.allocation)
                total += shared.add(s, -1) if shared is not None else -s.size
    return curve
