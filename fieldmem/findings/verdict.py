"""The verdict rule: from a target's findings to its verdict, its headline, the order of its reasons and
whether each ``--expect`` passes. Written once; the analysis, the run check, chains and every renderer
take the verdict from here, and ``docs/verdicts.md`` shows :data:`RULES` (a test holds the two together).

The rule reads only the findings (each with its severity, its code and the bytes it costs) and whether any
output reuses a donated buffer. Which findings break in place (severity ``error``) is decided where each
finding is made (:mod:`fieldmem.findings.copy_findings`, :mod:`fieldmem.findings.analysis`,
:mod:`fieldmem.findings.runcheck`, :mod:`fieldmem.findings.probecheck`); :data:`RULES`
names, per row, the codes that make it. The first row that holds decides:

1. **does not fit**: the donated program needs more memory per device than the device has (its capacity is
   known: a deviceless GPU or TPU kind, or a local device whose jax allocator gives a limit), or the
   compiler refused it for that. Nothing else about it matters before it fits; its other findings stay.
2. **not in place**: a finding breaks in place (a copy of state, a carry copied every iteration, a state
   output written to a new buffer, a state that grows, a donation the user asked for that nothing can use,
   a donation jax dropped, a donation lost because jax moves the leaf first, a donated array given twice in
   the call, which jax refuses, an alias the run did not confirm).
3. **nothing to update in place**: nothing breaks and no output reuses a donated buffer, because none can
   (a reduction, a loss) or the function never reads what is donated (jit drops it: a function returning
   ``None``, or new arrays only): donating does nothing here, and ``--expect in-place`` fails with the fix
   (don't donate it).
4. **in place as written**: nothing the code can change breaks, the outputs that can reuse a donated buffer
   do, and the compiler still keeps a copy by its own choice (a ``compiler-copy`` warning: a donated input
   whose reads could all come before its update, a slice update written through a temporary). The code does
   everything it can; ``--expect in-place`` passes, and the headline names the compiler and how to check the
   hardware the user trains on.
5. **in place**: nothing breaks and the outputs that can reuse a donated buffer do.

New outputs (fresh logits, a loss) are reported with their bytes and decide nothing on their own: only
one at least as large as the state it replaces is a finding that breaks (``state-grows``).

This module never prints and never imports jax.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Finding, Verdict
from fieldmem.model.word_sets import IN_PLACE_KINDS, Expectation, FindingCode, VerdictKind

__all__ = [
    "CHOICE_CODES",
    "FIT_CODES",
    "RULES",
    "Rule",
    "decide",
    "expectation_met",
    "expectation_words",
    "judge",
    "rank",
]

#: the finding codes that make a verdict "does not fit" (as errors); every other error breaks in place
FIT_CODES: tuple[FindingCode, ...] = ("exceeds-device-memory",)
#: the finding codes of a copy the compiler keeps by its own choice (warnings): in place as written
CHOICE_CODES: tuple[FindingCode, ...] = ("compiler-copy",)


@dataclass(frozen=True)
class Rule:
    """One row of the verdict table: the verdict, when it holds, the finding codes that make it (as errors;
    for in place as written, the warnings of the compiler's choice; empty for the rows that hold when nothing
    breaks), an example, and whether ``--expect in-place`` and ``--expect fits`` pass."""

    kind: VerdictKind
    when: str
    codes: tuple[FindingCode, ...]
    example: str

    @property
    def expect_in_place_passes(self) -> bool:
        return expectation_met(self.kind, "in-place")

    @property
    def expect_fits_passes(self) -> bool:
        """Whether ``--expect fits`` can pass on this row: where the device's memory and the footprint are
        known and within it (the check says which; unknown fails)."""
        return expectation_met(self.kind, "fits")


#: The verdict table, in the order it is read: the first row that holds decides.
RULES: tuple[Rule, ...] = (
    Rule(
        "does-not-fit",
        "the donated program needs more memory per device than the device has: its footprint (where XLA gives "
        "none, its arguments and outputs alone) is above the memory of the device kind compiled for without the "
        "device (`gpu:h100`, `tpu:v5e`) or of jax's allocator on a local GPU or TPU, or the compiler refused it "
        "for that; whether it is in place is still said by its other findings",
        ("exceeds-device-memory",),
        "a 1 TiB argument with `--backend gpu:h100`: needs 1.0 TiB per device; an H100 has 79.1 GiB",
    ),
    Rule(
        "not-in-place",
        "a state input is copied because the code keeps its old value: donated but still copied (its old value "
        "is returned beside the update, or read by something that also needs the update, which the finding says), "
        "or not donated and copied because it is updated",
        ("parameter-copy",),
        "`return x.at[0].set(1.0), x` with `x` donated (the old value is returned beside the new one)",
    ),
    Rule(
        "not-in-place",
        "a loop copies its carry (or a value of its body) every iteration",
        ("loop-copy",),
        "`fori_loop(0, n, lambda i, u: u + jnp.roll(u, 1), u)` where the new carry is computed while the old is read",
    ),
    Rule(
        "not-in-place",
        "an output is computed into a temporary and copied into its buffer, where the code does more than write "
        "a slice of it",
        ("output-copy",),
        "`return z, z` (one value returned twice: the second output is a copy of the first)",
    ),
    Rule(
        "not-in-place",
        "a state output is written to a new buffer although an input could hold it: the input is not donated, "
        "or a dtype change prevents the reuse",
        ("new-buffer",),
        "`jax.jit(step)` without `donate_argnums`; `return x.astype(jnp.bfloat16)` with `x` donated",
    ),
    Rule(
        "not-in-place",
        "the state grows: an output at least as large as a donated input nothing can reuse is a new buffer",
        ("state-grows",),
        "`return jnp.concatenate([x, x])` with `x` donated",
    ),
    Rule(
        "not-in-place",
        "a donation you chose by argument (not a blanket: no donation given, or --donate all) is unusable while other outputs reuse theirs (jax warns "
        "'Some donated buffers were not usable'): don't donate it",
        ("unusable-donation",),
        "`jax.jit(step, donate_argnums=(0, 1))` where argument 1 is the batch",
    ),
    Rule(
        "not-in-place",
        "jax dropped the donation (a backend or a wrapper that cannot donate)",
        ("donation-dropped",),
        "a donation on a backend whose jax does not implement it",
    ),
    Rule(
        "not-in-place",
        "a donated leaf the plan reuses is given on another device, sharding or memory kind than the program "
        "takes it: jax moves it first and donates the moved copy, so its own buffer stays alive",
        ("resharded-donation",),
        "`jax.jit(step, in_shardings=s, donate_argnums=0)` over 4 devices, given `jnp.ones(n)` on one device",
    ),
    Rule(
        "not-in-place",
        "one array is given twice in the call and jax donates it where an output reuses it: jax refuses a call "
        "that donates a buffer it also reads, so the donated call fails with these arguments",
        ("shared-donation",),
        "`update(x, x)` for `jax.jit(update, donate_argnums=0)` where `update(x, batch)` returns `x + batch`",
    ),
    Rule(
        "not-in-place",
        "with `--run`: an alias the plan predicts did not happen at run time",
        ("run-alias-missing",),
        "a donated leaf the check could not place (a `ShapeDtypeStruct` without a sharding) that the run's "
        "arguments give elsewhere than the program takes it, so jax donates a moved copy",
    ),
    Rule(
        "nothing-to-update",
        "nothing breaks and no output reuses a donated buffer, because no output can hold one, or the function "
        "never reads what is donated (jit drops it; it may return `None`): donating does nothing here (don't "
        "donate it)",
        (),
        "`return x.sum(axis=0)` or a loss `return jnp.mean((model(params, x) - y) ** 2)` with `params` donated; "
        "`return jnp.zeros_like(x)`",
    ),
    Rule(
        "in-place-as-written",
        "nothing the code can change breaks, and every output that can reuse a donated buffer does, but the "
        "compiler keeps a copy by its own choice: a donated input although every read of its old value could "
        "come before its update, or a slice update written through a temporary (a warning naming the compiler "
        "and how to check the hardware you train on: `--backend tpu:v5e`, `[tool.fieldmem] backends`)",
        ("compiler-copy",),
        "`cache.at[:, pos].set(kv)` with `cache` donated on XLA:CPU, which writes the new cache through a "
        "temporary; an optax AdamW step on XLA:CPU that copies a donated kernel before updating it",
    ),
    Rule(
        "in-place",
        "nothing breaks, and every output that can reuse a donated buffer does; new outputs (fresh logits, a "
        "loss) are reported with their bytes",
        (),
        "`params, opt_state = step(params, opt_state, grads)` with `donate_argnums=(0, 1)`",
    ),
)

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def rank(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """``findings`` in the order every report lists them: what breaks in place first, then warnings, then
    notes; within each, the most bytes at stake first (a finding without a size after those with one);
    findings that tie keep the order they were found in."""
    return tuple(
        sorted(findings, key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), -(f.bytes if f.bytes is not None else -1)))
    )


def decide(findings: Iterable[Finding], reused: bool) -> VerdictKind:
    """The verdict :data:`RULES` give: ``reused``, whether any output reuses a donated buffer."""
    findings = list(findings)
    errors = [f for f in findings if f.severity == "error"]
    if any(f.code in FIT_CODES for f in errors):
        return "does-not-fit"
    if errors:
        return "not-in-place"
    if not reused:
        return "nothing-to-update"
    return "in-place-as-written" if any(f.code in CHOICE_CODES for f in findings) else "in-place"


def expectation_met(kind: VerdictKind | None, expect: Expectation, fit_known: bool = True) -> bool:
    """Whether ``--expect expect`` passes on a verdict of ``kind`` (its check fails, and the run exits 1,
    otherwise). ``fit_known``: the device's memory and the program's footprint are both known (``fits``
    never passes on what is not known)."""
    if expect == "in-place":
        return kind in IN_PLACE_KINDS
    if expect == "fits":
        return fit_known and kind != "does-not-fit"
    return True


def _more(rest: Sequence[Finding]) -> str:
    if not rest:
        return ""
    sized = [f.bytes for f in rest if f.bytes is not None]
    total = f", {format_bytes(sum(sized))} more at stake" if sized else ""
    return f" (and {len(rest)} more{total})"


def judge(
    findings: Iterable[Finding], reused: bool, in_place_summary: str, nothing_summary: str, prefix: str = "not in place"
) -> Verdict:
    """The verdict of ``findings`` by :data:`RULES`, with them ranked (:func:`rank`) and the headline.

    Not in place: the headline is ``prefix``, then the finding that breaks in place with the most bytes at
    stake, then how many more there are and their bytes. The other verdicts take the summary given for them
    (``in_place_summary``, ``nothing_summary``), which the caller writes from the figures.
    """
    ranked = rank(findings)
    kind = decide(ranked, reused)
    if kind == "does-not-fit":
        fit = next(f for f in ranked if f.severity == "error" and f.code in FIT_CODES)
        errors = [f for f in ranked if f.severity == "error" and f.code not in FIT_CODES]
        breaks = f"; {prefix} either: {errors[0].message}{_more(errors[1:])}" if errors else ""
        summary = f"does not fit: {fit.message}{breaks}"
    elif kind == "not-in-place":
        errors = [f for f in ranked if f.severity == "error"]
        summary = f"{prefix}: {errors[0].message}{_more(errors[1:])}"
    elif kind == "nothing-to-update":
        summary = nothing_summary
    elif kind == "in-place-as-written":
        chosen = [f for f in ranked if f.code in CHOICE_CODES]
        summary = f"in place as written; {chosen[0].message}{_more(chosen[1:])}"
    else:
        summary = in_place_summary
    return Verdict(in_place=kind in IN_PLACE_KINDS, summary=summary, findings=ranked, kind=kind)


def expectation_words(verdict: Verdict) -> str:
    """The message of the ``expect-in-place`` check on ``verdict``."""
    if verdict.kind == "in-place":
        return "in place with donation"
    if verdict.kind == "in-place-as-written":
        chosen = [f for f in verdict.findings if f.code in CHOICE_CODES]
        copies = f" ({len(chosen)} cop{'ies' if len(chosen) != 1 else 'y'} the compiler's choice)" if chosen else ""
        return f"in place with donation as written{copies}"
    if verdict.kind == "does-not-fit":
        return f"expected in place with donation, but it {verdict.summary}"
    if verdict.kind == "nothing-to-update":
        donated = [f for f in verdict.findings if f.code == "unusable-donation" and f.input]
        fix = (
            f"don't donate {', '.join(dict.fromkeys(f.input for f in donated if f.input))}, or expect any"
            if donated
            else "expect any"
        )
        return (
            f"expected in place, but there is nothing to update in place (no output can reuse a donated buffer): {fix}"
        )
    errors = [f for f in verdict.findings if f.severity == "error"]
    if errors:
        return f"expected in place with donation, but it is not: {errors[0].message}{_more(errors[1:])}"
    return "expected in place with donation, but it is not (see the findings)"
