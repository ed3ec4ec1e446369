"""What donating each array leaf does, for the advisor (:mod:`fieldmem.findings.advisor`): observed
in a compile that donated it (an output reuses its buffer, the donation is unusable and why, or XLA
adds a copy that cancels the saving), else predicted by size; and which arguments' donation pays.

JAX donates whole arguments, so the leaves are grouped by argument (:class:`DynamicArgument`). It never
imports jax and never prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fieldmem.findings.pairing import pairing_key, same_path_inputs
from fieldmem.findings.program import ProgramLeaves
from fieldmem.findings.variant import donation_obstacle
from fieldmem.model.copies import Copy
from fieldmem.model.readings import CallShape, CompiledVariant, InputLeaf
from fieldmem.model.target import Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.word_sets import LeafCode


@dataclass(frozen=True)
class DynamicArgument:
    """One dynamic argument of the call and its array leaves, in report order."""

    name: str
    position: int | None  # None: passed by keyword
    leaves: tuple[InputLeaf, ...]


@dataclass(frozen=True)
class LeafOutcome:
    """What donating one leaf does: observed in a compile, or predicted by size."""

    code: LeafCode
    reason: str
    output: int | None = None  # index of the output reusing the buffer
    saved: int = 0


def dynamic_arguments(call: CallShape, leaves: Sequence[InputLeaf]) -> list[DynamicArgument]:
    """Dynamic arguments in report order (positional, then keywords as given), with their leaves."""
    by_argument: dict[str, list[InputLeaf]] = {}
    for leaf in leaves:
        by_argument.setdefault(leaf.argument, []).append(leaf)
    result = []
    for position, name in enumerate(call.positional_names):
        if position not in call.static_positions and name in by_argument:
            result.append(DynamicArgument(name, position, tuple(by_argument[name])))
    for key in call.keyword_names:
        if key not in call.static_names and key in by_argument:
            result.append(DynamicArgument(key, None, tuple(by_argument[key])))
    return result


def leaves_of(argument: DynamicArgument, variant: CompiledVariant) -> list[InputLeaf]:
    indices = {leaf.index for leaf in argument.leaves}
    return [leaf for leaf in variant.inputs if leaf.index in indices]


def compile_spec(
    arguments: Sequence[DynamicArgument],
    fast: bool,
    compile_donation: Callable[..., CompiledVariant],
) -> CompiledVariant:
    """The call compiled donating exactly ``arguments``: by position where they have one, else by name."""
    return compile_donation(
        [a.position for a in arguments if a.position is not None],
        [a.name for a in arguments if a.position is None],
        fast=fast,
    )


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


def observed_outcomes(
    compiled: CompiledVariant,
    variant: Variant,
    plain: Variant,
    program: ProgramLeaves,
) -> dict[int, LeafOutcome]:
    """The outcome of every leaf ``compiled`` donated, as that compile shows it.

    A reused buffer saves its bytes minus the copies the donation added for it:
    a copy of the input itself (it is still read after the output is written)
    or of a temporary into the reused output (the output is not written in place).
    """
    added = _added_copies(plain, variant)
    aliases = {a.input_index: a for a in variant.aliases}
    unusable = {u.input_index: u for u in variant.unusable_donations}
    result: dict[int, LeafOutcome] = {}
    for leaf in compiled.inputs:
        if not leaf.donated:
            continue
        alias = aliases.get(leaf.index)
        if alias is None:
            found = unusable.get(leaf.index)
            if found is not None:
                result[leaf.index] = LeafOutcome(found.code, found.reason)
            else:  # pragma: no cover - analysis lists every donated leaf that is not aliased
                code, reason = donation_obstacle(leaf, program, {})
                result[leaf.index] = LeafOutcome(code, reason)
            continue
        of_input = [c for c in added if c.kind == "parameter" and c.input_index == leaf.index]
        # a staging copy moves a value through another memory space (a TPU's VMEM): it makes
        # no second buffer of it, so it takes nothing from what the donation saves
        into_output = [c for c in added if c.kind not in ("parameter", "staging") and c.output == alias.output]
        saved = alias.bytes - sum(c.bytes for c in of_input + into_output)
        if saved > 0:
            outcome = LeafOutcome("reused", f"{alias.output} reuses its buffer", alias.output_index, saved)
        elif of_input:
            copy = of_input[0]
            outcome = LeafOutcome(
                "copied",
                f"it is read after the output is written: XLA would copy it ({format_bytes(copy.bytes)}"
                f"{_at(copy.source)}), so donating it saves nothing",
                alias.output_index,
                saved,
            )
        else:
            copy = into_output[0]
            outcome = LeafOutcome(
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


def predict(
    arguments: Sequence[DynamicArgument],
    observed: dict[int, LeafOutcome],
    program: ProgramLeaves,
    outputs: dict[int, str],
) -> dict[int, LeafOutcome]:
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
    outcomes: dict[int, LeafOutcome] = {}

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
                    else LeafOutcome("reused", f"{outputs[out]} can reuse its buffer", out, size)
                )
    for leaf in leaves:
        if leaf.index not in outcomes:
            code, reason = donation_obstacle(leaf, program, taken)
            outcomes[leaf.index] = LeafOutcome(code, reason)
    return outcomes


def _free_output(
    leaf: InputLeaf,
    program: ProgramLeaves,
    taken: dict[int, str],
    sources: dict[int, frozenset[int]] | None,
) -> int | None:
    """A free output of the leaf's size (computed from it, when ``sources`` is given).

    Among several: the one that pairs best with the leaf
    (:func:`~fieldmem.findings.pairing.pairing_key`: of the same path,
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


def _saved(argument: DynamicArgument, outcomes: dict[int, LeafOutcome]) -> int:
    return sum(outcomes[leaf.index].saved for leaf in argument.leaves if leaf.index in outcomes)


def paying(
    arguments: Iterable[DynamicArgument], outcomes: dict[int, LeafOutcome], min_bytes: int
) -> list[DynamicArgument]:
    """The arguments whose donation saves at least ``min_bytes`` (and more than nothing)."""
    return [a for a in arguments if _saved(a, outcomes) >= max(min_bytes, 1)]


def saves_nothing(measured: dict[str, int | None]) -> bool:
    figures = [measured.get("footprint_bytes"), measured.get("live_peak_bytes")]
    known = [f for f in figures if f is not None]
    return bool(known) and all(f <= 0 for f in known)
