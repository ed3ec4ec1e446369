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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fieldmem.collector import collector_paused, collector_resumed
from fieldmem.engine.results import contained, error_result
from fieldmem.errors import CompileError, FieldmemError, OptionError, TargetError, listing
from fieldmem.findings.chains import StepOutcome, analyze_chain, fused_result_name, step_result_name
from fieldmem.report import Chain, DeviceInfo, Deviceless, Report, TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import ChainTarget, Step, Target, TargetOptions, folder_targets, resolve_target
from fieldmem.version import __version__
from fieldmem.xla.hlo import HloParseError, HloParser

if TYPE_CHECKING:
    from fieldmem.driver import Compiled, PendingVariants, PreparedCall

__all__ = ["check", "check_backends", "check_targets", "resolve_all"]

ProgressCallback = Callable[[str, int, int], None]


def _arguments(target: Target, options: CheckOptions) -> tuple[tuple, dict] | TargetResult:
    """The target's example arguments (made on the target backend), or its error result: what its factory
    returns, or the abstract arrays of its ``--shapes``."""
    make = target.example_arguments
    if target.args_factory is None and target.shapes is not None:
        shapes = target.shapes

        def make() -> tuple[tuple, dict]:
            from fieldmem.driver import shape_structs

            return shape_structs(shapes), {}

    return _made_on_backend(target, make, "making its example arguments", options)


def _made_on_backend(
    target: Target, make: Callable[[], tuple[tuple, dict]], stage: str, options: CheckOptions
) -> tuple[tuple, dict] | TargetResult:
    """``make()`` on the target backend: arguments, or the error result of ``target`` (``stage`` names it)."""
    from fieldmem.driver import backend_scope

    try:
        with collector_resumed(), backend_scope(options.backend):  # the user's code
            return make()
    except BaseException as exc:
        return _failed(target, exc, stage)


def _failed(target: Target, exc: BaseException, stage: str) -> TargetResult:
    """The error result of ``target`` for ``exc``, raised while ``stage``: a fieldmem error as it is, any
    other exception as one line of kind ``internal`` (``FIELDMEM_DEBUG=1`` re-raises it instead), a
    ``SystemExit`` or another ``BaseException`` from the user's code as one line of kind ``crash``.
    KeyboardInterrupt is raised again: Ctrl-C stops the run."""
    return error_result(target.spec, target.name, contained(exc, stage), target.definition)


def _check_one(target: Target, options: CheckOptions, answer: Callable[[TargetResult], None]) -> None:
    """Check ``target`` and hand its result to ``answer``, from the first read of its compiled programs to
    the answer in one pause of the collector (:func:`~fieldmem.collector.collector_paused`): a worker's
    answer (its result encoded and written) is made before any pass walks the records of the check."""
    arguments = _arguments(target, options)
    if isinstance(arguments, TargetResult):
        answer(arguments)
        return
    with _pool(2 if options.jobs > 1 else 1) as pool:
        started = _start(target, *arguments, options, pool)
        with collector_paused():
            answer(_finish(started, options)[0])


@dataclass(frozen=True)
class _Started:
    """A target lowered in this thread whose two compiles run in a pool or wait for :func:`_finish`."""

    target: Target
    call: PreparedCall
    pending: PendingVariants
    # parses the target's programs (its two variants, the advisor's compiles, the probe's reading), each
    # sharing what the one before it parsed; owned by this target alone
    parser: HloParser = dataclasses.field(default_factory=HloParser)


def _start(
    target: Target, args: tuple, kwargs: dict, options: CheckOptions, pool: Executor | None
) -> _Started | TargetResult:
    """Prepare and lower ``target`` on ``args`` in this thread; its compiles go to ``pool`` (None: at finish).
    The error result when preparing or lowering failed."""
    from fieldmem.driver import backend_scope, prepare_call, start_variants

    try:
        with collector_resumed(), backend_scope(options.backend):  # the user's code is traced
            call = prepare_call(target.function, args, kwargs, donate=target.donate, static=target.static)
            # with --jobs 1, one thing at a time: a compile never overlaps a lowering (the XLA seconds
            # a report gives then add up to the wall time they took)
            pending = start_variants(call, pool, fast=options.compile_fast, early=options.jobs > 1)
            return _Started(target, pending.call, pending)  # the call compiled (scalars made static)
    except BaseException as exc:
        return _failed(target, exc, "preparing and lowering it")


def _finish(started: _Started | TargetResult, options: CheckOptions) -> tuple[TargetResult, Compiled | None]:
    """Wait for the compiles, analyse (and run, with --run); also the donated variant's handle (None on
    error), whose ``outputs`` (abstract arrays, built when asked for) a chain passes on. The compiled
    handles, executables and all, go here."""
    if isinstance(started, TargetResult):
        return started, None
    target = started.target
    import fieldmem.findings.analysis  # noqa: F401  (loaded while the compiles run, not after them)

    stage = "compiling it"
    try:
        # one pause of the collector from the first read to the end of the analysis (the callers that
        # answer make it last to the answer); the user's code run after it (the advisor's compiles, a
        # run) runs with the collector as the user left it
        with collector_paused():
            parser = started.parser
            early = _analysed_early(started.pending.plain(), target, parser)  # while the donated variant compiles
            plain, donated = started.pending.result()
            stage = "analysing its compiled program"
            result = _analyse(target, started.call, plain, donated, options, early, parser)
            _hold(started, plain, donated, early)
            # resumed only around code that runs: resuming lets the collector's next pass walk every
            # record made so far
            if options.suggest:
                with collector_resumed():
                    result = _suggested(target, result, started.call, plain, donated, options, parser)
            if options.run and result.status == "ok":
                stage = "running it"
                with collector_resumed():
                    result = _run(result, started.call, plain, donated, options, parser)
        return result, donated
    except BaseException as exc:
        return _failed(target, exc, stage), None


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


def _analysed_early(plain: Compiled, target: Target, parser: HloParser) -> Any:
    """:func:`~fieldmem.findings.analysis.analyze_variant` of the plain variant, or None where it raised
    (the analysis proper raises it again, in its own stage)."""
    from fieldmem.findings.analysis import analyze_variant

    try:
        return analyze_variant(plain.variant, target.definition, parser)
    except Exception:
        return None


def _check_call(
    target: Target, args: tuple, kwargs: dict, options: CheckOptions
) -> tuple[TargetResult, Compiled | None]:
    """Compile ``target.function(*args, **kwargs)`` twice (concurrently when ``jobs`` > 1; with ``jobs`` 1
    one after the other in a thread, while this one analyses the plain variant) and analyse it."""
    with _pool(2 if options.jobs > 1 else 1) as pool:
        return _finish(_start(target, args, kwargs, options, pool), options)


def _run(
    result: TargetResult,
    call: PreparedCall,
    plain: Compiled,
    donated: Compiled,
    options: CheckOptions,
    parser: HloParser | None = None,
) -> TargetResult:
    """Run both variants (donated first: the device's high-water mark is then its own) and read them
    against the plan; a run that fails makes the target an error that keeps the static verdict in words."""
    from fieldmem.driver import backend_scope, run_variant
    from fieldmem.errors import RunError
    from fieldmem.findings.runcheck import apply_run

    try:
        with backend_scope(options.backend):
            readings = {"donated": run_variant(call, donated), "plain": run_variant(call, plain)}
    except RunError as exc:
        static = result.verdict.summary if result.verdict else "not analysed"
        error = RunError(f"{exc.message} (static analysis: {static})", kind=exc.kind)
        return error_result(result.target, result.name, error, result.definition)
    result = apply_run(result, readings)
    if options.probe:
        result = _probe(result, call, donated, options, parser)
    return result


def _probe(
    result: TargetResult, call: PreparedCall, donated: Compiled, options: CheckOptions, parser: HloParser | None
) -> TargetResult:
    """Time each aliased slice update of the donated variant at two buffer sizes (``--probe``)."""
    from fieldmem.driver import backend_scope, probe_update
    from fieldmem.errors import RunError
    from fieldmem.findings.runcheck import apply_probes, probe_candidates, probe_outcome
    from fieldmem.report import InPlaceProbe

    probes = []
    for candidate in probe_candidates(result, donated.variant.hlo_text, parser):
        if candidate.skip is not None:
            probes.append(
                InPlaceProbe(candidate.input, candidate.output, candidate.update, "not-probed", candidate.skip)
            )
            continue
        try:
            with backend_scope(options.backend):
                reading = probe_update(
                    call, donated, candidate.input_index, candidate.output_index, factor=candidate.factor
                )
        except RunError as exc:
            probes.append(InPlaceProbe(candidate.input, candidate.output, candidate.update, "not-probed", exc.message))
            continue
        probes.append(probe_outcome(candidate.input, candidate.output, candidate.update, reading))
    return apply_probes(result, probes)


def _analyse(
    target: Target,
    call: PreparedCall,
    plain: Compiled,
    donated: Compiled,
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
            if call.donation_source == "jit"
            else ("all" if target.donate.mode == "auto" else target.donate.describe()),
            expect=target.expect,
            max_peak=target.max_peak,
            max_live_peak=target.max_live_peak,
            plain=plain.variant,
            donated=donated.variant,
            min_bytes=options.min_bytes,
            new=target.new,
            plain_analysis=plain_analysis,
            parser=parser,
            # every argument holding arrays (fieldmem's default, or --donate all) is a blanket, not a choice
            # of arguments: what it donates that nothing can use is a warning; a jit's own donation and a
            # list of arguments are the user's choice
            donation_by_user=call.donation_source == "jit" or target.donate.mode == "list",
        )
    except HloParseError as exc:
        return _unreadable(target, exc)


def _suggested(
    target: Target,
    result: TargetResult,
    call: PreparedCall,
    plain: Compiled,
    donated: Compiled,
    options: CheckOptions,
    parser: HloParser | None = None,
) -> TargetResult:
    """``result`` with the advisor's suggestion (``--suggest``): it lowers and compiles the call again,
    so it runs outside the collector's pause, as the user's code does. The advisor sees the call's shape
    and a function that compiles it with another donation; the call itself stays here."""
    from fieldmem.driver import backend_scope, call_shape, compile_donation
    from fieldmem.findings.advisor import suggest

    if result.status != "ok":
        return result

    def compile_with(positions: Sequence[int], names: Sequence[str], *, fast: bool = False) -> Any:
        return compile_donation(call, positions, names, fast=fast)

    try:
        with backend_scope(options.backend):
            suggestion = suggest(
                call_shape(call),
                plain.variant,
                donated.variant,
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


def _step_donation(donate: DonateSpec) -> DonateSpec:
    """The donation of a chain's later steps: "all" and "none" carry over; names and numbers
    belong to the first step's arguments, so the later steps keep their default."""
    return donate if donate.mode in ("all", "none") else DonateSpec()


def _extras(step: Step, target: Target, options: CheckOptions) -> tuple[tuple, dict] | TargetResult:
    """The extras ``step`` takes besides its state (made on the target backend), or its error result."""
    return _made_on_backend(target, step.extra_arguments, "making its step_args", options)


def _check_chain(chain: ChainTarget, options: CheckOptions) -> tuple[list[TargetResult], Chain]:
    """Every step (each with the previous step's outputs as its arguments, then its extras) and the fused chain."""
    from fieldmem.driver import STEP_ARGS, compose, state_donation, step_key

    first = chain.first
    outcomes: list[StepOutcome] = []
    results: list[TargetResult] = []
    arguments = _arguments(first, options)  # the first step's, or the error result they gave
    previous = None  # the outputs of the step before, abstract (None: it failed)
    given: dict[str, dict[str, Any]] = {}  # each step's extras by name, for the fused chain
    plan: list[tuple[str, tuple[str, ...], tuple[str, ...]] | None] = []
    for index, step in enumerate(chain.steps):
        step_target = dataclasses.replace(
            first,
            name=step_result_name(chain.name, index, step.name),
            function=step.function,
            definition=step.definition,
            expect="any",  # the chain's expectation is checked on the chain
            donate=first.donate if index == 0 else _step_donation(first.donate),
            static=first.static if index == 0 else StaticSpec(),
        )
        plan.append(None)
        if index > 0 and previous is None:  # the step before failed: nothing to pass on
            outcomes.append(StepOutcome(step.name, step.definition, None))
            continue
        if index == 0 and isinstance(arguments, TargetResult):
            result = dataclasses.replace(arguments, name=step_target.name, definition=step.definition)
            results.append(result)
            outcomes.append(StepOutcome(step.name, step.definition, result))
            continue
        extras = _extras(step, step_target, options) if step.extras is not None else ((), {})
        names: tuple[str, ...] = ()
        if isinstance(extras, TargetResult):
            result, outputs = extras, None
        else:
            given_state = arguments if index == 0 and not isinstance(arguments, TargetResult) else None
            result, outputs, names = _check_step(step, step_target, previous, given_state, extras, options)
            if step.extras is not None and result.status == "ok":
                key = step_key(index, step.name)
                values = dict(zip(names, (*extras[0], *extras[1].values())))
                given[key] = values
                plan[-1] = (key, names[: len(extras[0])], tuple(extras[1]))
        results.append(result)
        outcomes.append(StepOutcome(step.name, step.definition, result, extras=names))
        previous = outputs

    fused: TargetResult | None = None
    if not isinstance(arguments, TargetResult):
        fused_target = dataclasses.replace(first, name=fused_result_name(chain.name), expect="any")
        args, kwargs = arguments
        try:
            missing = [
                f"{n + 1} ({s.name})"
                for n, s in enumerate(chain.steps)
                if s.extras is not None and step_key(n, s.name) not in given
            ]
            if missing:
                raise CompileError(
                    f"not checked: step {', '.join(missing)} takes step_args and could not be checked, "
                    "so the names of its extras in the fused chain are unknown"
                )
            composed = compose(
                [s.function for s in chain.steps], name="_".join(s.name for s in chain.steps), extras=plan
            )
        except BaseException as exc:
            fused = _failed(fused_target, exc, "composing the chain's steps into one function")
        else:
            fused_target = dataclasses.replace(fused_target, function=composed)
            if given:  # the extras are arguments of the fused program; its state alone is donated
                state = [*range(len(args)), *kwargs]
                fused_target = dataclasses.replace(
                    fused_target, donate=state_donation(first.donate, composed, args, kwargs, state)
                )
                kwargs = {**kwargs, STEP_ARGS: given}
            fused, _ = _check_call(fused_target, args, kwargs, options)
        results.append(fused)
    return results, analyze_chain(
        target=chain.spec,
        name=chain.name,
        outcomes=outcomes,
        fused=fused,
        expect=first.expect,
        min_bytes=options.min_bytes,
    )


def _check_step(
    step: Step,
    target: Target,
    previous: Any,
    arguments: tuple[tuple, dict] | None,
    extras: tuple[tuple, dict],
    options: CheckOptions,
) -> tuple[TargetResult, Any, tuple[str, ...]]:
    """One step on its state (the chain's ``arguments`` for the first step, else the ``previous``
    step's outputs) and its extras: its result, its outputs to pass on, and the names of its extras."""
    from fieldmem.driver import extra_names, spread, state_donation

    extra_args, extra_kwargs = extras
    try:
        if arguments is not None:
            state_args, state_kwargs = arguments
        else:
            passed_on = (
                spread(previous, step.function, len(extra_args)) if extra_args else spread(previous, step.function)
            )
            state_args, state_kwargs = passed_on, {}
        clash = sorted(set(state_kwargs) & set(extra_kwargs))
        if clash:
            raise OptionError(f"step_args of {step.name} give {', '.join(clash)}, which the chain's args give too")
        args, kwargs = (*state_args, *extra_args), {**state_kwargs, **extra_kwargs}
        names: tuple[str, ...] = ()
        if step.extras is not None:
            names = extra_names(step.function, len(state_args), len(extra_args), list(extra_kwargs))
            state = [*range(len(state_args)), *state_kwargs]
            target = dataclasses.replace(
                target, donate=state_donation(target.donate, step.function, args, kwargs, state)
            )
    except BaseException as exc:
        return _failed(target, exc, "passing the previous step's outputs to it"), None, ()
    result, donated = _check_call(target, args, kwargs, options)
    return result, donated.outputs if donated is not None else None, names


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
) -> Report:
    """Analyse already-resolved targets (a pair ``(spec, error)`` stands for one that failed to load).

    ``started(n)`` and ``done(n, (results, chains))`` are called around item
    ``n`` when it is checked in this process (a worker reports them to its parent).
    """
    from fieldmem.driver import compilation_cache, start_jax

    start_jax()  # before anything imports jax: quiet about the plugins' start-up noise
    items = list(targets)
    with compilation_cache(options.cache_dir, options.backend):
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
        checked.update(_check_here(items, here, options, progress, started, done))
    if progress is not None:
        progress("", len(items), len(items))
    results = [result for n in range(len(items)) for result in checked[n][0]]
    chains = [chain for n in range(len(items)) for chain in checked[n][1]]
    return _report(results, chains, options)


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
    started: Callable[[int], None] | None = None,
    done: Callable[[int, _Checked], None] | None = None,
) -> dict[int, _Checked]:
    """Check ``items[n]`` for each of ``indices`` in this process, in order.

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
    in_flight: deque[tuple[int, _Started | TargetResult]] = deque()
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
                    step_results, chain = _check_chain(item, options)
                    record(n, (step_results, [chain]))
                elif pool is not None:
                    arguments = _arguments(item, options)
                    if isinstance(arguments, TargetResult):
                        record(n, ([arguments], []))
                        continue
                    in_flight.append((n, _start(item, *arguments, options, pool)))
                    while len(in_flight) > options.jobs:
                        finished, pending = in_flight.popleft()
                        with collector_paused():  # to the answer: see _check_one
                            record(finished, ([_finish(pending, options)[0]], []))
                else:

                    def answer(result: TargetResult, n: int = n) -> None:
                        record(n, ([result], []))

                    _check_one(item, options, answer)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # what no stage contained (e.g. a chain's analysis): the item's error
                first = item.first if isinstance(item, ChainTarget) else item
                record(n, ([error_result(item.spec, item.name, contained(exc, "checking it"), first.definition)], []))
        while in_flight:
            finished, pending = in_flight.popleft()
            with collector_paused():  # to the answer: see _check_one
                record(finished, ([_finish(pending, options)[0]], []))
    return checked


def _report(results: list[TargetResult], chains: list[Chain], options: CheckOptions) -> Report:
    """The report of a check: its results and chains, with the environment they were checked in."""
    from fieldmem.driver import environment

    env = environment(options.backend)
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
) -> list[Target | ChainTarget | tuple[str, FieldmemError]]:
    """Resolve every spec; a spec that fails becomes ``(spec, error)`` instead of stopping the run.

    ``per_target`` maps a spec, exactly as given, to the options for it
    (already stacked over ``target_options`` by the caller); other specs get
    ``target_options``.
    """
    from fieldmem.driver import start_jax

    start_jax()  # the user's modules import jax: start it first, quiet about the plugins' start-up noise
    resolved: list[Target | ChainTarget | tuple[str, FieldmemError]] = []
    per_target = per_target or {}
    for spec in specs:
        options = per_target.get(spec, target_options)
        files = folder_targets(spec)  # a folder: each of its files, those registering no case skipped
        found = 0
        for one in files if files is not None else (spec,):
            targets: list[Target | ChainTarget | tuple[str, FieldmemError]]
            try:
                targets = list(resolve_target(one, options, in_folder=files is not None))
            except FieldmemError as exc:
                targets = [(one, exc)]
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                targets = [(one, contained(exc, "resolving it"))]
            resolved.extend(targets)
            found += len(targets)
        if files is not None and not found:
            resolved.append((spec, TargetError(_empty_folder(spec, files))))
    return resolved


def _empty_folder(spec: str, files: Sequence[str]) -> str:
    if not files:
        return (
            f"folder {spec!r} holds no .py file that mentions fieldmem: name a file or module, "
            "or register cases with fieldmem.case(...) in the folder's modules"
        )
    return f"no module of folder {spec!r} registers a fieldmem.case(...) (looked in {listing(files)})"


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
    from fieldmem.driver import backend_devices

    for backend in backends:
        backend_devices(backend)
    resolved = resolve_all(specs, target_options, per_target)
    return tuple(
        check_targets(resolved, dataclasses.replace(options, backend=backend), progress) for backend in backends
    )
