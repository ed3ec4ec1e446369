"""The hands of a check: everything it does with jax and the user's code, behind one interface of readings.

The brain (:mod:`fieldmem.parent.checker`) decides what to compile, analyse,
suggest, run and probe; the hands do it and answer with plain records
(:mod:`fieldmem.model.readings`): a compiled variant's reading, the call's shape, a
run's or a probe's reading. What the hands keep for a target between two
questions (the user's function and arguments, the lowered and compiled
programs, a chain step's outputs) stays behind a :class:`Job`, which the brain
only hands back. :class:`~fieldmem.worker.local_readers.LocalHands` does it in
this process through :mod:`fieldmem.driver`;
:class:`~fieldmem.parent.remote_readers.RemoteHands` asks a worker. This module
holds the interface both answer to and what they share.

This module never analyses: it imports the request and the model, never
findings or xla (``tests/project/test_layers.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol

from fieldmem.model.errors import FieldmemError
from fieldmem.model.readings import CallShape, CompiledVariant, Environment, ProbeReading, RunReading
from fieldmem.model.target import TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, Target, TargetOptions
from fieldmem.worker.results import contained, error_result

__all__ = [
    "ChainStepJob",
    "Failed",
    "Hands",
    "HandsLost",
    "Item",
    "Job",
    "TargetPool",
    "compile_pool",
    "failed",
    "hold",
    "releases_held",
    "target_pool",
]

# what loading a spec gives: a target, a chain, or the spec with the error that stopped it
Item = Target | ChainTarget | tuple[str, FieldmemError]


class Job(Protocol):
    """What the hands keep for one target between the brain's questions; the brain only reads ``target``."""

    @property
    def target(self) -> Target: ...


@dataclass(frozen=True)
class ChainStepJob:
    """One program of a chain as the hands checked it: a step (``index``) or the fused chain (``index`` None),
    its target, its job (or the error result that stopped it), and the names of the extras it takes."""

    index: int | None
    name: str  # the step's name (its function's), or the chain's for the fused chain
    target: Target
    job: Job | TargetResult | None  # None: the step before it failed, so nothing was passed on
    extras: tuple[str, ...] = ()


class Failed(Exception):
    """A question about a target that its hands answered with the target's end: its error result (a compile
    that failed in another process). The brain reports ``result`` as the target's."""

    def __init__(self, result: TargetResult) -> None:
        super().__init__(result.error.message if result.error is not None else result.name)
        self.result = result


class HandsLost(BaseException):
    """The hands are gone (their process died, or was killed past ``--timeout``): no target's error to
    contain where it was asked; whoever supervises the hands charges it. A BaseException, so that the
    brain's containment of a target's own errors lets it through."""


class Hands(Protocol):
    """What a check asks of jax and of the user's code. Every method answers with readings or raises a
    :class:`~fieldmem.model.errors.FieldmemError` (a :class:`~fieldmem.model.errors.RunError` for a run or a probe);
    :meth:`start` and :meth:`chain` contain every error of a target in its result instead."""

    def session(self, options: CheckOptions) -> contextlib.AbstractContextManager[None]:
        """Around a whole check on ``options.backend``: jax started, its compilation cache as asked."""
        ...

    def load(
        self,
        specs: Sequence[str],
        target_options: TargetOptions,
        per_target: Mapping[str, TargetOptions] | None = None,
    ) -> list[Item]:
        """Every target of ``specs``, the user's modules imported (a spec that fails is ``(spec, error)``)."""
        ...

    def check_backend(self, backend: str) -> None:
        """Raise :class:`~fieldmem.model.errors.OptionError` when ``backend`` is not available here."""
        ...

    def environment(self, backend: str | None) -> Environment:
        """The versions, backend and devices a report of ``backend`` records."""
        ...

    def prepare(self, item: Item, options: CheckOptions) -> None:
        """Before ``item`` starts: make what must be made before the parent hears of it (traced example
        arguments, :class:`~fieldmem.worker.local_readers.LocalHands`), or nothing. Raises ``ArgumentsLeaked``
        (:mod:`fieldmem.driver.traced`) when this process must not go on."""
        ...

    def start(self, target: Target, options: CheckOptions, pool: Executor | None) -> Job | TargetResult:
        """Make the target's example arguments, prepare the call and lower both variants; their compiles go to
        ``pool`` (None: when first asked for). The error result of the target when any of it failed."""
        ...

    def plain(self, job: Job) -> CompiledVariant:
        """The plain variant's reading (waits for its compile)."""
        ...

    def variants(self, job: Job) -> tuple[CompiledVariant, CompiledVariant]:
        """The plain and donated variants' readings (waits for both compiles)."""
        ...

    def call_shape(self, job: Job) -> CallShape:
        """The call compiled, as the advisor reasons about it (after :meth:`variants`)."""
        ...

    def compile_donation(
        self, job: Job, positions: Sequence[int], names: Sequence[str], *, fast: bool = False
    ) -> CompiledVariant:
        """The call compiled with another donation (the advisor's verifying compiles)."""
        ...

    def run(self, job: Job) -> dict[str, RunReading]:
        """Both variants run once on fresh arguments (donated first), read per leaf and device."""
        ...

    def probe(self, job: Job, input_index: int, output_index: int, factor: int) -> ProbeReading | None:
        """One aliased update of the donated variant timed at two buffer sizes (``--probe``); None when no
        dimension of the buffer can be grown."""
        ...

    def release(self, job: Job) -> None:
        """The brain is done with ``job``: what it holds may go."""
        ...

    def chain(self, chain: ChainTarget, options: CheckOptions) -> Generator[ChainStepJob, bool, None]:
        """Each step of ``chain`` started on the previous step's outputs (then the fused chain), one at a time.
        The brain sends back whether the step it was given went through (checked, its variants compiled):
        the next step is given its outputs, or nothing when it did not."""
        ...


def failed(target: Target, exc: BaseException, stage: str) -> TargetResult:
    """The error result of ``target`` for ``exc``, raised while ``stage``: a fieldmem error as it is, any
    other exception as one line of kind ``internal`` (``FIELDMEM_DEBUG=1`` re-raises it instead), a
    ``SystemExit`` or another ``BaseException`` from the user's code as one line of kind ``crash``.
    KeyboardInterrupt is raised again: Ctrl-C stops the run."""
    return error_result(target.spec, target.name, contained(exc, stage), target.definition)


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


def hold(*objects: Any) -> None:
    """Keep ``objects`` until the caller of :func:`releases_held` frees them (nothing to do outside it)."""
    held = _held.get()
    if held is not None:
        held.append(objects)


@contextlib.contextmanager
def compile_pool(workers: int) -> Iterator[Executor | None]:
    """A thread pool for XLA compiles (None when ``workers`` is 0: compile in place); the one the worker's
    loop, the in-process checker and a job's own compiles share."""
    if workers <= 0:
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        yield pool


class TargetPool(Executor):
    """One pool of compile threads for every target, each target's compiles awaited by :meth:`drain` before the
    next starts: as a pool of the target's own, started and joined with it, would have them, without the
    start and the join of its threads per target (a few milliseconds each on a loaded machine, a third of a
    second over 100 targets)."""

    def __init__(self, pool: Executor) -> None:
        self._pool = pool
        self._submitted: list[Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = self._pool.submit(fn, *args, **kwargs)
        self._submitted.append(future)
        return future

    def drain(self) -> None:
        """Wait for every compile submitted since the last drain (those of a target that failed part way too)."""
        submitted, self._submitted = self._submitted, []
        wait(submitted)


@contextlib.contextmanager
def target_pool(workers: int) -> Iterator[TargetPool | None]:
    """A :class:`TargetPool` over a :func:`compile_pool` of ``workers`` threads (None when ``workers`` is 0)."""
    with compile_pool(workers) as pool:
        yield None if pool is None else TargetPool(pool)
