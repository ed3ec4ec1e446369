"""The advisor's suggestion in words: each argument's and leaf's advice, the summary, the donations
jax would refuse, and the ``jax.jit`` code that makes the suggestion (:mod:`fieldmem.findings.advisor`
decides what is suggested). It never imports jax and never prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fieldmem.findings.donation_outcomes import DynamicArgument, LeafOutcome
from fieldmem.findings.program import ProgramLeaves
from fieldmem.findings.transfers import given_again
from fieldmem.model.advice import ArgumentAdvice, LeafAdvice
from fieldmem.model.readings import CallShape, InputLeaf
from fieldmem.model.target import Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.word_sets import ArgumentCode

_ARGUMENT_REASONS = {
    "unused": "unused: the function never reads it, so jit drops it and no output can reuse it",
    "no-output-of-size": "no output of its leaves' shape/dtype",
    "outputs-taken": "every output of its leaves' sizes already reuses another donated argument",
    "not-reused": "XLA did not reuse its leaves although outputs have their sizes",
    "copied": "read after the output is written: XLA would copy its leaves",
    "via-temporary": "XLA would write the outputs into temporaries and copy them back: donating saves nothing",
}


def _leaf_advice(leaf: InputLeaf, outcome: LeafOutcome, program: ProgramLeaves, outputs: dict[int, str]) -> LeafAdvice:
    return LeafAdvice(
        input=leaf.path,
        input_index=leaf.index,
        bytes=program.input_bytes[leaf.index],
        code=outcome.code,
        reason=outcome.reason,
        output=outputs.get(outcome.output) if outcome.output is not None else None,
        saved_bytes=outcome.saved,
    )


def argument_advice(
    argument: DynamicArgument,
    outcomes: dict[int, LeafOutcome],
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


def spec_text(arguments: Sequence[DynamicArgument]) -> str:
    """The ``--donate`` value for these arguments: names, or numbers for unnamed positions."""
    if not arguments:
        return "none"
    return ",".join(a.name if a.name.isidentifier() else str(a.position) for a in arguments)


def figure_change(plain: Variant, other: Variant | None, figure: str) -> str:
    after = getattr(other.memory, figure) if other is not None else None
    return f"{figure} {format_bytes(getattr(plain.memory, figure))} → {format_bytes(after)}"


def refused_words(
    chosen: Sequence[DynamicArgument], verification: Variant | None, shared: Mapping[int, tuple[InputLeaf, ...]]
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


def advice_summary(
    chosen: Sequence[DynamicArgument],
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


def is_named(call: CallShape, argument: DynamicArgument) -> bool:
    """Whether ``donate_argnames`` can name this argument (a real parameter name, not ``args[1]``)."""
    return argument.position is None or argument.name in _parameter_names(call)


def _tuple(items: Sequence[object]) -> str:
    parts = [f'"{i}"' if isinstance(i, str) else str(i) for i in items]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def jit_code(call: CallShape, chosen: Sequence[DynamicArgument]) -> tuple[str | None, str | None]:
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
