"""``--probe``: does an aliased slice update take time with the slice, or with the whole buffer?

:func:`probe_update` times the donated variant's update as it is and with
the updated buffer grown, alternating the two, and returns a
:class:`~fieldmem.readings.ProbeReading`; fieldmem.findings.runcheck reads the
growth. Compiling the larger program is the one compile it adds. jax is
imported on first use.
"""

from __future__ import annotations

import time
from typing import Any

from fieldmem.driver.execute import dynamic_leaves, fresh_arguments, with_dynamic_leaves
from fieldmem.driver.lowering import Compiled, compile_lowered, fresh_function, lower
from fieldmem.driver.prepare import PreparedCall
from fieldmem.driver.shapes import shape_bytes
from fieldmem.errors import CompileError
from fieldmem.readings import ProbeReading

__all__ = ["probe_update"]


def _timed_call(executable: Any, call: PreparedCall) -> float:
    """Seconds of one call of ``executable`` on fresh arguments (made before the clock starts)."""
    import jax

    args, kwargs, _ = fresh_arguments(call)
    began = time.perf_counter()
    out = jax.block_until_ready(executable(*args, **kwargs))
    seconds = time.perf_counter() - began
    del out  # freed after the clock stops: freeing a large buffer is not the update's time
    return seconds


def probe_update(
    call: PreparedCall,
    compiled: Compiled,
    input_index: int,
    output_index: int,
    *,
    factor: int = 4,
    repeats: int = 21,
) -> ProbeReading | None:
    """Time ``compiled``'s update of input leaf ``input_index`` (returned as ``output_index``) as it is and
    with that buffer ``factor`` times larger, alternating the two ``repeats`` times.

    The largest dimension that still traces is grown, together with every
    argument leaf of the same shape (an update that reads a same-shaped
    array keeps working). None when no dimension can be grown. Compiling
    the larger program is the one compile this adds.
    """
    leaves, treedef = dynamic_leaves(call)
    if input_index >= len(leaves):
        return None
    target = leaves[input_index]
    shape = tuple(getattr(target, "shape", ()))
    dtype = getattr(target, "dtype", None)
    if not shape or dtype is None:
        return None
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
        large_call = with_dynamic_leaves(call, _grown(leaves, shape, dim, factor), treedef)
        try:
            donated = compiled.variant.name != "plain"
            lowered, _, _ = lower(large_call, donated=donated, function=fresh_function(call.function))
            large, _, _ = compile_lowered(lowered)  # timed: always the default (optimised) code
        except CompileError:
            continue
        small_times: list[float] = []
        large_times: list[float] = []
        for _ in range(repeats):  # alternate, so drift in the machine hits both alike
            small_times.append(_timed_call(compiled.executable, call))
            large_times.append(_timed_call(large, large_call))
        small_bytes = shape_bytes(shape, dtype)
        return ProbeReading(
            input_index=input_index,
            output_index=output_index,
            dimension=dim,
            factor=factor,
            small_bytes=small_bytes,
            large_bytes=small_bytes * factor,
            small_seconds=tuple(small_times),
            large_seconds=tuple(large_times),
        )
    return None


def _grown(leaves: list[Any], shape: tuple[int, ...], dim: int, factor: int) -> list[Any]:
    """``leaves`` with every array leaf of ``shape`` made an abstract one ``factor`` times larger along ``dim``
    (keeping the sharding of a committed one); the other leaves as they are."""
    import jax

    grown_shape = tuple(n * factor if d == dim else n for d, n in enumerate(shape))
    grown = []
    for leaf in leaves:
        if tuple(getattr(leaf, "shape", ())) == shape and hasattr(leaf, "dtype"):
            # an uncommitted array goes where jit puts it, as the user's own uncommitted argument does
            sharding = getattr(leaf, "sharding", None) if getattr(leaf, "committed", True) else None
            grown.append(jax.ShapeDtypeStruct(grown_shape, leaf.dtype, sharding=sharding))
        else:
            grown.append(leaf)
    return grown
