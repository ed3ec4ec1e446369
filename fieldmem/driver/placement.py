"""Where each argument leaf is when the call is made, against where the compiled program takes it.

jax hands a compiled program its arguments where its input shardings say. A leaf given elsewhere is copied
there before every call: a NumPy array or a Python number from the host, an uncommitted jax array (one made
without a device, ``jnp.ones(n)``) onto the devices and sharding the program wants. A donated leaf so moved is
donated as the copy, and its own buffer stays alive. This module reads that from the example arguments and
``Compiled.input_shardings`` (its one reader here, tolerated when missing) into plain
:class:`~fieldmem.model.readings.Placement` data; :mod:`fieldmem.findings.transfers` says what it means.

A deviceless compile has no placement to read (its arguments are placed on the topology's chips for it).
jax is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fieldmem.driver.shapes import shape_bytes
from fieldmem.model.readings import Placement

__all__ = [
    "TRANSFER_LOG",
    "buffer_identity",
    "flat_shardings",
    "memory_kind",
    "moved",
    "other_memory",
    "placement",
    "same_placement",
    "sharding_key",
]

#: a line jax's transfer guard logs in ``log`` mode: one per shard it copies (absl's prefix before it)
TRANSFER_LOG = r"guard_lib\.cc:\d+\] (host-to-device|device-to-device) transfer: aval=(.*), dst_sharding=(.*)$"


def flat_shardings(compiled: Any, which: str = "input") -> list[Any] | None:
    """The compiled program's ``input_shardings`` (or ``output_shardings``) as a flat list, in jax's order of
    its leaves (None where jax does not say)."""
    import jax

    try:
        tree = getattr(compiled, f"{which}_shardings")
        return list(jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "device_set")))
    except Exception:
        return None


def memory_kind(sharding: Any) -> str | None:
    """The memory kind of ``sharding`` as jax names it ("device", "pinned_host"; None where it says none)."""
    kind = getattr(sharding, "memory_kind", None)
    return kind if isinstance(kind, str) else None


def other_memory(sharding: Any) -> str | None:
    """The memory kind of ``sharding`` where it is not the device's own ("pinned_host"); None otherwise."""
    kind = memory_kind(sharding)
    return kind if kind != "device" else None


def moved(target: Any, shape: tuple[int, ...], dtype: Any) -> tuple[int, int, int]:
    """What jax writes to give the program a leaf of ``shape`` and ``dtype`` in ``target``: the bytes on
    every device together, on one device, and the number of devices."""
    devices = len(getattr(target, "device_set", ()) or ()) or 1
    try:
        shard = tuple(target.shard_shape(shape))
    except Exception:
        shard = shape
    each = shape_bytes(shard, dtype)
    return each * devices, each, devices


def placement(
    value: Any, target: Any, shape: tuple[int, ...], dtype: Any, describe_sharding: Callable[[Any], str | None]
) -> Placement | None:
    """Where the argument leaf ``value`` is against ``target``, the program's sharding for it (``shape`` and
    ``dtype``: the leaf as the program takes it; ``describe_sharding``: a sharding in the report's words);
    None where it cannot be said."""
    import jax
    import numpy as np

    if isinstance(value, jax.ShapeDtypeStruct):
        stood = stood_for(value)
        if stood is None:
            sharding = getattr(value, "sharding", None)
            return Placement("abstract", describe_sharding(sharding) if sharding is not None else None)
        if target is None:
            return None
        committed, sharding = stood  # an array the pytest plugin sent as its shape: where it was
        return _array_placement(
            "array" if committed else "uncommitted", sharding, target, shape, dtype, describe_sharding
        )
    if target is None:
        return None
    if isinstance(value, (np.ndarray, np.generic)):
        total, each, devices = moved(target, shape, dtype)
        return Placement("numpy", None, None, "host-to-device", total, each, devices)
    if isinstance(value, (bool, int, float, complex)):
        total, each, devices = moved(target, shape, dtype)
        return Placement("scalar", None, None, "host-to-device", total, each, devices)
    if not isinstance(value, jax.Array):
        return None
    try:
        sharding = value.sharding
    except Exception:  # a deleted array, a tracer: nothing to say
        return None
    given = "array" if getattr(value, "committed", True) else "uncommitted"
    return _array_placement(given, sharding, target, shape, dtype, describe_sharding)


# arrays sent to a worker as their shape (fieldmem.driver.sendable), traced (fieldmem.driver.traced) or kept
# on the host for a run (fieldmem.driver.hosted): id -> (the stand-in, committed, sharding, its host copy or
# None); a target's dropped when it is released, the rest when the next request arrives (forget_stand_ins).
# A ShapeDtypeStruct takes no weak reference: the record holds it, so its id is never another object's while
# recorded.
_STOOD_FOR: dict[int, tuple[Any, bool, Any, Any]] = {}


def forget_stand_ins(structs: Iterable[Any] | None = None) -> None:
    """Drop the records of ``structs`` (the stand-ins of a target done with), or of every stand-in (None: the
    arrays an earlier request sent; a warm worker serves a whole pytest session). Anything in ``structs``
    that is not a recorded stand-in is left alone."""
    if structs is None:
        _STOOD_FOR.clear()
        return
    for struct in structs:
        entry = _STOOD_FOR.get(id(struct))
        if entry is not None and entry[0] is struct:
            del _STOOD_FOR[id(struct)]


def stand_in(struct: Any, committed: bool, sharding: Any, host: Any = None) -> Any:
    """Record that ``struct`` (a ``ShapeDtypeStruct``) stands for a jax array of ``sharding`` (``committed``
    or not), so that its placement is that array's, not "nothing to move"; ``host``: the array's values, kept
    in host memory (a NumPy array) for a run to put on the device. Returns ``struct``."""
    _STOOD_FOR[id(struct)] = (struct, committed, sharding, host)
    return struct


def host_copy(struct: Any) -> Any | None:
    """The host copy of the array ``struct`` stands for (:func:`stand_in`'s ``host``; None: none kept)."""
    entry = _STOOD_FOR.get(id(struct))
    return entry[3] if entry is not None and entry[0] is struct else None


def stand_ins_among(tree: Any) -> tuple[Any, ...]:
    """The stand-ins (:func:`stand_in`) among the leaves of ``tree`` (a target's arguments)."""
    import jax

    return tuple(
        leaf
        for leaf in jax.tree_util.tree_leaves(tree)
        if isinstance(leaf, jax.ShapeDtypeStruct) and stood_for(leaf) is not None
    )


def buffer_identity(value: Any) -> tuple[Any, ...] | None:
    """What makes two argument leaves one buffer in a call: a jax array's shard buffers (two array objects can
    share them: ``jax.device_put(x, device)`` of an ``x`` already there), or the object itself for a traced
    factory's stand-in (:mod:`fieldmem.driver.traced` keeps an array returned twice one object). None for a leaf
    that is no buffer of the call's own: a NumPy array or a Python number (jax copies each onto the devices
    apart), a ``ShapeDtypeStruct`` the user gave (a shape, which two arguments may share), anything else.
    """
    import jax

    if isinstance(value, jax.Array):
        try:
            return ("buffers", value.unsafe_buffer_pointer())  # one device: a fifth of the shards' cost
        except Exception:
            pass
        try:
            return ("buffers", *(s.data.unsafe_buffer_pointer() for s in value.addressable_shards))
        except Exception:  # a deleted array, one whose buffers cannot be read: the object stands for them
            return ("object", id(value))
    if isinstance(value, jax.ShapeDtypeStruct) and stood_for(value) is not None:
        return ("object", id(value))
    return None


def stood_for(struct: Any) -> tuple[bool, Any] | None:
    """``(committed, sharding)`` of the array ``struct`` stands for (:func:`stand_in`); None: a shape the user gave."""
    entry = _STOOD_FOR.get(id(struct))
    return (entry[1], entry[2]) if entry is not None and entry[0] is struct else None


def _array_placement(
    given: str,
    sharding: Any,
    target: Any,
    shape: tuple[int, ...],
    dtype: Any,
    describe_sharding: Callable[[Any], str | None],
) -> Placement:
    kind = memory_kind(sharding)
    wanted_kind = memory_kind(target)
    try:
        same = sharding is target or sharding == target or bool(sharding.is_equivalent_to(target, len(shape)))
    except Exception:
        same = describe_sharding(sharding) == describe_sharding(target)
    if same and (kind == wanted_kind or None in (kind, wanted_kind)):
        return Placement(given, None, kind)  # where it is taken: the leaf's sharding says it
    where = describe_sharding(sharding)
    try:
        same_devices = set(sharding.device_set) == set(target.device_set)
    except Exception:
        same_devices = False
    moves = "memory-kind" if same_devices and same_placement(sharding, target, len(shape)) else "across-devices"
    total, each, devices = moved(target, shape, dtype)
    _, held, _ = moved(sharding, shape, dtype)
    return Placement(given, where, kind, moves, total, each, devices, held)


def same_placement(a: Any, b: Any, ndim: int) -> bool:
    """Whether shardings ``a`` and ``b`` lay the leaf out over the devices alike, whatever their memory kinds."""
    try:
        if hasattr(a, "with_memory_kind") and memory_kind(b) is not None:
            a = a.with_memory_kind(memory_kind(b))
        return bool(a.is_equivalent_to(b, ndim))
    except Exception:
        return False


def sharding_key(aval: str, sharding: Any) -> str:
    """How jax's transfer guard names a copy of a leaf of ``aval`` (its text) into ``sharding``."""
    return f"aval={aval}, dst_sharding={sharding!r}"
