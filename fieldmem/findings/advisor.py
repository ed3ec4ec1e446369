"""The donation advisor behind ``--suggest``: what to donate, verified by compiling it.

The check's two compiles already say most of it. The plain one gives, per
array leaf, whether jit kept it and which outputs have its per-device size;
the donated one gives, for the leaves it donated, what XLA really did: an
output reuses the buffer, the donation is unusable (and why), or the buffer is
reused but XLA adds a copy that cancels the saving. From these the advisor
picks the arguments whose donation pays, predicts the rest by size, then
**compiles that spec** to verify it (with the ``compile_donation`` it is given:
:func:`fieldmem.driver.compile_donation`, the driver being the only package that
drives jax). Only when the verification shows an argument that
does not pay does it drop it and compile the smaller spec; when the spec is
exactly the donated variant's (or empty: the plain one) no compile is added.

JAX donates whole arguments (``donate_argnums`` / ``donate_argnames``), so the
suggestion is per argument; the leaves are the detail that explains it. The
savings reported are measured (plain minus the verification compile); each
argument's ``saved_bytes`` is the buffer bytes its leaves lend to outputs,
minus the copies the donation makes XLA add. What a suggested argument is
worth *given the others* is its ``marginal_bytes``: the footprint of the
suggestion without it minus the suggestion's, measured with one compile more
per argument (up to :data:`MARGINAL_COMPILES` arguments). Donations interact
(XLA assigns the whole program's buffers at once), so the marginals need not
add up to the headline; when they do not, a note says by how much.

This module never prints and never imports jax.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fieldmem.findings.advice_words import (
    advice_summary,
    argument_advice,
    figure_change,
    is_named,
    jit_code,
    refused_words,
    spec_text,
)
from fieldmem.findings.analysis import savings
from fieldmem.findings.donation_outcomes import (
    DynamicArgument,
    LeafOutcome,
    compile_spec,
    dynamic_arguments,
    leaves_of,
    observed_outcomes,
    paying,
    predict,
    saves_nothing,
)
from fieldmem.findings.marginals import MARGINAL_COMPILES, marginal_footprints, note_interactions
from fieldmem.findings.program import ProgramLeaves
from fieldmem.findings.variant import analyze_variant
from fieldmem.model.advice import MeasuredDonation, Suggestion
from fieldmem.model.errors import FieldmemError
from fieldmem.model.readings import CallShape, CompiledVariant
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.word_sets import Verification
from fieldmem.request.options import MIN_BYTES
from fieldmem.xla import hlo

__all__ = ["suggest"]

# the wrappers whose program fieldmem compiles on the flattened leaves of the user's arguments
# (fieldmem.driver.wrappers.PMAP_KINDS, which findings may not import)
_PMAP_WRAPPERS = ("jax.pmap", "flax.nnx.pmap", "equinox.filter_pmap")


def suggest(
    call: CallShape,
    plain: CompiledVariant,
    donated: CompiledVariant,
    *,
    compile_donation: Callable[..., CompiledVariant],
    result: TargetResult | None = None,
    min_bytes: int = MIN_BYTES,
    fast: bool = False,
    parser: hlo.HloParser | None = None,
) -> Suggestion:
    """The donation spec that saves the most for ``call``, verified by compiling it.

    Arguments:
        call: the shape of the call both variants were compiled from
            (:func:`fieldmem.driver.call_shape`).
        plain, donated: the check's two compiles (reused: no compile repeats them).
        compile_donation: ``compile_donation(positions, names, fast=...)``
            compiles the call donating exactly those positional arguments and
            keyword names, as :func:`fieldmem.driver.compile_donation` does
            for the prepared call.
        result: the check's analysed result of those compiles, if at hand
            (saves analysing them again).
        min_bytes: an argument saving less than this is not worth donating.
        fast: verify with a fast compile, as the check compiled (``--fast-compile``).
        parser: the :class:`~fieldmem.xla.hlo.HloParser` that parsed the
            check's programs (None: a fresh one).

    Returns:
        A :class:`~fieldmem.model.advice.Suggestion`; ``compiles`` says how many
        compiles it added: the verification (usually 1, 0 when a compile of the
        check already is the suggestion), then one per suggested argument whose
        marginal saving needs a compile of its own. A verification compile that fails
        gives a suggestion of nothing, with the reason in ``notes``.
    """
    if call.wrapper == "equinox.filter_jit":
        # its donation is a mode over all arrays (or all but the first argument's), not per argument
        return Suggestion(
            summary="not available for equinox.filter_jit, which donates by its donate= mode rather than by "
            'argument: compare its modes with --donate all (donate="all") and --donate none',
            spec="auto",
        )
    if call.wrapper in _PMAP_WRAPPERS:
        # its program takes the flattened leaves: a donation of fieldmem's would name leaves, not arguments
        return Suggestion(
            summary=f"not available for {call.wrapper}, whose program fieldmem compiles on the flattened array "
            "leaves rather than on your arguments: compare --donate all and --donate none",
            spec="auto",
        )
    parser = parser if parser is not None else hlo.HloParser()
    plain_variant, donated_variant = _analysed(plain, donated, result, parser)
    program = ProgramLeaves(plain, hlo.parse_hlo_module(plain.hlo_text, parser))
    arguments = dynamic_arguments(call, plain.inputs)
    outputs = {o.index: o.path for o in plain.outputs}
    already = {a.name for a in arguments if any(leaf.donated for leaf in leaves_of(a, donated))}
    lenders = [a for a in arguments if _could_lend(a, program, min_bytes)]
    if 0 < len(lenders) <= EXHAUSTIVE_ARGUMENTS:
        search = _Search(call, plain, donated, plain_variant, donated_variant, program, already, fast, compile_donation)
        return _searched(call, arguments, lenders, outputs, search, min_bytes, parser)
    observed = observed_outcomes(donated, donated_variant, plain_variant, program)
    tried_first: list[str] = []
    every = {a.name for a in lenders}
    if lenders and already != every:
        # what donating every argument that could lend shows, as a plain function's check shows it: the
        # suggestion must not depend on what the check happened to donate (a jit's own donation)
        spec = spec_text(lenders)
        tried_first.append(spec)
        try:
            compiled_all = compile_spec(lenders, fast, compile_donation)
            observed.update(
                observed_outcomes(compiled_all, analyze_variant(compiled_all, parser=parser)[0], plain_variant, program)
            )
        except (FieldmemError, hlo.HloParseError):
            pass  # the check's own compile still says what it shows
    observed.update(_measured_alone(arguments, already, observed, plain_variant, donated_variant, min_bytes))
    outcomes = predict(arguments, observed, program, outputs)
    chosen = paying(arguments, outcomes, min_bytes)

    check = _verify(
        call,
        chosen,
        already,
        outcomes,
        plain_variant,
        donated_variant,
        program,
        min_bytes,
        fast,
        compile_donation=compile_donation,
        parser=parser,
    )
    chosen, verification, verified_by = check.chosen, check.variant, check.verified_by
    tried, notes = tried_first + check.tried, check.notes
    measured = savings(plain_variant, verification) if verification is not None else {}
    if chosen and saves_nothing(measured):
        notes.append(
            f"the verification compile of {spec_text(chosen)} saves neither footprint nor live peak "
            f"({figure_change(plain_variant, verification, 'footprint_bytes')}), so nothing is suggested"
        )
        chosen, verification, verified_by = [], plain_variant, "plain"
        measured = savings(plain_variant, verification)

    if verification is not None and verified_by in ("suggested", "plain") and already:
        current = [a for a in arguments if a.name in already]
        excess = _excess(verification, donated_variant, min_bytes) if {a.name for a in chosen} != already else None
        if excess is not None:
            # never advise a donation that needs more than the one checked: keep that one, and say why
            notes.append(
                f"donating {spec_text(chosen)} would need {excess} than the donation checked "
                f"({spec_text(current)}), so that one is suggested: it is the best found"
            )
            chosen, verification, verified_by = current, donated_variant, "donated"
            measured = savings(plain_variant, verification)
    verifying = len(tried)  # the compiles that verified the spec; the marginal ones come next
    marginals, without = marginal_footprints(
        chosen, already, plain_variant, donated_variant, verification, fast, tried, notes, compile_donation, parser
    )
    left_out: dict[str, str] = {}
    for _ in range(MARGINAL_COMPILES):
        # an argument whose donation, with the others', measures more footprint than without it is left out:
        # the donations interact (a swap of two donated arrays writes one through a temporary)
        costly = _costliest(chosen, marginals, without, verification, min_bytes)
        if costly is None or verification is None:
            break
        rest = [a for a in chosen if a is not costly]
        left_out[costly.name] = (
            f"donated with {spec_text(rest) or 'nothing else'}, it needs {format_bytes(-marginals[costly.name])} "
            "more footprint than left out (measured): the donations interact"
        )
        notes.append(
            f"donating {costly.name} with {spec_text(rest) or 'nothing else'} needs "
            f"{format_bytes(-marginals[costly.name])} more footprint than leaving it out (measured), so it is "
            "left out: the donations interact (XLA assigns the buffers of the whole program at once)"
        )
        chosen, verification = rest, without[costly.name]
        names = {a.name for a in chosen}
        verified_by = "plain" if not chosen else "donated" if names == already else "suggested"
        measured = savings(plain_variant, verification)
        verifying = len(tried)  # the compiles that found and verified this spec
        marginals, without = marginal_footprints(
            chosen, already, plain_variant, donated_variant, verification, fast, tried, notes, compile_donation, parser
        )
    advice = tuple(
        dataclasses.replace(
            argument_advice(a, outcomes, program, outputs, a in chosen, min_bytes, left_out.get(a.name)),
            marginal_bytes=marginals.get(a.name),
        )
        for a in arguments
    )
    note_interactions(chosen, marginals, measured, notes, min_bytes)
    refused = refused_words(chosen, verification, program.shared)
    code, alternative = jit_code(call, chosen)
    nameable = all(is_named(call, a) for a in chosen)
    summary = advice_summary(chosen, advice, plain_variant, verification, measured, verifying, verified_by, notes)
    summary = f"{_on(plain.backend)}{summary}"
    measurements = {(): plain_variant, tuple(a.name for a in arguments if a.name in already): donated_variant}
    if verification is not None:
        measurements[tuple(a.name for a in chosen)] = verification
    for name, variant in without.items():
        measurements[tuple(a.name for a in chosen if a.name != name)] = variant
    return Suggestion(
        summary=f"{summary}; {refused}" if refused else summary,
        spec=spec_text(chosen),
        donate_argnums=tuple(a.position for a in chosen if a.position is not None),
        donate_argnames=tuple(a.name for a in chosen if nameable or a.position is None),
        code=code,
        alternative_code=alternative,
        arguments=advice,
        verified_by=verified_by,
        compiles=len(tried),
        tried=tuple(tried),
        memory=verification.memory if verification is not None else None,
        savings=measured,
        notes=tuple(notes),
        backend=plain.backend,
        measured=_measurements(measurements),
    )


# ----------------------------------------------------------------------------
# Every donation measured: the arguments that could lend a buffer are few


#: the most arguments (of those that could lend a buffer to an output) whose every donation is compiled and
#: measured: 2**N donations, the plain and the check's own among them (3 arguments: at most 6 compiles more;
#: the measured best is then the suggestion, whatever the check donated). Past it: predicted, then verified.
EXHAUSTIVE_ARGUMENTS = 3


def _on(backend: str | None) -> str:
    """``on cpu, ``: the backend a suggestion was computed for, before its words ("" where not known)."""
    return f"on {backend}, " if backend else ""


def _could_lend(argument: DynamicArgument, program: ProgramLeaves, min_bytes: int) -> bool:
    """Whether donating ``argument`` could save anything: leaves of at least ``min_bytes`` in all that the
    program reads and that some output has the per-device size of (XLA aliases by size)."""
    sizes = set(program.output_bytes.values())
    lendable = sum(
        program.input_bytes[leaf.index]
        for leaf in argument.leaves
        if leaf.hlo_parameter is not None and program.input_bytes[leaf.index] in sizes
    )
    return lendable >= max(min_bytes, 1)


def _measurements(known: Mapping[tuple[str, ...], Variant | None]) -> tuple[MeasuredDonation, ...]:
    return tuple(
        MeasuredDonation(names, variant.memory.footprint_bytes, variant.memory.live_peak_bytes)
        for names, variant in sorted(known.items(), key=lambda item: (len(item[0]), item[0]))
        if variant is not None
    )


@dataclass
class _Search:
    """What a search over donations starts from: the check's two compiles and how to compile another."""

    call: CallShape
    plain: CompiledVariant
    donated: CompiledVariant
    plain_variant: Variant
    donated_variant: Variant
    program: ProgramLeaves
    already: set[str]
    fast: bool
    compile_donation: Callable[..., CompiledVariant]


def _searched(
    call: CallShape,
    arguments: Sequence[DynamicArgument],
    lenders: Sequence[DynamicArgument],
    outputs: dict[int, str],
    search: _Search,
    min_bytes: int,
    parser: hlo.HloParser,
) -> Suggestion:
    """The suggestion when every donation of ``lenders`` (the arguments that could lend a buffer) is
    measured: each subset compiled (the plain compile and the check's donated one reused), the one with the
    least footprint chosen (within ``min_bytes`` of it: the fewest arguments, then the least live peak),
    never one that needs ``min_bytes`` more live peak than the donation checked."""
    plain_variant, program = search.plain_variant, search.program
    order = {a.name: n for n, a in enumerate(arguments)}
    known: dict[frozenset[str], tuple[CompiledVariant, Variant]] = {frozenset(): (search.plain, plain_variant)}
    current = frozenset(search.already) if search.already <= {a.name for a in lenders} else None
    if current is not None:
        known[current] = (search.donated, search.donated_variant)
    tried: list[str] = []
    notes: list[str] = []
    for size in range(1, len(lenders) + 1):
        for subset in itertools.combinations(lenders, size):
            key = frozenset(a.name for a in subset)
            if key in known:
                continue
            spec = spec_text(subset)
            tried.append(spec)
            try:
                compiled = compile_spec(subset, search.fast, search.compile_donation)
                known[key] = (compiled, analyze_variant(compiled, parser=parser)[0])
            except (FieldmemError, hlo.HloParseError) as exc:
                notes.append(f"the compile of {spec} failed ({exc}): that donation is not measured")
    footprints = {key: v.memory.footprint_bytes for key, (_, v) in known.items()}
    usable = {key: fp for key, fp in footprints.items() if fp is not None}
    if not usable:
        return Suggestion(
            summary=f"{_on(search.plain.backend)}nothing suggested: this backend gives no footprint to compare",
            spec="none",
            verified_by="none",
            compiles=len(tried),
            tried=tuple(tried),
            notes=tuple(notes),
            backend=search.plain.backend,
        )
    floor = max(min_bytes, 1)
    allowed = dict(usable)
    if current is not None and current in known:
        # never a donation that needs more live peak than the one checked
        allowed = {
            key: fp
            for key, fp in usable.items()
            if _excess(known[key][1], search.donated_variant, min_bytes) is None or key == current
        }
    best = min(allowed.values())
    near = [key for key, fp in allowed.items() if fp - best < floor]
    chosen_key = min(
        near,
        key=lambda key: (
            len(key),
            known[key][1].memory.live_peak_bytes or 0,
            allowed[key],
            sorted(order[n] for n in key),
        ),
    )
    if chosen_key and saves_nothing(savings(plain_variant, known[chosen_key][1])):
        chosen_key = frozenset()
    chosen = [a for a in arguments if a.name in chosen_key]
    compiled, verification = known[chosen_key]
    # what each leaf does: as donating every lender shows it, then as the suggestion's own compile shows it
    everyone = frozenset(a.name for a in lenders)
    observed: dict[int, LeafOutcome] = {}
    if everyone in known:
        observed.update(observed_outcomes(known[everyone][0], known[everyone][1], plain_variant, program))
    if chosen_key:
        observed.update(observed_outcomes(compiled, verification, plain_variant, program))
    outcomes = predict(arguments, observed, program, outputs)
    marginals = {
        a.name: usable[chosen_key - {a.name}] - usable[chosen_key]
        for a in chosen
        if chosen_key - {a.name} in usable and chosen_key in usable
    }
    costs: dict[str, str] = {}
    for argument in lenders:
        more = chosen_key | {argument.name}
        if argument not in chosen and more in usable and chosen_key in usable:
            extra = usable[more] - usable[chosen_key]
            costs[argument.name] = f"donated with {spec_text(chosen) or 'nothing else'}, it " + (
                f"needs {format_bytes(extra)} more footprint than left out (measured)"
                if extra > 0
                else f"saves only {format_bytes(-extra)} of footprint (measured)"
            )
    advice = tuple(
        dataclasses.replace(
            argument_advice(a, outcomes, program, outputs, a in chosen, min_bytes, costs.get(a.name)),
            marginal_bytes=marginals.get(a.name),
        )
        for a in arguments
    )
    measured = savings(plain_variant, verification)
    note_interactions(chosen, marginals, measured, notes, min_bytes)
    measured_count = len(known)
    notes.insert(
        0,
        f"the donations of the {len(lenders)} argument(s) that could lend a buffer were measured ({measured_count} "
        f"of {2 ** len(lenders)}, {len(tried)} compile(s) added to the check's two), whatever the check donated: "
        + ("this one needs the least footprint" if chosen else "none saves footprint"),
    )
    verified_by: Verification = "plain" if not chosen_key else "donated" if chosen_key == current else "suggested"
    if verified_by == "donated" and search.call.donation_source == "jit":
        notes.append("the target's own jit donation already is this spec")
    refused = refused_words(chosen, verification, program.shared)
    code, alternative = jit_code(call, chosen)
    nameable = all(is_named(call, a) for a in chosen)
    lending = spec_text(lenders).replace(",", ", ")
    summary = advice_summary(
        chosen, advice, plain_variant, verification, measured, len(tried), verified_by, notes, lending
    )
    summary = f"{_on(search.plain.backend)}{summary}"
    return Suggestion(
        summary=f"{summary}; {refused}" if refused else summary,
        spec=spec_text(chosen),
        donate_argnums=tuple(a.position for a in chosen if a.position is not None),
        donate_argnames=tuple(a.name for a in chosen if nameable or a.position is None),
        code=code,
        alternative_code=alternative,
        arguments=advice,
        verified_by=verified_by,
        compiles=len(tried),
        tried=tuple(tried),
        memory=verification.memory,
        savings=measured,
        notes=tuple(notes),
        backend=search.plain.backend,
        measured=_measurements(
            {tuple(sorted(key, key=order.__getitem__)): variant for key, (_, variant) in known.items()}
        ),
        searched=len(known) == 2 ** len(lenders),
    )


def _costliest(
    chosen: Sequence[DynamicArgument],
    marginals: dict[str, int],
    without: dict[str, Variant],
    verification: Variant | None,
    min_bytes: int,
) -> DynamicArgument | None:
    """The suggested argument whose donation costs the most footprint given the others' (its marginal saving
    is ``-min_bytes`` or less), when leaving it out needs no more live peak either; None when there is none."""
    if verification is None:
        return None
    candidates = [
        a
        for a in chosen
        if marginals.get(a.name, 0) <= -max(min_bytes, 1)
        and a.name in without
        and _excess(without[a.name], verification, min_bytes) is None
    ]
    return min(candidates, key=lambda a: marginals[a.name], default=None)


def _excess(candidate: Variant, current: Variant, min_bytes: int) -> str | None:
    """How much more footprint or live peak ``candidate`` needs than ``current``, in words, when it is at
    least ``min_bytes`` more of either (figures both have); None when it is not worse."""
    parts = []
    for figure, words in (("footprint_bytes", "footprint"), ("live_peak_bytes", "live peak")):
        a, b = getattr(candidate.memory, figure), getattr(current.memory, figure)
        if a is not None and b is not None and a - b >= max(min_bytes, 1):
            parts.append(f"{format_bytes(a - b)} more {words} ({format_bytes(b)} → {format_bytes(a)})")
    return " and ".join(parts) or None


def _measured_alone(
    arguments: Sequence[DynamicArgument],
    already: set[str],
    observed: dict[int, LeafOutcome],
    plain: Variant,
    donated: Variant,
    min_bytes: int,
) -> dict[int, LeafOutcome]:
    """The outcomes of the one argument the check donated, when the leaf accounting says it saves nothing
    but the two compiles measure a lower footprint (XLA writes the new value through a temporary, yet the
    donated buffer still spares the output's): its largest reused leaf saves what was measured."""
    if len(already) != 1:
        return {}
    (argument,) = [a for a in arguments if a.name in already]
    leaves = [observed[leaf.index] for leaf in argument.leaves if leaf.index in observed]
    measured = savings(plain, donated).get("footprint_bytes")
    if measured is None or measured < max(min_bytes, 1) or sum(o.saved for o in leaves) >= max(min_bytes, 1):
        return {}
    candidates = [
        (leaf, observed[leaf.index])
        for leaf in argument.leaves
        if leaf.index in observed and observed[leaf.index].output is not None
    ]
    if not candidates:
        return {}
    leaf, outcome = max(candidates, key=lambda pair: pair[0].bytes)
    reason = (
        f"its output reuses the buffer, and although XLA {outcome.reason.removeprefix('XLA would ').split(', so')[0]}, "
        f"the donation lowers the footprint by {format_bytes(measured)} (measured: "
        f"{format_bytes(plain.memory.footprint_bytes)} → {format_bytes(donated.memory.footprint_bytes)})"
    )
    return {leaf.index: LeafOutcome("reused", reason, outcome.output, measured)}


@dataclass
class _Verification:
    """Where the verification loop ended: the spec kept and the compile that shows it."""

    chosen: list[DynamicArgument]
    variant: Variant | None  # None: the verification compile failed
    verified_by: Verification
    tried: list[str]
    notes: list[str]


def _verify(
    call: CallShape,
    chosen: list[DynamicArgument],
    already: set[str],
    outcomes: dict[int, LeafOutcome],
    plain: Variant,
    donated: Variant,
    program: ProgramLeaves,
    min_bytes: int,
    fast: bool = False,
    *,
    compile_donation: Callable[..., CompiledVariant],
    parser: hlo.HloParser,
) -> _Verification:
    """Compile ``chosen`` and keep what pays; compile again only when an argument was dropped.

    No compile is added when the spec is empty (the plain compile shows it) or
    exactly the donated variant's. ``outcomes`` is updated with what each
    compile shows about the leaves it donated.
    """
    tried: list[str] = []
    notes: list[str] = []
    while chosen:
        if {a.name for a in chosen} == already:
            if call.donation_source == "jit":
                notes.append("the target's own jit donation already is this spec")
            return _Verification(chosen, donated, "donated", tried, notes)
        spec = spec_text(chosen)
        tried.append(spec)
        try:
            compiled = compile_spec(chosen, fast, compile_donation)
            checked, _ = analyze_variant(compiled, parser=parser)
        except (FieldmemError, hlo.HloParseError) as exc:
            # the check's own result stands; only the suggestion is lost
            notes.append(f"the verification compile of {spec} failed ({exc}), so nothing is suggested")
            return _Verification([], None, "none", tried, notes)
        outcomes.update(observed_outcomes(compiled, checked, plain, program))
        kept = paying(chosen, outcomes, min_bytes)
        if len(kept) == len(chosen):
            return _Verification(chosen, checked, "suggested", tried, notes)
        dropped = ", ".join(a.name for a in chosen if a not in kept)
        notes.append(f"the compile of {spec} showed that donating {dropped} does not pay: left out")
        chosen = kept
    return _Verification([], plain, "plain", tried, notes)


def _analysed(
    plain: CompiledVariant, donated: CompiledVariant, result: TargetResult | None, parser: hlo.HloParser
) -> tuple[Variant, Variant]:
    if result is not None and {"plain", "donated"} <= set(result.variants):
        return result.variants["plain"], result.variants["donated"]
    return analyze_variant(plain, parser=parser)[0], analyze_variant(donated, parser=parser)[0]
