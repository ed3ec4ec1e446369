"""One compiled variant -> one :class:`~fieldmem.model.report.Variant`: its aliases, unusable
donations, copies (each with its kind and cause) and memory figures (:func:`analyze_variant`).

What is reported is what XLA did, not what the code seems to say: XLA pairs
donors with outputs by byte size and position, not by dataflow, so an alias
``a -> out[1]`` is reported as such even when ``out[1]`` was computed from
``b``. It never imports jax and never prints.
"""

from __future__ import annotations

from typing import cast

from fieldmem.findings.liveness import decoded_assignment, variant_liveness
from fieldmem.findings.program import ProgramLeaves, display_source, user_call_site
from fieldmem.findings.transfers import host_figures
from fieldmem.model.collector import collector_paused
from fieldmem.model.copies import Alias, Copy, UnusableDonation
from fieldmem.model.memory import MemoryFigures, MemorySpace
from fieldmem.model.readings import CompiledVariant, InputLeaf
from fieldmem.model.target import Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.vocabulary import is_move
from fieldmem.model.word_sets import CopyCause, CopyKind, DonationCode, SourceRole
from fieldmem.xla import buffers, hlo
from fieldmem.xla.spaces import device_spaces

__all__ = ["OWNERS_SHOWN", "analyze_variant", "donation_obstacle"]


def _constant_bytes(
    module: hlo.HloModule, assignment: buffers.BufferAssignment | None
) -> tuple[int, list[hlo.ConstantSite]]:
    """Bytes of the arrays compiled in as constants, and the constants: the constant allocations of the
    buffer assignment (what XLA holds), else, without one, the optimized HLO's constants outside fusion
    bodies (the same bytes on XLA:CPU: tests/findings/test_sources.py)."""
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


OWNERS_SHOWN = 3  # outputs named when every output of a leaf's size is taken (an optimizer has dozens)


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
        shown = same_size[:OWNERS_SHOWN]
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
        source = display_source(site.source)
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
        branch_source = display_source(site.branch.source) if site.branch is not None else None
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
                call_site=user_call_site(site.source) if role != "definition" else None,
                branch=site.branch.branch if site.branch is not None else None,
                branch_source=branch_source,
                source_memory_space=site.source_memory_space,
                memory_space=site.memory_space,
            )
        )
    return tuple(sorted(copies, key=lambda c: (-(c.bytes_per_call or c.bytes), c.instruction)))


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
    decoded = decoded_assignment(variant)
    live_peak, live_reason, live_at_peak, timeline, spaces, breakdowns = variant_liveness(
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
            copies=tuple(c for c in copies if not is_move(c.kind)),
            moves=tuple(c for c in copies if is_move(c.kind)),
            jax_warnings=variant.lowering_warnings,
            lower_seconds=round(variant.lower_seconds, 4),
            compile_seconds=round(variant.compile_seconds, 4),
            fast_compile=variant.fast_compile,
        ),
        program,
    )
