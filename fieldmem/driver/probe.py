"""``--probe``: does an aliased slice update take time with the slice, or with the whole buffer?

:func:`probe_update` times the donated variant's update as it is and with
the updated buffer grown, alternating the two, and returns a
:class:`~fieldmem.model.readings.ProbeReading`; fieldmem.findings.probecheck reads the
growth. Beside the calls it times the yardstick: one in-place pass over the
call's own output of the updated buffer, at both sizes (what rewriting that
many bytes costs on this device, now). Compiling the larger program, and the
pass at the two sizes, are the compiles it adds. jax is imported on first use.
"""

from __future__ import annotations

import time
from typing import Any

from fieldmem.driver.execute import dynamic_leaves, fresh_arguments, with_dynamic_leaves
from fieldmem.driver.lowering import Compiled, compile_lowered, fresh_function, lower
from fieldmem.driver.prepare import PreparedCall
from fieldmem.driver.shapes import shape_bytes
from fieldmem.model.errors import CompileError
from fieldmem.model.readings import ProbeReading

__all__ = ["probe_update"]


def _timed_call(executable: Any, call: PreparedCall, output_index: int) -> tuple[float, Any]:
    """Seconds of one call of ``executable`` on fresh arguments (made before the clock starts), and its
    output leaf ``output_index`` (None: it has none), which the yardstick's pass then goes over."""
    args, kwargs, _ = fresh_arguments(call)
    return _timed(executable, args, kwargs, output_index)


def _timed(
    executable: Any, args: tuple[Any, ...], kwargs: dict[str, Any], keep: int | None = None
) -> tuple[float, Any]:
    """Seconds of one call of ``executable``, and its output leaf ``keep`` (None: none kept, or it has none).
    The rest of the output is freed after the clock stops: freeing a large buffer is not the call's time."""
    import jax

    began = time.perf_counter()
    out = jax.block_until_ready(executable(*args, **kwargs))
    seconds = time.perf_counter() - began
    leaves = jax.tree_util.tree_leaves(out) if keep is not None else []
    return seconds, leaves[keep] if keep is not None and keep < len(leaves) else None


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
    with that buffer ``factor`` times larger, alternating the two ``repeats`` times; and after each call
    one in-place pass over its output of that buffer (the yardstick the growth is judged against).

    The largest dimension that still traces is grown, together with every
    argument leaf of the same shape (an update that reads a same-shaped
    array keeps working). None when no dimension can be grown. The pass is
    left out (empty timings) when it cannot be timed at either size (a PRNG
    key array: no pass over it compiles).
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
        passes = (_Pass(_abstract(target)), _Pass(grown[input_index]))
        small_times: list[float] = []
        large_times: list[float] = []
        for _ in range(repeats):  # alternate, so drift in the machine hits all alike
            seconds, output = _timed_call(compiled.executable, call, output_index)
            small_times.append(seconds)
            passes[0].time(output)
            seconds, output = _timed_call(large, large_call, output_index)
            large_times.append(seconds)
            passes[1].time(output)
            del output
        timed = all(p.times for p in passes)  # one without the other measures nothing
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
            pass_small_seconds=tuple(passes[0].times) if timed else (),
            pass_large_seconds=tuple(passes[1].times) if timed else (),
        )
    return None


def _abstract(leaf: Any, shape: tuple[int, ...] | None = None) -> Any:
    """``leaf`` as a ``ShapeDtypeStruct`` (of ``shape``, else its own) where it sits: a committed array's
    sharding; an uncommitted one goes where jit puts it, as the user's own uncommitted argument does."""
    import jax

    if isinstance(leaf, jax.ShapeDtypeStruct) and shape is None:
        return leaf
    sharding = getattr(leaf, "sharding", None) if getattr(leaf, "committed", True) else None
    return jax.ShapeDtypeStruct(leaf.shape if shape is None else shape, leaf.dtype, sharding=sharding)


def _one_pass(value: Any) -> Any:
    """Every element read and written once: what rewriting the buffer costs at the least."""
    import jax.numpy as jnp
    from jax import lax

    return value + jnp.ones((), value.dtype) if jnp.issubdtype(value.dtype, jnp.inexact) else lax.bitwise_not(value)


class _Pass:
    """The yardstick at one size: one in-place pass (donated, so its output takes the buffer, as an aliased
    update's does) over the call's own output of the updated buffer's shape, which is there already (no
    buffer to make, nor memory to add); over a fresh buffer like it where the output is not of that shape.
    Its :attr:`times` are empty when no pass could be timed (a PRNG key array does not compile)."""

    def __init__(self, like: Any) -> None:
        self.like = like  # the updated buffer at this size, abstract
        self.executable: Any = None
        self.failed = False
        self.times: list[float] = []

    def time(self, output: Any) -> None:
        if self.failed:
            return
        import jax

        from fieldmem.driver.execute import fresh_argument

        try:
            if output is None or tuple(output.shape) != tuple(self.like.shape) or output.dtype != self.like.dtype:
                output = jax.block_until_ready(fresh_argument(self.like))
            if self.executable is None:  # for the buffer where it is (the output's sharding)
                self.executable = _jitted_pass().lower(output).compile()
            self.times.append(_timed(self.executable, (output,), {})[0])
        except Exception:  # no pass over it: the probe goes without a yardstick, and says so
            self.failed, self.times = True, []


def _jitted_pass() -> Any:
    import jax

    return jax.jit(_one_pass, donate_argnums=0)


def _grown(leaves: list[Any], shape: tuple[int, ...], dim: int, factor: int) -> list[Any]:
    """``leaves`` with every array leaf of ``shape`` made an abstract one ``factor`` times larger along ``dim``
    (keeping the sharding of a committed one, :func:`_abstract`); the other leaves as they are."""
    grown_shape = tuple(n * factor if d == dim else n for d, n in enumerate(shape))
    return [
        _abstract(leaf, grown_shape) if tuple(getattr(leaf, "shape", ())) == shape and hasattr(leaf, "dtype") else leaf
        for leaf in leaves
    ]
