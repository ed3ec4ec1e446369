"""A function and its example arguments, sent to a worker process: the pytest plugin's check of a
function in hand, traced and compiled where a crash or a hang cannot take the test session down.

What crosses is what a static check needs: every jax array among the arguments is sent as its
abstract value (``jax.ShapeDtypeStruct``: shape, dtype, weak type and sharding; a static check
compiles the same program from it, and no array data is copied); functions, jit objects and
classes by reference (their module and qualified name, and the module's file for a test module
that only pytest can import by name); a lambda or a function defined in a function by its code,
with what it closes over (a jax array there by value: the program computes with it); NumPy arrays
and other plain values as pickle sends them. A device is sent by its platform and id, and found
again there: the worker takes this process's environment, so jax sees the same devices.

What cannot be sent (a traced value, a function reading no module's globals, an object pickle
refuses) raises :class:`NotSendable` with the reason; the caller checks in its own process instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import marshal
import pickle
import sys
import types
from typing import Any

__all__ = ["NotSendable", "apply_tracing_config", "dumps", "loads", "tracing_config"]


class NotSendable(Exception):
    """An object that cannot be sent to a worker: why, in a few words."""


def dumps(value: Any) -> bytes:
    """``value`` (any object graph) as bytes for :func:`loads` in a worker process.

    Raises:
        NotSendable: something in it cannot be sent (its reason names it).
    """
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    except NotSendable:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise NotSendable(_why(exc)) from None
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """What :func:`dumps` sent: arrays as ``jax.ShapeDtypeStruct``, functions as this process imports them."""
    return pickle.loads(data)


# jax's settings that change the program a trace builds (its dtypes, precision, random bits, partitioner),
# as the calling process has them: a worker's jax, started with its own defaults, would build another
_TRACING = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_enable_custom_prng",
    "jax_softmax_custom_jvp",
    "jax_use_shardy_partitioner",
    "jax_remove_size_one_mesh_axis_from_type",
)


def tracing_config() -> dict[str, Any]:
    """This process's values of jax's settings that change what a trace builds (those this jax has)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return {}
    values = jax.config.values
    found = {}
    for name in _TRACING:
        if name in values:
            value = values[name]
            found[name] = getattr(value, "value", value)  # an enum (dtype promotion) as its word
    return found


def apply_tracing_config(config: dict[str, Any]) -> None:
    """Set jax's settings to ``config`` (:func:`tracing_config` of the process that sent a call) where they
    differ here, so the worker traces the program the caller's jax would."""
    import jax

    values = jax.config.values
    for name, value in config.items():
        if name not in values:  # a setting the caller's jax has and this release does not (--fieldmem-jax)
            continue
        current = values[name]
        if getattr(current, "value", current) != value:
            jax.config.update(name, value)


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"


class _Pickler(pickle.Pickler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inside_function = 0  # > 0: pickling what a function sent by value closes over
        # each device buffer sent, and the array object it was first sent as: another array object with the
        # same buffers (``jax.device_put(x, device)`` of an ``x`` already there) is sent as that one, so the
        # worker's call gives one array twice where the caller's does (pickle's memo keeps one object one)
        self._sent: dict[tuple[Any, ...], Any] = {}

    def reducer_override(self, obj: Any) -> Any:
        jax = sys.modules.get("jax")
        if jax is not None:
            if isinstance(obj, jax.core.Tracer):
                raise NotSendable("an argument is a traced value (the check was called inside a jax transformation)")
            if isinstance(obj, jax.Array):
                sharding = getattr(obj, "sharding", None)
                committed = bool(getattr(obj, "committed", True))
                if self._inside_function:  # a constant the function computes with (or returns): its value
                    import numpy as np

                    return _concrete, (np.asarray(obj), sharding)
                from fieldmem.driver.placement import buffer_identity

                buffer = buffer_identity(obj)
                if buffer is not None and buffer[0] == "buffers":
                    first = self._sent.setdefault(buffer, obj)
                    if first is not obj:
                        return _same, (first,)  # pickled again: the memo's reference to what it became
                return _abstract, (
                    tuple(obj.shape),
                    obj.dtype,
                    bool(getattr(obj, "weak_type", False)),
                    sharding,
                    committed,
                )
            if isinstance(obj, jax.Device):
                return _device, (obj.platform, obj.id)
            if isinstance(obj, jax.ShapeDtypeStruct):  # by its public fields: a worker's jax may be another release
                weak = bool(getattr(obj, "weak_type", False))
                return _struct, (tuple(obj.shape), obj.dtype, weak, getattr(obj, "sharding", None))
        if isinstance(obj, type) or callable(obj):
            if getattr(obj, "__module__", None) == __name__:
                return NotImplemented  # this module's reconstructors: pickle sends them by name
            found = _by_reference(obj)
            if found is not None:
                return found
            if isinstance(obj, types.FunctionType):
                return self._by_value(obj)
            if not isinstance(obj, type) and _is_local(obj):
                name = getattr(obj, "__qualname__", None) or type(obj).__name__
                raise NotSendable(f"{name} is defined inside a function: it cannot be sent to fieldmem's worker")
        return NotImplemented

    def _by_value(self, fn: types.FunctionType) -> tuple[Any, tuple[Any, ...]]:
        """A lambda or a function defined in a function: its code, the module whose globals it reads (imported
        there), its defaults and what it closes over (never a jax array: its value would be needed)."""
        module_name = getattr(fn, "__module__", None)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None or getattr(module, "__dict__", None) is not fn.__globals__:
            raise NotSendable(f"{fn.__qualname__} reads globals of no importable module")
        self._inside_function += 1
        try:
            cells = tuple(cell.cell_contents for cell in fn.__closure__ or ())
            # pickled here, as what a function holds: a jax array in it by value
            closed = _dump_inside(self, (fn.__defaults__, fn.__kwdefaults__, cells))
        except ValueError:  # an empty cell (a name not yet bound)
            raise NotSendable(f"{fn.__qualname__} closes over a name that is not bound yet") from None
        finally:
            self._inside_function -= 1
        file = getattr(module, "__file__", None)
        return _function, (
            marshal.dumps(fn.__code__),
            module_name,
            file if isinstance(file, str) else None,
            fn.__name__,
            fn.__qualname__,
            closed,
        )


def _dump_inside(outer: _Pickler, value: Any) -> bytes:
    """``value`` pickled as ``outer`` would pickle it inside a function (to find what cannot be sent)."""
    buffer = io.BytesIO()
    inner = _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    inner._inside_function = outer._inside_function
    inner.dump(value)
    return buffer.getvalue()


def _is_local(obj: Any) -> bool:
    inner = getattr(obj, "__wrapped__", None) or getattr(obj, "_fun", None) or obj
    qualname = getattr(inner, "__qualname__", "") or ""
    return "<locals>" in qualname or "<lambda>" in qualname


def _function(
    code: bytes,
    module_name: str,
    file: str | None,
    name: str,
    qualname: str,
    closed: bytes,
) -> types.FunctionType:
    """A function sent by value, with the globals of its module as this process imports it."""
    module = _module(module_name, file)
    defaults, kwdefaults, cells = pickle.loads(closed)
    fn = types.FunctionType(
        marshal.loads(code), vars(module), name, defaults, tuple(types.CellType(c) for c in cells) or None
    )
    fn.__kwdefaults__ = kwdefaults
    fn.__qualname__ = qualname
    fn.__module__ = module_name
    return fn


def _by_reference(obj: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``obj`` by its module and qualified name, where looking it up there gives ``obj`` itself (a jit object,
    which pickle cannot send by value, included)."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module_name == __name__ or module_name in ("builtins", "copyreg"):
        return None  # this module's own reconstructors, and what pickle itself sends by name
    module = sys.modules.get(module_name)
    if module is None:
        return None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            break
    if found is not obj:
        # a wrapper named after what it wraps (``step_jit = jax.jit(step)``): the module's name for it
        qualname = next((name for name, value in vars(module).items() if value is obj), "")
        if not qualname:
            return None
    file = getattr(module, "__file__", None)
    return _lookup, (module_name, qualname, file if isinstance(file, str) else None)


def _lookup(module_name: str, qualname: str, file: str | None) -> Any:
    """The object ``module_name:qualname``."""
    found: Any = _module(module_name, file)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _module(module_name: str, file: str | None) -> types.ModuleType:
    """The module ``module_name``, imported by name, else loaded from ``file`` under that name (a test module
    pytest imported with ``--import-mode=importlib``, or one only its folder on ``sys.path`` finds)."""
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if file is None:
                raise
            spec = importlib.util.spec_from_file_location(module_name, file)
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:  # Ctrl-C too: no half-run module is left in sys.modules
                del sys.modules[module_name]
                raise
    return module


def _device(platform: str, device_id: int) -> Any:
    import jax

    for device in jax.devices(platform):
        if device.id == device_id:
            return device
    raise LookupError(f"the worker has no {platform} device {device_id}")


def _struct(shape: tuple[int, ...], dtype: Any, weak_type: bool, sharding: Any) -> Any:
    """A ``jax.ShapeDtypeStruct`` the test gave, made again by its constructor (its private fields differ
    between jax releases, and a worker under ``--fieldmem-jax`` runs another)."""
    import jax

    return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak_type, sharding=sharding)


def _concrete(data: Any, sharding: Any) -> Any:
    import jax

    return jax.device_put(data, sharding)


def _same(value: Any) -> Any:
    """What an array with the buffers of one sent before becomes: the same object."""
    return value


def _abstract(shape: tuple[int, ...], dtype: Any, weak_type: bool, sharding: Any, committed: bool = True) -> Any:
    """The array's abstract value; an uncommitted array (``jnp.ones``: no fixed device) carries no sharding,
    as jax lowers it. Where the array was is kept for its placement (a move before each call)."""
    import jax

    from fieldmem.driver.placement import stand_in

    struct = jax.ShapeDtypeStruct(shape, dtype, weak_type=weak_type, sharding=sharding if committed else None)
    return stand_in(struct, committed, sharding)
