"""XLA's buffer assignment -> live ranges, the memory curve, the live peak.

Inputs (all plain data; this module never imports jax):

- ``Compiled.memory_analysis().serialized_buffer_assignment_proto``: bytes of
  XLA's ``BufferAssignmentProto`` (logical buffers, allocations, aliases and,
  where a backend records them, heap-simulator traces);
- ``Compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()``:
  bytes of the ``HloModuleProto``. Recent XLA names a logical buffer's defining
  instruction only by its 64-bit unique id; the module proto is the only
  place that maps ids to names (the HLO text does not print ids). Older XLA
  also wrote the (deprecated) instruction name, which is used when present;
- ``Compiled.as_text()``: the optimized, scheduled HLO (read by
  :mod:`fieldmem.xla.hlo`) for instruction order, shapes and source lines.

The messages are decoded with the ``protobuf`` package from definitions in
:mod:`fieldmem.xla._proto`; unknown fields are skipped, absent ones read as 0.

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
``*-live-range.txt`` dump on the tested functions (the tests check it). Entry parameters are live for
the whole program, donated or not: the caller's buffer exists before the call
and, donated, becomes the output buffer, which is live to the end. Values the
entry returns are live to the end.

The live peak
-------------
At each point, the bytes live are the sum of the sizes of the **distinct
allocation slices** ``(allocation, offset, size)`` that hold a live value: two
values XLA placed in one slice (a copy and the in-place update written into
it; a loop's state and the loop parameter) count once. ``live_peak_bytes`` is
the maximum over points. Thread-local allocations (values inside fusions and
reducers: registers, not memory) and constant allocations (read-only data of
the executable, in no figure of ``memory_analysis()``) are left out, so
``live_peak_bytes <= argument + output + temp - alias`` (the footprint).

This is neither XLA's ``peak_memory_in_bytes`` (on CPU it was seen to leave
the temp block out) nor the "peak usage" of XLA's ``*-live-range.txt`` dump,
which adds up values (counting a shared slice twice) and includes constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from google.protobuf.message import DecodeError

from fieldmem.xla._proto import BufferAssignmentProto, HloModuleProto
from fieldmem.xla.hlo import (
    HloComputation,
    HloInstruction,
    HloModule,
    HloParseError,
    SourceLocation,
    reader_source,
    sub_shape,
    view_source,
)

__all__ = [
    "Allocation",
    "AssignedBuffer",
    "BufferAlias",
    "BufferAssignment",
    "BufferAssignmentError",
    "HeapEvent",
    "HeapTrace",
    "LiveAnalysis",
    "LiveRange",
    "LiveSlice",
    "LogicalBuffer",
    "Slice",
    "SchedulePoint",
    "ValueInfo",
    "analyze_liveness",
    "decode_buffer_assignment",
    "decode_instruction_ids",
    "live_analysis",
]


class BufferAssignmentError(ValueError):
    """The bytes are not a buffer assignment (or module) this module can read."""


# ----------------------------------------------------------------------------
# Decoded messages


@dataclass(frozen=True)
class LogicalBuffer:
    """One XLA logical buffer (an ``HloValue``): defined at an instruction and shape index."""

    id: int
    size: int
    instruction_id: int
    instruction: str | None  # None when no name could be found for instruction_id
    computation: str | None
    shape_index: tuple[int, ...]
    color: int = 0


@dataclass(frozen=True)
class AssignedBuffer:
    """A logical buffer placed at ``offset`` in an allocation."""

    logical_buffer_id: int
    offset: int
    size: int


@dataclass(frozen=True)
class Allocation:
    """One ``BufferAllocation``: a block of memory holding one or more logical buffers."""

    index: int
    size: int
    is_entry_computation_parameter: bool
    parameter_number: int | None
    parameter_shape_index: tuple[int, ...]
    maybe_live_out: bool
    is_tuple: bool
    is_constant: bool
    is_thread_local: bool
    color: int
    assigned: tuple[AssignedBuffer, ...]

    @property
    def kind(self) -> str:
        """``aliased`` (a parameter whose buffer is also an output: donated),
        ``parameter``, ``output``, ``constant``, ``thread_local`` or ``temporary``."""
        if self.is_entry_computation_parameter:
            return "aliased" if self.maybe_live_out else "parameter"
        if self.is_constant:
            return "constant"
        if self.is_thread_local:
            return "thread_local"
        if self.maybe_live_out:
            return "output"
        return "temporary"

    @property
    def counts_as_memory(self) -> bool:
        """False for thread-local (registers/stack of a fusion) and constant allocations."""
        return not (self.is_thread_local or self.is_constant)


@dataclass(frozen=True)
class BufferAlias:
    """XLA: logical buffer ``source_buffer_id`` shares its buffer with the value defined here."""

    source_buffer_id: int
    instruction_id: int
    instruction: str | None
    computation: str | None
    shape_index: tuple[int, ...]


@dataclass(frozen=True)
class HeapEvent:
    kind: str  # "ALLOC", "FREE", "SHARE_WITH" (or the number, if unknown)
    buffer_id: int
    computation: str
    instruction: str
    share_with_canonical_id: int


@dataclass(frozen=True)
class HeapTrace:
    events: tuple[HeapEvent, ...]
    whole_module_simulation: bool
    buffer_allocation_index: int


@dataclass(frozen=True)
class BufferAssignment:
    logical_buffers: tuple[LogicalBuffer, ...]
    allocations: tuple[Allocation, ...]
    aliases: tuple[BufferAlias, ...] = ()
    heap_traces: tuple[HeapTrace, ...] = ()

    def buffer(self, buffer_id: int) -> LogicalBuffer | None:
        for buffer in self.logical_buffers:
            if buffer.id == buffer_id:
                return buffer
        return None

    def placement(self) -> dict[int, tuple[Allocation, AssignedBuffer]]:
        """Logical buffer id -> (its allocation, where in it)."""
        result: dict[int, tuple[Allocation, AssignedBuffer]] = {}
        for allocation in self.allocations:
            for assigned in allocation.assigned:
                result[assigned.logical_buffer_id] = (allocation, assigned)
        return result


def decode_instruction_ids(hlo_module_proto: bytes) -> dict[int, tuple[str, str]]:
    """Instruction unique id -> (computation name, instruction name), from ``HloModuleProto`` bytes.

    Raises:
        BufferAssignmentError: the bytes are not a protobuf message.
    """
    module = HloModuleProto()
    try:
        module.ParseFromString(bytes(hlo_module_proto))
    except (DecodeError, TypeError) as error:
        raise BufferAssignmentError(f"cannot decode the HLO module proto: {error}") from None
    names: dict[int, tuple[str, str]] = {}
    for computation in module.computations:
        for instruction in computation.instructions:
            names[int(instruction.id)] = (computation.name, instruction.name)
    return names


def decode_buffer_assignment(
    data: bytes, hlo_module_proto: bytes | None = None
) -> BufferAssignment:
    """Decode ``serialized_buffer_assignment_proto`` bytes.

    Arguments:
        data: the bytes of XLA's ``BufferAssignmentProto``.
        hlo_module_proto: the bytes of the compiled ``HloModuleProto``, to name
            the instruction behind each instruction id. Without it only the
            (deprecated) names an older XLA wrote are known.

    Raises:
        BufferAssignmentError: the bytes are not a protobuf message.
    """
    if data is None:
        raise BufferAssignmentError("no buffer assignment was given (the backend gave none)")
    proto = BufferAssignmentProto()
    try:
        proto.ParseFromString(bytes(data))
    except (DecodeError, TypeError) as error:
        raise BufferAssignmentError(f"cannot decode the buffer assignment proto: {error}") from None
    names = decode_instruction_ids(hlo_module_proto) if hlo_module_proto else {}

    def where(location) -> tuple[int, str | None, str | None, tuple[int, ...]]:
        instruction_id = int(location.instruction_id)
        computation, name = names.get(instruction_id, (None, None))
        if name is None and location.instruction_name:
            name = location.instruction_name
        return instruction_id, name, computation, tuple(int(i) for i in location.shape_index)

    buffers = []
    for buffer in proto.logical_buffers:
        instruction_id, name, computation, index = where(buffer.defined_at)
        buffers.append(
            LogicalBuffer(
                id=int(buffer.id),
                size=int(buffer.size),
                instruction_id=instruction_id,
                instruction=name,
                computation=computation,
                shape_index=index,
                color=int(buffer.color),
            )
        )
    aliases = []
    for alias in proto.buffer_aliases:
        instruction_id, name, computation, index = where(alias.location)
        aliases.append(
            BufferAlias(int(alias.source_buffer_id), instruction_id, name, computation, index)
        )
    allocations = tuple(
        Allocation(
            index=int(a.index),
            size=int(a.size),
            is_entry_computation_parameter=bool(a.is_entry_computation_parameter),
            parameter_number=int(a.parameter_number) if a.is_entry_computation_parameter else None,
            parameter_shape_index=tuple(int(i) for i in a.parameter_shape_index),
            maybe_live_out=bool(a.maybe_live_out),
            is_tuple=bool(a.is_tuple),
            is_constant=bool(a.is_constant),
            is_thread_local=bool(a.is_thread_local),
            color=int(a.color),
            assigned=tuple(
                AssignedBuffer(int(x.logical_buffer_id), int(x.offset), int(x.size))
                for x in a.assigned
            ),
        )
        for a in proto.buffer_allocations
    )
    kinds = {0: "ALLOC", 1: "FREE", 2: "SHARE_WITH"}
    traces = tuple(
        HeapTrace(
            events=tuple(
                HeapEvent(
                    kind=kinds.get(int(e.kind), str(int(e.kind))),
                    buffer_id=int(e.buffer_id),
                    computation=e.computation_name,
                    instruction=e.instruction_name,
                    share_with_canonical_id=int(e.share_with_canonical_id),
                )
                for e in t.events
            ),
            whole_module_simulation=bool(t.whole_module_simulation),
            buffer_allocation_index=int(t.buffer_allocation_index),
        )
        for t in proto.heap_simulator_traces
    )
    return BufferAssignment(tuple(buffers), allocations, tuple(aliases), traces)


# ----------------------------------------------------------------------------
# Live ranges


@dataclass(frozen=True, order=True)
class Slice:
    """A piece of an allocation: ``size`` bytes at ``offset`` of allocation ``allocation``."""

    allocation: int
    offset: int
    size: int


@dataclass(frozen=True)
class ValueInfo:
    """A logical buffer mapped onto the HLO: what it is, where it lives, where it came from."""

    id: int
    instruction: str | None
    computation: str | None
    opcode: str | None
    shape_index: tuple[int, ...]
    shape: str | None
    bytes: int  # the size XLA assigned
    slice: Slice | None
    kind: str  # parameter / aliased / output / temporary / constant / thread_local / unassigned
    source: SourceLocation | None
    # "own": the instruction's (or what it views'); "user": XLA wrote none (an inserted
    # copy), so the first instruction reading the value, as fieldmem.xla.hlo does for copies
    source_role: str | None = None


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

    @property
    def bytes(self) -> int:
        return self.slice.size

    @property
    def value(self) -> ValueInfo:
        """The value that first took the slice (a copy, rather than the update written into it)."""
        return self.values[0]


@dataclass(frozen=True)
class LiveAnalysis:
    schedule: tuple[SchedulePoint, ...]
    values: tuple[ValueInfo, ...]
    ranges: tuple[LiveRange, ...]  # values that count as memory and run in the schedule
    curve: tuple[int, ...]  # bytes of distinct live slices at each schedule point
    live_peak_bytes: int
    peak_index: int | None  # the first point where the peak is reached
    live_at_peak: tuple[LiveSlice, ...]  # largest first
    constant_bytes: int  # constant allocations, not counted in the curve
    unscheduled: tuple[int, ...] = field(default_factory=tuple)  # value ids no point touches

    @property
    def peak_point(self) -> SchedulePoint | None:
        return self.schedule[self.peak_index] if self.peak_index is not None else None

    def live_slices_at(self, index: int) -> tuple[LiveSlice, ...]:
        return _live_slices(self.ranges, index)

    def entry_curve(self) -> list[tuple[str, int]]:
        """The curve folded onto entry instructions: a loop's body counts at its ``while``."""
        folded: list[tuple[str, int]] = []
        for point, value in zip(self.schedule, self.curve):
            if folded and folded[-1][0] == point.entry_instruction:
                folded[-1] = (point.entry_instruction, max(folded[-1][1], value))
            else:
                folded.append((point.entry_instruction, value))
        return folded


_SEQUENTIAL = ("while", "conditional", "call", "async-start")


def _flatten(module: HloModule) -> list[tuple[HloComputation, HloInstruction, str]]:
    by_name = {c.name: c for c in module.computations}
    points: list[tuple[HloComputation, HloInstruction, str]] = []

    def visit(computation: HloComputation, entry_instruction: str | None, depth: int) -> None:
        if depth > 64:
            raise BufferAssignmentError("computations nest too deeply")
        for instruction in computation.instructions:
            outer = entry_instruction or instruction.name
            if instruction.opcode in _SEQUENTIAL:
                for callee in instruction.called:  # hlo.py lists a while's condition before its body
                    if callee in by_name:
                        visit(by_name[callee], outer, depth + 1)
            points.append((computation, instruction, outer))

    visit(module.entry, None, 0)
    return points


_VIEWS = ("bitcast", "get-tuple-element", "copy", "copy-start", "copy-done", "tuple")


def _source(instruction: HloInstruction, by_name: dict[str, HloInstruction]) -> SourceLocation | None:
    return view_source(instruction, by_name, _VIEWS)


class _Holdings:
    """Which values each instruction's output holds, index by index (XLA dataflow, coarsely)."""

    def __init__(self, module: HloModule, defs: dict[tuple[str, str], dict[tuple[int, ...], set[int]]]):
        self.module = module
        self.defs = defs
        self.computations = {c.name: c for c in module.computations}
        self.by_name = {c.name: c.by_name() for c in module.computations}
        # callee -> [(caller computation, caller instruction)]
        self.callers: dict[str, list[tuple[str, HloInstruction]]] = {}
        for computation in module.computations:
            for instruction in computation.instructions:
                if instruction.opcode in _SEQUENTIAL:
                    for callee in instruction.called:
                        self.callers.setdefault(callee, []).append((computation.name, instruction))
        self.memo: dict[tuple[str, str], dict[tuple[int, ...], set[int]]] = {}

    def held(self, computation: str, name: str) -> dict[tuple[int, ...], set[int]]:
        key = (computation, name)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = {}  # cut cycles (loop state refers to itself)
        result = {index: set(ids) for index, ids in self.defs.get(key, {}).items()}
        instruction = self.by_name.get(computation, {}).get(name)
        if instruction is not None:
            for index, ids in self._forwarded(computation, instruction).items():
                if index not in result:
                    result[index] = set(ids)
        self.memo[key] = result
        return result

    def _forwarded(self, computation: str, instruction: HloInstruction) -> dict[tuple[int, ...], set[int]]:
        op = instruction.opcode
        operands = instruction.operands
        out: dict[tuple[int, ...], set[int]] = {}

        def merge(source: dict[tuple[int, ...], set[int]], prefix: tuple[int, ...] = ()) -> None:
            for index, ids in source.items():
                out.setdefault(prefix + index, set()).update(ids)

        if op in ("bitcast", "optimization-barrier") and operands:
            merge(self.held(computation, operands[0]))
        elif op == "get-tuple-element" and operands and instruction.tuple_index is not None:
            k = instruction.tuple_index
            for index, ids in self.held(computation, operands[0]).items():
                if index[:1] == (k,):
                    out.setdefault(index[1:], set()).update(ids)
        elif op == "tuple":
            for i, operand in enumerate(operands):
                merge(self.held(computation, operand), (i,))
        elif op == "while" and operands:
            merge(self.held(computation, operands[0]))
        elif op == "call" and instruction.called:
            callee = self.computations.get(instruction.called[0])
            if callee is not None and callee.root is not None:
                merge(self.held(callee.name, callee.root.name))
        elif op == "conditional":
            for callee_name in instruction.called:
                callee = self.computations.get(callee_name)
                if callee is not None and callee.root is not None:
                    merge(self.held(callee.name, callee.root.name))
        elif op == "parameter" and computation != self.module.entry.name:
            number = instruction.parameter_number or 0
            for caller_computation, caller in self.callers.get(computation, []):
                if caller.opcode == "while" and caller.operands:
                    merge(self.held(caller_computation, caller.operands[0]))
                elif caller.opcode == "conditional":
                    branch = list(caller.called).index(computation) if computation in caller.called else 0
                    if branch + 1 < len(caller.operands):
                        merge(self.held(caller_computation, caller.operands[branch + 1]))
                elif number < len(caller.operands):
                    merge(self.held(caller_computation, caller.operands[number]))
        return out

    def all_held(self, computation: str, name: str) -> set[int]:
        ids: set[int] = set()
        for values in self.held(computation, name).values():
            ids.update(values)
        return ids


def _value_infos(
    assignment: BufferAssignment, module: HloModule
) -> tuple[list[ValueInfo], dict[tuple[str, str], dict[tuple[int, ...], set[int]]]]:
    placement = assignment.placement()
    by_name = {c.name: c.by_name() for c in module.computations}
    users = {c.name: c.users() for c in module.computations}
    # instruction name -> computation (names are unique in a module)
    home = {i.name: c.name for c in module.computations for i in c.instructions}
    infos: list[ValueInfo] = []
    defs: dict[tuple[str, str], dict[tuple[int, ...], set[int]]] = {}
    for buffer in assignment.logical_buffers:
        computation = buffer.computation or (home.get(buffer.instruction) if buffer.instruction else None)
        instruction = (
            by_name.get(computation, {}).get(buffer.instruction)
            if computation and buffer.instruction
            else None
        )
        shape = sub_shape(instruction.shape, buffer.shape_index) if instruction else None
        source, role = None, None
        if instruction is not None and computation:
            source = _source(instruction, by_name[computation])
            role = "own" if source is not None else None
            if source is None and instruction.opcode != "parameter":
                source = reader_source(instruction.name, users[computation])
                role = "user" if source is not None else None
        placed = placement.get(buffer.id)
        if placed is None:
            slice_, kind = None, "unassigned"
        else:
            allocation, assigned = placed
            slice_, kind = Slice(allocation.index, assigned.offset, assigned.size), allocation.kind
        infos.append(
            ValueInfo(
                id=buffer.id,
                instruction=buffer.instruction,
                computation=computation,
                opcode=instruction.opcode if instruction else None,
                shape_index=buffer.shape_index,
                shape=shape,
                bytes=placed[1].size if placed else buffer.size,
                slice=slice_,
                kind=kind,
                source=source,
                source_role=role,
            )
        )
        if computation and buffer.instruction:
            defs.setdefault((computation, buffer.instruction), {}).setdefault(
                buffer.shape_index, set()
            ).add(buffer.id)
    return infos, defs


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
    return tuple(slices)


def analyze_liveness(assignment: BufferAssignment, module: HloModule) -> LiveAnalysis:
    """Live ranges, the memory curve and the live peak of a compiled module.

    Arguments:
        assignment: the decoded buffer assignment (with instruction names).
        module: the parsed optimized HLO (``fieldmem.xla.hlo.parse_hlo_module``) of
            the same executable.

    Raises:
        BufferAssignmentError: the module is not scheduled, or the logical
            buffers cannot be matched to its instructions.
    """
    if not module.is_scheduled:
        raise BufferAssignmentError("the HLO module is not scheduled: no instruction order to follow")
    if assignment.logical_buffers and all(b.instruction is None for b in assignment.logical_buffers):
        raise BufferAssignmentError(
            "the buffer assignment names no instructions: pass the HLO module proto "
            "(runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto())"
        )
    allocations = {a.index: a for a in assignment.allocations}
    infos, defs = _value_infos(assignment, module)
    info_by_id = {v.id: v for v in infos}
    holdings = _Holdings(module, defs)
    flat = _flatten(module)
    schedule = tuple(
        SchedulePoint(i, c.name, ins.name, outer) for i, (c, ins, outer) in enumerate(flat)
    )
    last = len(flat) - 1
    # the first point of each loop (its condition's first instruction)
    loop_start: dict[tuple[str, str], int] = {}
    first_point: dict[str, int] = {}
    point_of = {(c.name, ins.name): t for t, (c, ins, _o) in enumerate(flat)}
    for t, (computation, instruction, _outer) in enumerate(flat):
        first_point.setdefault(computation.name, t)
        callers = holdings.callers.get(computation.name, [])
        for caller_computation, caller in callers:
            if caller.opcode == "while":
                loop_start.setdefault((caller_computation, caller.name), t)
    touches: dict[int, list[int]] = {}
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

    # as XLA's HloLiveRange: the state a loop's condition reads, and the predicate
    # it computes, stay live until the body takes over (the body's first point)
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
                # and what the body returns is live until the loop takes it back
                for value_id in holdings.all_held(body, body_root.name):
                    touches.setdefault(value_id, []).append(at_while)
            for read in holdings.computations[condition].instructions:
                # the state it was given and the predicate it computed
                if read.opcode == "parameter" or read.is_root:
                    for value_id in holdings.all_held(condition, read.name):
                        touches.setdefault(value_id, []).append(first_point[body])

    entry = module.entry
    live_out = holdings.all_held(entry.name, entry.root.name) if entry.root else set()
    ranges: list[LiveRange] = []
    unscheduled: list[int] = []
    for value in infos:
        if value.slice is None:
            continue
        allocation = allocations[value.slice.allocation]
        if not allocation.counts_as_memory:
            continue
        times = touches.get(value.id)
        if not times:
            unscheduled.append(value.id)
            continue
        start, end = min(times), max(times)
        if value.computation == entry.name and value.opcode == "parameter":
            start, end = 0, last
        if value.id in live_out:
            end = last
        ranges.append(LiveRange(value, start, end))
    ranges.sort(key=lambda r: (r.start, r.value.id))

    # curve: distinct slices live at each point (events swept in order)
    curve: list[int] = []
    starts: dict[int, list[LiveRange]] = {}
    ends: dict[int, list[LiveRange]] = {}
    for live in ranges:
        starts.setdefault(live.start, []).append(live)
        ends.setdefault(live.end, []).append(live)
    counts: dict[Slice, int] = {}
    total = 0
    for t in range(len(flat)):
        for live in starts.get(t, []):
            s = live.value.slice
            assert s is not None
            counts[s] = counts.get(s, 0) + 1
            if counts[s] == 1:
                total += s.size
        curve.append(total)
        for live in ends.get(t, []):
            s = live.value.slice
            assert s is not None
            counts[s] -= 1
            if counts[s] == 0:
                total -= s.size
    peak = max(curve) if curve else 0
    peak_index = curve.index(peak) if curve else None
    constant_bytes = sum(a.size for a in assignment.allocations if a.is_constant)
    return LiveAnalysis(
        schedule=schedule,
        values=tuple(infos),
        ranges=tuple(ranges),
        curve=tuple(curve),
        live_peak_bytes=peak,
        peak_index=peak_index,
        live_at_peak=_live_slices(ranges, peak_index) if peak_index is not None else (),
        constant_bytes=constant_bytes,
        unscheduled=tuple(unscheduled),
    )


def live_analysis(
    serialized_buffer_assignment: bytes, hlo_module_proto: bytes | None, hlo_text: str
) -> LiveAnalysis:
    """Decode, parse and analyse in one call (what ``compile.py`` hands over)."""
    from fieldmem.xla.hlo import parse_hlo_module

    assignment = decode_buffer_assignment(serialized_buffer_assignment, hlo_module_proto)
    try:
        module = parse_hlo_module(hlo_text)
    except HloParseError as error:
        raise BufferAssignmentError(f"cannot read the HLO text: {error}") from None
    return analyze_liveness(assignment, module)
