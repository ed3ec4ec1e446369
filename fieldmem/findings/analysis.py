"""Two compiled variants -> one :class:`~fieldmem.model.target.TargetResult`.

This is where a target's findings and verdict are decided, from what each variant's analysis
found (:func:`fieldmem.findings.variant.analyze_variant`: which donated leaf an output reuses, why a
donation is unusable, what kind each copy is and where it comes from): which output breaks in place
and why (:mod:`fieldmem.findings.pairing` names the input it could have reused), the findings in
words (:mod:`fieldmem.findings.copy_findings`), the verdict and the checks. It reads only the plain
readings the driver returns (:mod:`fieldmem.model.readings`) and the parsed HLO; it never imports
jax and never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

from fieldmem.findings.capacity import fit_check, fit_findings
from fieldmem.findings.copy_findings import (
    at_source,
    conditional_copy_finding,
    constant_findings,
    copy_finding,
    declared_copy_finding,
    new_buffer_finding,
    old_value_use,
    slice_update_copied,
    stake_bytes,
)
from fieldmem.findings.pairing import declared_new, state_donor
from fieldmem.findings.program import ProgramLeaves, display_source, shape_text, user_call_site
from fieldmem.findings.transfers import shared_buffer_findings, transfer_findings, transfers_of
from fieldmem.findings.variant import OWNERS_SHOWN, analyze_variant
from fieldmem.findings.verdict import expectation_met, expectation_words, judge
from fieldmem.model.collector import collector_paused
from fieldmem.model.copies import Alias, UnusableDonation
from fieldmem.model.memory import MEMORY_FIGURES, MemoryFigures
from fieldmem.model.readings import CompiledVariant, InputLeaf, OutputLeaf
from fieldmem.model.target import InputInfo, MadeStatic, OutputInfo, TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.model.vocabulary import copy_kind_word, is_move
from fieldmem.model.word_sets import CheckName, Expectation, StaticCode
from fieldmem.xla import hlo

__all__ = ["analyze_target", "savings"]


# ----------------------------------------------------------------------------
# Verdict


def _has_loop(module: hlo.HloModule) -> bool:
    return any(i.opcode == "while" for c in module.computations for i in c.instructions)


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
    source, call_site = display_source(location), user_call_site(location)
    head = (
        f"{out.path} ({shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is a new output"
        f"{at_source(source, call_site)}"
    )
    if declared:
        why = "declared new (--new / new=), so it is not a break even where a donated input could hold it"
    else:
        owners = [a for a in aliases if a.bytes == size]
        if owners:
            why = (
                "every donated input of its size is already reused by another output ("
                + ", ".join(f"{a.input} by {a.output}" for a in owners[:OWNERS_SHOWN])
                + ("…" if len(owners) > OWNERS_SHOWN else "")
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
    source, call_site = display_source(location), user_call_site(location)
    return Finding(
        "error",
        "state-grows",
        f"{out.path} ({shape_text(out.shape, out.dtype)}, {format_bytes(size)}) is written to a new buffer"
        f"{at_source(source, call_site)}, at least as large as the donated {unusable.input} "
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
                None if declared else state_donor(out, size, program, donated.aliases, state_bytes, frozenset(claimed))
            )
            if donor is not None:
                claimed.add(donor.index)
            # (a donation jit dropped, the input never read, holds nothing an output outgrows)
            outgrown = None if declared else next((u for u in counted if size >= u.bytes and u.code != "unused"), None)
            if donor is not None:
                findings.append(new_buffer_finding(out, size, donor, program, donated.unusable_donations))
            elif outgrown is not None:
                findings.append(_grows_finding(out, size, program, outgrown))
            else:
                new_outputs += 1
                # an input of its shape not donated, passed over only because the output is smaller than the
                # state: named, so that a state leaf left undonated is not hidden
                could = None if declared or not state_bytes else state_donor(out, size, program, donated.aliases)
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
            and not is_move(copy.kind)
            and (copy.kind in ("parameter", "loop") or copy.output is not None)
        ):
            update = slice_update_copied(program.module, copy) if copy.output is not None else None
            old_use = old_value_use(program.module, copy, inputs)
            findings.append(copy_finding(copy, inputs, once, update, old_use, program.variant.backend))
    for unusable in donated.unusable_donations:
        if unusable.bytes >= min_bytes:
            findings.append(_unusable_finding(unusable, breaks=by_user and reused, by_user=by_user))
    for copy in donated.copies:
        if copy.kind == "conditional" and copy.bytes >= min_bytes:
            findings.append(conditional_copy_finding(copy))
        kind_word = copy_kind_word(copy.kind)
        if kind_word is not None and kind_word.finding is not None and copy.output is None and copy.bytes >= min_bytes:
            findings.append(declared_copy_finding(copy, kind_word, once))  # layout-copy, other-copy
    for copy in plain.copies:
        if copy.kind == "parameter" and copy.bytes >= min_bytes and copy.of_parameter:
            why = "it is returned" if copy.output else "it is updated in place"
            findings.append(
                Finding(
                    "info",
                    "plain-copy",
                    f"without donation, {copy.of_parameter} is copied{once} ({format_bytes(copy.bytes)})"
                    f"{at_source(copy.source, copy.call_site)} because {why} and its buffer must stay intact",
                    input=copy.of_parameter,
                    output=copy.output,
                    source=copy.source,
                    call_site=copy.call_site,
                    bytes=stake_bytes(copy),
                )
            )
    findings.extend(constant_findings(program.module, min_bytes))
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
