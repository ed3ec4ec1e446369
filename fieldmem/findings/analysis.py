"""Two compiled variants -> one :class:`~fieldmem.model.target.TargetResult`.

This is where the findings are decided: which donated leaf an output reuses,
why a donation is unusable, what kind each copy is and where it comes from,
and the verdict in words. It reads only the plain readings the driver returns (:mod:`fieldmem.model.readings`)
and the parsed HLO; it never imports jax and never prints.

What is reported is what XLA did, not what the code seems to say: XLA pairs
donors with outputs by byte size and position, not by dataflow, so an alias
``a -> out[1]`` is reported as such even when ``out[1]`` was computed from
``b``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import cast

from fieldmem.findings.capacity import fit_check, fit_findings
from fieldmem.findings.peak import peak_breakdown
from fieldmem.findings.transfers import (
    given_again,
    host_figures,
    shared_buffer_findings,
    shared_buffers,
    transfer_findings,
    transfers_of,
)
from fieldmem.findings.verdict import expectation_met, expectation_words, judge
from fieldmem.model.collector import collector_paused
from fieldmem.model.copies import Alias, Copy, UnusableDonation
from fieldmem.model.libraries import is_library_file
from fieldmem.model.memory import MEMORY_FIGURES, LiveBuffer, MemoryFigures, MemorySpace, PeakBreakdown, Timeline
from fieldmem.model.readings import NOTHING_DUMPED, CompiledVariant, InputLeaf, OutputLeaf
from fieldmem.model.target import InputInfo, MadeStatic, OutputInfo, TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.model.word_sets import (
    CheckName,
    CopyCause,
    CopyKind,
    DonationCode,
    Expectation,
    LiveBufferKind,
    SourceRole,
    StaticCode,
)
from fieldmem.request.target import display_path
from fieldmem.xla import buffers, hlo
from fieldmem.xla.spaces import device_spaces, space_name

__all__ = [
    "ProgramLeaves",
    "analyze_target",
    "analyze_variant",
    "compiler_name",
    "decimate",
    "donation_obstacle",
    "hardware_hint",
    "pairing_key",
    "same_path_inputs",
    "savings",
]


def _display_source(location: hlo.SourceLocation | None) -> str | None:
    if location is None:
        return None
    return f"{display_path(location.file)}:{location.line}"


def _call_site(location: hlo.SourceLocation | None) -> str | None:
    """The user's line that led to ``location`` when that is library code (see fieldmem.xla.hlo.frames)."""
    return _display_source(hlo.call_site(location, is_library_file))


def _constant_bytes(
    module: hlo.HloModule, assignment: buffers.BufferAssignment | None
) -> tuple[int, list[hlo.ConstantSite]]:
    """Bytes of the arrays compiled in as constants, and the constants: the constant allocations of the
    buffer assignment (what XLA holds), else, without one, the optimized HLO's constants outside fusion
    bodies (the same bytes on XLA:CPU: tests/test_sources.py)."""
    sites = hlo.find_constants(module)
    if assignment is not None:
        return sum(a.size for a in assignment.allocations if a.is_constant), sites
    return sum(site.bytes for site in sites), sites


def _memory(
    variant: CompiledVariant,
    live_peak: int | None,
    live_reason: str | None,
    constant_bytes: int | None = None,
    memory_spaces: tuple[MemorySpace, ...] = (),
    device_constant_bytes: int | None = None,
) -> MemoryFigures:
    """XLA's figures, and fieldmem's: the footprint adds the constants in the device's
    default memory (``device_constant_bytes``, else all of ``constant_bytes``), which the
    executable holds beside its arguments, outputs and temporaries and XLA's own figures
    leave out."""
    m = variant.memory
    unavailable = dict(variant.memory_unavailable)
    if live_peak is None:
        unavailable["live_peak_bytes"] = live_reason or "the live-range analysis did not run"
    parts = [m.get("argument_bytes"), m.get("output_bytes"), m.get("temp_bytes"), m.get("alias_bytes")]
    footprint: int | None
    if any(p is None for p in parts):
        footprint = None
        missing = [n for n, p in zip(("argument", "output", "temp", "alias"), parts) if p is None]
        unavailable["footprint_bytes"] = f"needs XLA's {', '.join(missing)} figure(s), which this backend does not give"
    else:
        argument, output, temp, alias = (int(p) for p in parts)  # type: ignore[arg-type]
        constants = device_constant_bytes if device_constant_bytes is not None else constant_bytes
        footprint = argument + output + temp - alias + (constants or 0)
    return MemoryFigures(
        notes=_figure_notes(variant.platform, m.get("peak_bytes"), live_peak, memory_spaces),
        argument_bytes=m.get("argument_bytes"),
        output_bytes=m.get("output_bytes"),
        alias_bytes=m.get("alias_bytes"),
        temp_bytes=m.get("temp_bytes"),
        generated_code_bytes=m.get("generated_code_bytes"),
        peak_bytes=m.get("peak_bytes"),
        footprint_bytes=footprint,
        live_peak_bytes=live_peak,
        constant_bytes=constant_bytes,
        host_argument_bytes=m.get("host_argument_bytes"),
        host_output_bytes=m.get("host_output_bytes"),
        host_alias_bytes=m.get("host_alias_bytes"),
        host_temp_bytes=m.get("host_temp_bytes"),
        unavailable=unavailable,
        memory_spaces=memory_spaces,
    )


def _figure_notes(
    platform: str | None, peak: int | None, live_peak: int | None, spaces: tuple[MemorySpace, ...]
) -> dict[str, str]:
    """What a figure counts where its name does not say it: on a TPU, XLA's ``peak_bytes`` counts the buffers in
    the chip's own memories (VMEM, SMEM) beside HBM (a 64 MiB VMEM prefetch raised it by 64 MiB on a TPU v5e,
    while HBM never held it), so the HBM peak is the live peak of HBM alone."""
    if platform != "tpu" or peak is None:
        return {}
    on_chip = [s for s in spaces if not s.device and s.name != "host memory" and s.live_peak_bytes > 0]
    words = "XLA's peak counts the TPU's on-chip memory beside HBM"
    if on_chip:
        held = ", ".join(
            f"{s.name or f'memory space {s.memory_space}'} {format_bytes(s.live_peak_bytes)}" for s in on_chip
        )
        words += f" ({held} at {'its own peak' if len(on_chip) == 1 else 'their own peaks'})"
    if live_peak is not None:
        words += f"; the HBM peak is the live peak, {format_bytes(live_peak)}"
    return {"peak_bytes": words}


class ProgramLeaves:
    """The call's array leaves as one compiled program sees them.

    Per leaf: its per-device bytes, the HLO parameter it is (or None when jit
    dropped it), and for each output the instruction producing it and its
    source line. Public for :mod:`fieldmem.findings.advisor`, which asks it
    which outputs a leaf could reuse before compiling a donation.
    """

    def __init__(self, variant: CompiledVariant, module: hlo.HloModule) -> None:
        self.variant = variant
        self.module = module
        self.by_parameter: dict[int, InputLeaf] = {
            leaf.hlo_parameter: leaf for leaf in variant.inputs if leaf.hlo_parameter is not None
        }
        # per-device sizes from the compiled program (they differ from the
        # global ones when inputs are sharded)
        self.input_bytes: dict[int, int] = {}
        shapes = module.entry_parameter_shapes
        for leaf in variant.inputs:
            if leaf.hlo_parameter is None:
                self.input_bytes[leaf.index] = leaf.bytes
            elif variant.tuple_args and len(shapes) == 1:
                elements = hlo.tuple_elements(shapes[0])
                self.input_bytes[leaf.index] = (
                    hlo.shape_bytes(elements[leaf.hlo_parameter]) if leaf.hlo_parameter < len(elements) else leaf.bytes
                )
            elif leaf.hlo_parameter < len(shapes):
                self.input_bytes[leaf.index] = hlo.shape_bytes(shapes[leaf.hlo_parameter])
            else:
                self.input_bytes[leaf.index] = leaf.bytes
        result_shapes = hlo.tuple_elements(module.entry_result_shape) if module.entry_result_shape else []
        self.output_bytes: dict[int, int] = {}
        for out in variant.outputs:
            if len(result_shapes) == len(variant.outputs):
                self.output_bytes[out.index] = hlo.shape_bytes(result_shapes[out.index])
            else:
                self.output_bytes[out.index] = out.bytes
        self.output_producers = hlo.output_values(module)
        self.entry_by_name = module.entry.by_name()
        # the arrays the call gives more than once, each of their leaves -> all of them (see shared_buffers)
        self.shared = shared_buffers(variant.inputs)
        self._sources: dict[int, frozenset[int]] | None = None

    @property
    def sources(self) -> dict[int, frozenset[int]]:
        """For each output index, the input leaves (by report index) it is computed from, read from the HLO's
        operands (:func:`fieldmem.xla.hlo.output_parameters`: a superset, never a miss)."""
        if self._sources is None:
            found: dict[int, frozenset[int]] = {}
            for index, parameters in enumerate(hlo.output_parameters(self.module)):
                leaves = (self.leaf_of(number, tuple_index) for number, tuple_index in parameters)
                found[index] = frozenset(leaf.index for leaf in leaves if leaf is not None)
            self._sources = found
        return self._sources

    def leaf_of(self, parameter_number: int, parameter_index: tuple[int, ...]) -> InputLeaf | None:
        if self.variant.tuple_args:
            if parameter_number == 0 and parameter_index:
                return self.by_parameter.get(parameter_index[0])
            return None
        return self.by_parameter.get(parameter_number)

    def output_of(self, output_index: tuple[int, ...]) -> OutputLeaf | None:
        outputs = self.variant.outputs
        if not output_index:
            return outputs[0] if len(outputs) == 1 else None
        return outputs[output_index[0]] if output_index[0] < len(outputs) else None

    def output_location(self, index: int) -> hlo.SourceLocation | None:
        if index >= len(self.output_producers):
            return None
        return hlo.view_source(self.output_producers[index], self.entry_by_name)


def _shape_text(shape: Sequence[int], dtype: str) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def _aliases(program: ProgramLeaves) -> tuple[Alias, ...]:
    aliases = []
    for entry in program.module.aliases:
        leaf = program.leaf_of(entry.parameter_number, entry.parameter_index)
        out = program.output_of(entry.output_index)
        if leaf is None or out is None:
            continue
        aliases.append(
            Alias(
                input=leaf.path,
                input_index=leaf.index,
                output=out.path,
                output_index=out.index,
                bytes=program.input_bytes[leaf.index],
            )
        )
    return tuple(sorted(aliases, key=lambda a: a.input_index))


_OWNERS_SHOWN = 3  # outputs named when every output of a leaf's size is taken (an optimizer has dozens)


def donation_obstacle(leaf: InputLeaf, program: ProgramLeaves, taken: dict[int, str]) -> tuple[DonationCode, str]:
    """Why no output reuses the donated ``leaf``: an UnusableDonation code and reason.

    ``taken`` maps the index of each output already reusing a donated input to
    that input's path. The advisor asks the same question of donations it has
    not compiled yet (with the outputs its other suggestions take), so both
    give the same reasons in the same words.
    """
    size = program.input_bytes[leaf.index]
    if leaf.hlo_parameter is None:
        return "unused", (
            "the function never reads it, so jit drops it from the program and no output can "
            "reuse it (JAX gives no warning for this): stop passing it or stop donating it"
        )
    same_size = [o for o in program.variant.outputs if program.output_bytes[o.index] == size]
    free = [o for o in same_size if o.index not in taken]
    # an output of its shape in another dtype: the likely update of this leaf, cast
    same_shape = [o for o in program.variant.outputs if o.shape == leaf.shape and o.dtype != leaf.dtype]
    dtype_change = ""
    if same_shape:
        o = same_shape[0]
        dtype_change = (
            f"; {o.path} has its shape but dtype {o.dtype} ({format_bytes(program.output_bytes[o.index])}): "
            "the dtype change prevents reuse"
        )
    if not same_size:
        return "no-output-of-size", f"no output has its size ({format_bytes(size)}){dtype_change}"
    if not free:
        shown = same_size[:_OWNERS_SHOWN]
        owners = ", ".join(f"{o.path} (reuses {taken[o.index]})" for o in shown)
        if len(same_size) > len(shown):
            owners += f" and {len(same_size) - len(shown)} more"
        return "outputs-taken", (
            f"every output of its size is already taken by another donated input: {owners}{dtype_change}"
        )
    return "not-reused", (
        f"XLA did not reuse it although {', '.join(o.path for o in free)} has its size "
        "(a different sharding or layout, or the output is written while the input is still read)"
    )


def _unusable(program: ProgramLeaves, aliases: tuple[Alias, ...]) -> tuple[UnusableDonation, ...]:
    aliased_inputs = {a.input_index for a in aliases}
    taken = {a.output_index: a.input for a in aliases}
    result = []
    for leaf in program.variant.inputs:
        if not leaf.donated or leaf.index in aliased_inputs:
            continue
        code, reason = donation_obstacle(leaf, program, taken)
        result.append(
            UnusableDonation(
                input=leaf.path, input_index=leaf.index, bytes=program.input_bytes[leaf.index], reason=reason, code=code
            )
        )
    return tuple(result)


def _cause(module: hlo.HloModule, site: hlo.CopySite, kind: CopyKind) -> CopyCause | None:
    """Why XLA kept a copy, read from the program's structure (see the report schema)."""
    if kind == "parameter":
        return "input-kept-intact"
    if kind == "layout":
        return "layout-change"
    if kind == "loop":
        # the carry explanations only for a copy of the carry (hlo.find_copies reads it)
        if site.carry == "old":
            return "old-carry-read-after-update"
        if site.carry == "new":
            return "new-value-via-temporary"
        return None
    if site.feeds_output:
        return "output-via-temporary"
    return None


def _copies(program: ProgramLeaves, definition: str | None) -> tuple[Copy, ...]:
    """Every copy XLA kept, the largest (per call) first; ``staging`` ones among them (moves between memory
    spaces, :func:`fieldmem.xla.hlo.find_copies`) are the variant's ``moves``, never copies of state."""
    copies = []
    for site in hlo.find_copies(program.module, device_spaces(program.variant.platform)):
        leaf = (
            program.leaf_of(site.parameter_number, site.parameter_index) if site.parameter_number is not None else None
        )
        kind: CopyKind
        if site.staging:
            kind = "staging"  # moves a value through another memory space: no second buffer of it
        elif site.branch is not None:
            kind = "conditional"  # runs only when its branch runs, in or out of a loop
        elif site.loop is not None:
            kind = "loop"
        elif leaf is not None:
            kind = "parameter"
        elif site.layout_change:
            kind = "layout"
        else:
            kind = "other"
        source = _display_source(site.source)
        role = cast("SourceRole | None", site.source_role)  # hlo.find_copies gives copy, operand, user or None
        output = None
        if site.output_indices:
            out = program.output_of(site.output_indices[0])
            output = out.path if out is not None else None
        if source is None and site.feeds_output and definition is not None:
            source, role = definition, "definition"
        # a copy in a nested loop runs (outer x inner) times per call; one in a branch
        # inside a loop at most that often, so its bytes per call are not known
        trip = site.loop.total_trip_count if site.loop is not None else None
        per_call = site.bytes * trip if trip is not None and kind != "conditional" else None
        branch_source = _display_source(site.branch.source) if site.branch is not None else None
        copies.append(
            Copy(
                bytes=site.bytes,
                shape=site.shape,
                kind=kind,
                of_parameter=leaf.path if leaf is not None else None,
                input_index=leaf.index if leaf is not None else None,
                computation=site.computation,
                instruction=site.instruction,
                source=source,
                source_role=role,
                output=output,
                cause=_cause(program.module, site, kind),
                trip_count=trip,
                bytes_per_call=per_call,
                call_site=_call_site(site.source) if role != "definition" else None,
                branch=site.branch.branch if site.branch is not None else None,
                branch_source=branch_source,
                source_memory_space=site.source_memory_space,
                memory_space=site.memory_space,
            )
        )
    return tuple(sorted(copies, key=lambda c: (-(c.bytes_per_call or c.bytes), c.instruction)))


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
    source = _display_source(instruction.source)
    if source is None and instruction.is_root and computation.is_entry:
        # the peak is where the outputs are gathered: XLA keeps no line for
        # that tuple, and the function returning them is the place to look
        return definition
    return source


def _assignment(variant: CompiledVariant) -> tuple[buffers.BufferAssignment | None, str | None]:
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


def _liveness(
    program: ProgramLeaves,
    copied_inputs: dict[str, Copy],
    definition: str | None = None,
    decoded: tuple[buffers.BufferAssignment | None, str | None] | None = None,
) -> tuple[
    int | None, str | None, tuple[LiveBuffer, ...], Timeline | None, tuple[MemorySpace, ...], tuple[PeakBreakdown, ...]
]:
    """``live_peak_bytes``, the buffers live at that peak, the timeline, every memory space's
    figures and the peak by source, or why they are unavailable."""
    assignment, reason = decoded if decoded is not None else _assignment(program.variant)
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
        source = _display_source(value.source)
        call_site = _call_site(value.source)
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


@collector_paused()  # builds only fieldmem's records: see fieldmem.model.collector
def analyze_variant(
    variant: CompiledVariant, definition: str | None = None, parser: hlo.HloParser | None = None
) -> tuple[Variant, ProgramLeaves]:
    """Findings of one compiled variant (aliases, unusable donations, copies, memory); ``parser``: the
    :class:`~fieldmem.xla.hlo.HloParser` that parsed the target's other programs (None: a fresh one)."""
    module = hlo.parse_hlo_module(variant.hlo_text, parser)
    program = ProgramLeaves(variant, module)
    aliases = _aliases(program)
    copies = _copies(program, definition)
    copied_inputs = {c.instruction: c for c in copies if c.of_parameter is not None}
    decoded = _assignment(variant)
    live_peak, live_reason, live_at_peak, timeline, spaces, breakdowns = _liveness(
        program, copied_inputs, definition, decoded
    )
    constant_bytes, _ = _constant_bytes(module, decoded[0])
    device = device_spaces(variant.platform)
    device_constants = (
        sum(a.size for a in decoded[0].allocations if a.is_constant and a.color in device)
        if decoded[0] is not None
        else None
    )
    return (
        Variant(
            name=variant.name,
            donated_arguments=variant.donated_arguments,
            memory=host_figures(
                _memory(variant, live_peak, live_reason, constant_bytes, spaces, device_constants),
                variant,
                aliases,
                program.input_bytes,
                program.output_bytes,
            ),
            live_at_peak=live_at_peak,
            timeline=timeline,
            peak=next((b for b in breakdowns if b.memory_space == 0), None),
            space_peaks=tuple(b for b in breakdowns if b.memory_space != 0),
            aliases=aliases,
            unusable_donations=_unusable(program, aliases),
            copies=tuple(c for c in copies if c.kind != "staging"),
            moves=tuple(c for c in copies if c.kind == "staging"),
            jax_warnings=variant.lowering_warnings,
            lower_seconds=round(variant.lower_seconds, 4),
            compile_seconds=round(variant.compile_seconds, 4),
            fast_compile=variant.fast_compile,
        ),
        program,
    )


# ----------------------------------------------------------------------------
# Verdict


def _at(source: str | None, call_site: str | None = None) -> str:
    """ " at FILE:LINE", and the user's line that led there when that line is library code."""
    if not source:
        return ""
    return f" at {source} (called from {call_site})" if call_site else f" at {source}"


def _stake(copy: Copy) -> int:
    """The bytes a copy costs per call: a loop copy's bytes times its trip count, when known."""
    return copy.bytes_per_call if copy.bytes_per_call is not None else copy.bytes


def _slice_update_copied(module: hlo.HloModule, copy: Copy) -> str | None:
    """``dynamic-update-slice`` or ``scatter`` when ``copy`` copies the value of such an update (the user's
    code writes a slice; the compiler chose to write it through a temporary), else None."""
    computation = next((c for c in module.computations if c.name == copy.computation), None)
    if computation is None:
        return None
    by_name = computation.by_name()
    instruction = by_name.get(copy.instruction)
    if instruction is None or not instruction.operands:
        return None
    operand = by_name.get(instruction.operands[0])
    found = hlo.slice_update_kind(module, operand)
    if found is None and operand is not None and operand.opcode == "fusion":
        # an update fused with a conversion around it (bf16 updated in f32): the update is inside
        bodies = {c.name: c for c in module.computations}
        body = bodies.get(operand.called[0]) if operand.called else None
        found = next(
            (i.opcode for i in (body.instructions if body else ()) if i.opcode in ("dynamic-update-slice", "scatter")),
            None,
        )
    return found


def _old_value_use(module: hlo.HloModule, copy: Copy, inputs: dict[int, InputLeaf]) -> hlo.OldValueUse | None:
    """For a copy of a donated input (kind ``parameter``), why the program keeps its old value (see
    :func:`fieldmem.xla.hlo.queries.old_value_use`); None for other copies or where it cannot be told."""
    leaf = inputs.get(copy.input_index) if copy.input_index is not None else None
    if copy.kind != "parameter" or leaf is None or not leaf.donated or leaf.hlo_parameter is None:
        return None
    return hlo.old_value_use(module, leaf.hlo_parameter)


def compiler_name(backend: str | None) -> str:
    """The compiler of ``backend`` (a variant's, as ``--backend`` names it) in words: ``XLA:CPU``,
    ``XLA:TPU (v5e)``, ``XLA:GPU (h100)``; ``this compiler`` where the backend is not known."""
    if not backend:
        return "this compiler"
    platform, _, rest = backend.partition(":")
    kind = rest.partition(":")[0]
    name = f"XLA:{platform.upper()}"
    return f"{name} ({kind})" if kind else name


def hardware_hint(backend: str | None) -> str:
    """How to see what the hardware a user trains on does with a copy the compiler of ``backend`` chose."""
    if backend is None or ":" not in backend:
        return (
            "check the hardware you train on with --backend tpu:v5e or --backend gpu:h100 (or [tool.fieldmem] "
            "backends), whose compiler may do it in place"
        )
    return f"this is what {compiler_name(backend)} does with the code as written; no line of it asks for the copy"


def _copy_finding(
    copy: Copy,
    inputs: dict[int, InputLeaf],
    once: str = "",
    slice_update: str | None = None,
    old_use: hlo.OldValueUse | None = None,
    backend: str | None = None,
) -> Finding:
    """The finding for one copy; ``once`` (" once per call" in a program with a loop) sets
    one-off copies apart from the loop copies paid every iteration; ``slice_update``: the update
    whose value an output copy copies (the copy is then the compiler's choice: a ``compiler-copy``
    warning); ``old_use``: why the program keeps a donated input's old value (whose choice its copy
    is); ``backend``: the variant's, named in a compiler's-choice copy."""
    size = format_bytes(copy.bytes)
    where = _at(copy.source, copy.call_site)
    if copy.kind == "loop":
        per_call = (
            f" (x{copy.trip_count} = {format_bytes(copy.bytes_per_call)} per call)"
            if copy.trip_count is not None
            else " (trip count unknown)"
        )
        if copy.cause == "old-carry-read-after-update":
            what = f"the loop carry {copy.shape} ({size}) is copied every iteration{per_call}{where}"
            why = "its old value is still read after the body updates it; read it before the update"
        elif copy.cause == "new-value-via-temporary":
            what = f"a loop value {copy.shape} ({size}) is copied every iteration{per_call}{where}"
            why = (
                "the body computes the new carry while still reading the old one, so XLA writes it "
                "to a temporary and copies it into the carry buffer"
            )
        else:
            what = f"a loop value {copy.shape} ({size}) is copied every iteration{per_call}{where}"
            why = "the body keeps a second buffer for a value it computes (not the loop carry)"
        return Finding(
            "error", "loop-copy", f"{what}: {why}", source=copy.source, call_site=copy.call_site, bytes=_stake(copy)
        )
    if copy.kind != "parameter" and copy.output is not None:
        if slice_update is not None:
            # whose choice: the code writes a slice in place; this compile writes it through a temporary
            return Finding(
                "warning",
                "compiler-copy",
                f"{compiler_name(backend)} still writes {copy.output} through a temporary ({size}){once}{where} "
                f"and copies it into the output buffer: the code updates a slice of it ({slice_update}), and "
                f"the temporary is the compiler's choice, not a line to change; {hardware_hint(backend)}",
                output=copy.output,
                source=copy.source,
                call_site=copy.call_site,
                bytes=_stake(copy),
            )
        message = (
            f"{copy.output} is not written in place: XLA computes it into a {size} temporary and "
            f"copies it into the output buffer{once}{where}"
        )
        return Finding(
            "error",
            "output-copy",
            message,
            output=copy.output,
            source=copy.source,
            call_site=copy.call_site,
            bytes=_stake(copy),
        )
    name = copy.of_parameter or copy.shape
    leaf = inputs.get(copy.input_index) if copy.input_index is not None else None
    if leaf is not None and not leaf.donated:
        tail = "donate it or stop returning it" if copy.output else "donate it"
        message = f"{name} is not donated and is copied{once} ({size}){where}: {tail}"
    elif old_use == "returned":
        message = (
            f"{name} is donated but still copied{once} ({size}){where}: its old value is returned beside its "
            "update, so both need a buffer; return only the new value (or don't donate it)"
        )
    elif old_use == "read-after-update":
        message = (
            f"{name} is donated but still copied{once} ({size}){where}: its old value is read by an expression "
            "that also uses the updated value, so it must outlive the update; compute what needs the old value "
            "before updating"
        )
    elif old_use == "scheduling":
        # whose choice: nothing in the program needs the old value after the update
        return Finding(
            "warning",
            "compiler-copy",
            f"{compiler_name(backend)} still copies {name}{once} ({size}){where} although it is donated: every "
            "read of its old value could come before the update, so the copy is the compiler's choice of order, "
            f"not a line to change; {hardware_hint(backend)}",
            input=copy.of_parameter,
            output=copy.output,
            source=copy.source,
            call_site=copy.call_site,
            bytes=_stake(copy),
        )
    else:
        message = (
            f"{name} is donated but still copied{once} ({size}){where}: its old value is read "
            "after the update writes it (or it is returned twice); read it before updating"
        )
    return Finding(
        "error",
        "parameter-copy",
        message,
        input=copy.of_parameter,
        output=copy.output,
        source=copy.source,
        call_site=copy.call_site,
        bytes=_stake(copy),
    )


def _new_buffer_finding(
    out: OutputLeaf,
    size: int,
    leaf: InputLeaf,
    program: ProgramLeaves,
    unusable: tuple[UnusableDonation, ...],
) -> Finding:
    """The error for a state output written to a new buffer although ``leaf`` (see :func:`_state_donor`) could hold it."""
    unusable_by_index = {u.input_index: u for u in unusable}
    location = program.output_location(out.index)
    source, call_site = _display_source(location), _call_site(location)
    head = (
        f"{out.path} ({_shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is written to a new buffer"
        f"{_at(source, call_site)}"
    )
    again = given_again(leaf, program.shared)
    if not leaf.donated and again:
        reason = (
            f"{leaf.path} has its size but is not donated, and the call gives the same array again as {again}: "
            f"jax refuses a call that donates a buffer it also reads, so give it once, then donate "
            f"{leaf.argument} (or, if {out.path} is a new value rather than {leaf.path}'s next one, declare it "
            f"with --new {out.path})"
        )
    elif not leaf.donated:
        reason = (
            f"{leaf.path} has its size but is not donated: donate {leaf.argument} (or, if {out.path} is a new "
            f"value rather than {leaf.path}'s next one, declare it with --new {out.path})"
        )
    elif leaf.index in unusable_by_index:
        reason = f"{leaf.path} is donated but {unusable_by_index[leaf.index].reason}"
    else:
        reason = f"XLA did not reuse {leaf.path}"
    return Finding(
        "error",
        "new-buffer",
        f"{head}: {reason}",
        input=leaf.path,
        output=out.path,
        source=source,
        call_site=call_site,
        bytes=size,
    )


_CONSTANTS_SHOWN = 5  # constants named one by one, largest first; the rest in one more finding


def _constant_findings(module: hlo.HloModule, min_bytes: int) -> list[Finding]:
    """A warning per array of at least ``min_bytes`` compiled into the program as a constant.

    Scalars are left out whatever their size: XLA makes them of Python numbers and
    loop bounds (a ``fori_loop`` has several), and there is nothing to pass instead.
    """
    large = sorted(
        (
            site
            for site in hlo.find_constants(module)
            if site.bytes >= max(min_bytes, 1) and not site.shape.partition("{")[0].endswith("[]")
        ),
        key=lambda site: (-site.bytes, site.instruction),
    )
    findings = []
    for site in large[:_CONSTANTS_SHOWN]:
        source, call_site = _display_source(site.source), _call_site(site.source)
        used = ""
        if source:
            used = f", read at {source}" + (f" (called from {call_site})" if call_site else "")
        findings.append(
            Finding(
                "warning",
                "constant",
                f"an array {site.shape.partition('{')[0]} ({format_bytes(site.bytes)}) is compiled into the program "
                "as a constant"
                f"{used}: an array the function closes over (a global, a captured variable, self.weights) is "
                "baked in, held for the executable's lifetime outside the argument, output and temp figures, "
                "and can be neither donated nor shared: pass it as an argument",
                source=source,
                call_site=call_site,
                bytes=site.bytes,
            )
        )
    rest = large[_CONSTANTS_SHOWN:]
    if rest:
        findings.append(
            Finding(
                "warning",
                "constant",
                f"and {len(rest)} more constant(s) of at least {format_bytes(max(min_bytes, 1))} "
                f"({format_bytes(sum(site.bytes for site in rest))}) are compiled into the program",
                bytes=sum(site.bytes for site in rest),
            )
        )
    return findings


def _branch_text(branch: str | None) -> str:
    """``its true branch``, ``branch 2``; for branch 0/1 of an index conditional, what
    ``lax.cond`` calls it (jax lowers ``lax.cond(pred, true_fun, false_fun)`` to branch 1 / 0)."""
    if branch in ("true", "false"):
        return f"its {branch} branch"
    if branch in ("0", "1"):
        return f"branch {branch} ({'true' if branch == '1' else 'false'}_fun of a lax.cond)"
    return f"branch {branch}" if branch is not None else "a branch"


def _conditional_copy_finding(copy: Copy) -> Finding:
    """A copy in a conditional's branch: made only when that branch runs."""
    size = format_bytes(copy.bytes)
    conditional = f"the conditional at {copy.branch_source}" if copy.branch_source else "a conditional"
    how_often = (
        f"only in the iterations that take it (at most x{copy.trip_count} per call)"
        if copy.trip_count is not None
        else "only in the calls and iterations that take it"
    )
    message = (
        f"a {copy.shape} value ({size}) is copied{_at(copy.source, copy.call_site)} when "
        f"{_branch_text(copy.branch)} of {conditional} runs: {how_often}"
    )
    return Finding(
        "warning", "conditional-copy", message, source=copy.source, call_site=copy.call_site, bytes=_stake(copy)
    )


def _has_loop(module: hlo.HloModule) -> bool:
    return any(i.opcode == "while" for c in module.computations for i in c.instructions)


def declared_new(path: str, patterns: Sequence[str]) -> bool:
    """Whether the output ``path`` is one the user declared new (``--new``, ``new=``).

    A pattern names an output path (``out.logits``, ``out[1]``) and everything
    under it (``out.aux`` covers ``out.aux['loss']``); ``*`` matches any run of
    characters (``out.*logits``). Patterns are checked by
    :func:`fieldmem.request.options.parse_new`.
    """
    for pattern in patterns:
        if "*" in pattern:
            if re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), path):
                return True
        elif path == pattern or (path.startswith(pattern) and path[len(pattern)] in ".["):
            return True
    return False


_OUTPUT_ITEM = re.compile(r"out\[(\d+)\](.*)", re.S)


def same_path_inputs(output_path: str, inputs: Sequence[InputLeaf]) -> frozenset[str]:
    """The input paths that mirror ``output_path``, as update functions return their state: item ``i`` of a
    tuple output is the ``i``-th argument (``out[1][0].mu['w']`` ↔ ``opt_state[0].mu['w']``: ``params,
    opt_state = step(params, opt_state, batch)``); any other output mirrors each argument (``out['w']`` ↔
    ``params['w']``). Arguments are counted in the call's order, static ones left out."""
    if not output_path.startswith("out"):  # a wrapper's output named by the user's leaf (nnx: model.l1.kernel)
        return frozenset({output_path})
    arguments = list(dict.fromkeys(leaf.argument for leaf in inputs))
    item = _OUTPUT_ITEM.fullmatch(output_path)
    if item is not None and int(item.group(1)) < len(arguments):
        return frozenset({arguments[int(item.group(1))] + item.group(2)})
    return frozenset(argument + output_path[len("out") :] for argument in arguments)


def pairing_key(
    out: OutputLeaf, leaf: InputLeaf, mirrored: frozenset[str], sources: frozenset[int], claimed: frozenset[int]
) -> tuple[bool, ...]:
    """How well ``leaf`` pairs with output ``out`` (smaller is better): not yet named for another output,
    then the input of the same path (``mirrored``: :func:`same_path_inputs`), then of its shape and dtype,
    then one the output is computed from (``sources``: the output's input leaves by index), then one whose
    path ends as the output's does."""
    suffix = out.path[len("out") :]
    return (
        leaf.index in claimed,
        leaf.path not in mirrored,
        leaf.shape != out.shape or leaf.dtype != out.dtype,
        leaf.index not in sources,
        not (suffix and leaf.path.endswith(suffix)),
    )


def _state_donor(
    out: OutputLeaf,
    size: int,
    program: ProgramLeaves,
    aliases: tuple[Alias, ...],
    state_bytes: int = 0,
    claimed: frozenset[int] = frozenset(),
) -> InputLeaf | None:
    """The input whose buffer ``out`` could reuse and whose not reusing it breaks in place, or None: a new output.

    A donated input the program reads, of the output's per-device byte size
    (XLA aliases by size, across dtype and shape), that no output reuses; or
    an input not donated whose shape and dtype are the output's (most likely
    its previous value: donating it is the fix), when the output is at least
    ``state_bytes`` (the smallest state leaf that is reused: an output smaller
    than every reused leaf, beside a state fully in place, is a new value that
    happens to have an argument's shape, such as a decode step's logits); or a donated input no output
    reuses with the output's shape in another dtype (the state, cast: the cast
    prevents the reuse). An output with none of these (fresh
    logits, a loss, a value whose donors other outputs already reuse) is a new
    output: reported, counted in the figures, but not a break.

    Among several, the input named is the one that pairs best with the output (:func:`pairing_key`: the
    input of the same path, of its shape and dtype, that it is computed from), preferring one that
    ``claimed`` (inputs already named for other outputs) does not hold.
    """
    reused = {a.input_index for a in aliases}
    used = [leaf for leaf in program.variant.inputs if leaf.hlo_parameter is not None]
    free = [
        leaf for leaf in used if leaf.donated and leaf.index not in reused and program.input_bytes[leaf.index] == size
    ]
    if not free:
        free = [
            leaf
            for leaf in used
            if not leaf.donated
            and leaf.shape == out.shape
            and leaf.dtype == out.dtype
            and program.input_bytes[leaf.index] == size
            and size >= state_bytes
        ]
    if not free:
        # a donated input of its shape cast to another dtype: the state's update, and the cast is what breaks it
        free = [leaf for leaf in used if leaf.donated and leaf.index not in reused and leaf.shape == out.shape]
    if not free:
        return None
    mirrored = same_path_inputs(out.path, program.variant.inputs)
    sources = program.sources.get(out.index, frozenset())
    return min(free, key=lambda leaf: pairing_key(out, leaf, mirrored, sources, claimed))


def _new_output_finding(
    out: OutputLeaf,
    size: int,
    program: ProgramLeaves,
    aliases: tuple[Alias, ...],
    declared: bool,
    could: InputLeaf | None = None,
) -> Finding:
    """An info finding for an output that needs a buffer of its own by nature (or by the user's word)."""
    location = program.output_location(out.index)
    source, call_site = _display_source(location), _call_site(location)
    head = (
        f"{out.path} ({_shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is a new output"
        f"{_at(source, call_site)}"
    )
    if declared:
        why = "declared new (--new / new=), so it is not a break even where a donated input could hold it"
    else:
        owners = [a for a in aliases if a.bytes == size]
        if owners:
            why = (
                "every donated input of its size is already reused by another output ("
                + ", ".join(f"{a.input} by {a.output}" for a in owners[:_OWNERS_SHOWN])
                + ("…" if len(owners) > _OWNERS_SHOWN else "")
                + "), so it needs a buffer of its own; not a break of in place"
            )
        elif could is not None:
            why = (
                f"smaller than every state leaf reused, so taken for a new value, not a break of in place; "
                f"{could.path} has its shape and dtype but is not donated: if {out.path} is {could.path}'s next "
                f"value, donate {could.argument}"
            )
        else:
            why = "no donated input has its size, so it needs a buffer of its own; not a break of in place"
    return Finding(
        "info", "new-output", f"{head}: {why}", output=out.path, source=source, call_site=call_site, bytes=size
    )


def _donation_note(plain: Variant, donated: Variant, new_outputs: int, min_bytes: int) -> str:
    """One sentence for an in-place summary whose figures a reader would otherwise doubt, or "".

    In place is about state; what donation saves is plain minus donated. Where
    donation saves nothing, or temporaries grow with it (by at least
    ``min_bytes``), the summary says so and why.
    """
    footprint = _difference(plain.memory.footprint_bytes, donated.memory.footprint_bytes)
    temp_growth = _difference(donated.memory.temp_bytes, plain.memory.temp_bytes)
    if temp_growth is not None and temp_growth < max(min_bytes, 1):
        temp_growth = None
    reasons = []
    if not donated.aliases:
        reasons.append("no output reuses a donated buffer" + (" (the outputs are new buffers)" if new_outputs else ""))
    elif new_outputs:
        reasons.append(f"{new_outputs} output(s) are new buffers")
    if temp_growth is not None and temp_growth > 0:
        reasons.append(f"temporaries grow by {format_bytes(temp_growth)}")
    if footprint is not None and footprint <= 0:
        return "donation saves nothing here: " + " and ".join(
            reasons or ["the plain variant holds no more than the donated one"]
        )
    if temp_growth is not None and temp_growth > 0 and footprint is not None:
        return (
            f"donation saves {format_bytes(footprint)} of footprint, although temporaries grow by "
            f"{format_bytes(temp_growth)} with it"
        )
    return ""


def _difference(a: int | None, b: int | None) -> int | None:
    return a - b if a is not None and b is not None else None


def _unusable_finding(unusable: UnusableDonation, breaks: bool, by_user: bool) -> Finding:
    """The finding for a donated input nothing reuses: it breaks in place (``breaks``) when the user asked
    for it while other outputs reuse theirs; otherwise a warning with the same fix."""
    size = format_bytes(unusable.bytes)
    if breaks:
        tail = "don't donate it (jax warns that some donated buffers were not usable)"
    elif by_user:
        tail = "donating it does nothing: don't donate it"
    else:
        tail = "fieldmem donated every argument holding arrays; leave it out of donate_argnums"
    return Finding(
        "error" if breaks else "warning",
        "unusable-donation",
        f"{unusable.input} ({size}) is donated but unusable: {unusable.reason}; {tail}",
        input=unusable.input,
        bytes=unusable.bytes,
    )


def _grows_finding(out: OutputLeaf, size: int, program: ProgramLeaves, unusable: UnusableDonation) -> Finding:
    """The break of a new output at least as large as a donated input nothing reuses: the state grows."""
    location = program.output_location(out.index)
    source, call_site = _display_source(location), _call_site(location)
    return Finding(
        "error",
        "state-grows",
        f"{out.path} ({_shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is written to a new buffer"
        f"{_at(source, call_site)}, at least as large as the donated {unusable.input} "
        f"({format_bytes(unusable.bytes)}), whose buffer is too small to hold it: the state grows, so it cannot "
        "be updated in place",
        output=out.path,
        source=source,
        call_site=call_site,
        bytes=size,
    )


def _nothing_summary(unusable: Sequence[UnusableDonation], min_bytes: int) -> str:
    """The headline of a verdict with nothing to update in place (see :mod:`fieldmem.findings.verdict`)."""
    large = sorted((u for u in unusable if u.bytes >= max(min_bytes, 1)), key=lambda u: -u.bytes)
    if not large:
        return (
            "nothing to update in place: no output reuses an input's buffer, and none of at least the size "
            "threshold could"
        )
    first = large[0]
    more = f" (and {len(large) - 1} more donated input(s))" if len(large) > 1 else ""
    fix = "" if first.code == "unused" else ": don't donate it"  # its reason says what to do already
    return (
        f"nothing to update in place: no output can reuse a donated buffer; {first.input} "
        f"({format_bytes(first.bytes)}) is donated but {first.reason}{more}{fix}"
    )


def _verdict(
    plain: Variant,
    donated: Variant,
    program: ProgramLeaves,
    min_bytes: int,
    new: Sequence[str] = (),
    by_user: bool = True,
    fit: Sequence[Finding] = (),
    moved: Sequence[Finding] = (),
    shared: Sequence[Finding] = (),
) -> Verdict:
    """The findings of the two variants, and the verdict :mod:`fieldmem.findings.verdict` gives them.

    ``by_user``: the donation is the user's (their jit's, or a ``--donate``/``donate=`` they gave), not
    fieldmem's default of every argument holding arrays; an unusable donation then breaks in place.
    ``fit``: whether the program fits its device (:func:`fieldmem.findings.capacity.fit_findings`);
    ``moved``: what jax copies before each call (:func:`fieldmem.findings.transfers.transfer_findings`);
    ``shared``: one array given twice (:func:`fieldmem.findings.transfers.shared_buffer_findings`), first among
    the findings of its severity and size: a call jax refuses is the headline before what it would have cost.
    """
    inputs = {leaf.index: leaf for leaf in program.variant.inputs}
    # where a loop may copy every iteration, say so of the copies that happen once
    once = " once per call" if _has_loop(program.module) else ""
    findings: list[Finding] = list(shared)
    used = [leaf for leaf in program.variant.inputs if leaf.hlo_parameter is not None]
    if program.variant.donation_dropped:
        # at stake: every buffer the donation would have lent
        # (jax marks no leaf donated then: the inputs it was to lend are every input, at most)
        dropped = sum(program.input_bytes[leaf.index] for leaf in used if leaf.donated) or sum(
            program.input_bytes[leaf.index] for leaf in used
        )
        findings.append(
            Finding(
                "error",
                "donation-dropped",
                f"jax dropped the donation: {program.variant.donation_dropped}",
                bytes=dropped or None,
            )
        )
    # nothing to update needs something that could have been: an input of at least the threshold, read by
    # the program or donated (one the function never reads is donated for nothing: jit drops it)
    at_stake = any(
        program.input_bytes[leaf.index] >= max(min_bytes, 1)
        for leaf in program.variant.inputs
        if leaf.hlo_parameter is not None or leaf.donated
    )
    reused = bool(donated.aliases) or not at_stake
    # the state: the smallest leaf of at least the threshold that an output reuses
    state_bytes = min((a.bytes for a in donated.aliases if a.bytes >= max(min_bytes, 1)), default=0)
    # the unusable donations the verdict counts: the user's, or every one when nothing is reused
    counted = [u for u in donated.unusable_donations if u.bytes >= max(min_bytes, 1) and (by_user or not reused)]
    aliased_outputs = {a.output_index for a in donated.aliases}
    new_outputs = 0
    claimed: set[int] = set()  # the inputs named for an output so far: each output its own, where it can
    for out in program.variant.outputs:
        size = program.output_bytes[out.index]
        if size >= max(min_bytes, 1) and out.index not in aliased_outputs:
            declared = declared_new(out.path, new)
            donor = (
                None if declared else _state_donor(out, size, program, donated.aliases, state_bytes, frozenset(claimed))
            )
            if donor is not None:
                claimed.add(donor.index)
            # (a donation jit dropped, the input never read, holds nothing an output outgrows)
            outgrown = None if declared else next((u for u in counted if size >= u.bytes and u.code != "unused"), None)
            if donor is not None:
                findings.append(_new_buffer_finding(out, size, donor, program, donated.unusable_donations))
            elif outgrown is not None:
                findings.append(_grows_finding(out, size, program, outgrown))
            else:
                new_outputs += 1
                # an input of its shape not donated, passed over only because the output is smaller than the
                # state: named, so that a state leaf left undonated is not hidden
                could = None if declared or not state_bytes else _state_donor(out, size, program, donated.aliases)
                could = could if could is not None and not could.donated else None
                findings.append(_new_output_finding(out, size, program, donated.aliases, declared, could))
    for pattern in new:
        if not any(declared_new(out.path, (pattern,)) for out in program.variant.outputs):
            paths = ", ".join(out.path for out in program.variant.outputs[:8])
            findings.append(
                Finding("warning", "new-unmatched", f"new={pattern!r} names no output (the outputs: {paths})")
            )
    for copy in donated.copies:
        # a staging copy (through a TPU's VMEM) makes no second buffer: no finding of its own
        if (
            copy.bytes >= min_bytes
            and copy.kind != "staging"
            and (copy.kind in ("parameter", "loop") or copy.output is not None)
        ):
            update = _slice_update_copied(program.module, copy) if copy.output is not None else None
            old_use = _old_value_use(program.module, copy, inputs)
            findings.append(_copy_finding(copy, inputs, once, update, old_use, program.variant.backend))
    for unusable in donated.unusable_donations:
        if unusable.bytes >= min_bytes:
            findings.append(_unusable_finding(unusable, breaks=by_user and reused, by_user=by_user))
    for copy in donated.copies:
        if copy.kind == "conditional" and copy.bytes >= min_bytes:
            findings.append(_conditional_copy_finding(copy))
        if copy.kind in ("layout", "other") and copy.output is None and copy.bytes >= min_bytes:
            findings.append(
                Finding(
                    "warning",
                    "layout-copy" if copy.kind == "layout" else "other-copy",
                    f"a {copy.shape} value ({format_bytes(copy.bytes)}) is copied{once}"
                    f"{_at(copy.source, copy.call_site)}" + (" to change its layout" if copy.kind == "layout" else ""),
                    source=copy.source,
                    call_site=copy.call_site,
                    bytes=_stake(copy),
                )
            )
    for copy in plain.copies:
        if copy.kind == "parameter" and copy.bytes >= min_bytes and copy.of_parameter:
            why = "it is returned" if copy.output else "it is updated in place"
            findings.append(
                Finding(
                    "info",
                    "plain-copy",
                    f"without donation, {copy.of_parameter} is copied{once} ({format_bytes(copy.bytes)})"
                    f"{_at(copy.source, copy.call_site)} because {why} and its buffer must stay intact",
                    input=copy.of_parameter,
                    output=copy.output,
                    source=copy.source,
                    call_site=copy.call_site,
                    bytes=_stake(copy),
                )
            )
    findings.extend(_constant_findings(program.module, min_bytes))
    findings.extend(fit)
    findings.extend(moved)
    return judge(
        findings,
        reused,
        in_place_summary=_in_place_summary(plain, donated, findings, new_outputs, min_bytes),
        nothing_summary=_nothing_summary(donated.unusable_donations, min_bytes),
    )


def _in_place_summary(
    plain: Variant, donated: Variant, findings: Sequence[Finding], new_outputs: int, min_bytes: int
) -> str:
    """The headline of an in-place verdict: what is reused, what is new, what donation saves."""
    reused = sum(a.bytes for a in donated.aliases)
    if donated.aliases:
        summary = (
            f"in place with donation: {len(donated.aliases)} output(s) reuse donated input buffers "
            f"({format_bytes(reused)})"
        )
    else:
        summary = "in place: no input of at least the size threshold, so nothing to reuse"
    if new_outputs:
        new_bytes = sum(f.bytes or 0 for f in findings if f.code == "new-output")
        summary += f"; {new_outputs} new output(s) ({format_bytes(new_bytes)})"
    plain_copies = [f for f in findings if f.code == "plain-copy"]
    if plain_copies:
        summary += f"; without donation {len(plain_copies)} input(s) are copied"
    note = _donation_note(plain, donated, new_outputs, min_bytes)
    if note:
        summary += f"; {note}"
    return summary


def savings(plain: Variant, donated: Variant) -> dict[str, int | None]:
    """Plain minus donated for each memory figure (None where either is unavailable)."""
    result: dict[str, int | None] = {}
    for name in MEMORY_FIGURES:
        a = getattr(plain.memory, name)
        b = getattr(donated.memory, name)
        result[name] = a - b if a is not None and b is not None else None
    return result


def _budget(name: CheckName, figure: str, words: str, limit: int, memory: MemoryFigures) -> Check:
    """A budget on one of the donated variant's figures; an unavailable figure fails it, never passes as 0."""
    value = getattr(memory, figure)
    if value is None:
        reason = memory.unavailable.get(figure, "not given by this backend")
        return Check(
            name, False, f"the {words} is unavailable ({reason}), so the budget cannot be checked", limit=limit
        )
    passed = value <= limit
    relation = "within" if passed else "exceeds"
    return Check(
        name=name,
        passed=passed,
        message=f"donated {words} {format_bytes(value)} {relation} the budget {format_bytes(limit)}",
        limit=limit,
        value=value,
    )


def _checks(
    expect: Expectation,
    max_peak: int | None,
    max_live_peak: int | None,
    verdict: Verdict,
    donated: Variant,
    compiled: CompiledVariant,
) -> tuple[Check, ...]:
    checks = []
    if expect == "in-place":
        checks.append(
            Check(
                name="expect-in-place",
                passed=expectation_met(verdict.kind, expect),
                message=expectation_words(verdict),
            )
        )
    if expect == "fits":
        checks.append(fit_check(verdict, compiled, donated.memory))
    if max_peak is not None:
        checks.append(_budget("max-footprint", "footprint_bytes", "footprint", max_peak, donated.memory))
    if max_live_peak is not None:
        checks.append(_budget("max-live-peak", "live_peak_bytes", "live peak", max_live_peak, donated.memory))
    return tuple(checks)


@collector_paused()  # builds only fieldmem's records: see fieldmem.model.collector
def analyze_target(
    *,
    target: str,
    name: str,
    definition: str | None,
    donate: str,
    expect: Expectation,
    max_peak: int | None,
    plain: CompiledVariant,
    donated: CompiledVariant,
    min_bytes: int,
    max_live_peak: int | None = None,
    new: Sequence[str] = (),
    plain_analysis: tuple[Variant, ProgramLeaves] | None = None,
    parser: hlo.HloParser | None = None,
    donation_by_user: bool = True,
    jit_definition: str | None = None,
) -> TargetResult:
    """The full result for one target from its two compiles; ``new``: output paths declared new;
    ``plain_analysis``: what :func:`analyze_variant` gave for ``plain`` (the checker analyses it while
    the donated variant still compiles); ``parser``: the target's (None: one for this call);
    ``donation_by_user``: the donation is the user's, not fieldmem's default (see :func:`_verdict`);
    ``jit_definition``: where the target's own jit sets its donation (the report keeps it)."""
    parser = parser if parser is not None else hlo.HloParser()
    plain_variant, _ = plain_analysis if plain_analysis is not None else analyze_variant(plain, definition, parser)
    donated_variant, program = analyze_variant(donated, definition, parser)
    fit = fit_findings(plain, donated, plain_variant.memory, donated_variant.memory)
    transfers = transfers_of(donated, donated_variant.aliases, program.input_bytes, program.output_bytes)
    moved = transfer_findings(transfers, donated_variant.aliases, program.input_bytes, min_bytes)
    shared = shared_buffer_findings(
        program.shared, donated_variant.aliases, program.input_bytes, min_bytes, len(donated.devices)
    )
    verdict = _verdict(plain_variant, donated_variant, program, min_bytes, new, donation_by_user, fit, moved, shared)
    made_static = tuple(MadeStatic(m.argument, cast(StaticCode, m.code), m.reason) for m in donated.made_static)
    verdict = _with_made_static(verdict, made_static)
    return TargetResult(
        target=target,
        name=name,
        status="ok",
        definition=definition,
        donate=donate,
        expect=expect,
        inputs=tuple(
            InputInfo(
                index=leaf.index,
                path=leaf.path,
                shape=leaf.shape,
                dtype=leaf.dtype,
                bytes=leaf.bytes,
                donated=leaf.donated,
                used=leaf.hlo_parameter is not None,
                sharding=leaf.sharding,
                layout=leaf.layout,
                device_shape=leaf.device_shape,
                memory_kind=leaf.memory_kind if leaf.memory_kind not in (None, "device") else None,
            )
            for leaf in donated.inputs
        ),
        outputs=tuple(
            OutputInfo(
                index=o.index,
                path=o.path,
                shape=o.shape,
                dtype=o.dtype,
                bytes=o.bytes,
                sharding=o.sharding,
                layout=o.layout,
                device_shape=o.device_shape,
                memory_kind=o.memory_kind if o.memory_kind not in (None, "device") else None,
            )
            for o in donated.outputs
        ),
        variants={"plain": plain_variant, "donated": donated_variant},
        devices=donated.devices,
        verdict=verdict,
        savings=savings(plain_variant, donated_variant),
        checks=_checks(expect, max_peak, max_live_peak, verdict, donated_variant, donated),
        made_static=made_static,
        transfers=transfers,
        jit_definition=jit_definition,
    )


def _with_made_static(verdict: Verdict, made_static: Sequence[MadeStatic]) -> Verdict:
    """``verdict`` with a note for each Python scalar held static because tracing needs it concrete:
    the program analysed is not the one ``jax.jit`` builds (that one does not trace)."""
    notes = tuple(
        Finding(
            "info",
            "made-static",
            f"{m.argument} is held static: jax.jit traces it, and tracing needs its value ({m.reason}); "
            "mark it static where you jit this function",
            input=m.argument,
        )
        for m in made_static
        if m.code == "concrete"
    )
    if not notes:
        return verdict
    return dataclasses.replace(verdict, findings=verdict.findings + notes)
