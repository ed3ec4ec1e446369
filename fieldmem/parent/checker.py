"""Check targets end to end: resolve, load arguments, compile twice, analyse (the brain: parent/decide.py).

:func:`check` is the core entry point behind ``fieldmem check`` and the Python
API. It never prints and never exits: every target yields a
:class:`~fieldmem.model.target.TargetResult` (a failure to load, call the factory,
compile or read the compiled HLO becomes an ``error`` result), so one broken
target never hides the results of the others. An unexpected exception in
any stage of one target (arguments, prepare, lower and compile, analyse,
suggest, run, probe, a chain's steps) becomes that target's error of kind
``internal`` (:func:`fieldmem.worker.results.internal_error`), never a
traceback; ``FIELDMEM_DEBUG=1`` raises it instead. A ``SystemExit`` (a
``sys.exit`` in the user's module, factory or function) or another
``BaseException`` becomes that target's error of kind ``crash``; only
KeyboardInterrupt is not contained (Ctrl-C stops the run). Progress is reported through a callback.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from fieldmem.model.chain import Chain
from fieldmem.model.collector import collector_paused
from fieldmem.model.errors import FieldmemError
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent import isolate
from fieldmem.parent.decide import check_chain, finish_job, report_header
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, Target, TargetOptions
from fieldmem.worker.local_readers import LocalHands
from fieldmem.worker.readers import Hands, Job, compile_pool, releases_held
from fieldmem.worker.results import contained, error_result

__all__ = ["check", "check_backends", "check_targets", "releases_held", "resolve_all"]

ProgressCallback = Callable[[str, int, int], None]


def _check_one(target: Target, options: CheckOptions, answer: Callable[[TargetResult], None], hands: Hands) -> None:
    """Check ``target`` and hand its result to ``answer``, from the first read of its compiled programs to
    the answer in one pause of the collector (:func:`~fieldmem.model.collector.collector_paused`): a worker's
    answer (its result encoded and written) is made before any pass walks the records of the check."""
    with compile_pool(2 if options.jobs > 1 else 1) as pool:
        job = hands.start(target, options, pool)
        with collector_paused():
            answer(finish_job(job, options, hands))


def _local_hands() -> Hands:
    """The hands of a check in this process: the driver (what a released job kept goes to releases_held)."""
    return LocalHands()


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
    compiles and runs them (None: :class:`~fieldmem.worker.readers.LocalHands`, in this process).
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
    if progress is not None:
        progress(f"{len(indices)} target(s) in worker processes", indices[0], len(items))
    outcomes = isolate.check_isolated([items[n] for n in indices], options)
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
    with compile_pool(options.jobs if pipelined else 0) as pool:
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
                    step_results, chain = check_chain(item, options, hands)
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
                            record(finished, ([finish_job(pending, options, hands)], []))
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
                record(finished, ([finish_job(pending, options, hands)], []))
    return checked


def _report(results: list[TargetResult], chains: list[Chain], options: CheckOptions, hands: Hands) -> Report:
    """The report of a check: its results and chains, with the environment they were checked in."""
    header = report_header(hands.environment(options.backend), options)
    return dataclasses.replace(header, results=tuple(results), chains=tuple(chains))


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
