"""The hands in the worker process, as the parent's brain sees them: readings that come over the pipe.

The worker (:mod:`fieldmem.worker.serve`) starts each target itself, in the order
of its request, and sends what the brain will ask for as soon as it has it; a
question only the brain can pose (the advisor's compiles, a probe, whether a chain
step went through) is sent to the worker and waited for. :class:`RemoteHands`
answers the brain's questions (:class:`~fieldmem.worker.readers.Hands`) from those
events, through a :class:`Link` that the supervisor (:mod:`fieldmem.parent.isolate`)
gives it: the link reads the worker's events, keeps those of other targets for
later, and raises :class:`~fieldmem.worker.readers.HandsLost` when the worker dies
or runs past ``--timeout``.

A target the hands ended (its arguments, tracing or compile failed in the worker)
answers the brain's next question with :class:`~fieldmem.worker.readers.Failed`,
carrying the target's error result. No jax.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from fieldmem.model.errors import FieldmemError
from fieldmem.model.readings import CallShape, CompiledVariant, Environment, ProbeReading, RunReading
from fieldmem.model.target import TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, Target, TargetOptions, described_target
from fieldmem.worker.protocol import decode_error, decode_value
from fieldmem.worker.readers import ChainStepJob, Failed, Item, Job

__all__ = ["Key", "Link", "RemoteHands", "RemoteJob", "event_key"]

# a target's name in the worker's events: (backend, spec, name), and a chain step's place ("fused" for the
# fused chain) after them
Key = tuple[Any, ...]


def event_key(event: Mapping[str, Any]) -> Key:
    """The target (or chain step) an event of the worker is about."""
    key: Key = (int(event["b"]), int(event["spec"]), str(event["name"]))
    return key + (event["step"],) if "step" in event else key


class Link(Protocol):
    """The supervisor's end of one worker, for the brain's questions."""

    def wait(self, key: Key, kinds: frozenset[str]) -> dict[str, Any]:
        """The next event of a kind in ``kinds`` about ``key`` (raises HandsLost when the worker is gone)."""
        ...

    def send(self, request: dict[str, Any]) -> None:
        """A request to the worker, about the target it is serving."""
        ...


@dataclass(eq=False)
class RemoteJob:
    """A target the worker is serving: what has come of it so far."""

    key: Key
    target: Target
    interactive: bool  # the worker waits for the brain's questions and its release
    step: bool = False  # a chain step: its release says whether it went through, when the chain goes on
    plain: CompiledVariant | None = None
    donated: CompiledVariant | None = None
    shape: CallShape | None = None
    waiting: bool = False  # the worker waits for this job's release now


_ENDED = "error"  # the event of a target the hands ended, with its error result


class RemoteHands:
    """The brain's questions about the targets a worker serves, answered from its events (see the module)."""

    def __init__(self, link: Link, options: CheckOptions, chain_key: Key | None = None) -> None:
        """``chain_key``: the key of the chain the brain will ask :meth:`chain` about (one per chain)."""
        self._link = link
        self._interactive = bool(options.suggest or options.probe)
        self._chain_key = chain_key
        self._jobs: list[RemoteJob] = []  # every job made here, so that abandon() can let the worker go on
        self._chain_open = False

    def job(self, key: Key, target: Target) -> RemoteJob:
        """The job of target ``target``, which the worker serves as ``key``."""
        job = RemoteJob(key, target, self._interactive)
        self._jobs.append(job)
        return job

    def abandon(self) -> None:
        """The brain stopped asking (it failed): release every job the worker still waits on, and take the
        rest of a chain's steps, each released as not gone through, so that the worker goes on."""
        for job in self._jobs:
            if job.waiting:
                job.waiting = False
                self._link.send({"op": "release", "ok": False})
        if self._chain_open:
            steps = self._chain()
            with contextlib.suppress(StopIteration):
                next(steps)
                while True:
                    steps.send(False)

    # -- what the worker decides itself, not asked from here --------------------------------------------

    def session(self, options: CheckOptions) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def load(
        self, specs: Sequence[str], target_options: TargetOptions, per_target: Mapping[str, TargetOptions] | None = None
    ) -> list[Item]:
        raise FieldmemError("the worker loads its specs from its request")

    def check_backend(self, backend: str) -> None:
        raise FieldmemError("the worker checks its backends from its request")

    def environment(self, backend: str | None) -> Environment:
        raise FieldmemError("the worker reports its environment after its targets")

    def prepare(self, item: Item, options: CheckOptions) -> None:
        raise FieldmemError("the worker makes its targets' arguments itself")

    def start(self, target: Target, options: CheckOptions, pool: Executor | None) -> Job | TargetResult:
        raise FieldmemError("the worker starts its targets in the order of its request")

    # -- the questions ----------------------------------------------------------------------------------

    def _event(self, job: RemoteJob, kind: str) -> dict[str, Any]:
        event = self._link.wait(job.key, frozenset((kind, _ENDED)))
        if event["e"] == _ENDED:
            # the worker is done with it; one that had sent its variants still awaits the release
            raise Failed(decode_value(TargetResult, event["result"]))
        return event

    def plain(self, job: Job) -> CompiledVariant:
        remote = _remote(job)
        if remote.plain is None:
            remote.plain = decode_value(CompiledVariant, self._event(remote, "plain")["variant"])
        return remote.plain

    def variants(self, job: Job) -> tuple[CompiledVariant, CompiledVariant]:
        remote = _remote(job)
        plain = self.plain(remote)
        if remote.donated is None:
            event = self._event(remote, "variants")
            remote.donated = decode_value(CompiledVariant, event["donated"])
            remote.shape = decode_value(CallShape, event["call"])
            remote.waiting = remote.interactive
        return plain, remote.donated

    def call_shape(self, job: Job) -> CallShape:
        remote = _remote(job)
        self.variants(remote)
        assert remote.shape is not None
        return remote.shape

    def _ask(self, job: RemoteJob, request: dict[str, Any]) -> Any:
        if not job.waiting:
            raise FieldmemError(f"fieldmem's worker no longer serves {job.target.name}: {request['op']} was not asked")
        self._link.send(request)
        event = self._event(job, "answer")
        if "error" in event:
            raise decode_error(event["error"])
        return event["value"]

    def compile_donation(
        self, job: Job, positions: Sequence[int], names: Sequence[str], *, fast: bool = False
    ) -> CompiledVariant:
        request = {"op": "compile_donation", "positions": list(positions), "names": list(names), "fast": fast}
        return decode_value(CompiledVariant, self._ask(_remote(job), request))

    def run(self, job: Job) -> dict[str, RunReading]:
        event = self._event(_remote(job), "run")
        if "error" in event:
            raise decode_error(event["error"])
        return decode_value(dict[str, RunReading], event["readings"])

    def probe(self, job: Job, input_index: int, output_index: int, factor: int) -> ProbeReading | None:
        request = {"op": "probe", "input_index": input_index, "output_index": output_index, "factor": factor}
        return decode_value(ProbeReading | None, self._ask(_remote(job), request))  # type: ignore[arg-type]

    def release(self, job: Job) -> None:
        remote = _remote(job)
        if remote.waiting and not remote.step:  # a chain step is released by the chain, with its outcome
            remote.waiting = False
            with contextlib.suppress(OSError):
                self._link.send({"op": "release"})

    def chain(self, chain: ChainTarget, options: CheckOptions) -> Generator[ChainStepJob, bool, None]:
        return self._chain()

    def _chain(self) -> Generator[ChainStepJob, bool, None]:
        key = self._chain_key
        assert key is not None, "RemoteHands for a chain are made with its key"
        self._chain_open = True
        while True:
            event = self._link.wait(key, frozenset(("step", "chain-end")))
            if event["e"] == "chain-end":
                self._chain_open = False
                return
            target = described_target(event["target"])
            job = RemoteJob(key + (event["at"],), target, True, step=True) if event["passed"] else None
            if job is not None:
                self._jobs.append(job)
            index = event["index"]
            went_through = yield ChainStepJob(
                None if index is None else int(index), str(event["step_name"]), target, job, tuple(event["extras"])
            )
            if job is not None and job.waiting:
                job.waiting = False
                self._link.send({"op": "release", "ok": bool(went_through)})


def _remote(job: Job) -> RemoteJob:
    assert isinstance(job, RemoteJob), job
    return job
