"""The findings one copy, buffer or constant makes, in words: a loop, output, parameter, compiler's or
conditional copy, a state output written to a new buffer, an array compiled in as a constant; and how
a compiler is named in them (:func:`compiler_name`, :func:`hardware_hint`).

:func:`fieldmem.findings.analysis.analyze_target` decides which of them a target has. It never
imports jax and never prints.
"""

from __future__ import annotations

from typing import cast

from fieldmem.findings.program import ProgramLeaves, display_source, shape_text, user_call_site
from fieldmem.findings.transfers import given_again
from fieldmem.model.copies import Copy, UnusableDonation
from fieldmem.model.readings import InputLeaf, OutputLeaf
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Finding
from fieldmem.model.vocabulary import CopyKindWord, finding_word
from fieldmem.model.word_sets import FindingCode, Severity
from fieldmem.xla import hlo

__all__ = [
    "at_source",
    "compiler_name",
    "conditional_copy_finding",
    "constant_findings",
    "copy_finding",
    "declared_copy_finding",
    "hardware_hint",
    "new_buffer_finding",
    "old_value_use",
    "slice_update_copied",
    "stake_bytes",
]


def at_source(source: str | None, call_site: str | None = None) -> str:
    """ " at FILE:LINE", and the user's line that led there when that line is library code."""
    if not source:
        return ""
    return f" at {source} (called from {call_site})" if call_site else f" at {source}"


def stake_bytes(copy: Copy) -> int:
    """The bytes a copy costs per call: a loop copy's bytes times its trip count, when known."""
    return copy.bytes_per_call if copy.bytes_per_call is not None else copy.bytes


def slice_update_copied(module: hlo.HloModule, copy: Copy) -> str | None:
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


def old_value_use(module: hlo.HloModule, copy: Copy, inputs: dict[int, InputLeaf]) -> hlo.OldValueUse | None:
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


def copy_finding(
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
    where = at_source(copy.source, copy.call_site)
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
            "error",
            "loop-copy",
            f"{what}: {why}",
            source=copy.source,
            call_site=copy.call_site,
            bytes=stake_bytes(copy),
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
                bytes=stake_bytes(copy),
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
            bytes=stake_bytes(copy),
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
            bytes=stake_bytes(copy),
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
        bytes=stake_bytes(copy),
    )


def new_buffer_finding(
    out: OutputLeaf,
    size: int,
    leaf: InputLeaf,
    program: ProgramLeaves,
    unusable: tuple[UnusableDonation, ...],
) -> Finding:
    """The error for a state output written to a new buffer although ``leaf`` (see :func:`_state_donor`) could hold it."""
    unusable_by_index = {u.input_index: u for u in unusable}
    location = program.output_location(out.index)
    source, call_site = display_source(location), user_call_site(location)
    head = (
        f"{out.path} ({shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is written to a new buffer"
        f"{at_source(source, call_site)}"
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


def constant_findings(module: hlo.HloModule, min_bytes: int) -> list[Finding]:
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
        source, call_site = display_source(site.source), user_call_site(site.source)
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


def declared_copy_finding(copy: Copy, word: CopyKindWord, once: str = "") -> Finding:
    """The finding of a copy whose kind's declaration names it (``layout-copy``, ``other-copy``: see
    :class:`~fieldmem.model.vocabulary.CopyKindWord`): that code, with the severity declared for it, and the
    kind's words after where the copy is; ``once`` as for :func:`copy_finding`."""
    assert word.finding is not None
    return Finding(
        cast(Severity, finding_word(word.finding).severities[0]),
        cast(FindingCode, word.finding),
        f"a {copy.shape} value ({format_bytes(copy.bytes)}) is copied{once}{at_source(copy.source, copy.call_site)}"
        f"{word.finding_words}",
        source=copy.source,
        call_site=copy.call_site,
        bytes=stake_bytes(copy),
    )


def _branch_text(branch: str | None) -> str:
    """``its true branch``, ``branch 2``; for branch 0/1 of an index conditional, what
    ``lax.cond`` calls it (jax lowers ``lax.cond(pred, true_fun, false_fun)`` to branch 1 / 0)."""
    if branch in ("true", "false"):
        return f"its {branch} branch"
    if branch in ("0", "1"):
        return f"branch {branch} ({'true' if branch == '1' else 'false'}_fun of a lax.cond)"
    return f"branch {branch}" if branch is not None else "a branch"


def conditional_copy_finding(copy: Copy) -> Finding:
    """A copy in a conditional's branch: made only when that branch runs."""
    size = format_bytes(copy.bytes)
    conditional = f"the conditional at {copy.branch_source}" if copy.branch_source else "a conditional"
    how_often = (
        f"only in the iterations that take it (at most x{copy.trip_count} per call)"
        if copy.trip_count is not None
        else "only in the calls and iterations that take it"
    )
    message = (
        f"a {copy.shape} value ({size}) is copied{at_source(copy.source, copy.call_site)} when "
        f"{_branch_text(copy.branch)} of {conditional} runs: {how_often}"
    )
    return Finding(
        "warning", "conditional-copy", message, source=copy.source, call_site=copy.call_site, bytes=stake_bytes(copy)
    )
