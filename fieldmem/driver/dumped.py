"""What a finished XLA:CPU or XLA:GPU compile would tell, read from what XLA dumped before its code generation.

XLA writes the optimized module, its text and its buffer assignment
(``*after_optimizations.hlo.pb`` and ``*after_optimizations.txt``) once its
HLO passes and buffer assignment are done; code generation follows. A static
check reads nothing that code generation makes, so it can stop there
(:mod:`fieldmem.driver.early`) if every figure of the finished compile can be
had, exactly, from the dump. These are the rules, each held to the finished
compile on every bundled example and on real-library steps
(``tests/driver/test_early_stop.py``; measured with jaxlib 0.10.2, XLA:CPU and
XLA:GPU for an H100 compiled without the device):

- the sizes of ``memory_analysis()`` are XLA's
  ``CompiledMemoryStats::PopulateBufferStatsFromAllocations`` over the
  allocations: an entry parameter's allocation is an argument (and an alias as
  well when it may be live out), one that may be live out an output, and one
  that is neither, nor thread-local, nor a constant, a temporary; an
  allocation in memory space 5 (``Layout::kHostMemorySpace``, its colour)
  counts in the ``host_*`` figures instead;
- XLA:CPU's ``peak_memory_in_bytes`` is the sum of every allocation that is
  not a temporary or thread-local (arguments, outputs, constants): its temporaries
  are left out (:func:`cpu_peak`);
- XLA:GPU's is XLA's ``ComputePeakMemorySizes`` (the memory viewer's padded
  peak): the allocations of the default memory that are arguments, outputs or
  constants, plus the highest point of the heap simulator's trace of its
  temporaries, replayed event by event (:func:`gpu_peak`; None where that rule
  would depend on which of several traces XLA's hash map gives first);
- XLA:CPU's ``Compiled.as_text()`` is the dumped text, but for the ``backend_config`` of
  each instruction, which the finished executable prints as compact JSON with
  its keys sorted (XLA:CPU's code generation writes the configs of ``while``
  loops and library fusions again): :func:`executable_text`. XLA:GPU's is the
  module its executable keeps, built again from its proto, whose source tables
  keep only what is used, in another order: the dumped first line, then the rest
  as XLA prints the dumped module built from its proto
  (:func:`fieldmem.driver.early` builds it);
- the entry's parameter and result shapes, with their layouts, are the module's
  ``host_program_shape`` (:func:`entry_shapes`: read here, so that no XLA object is
  built from the module while other compiles run: that holds the GIL,
  ``benchmarks/results/early-stop-profile.md``);
- the size of the generated code does not exist yet, and is never given.

Pure (no jax, no protobuf package): the few fields read are taken from the wire format here (field
numbers of XLA's ``xla/service/hlo.proto``, as :mod:`fieldmem.xla._proto` declares them; the driver does
not import the readers of XLA's output).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = [
    "HOST_COLOR",
    "Allocation",
    "DumpedStats",
    "EntryShape",
    "allocations",
    "cpu_peak",
    "dumped_stats",
    "entry_shapes",
    "executable_text",
    "gpu_peak",
    "module_of",
]

#: XLA's memory space of host memory (``Layout::kHostMemorySpace``): an allocation's colour
HOST_COLOR = 5

_BACKEND_CONFIG = ", backend_config="


class DumpedStats:
    """``Compiled.memory_analysis()`` of a compile, as its dumped buffer assignment gives it (the attribute
    names are jax's ``CompiledMemoryStats``'s). ``generated_code_size_in_bytes`` is None: no code exists yet."""

    def __init__(self, figures: dict[str, int]) -> None:
        self.argument_size_in_bytes = figures["argument"]
        self.output_size_in_bytes = figures["output"]
        self.alias_size_in_bytes = figures["alias"]
        self.temp_size_in_bytes = figures["temp"]
        self.host_argument_size_in_bytes = figures["host_argument"]
        self.host_output_size_in_bytes = figures["host_output"]
        self.host_alias_size_in_bytes = figures["host_alias"]
        self.host_temp_size_in_bytes = figures["host_temp"]
        self.peak_memory_in_bytes = figures["peak"]
        self.generated_code_size_in_bytes: int | None = None
        self.host_generated_code_size_in_bytes: int | None = None
        self.serialized_buffer_assignment_proto = b""  # the dump has it: fieldmem.driver.dumps

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "serialized_buffer_assignment_proto")
        return f"DumpedStats({fields})"


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """The fields of one protobuf message: (number, wire type, value), in order (a varint as an int, a
    length-delimited field as its bytes; fixed-width fields as their bytes).

    Raises:
        ValueError: ``data`` is not a protobuf message.
    """
    found: list[tuple[int, int, int | bytes]] = []
    at, end = 0, len(data)

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            if at >= end:
                raise ValueError("a varint runs past the end")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    while at < end:
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            found.append((number, wire, varint()))
        elif wire == 2:
            length = varint()
            if at + length > end:
                raise ValueError("a field runs past the end")
            found.append((number, wire, data[at : at + length]))
            at += length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            found.append((number, wire, data[at : at + width]))
            at += width
        else:
            raise ValueError(f"wire type {wire} is not read here")
    return found


def _part(hlo_proto: bytes, number: int) -> bytes:
    """A length-delimited field of a serialized ``HloProto`` (``hlo_module`` = 1, ``buffer_assignment`` = 3;
    empty when absent)."""
    for field, wire, value in _fields(hlo_proto):
        if field == number and wire == 2 and isinstance(value, bytes):
            return value
    return b""


def module_of(hlo_proto: bytes) -> bytes:
    """The serialized ``HloModuleProto`` of a serialized ``HloProto`` (empty when it has none)."""
    return _part(hlo_proto, 1)


def has_assignment(hlo_proto: bytes) -> bool:
    """Whether a serialized ``HloProto`` holds a buffer assignment: a compile's dump does; the module XLA:CPU dumps
    when it loads an executable from jax's persistent cache (``*.after_optimizations.hlo.pb`` too) does not."""
    try:
        return bool(_part(hlo_proto, 3))
    except ValueError:  # not a protobuf message: no assignment to read either
        return False


@dataclass(frozen=True)
class Allocation:
    """What the figures read of a ``BufferAllocationProto``."""

    size: int = 0
    is_thread_local: bool = False
    is_entry_computation_parameter: bool = False
    maybe_live_out: bool = False
    color: int = 0
    is_constant: bool = False
    held: tuple[int, ...] = ()  # the logical buffers assigned to it (read for XLA:GPU's peak only)


# BufferAllocationProto's fields read: size=2, is_thread_local=3, is_entry_computation_parameter=5,
# maybe_live_out=7, color=8, is_constant=12
_ALLOCATION_FIELDS = {
    2: "size",
    3: "is_thread_local",
    5: "is_entry_computation_parameter",
    7: "maybe_live_out",
    8: "color",
    12: "is_constant",
}


_Fields = list[tuple[int, int, "int | bytes"]]


def _assignment(hlo_proto: bytes) -> _Fields:
    """The fields of the ``BufferAssignmentProto`` in a serialized ``HloProto``, read once for every figure."""
    return _fields(_part(hlo_proto, 3))


def allocations(hlo_proto: bytes, held: bool = False) -> list[Allocation]:
    """The buffer allocations of the assignment in a serialized ``HloProto`` (``buffer_allocations`` = 3 of
    its ``BufferAssignmentProto``); ``held``: with the logical buffers assigned to each.

    Raises:
        ValueError: not a protobuf message.
    """
    return _allocations(_assignment(hlo_proto), held)


def _allocations(assignment: _Fields, held: bool = False) -> list[Allocation]:
    found = []
    for number, wire, value in assignment:
        if number != 3 or wire != 2 or not isinstance(value, bytes):
            continue
        read: dict[str, int | bool] = {}
        buffers: list[int] = []
        for field, kind, item in _fields(value):
            name = _ALLOCATION_FIELDS.get(field)
            if name is not None and kind == 0 and isinstance(item, int):
                read[name] = item if name in ("size", "color") else bool(item)
            elif held and field == _ASSIGNED and kind == 2 and isinstance(item, bytes):
                buffers.extend(_signed(b) for n, k, b in _fields(item) if n == 1 and k == 0 and isinstance(b, int))
        found.append(Allocation(**read, held=tuple(buffers)))  # type: ignore[arg-type]
    return found


def _is_temp(allocation: Allocation) -> bool:
    """XLA's ``BufferAllocation::IsPreallocatedTempBuffer``."""
    return not (
        allocation.is_entry_computation_parameter
        or allocation.maybe_live_out
        or allocation.is_thread_local
        or allocation.is_constant
    )


def cpu_peak(found: list[Allocation]) -> int:
    """XLA:CPU's ``peak_memory_in_bytes``: every allocation but its temporaries and thread-local ones."""
    return sum(a.size for a in found if not (_is_temp(a) or a.is_thread_local))


def dumped_stats(hlo_proto: bytes, platform: str = "cpu") -> DumpedStats:
    """The ``memory_analysis()`` figures of the XLA:CPU (or, ``platform`` ``gpu``, XLA:GPU) compile that dumped
    ``hlo_proto`` (a serialized ``HloProto``: the optimized module and its buffer assignment).

    Raises:
        ValueError: ``hlo_proto`` is not a protobuf message, or (XLA:GPU) its peak is not had exactly
            (:func:`gpu_peak`).
    """
    assignment = _assignment(hlo_proto)
    found = _allocations(assignment, held=platform == "gpu")
    figures = dict.fromkeys(
        ("argument", "output", "alias", "temp", "host_argument", "host_output", "host_alias", "host_temp"), 0
    )
    for allocation in found:
        where = "host_" if allocation.color == HOST_COLOR else ""
        if allocation.is_entry_computation_parameter:
            figures[where + "argument"] += allocation.size
            if allocation.maybe_live_out:
                figures[where + "alias"] += allocation.size
        if allocation.maybe_live_out:
            figures[where + "output"] += allocation.size
        if _is_temp(allocation):
            figures[where + "temp"] += allocation.size
    if platform == "gpu":
        peak = _gpu_peak(assignment, found)
        if peak is None:
            raise ValueError("XLA:GPU's peak is not had exactly from this dump")
        figures["peak"] = peak
    else:
        figures["peak"] = cpu_peak(found)
    return DumpedStats(figures)


# LogicalBufferProto: id=1, size=2, color=4; BufferAllocationProto: assigned=9 (its logical_buffer_id=1);
# HeapSimulatorTrace: events=1; an Event: kind=1 (ALLOC=0, FREE=1, SHARE_WITH=2), buffer_id=2,
# share_with_canonical_id=5
_ASSIGNED = 9
_ALLOC, _FREE, _SHARE_WITH = 0, 1, 2


def gpu_peak(hlo_proto: bytes) -> int | None:
    """XLA:GPU's ``peak_memory_in_bytes`` (``ComputePeakMemorySizes``, padded) from a serialized ``HloProto``,
    in the default memory (colour 0): every allocation that is an entry parameter, may be live out, or is a
    constant (thread-local ones are not counted), plus the highest point of the heap simulator's trace of the
    temporaries, replayed with the trace's shared buffers counted once. None where the rule is not decided
    exactly: two temporary allocations with traces of their own (XLA takes one of them in a hash map's
    order), or a trace XLA itself would refuse (a buffer freed twice, a heap below zero, events of more than
    one allocation).

    Raises:
        ValueError: ``hlo_proto`` is not a protobuf message.
    """
    assignment = _assignment(hlo_proto)
    return _gpu_peak(assignment, _allocations(assignment, held=True))


def _gpu_peak(assignment: _Fields, found: list[Allocation]) -> int | None:
    sizes: dict[int, int] = {}
    colors: dict[int, int] = {}
    for number, wire, value in assignment:
        if number == 1 and wire == 2 and isinstance(value, bytes):
            read = {f: v for f, k, v in _fields(value) if k == 0 and isinstance(v, int)}
            buffer = _signed(read.get(1, 0))
            sizes[buffer] = _signed(read.get(2, 0))
            colors[buffer] = _signed(read.get(4, 0))
    allocation_of: dict[int, int] = {}  # logical buffer -> its allocation's place in the list
    lasting = 0
    temporaries: list[int] = []  # the places of the default memory's allocations the heap simulator traces
    for place, allocation in enumerate(found):
        for buffer in allocation.held:
            allocation_of[buffer] = place
        if allocation.color != 0:
            continue
        if allocation.is_entry_computation_parameter or allocation.maybe_live_out or allocation.is_constant:
            if any(b in sizes for b in allocation.held):
                lasting += allocation.size
        else:
            temporaries.append(place)
    traces = [v for n, w, v in assignment if n == 4 and w == 2 and isinstance(v, bytes)]
    events = [[_event(e) for f, k, e in _fields(t) if f == 1 and k == 2 and isinstance(e, bytes)] for t in traces]
    traced: dict[int, int] = {}  # allocation -> its trace (the trace's first buffer's allocation)
    for index, trace_events in enumerate(events):
        if trace_events and trace_events[0][1] in allocation_of and trace_events[0][1] in sizes:
            traced[allocation_of[trace_events[0][1]]] = index
    chosen = {traced[p] for p in temporaries if p in traced}
    if len(chosen) > 1:
        return None
    if chosen:
        trace = chosen.pop()
    else:  # the trace with the most events of the default memory's buffers (the first of equals)
        counts = [sum(1 for _, b, _ in trace_events if colors.get(b) == 0) for trace_events in events]
        most = max(counts, default=0)
        trace = counts.index(most) if most > 0 else -1
    if trace < 0:
        return lasting
    heap = top = 0
    count: dict[int, int] = {}
    canonical: dict[int, int] = {}
    seen: set[int] = set()

    def root(buffer: int) -> int:
        while buffer in canonical:
            buffer = canonical[buffer]
        return buffer

    for kind, buffer, shared in events[trace]:
        if buffer not in sizes:
            continue
        seen.add(allocation_of.get(buffer, -1))
        if kind == _ALLOC:
            owner = root(buffer)
            count[owner] = count.get(owner, 0) + 1
            heap += sizes[owner]
            top = max(top, heap)
        elif kind == _FREE:
            owner = root(buffer)
            count[owner] = count.get(owner, 0) - 1
            if count[owner] < 0:
                return None
            if count[owner] == 0:
                heap -= sizes[owner]
                if heap < 0:
                    return None
        elif kind == _SHARE_WITH:
            if shared not in sizes:
                continue
            canonical[buffer] = shared
            owner = root(shared)
            count[owner] = count.get(owner, 0) + 1
            if count[owner] == 1:  # shared after its canonical buffer was freed: its memory is taken again
                heap += sizes[owner]
                top = max(top, heap)
        else:
            return None
    if len(seen) != 1:
        return None
    return lasting + top


def _event(data: bytes) -> tuple[int, int, int]:
    """A heap simulator trace's event: its kind, buffer and the buffer it shares with."""
    read = {f: v for f, k, v in _fields(data) if k == 0 and isinstance(v, int)}
    return read.get(1, _ALLOC), _signed(read.get(2, 0)), _signed(read.get(5, 0))


#: XLA's ``PrimitiveType`` values that are no array: ``PRIMITIVE_TYPE_INVALID``, ``TUPLE``, ``OPAQUE_TYPE``,
#: ``TOKEN`` (``xla/xla_data.proto``)
_NOT_ARRAYS = frozenset({0, 13, 14, 17})
# field numbers (xla/service/hlo.proto, xla/xla_data.proto): HloModuleProto.host_program_shape; its
# ProgramShapeProto's parameters and result; a ShapeProto's element_type, dimensions, tuple_shapes, layout and
# is_dynamic_dimension; a LayoutProto's minor_to_major
_HOST_PROGRAM_SHAPE = 4
_PARAMETERS, _RESULT = 1, 2
_ELEMENT_TYPE, _DIMENSIONS, _TUPLE_SHAPES, _LAYOUT, _DYNAMIC = 2, 3, 4, 5, 6
_MINOR_TO_MAJOR = 1
#: a LayoutProto's ``tail_padding_alignment_in_elements``: XLA writes 1 (no padding) in every layout it prints
#: as the dimension order alone
_TAIL_PADDING = 16


@dataclass(frozen=True)
class EntryShape:
    """An entry parameter's or result's ``ShapeProto``, as far as an array with a plain layout needs.

    ``plain``: an array whose layout is its dimension order alone, in the default memory space (no tiles,
    memory space, element size or any other layout field; no dynamic dimension): what
    ``Shape.array_shape(type, dimensions, minor_to_major)`` builds again exactly. Anything else is not plain,
    and the compile is awaited (:mod:`fieldmem.driver.early`)."""

    element_type: int
    dimensions: tuple[int, ...]
    minor_to_major: tuple[int, ...] | None
    plain: bool


def _signed(value: int) -> int:
    """An int64 as the wire's varint gives it (two's complement in 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed(data: bytes) -> list[int]:
    """The varints of a packed repeated field."""
    values: list[int] = []
    value, shift = 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value, shift = 0, 0
    if shift:
        raise ValueError("a packed varint runs past the end")
    return values


def _repeated(fields: list[tuple[int, int, int | bytes]], number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    values: list[int] = []
    for field, wire, value in fields:
        if field != number:
            continue
        values.extend(_packed(value) if isinstance(value, bytes) and wire == 2 else [int(value)] if wire == 0 else [])
    return [_signed(v) for v in values]


def _shape(data: bytes) -> tuple[EntryShape | None, list[bytes]]:
    """An array's :class:`EntryShape` (None: a tuple, then with its elements' bytes)."""
    fields = _fields(data)
    element_type = next((int(v) for f, w, v in fields if f == _ELEMENT_TYPE and w == 0), 0)
    if element_type == 13:  # TUPLE
        return None, [v for f, w, v in fields if f == _TUPLE_SHAPES and isinstance(v, bytes)]
    layouts = [v for f, w, v in fields if f == _LAYOUT and isinstance(v, bytes)]
    minor_to_major = None
    plain_layout = len(layouts) <= 1
    if len(layouts) == 1:
        layout = _fields(layouts[0])
        minor_to_major = tuple(_repeated(layout, _MINOR_TO_MAJOR))
        plain_layout = all(f == _MINOR_TO_MAJOR or (f == _TAIL_PADDING and v == 1) for f, _, v in layout)
    dimensions = tuple(_repeated(fields, _DIMENSIONS))
    plain = (
        element_type not in _NOT_ARRAYS
        and plain_layout
        and not any(_repeated(fields, _DYNAMIC))
        and all(d >= 0 for d in dimensions)
        and (minor_to_major is None or sorted(minor_to_major) == list(range(len(dimensions))))
    )
    return EntryShape(element_type, dimensions, minor_to_major, plain), []


def entry_shapes(module: bytes) -> tuple[list[EntryShape], list[EntryShape]] | None:
    """The entry's parameter shapes and its results' (a tuple result's elements; one result else), from a
    serialized ``HloModuleProto``'s ``host_program_shape``; None where it has none, or a parameter is a
    tuple, or a result's element is one.

    Raises:
        ValueError: ``module`` is not a protobuf message.
    """
    program = next((v for f, w, v in _fields(module) if f == _HOST_PROGRAM_SHAPE and isinstance(v, bytes)), None)
    if program is None:
        return None
    fields = _fields(program)
    parameters: list[EntryShape] = []
    for f, _, v in fields:
        if f == _PARAMETERS and isinstance(v, bytes):
            shape, _elements = _shape(v)
            if shape is None:
                return None
            parameters.append(shape)
    result = next((v for f, w, v in fields if f == _RESULT and isinstance(v, bytes)), None)
    if result is None:
        return None
    shape, elements = _shape(result)
    if shape is not None:
        return parameters, [shape]
    results: list[EntryShape] = []
    for element in elements:
        inner, _nested = _shape(element)
        if inner is None:
            return None
        results.append(inner)
    return parameters, results


def executable_text(dumped: str) -> str:
    """``Compiled.as_text()`` of the XLA:CPU compile that dumped ``dumped`` (its ``*after_optimizations.txt``):
    each ``backend_config`` as compact JSON with sorted keys, the rest as dumped."""
    lines = []
    decoder = json.JSONDecoder()
    for line in dumped.splitlines(keepends=True):
        at = line.find(_BACKEND_CONFIG)
        if at >= 0:
            rest = line[at + len(_BACKEND_CONFIG) :]
            try:
                config, end = decoder.raw_decode(rest)
            except ValueError:  # not JSON (a config of another form): as dumped
                pass
            else:
                written = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                line = line[: at + len(_BACKEND_CONFIG)] + written + rest[end:]
        lines.append(line)
    return "".join(lines)
