"""``--probe``: does an aliased slice update take time with the slice, or with the whole buffer?

:func:`probe_update` times the donated variant's update as it is and with
the updated buffer grown, alternating the two, and returns a
:class:`~fieldmem.readings.ProbeReading`; fieldmem.findings.runcheck reads the
growth. Compiling the larger program is the one compile it adds. jax is
imported on first use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
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
    args, kwargs, _ = fresh_arguments(call)
    return _timed(executable, args, kwargs)


def _timed(executable: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    import jax

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
    with that buffer ``factor`` times larger, alternating the two ``repeats`` times; and between them
    one in-place pass over a buffer of each size (the yardstick the growth is judged against).

    The largest dimension that still traces is grown, together with every
    argument leaf of the same shape (an update that reads a same-shaped
    array keeps working). None when no dimension can be grown. The pass is
    left out (empty timings) when no pass over that dtype and placement
    compiles.
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
        grown = _grown(leaves, shape, dim, factor)
        large_call = with_dynamic_leaves(call, grown, treedef)
        try:
            donated = compiled.variant.name != "plain"
            lowered, _, _ = lower(large_call, donated=donated, function=fresh_function(call.function))
            large, _, _ = compile_lowered(lowered)  # timed: always the default (optimised) code
        except CompileError:
            continue
        passes = _one_pass_programs(_abstract(target), grown[input_index])
        small_times: list[float] = []
        large_times: list[float] = []
        pass_times: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):  # alternate, so drift in the machine hits all alike
            small_times.append(_timed_call(compiled.executable, call))
            large_times.append(_timed_call(large, large_call))
            for times, (executable, make) in zip(pass_times, passes):
                times.append(_timed(executable, (make(),), {}))
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
            pass_small_seconds=tuple(pass_times[0]),
            pass_large_seconds=tuple(pass_times[1]),
        )
    return None


def _abstract(leaf: Any) -> Any:
    """``leaf`` as a ``ShapeDtypeStruct`` where it sits (an uncommitted array: where jit puts it)."""
    import jax

    if isinstance(leaf, jax.ShapeDtypeStruct):
        return leaf
    sharding = getattr(leaf, "sharding", None) if getattr(leaf, "committed", True) else None
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)


def _one_pass(value: Any) -> Any:
    """Every element read and written once: what rewriting the buffer costs at the least."""
    import jax.numpy as jnp
    from jax import lax

    return value + jnp.ones((), value.dtype) if jnp.issubdtype(value.dtype, jnp.inexact) else lax.bitwise_not(value)


def _one_pass_programs(*buffers: Any) -> list[tuple[Any, Callable[[], Any]]]:
    """For each abstract buffer, a compiled in-place pass over one like it (donated, so its output takes
    the buffer, as an aliased update's does) and what makes a fresh one to pass over; [] when a pass
    over that dtype or placement does not compile (a PRNG key array), so the probe goes without."""
    import jax

    from fieldmem.driver.execute import fresh_argument

    programs: list[tuple[Any, Callable[[], Any]]] = []
    for buffer in buffers:
        try:
            executable = jax.jit(_one_pass, donate_argnums=0).lower(buffer).compile()
        except Exception:
            return []
        programs.append((executable, functools.partial(_made, fresh_argument, buffer)))
    return programs


def _made(make: Callable[[Any], Any], buffer: Any) -> Any:
    import jax

    return jax.block_until_ready(make(buffer))


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
