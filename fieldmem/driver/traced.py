"""Example arguments traced, not run: an args factory's arrays as the abstract values a run would give.

A check compiles; it needs the arguments' shapes, dtypes and placements,
never their values. Running a factory computes values: each eager jax
operation in it (``jax.random.normal`` for a model's weights) compiles a
small program of its own, and the arrays take memory the check never reads.
:func:`traced_arguments` calls the factory inside a jax trace instead
(``jax.make_jaxpr``), so its jax operations are recorded, not compiled or run,
and every array it makes becomes a ``jax.ShapeDtypeStruct`` of the traced
value's shape, dtype and weak type. Each stands in
(:func:`~fieldmem.driver.placement.stand_in`) for the uncommitted array on the
default device that running the factory makes, so the report's placements are
that array's. Leaves the trace does not touch (NumPy arrays, Python numbers,
arrays made before the call, anything else) are kept as the factory returned
them, and one traced array returned twice stays one object.

A trace answers for the program the check compiles only where running the
factory would give the same abstract values. It is refused, and the factory
runs as before (the caller's job), where that is not certain:

- the trace raises (the factory reads a value: ``float(x)``, ``np.asarray(x)``,
  ``x.block_until_ready()``; or anything else);
- the factory places arrays: ``jax.device_put`` onto a device or sharding, a
  sharding constraint, ``shard_map``, ``pmap``, a jit with shardings, or any
  other operation with a sharding or a memory kind among its parameters
  (a traced array has no committed placement to stand for);
- it has effects (a callback, ``jax.debug.print``: a run would call them);
- a traced output is not a plain array (a reference), or carries a mesh or a
  memory space other than the device's;
- one pytree node other than a tuple, list or dict is met twice in what it
  returns (an ``nnx`` module or variable given twice): rebuilt from the trace,
  the two would be two objects, and ``nnx.jit`` tells shared from equal (a
  leaf given twice is kept as it is, one object).

The danger is a factory that keeps what it made: a ``functools.cache``, a
module-level dict, an ``nnx.Module`` kept for the next call. Traced, it would
keep a tracer, and the next call (the next target, or ``--run``) would fail on
it in a process where running the factory works. After every trace this
module checks, as jax's ``checking_leaks`` does, that the trace is gone once
its own references are dropped (a tracer references its trace); where it is
not, :class:`ArgumentsLeaked` is raised. The process cannot call that factory
again: the worker ends, and a fresh one checks the rest with factories run
(:mod:`fieldmem.worker.main`).

What the factory prints to ``sys.stdout`` from the tracing thread is held
while it is traced: printed once the trace is taken, dropped where the trace
is refused or a tracer is kept (the factory is run then, and prints it again).

jax internals read here, and only here: ``jax._src.core.Tracer`` (what is a
tracer), ``jax._src.core.trace_ctx.trace`` and ``Trace._weakref`` (the trace
a factory runs in, to see whether it outlived the trace), ``ShapedArray``'s
``sharding`` and ``memory_space``. Where one is missing, nothing is traced.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ArgumentsLeaked", "default_sharding", "traced_arguments"]


class ArgumentsLeaked(BaseException):
    """A traced factory kept a tracer past its trace: this process must not call it again.

    A BaseException, so that no handler of a target's errors takes it for the target's own error.
    """

    def __init__(self, origin: str) -> None:
        super().__init__(f"the args factory {origin} kept a traced array past the trace")
        self.origin = origin


# primitives whose outputs have a placement, an effect or a value the trace cannot give: refused by name
_PLACING = frozenset(
    {
        "sharding_constraint",
        "reshard",
        "mesh_cast",
        "shard_map",
        "xla_pmap",
        "pure_callback",
        "io_callback",
        "debug_callback",
        "callback",
        "infeed",
        "outfeed",
    }
)


def traced_arguments(
    make: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]], origin: str
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``make()``'s ``(args, kwargs)`` with every array it made traced, not run (the module's docstring says
    how); None where the trace cannot stand for a run (the caller runs ``make`` then). ``origin`` names the
    factory in :class:`ArgumentsLeaked`.

    Raises:
        ArgumentsLeaked: the factory kept a tracer (the process must not call it again).
    """
    try:
        import jax
        from jax._src import core

        tracer_type = core.Tracer
        context = core.trace_ctx
        shaped = core.ShapedArray
        device_space = core.MemorySpace.Device
    except (ImportError, AttributeError):  # another jax: run the factory
        return None

    box: dict[str, Any] = {}

    def factory() -> list[Any]:
        trace = context.trace
        box["trace"] = trace._weakref
        del trace
        value = make()
        seen: list[int] = []  # every subtree's id, leaves included (is_leaf is asked of each)

        def visit(node: Any) -> bool:
            if node is not None and type(node) not in (tuple, list, dict):
                seen.append(id(node))
            return False

        leaves, box["treedef"] = jax.tree_util.tree_flatten(value, is_leaf=visit)
        # a pytree node met twice: unflattening rebuilds it as two objects (a leaf is kept as it is)
        kept = {id(leaf) for leaf in leaves}
        box["shared"] = any(n > 1 and key not in kept for key, n in collections.Counter(seen).items())
        del value
        # each traced array once (by identity), in order; the other leaves as they are
        traced: list[Any] = []
        order: dict[int, int] = {}
        slots: list[tuple[bool, Any]] = []
        for leaf in leaves:
            if isinstance(leaf, tracer_type):
                slot = order.setdefault(id(leaf), len(traced))
                if slot == len(traced):
                    traced.append(leaf)
                slots.append((True, slot))
            else:
                slots.append((False, leaf))
        box["slots"] = slots
        del leaves
        return traced

    with _printed_held() as printed:
        try:
            closed = jax.make_jaxpr(factory)()
        except (Exception, SystemExit):  # it reads a value, or fails: run, it fails as the user knows it
            closed = None
    trace_ref = box.pop("trace", None)
    if trace_ref is None:  # the trace did not start (another jax): run the factory
        return None
    if trace_ref() is not None:
        gc.collect()  # a cycle through the trace, now freed; or a tracer the factory kept
        if trace_ref() is not None:
            raise ArgumentsLeaked(origin)  # what it printed is dropped: a fresh process runs it
    arguments = None if closed is None or box["shared"] else _arguments(closed, box, shaped, device_space)
    if arguments is not None:  # what it printed is printed once; refused, running it prints it again
        printed.replay()
    return arguments


class _HeldPrints:
    """``sys.stdout`` while a factory is traced: what the tracing thread prints is held (and printed by
    :meth:`replay`, or dropped), what other threads print goes on to the stream."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._thread = threading.get_ident()
        self._held: list[str] = []

    def write(self, text: str) -> int:
        if threading.get_ident() != self._thread:
            return int(self._stream.write(text))
        self._held.append(text)
        return len(text)

    def flush(self) -> None:
        if threading.get_ident() != self._thread:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def replay(self) -> None:
        if self._held:
            self._stream.write("".join(self._held))
            self._stream.flush()
        self._held.clear()


@contextlib.contextmanager
def _printed_held() -> Iterator[_HeldPrints]:
    """Hold what the factory prints to ``sys.stdout`` under the trace: a refused trace runs it, and it would
    print twice (``stderr`` is not held: a warning shown once per place would be lost)."""
    stream = sys.stdout
    held = _HeldPrints(stream)
    sys.stdout = held
    try:
        yield held
    finally:
        if sys.stdout is held:
            sys.stdout = stream


def _arguments(closed: Any, box: dict[str, Any], shaped: type, device_space: Any) -> tuple[tuple, dict] | None:
    """The arguments rebuilt from a trace that stands for a run (None where it does not)."""
    import jax

    from fieldmem.driver.placement import stand_in

    jaxpr = closed.jaxpr
    if jaxpr.effects or any(_places(eqn) for eqn in _equations(jaxpr)):
        return None
    avals = [v.aval for v in jaxpr.outvars]
    for aval in avals:
        if type(aval) is not shaped:
            return None
        sharding = getattr(aval, "sharding", None)
        if sharding is not None and not getattr(getattr(sharding, "mesh", None), "empty", True):
            return None
        if getattr(aval, "memory_space", device_space) != device_space:
            return None
    default = default_sharding()
    structs = [
        stand_in(jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=bool(a.weak_type)), False, default) for a in avals
    ]
    leaves = [structs[value] if is_traced else value for is_traced, value in box["slots"]]
    args, kwargs = jax.tree_util.tree_unflatten(box["treedef"], leaves)
    return tuple(args), dict(kwargs)


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` and of the jaxprs in its equations' parameters (a jit's, a scan's body)."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    stack = [jaxpr]
    while stack:
        current = stack.pop()
        for eqn in current.eqns:
            yield eqn
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(item, ClosedJaxpr):
                        stack.append(item.jaxpr)
                    elif isinstance(item, Jaxpr):
                        stack.append(item)


def _places(eqn: Any) -> bool:
    """Whether ``eqn`` gives its outputs a placement (or an effect) a traced array cannot stand for."""
    import jax

    name = eqn.primitive.name
    if name in _PLACING:
        return True
    if name == "device_put":  # jnp.asarray, jax.device_put(x): no device, an uncommitted array as run
        return any(d is not None for d in eqn.params.get("devices", ())) or any(
            s is not None for s in eqn.params.get("srcs", ())
        )
    for key, value in eqn.params.items():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jax.sharding.Sharding) or (key.endswith("memory_kind") and item is not None):
                return True
    return False


def default_sharding() -> Any:
    """Where running the factory puts an array made without a device: the default device (that of
    ``jax.default_device``, as the backend's scope sets it), uncommitted."""
    import jax

    device: Any = getattr(jax.config, "jax_default_device", None)
    if isinstance(device, str):
        device = jax.devices(device)[0]
    if device is None:
        device = jax.devices()[0]
    return jax.sharding.SingleDeviceSharding(device)
