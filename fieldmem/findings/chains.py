"""Checked chain steps -> one :class:`~fieldmem.model.chain.Chain`: where in place holds and where it breaks.

A chain (``pkg.model:create,update1,update2``) is checked step by step, each
step like a target, with the previous step's outputs as its arguments, and
once more composed and jitted as one function (the *fused* chain). This
module reads those results — it never compiles, never imports jax and never
prints — and decides, per step:

- ``in-place``: the donated step's verdict is in place;
- ``grows``: the step creates its state (no input of at least the size threshold:
  a scalar, a seed), or every input leaf of at least that size is reused by an
  output, and the only new buffers hold what the state grows by (a
  ``create_field(x)`` that adds leaves to ``x``);
- ``breaks``: an output that could take an input's buffer does not (a dtype
  change, an undonated input, a copy), with the leaf, the reason and the line;
- ``error`` / ``not-checked``: the step failed, or an earlier one did.

Hand-offs compare each leaf's dtype, shape, sharding and layout across a step
(input leaf *j* against output leaf *j* when the step keeps the state's
structure) and between steps (what step *i* returns against what step *i+1*
was compiled to expect).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fieldmem.model.chain import Chain, ChainBreak, ChainCost, ChainStep, HandOff
from fieldmem.model.target import InputInfo, OutputInfo, TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check, Finding
from fieldmem.model.word_sets import ChainStepStatus, Expectation, HandOffCode
from fieldmem.request.target import fused_result_name, step_result_name

__all__ = ["StepOutcome", "analyze_chain", "fused_result_name", "step_result_name"]


@dataclass(frozen=True)
class StepOutcome:
    """One step as the checker saw it: its result, or None when an earlier step failed."""

    function: str
    definition: str | None
    result: TargetResult | None
    # the arguments the step takes besides the state (step_args): not state, so left out of the
    # hand-off checks, of "kept alive" and of whether the step creates its state
    extras: tuple[str, ...] = ()


def _figure(result: TargetResult, variant: str, figure: str) -> int | None:
    found = result.variants.get(variant)
    return getattr(found.memory, figure) if found is not None else None


def _source_of_output(result: TargetResult, output: str) -> str | None:
    if result.verdict is None:
        return None
    for finding in result.verdict.findings:
        if finding.output == output and finding.source:
            return finding.source
    return None


def _aliased_inputs(result: TargetResult) -> set[str]:
    donated = result.variants.get("donated")
    return {a.input for a in donated.aliases} if donated is not None else set()


def _of_argument(path: str, names: Sequence[str]) -> bool:
    """Whether the leaf ``path`` (``g``, ``batch['x']``, ``state.u``) belongs to one of the arguments ``names``."""
    return any(path == n or path.startswith((f"{n}[", f"{n}.")) for n in names)


def _state(result: TargetResult, extras: Sequence[str]) -> list[InputInfo]:
    """The step's input leaves that hold the state: all but those of its extras."""
    return [leaf for leaf in result.inputs if not _of_argument(leaf.path, extras)]


def _changes_within(index: int, function: str, result: TargetResult, inputs: Sequence[InputInfo]) -> list[HandOff]:
    """Leaves the step returns with another dtype, shape, sharding or layout than it was given.

    Leaves are paired by position when the step returns as many leaves as it
    takes (the state keeps its structure); otherwise nothing is paired and
    the step's verdict speaks for it.
    """
    if len(inputs) != len(result.outputs):
        return []
    aliased = _aliased_inputs(result)
    changes: list[HandOff] = []
    for leaf, out in zip(inputs, result.outputs):
        if not leaf.used:
            continue
        source = _source_of_output(result, out.path)
        breaks = leaf.path not in aliased
        for code, before, after in _differences(leaf, out):
            if code == "sharding-change":
                words = f"is returned with another sharding ({before} -> {after})"
            elif code == "layout-change":
                words = f"is returned in another layout ({before} -> {after})"
            else:
                what = "dtype" if code == "dtype-change" else "shape"
                words = f"changes {what} {before} -> {after} as {out.path}"
            effect = (
                f": its {format_bytes(leaf.bytes)} buffer cannot be reused, so {out.path} needs a new one"
                if breaks
                else ", but XLA still reuses its buffer"
            )
            at = f" at {source}" if source else ""
            changes.append(
                HandOff(
                    step=index,
                    code=code,
                    leaf=leaf.path,
                    output=out.path,
                    before=before,
                    after=after,
                    message=f"{function} {words}{at}{effect}",
                    breaks=breaks,
                    source=source,
                )
            )
    return changes


def _differences(leaf: InputInfo, out: OutputInfo) -> list[tuple[HandOffCode, str, str]]:
    found: list[tuple[HandOffCode, str, str]] = []
    if leaf.dtype != out.dtype:
        found.append(("dtype-change", leaf.dtype, out.dtype))
    if tuple(leaf.shape) != tuple(out.shape):
        found.append(("shape-change", _shape(leaf.shape), _shape(out.shape)))
    if leaf.sharding and out.sharding and leaf.sharding != out.sharding:
        found.append(("sharding-change", leaf.sharding, out.sharding))
    if leaf.layout and out.layout and leaf.layout != out.layout:
        found.append(("layout-change", leaf.layout, out.layout))
    return found


def _shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _changes_between(index: int, function: str, previous: TargetResult, inputs: Sequence[InputInfo]) -> list[HandOff]:
    """Leaves step ``index - 1`` returns otherwise than step ``index`` was compiled to take them."""
    if len(previous.outputs) != len(inputs):
        return []
    changes: list[HandOff] = []
    for out, leaf in zip(previous.outputs, inputs):
        placements: tuple[tuple[HandOffCode, str | None, str | None], ...] = (
            ("reshard", out.sharding, leaf.sharding),
            ("relayout", out.layout, leaf.layout),
        )
        for code, before, after in placements:
            if not before or not after or before == after:
                continue
            what = "sharding" if code == "reshard" else "layout"
            changes.append(
                HandOff(
                    step=index,
                    code=code,
                    leaf=leaf.path,
                    output=None,
                    before=before,
                    after=after,
                    message=(
                        f"{function} expects {leaf.path} in {what} {after}, but the previous step returns "
                        f"{out.path} in {before}: jax moves it between the calls, into a new buffer, "
                        "so its donation cannot carry over"
                    ),
                )
            )
    return changes


def _kept_alive(result: TargetResult, inputs: Sequence[InputInfo], min_bytes: int) -> tuple[str, ...]:
    donated = result.variants.get("donated")
    if donated is None:
        return ()
    aliased = _aliased_inputs(result)
    return tuple(
        leaf.path for leaf in inputs if leaf.used and leaf.bytes >= max(min_bytes, 1) and leaf.path not in aliased
    )


def _errors(result: TargetResult) -> list[Finding]:
    return [f for f in result.verdict.findings if f.severity == "error"] if result.verdict else []


def _creates(inputs: Sequence[InputInfo], min_bytes: int) -> bool:
    """Whether the step creates its state: no input it uses is of at least the size threshold
    (a scalar, a seed, a shape), so every output it returns is new by nature."""
    return not any(leaf.used and leaf.bytes >= max(min_bytes, 1) for leaf in inputs)


# what a step that creates its state may find about its outputs: each is written to a new buffer,
# or computed into a temporary and copied into its output (two outputs of one value)
_CREATING = ("new-buffer", "output-copy")


def _status(result: TargetResult, kept_alive: tuple[str, ...], creates: bool) -> ChainStepStatus:
    if result.status != "ok" or result.verdict is None:
        return "error"
    if result.verdict.in_place:
        # new outputs (a created field, fresh logits) are not a break: the step grows
        new_outputs = any(f.code == "new-output" for f in result.verdict.findings)
        return "grows" if new_outputs and not kept_alive else "in-place"
    errors = _errors(result)
    if not kept_alive and all(f.code in (_CREATING if creates else ("new-buffer",)) for f in errors):
        return "grows"
    return "breaks"


def _step(
    index: int, outcome: StepOutcome, chain_name: str, previous: TargetResult | None, min_bytes: int
) -> ChainStep:
    name = step_result_name(chain_name, index, outcome.function)
    result = outcome.result
    if result is None:
        return ChainStep(
            index=index,
            function=outcome.function,
            result=name,
            status="not-checked",
            summary="not checked: an earlier step failed, so its arguments are unknown",
            definition=outcome.definition,
        )
    if result.status != "ok":
        message = result.error.message if result.error else "could not be checked"
        return ChainStep(
            index=index,
            function=outcome.function,
            result=name,
            status="error",
            summary=message,
            definition=outcome.definition,
        )
    state = _state(result, outcome.extras)
    kept = _kept_alive(result, state, min_bytes)
    creates = _creates(state, min_bytes)
    # a step that creates its state hands nothing on from its inputs: a seed is not the state
    handoffs = [] if creates else _changes_within(index, outcome.function, result, state)
    if previous is not None and previous.status == "ok":
        handoffs = _changes_between(index, outcome.function, previous, state) + handoffs
    status = _status(result, kept, creates)
    argument_bytes = _figure(result, "donated", "argument_bytes")
    output_bytes = _figure(result, "donated", "output_bytes")
    if status == "in-place":
        summary = result.verdict.summary if result.verdict else "in place"
    elif status == "grows" and creates:
        threshold = format_bytes(max(min_bytes, 1))
        summary = (
            f"creates the state: no input of at least {threshold} to reuse, so it allocates its outputs "
            f"({format_bytes(output_bytes or 0)} per device)"
        )
    elif status == "grows":
        grown = (output_bytes or 0) - (argument_bytes or 0)
        summary = (
            f"reuses every input buffer and allocates only what the state grows by ({format_bytes(grown)} per device)"
        )
    else:
        summary = result.verdict.summary if result.verdict else "not in place"
    return ChainStep(
        index=index,
        function=outcome.function,
        result=name,
        status=status,
        summary=summary,
        definition=outcome.definition,
        argument_bytes=argument_bytes,
        output_bytes=output_bytes,
        footprint={v: _figure(result, v, "footprint_bytes") for v in ("plain", "donated")},
        live_peak={v: _figure(result, v, "live_peak_bytes") for v in ("plain", "donated")},
        kept_alive=kept,
        handoffs=tuple(handoffs),
        extras=outcome.extras,
        transfer_bytes=result.transfers.bytes_per_call if result.transfers is not None else 0,
    )


def _first_break(steps: Sequence[ChainStep], outcomes: Sequence[StepOutcome]) -> ChainBreak | None:
    for step, outcome in zip(steps, outcomes):
        if step.status not in ("breaks", "error"):
            continue
        if step.status == "error":
            return ChainBreak(step=step.index, function=step.function, reason=step.summary, source=step.definition)
        breaking = [h for h in step.handoffs if h.breaks]
        if breaking:
            h = breaking[0]
            return ChainBreak(step.index, step.function, h.message, leaf=h.leaf, source=h.source)
        errors = _errors(outcome.result) if outcome.result is not None else []
        if errors:
            f = errors[0]
            return ChainBreak(step.index, step.function, f.message, leaf=f.input or f.output, source=f.source)
        return ChainBreak(step.index, step.function, step.summary, source=step.definition)
    return None


def _costs(steps: Sequence[ChainStep], fused: TargetResult | None) -> tuple[ChainCost, ...]:
    costs: list[ChainCost] = []
    checked = [s for s in steps if s.footprint]
    if checked and len(checked) == len(steps):

        def worst(figures: str, variant: str) -> int | None:
            values = [getattr(s, figures).get(variant) for s in checked]
            return max(values) if all(v is not None for v in values) else None

        donated = [s.footprint.get("donated") for s in checked]
        worst_step = (
            max(range(len(checked)), key=lambda k: donated[k] or 0) if all(v is not None for v in donated) else None
        )
        costs.append(
            ChainCost(
                layout="steps",
                plain_footprint=worst("footprint", "plain"),
                donated_footprint=worst("footprint", "donated"),
                plain_live_peak=worst("live_peak", "plain"),
                donated_live_peak=worst("live_peak", "donated"),
                worst_step=checked[worst_step].index if worst_step is not None else None,
            )
        )
    if fused is not None and fused.status == "ok":
        costs.append(
            ChainCost(
                layout="fused",
                plain_footprint=_figure(fused, "plain", "footprint_bytes"),
                donated_footprint=_figure(fused, "donated", "footprint_bytes"),
                plain_live_peak=_figure(fused, "plain", "live_peak_bytes"),
                donated_live_peak=_figure(fused, "donated", "live_peak_bytes"),
            )
        )
    return tuple(costs)


def _cost_summary(costs: Sequence[ChainCost], steps: Sequence[ChainStep], min_bytes: int = 0) -> str | None:
    by_layout = {c.layout: c for c in costs}
    separate, fused = by_layout.get("steps"), by_layout.get("fused")
    if separate is None or fused is None:
        return None
    if separate.donated_footprint is None or fused.donated_footprint is None:
        return None
    worst = ""
    if separate.worst_step is not None:
        worst = f" (step {separate.worst_step + 1}, {steps[separate.worst_step].function})"
    difference = fused.donated_footprint - separate.donated_footprint
    if abs(difference) < max(min_bytes, 1):  # a difference below the size threshold is no difference
        verdict = "the same either way" + (f" (within {format_bytes(min_bytes)})" if difference else "")
    elif difference > 0:
        verdict = f"fusing costs {format_bytes(difference)} more"
    else:
        verdict = f"fusing saves {format_bytes(-difference)}"
    return (
        f"with donation, the chain as one jit needs {format_bytes(fused.donated_footprint)} at once, "
        f"as separate jitted steps at most {format_bytes(separate.donated_footprint)}{worst}: {verdict}"
    )


def _summary(steps: Sequence[ChainStep], first_break: ChainBreak | None) -> str:
    n = len(steps)
    if first_break is not None:
        at = f" at {first_break.source}" if first_break.source and first_break.source not in first_break.reason else ""
        what = "cannot be checked" if steps[first_break.step].status == "error" else "breaks in place"
        return f"{what} at step {first_break.step + 1} of {n} ({first_break.function}){at}: {first_break.reason}"
    growing = [s for s in steps if s.status == "grows"]
    summary = f"in place along all {n} steps with donation"
    if growing:
        names = ", ".join(f"{s.index + 1} ({s.function})" for s in growing)
        summary += f"; step {names} only allocate{'s' if len(growing) == 1 else ''} what the state grows by"
    return summary


def analyze_chain(
    *,
    target: str,
    name: str,
    outcomes: Sequence[StepOutcome],
    fused: TargetResult | None,
    expect: Expectation,
    min_bytes: int,
) -> Chain:
    """The chain's verdict from its checked steps (in order) and its fused compile."""
    steps: list[ChainStep] = []
    previous: TargetResult | None = None
    for index, outcome in enumerate(outcomes):
        step = _step(index, outcome, name, previous, min_bytes)
        before = steps[-1].footprint.get("donated") if steps else None
        now = step.footprint.get("donated")
        if before is not None and now is not None:
            step = replace(step, grows_by=now - before)
        steps.append(step)
        previous = outcome.result
    first_break = _first_break(steps, outcomes)
    in_place = first_break is None and all(s.status in ("in-place", "grows") for s in steps)
    summary = _summary(steps, first_break)
    if in_place and fused is not None and fused.verdict is not None and not fused.verdict.in_place:
        # the steps and the fused program are two programs: a fused row that is not in place says so here
        summary += f"; fused into one jit it is not ({fused_result_name(name)}: {fused.verdict.summary})"
    costs = _costs(steps, fused)
    checks: tuple[Check, ...] = ()
    if expect == "in-place":
        checks = (
            Check(
                name="expect-in-place",
                passed=in_place,
                message=("the chain is in place" if in_place else f"expected in place, but the chain {summary}"),
            ),
        )
    return Chain(
        target=target,
        name=name,
        in_place=in_place,
        summary=summary,
        steps=tuple(steps),
        fused=fused_result_name(name) if fused is not None else None,
        first_break=first_break,
        costs=costs,
        cost_summary=_cost_summary(costs, steps, min_bytes),
        expect=expect,
        checks=checks,
        transfer_bytes=(
            sum(s.transfer_bytes or 0 for s in steps) if all(s.transfer_bytes is not None for s in steps) else None
        ),
    )
