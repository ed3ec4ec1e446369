"""The hands in this process: :class:`LocalHands` answers a check's questions through :mod:`fieldmem.driver`,
running the user's code here (in the worker, or in this process with ``--no-isolate`` and the Python API).

What it keeps for a target between two questions (the user's function and arguments, the lowered and
compiled programs, a chain step's outputs) stays behind a :class:`~fieldmem.worker.readers.Job`, which the
brain only hands back. The interface it implements is :class:`~fieldmem.worker.readers.Hands`; the parent's
side of a worker implements it too (:class:`~fieldmem.parent.remote_readers.RemoteHands`).

This module never analyses: it imports the driver, the request and the model, never findings or xla
(``tests/project/test_layers.py``); it imports the driver inside its functions, so that loading it starts no jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fieldmem.model.collector import collector_resumed
from fieldmem.model.errors import CompileError, FieldmemError, OptionError, TargetError, listing
from fieldmem.model.readings import CallShape, CompiledVariant, Environment, ProbeReading, RunReading
from fieldmem.model.target import TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import (
    ChainTarget,
    Step,
    Target,
    TargetOptions,
    folder_targets,
    fused_result_name,
    resolve_target,
    step_result_name,
)
from fieldmem.worker.readers import ChainStepJob, Item, Job, compile_pool, failed, hold
from fieldmem.worker.results import contained

if TYPE_CHECKING:
    from fieldmem.driver import Compiled, PendingVariants, PreparedCall

__all__ = ["LocalHands"]


@dataclass
class _LocalJob:
    """A target started in this process: its prepared call and its two variants compiling (then compiled)."""

    target: Target
    call: PreparedCall
    pending: PendingVariants
    backend: str | None
    compiled: tuple[Compiled, Compiled] | None = None
    stand_ins: tuple[Any, ...] = ()  # its arguments' stand-ins (traced, kept on the host): forgotten when released


def _one_name_each(items: list[Item], spec: str) -> list[Item]:
    """``items`` with a name given twice (two ``fieldmem.case(name="step")``, or one function registered
    twice under its default name) kept for the first: each later one is an error of a name of its own
    (``step (2)``). Two results of one name cannot be told apart in a report or a baseline, and a check
    answering by name would give the first's verdict for both."""
    seen: dict[str, int] = {}
    unique: list[Item] = []
    for item in items:
        name = item[0] if isinstance(item, tuple) else item.name
        count = seen.get(name, 0) + 1
        seen[name] = count
        if count == 1:
            unique.append(item)
            continue
        while f"{name} ({count})" in seen:
            count += 1
        seen[f"{name} ({count})"] = 1
        unique.append(
            (
                f"{name} ({count})",
                TargetError(
                    f"{spec} registers more than one case named {name!r}: their results could not be told apart; "
                    "give each fieldmem.case(...) its own name="
                ),
            )
        )
    return unique


class LocalHands:
    """The hands in this process: the driver, and the user's code run here.

    A released job's compiled programs go where :func:`releases_held` says, if anywhere, instead of being
    freed at once (a worker answers first and frees after).

    ``modules_first``: :meth:`load` imports the user's modules before jax starts (the worker, which starts
    it after the first: what that module sets for jax is in force, :mod:`fieldmem.driver.settings`); else
    jax is started first, and a module's own ``XLA_FLAGS`` or ``JAX_*`` settings come too late for it.
    """

    def __init__(self, modules_first: bool = False, trace_arguments: bool = False) -> None:
        self.modules_first = modules_first
        self.trace_arguments = trace_arguments
        # the arguments :meth:`prepare` made, by the item's id (with the item, so the id stays its own)
        self._made: dict[int, tuple[Item, tuple[tuple, dict] | TargetResult]] = {}
        # a chain's steps' step_args :meth:`prepare` traced, by the chain's id: {step index: arguments}
        self._extras: dict[int, tuple[Item, dict[int, tuple[tuple, dict]]]] = {}

    def prepare(self, item: Item, options: CheckOptions) -> None:
        """Make the example arguments of ``item`` (a target, or a chain's first step, and each of its steps'
        step_args) now, before the worker says it started it, when they are traced (:mod:`fieldmem.driver.traced`; ``trace_arguments``, and
        neither ``--run`` nor ``--probe``, which call the program on them): :meth:`start` and :meth:`chain`
        take them. Anything else is made as it starts.

        Raises:
            ArgumentsLeaked: its factory kept a traced array; this process must not call it again, so the
                item is left to a fresh one.
        """
        target = item.first if isinstance(item, ChainTarget) else item
        if not isinstance(target, Target):
            return
        if _traced(target.function, target.args_factory, options, self.trace_arguments):
            self._made[id(item)] = (item, _arguments(target, options, trace=True))
        if isinstance(item, ChainTarget):
            extras = {
                n: made
                for n, step in enumerate(item.steps)
                if _traced(step.function, step.extras, options, self.trace_arguments)
                and (made := _traced_extras(step, options)) is not None
            }
            if extras:
                self._extras[id(item)] = (item, extras)

    def _take(self, item: Item, target: Target, options: CheckOptions) -> tuple[tuple, dict] | TargetResult:
        """The arguments of ``item``: those :meth:`prepare` made (traced), or made now."""
        made = self._made.pop(id(item), None)
        if made is not None and made[0] is item:
            return made[1]
        return _arguments(target, options)

    @contextlib.contextmanager
    def session(self, options: CheckOptions) -> Iterator[None]:
        from fieldmem.driver import compilation_cache, start_jax

        start_jax()  # before anything imports jax: quiet about the plugins' start-up noise
        with compilation_cache(options.cache_dir, options.backend):
            yield

    def load(
        self,
        specs: Sequence[str],
        target_options: TargetOptions,
        per_target: Mapping[str, TargetOptions] | None = None,
    ) -> list[Item]:
        if not self.modules_first:
            from fieldmem.driver import start_jax

            start_jax()  # the user's modules import jax: start it first, quiet about the plugins' start-up noise
        resolved: list[Item] = []
        per_target = per_target or {}
        for spec in specs:
            options = per_target.get(spec, target_options)
            files = folder_targets(spec)  # a folder: each of its files, those registering no case skipped
            found = 0
            for one in files if files is not None else (spec,):
                targets: list[Item]
                try:
                    targets = list(resolve_target(one, options, in_folder=files is not None))
                except FieldmemError as exc:
                    targets = [(one, exc)]
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # the module may call sys.exit on import: that spec's error
                    targets = [(one, contained(exc, "resolving it"))]
                resolved.extend(_one_name_each(targets, one))
                found += len(targets)
            if files is not None and not found:
                resolved.append((spec, TargetError(_empty_folder(spec, files))))
        return resolved

    def check_backend(self, backend: str) -> None:
        from fieldmem.driver import backend_devices

        backend_devices(backend)

    def environment(self, backend: str | None) -> Environment:
        from fieldmem.driver import environment

        return environment(backend)

    def start(self, target: Target, options: CheckOptions, pool: Executor | None) -> _LocalJob | TargetResult:
        arguments = self._take(target, target, options)
        if isinstance(arguments, TargetResult):
            return arguments
        job = _start(target, *arguments, options, pool)
        if isinstance(job, _LocalJob):  # its stand-ins (traced, or kept on the host) are forgotten when released
            from fieldmem.driver.placement import stand_ins_among

            job.stand_ins = stand_ins_among(arguments)
        return job

    def plain(self, job: Job) -> CompiledVariant:
        return _local(job).pending.plain().variant

    def variants(self, job: Job) -> tuple[CompiledVariant, CompiledVariant]:
        local = _local(job)
        if local.compiled is None:
            local.compiled = local.pending.result()
        plain, donated = local.compiled
        return plain.variant, donated.variant

    def call_shape(self, job: Job) -> CallShape:
        from fieldmem.driver import call_shape

        return call_shape(_local(job).pending.call)

    def compile_donation(
        self, job: Job, positions: Sequence[int], names: Sequence[str], *, fast: bool = False
    ) -> CompiledVariant:
        from fieldmem.driver import backend_scope, compile_donation

        local = _local(job)
        with backend_scope(local.backend):
            return compile_donation(local.pending.call, positions, names, fast=fast)

    def run(self, job: Job) -> dict[str, RunReading]:
        from fieldmem.driver import backend_scope, run_variant

        local = _local(job)
        plain, donated = _compiled(local)
        readings = {}
        with collector_resumed(), backend_scope(local.backend):  # the user's code runs
            # donated first: the device's high-water mark is then its own; a variant the compiler refused for
            # not fitting the device (compiled again without that check, to tell its figures) is not called
            for name, compiled in (("donated", donated), ("plain", plain)):
                if compiled.variant.out_of_memory is None:
                    readings[name] = run_variant(local.pending.call, compiled)
        return readings

    def probe(self, job: Job, input_index: int, output_index: int, factor: int) -> ProbeReading | None:
        from fieldmem.driver import backend_scope, probe_update

        local = _local(job)
        _, donated = _compiled(local)
        with collector_resumed(), backend_scope(local.backend):
            return probe_update(local.pending.call, donated, input_index, output_index, factor=factor)

    def release(self, job: Job) -> None:
        from fieldmem.driver.placement import forget_stand_ins

        local = _local(job)
        forget_stand_ins(local.stand_ins)  # held no longer by the registry: a long run's do not pile up
        hold(local.pending, local.compiled)

    def chain(self, chain: ChainTarget, options: CheckOptions) -> Generator[ChainStepJob, bool, None]:
        extras = self._extras.pop(id(chain), None)
        traced = extras[1] if extras is not None and extras[0] is chain else {}
        return _chain_jobs(chain, options, self._take(chain, chain.first, options), traced)


def _local(job: Job) -> _LocalJob:
    assert isinstance(job, _LocalJob), job
    return job


def _compiled(job: _LocalJob) -> tuple[Compiled, Compiled]:
    if job.compiled is None:
        job.compiled = job.pending.result()
    return job.compiled


def _empty_folder(spec: str, files: Sequence[str]) -> str:
    if not files:
        return (
            f"folder {spec!r} holds no .py file that mentions fieldmem: name a file or module, "
            "or register cases with fieldmem.case(...) in the folder's modules"
        )
    return f"no module of folder {spec!r} registers a fieldmem.case(...) (looked in {listing(files)})"


def _traced(
    function: Callable[..., Any], factory: Callable[[], Any] | None, options: CheckOptions, trace_arguments: bool
) -> bool:
    """Whether ``factory`` (a target's args, a step's step_args) is traced rather than run: asked for, nothing
    calls the program on the arguments (``--run``, ``--probe``), and ``function`` compiles the same program
    for abstract arguments."""
    if not trace_arguments or factory is None or options.run or options.probe:
        return False
    from fieldmem.driver.wrappers import takes_abstract_arguments

    return takes_abstract_arguments(function)


def _traced_extras(step: Step, options: CheckOptions) -> tuple[tuple, dict] | None:
    """``step``'s step_args traced (:mod:`fieldmem.driver.traced`); None where the trace cannot stand for a
    run, or its factory fails: the chain runs it then, as it always did (and its error is the step's).

    Raises:
        ArgumentsLeaked: the factory kept a tracer.
    """
    from fieldmem.driver import backend_scope
    from fieldmem.driver.traced import ArgumentsLeaked, traced_arguments

    try:
        with collector_resumed(), backend_scope(options.backend):  # the user's code is traced
            return traced_arguments(step.extra_arguments, f"step_args of {step.name}")
    except ArgumentsLeaked:
        raise
    except Exception:  # the backend's scope: the run fails on it too, with the step's error
        return None


def _arguments(target: Target, options: CheckOptions, trace: bool = False) -> tuple[tuple, dict] | TargetResult:
    """The target's example arguments (made on the target backend), or its error result: what its factory
    returns (``trace``: traced where a trace stands for a run, :mod:`fieldmem.driver.traced`), or the
    abstract arrays of its ``--shapes``.

    Raises:
        ArgumentsLeaked: traced, the factory kept a tracer.
    """
    make = target.example_arguments
    if target.args_factory is None and target.shapes is not None:
        shapes = target.shapes

        def make() -> tuple[tuple, dict]:
            from fieldmem.driver import shape_structs

            return shape_structs(shapes), {}

    elif trace:
        run = make
        origin = target.args_origin or str(getattr(target.args_factory, "__qualname__", "the args factory"))

        def make() -> tuple[tuple, dict]:
            from fieldmem.driver.traced import traced_arguments

            traced = traced_arguments(run, origin)
            return run() if traced is None else traced

    elif (options.run or options.probe) and _keeps_on_host(target, options):
        values = make

        def make() -> tuple[tuple, dict]:
            from fieldmem.driver.hosted import made_on_host

            return made_on_host(values)

    return _made_on_backend(target, make, "making its example arguments", options)


def _keeps_on_host(target: Target, options: CheckOptions) -> bool:
    """Whether a run keeps the example arguments on the host (:mod:`fieldmem.driver.hosted`): on a device with
    memory statistics, whose memory is the user's program's alone, where the function compiles the same
    program for abstract arguments (not an ``equinox.filter_jit`` or a pmap, which take the arrays)."""
    from fieldmem.driver.hosted import keeps_on_host
    from fieldmem.driver.wrappers import takes_abstract_arguments

    return keeps_on_host(options.backend) and takes_abstract_arguments(target.function)


def _made_on_backend(
    target: Target, make: Callable[[], tuple[tuple, dict]], stage: str, options: CheckOptions
) -> tuple[tuple, dict] | TargetResult:
    """``make()`` on the target backend: arguments, or the error result of ``target`` (``stage`` names it).

    Raises:
        ArgumentsLeaked: a traced factory kept a tracer (not the target's error: the process's).
    """
    from fieldmem.driver import backend_scope
    from fieldmem.driver.traced import ArgumentsLeaked

    try:
        with collector_resumed(), backend_scope(options.backend):  # the user's code
            return make()
    except ArgumentsLeaked:
        raise
    except BaseException as exc:  # the user's code may call sys.exit: the target's error (failed() raises Ctrl-C again)
        return failed(target, exc, stage)


def _start(
    target: Target, args: tuple, kwargs: dict, options: CheckOptions, pool: Executor | None
) -> _LocalJob | TargetResult:
    """Prepare and lower ``target`` on ``args`` in this thread; its compiles go to ``pool`` (None: at finish).
    The error result when preparing or lowering failed."""
    from fieldmem.driver import backend_scope, prepare_call, start_variants

    try:
        with collector_resumed(), backend_scope(options.backend):  # the user's code is traced
            call = prepare_call(target.function, args, kwargs, donate=target.donate, static=target.static)
            # with --jobs 1, one thing at a time: a compile never overlaps a lowering (the XLA seconds
            # a report gives then add up to the wall time they took)
            pending = start_variants(call, pool, fast=options.compile_fast, early=options.jobs > 1)
            return _LocalJob(target, pending.call, pending, options.backend)  # the call compiled
    except BaseException as exc:  # the user's code may call sys.exit: the target's error (failed() raises Ctrl-C again)
        return failed(target, exc, "preparing and lowering it")


def _step_donation(donate: DonateSpec) -> DonateSpec:
    """The donation of a chain's later steps: "all" and "none" carry over; names and numbers
    belong to the first step's arguments, so the later steps keep their default."""
    return donate if donate.mode in ("all", "none") else DonateSpec()


def _chain_jobs(
    chain: ChainTarget,
    options: CheckOptions,
    arguments: tuple[tuple, dict] | TargetResult,
    traced: Mapping[int, tuple[tuple, dict]] | None = None,
) -> Generator[ChainStepJob, bool, None]:
    """Every step (each with the previous step's outputs as its arguments, then its extras) and the fused chain;
    ``arguments``: the first step's (or the error result they gave); ``traced``: the steps' extras already
    traced, by step index (the others' factories are run here).

    A step is started in its own pool; the next is started once the brain has taken this one (its variants
    compiled: their outputs are what the next step is given)."""
    from fieldmem.driver import STEP_ARGS, compose, state_donation, step_key

    first = chain.first
    previous = None  # the outputs of the step before, abstract (None: it failed)
    given: dict[str, dict[str, Any]] = {}  # each step's extras by name, for the fused chain
    plan: list[tuple[str, tuple[str, ...], tuple[str, ...]] | None] = []
    for index, step in enumerate(chain.steps):
        step_target = dataclasses.replace(
            first,
            name=step_result_name(chain.name, index, step.name),
            function=step.function,
            definition=step.definition,
            # the chain's in-place expectation is checked on the chain; whether it fits, on each program
            expect="fits" if first.expect == "fits" else "any",
            donate=first.donate if index == 0 else _step_donation(first.donate),
            static=first.static if index == 0 else StaticSpec(),
        )
        plan.append(None)
        if index > 0 and previous is None:  # the step before failed: nothing to pass on
            yield ChainStepJob(index, step.name, step_target, None)
            continue
        if index == 0 and isinstance(arguments, TargetResult):
            result = dataclasses.replace(arguments, name=step_target.name, definition=step.definition)
            yield ChainStepJob(index, step.name, step_target, result)
            continue
        if step.extras is None:
            extras: tuple[tuple, dict] | TargetResult = ((), {})
        elif traced and index in traced:
            extras = traced[index]
        else:
            extras = _made_on_backend(step_target, step.extra_arguments, "making its step_args", options)
        if isinstance(extras, TargetResult):
            yield ChainStepJob(index, step.name, step_target, extras)
            previous = None
            continue
        given_state = arguments if index == 0 and not isinstance(arguments, TargetResult) else None
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(compile_pool(2 if options.jobs > 1 else 1))
            job, names = _step_job(step, step_target, previous, given_state, extras, options, pool)
            ok = yield ChainStepJob(index, step.name, step_target, job, names)
            # its outputs, abstract: the next step's arguments (built here, before its pool closes)
            previous = job.compiled[1].outputs if ok and isinstance(job, _LocalJob) and job.compiled else None
        if step.extras is not None and ok:
            key = step_key(index, step.name)
            given[key] = dict(zip(names, (*extras[0], *extras[1].values())))
            plan[-1] = (key, names[: len(extras[0])], tuple(extras[1]))

    if isinstance(arguments, TargetResult):
        return
    fused_target = dataclasses.replace(
        first, name=fused_result_name(chain.name), expect="fits" if first.expect == "fits" else "any"
    )
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
        composed = compose([s.function for s in chain.steps], name="_".join(s.name for s in chain.steps), extras=plan)
    except BaseException as exc:  # a step's pytree code may call sys.exit: the fused chain's error
        error = failed(fused_target, exc, "composing the chain's steps into one function")
        yield ChainStepJob(None, chain.name, fused_target, error)
        return
    fused_target = dataclasses.replace(fused_target, function=composed)
    if given:  # the extras are arguments of the fused program; its state alone is donated
        state = [*range(len(args)), *kwargs]
        fused_target = dataclasses.replace(
            fused_target, donate=state_donation(first.donate, composed, args, kwargs, state)
        )
        kwargs = {**kwargs, STEP_ARGS: given}
    with compile_pool(2 if options.jobs > 1 else 1) as pool:
        yield ChainStepJob(None, chain.name, fused_target, _start(fused_target, args, kwargs, options, pool))


def _step_job(
    step: Step,
    target: Target,
    previous: Any,
    arguments: tuple[tuple, dict] | None,
    extras: tuple[tuple, dict],
    options: CheckOptions,
    pool: Executor | None,
) -> tuple[_LocalJob | TargetResult, tuple[str, ...]]:
    """One step started on its state (the chain's ``arguments`` for the first step, else the ``previous``
    step's outputs) and its extras: its job, and the names of its extras."""
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
    except BaseException as exc:  # a step's pytree code may call sys.exit: the step's error
        return failed(target, exc, "passing the previous step's outputs to it"), ()
    return _start(target, args, kwargs, options, pool), names
