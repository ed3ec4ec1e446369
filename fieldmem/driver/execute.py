"""Running a compiled variant (``--run``): one call on fresh arguments, its buffers and device memory read.

:func:`run_variant` calls a :class:`~fieldmem.driver.lowering.Compiled`
executable on arguments made anew and returns a
:class:`~fieldmem.model.readings.RunReading`: per-shard buffer addresses of every
input leaf before the call and every output leaf after it, which inputs jax
deleted, and ``Device.memory_stats()`` per device (read in
:func:`device_memory_stats` only; None where the backend has none, e.g. cpu).
It judges nothing: fieldmem.findings.runcheck holds the readings against the
plan. jax is imported on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from fieldmem.driver.backends import backend_devices
from fieldmem.driver.jaxerrors import first_line, message_lines
from fieldmem.driver.lowering import Compiled
from fieldmem.driver.prepare import PreparedCall
from fieldmem.driver.variant import executable_devices
from fieldmem.model.errors import OptionError, RunError
from fieldmem.model.readings import (
    CallPlan,
    CompiledVariant,
    DeviceStats,
    RunReading,
    device_bytes,
    plan_call,
    shared_buffers,
)

__all__ = [
    "call_error",
    "device_memory_stats",
    "dynamic_leaves",
    "fresh_argument",
    "fresh_arguments",
    "has_memory_stats",
    "planned_bytes",
    "run_variant",
    "with_dynamic_leaves",
]


def has_memory_stats(backend: str | None = None) -> bool:
    """Whether the devices of ``backend`` (None: jax's default) give ``memory_stats()`` (GPU, TPU; not cpu)."""
    import jax

    try:
        devices = backend_devices(backend) if backend is not None else jax.devices()
    except OptionError:
        return False
    return device_memory_stats(devices[0]) is not None


def device_memory_stats(device: Any) -> dict[str, int] | None:
    """``device.memory_stats()``, read in one place (None where the backend has none, e.g. cpu)."""
    try:
        stats = device.memory_stats()
    except Exception:
        return None
    return dict(stats) if stats else None


def _read_stats(devices: Sequence[Any]) -> dict[int, dict[str, int] | None]:
    return {d.id: device_memory_stats(d) for d in devices}


def fresh_argument(value: Any, host: bool = False) -> Any:
    """A new device buffer for one argument leaf, so each run starts from buffers of its own.

    An array keeps its committedness: a committed one is copied onto its own
    sharding, an uncommitted one (``jnp.int32(7)``, anything made without a
    device) is copied uncommitted, so that jit still places it where the
    compiled program wants it, as it would the user's. Pinning it to the
    device it happens to be on makes a sharded program refuse it. A NumPy
    array is put on the device, or with ``host`` stays a NumPy array: the call
    copies it onto the device, as the user's call does (and a run measures that copy). A
    ``ShapeDtypeStruct`` becomes the array it stands for, from the host copy kept of it
    (:mod:`fieldmem.driver.hosted`), else zeros of its shape and sharding.
    """
    import jax
    import numpy as np

    from fieldmem.driver.placement import host_copy, stood_for

    if isinstance(value, jax.ShapeDtypeStruct):
        kept, placed = host_copy(value), stood_for(value)
        if kept is not None and placed is not None:  # an example argument kept on the host (driver.hosted)
            committed, where = placed
            array = jax.device_put(kept, where if committed else None)
            if any(d.platform == "cpu" for d in array.sharding.device_set):
                # XLA:CPU may take the NumPy copy's memory as it is, a buffer a donation cannot consume: copied
                # once more into one of its own (a TPU or GPU copies it onto the device anyway)
                return fresh_argument(array)
            return array
        sharding = getattr(value, "sharding", None)
        return jax.numpy.zeros(value.shape, value.dtype, device=sharding)
    if isinstance(value, jax.Array):
        if getattr(value, "committed", True):
            return jax.device_put(value, value.sharding, may_alias=False)
        return jax.device_put(value, may_alias=False)
    if isinstance(value, (np.ndarray, np.generic)):
        # with ``host``, it stays on the host: the call copies it onto the device, as the user's does
        return value.copy() if host else jax.numpy.asarray(value)
    return value


def _buffer(value: Any) -> tuple[tuple[int, ...] | None, str | None]:
    """The per-shard buffer addresses of one leaf (device order), or None and why they cannot be read."""
    import jax
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic)):
        return None, (
            "a NumPy array, on the host at call time: jax copies it onto the device inside the call, in a buffer "
            "the run cannot read"
        )
    if not isinstance(value, jax.Array):
        return None, (
            f"a Python {type(value).__name__}, not an array, at call time: jax puts it on the device inside "
            "the call, in a buffer the run cannot read"
        )
    try:
        shards = sorted(value.addressable_shards, key=lambda s: s.device.id)
        return tuple(s.data.unsafe_buffer_pointer() for s in shards), None
    except Exception as exc:
        return None, f"an array whose buffer address cannot be read ({first_line(exc)})"


def _deleted(value: Any) -> bool | None:
    import jax

    return bool(value.is_deleted()) if isinstance(value, jax.Array) else None


def call_error(exc: BaseException) -> str:
    """A failed call's exception in one line. Where jax's message introduces a list on its first line
    ("Here are the 1 mismatches:"), the list follows on the same line, so the line names what disagrees."""
    lines = message_lines(exc)
    if len(lines) <= 1 or not lines[0].endswith(":"):
        return first_line(exc)
    text = lines[0]
    for line in lines[1:_CALL_ERROR_LINES]:
        text += (" " if text.endswith(":") else "; ") + line
    if len(lines) > _CALL_ERROR_LINES:
        text += f" (and {len(lines) - _CALL_ERROR_LINES} more lines)"
    return f"{type(exc).__name__}: {text}"


_CALL_ERROR_LINES = 13  # the first line and 12 of the list it introduces (4 mismatching arguments)


def run_variant(call: PreparedCall, compiled: Compiled) -> RunReading:
    """Call ``compiled``'s executable once on fresh arguments and read what happened.

    The arguments are made anew (``ShapeDtypeStruct``s as zeros with their
    sharding), so a donated run never consumes the user's arrays and each run
    has buffers of its own. Memory statistics are read per device before the
    arguments are made, before the call and after it.

    Raises:
        RunError: the call raised (``out-of-memory`` when the device ran out).
    """
    import jax

    name = compiled.variant.name
    devices = executable_devices(compiled.executable) or [jax.devices()[0]]
    refused = _refused_call(compiled.variant, len(devices))
    if refused is not None:
        raise RunError(f"the {name} variant is not run: {refused}", kind="not-run")
    start = _read_stats(devices)
    dyn_args, dyn_kwargs, leaves = fresh_arguments(call, f"the {name} variant", True)  # host: as given
    before = [_buffer(leaf) for leaf in leaves]
    pads = _lift(devices, start, _read_stats(devices), planned_bytes(compiled.variant))
    ready = _read_stats(devices)
    guard = _TransferLog()
    began = time.perf_counter()
    try:
        with guard:
            out = compiled.executable(*dyn_args, **dyn_kwargs)
            jax.block_until_ready(out)
    except Exception as exc:
        del pads
        text = call_error(exc)
        kind = "out-of-memory" if out_of_memory(exc) else "run"
        raise RunError(f"running the {name} variant failed: {text}", kind=kind) from None
    seconds = time.perf_counter() - began
    transferred, unmatched, unavailable = guard.per_leaf(call, compiled, leaves)
    after = _read_stats(devices)
    lifted = {d.id: _in_use(ready[d.id]) - _in_use(pads.before[d.id]) if pads.lifted(d) else 0 for d in devices}
    del pads  # freed before anything else is read or run
    outputs = jax.tree_util.tree_leaves(out)
    returned = [_buffer(leaf) for leaf in outputs]
    reading = RunReading(
        variant=name,
        input_pointers=tuple(pointers for pointers, _ in before),
        output_pointers=tuple(pointers for pointers, _ in returned),
        deleted=tuple(_deleted(leaf) for leaf in leaves),
        memory=tuple(
            _device_stats(d.id, start[d.id], ready[d.id], after[d.id], d.platform, lifted[d.id]) for d in devices
        ),
        seconds=seconds,
        input_unreadable=tuple(why for _, why in before),
        output_unreadable=tuple(why for _, why in returned),
        transferred=transferred,
        transfers_unmatched=unmatched,
        transfers_unavailable=unavailable,
        platform=devices[0].platform if devices else None,
    )
    del out, outputs, leaves, dyn_args, dyn_kwargs
    return reading


def planned_bytes(variant: CompiledVariant) -> CallPlan:
    """What the device's allocator is planned to hold at the peak of one call of ``variant``, per device
    (:func:`fieldmem.model.readings.plan_call`: the rule of its platform)."""
    dropped = sum(
        device_bytes(leaf.bytes, leaf.shape, leaf.device_shape) for leaf in variant.inputs if leaf.hlo_parameter is None
    )
    return plan_call(variant.platform, variant.memory, dropped_bytes=dropped)


#: how far above the device's high-water mark a call is lifted (:func:`_lift`): its own peak is read exactly
#: down to this far below its plan (and its code's size further: the code may be on the device already)
LIFT_MARGIN_SHARE = 0.02
LIFT_MARGIN_MIN = 1 << 20
_MiB = 1 << 20


@dataclasses.dataclass
class _Pads:
    """What :func:`_lift` allocated (dropped with the object) and the statistics read before it."""

    arrays: dict[int, list[Any]]  # device id -> the blocks held on it
    before: dict[int, dict[str, int] | None]

    def lifted(self, device: Any) -> bool:
        """Whether a lift is held on ``device``."""
        return bool(self.arrays.get(device.id))


def _lift(
    devices: Sequence[Any],
    start: dict[int, dict[str, int] | None],
    ready: dict[int, dict[str, int] | None],
    planned: CallPlan,
) -> _Pads:
    """Lift each device's memory in use, with a buffer of fieldmem's held through the call, so far that the call
    is planned to peak above the device's high-water mark: ``peak_bytes_in_use`` never resets, and a call that
    stays under a mark an earlier call of the process set (the other variant, another target) cannot be read.
    Lifted by the mark less what the call is planned to reach, plus a margin (:data:`LIFT_MARGIN_SHARE` of the
    plan, at least :data:`LIFT_MARGIN_MIN`, and the executable's code, which an identical program may have
    loaded already): the call's peak is then its own down to that margin below its plan, and the measured
    peak is the high-water mark after it less the memory in use before its arguments were made and the lift.
    Nothing is lifted where the call already reaches past the mark, where the device gives no statistics, or
    where the lift would not fit beside the call on the device (its memory limit). The lift is put on the
    device from the host: no program runs for it, so none of its own is loaded beside the call."""
    import jax
    import numpy as np

    pads = _Pads({}, dict(ready))
    plan = planned.bytes
    if plan is None:
        return pads
    for device in devices:
        first, now = start.get(device.id), ready.get(device.id)
        if not first or not now:
            continue
        mark, base, limit = now.get("peak_bytes_in_use"), first.get("bytes_in_use"), now.get("bytes_limit")
        if mark is None or base is None:
            continue
        margin = max(LIFT_MARGIN_MIN, int(plan * LIFT_MARGIN_SHARE)) + int(planned.code or 0)
        lift = mark + margin - (base + plan)
        if lift <= 0:
            continue
        if limit is not None and mark + margin > limit:
            continue  # no room for it beside the call: read the call as it is
        left = -(-lift // _MiB) * _MiB  # whole MiB, in blocks of powers of two
        blocks = pads.arrays.setdefault(device.id, [])
        try:
            while left > 0:
                block = 1 << (left.bit_length() - 1)
                blocks.append(jax.device_put(np.zeros(block, np.uint8), device))
                left -= block
            jax.block_until_ready(blocks)
        except Exception:  # no room after all: the call is read as it is
            blocks.clear()
    return pads


def _in_use(stats: dict[str, int] | None) -> int:
    return int((stats or {}).get("bytes_in_use") or 0)


def _refused_call(variant: CompiledVariant, devices: int) -> str | None:
    """Why the run does not make the call, or None: over several devices, a donated array the call also gives
    under another path. jax refuses such a call where an output reuses the donation, and over several devices
    jax 0.10.2 kills the process instead of raising (tests/driver/test_shared_buffers.py): the run would end in a
    worker crash that says nothing of why. Which donations an output reuses is in the compiled HLO, which the
    driver does not read, so it does not make any call that gives a donated array twice there (on one device
    jax raises, and the run reports jax's own error); the brain, which reads the HLO, says whether jax would
    have refused it (:func:`fieldmem.findings.runcheck.apply_not_run`)."""
    if devices < 2:
        return None
    shared = shared_buffers(variant.inputs)
    for leaf in variant.inputs:
        if leaf.donated and leaf.index in shared:
            again = ", ".join(other.path for other in shared[leaf.index] if other.index != leaf.index)
            return (
                f"{leaf.path} is donated and also given as {again}, one array; jax refuses a call that donates a "
                f"buffer it also reads where an output reuses it, and over {devices} devices it can kill the process "
                "instead of refusing (jax 0.10.2 on CPU does), so the run does not make it"
            )
    return None


class _TransferLog:
    """The call run under jax's transfer guard in ``log`` mode, with fd 2 caught: jax logs one line per shard
    it copies onto a device for the call (:data:`fieldmem.driver.placement.TRANSFER_LOG`), and
    :meth:`per_leaf` reads them back as the bytes it copied of each argument leaf."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.unavailable: str | None = None
        level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "")
        if level.strip().isdigit() and int(level) >= 2:
            self.unavailable = (
                f"TF_CPP_MIN_LOG_LEVEL={level} hides the warnings jax's transfer guard logs each transfer with"
            )
        elif not hasattr(os, "pread"):
            self.unavailable = "reading jax's transfer log needs os.pread, which this platform lacks"

    def __enter__(self) -> _TransferLog:
        if self.unavailable is not None:
            self._stack = contextlib.ExitStack()
            return self
        import jax

        from fieldmem.driver.placement import TRANSFER_LOG
        from fieldmem.driver.quiet import quiet_stderr

        self._stack = contextlib.ExitStack()
        try:
            self._quiet = self._stack.enter_context(quiet_stderr(take=re.compile(TRANSFER_LOG)))
            self._stack.enter_context(jax.transfer_guard("log"))
        except Exception as exc:
            self._stack.close()
            self.unavailable = f"jax's transfer guard could not be set to log ({first_line(exc)})"
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if error is not None and self.unavailable is None:
            # XLA logs the error it raises ("E… ExecutePrepareWithOomRetries failed: INVALID_ARGUMENT: …"):
            # the run reports it in one line of its own, so its log line is taken, not written back
            said = str(error).strip().splitlines()
            if said and said[0].strip():
                self._quiet.take_also(re.compile(re.escape(said[0].strip()[:120])))
        self._stack.close()
        if self.unavailable is None:
            self.lines = list(self._quiet.taken)

    def per_leaf(
        self, call: PreparedCall, compiled: Compiled, leaves: Sequence[Any]
    ) -> tuple[tuple[int, ...], int, str | None]:
        """The bytes logged copying each of ``leaves`` (report order) onto the devices, the logged copies
        that match no leaf, and why nothing was measured (then the first is empty)."""
        if self.unavailable is not None:
            return (), 0, self.unavailable
        from fieldmem.driver.leaves import flat_order
        from fieldmem.driver.placement import TRANSFER_LOG, flat_shardings, moved, sharding_key

        shardings = flat_shardings(compiled.executable, "input")
        order = flat_order(call)
        if shardings is None or len(order) != len(leaves) or len(shardings) != len(leaves):
            return (), 0, "the program's input shardings could not be matched to the argument leaves"
        pattern = re.compile(TRANSFER_LOG)
        logged: dict[str, int] = {}
        for line in self.lines:
            found = pattern.search(line)
            if found:
                key = f"aval={found.group(2)}, dst_sharding={found.group(3)}"
                logged[key] = logged.get(key, 0) + 1
        inputs = compiled.variant.inputs
        # a leaf jax was to move takes its copies first among the leaves of one key (they cannot be told apart)
        moving = {leaf.index for leaf in inputs if leaf.placement is not None and leaf.placement.moves}
        ranked = sorted(range(len(leaves)), key=lambda i: i not in moving)
        transferred = [0] * len(leaves)
        for index in ranked:
            target = shardings[order[index]]
            aval = _aval_text(leaves[index])
            if aval is None:
                continue
            key = sharding_key(aval, target)
            lines = logged.get(key, 0)
            if not lines:
                continue
            shape = tuple(getattr(leaves[index], "shape", ()) or ())
            _, each, devices = moved(target, shape, _dtype(leaves[index]))
            taken = min(lines, devices)
            logged[key] = lines - taken
            transferred[index] = taken * each
        return tuple(transferred), sum(logged.values()), None


def _aval_text(value: Any) -> str | None:
    """How jax names ``value``'s abstract value in its transfer log (None where it has none)."""
    import jax

    try:
        return repr(jax.typeof(value))
    except Exception:
        return None


def _dtype(value: Any) -> Any:
    import jax

    try:
        return jax.typeof(value).dtype
    except Exception:
        return getattr(value, "dtype", None)


def _device_stats(
    device: int,
    start: dict[str, int] | None,
    before: dict[str, int] | None,
    after: dict[str, int] | None,
    platform: str,
    lifted: int = 0,
) -> DeviceStats:
    if after is None:
        return DeviceStats(
            device=device,
            unavailable=f"Device.memory_stats() gives nothing on {platform}",
        )
    return DeviceStats(
        device=device,
        in_use_start=(start or {}).get("bytes_in_use"),
        in_use_before=(before or {}).get("bytes_in_use"),
        in_use_after=after.get("bytes_in_use"),
        peak=after.get("peak_bytes_in_use"),
        peak_start=(start or {}).get("peak_bytes_in_use"),
        peak_before=(before or {}).get("peak_bytes_in_use"),
        lifted=lifted,
        reserved_start=(start or {}).get("bytes_reserved"),
        reserved_peak=after.get("peak_bytes_reserved"),
    )


def dynamic_leaves(call: PreparedCall) -> tuple[list[Any], Any]:
    """The dynamic argument values in report order (positional, then keywords as given) and their treedef."""
    import jax

    dynamic = [call.args[i] for i in range(len(call.args)) if i not in call.static_positions]
    keywords = [call.kwargs[k] for k in call.kwargs if k not in call.static_names]
    return jax.tree_util.tree_flatten((dynamic, keywords))


def with_dynamic_leaves(call: PreparedCall, leaves: list[Any], treedef: Any) -> PreparedCall:
    """``call`` with its dynamic argument leaves replaced (static arguments kept in place)."""
    import jax

    dynamic, keywords = jax.tree_util.tree_unflatten(treedef, leaves)
    args, position = list(call.args), iter(dynamic)
    for i in range(len(args)):
        if i not in call.static_positions:
            args[i] = next(position)
    kwargs, values = dict(call.kwargs), iter(keywords)
    for key in call.kwargs:
        if key not in call.static_names:
            kwargs[key] = next(values)
    return dataclasses.replace(call, args=tuple(args), kwargs=kwargs)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device (or the host) ran out of memory."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def fresh_arguments(
    call: PreparedCall, what: str = "the call", host: bool = False
) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """New buffers for every dynamic argument leaf of ``call``, made and ready: the positional and
    keyword arguments to call the executable with, and the leaves in report order (``host``: a NumPy
    array stays one, so the call copies it as the user's does). Leaves that are one buffer in ``call``
    (one array given twice) get one new buffer, so the run makes the call the user makes: jax refuses
    to donate a buffer the same call also reads.

    Raises:
        RunError: making them failed (``out-of-memory`` when the device ran out); ``what``
            (``the donated variant``) names the call they were for.
    """
    import jax

    from fieldmem.driver.placement import buffer_identity

    leaves, treedef = dynamic_leaves(call)
    try:
        made: dict[tuple[Any, ...], Any] = {}  # one new buffer per buffer of the call's
        fresh = []
        for leaf in leaves:
            buffer = buffer_identity(leaf)
            if buffer is None:
                fresh.append(fresh_argument(leaf, host))
            else:
                if buffer not in made:
                    made[buffer] = fresh_argument(leaf, host)
                fresh.append(made[buffer])
        jax.block_until_ready(fresh)
    except Exception as exc:
        if out_of_memory(exc):
            raise RunError(
                f"out of memory making the arguments of {what}: {call_error(exc)}", kind="out-of-memory"
            ) from None
        raise RunError(f"making the arguments of {what} failed: {call_error(exc)}") from None
    dynamic, keywords = jax.tree_util.tree_unflatten(treedef, fresh)
    names = [k for k in call.kwargs if k not in call.static_names]
    return tuple(dynamic), dict(zip(names, keywords)), fresh
