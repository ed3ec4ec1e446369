"""Check targets end to end: resolve, load arguments, compile twice, analyse.

:func:`check` is the core entry point behind ``fieldmem check`` and the Python
API. It never prints and never exits: every target yields a
:class:`~fieldmem.report.TargetResult` (a failure to load, call the factory,
compile or read the compiled HLO becomes an ``error`` result), so one broken
target never hides the results of the others. An unexpected exception in
any stage of one target (arguments, prepare, lower and compile, analyse,
suggest, run, probe, a chain's steps) becomes that target's error of kind
``internal`` (:func:`fieldmem.engine.results.internal_error`), never a
traceback; ``FIELDMEM_DEBUG=1`` raises it instead. A ``SystemExit`` (a
``sys.exit`` in the user's module, factory or function) or another
``BaseException`` becomes that target's error of kind ``crash``; only
KeyboardInterrupt is not contained (Ctrl-C stops the run). Progress is reported through a callback.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as _dt
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from fieldmem.collector import collector_paused, collector_resumed
from fieldmem.engine.hands import Hands, Job, LocalHands, failed
from fieldmem.engine.results import contained, error_result
from fieldmem.errors import CompileError, FieldmemError
from fieldmem.findings.chains import StepOutcome, analyze_chain
from fieldmem.readings import CallShape, CompiledVariant
from fieldmem.report import Chain, DeviceInfo, Deviceless, Report, TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, Target, TargetOptions
from fieldmem.version import __version__
from fieldmem.xla.hlo import HloParseError, HloParser

__all__ = ["check", "check_backends", "check_targets", "resolve_all"]

ProgressCallback = Callable[[str, int, int], None]


def _check_one(target: Target, options: CheckOptions, answer: Callable[[TargetResult], None], hands: Hands) -> None:
    """Check ``target`` and hand its result to ``answer``, from the first read of its compiled programs to
    the answer in one pause of the collector (:func:`~fieldmem.collector.collector_paused`): a worker's
    answer (its result encoded and written) is made before any pass walks the records of the check."""
    with _pool(2 if options.jobs > 1 else 1) as pool:
        job = hands.start(target, options, pool)
        with collector_paused():
            answer(_finish(job, options, hands))


def _finish(job: Job | TargetResult, options: CheckOptions, hands: Hands) -> TargetResult:
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
            _hold(early, parser)
            # resumed only around code that runs: resuming lets the collector's next pass walk every
            # record made so far
            if options.suggest:
                with collector_resumed():
                    result = _suggested(target, result, job, shape, plain, donated, options, parser, hands)
            if options.run and result.status == "ok":
                stage = "running it"
                with collector_resumed():
                    result = _run(result, job, donated, options, parser, hands)
        return result
    except BaseException as exc:
        return failed(target, exc, stage)
    finally:
        hands.release(job)


# Where a target's compiled programs and analyses go when it is done, instead of being freed there and
# then (see releases_held); None: freed as each target ends.
_held: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("fieldmem_held", default=None)


@contextlib.contextmanager
def releases_held(into: list[Any]) -> Iterator[None]:
    """Inside, each checked target's compiled programs, executables and analyses are appended to ``into``
    rather than freed as the target ends; the caller frees them when it is done answering (``into.clear()``).

    Freeing them is not free: letting go of a target's two executables and
    the records read from them takes time that grows with its leaves, and it
    would fall between the end of its analysis and the answer. A worker answers first and frees after
    (or never: a one-shot worker leaves by ``os._exit``). It frees what it
    holds before each next target, so no more than the targets checked since
    the last start are held at a time. Per thread (a context variable): the
    API's concurrent checks each free their own as they go.
    """
    token = _held.set(into)
    try:
        yield
    finally:
        _held.reset(token)


def _hold(*objects: Any) -> None:
    held = _held.get()
    if held is not None:
        held.append(objects)


def _local_hands() -> Hands:
    """The hands of a check in this process: the driver, holding what a released job kept in ``_held``."""
    return LocalHands(hold=_held.get)


def _analysed_early(plain: CompiledVariant, target: Target, parser: HloParser) -> Any:
    """:func:`~fieldmem.findings.analysis.analyze_variant` of the plain variant, or None where it raised
    (the analysis proper raises it again, in its own stage)."""
    from fieldmem.findings.analysis import analyze_variant

    try:
        return analyze_variant(plain, target.definition, parser)
    except Exception:
        return None


def _run(
    result: TargetResult,
    job: Job,
    donated: CompiledVariant,
    options: CheckOptions,
    parser: HloParser,
    hands: Hands,
) -> TargetResult:
    """Run both variants (donated first: the device's high-water mark is then its own) and read them
    against the plan; a run that fails makes the target an error that keeps the static verdict in words."""
    from fieldmem.errors import RunError
    from fieldmem.findings.runcheck import apply_run

    try:
        readings = hands.run(job)
    except RunError as exc:
        static = result.verdict.summary if result.verdict else "not analysed"
        error = RunError(f"{exc.message} (static analysis: {static})", kind=exc.kind)
        return error_result(result.target, result.name, error, result.definition)
    result = apply_run(result, readings)
    if options.probe:
        result = _probe(result, job, donated, parser, hands)
    return result


def _probe(result: TargetResult, job: Job, donated: CompiledVariant, parser: HloParser, hands: Hands) -> TargetResult:
    """Time each aliased slice update of the donated variant at two buffer sizes (``--probe``)."""
    from fieldmem.errors import RunError
    from fieldmem.findings.runcheck import apply_probes, probe_candidates, probe_outcome
    from fieldmem.report import InPlaceProbe

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
        probes.append(probe_outcome(candidate.input, candidate.output, candidate.update, reading))
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
    from fieldmem.findings.analysis import analyze_target

    try:
        return analyze_target(
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
    from fieldmem.findings.advisor import suggest

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


def _check_chain(chain: ChainTarget, options: CheckOptions, hands: Hands) -> tuple[list[TargetResult], Chain]:
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
        result = _finish(step.job, options, hands)
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


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[Executor | None]:
    """A thread pool for XLA compiles (None when ``workers`` is 0: compile in place)."""
    if workers <= 0:
        yield None
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        yield pool


_Checked = tuple[list[TargetResult], list[Chain]]  # what one item gave: its results, and its chain if it is one


def check_targets(
    targets: Iterable[Target | ChainTarget | tuple[str, FieldmemError]],
    options: CheckOptions = CheckOptions(),
    progress: ProgressCallback | None = None,
    *,
    started: Callable[[int], None] | None = None,
    done: Callable[[int, _Checked], None] | None = None,
    hands: Hands | None = None,
) -> Report:
    """Analyse already-resolved targets (a pair ``(spec, error)`` stands for one that failed to load).

    ``started(n)`` and ``done(n, (results, chains))`` are called around item
    ``n`` when it is checked in this process (a worker reports them to its parent). ``hands``: what
    compiles and runs them (None: :class:`~fieldmem.engine.hands.LocalHands`, in this process).
    """
    hands = hands if hands is not None else _local_hands()
    items = list(targets)
    with hands.session(options):
        isolated = [
            n
            for n, item in enumerate(items)
            if options.run
            and options.isolate
            and not isinstance(item, tuple)
            and (item.first if isinstance(item, ChainTarget) else item).options is not None
        ]
        checked = _check_in_workers(items, isolated, options, progress) if isolated else {}
        here = [n for n in range(len(items)) if n not in checked]
        checked.update(_check_here(items, here, options, progress, hands, started, done))
    if progress is not None:
        progress("", len(items), len(items))
    results = [result for n in range(len(items)) for result in checked[n][0]]
    chains = [chain for n in range(len(items)) for chain in checked[n][1]]
    return _report(results, chains, options, hands)


def _check_in_workers(
    items: Sequence[Target | ChainTarget | tuple[str, FieldmemError]],
    indices: list[int],
    options: CheckOptions,
    progress: ProgressCallback | None,
) -> dict[int, _Checked]:
    """Check and run ``items[n]`` for each of ``indices`` in worker processes (``--run``, isolated)."""
    from fieldmem.engine.isolate import check_isolated

    if progress is not None:
        progress(f"{len(indices)} target(s) in worker processes", indices[0], len(items))
    outcomes = check_isolated([items[n] for n in indices], options)
    return dict(zip(indices, outcomes))


def _check_here(
    items: Sequence[Target | ChainTarget | tuple[str, FieldmemError]],
    indices: list[int],
    options: CheckOptions,
    progress: ProgressCallback | None,
    hands: Hands,
    started: Callable[[int], None] | None = None,
    done: Callable[[int, _Checked], None] | None = None,
) -> dict[int, _Checked]:
    """Check ``items[n]`` for each of ``indices`` with ``hands``, in order.

    Independent targets overlap when ``jobs`` > 1 (not with ``--run``): one
    is lowered here while the compiles of those before it run in the pool
    (lowering stays on this thread).
    """
    checked: dict[int, _Checked] = {}

    def record(n: int, outcome: _Checked) -> None:
        checked[n] = outcome
        if done is not None:
            done(n, outcome)

    pipelined = options.jobs > 1 and not options.run
    in_flight: deque[tuple[int, Job | TargetResult]] = deque()
    with _pool(options.jobs if pipelined else 0) as pool:
        for n in indices:
            item = items[n]
            if started is not None:
                started(n)
            if isinstance(item, tuple):
                spec, error = item
                record(n, ([error_result(spec, spec, error)], []))
                continue
            if progress is not None:
                progress(item.name, n, len(items))
            try:
                if isinstance(item, ChainTarget):
                    step_results, chain = _check_chain(item, options, hands)
                    record(n, (step_results, [chain]))
                elif pool is not None:
                    job = hands.start(item, options, pool)
                    if isinstance(job, TargetResult):
                        record(n, ([job], []))
                        continue
                    in_flight.append((n, job))
                    while len(in_flight) > options.jobs:
                        finished, pending = in_flight.popleft()
                        with collector_paused():  # to the answer: see _check_one
                            record(finished, ([_finish(pending, options, hands)], []))
                else:

                    def answer(result: TargetResult, n: int = n) -> None:
                        record(n, ([result], []))

                    _check_one(item, options, answer, hands)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # what no stage contained (e.g. a chain's analysis): the item's error
                first = item.first if isinstance(item, ChainTarget) else item
                record(n, ([error_result(item.spec, item.name, contained(exc, "checking it"), first.definition)], []))
        while in_flight:
            finished, pending = in_flight.popleft()
            with collector_paused():  # to the answer: see _check_one
                record(finished, ([_finish(pending, options, hands)], []))
    return checked


def _report(results: list[TargetResult], chains: list[Chain], options: CheckOptions, hands: Hands) -> Report:
    """The report of a check: its results and chains, with the environment they were checked in."""
    env = hands.environment(options.backend)
    return Report(
        fieldmem_version=__version__,
        jax_version=env.jax_version,
        jaxlib_version=env.jaxlib_version,
        backend=env.backend,
        platform_version=env.platform_version,
        devices=tuple(DeviceInfo(id=d["id"], platform=d["platform"], kind=d["kind"]) for d in env.devices),
        deviceless=Deviceless(**env.deviceless) if env.deviceless is not None else None,
        results=tuple(results),
        chains=tuple(chains),
        min_bytes=options.min_bytes,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )


def resolve_all(
    specs: Iterable[str],
    target_options: TargetOptions,
    per_target: Mapping[str, TargetOptions] | None = None,
    hands: Hands | None = None,
) -> list[Target | ChainTarget | tuple[str, FieldmemError]]:
    """Resolve every spec; a spec that fails becomes ``(spec, error)`` instead of stopping the run.

    ``per_target`` maps a spec, exactly as given, to the options for it
    (already stacked over ``target_options`` by the caller); other specs get
    ``target_options``. ``hands``: where the user's modules are imported (None: in this process).
    """
    return (hands if hands is not None else _local_hands()).load(list(specs), target_options, per_target)


def check(
    specs: Iterable[str],
    target_options: TargetOptions = TargetOptions(),
    options: CheckOptions = CheckOptions(),
    progress: ProgressCallback | None = None,
    per_target: Mapping[str, TargetOptions] | None = None,
) -> Report:
    """Check every target named by ``specs`` (``module:fn``, ``file.py:fn``, a module or a file).

    ``target_options`` apply to every spec, except those ``per_target`` maps
    to options of their own (``[[tool.fieldmem.target]]`` tables).
    """
    return check_targets(resolve_all(specs, target_options, per_target), options, progress)


def check_backends(
    specs: Iterable[str],
    backends: Sequence[str],
    target_options: TargetOptions = TargetOptions(),
    options: CheckOptions = CheckOptions(),
    progress: ProgressCallback | None = None,
    per_target: Mapping[str, TargetOptions] | None = None,
) -> tuple[Report, ...]:
    """One Report per backend, each checking every target (resolved once) on that backend.

    Raises:
        OptionError: a backend that is not available here (before anything compiles).
    """
    hands = _local_hands()
    for backend in backends:
        hands.check_backend(backend)
    resolved = resolve_all(specs, target_options, per_target, hands)
    return tuple(
        check_targets(resolved, dataclasses.replace(options, backend=backend), progress, hands=hands)
        for backend in backends
    )
