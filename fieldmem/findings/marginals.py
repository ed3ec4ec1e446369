"""What each suggested argument is worth given the others (its ``marginal_bytes``): the footprint of
the suggestion without it minus the suggestion's, measured with one compile more per argument (up
to :data:`MARGINAL_COMPILES`), and the note where the marginals do not add up to the headline.

Part of the advisor (:mod:`fieldmem.findings.advisor`); it never imports jax and never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fieldmem.findings.advice_words import spec_text
from fieldmem.findings.donation_outcomes import DynamicArgument, compile_spec
from fieldmem.findings.variant import analyze_variant
from fieldmem.model.errors import FieldmemError
from fieldmem.model.readings import CompiledVariant
from fieldmem.model.target import Variant
from fieldmem.model.units import format_bytes
from fieldmem.xla import hlo

# the most suggested arguments whose marginal saving is measured, one compile each: past it, the
# suggestion's compiles would grow with the argument count, and the marginals are left unmeasured
MARGINAL_COMPILES = 4


def _footprint(variant: Variant | None) -> int | None:
    return variant.memory.footprint_bytes if variant is not None else None


def marginal_footprints(
    chosen: list[DynamicArgument],
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
            spec = spec_text(rest)
            tried.append(spec)
            try:
                compiled = compile_spec(rest, fast, compile_donation)
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


def note_interactions(
    chosen: Sequence[DynamicArgument],
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
