"""XLA's serialized buffer assignment -> allocations, slices and logical buffers, as frozen records.

Inputs (plain bytes):

- ``Compiled.memory_analysis().serialized_buffer_assignment_proto``: bytes of
  XLA's ``BufferAssignmentProto`` (logical buffers, allocations, aliases and,
  where a backend records them, heap-simulator traces);
- ``Compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()``:
  bytes of the ``HloModuleProto``;
- for a deviceless compile, whose ``memory_analysis()`` has no assignment, the
  ``*after_optimizations.hlo.pb`` XLA dumps: an ``HloProto`` holding both
  (:func:`split_hlo_proto`).

Recent XLA names a logical buffer's defining instruction only by its 64-bit
unique id; the module proto is the only place that maps ids to names (the HLO
text does not print ids). Older XLA also wrote the (deprecated) instruction
name, which is used when present.

The messages are decoded with the ``protobuf`` package from definitions in
:mod:`fieldmem.xla._proto`; unknown fields are skipped, absent ones read as 0.
Pure bytes -> records, no jax; what the records mean over time is :mod:`.liveness`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from google.protobuf.message import DecodeError

from fieldmem.xla._proto import BufferAssignmentProto, HloModuleProto, HloProtoParts

__all__ = [
    "Allocation",
    "AssignedBuffer",
    "BufferAlias",
    "BufferAssignment",
    "BufferAssignmentError",
    "HeapEvent",
    "HeapTrace",
    "LogicalBuffer",
    "decode_async_wrappers",
    "decode_buffer_assignment",
    "decode_instruction_ids",
    "split_hlo_proto",
]


class BufferAssignmentError(ValueError):
    """The bytes are not a buffer assignment (or module) this module can read."""


def split_hlo_proto(data: bytes) -> tuple[bytes | None, bytes | None]:
    """The serialized buffer assignment and module of a serialized ``HloProto`` (None for one it lacks or
    holds empty).

    The two are taken as bytes, not decoded: :func:`decode_buffer_assignment`
    reads them as it reads those of a local compile.

    Raises:
        BufferAssignmentError: ``data`` is not a protobuf message.
    """
    parts = HloProtoParts()
    try:
        parts.ParseFromString(data)
    except DecodeError as exc:
        raise BufferAssignmentError(f"the dumped HloProto cannot be read: {exc}") from None
    return parts.buffer_assignment or None, parts.hlo_module or None  # absent or empty: none


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
        """False for thread-local allocations (registers/stack of a fusion). A constant
        allocation is memory: the executable holds it for as long as it lives."""
        return not self.is_thread_local


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
    """One event of a heap-simulator trace (XLA:CPU records none)."""

    kind: str  # "ALLOC", "FREE", "SHARE_WITH" (or the number, if unknown)
    buffer_id: int
    computation: str
    instruction: str
    share_with_canonical_id: int


@dataclass(frozen=True)
class HeapTrace:
    """A heap-simulator trace: the events of one simulated allocation."""

    events: tuple[HeapEvent, ...]
    whole_module_simulation: bool
    buffer_allocation_index: int


@dataclass(frozen=True)
class BufferAssignment:
    """A decoded ``BufferAssignmentProto``: which logical buffer lives where.

    :attr:`aliases` and :attr:`heap_traces` are decoded when first read:
    the live-range analysis reads neither, and a donated state has about two
    aliases per leaf, all decoded for nothing otherwise.
    """

    logical_buffers: tuple[LogicalBuffer, ...]
    allocations: tuple[Allocation, ...]
    # (wrapped computation, its root instruction, the computation of the async-start that
    # runs it, that async-start): the optimized HLO text prints such an op as one
    # instruction (``slice-start``) and leaves the wrapped computation out
    async_wrappers: tuple[tuple[str, str, str, str], ...] = ()
    # the decoded message and the instruction names, for the parts decoded when read
    _source: tuple[Any, dict[int, tuple[str, str]]] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def aliases(self) -> tuple[BufferAlias, ...]:
        """XLA's buffer aliases: each logical buffer that shares the buffer of another."""
        if self._source is None:
            return ()
        proto, names = self._source
        return tuple(BufferAlias(int(a.source_buffer_id), *_where(a.location, names)) for a in proto.buffer_aliases)

    @cached_property
    def heap_traces(self) -> tuple[HeapTrace, ...]:
        """The heap simulator's traces, where the backend records them (XLA:CPU records none)."""
        return tuple(_heap_trace(t) for t in self._source[0].heap_simulator_traces) if self._source else ()

    def memory_spaces(self) -> tuple[int, ...]:
        """The colors (memory spaces) of the allocations, ascending: 0 is the device's default
        memory; on a TPU, 1 is VMEM (``S(1)`` in a shape's layout)."""
        return tuple(sorted({a.color for a in self.allocations}))

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
    return _instruction_ids(_module(hlo_module_proto))


def _module(hlo_module_proto: bytes) -> HloModuleProto:
    """The ``HloModuleProto`` of ``hlo_module_proto``.

    Raises:
        BufferAssignmentError: the bytes are not a protobuf message.
    """
    module = HloModuleProto()
    try:
        module.ParseFromString(bytes(hlo_module_proto))
    except (DecodeError, TypeError) as error:
        raise BufferAssignmentError(f"cannot decode the HLO module proto: {error}") from None
    return module


def _instruction_ids(module: HloModuleProto) -> dict[int, tuple[str, str]]:
    names: dict[int, tuple[str, str]] = {}
    for computation in module.computations:
        name = computation.name  # read once: each field read builds a new object
        names.update({instruction.id: (name, instruction.name) for instruction in computation.instructions})
    return names


def decode_async_wrappers(hlo_module_proto: bytes) -> tuple[tuple[str, str, str, str], ...]:
    """Each computation an ``async-start`` runs: (computation, its root instruction, the caller's
    computation, the ``async-start``), from ``HloModuleProto`` bytes.

    Raises:
        BufferAssignmentError: the bytes are not a protobuf message.
    """
    return _async_wrappers(_module(hlo_module_proto))


def _async_wrappers(module: HloModuleProto) -> tuple[tuple[str, str, str, str], ...]:
    by_id = {int(c.id): c for c in module.computations}
    found: list[tuple[str, str, str, str]] = []
    for computation in module.computations:
        for instruction in computation.instructions:
            if instruction.opcode != "async-start" or not instruction.called_computation_ids:
                continue
            wrapped = by_id.get(int(instruction.called_computation_ids[0]))
            if wrapped is None:
                continue
            root = next((i.name for i in wrapped.instructions if int(i.id) == int(wrapped.root_id)), None)
            if root is not None:
                found.append((wrapped.name, root, computation.name, instruction.name))
    return tuple(found)


def decode_buffer_assignment(data: bytes, hlo_module_proto: bytes | None = None) -> BufferAssignment:
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
    module = _module(hlo_module_proto) if hlo_module_proto else None  # parsed once, read twice
    names = _instruction_ids(module) if module is not None else {}
    assignment = BufferAssignment(
        logical_buffers=tuple(_logical_buffer(b, names) for b in proto.logical_buffers),
        allocations=tuple(_allocation(a) for a in proto.buffer_allocations),
        async_wrappers=_async_wrappers(module) if module is not None and _may_run_async(hlo_module_proto) else (),
        _source=(proto, names),
    )
    _check_placement(assignment)
    return assignment


def _may_run_async(hlo_module_proto: bytes | None) -> bool:
    """Whether the module may hold an ``async-start``: an opcode is a string in the proto's bytes, so
    without "async-start" there no instruction is one (bytes of another kind: it may)."""
    return not isinstance(hlo_module_proto, (bytes, bytearray)) or b"async-start" in hlo_module_proto


def _check_placement(assignment: BufferAssignment) -> None:
    """Every size is 0 or more and every slice lies inside its allocation (else a live peak could exceed
    the memory of all allocations together): what XLA's own assignment always satisfies.

    Raises:
        BufferAssignmentError: the first size or slice that does not.
    """
    for buffer in assignment.logical_buffers:
        if buffer.size < 0:
            raise BufferAssignmentError(f"logical buffer {buffer.id} has a negative size ({buffer.size})")
    for allocation in assignment.allocations:
        if allocation.size < 0:
            raise BufferAssignmentError(f"allocation {allocation.index} has a negative size ({allocation.size})")
        for slot in allocation.assigned:
            if slot.offset < 0 or slot.size < 0 or slot.offset + slot.size > allocation.size:
                raise BufferAssignmentError(
                    f"logical buffer {slot.logical_buffer_id} is placed at bytes {slot.offset} to "
                    f"{slot.offset + slot.size} of allocation {allocation.index}, which holds {allocation.size}: "
                    "a slice must lie inside its allocation"
                )


_Names = dict[int, tuple[str, str]]  # instruction id -> (computation, instruction)
# the protobuf messages below are built at run time (fieldmem.xla._proto): no static types, so Any


# Thousands of buffers per program (two per leaf of a state): the records are built positionally, in the
# order of their fields, and protobuf's int64 fields already read as ints.
_NO_NAME = (None, None)


def _where(location: Any, names: _Names) -> tuple[int, str | None, str | None, tuple[int, ...]]:
    """(instruction id, instruction name, computation name, shape index) of a ``LogicalBufferProto.Location``."""
    instruction_id = location.instruction_id
    computation, name = names.get(instruction_id, _NO_NAME)
    if name is None and location.instruction_name:
        name = location.instruction_name
    index = location.shape_index
    return instruction_id, name, computation, tuple(index) if index else ()


def _logical_buffer(buffer: Any, names: _Names) -> LogicalBuffer:
    instruction_id, name, computation, index = _where(buffer.defined_at, names)
    # id, size, instruction_id, instruction, computation, shape_index, color
    return LogicalBuffer(buffer.id, buffer.size, instruction_id, name, computation, index, buffer.color)


def _allocation(a: Any) -> Allocation:
    parameter = bool(a.is_entry_computation_parameter)
    shape_index = a.parameter_shape_index
    # index, size, is_entry_computation_parameter, parameter_number, parameter_shape_index, maybe_live_out,
    # is_tuple, is_constant, is_thread_local, color, assigned
    return Allocation(
        a.index,
        a.size,
        parameter,
        a.parameter_number if parameter else None,
        tuple(shape_index) if shape_index else (),
        bool(a.maybe_live_out),
        bool(a.is_tuple),
        bool(a.is_constant),
        bool(a.is_thread_local),
        a.color,
        tuple(AssignedBuffer(x.logical_buffer_id, x.offset, x.size) for x in a.assigned),
    )


_HEAP_EVENT_KINDS = {0: "ALLOC", 1: "FREE", 2: "SHARE_WITH"}


def _heap_trace(t: Any) -> HeapTrace:
    return HeapTrace(
        events=tuple(
            HeapEvent(
                kind=_HEAP_EVENT_KINDS.get(int(e.kind), str(int(e.kind))),
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
