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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fieldmem.findings.analysis import (
    ProgramLeaves,
    analyze_variant,
    donation_obstacle,
    pairing_key,
    same_path_inputs,
    savings,
)
from fieldmem.findings.transfers import given_again
from fieldmem.model.advice import ArgumentAdvice, LeafAdvice, MeasuredDonation, Suggestion
from fieldmem.model.copies import Copy
from fieldmem.model.errors import FieldmemError
from fieldmem.model.readings import CallShape, CompiledVariant, InputLeaf
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.word_sets import ArgumentCode, LeafCode, Verification
from fieldmem.request.options import MIN_BYTES
from fieldmem.xla import hlo

__all__ = ["suggest"]

# the wrappers whose program fieldmem compiles on the flattened leaves of the user's arguments
# (fieldmem.driver.wrappers.PMAP_KINDS, which findings may not import)
_PMAP_WRAPPERS = ("jax.pmap", "flax.nnx.pmap", "equinox.filter_pmap")


@dataclass(frozen=True)
class _Argument:
    """One dynamic argument of the call and its array leaves, in report order."""

    name: str
    position: int | None  # None: passed by keyword
    leaves: tuple[InputLeaf, ...]


@dataclass(frozen=True)
class _Outcome:
    """What donating one leaf does: observed in a compile, or predicted by size."""

    code: LeafCode
    reason: str
    output: int | None = None  # index of the output reusing the buffer
    saved: int = 0


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
    arguments = _arguments(call, plain.inputs)
    outputs = {o.index: o.path for o in plain.outputs}
    already = {a.name for a in arguments if any(leaf.donated for leaf in _leaves_of(a, donated))}
    lenders = [a for a in arguments if _could_lend(a, program, min_bytes)]
    if 0 < len(lenders) <= EXHAUSTIVE_ARGUMENTS:
        search = _Search(call, plain, donated, plain_variant, donated_variant, program, already, fast, compile_donation)
        return _searched(call, arguments, lenders, outputs, search, min_bytes, parser)
    observed = _observed(donated, donated_variant, plain_variant, program)
    tried_first: list[str] = []
    every = {a.name for a in lenders}
    if lenders and already != every:
        # what donating every argument that could lend shows, as a plain function's check shows it: the
        # suggestion must not depend on what the check happened to donate (a jit's own donation)
        spec = _spec_text(lenders)
        tried_first.append(spec)
        try:
            compiled_all = _compile_spec(lenders, fast, compile_donation)
            observed.update(
                _observed(compiled_all, analyze_variant(compiled_all, parser=parser)[0], plain_variant, program)
            )
        except (FieldmemError, hlo.HloParseError):
            pass  # the check's own compile still says what it shows
    observed.update(_measured_alone(arguments, already, observed, plain_variant, donated_variant, min_bytes))
    outcomes = _predict(arguments, observed, program, outputs)
    chosen = _paying(arguments, outcomes, min_bytes)

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
    if chosen and _saves_nothing(measured):
        notes.append(
            f"the verification compile of {_spec_text(chosen)} saves neither footprint nor live peak "
            f"({_change(plain_variant, verification, 'footprint_bytes')}), so nothing is suggested"
        )
        chosen, verification, verified_by = [], plain_variant, "plain"
        measured = savings(plain_variant, verification)

    if verification is not None and verified_by in ("suggested", "plain") and already:
        current = [a for a in arguments if a.name in already]
        excess = _excess(verification, donated_variant, min_bytes) if {a.name for a in chosen} != already else None
        if excess is not None:
            # never advise a donation that needs more than the one checked: keep that one, and say why
            notes.append(
                f"donating {_spec_text(chosen)} would need {excess} than the donation checked "
                f"({_spec_text(current)}), so that one is suggested: it is the best found"
            )
            chosen, verification, verified_by = current, donated_variant, "donated"
            measured = savings(plain_variant, verification)
    verifying = len(tried)  # the compiles that verified the spec; the marginal ones come next
    marginals, without = _marginals(
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
            f"donated with {_spec_text(rest) or 'nothing else'}, it needs {format_bytes(-marginals[costly.name])} "
            "more footprint than left out (measured): the donations interact"
        )
        notes.append(
            f"donating {costly.name} with {_spec_text(rest) or 'nothing else'} needs "
            f"{format_bytes(-marginals[costly.name])} more footprint than leaving it out (measured), so it is "
            "left out: the donations interact (XLA assigns the buffers of the whole program at once)"
        )
        chosen, verification = rest, without[costly.name]
        names = {a.name for a in chosen}
        verified_by = "plain" if not chosen else "donated" if names == already else "suggested"
        measured = savings(plain_variant, verification)
        verifying = len(tried)  # the compiles that found and verified this spec
        marginals, without = _marginals(
            chosen, already, plain_variant, donated_variant, verification, fast, tried, notes, compile_donation, parser
        )
    advice = tuple(
        dataclasses.replace(
            _advice(a, outcomes, program, outputs, a in chosen, min_bytes, left_out.get(a.name)),
            marginal_bytes=marginals.get(a.name),
        )
        for a in arguments
    )
    _note_interactions(chosen, marginals, measured, notes, min_bytes)
    refused = _refused(chosen, verification, program.shared)
    code, alternative = _code(call, chosen)
    nameable = all(_is_named(call, a) for a in chosen)
    summary = _summary(chosen, advice, plain_variant, verification, measured, verifying, verified_by, notes)
    summary = f"{_on(plain.backend)}{summary}"
    measurements = {(): plain_variant, tuple(a.name for a in arguments if a.name in already): donated_variant}
    if verification is not None:
        measurements[tuple(a.name for a in chosen)] = verification
    for name, variant in without.items():
        measurements[tuple(a.name for a in chosen if a.name != name)] = variant
    return Suggestion(
        summary=f"{summary}; {refused}" if refused else summary,
        spec=_spec_text(chosen),
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


def _could_lend(argument: _Argument, program: ProgramLeaves, min_bytes: int) -> bool:
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
    arguments: Sequence[_Argument],
    lenders: Sequence[_Argument],
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
            spec = _spec_text(subset)
            tried.append(spec)
            try:
                compiled = _compile_spec(subset, search.fast, search.compile_donation)
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
    if chosen_key and _saves_nothing(savings(plain_variant, known[chosen_key][1])):
        chosen_key = frozenset()
    chosen = [a for a in arguments if a.name in chosen_key]
    compiled, verification = known[chosen_key]
    # what each leaf does: as donating every lender shows it, then as the suggestion's own compile shows it
    everyone = frozenset(a.name for a in lenders)
    observed: dict[int, _Outcome] = {}
    if everyone in known:
        observed.update(_observed(known[everyone][0], known[everyone][1], plain_variant, program))
    if chosen_key:
        observed.update(_observed(compiled, verification, plain_variant, program))
    outcomes = _predict(arguments, observed, program, outputs)
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
            costs[argument.name] = f"donated with {_spec_text(chosen) or 'nothing else'}, it " + (
                f"needs {format_bytes(extra)} more footprint than left out (measured)"
                if extra > 0
                else f"saves only {format_bytes(-extra)} of footprint (measured)"
            )
    advice = tuple(
        dataclasses.replace(
            _advice(a, outcomes, program, outputs, a in chosen, min_bytes, costs.get(a.name)),
            marginal_bytes=marginals.get(a.name),
        )
        for a in arguments
    )
    measured = savings(plain_variant, verification)
    _note_interactions(chosen, marginals, measured, notes, min_bytes)
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
    refused = _refused(chosen, verification, program.shared)
    code, alternative = _code(call, chosen)
    nameable = all(_is_named(call, a) for a in chosen)
    lending = _spec_text(lenders).replace(",", ", ")
    summary = _summary(chosen, advice, plain_variant, verification, measured, len(tried), verified_by, notes, lending)
    summary = f"{_on(search.plain.backend)}{summary}"
    return Suggestion(
        summary=f"{summary}; {refused}" if refused else summary,
        spec=_spec_text(chosen),
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
    chosen: Sequence[_Argument],
    marginals: dict[str, int],
    without: dict[str, Variant],
    verification: Variant | None,
    min_bytes: int,
) -> _Argument | None:
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
    arguments: Sequence[_Argument],
    already: set[str],
    observed: dict[int, _Outcome],
    plain: Variant,
    donated: Variant,
    min_bytes: int,
) -> dict[int, _Outcome]:
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
    return {leaf.index: _Outcome("reused", reason, outcome.output, measured)}


def _compile_spec(
    arguments: Sequence[_Argument],
    fast: bool,
    compile_donation: Callable[..., CompiledVariant],
) -> CompiledVariant:
    """The call compiled donating exactly ``arguments``: by position where they have one, else by name."""
    return compile_donation(
        [a.position for a in arguments if a.position is not None],
        [a.name for a in arguments if a.position is None],
        fast=fast,
    )


@dataclass
class _Verification:
    """Where the verification loop ended: the spec kept and the compile that shows it."""

    chosen: list[_Argument]
    variant: Variant | None  # None: the verification compile failed
    verified_by: Verification
    tried: list[str]
    notes: list[str]


def _verify(
    call: CallShape,
    chosen: list[_Argument],
    already: set[str],
    outcomes: dict[int, _Outcome],
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
        spec = _spec_text(chosen)
        tried.append(spec)
        try:
            compiled = _compile_spec(chosen, fast, compile_donation)
            checked, _ = analyze_variant(compiled, parser=parser)
        except (FieldmemError, hlo.HloParseError) as exc:
            # the check's own result stands; only the suggestion is lost
            notes.append(f"the verification compile of {spec} failed ({exc}), so nothing is suggested")
            return _Verification([], None, "none", tried, notes)
        outcomes.update(_observed(compiled, checked, plain, program))
        kept = _paying(chosen, outcomes, min_bytes)
        if len(kept) == len(chosen):
            return _Verification(chosen, checked, "suggested", tried, notes)
        dropped = ", ".join(a.name for a in chosen if a not in kept)
        notes.append(f"the compile of {spec} showed that donating {dropped} does not pay: left out")
        chosen = kept
    return _Verification([], plain, "plain", tried, notes)


# the most suggested arguments whose marginal saving is measured, one compile each: past it, the
# suggestion's compiles would grow with the argument count, and the marginals are left unmeasured
MARGINAL_COMPILES = 4


def _footprint(variant: Variant | None) -> int | None:
    return variant.memory.footprint_bytes if variant is not None else None


def _marginals(
    chosen: list[_Argument],
    already: set[str],
    plain: Variant,
    donated: Variant,
    verification: Variant | None,
    fast: bool,
    tried: list[str],
    notes: list[str],
    compile_donation: Callable[..., CompiledVariant],
    parser: hlo.HloParser,
) -> tuple[dict[str, int], dict[str, Variant]]:
    """Per suggested argument, the footprint the suggestion needs more without it, the others still donated,
    and the variant measured without it.

    Measured: the footprint of the suggestion donating every other suggested
    argument minus the suggestion's own. The spec without it is the plain
    compile when it is the only one, the donated variant when that donates
    exactly the rest; otherwise one compile each (``tried`` and the count of
    compiles include them), for at most :data:`MARGINAL_COMPILES` arguments.
    """
    total = _footprint(verification)
    if not chosen or total is None:
        return {}, {}
    if len(chosen) > MARGINAL_COMPILES:
        notes.append(
            f"what each of the {len(chosen)} suggested arguments saves given the others is not measured "
            f"(one compile each, done for up to {MARGINAL_COMPILES})"
        )
        return {}, {}
    marginals: dict[str, int] = {}
    variants: dict[str, Variant] = {}
    for argument in chosen:
        rest = [a for a in chosen if a is not argument]
        without: int | None
        if not rest:
            variants[argument.name] = plain
            without = _footprint(plain)
        elif {a.name for a in rest} == already:
            variants[argument.name] = donated
            without = _footprint(donated)
        else:
            spec = _spec_text(rest)
            tried.append(spec)
            try:
                compiled = _compile_spec(rest, fast, compile_donation)
                variants[argument.name] = analyze_variant(compiled, parser=parser)[0]
                without = _footprint(variants[argument.name])
            except (FieldmemError, hlo.HloParseError) as exc:
                notes.append(
                    f"the compile of {spec} (without {argument.name}) failed ({exc}): its saving is not measured"
                )
                continue
        if without is not None:
            marginals[argument.name] = without - total
    return marginals, variants


def _note_interactions(
    chosen: Sequence[_Argument],
    marginals: dict[str, int],
    measured: dict[str, int | None],
    notes: list[str],
    min_bytes: int,
) -> None:
    """When the marginal savings do not add up to the measured one (by ``min_bytes`` or more), say by how much."""
    saved = measured.get("footprint_bytes")
    if len(chosen) < 2 or len(marginals) != len(chosen) or saved is None:
        return
    added = sum(marginals.values())
    if abs(added - saved) < max(min_bytes, 1):
        return
    how = "more" if added > saved else "less"
    notes.append(
        f"the savings per argument (each: the footprint without it, the others donated) add up to "
        f"{format_bytes(added)}, {format_bytes(abs(added - saved))} {how} than the {format_bytes(saved)} "
        "donating them together saves: the donations interact (XLA assigns the buffers of the whole program "
        "at once, so one donation can change what another saves)"
    )


def _analysed(
    plain: CompiledVariant, donated: CompiledVariant, result: TargetResult | None, parser: hlo.HloParser
) -> tuple[Variant, Variant]:
    if result is not None and {"plain", "donated"} <= set(result.variants):
        return result.variants["plain"], result.variants["donated"]
    return analyze_variant(plain, parser=parser)[0], analyze_variant(donated, parser=parser)[0]


def _arguments(call: CallShape, leaves: Sequence[InputLeaf]) -> list[_Argument]:
    """Dynamic arguments in report order (positional, then keywords as given), with their leaves."""
    by_argument: dict[str, list[InputLeaf]] = {}
    for leaf in leaves:
        by_argument.setdefault(leaf.argument, []).append(leaf)
    result = []
    for position, name in enumerate(call.positional_names):
        if position not in call.static_positions and name in by_argument:
            result.append(_Argument(name, position, tuple(by_argument[name])))
    for key in call.keyword_names:
        if key not in call.static_names and key in by_argument:
            result.append(_Argument(key, None, tuple(by_argument[key])))
    return result


def _leaves_of(argument: _Argument, variant: CompiledVariant) -> list[InputLeaf]:
    indices = {leaf.index for leaf in argument.leaves}
    return [leaf for leaf in variant.inputs if leaf.index in indices]


# ----------------------------------------------------------------------------
# What a compile shows about its donated leaves


def _copy_key(copy: Copy) -> tuple[object, ...]:
    return (copy.kind, copy.of_parameter, copy.output, copy.shape, copy.bytes)


def _added_copies(plain: Variant, variant: Variant) -> list[Copy]:
    """Copies of ``variant`` that the plain compile does not have: what the donation added."""
    remaining = Counter(_copy_key(c) for c in plain.copies)
    added = []
    for copy in variant.copies:
        key = _copy_key(copy)
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            added.append(copy)
    return added


def _at(source: str | None) -> str:
    return f" at {source}" if source else ""


def _observed(
    compiled: CompiledVariant,
    variant: Variant,
    plain: Variant,
    program: ProgramLeaves,
) -> dict[int, _Outcome]:
    """The outcome of every leaf ``compiled`` donated, as that compile shows it.

    A reused buffer saves its bytes minus the copies the donation added for it:
    a copy of the input itself (it is still read after the output is written)
    or of a temporary into the reused output (the output is not written in place).
    """
    added = _added_copies(plain, variant)
    aliases = {a.input_index: a for a in variant.aliases}
    unusable = {u.input_index: u for u in variant.unusable_donations}
    result: dict[int, _Outcome] = {}
    for leaf in compiled.inputs:
        if not leaf.donated:
            continue
        alias = aliases.get(leaf.index)
        if alias is None:
            found = unusable.get(leaf.index)
            if found is not None:
                result[leaf.index] = _Outcome(found.code, found.reason)
            else:  # pragma: no cover - analysis lists every donated leaf that is not aliased
                code, reason = donation_obstacle(leaf, program, {})
                result[leaf.index] = _Outcome(code, reason)
            continue
        of_input = [c for c in added if c.kind == "parameter" and c.input_index == leaf.index]
        # a staging copy moves a value through another memory space (a TPU's VMEM): it makes
        # no second buffer of it, so it takes nothing from what the donation saves
        into_output = [c for c in added if c.kind not in ("parameter", "staging") and c.output == alias.output]
        saved = alias.bytes - sum(c.bytes for c in of_input + into_output)
        if saved > 0:
            outcome = _Outcome("reused", f"{alias.output} reuses its buffer", alias.output_index, saved)
        elif of_input:
            copy = of_input[0]
            outcome = _Outcome(
                "copied",
                f"it is read after the output is written: XLA would copy it ({format_bytes(copy.bytes)}"
                f"{_at(copy.source)}), so donating it saves nothing",
                alias.output_index,
                saved,
            )
        else:
            copy = into_output[0]
            outcome = _Outcome(
                "via-temporary",
                f"XLA would compute {alias.output} into a {format_bytes(copy.bytes)} temporary and copy it "
                f"into the donated buffer{_at(copy.source)}, so donating it saves nothing",
                alias.output_index,
                saved,
            )
        result[leaf.index] = outcome
    return result


# ----------------------------------------------------------------------------
# Choosing


# observed outcomes that hold whatever else is donated
_FIRM = ("unused", "no-output-of-size", "not-reused")


def _predict(
    arguments: Sequence[_Argument],
    observed: dict[int, _Outcome],
    program: ProgramLeaves,
    outputs: dict[int, str],
) -> dict[int, _Outcome]:
    """An outcome for every leaf: observed where the donated compile settles it, else by size.

    XLA pairs a donated buffer with any output of its size, so which argument
    gets an output is partly a choice: the advisor pairs each output with a
    leaf it is computed from first (``params`` with the new ``params``, not
    ``grads``), and only then gives the free outputs to any leaf of their
    size. A reuse the donated compile showed is kept when it is such a
    pairing; a pairing it showed with an output computed from other inputs,
    or an output already taken, is decided again here. The verification
    compile has the last word.
    """
    sources = program.sources
    paths = {leaf.index: leaf.path for a in arguments for leaf in a.leaves}
    taken: dict[int, str] = {}
    outcomes: dict[int, _Outcome] = {}

    def computed_from(leaf: InputLeaf, out: int | None) -> bool:
        return out is not None and leaf.index in sources.get(out, frozenset())

    leaves = [leaf for a in arguments for leaf in a.leaves]
    for leaf in leaves:
        seen = observed.get(leaf.index)
        if seen is None:
            continue
        natural = computed_from(leaf, seen.output)
        if seen.code == "reused" and natural and seen.output not in taken:
            taken[seen.output] = paths[leaf.index]  # type: ignore[index]
            outcomes[leaf.index] = seen
        elif seen.code in _FIRM or (seen.code in ("copied", "via-temporary") and natural):
            outcomes[leaf.index] = seen
    for natural_only in (True, False):
        for leaf in leaves:
            if leaf.index in outcomes:
                continue
            out = _free_output(leaf, program, taken, sources if natural_only else None)
            if out is not None:
                taken[out] = leaf.path
                size = program.input_bytes[leaf.index]
                seen = observed.get(leaf.index)
                outcomes[leaf.index] = (
                    seen
                    if seen is not None and seen.output == out
                    else _Outcome("reused", f"{outputs[out]} can reuse its buffer", out, size)
                )
    for leaf in leaves:
        if leaf.index not in outcomes:
            code, reason = donation_obstacle(leaf, program, taken)
            outcomes[leaf.index] = _Outcome(code, reason)
    return outcomes


def _free_output(
    leaf: InputLeaf,
    program: ProgramLeaves,
    taken: dict[int, str],
    sources: dict[int, frozenset[int]] | None,
) -> int | None:
    """A free output of the leaf's size (computed from it, when ``sources`` is given).

    Among several: the one that pairs best with the leaf
    (:func:`~fieldmem.findings.analysis.pairing_key`: of the same path,
    ``out[0]['w']`` for ``params['w']``, then of its shape and dtype), then the first.
    """
    if leaf.hlo_parameter is None:
        return None
    size = program.input_bytes[leaf.index]
    free = [
        o
        for o in program.variant.outputs
        if o.index not in taken
        and program.output_bytes[o.index] == size
        and (sources is None or leaf.index in sources.get(o.index, frozenset()))
    ]
    if not free:
        return None
    inputs = program.variant.inputs
    every = program.sources
    free.sort(
        key=lambda o: (
            *pairing_key(o, leaf, same_path_inputs(o.path, inputs), every.get(o.index, frozenset()), frozenset()),
            o.index,
        )
    )
    return free[0].index


def _saved(argument: _Argument, outcomes: dict[int, _Outcome]) -> int:
    return sum(outcomes[leaf.index].saved for leaf in argument.leaves if leaf.index in outcomes)


def _paying(arguments: Iterable[_Argument], outcomes: dict[int, _Outcome], min_bytes: int) -> list[_Argument]:
    """The arguments whose donation saves at least ``min_bytes`` (and more than nothing)."""
    return [a for a in arguments if _saved(a, outcomes) >= max(min_bytes, 1)]


def _saves_nothing(measured: dict[str, int | None]) -> bool:
    figures = [measured.get("footprint_bytes"), measured.get("live_peak_bytes")]
    known = [f for f in figures if f is not None]
    return bool(known) and all(f <= 0 for f in known)


# ----------------------------------------------------------------------------
# Reporting


_ARGUMENT_REASONS = {
    "unused": "unused: the function never reads it, so jit drops it and no output can reuse it",
    "no-output-of-size": "no output of its leaves' shape/dtype",
    "outputs-taken": "every output of its leaves' sizes already reuses another donated argument",
    "not-reused": "XLA did not reuse its leaves although outputs have their sizes",
    "copied": "read after the output is written: XLA would copy its leaves",
    "via-temporary": "XLA would write the outputs into temporaries and copy them back: donating saves nothing",
}


def _leaf_advice(leaf: InputLeaf, outcome: _Outcome, program: ProgramLeaves, outputs: dict[int, str]) -> LeafAdvice:
    return LeafAdvice(
        input=leaf.path,
        input_index=leaf.index,
        bytes=program.input_bytes[leaf.index],
        code=outcome.code,
        reason=outcome.reason,
        output=outputs.get(outcome.output) if outcome.output is not None else None,
        saved_bytes=outcome.saved,
    )


def _advice(
    argument: _Argument,
    outcomes: dict[int, _Outcome],
    program: ProgramLeaves,
    outputs: dict[int, str],
    donate: bool,
    min_bytes: int,
    costs: str | None = None,
) -> ArgumentAdvice:
    """``costs``: why it was left out although its leaves pay alone (its donation measured a cost with the
    others'), in words."""
    leaves = tuple(_leaf_advice(leaf, outcomes[leaf.index], program, outputs) for leaf in argument.leaves)
    total = sum(leaf.bytes for leaf in leaves)
    saved = sum(leaf.saved_bytes for leaf in leaves)
    reused = [leaf for leaf in leaves if leaf.code == "reused"]
    code: ArgumentCode
    if donate:
        code = "donate"
        if len(leaves) == 1 and reused:
            reason = f"{reused[0].output} reuses its buffer ({format_bytes(saved)})"
        else:
            share = (
                f"its {len(leaves)} leaves all"
                if len(reused) == len(leaves)
                else f"{len(reused)} of its {len(leaves)} leaves"
            )
            reason = f"{share} lend their buffers to outputs ({format_bytes(saved)})"
        # leaves below the threshold would only clutter the reason; the leaves list keeps them
        others = [leaf for leaf in leaves if leaf.code != "reused" and leaf.bytes >= min_bytes]
        if others:
            reason += f"; {len(others)} cannot: {_first_reason(others)}"
    elif 0 < saved < max(min_bytes, 1):
        code = "too-small"
        reason = f"saves only {format_bytes(saved)}, less than the --min-bytes threshold ({format_bytes(min_bytes)})"
    elif reused and saved > 0 and costs is not None:
        code = "no-saving"
        reason = costs
    elif reused and saved > 0:
        # the leaves pay but the measured totals did not: the notes say why
        code = "no-saving"
        reason = "the verification compile shows no saving in footprint or live peak"
    else:
        blocked = [leaf for leaf in leaves if leaf.code != "reused"] or list(leaves)
        codes = {leaf.code for leaf in blocked}
        code = codes.pop() if len(codes) == 1 else "mixed"
        reason = _blocked_reason(code, blocked)
    return ArgumentAdvice(
        argument=argument.name,
        position=argument.position,
        donate=donate,
        code=code,
        reason=reason,
        bytes=total,
        saved_bytes=saved,
        leaves=leaves,
    )


def _first_reason(leaves: Sequence[LeafAdvice]) -> str:
    """The reason of the largest leaf, naming it when the argument has several."""
    largest = max(leaves, key=lambda leaf: leaf.bytes)
    if len(leaves) == 1:
        return largest.reason
    return f"{largest.input}: {largest.reason} (and {len(leaves) - 1} more leaves)"


def _blocked_reason(code: ArgumentCode, leaves: Sequence[LeafAdvice]) -> str:
    """Why an argument is not worth donating: its one leaf's reason, or a summary and the largest leaf's."""
    if code == "unused":
        return _ARGUMENT_REASONS["unused"]
    if len(leaves) == 1:
        return leaves[0].reason
    largest = max(leaves, key=lambda leaf: leaf.bytes)
    head = _ARGUMENT_REASONS.get(code, "none of its leaves can lend its buffer to an output")
    return f"{head} ({len(leaves)} leaves, e.g. {largest.input}; each leaf says why)"


def _spec_text(arguments: Sequence[_Argument]) -> str:
    """The ``--donate`` value for these arguments: names, or numbers for unnamed positions."""
    if not arguments:
        return "none"
    return ",".join(a.name if a.name.isidentifier() else str(a.position) for a in arguments)


def _change(plain: Variant, other: Variant | None, figure: str) -> str:
    after = getattr(other.memory, figure) if other is not None else None
    return f"{figure} {format_bytes(getattr(plain.memory, figure))} → {format_bytes(after)}"


def _refused(
    chosen: Sequence[_Argument], verification: Variant | None, shared: Mapping[int, tuple[InputLeaf, ...]]
) -> str:
    """Why jax refuses the suggested donation with the check's arguments (a donated leaf an output reuses, given
    again in the call: one array twice, see ``shared-donation``; ``shared``: the program's
    :func:`~fieldmem.findings.transfers.shared_buffers`), in words; empty where it does not."""
    if verification is None or not shared:
        return ""
    reused = {a.input_index for a in verification.aliases}
    for argument in chosen:
        for leaf in argument.leaves:
            again = given_again(leaf, shared) if leaf.index in reused else ""
            if again:
                return (
                    f"but with these arguments the call fails: it gives {leaf.path}'s array again as {again}, and "
                    "jax refuses a call that donates a buffer it also reads; give it once first"
                )
    return ""


def _summary(
    chosen: Sequence[_Argument],
    advice: Sequence[ArgumentAdvice],
    plain: Variant,
    verification: Variant | None,
    measured: dict[str, int | None],
    compiles: int,
    verified_by: str,
    notes: Sequence[str],
    searched: str | None = None,
) -> str:
    if verification is None:
        return "nothing suggested: " + (notes[-1] if notes else "the verification failed")
    if not chosen:
        if not advice:
            return "donate nothing: the call has no array argument"
        largest = max(advice, key=lambda a: a.bytes)
        return f"donate nothing: no argument's donation pays ({largest.argument}: {largest.reason})"
    how = {
        "suggested": f"verified by {compiles} compile{'s' if compiles != 1 else ''}",
        "donated": "verified by the donated variant, which donates exactly this",
    }.get(verified_by, "verified")
    if searched is not None:
        how = (
            f"the least footprint of every donation of {searched}, measured "
            f"({compiles} compile{'s' if compiles != 1 else ''} added)"
        )
    saved = measured.get("footprint_bytes")
    peak = measured.get("live_peak_bytes")
    return (
        f"donate {', '.join(a.name for a in chosen)}: saves {format_bytes(saved)} of footprint "
        f"({format_bytes(plain.memory.footprint_bytes)} → {format_bytes(verification.memory.footprint_bytes)}) "
        f"and {format_bytes(peak)} of live peak, {how}"
    )


def _parameter_names(call: CallShape) -> set[str]:
    return set(call.parameters)


def _is_named(call: CallShape, argument: _Argument) -> bool:
    """Whether ``donate_argnames`` can name this argument (a real parameter name, not ``args[1]``)."""
    return argument.position is None or argument.name in _parameter_names(call)


def _tuple(items: Sequence[object]) -> str:
    parts = [f'"{i}"' if isinstance(i, str) else str(i) for i in items]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def _code(call: CallShape, chosen: Sequence[_Argument]) -> tuple[str | None, str | None]:
    """``jax.jit(fn, ...)`` with the suggested donation, by numbers and by names.

    jax keeps no trace of which form a jit object was written with (it fills
    both), so a jit object gets the names form first, robust to reordering;
    a plain function gets the numbers form first. Keyword arguments can only
    be donated by name. The static arguments the check used are written too:
    the donation alone does not make a jit of a function with Python-int
    arguments work.
    """
    if not chosen:
        return None, None
    function = call.function_name
    jit = "nnx.jit" if call.wrapper == "flax.nnx.jit" else "jax.jit"  # nnx.jit takes the same donate_arg*
    named = _parameter_names(call)
    static_positions = sorted(call.static_positions)
    static_keywords = sorted(call.static_names)

    def by_numbers() -> str:
        parts = [function]
        if static_positions:
            parts.append(f"static_argnums={_tuple(static_positions)}")
        if static_keywords:
            parts.append(f"static_argnames={_tuple(static_keywords)}")
        positions = [a.position for a in chosen if a.position is not None]
        keywords = [a.name for a in chosen if a.position is None]
        if positions:
            parts.append(f"donate_argnums={_tuple(positions)}")
        if keywords:
            parts.append(f"donate_argnames={_tuple(keywords)}")
        return f"{jit}({', '.join(parts)})"

    def by_names() -> str | None:
        static_names = [call.positional_names[i] for i in static_positions] + static_keywords
        names = [a.name for a in chosen]
        if any(n not in named for n in names) or any(n not in named for n in static_names):
            return None
        parts = [function]
        if static_names:
            parts.append(f"static_argnames={_tuple(static_names)}")
        parts.append(f"donate_argnames={_tuple(names)}")
        return f"{jit}({', '.join(parts)})"

    numbers, names_form = by_numbers(), by_names()
    if call.user_jit and names_form is not None:
        return names_form, numbers if numbers != names_form else None
    return numbers, names_form if names_form != numbers else None
