"""The worker's side of a check: the hands do each target and answer with readings; the parent's brain decides.

The worker (:mod:`fieldmem.worker.main`) has loaded the specs; :func:`serve_items`
goes through their targets in order, as :func:`fieldmem.parent.checker.check_targets`
would, and for each sends the parent what the brain asks of the hands
(:mod:`fieldmem.worker.protocol` lists the events): the plain variant's reading as
soon as it is compiled (the parent analyses it while the donated one compiles), the
donated one with the call's shape, the run's readings (``--run``), or the target's
error result where the hands could not go on. Where the brain has more to ask
(``--suggest``, ``--probe``, a chain's next step) the worker waits for its requests,
answers each, and goes on at its ``release``. A chain's steps go one at a time: the
brain's ``release`` says whether the step went through, and the next step is given
its outputs, or nothing.

Without questions to wait for, targets are pipelined as in the checker (``--jobs`` > 1,
no ``--run``): one is lowered while the compiles of those before it run.

This module never analyses: it imports the hands, the request and ground, never findings
or xla (``tests/project/test_layers.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from fieldmem.driver.traced import ArgumentsLeaked
from fieldmem.model.codec import dumps
from fieldmem.model.errors import FieldmemError, RunError
from fieldmem.model.target import TargetResult
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, describe_chain, describe_target
from fieldmem.worker.protocol import encode_error
from fieldmem.worker.readers import Hands, Item, Job, compile_pool, failed, target_pool
from fieldmem.worker.results import contained, error_result

__all__ = ["Channel", "serve_items"]


class Channel(Protocol):
    """How the worker talks to its parent while it serves targets."""

    def emit(self, what: str, key: Mapping[str, Any], encoded: Mapping[str, str] | None = None, **fields: Any) -> None:
        """Send event ``what`` about the target (or chain step) ``key``; ``encoded``: fields as JSON text."""
        ...

    def ask(self) -> dict[str, Any]:
        """The parent's next request about the target being served (blocks until it comes)."""
        ...


def serve_items(
    items: Sequence[Item],
    keys: Sequence[Mapping[str, Any]],
    options: CheckOptions,
    hands: Hands,
    channel: Channel,
    before: Callable[[int], None] | None = None,
    after: Callable[[int, bool], None] | None = None,
) -> None:
    """Serve every item in order: ``keys[n]`` names item ``n`` in its events (backend, spec, name).

    ``before(n)`` is called as item ``n`` starts; ``after(n, failed)`` once the worker is done with it,
    ``failed`` when the hands ended it (or a step of its chain) with an error result.

    Raises:
        ArgumentsLeaked: an item's traced args factory kept a tracer (:meth:`LocalHands.prepare`): the items
            before it are answered, it and those after it are not, and this process must serve no more.
    """
    interactive = options.suggest or options.probe
    pipelined = options.jobs > 1 and not options.run and not interactive
    in_flight: deque[tuple[int, Job]] = deque()
    # unpipelined, each target's compiles run in one pool kept across the targets: a pool of its own per target
    # started and joined a thread for each, 4.5 ms a target on the 2-core machine (benchmarks/results/
    # own-time-pool.md). Its compiles are still all awaited (drain) before the next target is lowered
    own_threads = 0 if pipelined else 2 if options.jobs > 1 else 1
    with compile_pool(options.jobs if pipelined else 0) as pool, target_pool(own_threads) as own:
        for n, item in enumerate(items):
            if before is not None:
                before(n)
            key = keys[n]
            try:
                hands.prepare(item, options)  # traced arguments: made before the parent hears of the item
            except ArgumentsLeaked:  # this process is done: those started are answered, the rest left
                while in_flight:
                    done, pending = in_flight.popleft()
                    _after(after, done, _serve_job(pending, keys[done], options, hands, channel, False)[0])
                raise
            if isinstance(item, tuple):
                spec, error = item
                channel.emit("start", key, kind="error")
                _after(after, n, _serve_job(error_result(spec, spec, error), key, options, hands, channel, False)[0])
                continue
            if isinstance(item, ChainTarget):
                # a chain waits for the brain at each step, and the brain answers targets in the order they
                # started: those in flight go first
                while in_flight:
                    done, pending = in_flight.popleft()
                    _after(after, done, _serve_job(pending, keys[done], options, hands, channel, False)[0])
                channel.emit("start", key, kind="chain", chain=describe_chain(item))
                _after(after, n, _serve_chain(item, key, options, hands, channel))
                continue
            channel.emit("start", key, kind="target", target=describe_target(item))
            if pool is not None:
                job = hands.start(item, options, pool)
                if isinstance(job, TargetResult):
                    _after(after, n, _serve_job(job, key, options, hands, channel, False)[0])
                    continue
                in_flight.append((n, job))
                while len(in_flight) > options.jobs:
                    done, pending = in_flight.popleft()
                    _after(after, done, _serve_job(pending, keys[done], options, hands, channel, False)[0])
                continue
            assert own is not None
            try:  # one target's compiles at a time: those it started end before the next starts
                job = hands.start(item, options, own)
                _after(after, n, _serve_job(job, key, options, hands, channel, interactive)[0])
            finally:
                own.drain()
        while in_flight:
            done, pending = in_flight.popleft()
            _after(after, done, _serve_job(pending, keys[done], options, hands, channel, False)[0])


def _after(after: Callable[[int, bool], None] | None, n: int, failed: bool) -> None:
    if after is not None:
        after(n, failed)


def _serve_job(
    job: Job | TargetResult,
    key: Mapping[str, Any],
    options: CheckOptions,
    hands: Hands,
    channel: Channel,
    interactive: bool,
) -> tuple[bool, bool | None]:
    """Send a started target's readings (and answer the brain's questions when ``interactive``): whether the
    hands ended it with an error result, and what the brain's ``release`` said (None: no release awaited)."""
    if isinstance(job, TargetResult):
        channel.emit("error", key, encoded={"result": dumps(job)})
        channel.emit("done", key)
        return True, None
    stage = "compiling it"
    asked = False  # "variants" went out for an interactive job: the brain's release is awaited, come what may
    try:
        plain = hands.plain(job)
        stage = _SENDING
        channel.emit("plain", key, encoded={"variant": dumps(plain)})
        stage = "compiling it"
        _, donated = hands.variants(job)
        shape = hands.call_shape(job)
        stage = _SENDING
        channel.emit("variants", key, encoded={"donated": dumps(donated), "call": dumps(shape)})
        asked = interactive
        if options.run:
            stage = "running it"
            try:
                readings = hands.run(job)
            except RunError as exc:
                channel.emit("run", key, error=encode_error(exc))
            else:
                stage = _SENDING
                channel.emit("run", key, encoded={"readings": dumps(readings)})
        return False, _questions(job, key, hands, channel) if interactive else None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code may call sys.exit: the target's error, sent to the parent
        channel.emit("error", key, encoded={"result": dumps(failed(job.target, exc, stage))})
        # the brain, which has the variants, still asks and releases: answered until it does
        return True, _questions(job, key, hands, channel) if asked else None
    finally:
        hands.release(job)
        channel.emit("done", key)


_SENDING = "sending its readings"  # the stage of a failure to write a reading on the pipe
# what each question of the brain does, in the words of a failure
_STAGES = {"compile_donation": "compiling it with another donation", "probe": "probing it"}


def _questions(job: Job, key: Mapping[str, Any], hands: Hands, channel: Channel) -> bool:
    """Answer the brain's questions about ``job`` until its ``release``; what the release said (went through)."""
    while True:
        request = channel.ask()
        op = request.get("op")
        if op == "release":
            return bool(request.get("ok", True))
        try:
            value: Any
            if op == "compile_donation":
                value = hands.compile_donation(
                    job, tuple(request["positions"]), tuple(request["names"]), fast=bool(request["fast"])
                )
            elif op == "probe":
                value = hands.probe(
                    job, int(request["input_index"]), int(request["output_index"]), int(request["factor"])
                )
            else:
                raise FieldmemError(f"fieldmem's worker was asked {op!r}, which it does not know")
            channel.emit("answer", key, encoded={"value": dumps(value)})
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code may call sys.exit: the answer's error
            channel.emit("answer", key, error=encode_error(contained(exc, _STAGES.get(str(op), "answering"))))


def _serve_chain(
    chain: ChainTarget, key: Mapping[str, Any], options: CheckOptions, hands: Hands, channel: Channel
) -> bool:
    """Serve each step of ``chain`` (then the fused chain): whether the hands ended any with an error."""
    steps = hands.chain(chain, options)
    went_through: bool | None = None
    any_failed = False
    while True:
        try:
            step = next(steps) if went_through is None else steps.send(went_through)
        except StopIteration:
            break
        at = step.index if step.index is not None else "fused"
        step_key = {**key, "step": at}
        channel.emit(
            "step",
            key,
            at=at,
            index=step.index,
            step_name=step.name,
            target=describe_target(step.target),
            extras=list(step.extras),
            passed=step.job is not None,
        )
        if step.job is None:  # the step before failed: nothing was passed on
            went_through = False
            continue
        ended, released = _serve_job(step.job, step_key, options, hands, channel, True)
        any_failed = any_failed or ended
        went_through = not ended and bool(released)
    channel.emit("chain-end", key)
    return any_failed
