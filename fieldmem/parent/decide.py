"""The brain of a check: one target's readings -> its result, asking the hands for what it needs.

:func:`finish_job` takes a started target (a :class:`~fieldmem.worker.readers.Job`) to its
:class:`~fieldmem.model.target.TargetResult`: it waits for the two variants' readings (analysing
the plain one while the donated one compiles), analyses them, asks for the advisor's
compiles (``--suggest``), the run's and the probes' readings (``--run``, ``--probe``), and
reads them against the plan. :func:`check_chain` does each step of a chain and the chain.
The hands may be in this process (:class:`~fieldmem.worker.readers.LocalHands`) or in the
worker (:class:`~fieldmem.parent.remote_readers.RemoteHands`): the brain never touches jax or the
user's code, and never prints.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import Any

from fieldmem.findings import analysis
from fieldmem.findings.advisor import suggest
from fieldmem.findings.chains import StepOutcome, analyze_chain
from fieldmem.findings.probecheck import apply_probes, probe_candidates, probe_outcome
from fieldmem.findings.runcheck import apply_run
from fieldmem.findings.variant import analyze_variant
from fieldmem.model import __version__
from fieldmem.model.chain import Chain
from fieldmem.model.collector import collector_paused, collector_resumed
from fieldmem.model.environment import DeviceInfo, Deviceless
from fieldmem.model.errors import CompileError, RunError
from fieldmem.model.readings import CallShape, CompiledVariant, Environment
from fieldmem.model.report import Report
from fieldmem.model.run import InPlaceProbe
from fieldmem.model.target import TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, Target
from fieldmem.worker.readers import Failed, Hands, HandsLost, Job, failed, hold
from fieldmem.worker.results import error_result
from fieldmem.xla.hlo import HloParseError, HloParser

__all__ = ["check_chain", "finish_job", "report_header"]


def finish_job(job: Job | TargetResult, options: CheckOptions, hands: Hands) -> TargetResult:
    """Wait for the compiles, analyse (suggest, run and probe, as asked); the job is released after."""
    if isinstance(job, TargetResult):
        return job
    target = job.target
    import fieldmem.findings.analysis  # noqa: F401  (loaded while the compiles run, not after them)

    stage = "compiling it"
    try:
        # one pause of the collector from the first read to the end of the analysis (the callers that
        # answer make it last to the answer); the user's code run after it (the advisor's compiles, a
        # run) runs with the collector as the user left it
        with collector_paused():
            # parses the target's programs (its two variants, the advisor's compiles, the probe's reading),
            # each sharing what the one before it parsed; owned by this target alone
            parser = HloParser()
            early = _analysed_early(hands.plain(job), target, parser)  # while the donated variant compiles
            plain, donated = hands.variants(job)
            stage = "analysing its compiled program"
            shape = hands.call_shape(job)
            result = _analyse(target, shape.donation_source, plain, donated, options, early, parser)
            hold(early, parser)
            # resumed only around code that runs: resuming lets the collector's next pass walk every
            # record made so far
            if options.suggest:
                with collector_resumed():
                    result = _suggested(target, result, job, shape, plain, donated, options, parser, hands)
            if options.run and result.status == "ok":
                stage = "running it"
                with collector_resumed():
                    result = _run(result, job, plain, donated, options, parser, hands)
        return result
    except Failed as exc:  # the hands ended the target (its compile failed where they run)
        return exc.result
    except HandsLost:  # the hands' process is gone: its supervisor charges it
        raise
    except BaseException as exc:  # the user's sys.exit too: the target's error (Ctrl-C: failed() raises it again)
        return failed(target, exc, stage)
    finally:
        hands.release(job)


def _analysed_early(plain: CompiledVariant, target: Target, parser: HloParser) -> Any:
    """:func:`~fieldmem.findings.variant.analyze_variant` of the plain variant, or None where it raised
    (the analysis proper raises it again, in its own stage)."""
    try:
        return analyze_variant(plain, target.definition, parser)
    except Exception:
        return None


def _run(
    result: TargetResult,
    job: Job,
    plain: CompiledVariant,
    donated: CompiledVariant,
    options: CheckOptions,
    parser: HloParser,
    hands: Hands,
) -> TargetResult:
    """Run both variants (donated first: the device's high-water mark is then its own) and read them
    against the plan; a run that fails makes the target an error that keeps the static verdict in words.
    A variant the compiler refused for not fitting the device is not run (the hands leave it out), and the
    result says so."""
    try:
        readings = hands.run(job)
    except RunError as exc:
        if exc.kind == "not-run" and result.verdict is not None:
            from fieldmem.findings.runcheck import apply_not_run

            left_out = apply_not_run(result, exc.message)  # None: jax would refuse the call too
            if left_out is not None:
                return left_out
        static = result.verdict.summary if result.verdict else "not analysed"
        error = RunError(f"{exc.message} (static analysis: {static})", kind=exc.kind)
        return error_result(result.target, result.name, error, result.definition)
    refused = {v.name: v.out_of_memory for v in (plain, donated) if v.out_of_memory is not None}
    result = apply_run(result, readings, refused)
    if options.probe and donated.out_of_memory is None:
        result = _probe(result, job, donated, parser, hands)
    return result


def _probe(result: TargetResult, job: Job, donated: CompiledVariant, parser: HloParser, hands: Hands) -> TargetResult:
    """Time each aliased slice update of the donated variant at two buffer sizes (``--probe``)."""
    probes = []
    for candidate in probe_candidates(result, donated.hlo_text, parser):
        if candidate.skip is not None:
            probes.append(
                InPlaceProbe(candidate.input, candidate.output, candidate.update, "not-probed", candidate.skip)
            )
            continue
        try:
            reading = hands.probe(job, candidate.input_index, candidate.output_index, candidate.factor)
        except RunError as exc:
            probes.append(InPlaceProbe(candidate.input, candidate.output, candidate.update, "not-probed", exc.message))
            continue
        probes.append(
            probe_outcome(candidate.input, candidate.output, candidate.update, reading, per_device=candidate.bytes)
        )
    return apply_probes(result, probes)


def _analyse(
    target: Target,
    donation_source: str,
    plain: CompiledVariant,
    donated: CompiledVariant,
    options: CheckOptions,
    plain_analysis: Any = None,
    parser: HloParser | None = None,
) -> TargetResult:
    try:
        return analysis.analyze_target(
            target=target.spec,
            name=target.name,
            definition=target.definition,
            # "auto" means the jit's own donation for a jit object, else every array argument
            donate="jit"
            if donation_source == "jit"
            else ("all" if target.donate.mode == "auto" else target.donate.describe()),
            expect=target.expect,
            max_peak=target.max_peak,
            max_live_peak=target.max_live_peak,
            plain=plain,
            donated=donated,
            min_bytes=options.min_bytes,
            new=target.new,
            plain_analysis=plain_analysis,
            parser=parser,
            # every argument holding arrays (fieldmem's default, or --donate all) is a blanket, not a choice
            # of arguments: what it donates that nothing can use is a warning; a jit's own donation and a
            # list of arguments are the user's choice
            donation_by_user=donation_source == "jit" or target.donate.mode == "list",
            jit_definition=target.jit_definition,
        )
    except HloParseError as exc:
        return _unreadable(target, exc)


def _suggested(
    target: Target,
    result: TargetResult,
    job: Job,
    shape: CallShape,
    plain: CompiledVariant,
    donated: CompiledVariant,
    options: CheckOptions,
    parser: HloParser,
    hands: Hands,
) -> TargetResult:
    """``result`` with the advisor's suggestion (``--suggest``): it lowers and compiles the call again,
    so it runs outside the collector's pause, as the user's code does. The advisor sees the call's shape
    and a function that has the hands compile it with another donation; the call itself stays with them."""
    if result.status != "ok":
        return result

    def compile_with(positions: Sequence[int], names: Sequence[str], *, fast: bool = False) -> CompiledVariant:
        return hands.compile_donation(job, positions, names, fast=fast)

    try:
        suggestion = suggest(
            shape,
            plain,
            donated,
            compile_donation=compile_with,
            result=result,
            min_bytes=options.min_bytes,
            fast=options.compile_fast,
            parser=parser,
        )
    except HloParseError as exc:
        return _unreadable(target, exc)
    return dataclasses.replace(result, suggestion=suggestion)


def _unreadable(target: Target, exc: HloParseError) -> TargetResult:
    """The error result of a target whose optimized HLO this parser cannot read: XLA printed something it
    does not know; this target cannot be analysed, the others still can."""
    error = CompileError(
        f"fieldmem could not read the optimized HLO of this target: {exc}; "
        "please report this with the output of jax.jit(fn).lower(...).compile().as_text()"
    )
    return error_result(target.spec, target.name, error, target.definition)


def check_chain(chain: ChainTarget, options: CheckOptions, hands: Hands) -> tuple[list[TargetResult], Chain]:
    """Every step (each with the previous step's outputs as its arguments, then its extras, which the hands
    pass on) and the fused chain, each analysed as a target, then the chain."""
    outcomes: list[StepOutcome] = []
    results: list[TargetResult] = []
    fused: TargetResult | None = None
    jobs = hands.chain(chain, options)
    went_through: bool | None = None
    while True:
        try:
            step = next(jobs) if went_through is None else jobs.send(went_through)
        except StopIteration:
            break
        if step.job is None:  # the step before failed: nothing to pass on
            outcomes.append(StepOutcome(step.name, step.target.definition, None))
            went_through = False
            continue
        result = finish_job(step.job, options, hands)
        went_through = result.status == "ok"
        results.append(result)
        if step.index is None:
            fused = result
        else:
            outcomes.append(StepOutcome(step.name, step.target.definition, result, extras=step.extras))
    return results, analyze_chain(
        target=chain.spec,
        name=chain.name,
        outcomes=outcomes,
        fused=fused,
        expect=chain.first.expect,
        min_bytes=options.min_bytes,
    )


def report_header(env: Environment, options: CheckOptions) -> Report:
    """The report of a check in environment ``env`` (the hands' reading), without results yet."""
    return Report(
        fieldmem_version=__version__,
        jax_version=env.jax_version,
        jaxlib_version=env.jaxlib_version,
        backend=env.backend,
        platform_version=env.platform_version,
        devices=tuple(DeviceInfo(id=d["id"], platform=d["platform"], kind=d["kind"]) for d in env.devices),
        deviceless=Deviceless(**env.deviceless) if env.deviceless is not None else None,
        plugin_versions=dict(env.plugin_versions),
        library_versions=dict(env.library_versions),
        results=(),
        chains=(),
        min_bytes=options.min_bytes,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )
