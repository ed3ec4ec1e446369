"""The buffer assignment's live ranges as the report takes them: the live peak, the buffers live at
it, the timeline, each memory space's figures and the peak by source.

:mod:`fieldmem.xla.buffers` decodes the assignment and computes the live ranges; this module names
what it finds in the report's words (arguments by path, copies by the input they copy). It never
imports jax and never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from fieldmem.findings.peak import peak_breakdown
from fieldmem.findings.program import ProgramLeaves, display_source, user_call_site
from fieldmem.model.copies import Copy
from fieldmem.model.memory import LiveBuffer, MemorySpace, PeakBreakdown, Timeline
from fieldmem.model.readings import NOTHING_DUMPED, CompiledVariant, InputLeaf, OutputLeaf
from fieldmem.model.word_sets import LiveBufferKind
from fieldmem.xla import buffers, hlo
from fieldmem.xla.spaces import device_spaces, space_name

__all__ = ["decimate", "decoded_assignment", "variant_liveness"]

_LIVE_AT_PEAK = 10  # buffers kept per variant, largest first


TIMELINE_BUCKETS = 400  # a timeline keeps at most two points per bucket


def decimate(curve: Sequence[int], buckets: int = TIMELINE_BUCKETS) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Positions and values of ``curve`` thinned to at most ``2 * buckets + 2`` points.

    Each bucket of consecutive points keeps its lowest and its highest point
    (in schedule order), so the envelope of the curve survives and the global
    peak is kept exactly; the first and last points are always kept.
    """
    n = len(curve)
    if n <= 2 * buckets:
        return tuple(range(n)), tuple(curve)
    keep: set[int] = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo >= hi:
            continue
        window = range(lo, hi)
        keep.add(min(window, key=curve.__getitem__))
        keep.add(max(window, key=curve.__getitem__))
    positions = tuple(sorted(keep))
    return positions, tuple(curve[i] for i in positions)


def _timeline(live: buffers.LiveAnalysis, module: hlo.HloModule, definition: str | None = None) -> Timeline:
    positions, values = decimate(live.curve)
    point = live.peak_point
    return Timeline(
        length=len(live.curve),
        positions=positions,
        live_bytes=values,
        peak_position=live.peak_index,
        peak_instruction=point.instruction if point is not None else None,
        peak_source=_peak_source(point, module, definition) if point is not None else None,
    )


def _peak_source(point: buffers.SchedulePoint, module: hlo.HloModule, definition: str | None) -> str | None:
    """The line of the instruction at the live peak."""
    computation = module.computation(point.computation)
    instruction = (
        next((i for i in computation.instructions if i.name == point.instruction), None) if computation else None
    )
    if computation is None or instruction is None:
        return None
    source = display_source(instruction.source)
    if source is None and instruction.is_root and computation.is_entry:
        # the peak is where the outputs are gathered: XLA keeps no line for
        # that tuple, and the function returning them is the place to look
        return definition
    return source


def decoded_assignment(variant: CompiledVariant) -> tuple[buffers.BufferAssignment | None, str | None]:
    """The decoded buffer assignment, or why there is none."""
    assignment, module_proto = variant.buffer_assignment, variant.hlo_module_proto
    try:
        if variant.hlo_proto is not None:  # a deviceless compile: both are in the HloProto XLA dumped
            assignment, module_proto = buffers.split_hlo_proto(variant.hlo_proto)
            if assignment is None:
                return None, NOTHING_DUMPED
        if assignment is None:
            return None, variant.buffers_unavailable or "no buffer assignment from this backend"
        return buffers.decode_buffer_assignment(assignment, module_proto), None
    except buffers.BufferAssignmentError as exc:
        return None, f"the buffer assignment could not be analysed: {exc}"


def variant_liveness(
    program: ProgramLeaves,
    copied_inputs: dict[str, Copy],
    definition: str | None = None,
    decoded: tuple[buffers.BufferAssignment | None, str | None] | None = None,
) -> tuple[
    int | None, str | None, tuple[LiveBuffer, ...], Timeline | None, tuple[MemorySpace, ...], tuple[PeakBreakdown, ...]
]:
    """``live_peak_bytes``, the buffers live at that peak, the timeline, every memory space's
    figures and the peak by source, or why they are unavailable."""
    assignment, reason = decoded if decoded is not None else decoded_assignment(program.variant)
    if assignment is None:
        return None, reason, (), None, (), ()
    platform = program.variant.platform
    device = device_spaces(platform)
    try:
        live = buffers.analyze_liveness(assignment, program.module, device)
    except buffers.BufferAssignmentError as exc:
        return None, f"the buffer assignment could not be analysed: {exc}", (), None, (), ()
    spaces = tuple(
        MemorySpace(
            s.memory_space,
            s.allocated_bytes,
            s.live_peak_bytes,
            name=space_name(platform, s.memory_space),
            device=s.memory_space in device,
        )
        for s in live.memory_spaces
    )
    parameters = {i.name: i.parameter_number for i in program.module.entry.instructions if i.opcode == "parameter"}
    allocations = {a.index: a for a in assignment.allocations}
    returned = {
        producer.name: out.path
        for producer, out in zip(program.output_producers, program.variant.outputs)
        if producer is not None and producer.opcode != "parameter"
    }
    top: list[LiveBuffer] = []
    for live_slice in live.live_at_peak[:_LIVE_AT_PEAK]:
        value = live_slice.value
        leaf = None
        number = parameters.get(value.instruction or "")
        if number is not None:
            leaf = program.leaf_of(number, value.shape_index)
        allocation = allocations.get(live_slice.slice.allocation)
        owner = None
        if leaf is None and allocation is not None and allocation.parameter_number is not None:
            # a donated input's buffer, after its last read holding another value written into it (the update):
            # the value is named as itself, and the input as the buffer's owner
            owner = program.leaf_of(allocation.parameter_number, allocation.parameter_shape_index)
        # a copy of an input is named by the input it copies, and placed at the
        # copy's own source line (or the function's, when XLA kept none for it)
        copied = copied_inputs.get(value.instruction or "")
        source = display_source(value.source)
        call_site = user_call_site(value.source)
        if source is None and copied is not None:
            source, call_site = copied.source, copied.call_site
        if source is None and (leaf is not None or owner is not None):
            source = definition  # an argument comes in where the function is defined
        top.append(
            LiveBuffer(
                bytes=live_slice.bytes,
                kind=cast(LiveBufferKind, live_slice.kind),  # the analysis counts no thread-local slice
                instruction=value.instruction,
                shape=value.shape,
                source=source,
                input=leaf.path if leaf is not None else (copied.of_parameter if copied is not None else None),
                call_site=call_site,
                buffer_of=owner.path if owner is not None else None,
                output=returned.get(value.instruction or ""),
            )
        )
    entry = program.module.entry.name
    breakdowns = tuple(
        peak_breakdown(
            live,
            lambda number, index: _leaf_path(program.leaf_of(number, index)),
            lambda index: _leaf_path(program.output_of(index)),
            allocations,
            {(entry, name): number for name, number in parameters.items() if number is not None},
            {name: copy.source for name, copy in copied_inputs.items()},
            definition,
            memory_space=space.memory_space,
        )
        for space in live.memory_spaces
        if space.memory_space == 0 or space.live_peak_bytes > 0
    )
    return live.live_peak_bytes, None, tuple(top), _timeline(live, program.module, definition), spaces, breakdowns


def _leaf_path(leaf: InputLeaf | OutputLeaf | None) -> str | None:
    return leaf.path if leaf is not None else None
