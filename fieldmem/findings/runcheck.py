"""What a run showed (``--run``) against what the compile planned: aliases by buffer identity, device memory.

:func:`apply_run` takes a checked :class:`~fieldmem.model.target.TargetResult` and
the readings of one call of each variant (:class:`fieldmem.model.readings.RunReading`:
per-shard buffer addresses of every input leaf before the call and every
output leaf after it, which inputs jax deleted, ``memory_stats()`` per
device) and returns the result with a :class:`~fieldmem.model.run.RunCheck` per
variant and the verdict revised:

- every alias of the plan is *confirmed* when the output's buffer is the
  donated input's on every shard **and** jax deleted that input (the
  runtime consumed the donation); one that is not is an error finding
  (``run-alias-missing``), so ``--expect in-place`` fails; one whose input
  or output has no device buffer to read (a Python scalar at call time) is
  *not comparable*, an info finding (``run-alias-not-comparable``) that says
  why and never fails the run;
- an output found in an input's buffer without an alias in the plan is
  reported (``run-unplanned-alias``);
- what jax's transfer guard logged copying the arguments onto the devices
  for the donated call is held against the plan's transfers
  (:func:`fieldmem.findings.transfers.transfer_run`; ``run-transfer-mismatch``
  where they differ);
- where the backend has device memory statistics, the measured peak per
  device is held against the static footprint; where it has none (cpu) the
  figures are None with the reason, never 0.

It never imports jax and never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fieldmem.findings.transfers import transfer_run
from fieldmem.findings.verdict import expectation_met, expectation_words, judge, rank
from fieldmem.model.readings import DeviceStats, RunReading, device_bytes, plan_call
from fieldmem.model.run import AliasCheck, DeviceMemory, RunCheck
from fieldmem.model.target import InputInfo, TargetResult, Variant
from fieldmem.model.transfers import Transfers
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Finding

__all__ = [
    "PEAK_TOLERANCE",
    "apply_not_run",
    "apply_run",
    "plan_words",
    "planned_device_bytes",
    "run_check",
]


# a measured device peak more than this fraction, and more than PEAK_TOLERANCE_BYTES, above the plan is
# reported: on a TPU v5e a few donated programs' calls measured 77 to 113 KiB above their plan, the same in every
# run (not XLA's temporaries, not the code: hardware/results/tpu-check.md), 13.6% of a 0.56 MiB program
PEAK_TOLERANCE = 0.10
PEAK_TOLERANCE_BYTES = 1 << 20


def _shards(pointers: tuple[int, ...] | None) -> str:
    return "no device buffer" if pointers is None else f"{len(pointers)} shard{'s' if len(pointers) != 1 else ''}"


def run_check(result: TargetResult, variant: Variant, reading: RunReading) -> RunCheck:
    """The run of ``variant`` (one of ``result``'s) read against its plan."""
    # the report's inputs say what the donated variant donates; the plain one donates nothing
    donated = [leaf for leaf in result.inputs if leaf.donated] if variant.name == "donated" else []
    deleted = tuple(leaf.path for leaf in donated if leaf.index < len(reading.deleted) and reading.deleted[leaf.index])
    kept = tuple(
        leaf.path for leaf in donated if leaf.index < len(reading.deleted) and reading.deleted[leaf.index] is False
    )
    devices = _device_memory(variant, reading, result.inputs)
    measured = [d for d in devices if d.measured_peak is not None]
    worst = max(measured, key=lambda d: d.measured_peak or 0).device if measured else None
    return RunCheck(
        worst_device=worst,
        aliases=_alias_checks(variant, reading, result.transfers if variant.name == "donated" else None),
        unplanned=_unplanned_aliases(result, variant, reading),
        deleted=deleted,
        kept=kept,
        devices=devices,
        seconds=reading.seconds,
    )


def _reason(reasons: tuple[str | None, ...], index: int) -> str:
    why = reasons[index] if index < len(reasons) else None
    return why or "a leaf with no device buffer the run could read"


def _alias_checks(variant: Variant, reading: RunReading, transfers: Transfers | None = None) -> tuple[AliasCheck, ...]:
    """Every alias of the plan, confirmed when the output came back in the input's buffer on every shard
    and the input was deleted (the runtime consumed it, as a donation does).

    The same address alone is not enough: an input still alive after the call
    was not handed over, whatever the addresses say.

    A leaf without a device buffer to read (a Python scalar at call time, which
    jax puts on the device inside the call) makes its alias not comparable: the
    check says why and neither confirms nor refutes it.
    """
    checks = []
    moved = (
        {t.input_index for t in transfers.leaves if t.donated and t.kind != "host-to-device"}
        if transfers is not None
        else set()
    )
    for alias in variant.aliases:
        before = reading.input_pointers[alias.input_index] if alias.input_index < len(reading.input_pointers) else None
        after = (
            reading.output_pointers[alias.output_index] if alias.output_index < len(reading.output_pointers) else None
        )
        deleted = reading.deleted[alias.input_index] if alias.input_index < len(reading.deleted) else None
        comparable = before is not None and after is not None
        confirmed = comparable and before == after and deleted is True
        if confirmed:
            detail = f"{alias.output} is in {alias.input}'s buffer on every shard ({_shards(after)}); {alias.input} was consumed (deleted)"
        elif comparable and before == after:
            detail = (
                f"{alias.output} is at {alias.input}'s buffer address on every shard ({_shards(after)}), "
                f"but {alias.input} was not deleted: the runtime did not consume the donation"
            )
        elif before is None:
            detail = f"not comparable: {alias.input} is {_reason(reading.input_unreadable, alias.input_index)}"
        elif after is None:
            detail = f"not comparable: {alias.output} is {_reason(reading.output_unreadable, alias.output_index)}"
        else:
            same = sum(1 for a, b in zip(before, after or ()) if a == b)
            detail = (
                f"{alias.output} is in a new buffer at run time ({same} of {len(after or ())} shards reused"
                f"{'' if deleted else f'; {alias.input} was not deleted'})"
            )
            if alias.input_index in moved and not deleted:
                detail += f": jax moved {alias.input} before the call and donated the moved copy, as planned"
        checks.append(
            AliasCheck(alias.input, alias.input_index, alias.output, alias.output_index, confirmed, detail, comparable)
        )
    return tuple(checks)


def _unplanned_aliases(result: TargetResult, variant: Variant, reading: RunReading) -> tuple[AliasCheck, ...]:
    """Outputs that came back in an input's buffer although the plan aliases no such pair."""
    inputs = {leaf.index: leaf for leaf in result.inputs}
    outputs = {out.index: out for out in result.outputs}
    planned = {(a.input_index, a.output_index) for a in variant.aliases}
    by_pointer: dict[tuple[int, ...], int] = {}
    for index, pointers in enumerate(reading.input_pointers):
        if pointers:
            by_pointer.setdefault(pointers, index)
    unplanned = []
    for index, pointers in enumerate(reading.output_pointers):
        source = by_pointer.get(pointers) if pointers else None
        if source is None or (source, index) in planned or source not in inputs or index not in outputs:
            continue
        leaf, out = inputs[source], outputs[index]
        unplanned.append(
            AliasCheck(
                leaf.path,
                source,
                out.path,
                index,
                True,
                f"{out.path} came back in {leaf.path}'s buffer, which the compiled plan does not alias",
            )
        )
    return tuple(unplanned)


def planned_device_bytes(
    variant: Variant, platform: str | None, inputs: Sequence[InputInfo] = ()
) -> tuple[int | None, int | None]:
    """What the device's allocator is planned to hold at the peak of one call of ``variant``, per device, and
    the part of it that is the executable's code (:func:`fieldmem.model.readings.plan_call`: the rule of the
    backend, measured: on a TPU the arguments, the new outputs and the code; elsewhere the footprint).
    ``inputs``: the call's argument leaves (those jit dropped are on the device for the call too)."""
    memory = variant.memory
    if platform != "tpu":  # the footprint, as the report has it (its constants those in device memory)
        return memory.footprint_bytes, None
    figures = {name: getattr(memory, name) for name in PLAN_FIGURES}
    dropped = sum(device_bytes(leaf.bytes, leaf.shape, leaf.device_shape) for leaf in inputs if not leaf.used)
    plan = plan_call(platform, figures, memory.constant_bytes, dropped)
    return plan.bytes, plan.code


#: the report's figures a call's plan is made of (fieldmem.model.readings.plan_call)
PLAN_FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")


def plan_words(device: DeviceMemory) -> str:
    """What a device's plan is made of, in words: the rule of its backend (:func:`planned_device_bytes`)."""
    if device.code_bytes:
        return f"the arguments, the new outputs and the executable's code, {format_bytes(device.code_bytes)}"
    if device.code_resident:
        return "the arguments and the new outputs; the executable's code was on the device already"
    return "the footprint"


def _code_loaded(variant: Variant, stats: DeviceStats, code: int | None) -> bool:
    """Whether the call loaded its executable's code onto the device (what stayed in use after it beyond the
    outputs that reuse no donated input comes to at least half the code); False where an identical program
    loaded it before (the two variants of a donation nothing can use compile to one program, which libtpu
    loads once). True where the figures to tell are missing."""
    memory = variant.memory
    if not code or stats.in_use_after is None or stats.in_use_before is None:
        return True
    if memory.output_bytes is None or memory.alias_bytes is None:
        return True
    stayed = stats.in_use_after - stats.in_use_before - (memory.output_bytes - memory.alias_bytes)
    return stayed >= code // 2


def _device_memory(variant: Variant, reading: RunReading, inputs: Sequence[InputInfo] = ()) -> tuple[DeviceMemory, ...]:
    """Each device's measured peak against the variant's plan (:func:`planned_device_bytes`), or why it is
    unavailable. The measured peak is the high-water mark after the call less the memory in use before its
    arguments were made and what fieldmem held beside the call to lift it above the mark (``lifted``). Where
    the executable's code was on the device before the call (:func:`_code_loaded`), the plan leaves it out
    and ``code_resident`` says so."""
    planned, code = planned_device_bytes(variant, reading.platform, inputs)
    devices = []
    for stats in reading.memory:
        predicted, counted, resident = planned, code, False
        if code and predicted is not None and not _code_loaded(variant, stats, code):
            predicted, counted, resident = predicted - code, None, True
        reserved = (
            stats.reserved_peak - stats.reserved_start
            if stats.reserved_peak is not None and stats.reserved_start is not None
            else None
        )
        if stats.unavailable is not None or stats.peak is None:
            devices.append(
                DeviceMemory(
                    device=stats.device,
                    predicted=predicted,
                    code_bytes=counted,
                    unavailable=stats.unavailable or "peak_bytes_in_use not given",
                )
            )
            continue
        measured = stats.peak - stats.in_use_start - stats.lifted if stats.in_use_start is not None else None
        in_use_before = stats.in_use_before - stats.lifted if stats.in_use_before is not None else None
        in_use_after = stats.in_use_after - stats.lifted if stats.in_use_after is not None else None
        if measured is not None and _under_the_mark(stats):
            # the high-water mark never resets: one this call did not raise was set earlier in the process (a
            # call the lift could not reach past it), so this call's own peak cannot be read
            devices.append(
                DeviceMemory(
                    device=stats.device,
                    in_use_before=in_use_before,
                    in_use_after=in_use_after,
                    peak=stats.peak,
                    predicted=predicted,
                    code_bytes=counted,
                    code_resident=resident,
                    reserved_peak=reserved,
                    unavailable=(
                        "this call stayed under a high-water mark an earlier call set (peak_bytes_in_use "
                        f"cannot be reset), so its own peak is unknown: at most {format_bytes(measured)}"
                    ),
                )
            )
            continue
        devices.append(
            DeviceMemory(
                device=stats.device,
                in_use_before=in_use_before,
                in_use_after=in_use_after,
                peak=stats.peak,
                measured_peak=measured,
                predicted=predicted,
                code_bytes=counted,
                code_resident=resident,
                reserved_peak=reserved,
                difference=measured - predicted if measured is not None and predicted is not None else None,
            )
        )
    return tuple(devices)


def _under_the_mark(stats: DeviceStats) -> bool:
    """Whether the call stayed under a high-water mark set before it, so that its own peak cannot be read: the
    mark did not rise past what it was just before the call, and it was above what was then in use (a mark
    equal to the memory in use then is the call's own: it never went above it)."""
    if stats.peak_before is None:  # a reading made before the mark was read just before the call
        return stats.peak_start is not None and stats.peak <= stats.peak_start  # type: ignore[operator]
    return stats.peak <= stats.peak_before and (stats.in_use_before or 0) < stats.peak_before  # type: ignore[operator]


def _run_findings(name: str, run: RunCheck, sizes: Mapping[int, int]) -> list[Finding]:
    """The findings of one variant's run; ``sizes``: the bytes of each input leaf, by index."""
    findings = []
    for check in run.aliases:
        if not check.comparable:
            findings.append(
                Finding(
                    "info",
                    "run-alias-not-comparable",
                    f"{name} run: the plan's alias {check.input} -> {check.output} is {check.detail}",
                    input=check.input,
                    output=check.output,
                )
            )
        elif not check.confirmed:
            findings.append(
                Finding(
                    "error",
                    "run-alias-missing",
                    f"at run time the {name} plan's alias {check.input} -> {check.output} did not happen: {check.detail}",
                    input=check.input,
                    output=check.output,
                    bytes=sizes.get(check.input_index),
                )
            )
    for check in run.unplanned:
        findings.append(
            Finding(
                "info", "run-unplanned-alias", f"{name} run: {check.detail}", input=check.input, output=check.output
            )
        )
    for device in run.devices:
        if (
            device.difference is not None
            and device.predicted
            and device.difference > max(PEAK_TOLERANCE * device.predicted, PEAK_TOLERANCE_BYTES)
        ):
            findings.append(
                Finding(
                    "warning",
                    "run-peak-above-plan",
                    f"{name} run on device {device.device}: measured peak {format_bytes(device.measured_peak)} is "
                    f"{format_bytes(device.difference)} above the plan {format_bytes(device.predicted)} "
                    f"({plan_words(device)})",
                    bytes=device.difference,
                )
            )
    return findings


def apply_not_run(result: TargetResult, why: str) -> TargetResult | None:
    """``result`` with a note that ``--run`` left its call out (``why``, the driver's words), where the
    call would have gone through: no output reuses the donated array the call gives twice, so jax makes it.
    None where it would not (a ``shared-donation`` finding: jax refuses the call), which is the run's error."""
    if result.verdict is None or any(f.code == "shared-donation" for f in result.verdict.findings):
        return None
    note = Finding(
        "info",
        "run-not-made",
        f"{why}. Here no output reuses the donation, so jax would make the call; nothing was run, and every "
        "figure is the compile's",
    )
    verdict = dataclasses.replace(result.verdict, findings=rank(result.verdict.findings + (note,)))
    return dataclasses.replace(result, verdict=verdict)


def apply_run(
    result: TargetResult, readings: Mapping[str, RunReading], refused: Mapping[str, str] | None = None
) -> TargetResult:
    """``result`` with each run variant's :class:`RunCheck` and the verdict revised by what the runs showed.

    ``refused``: the variants not run because the compiler refused them for not fitting the device (compiled
    again without that check to tell their figures), with the compiler's words: each is a note, never a
    failure of the run."""
    if result.status != "ok" or result.verdict is None:
        return result
    variants = dict(result.variants)
    findings: list[Finding] = [
        Finding(
            "info",
            "run-not-made",
            f"the {name} variant was not run: the compiler refused it for not fitting the device "
            f"({said.rstrip('.')}); its figures are the compile's",
        )
        for name, said in (refused or {}).items()
    ]
    for name in ("donated", "plain"):
        if name not in readings or name not in variants:
            continue
        run = run_check(result, variants[name], readings[name])
        variants[name] = dataclasses.replace(variants[name], run=run)
        findings += _run_findings(name, run, {leaf.index: leaf.bytes for leaf in result.inputs})
    transfers = result.transfers
    if "donated" in readings:
        transfers, mismatch = _transfers_run(result, readings["donated"])
        findings += mismatch
    verdict = result.verdict
    errors = [f for f in findings if f.severity == "error"]
    summary = verdict.summary
    donated_run = variants["donated"].run if "donated" in readings else None
    if donated_run is not None and donated_run.aliases and not errors:
        if verdict.in_place:
            summary += "; " + _run_summary(donated_run)
        else:
            # two facts that do not contradict: the buffer is reused at run time, and the copy is made too
            summary += (
                f"; {_run_summary(donated_run)}, as planned: the buffers are reused, and what breaks in place "
                "above happens as well"
            )
    # the run's findings join the static ones under the one rule: a static "in place" that the run
    # contradicts is "not in place at run time", headed by what the run showed
    revised = judge(
        verdict.findings + tuple(findings),
        reused=verdict.kind != "nothing-to-update",
        in_place_summary=summary,
        nothing_summary=summary,
        prefix="not in place at run time" if errors and verdict.kind != "not-in-place" else "not in place",
    )
    if revised.kind == verdict.kind and not errors:
        revised = dataclasses.replace(revised, summary=summary)
    checks = tuple(
        dataclasses.replace(c, passed=expectation_met(revised.kind, "in-place"), message=expectation_words(revised))
        if c.name == "expect-in-place"
        else c
        for c in result.checks
    )
    return dataclasses.replace(result, variants=variants, verdict=revised, checks=checks, transfers=transfers)


def _transfers_run(result: TargetResult, reading: RunReading) -> tuple[Transfers | None, list[Finding]]:
    """``result``'s transfers with what the donated run logged copying (:func:`transfer_run`), and a warning
    where the two differ."""
    measured = transfer_run(result.transfers, reading, {leaf.index: leaf.path for leaf in result.inputs})
    if measured is None:
        return result.transfers, []
    transfers = result.transfers if result.transfers is not None else Transfers(summary="nothing planned")
    transfers = dataclasses.replace(transfers, run=measured)
    if measured.bytes is None or measured.agrees:
        return transfers, []
    return transfers, [
        Finding(
            "warning",
            "run-transfer-mismatch",
            f"donated run: {measured.detail}",
            bytes=abs(measured.bytes - measured.planned) or None,
        )
    ]


def _run_summary(run: RunCheck) -> str:
    """``2 aliases confirmed at run time`` (and how many could not be compared, and why)."""
    confirmed = sum(1 for a in run.aliases if a.confirmed)
    uncompared = [a for a in run.aliases if not a.comparable]
    words = f"{confirmed} alias{'es' if confirmed != 1 else ''} confirmed at run time"
    if uncompared:
        first = uncompared[0]
        more = f"; and {len(uncompared) - 1} more" if len(uncompared) > 1 else ""
        words += f", {len(uncompared)} not comparable ({first.detail.removeprefix('not comparable: ')}{more})"
    return words
