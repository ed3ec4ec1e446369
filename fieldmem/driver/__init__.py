"""The only module that drives jax: argument flattening, lowering, compiling.

Everything else in fieldmem works on what this module returns: plain data
(:class:`CompiledVariant`, :class:`InputLeaf`, :class:`OutputLeaf`) holding the
optimized HLO text, XLA's memory figures and the mapping between HLO
parameters and the user's pytree leaves. jax is imported lazily so that
``fieldmem --help`` stays instant.

JAX internals read here, each in one place and tolerated when missing:
``Lowered._lowering.compile_args["kept_var_idx"]`` (which arguments jit kept),
``PjitFunction._jit_info`` (a user's own jit options),
``Lowered._lowering.compile_args["backend"]`` (the platform a fast compile is
for), ``jax._src.xla_bridge._backends`` (whether jax started, for
``--devices``) and ``Compiled.memory_analysis()`` (documented as unstable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
import warnings
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from fieldmem.errors import ArgumentsError, CompileError, DonationError, OptionError, RunError
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = [
    "CompiledVariant",
    "DeviceStats",
    "Environment",
    "InputLeaf",
    "OutputLeaf",
    "PreparedCall",
    "chain_arguments",
    "compile_donation",
    "compile_variants",
    "start_variants",
    "compose",
    "describe_sharding",
    "environment",
    "has_memory_stats",
    "prepare_call",
    "probe_update",
    "ProbeReading",
    "run_variant",
    "RunReading",
]

# The memory_analysis() attributes fieldmem reports, under their report names.
MEMORY_FIELDS: dict[str, str] = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
    "peak_bytes": "peak_memory_in_bytes",
    "host_argument_bytes": "host_argument_size_in_bytes",
    "host_output_bytes": "host_output_size_in_bytes",
    "host_alias_bytes": "host_alias_size_in_bytes",
    "host_temp_bytes": "host_temp_size_in_bytes",
}


# --fast-compile: XLA:CPU debug options that make a compile cheaper without touching what
# fieldmem reads. xla_backend_optimization_level picks the LLVM code generation level
# (IrCompiler::GetCodeGenOptLevel), and that stage runs after the HLO passes, the
# schedule and the buffer assignment (CpuCompiler::CompileCpuExecutable); the HLO passes
# see it only through the target machine, whose features they query (register widths
# and counts, alignment) do not depend on it. benchmarks/bench_compile_options.py
# measured the optimized HLO, every memory_analysis() figure and the serialized buffer
# assignment identical on all 65 programs of the examples and synthetic modules
# (2026-12-03, jax 0.10.2), with 44% less compile time; tests/test_cli.py checks the
# findings are identical.
FAST_COMPILE_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}
# the figures a fast compile leaves unreliable: reported as unavailable, with the reason
FAST_COMPILE_UNAVAILABLE: dict[str, str] = {
    "generated_code_bytes": "--fast-compile generates the code without LLVM optimisation, "
    "so its size is not that of a default compile",
}


@dataclass(frozen=True)
class InputLeaf:
    """One array leaf of the arguments, numbered as the report numbers it."""

    index: int
    path: str
    argument: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    donated: bool
    hlo_parameter: int | None  # None: jit dropped it as unused
    abstract: bool  # a ShapeDtypeStruct: nothing allocated
    sharding: str | None = None  # how the compiled program expects it laid out over devices
    layout: str | None = None  # its on-device layout, major to minor


@dataclass(frozen=True)
class OutputLeaf:
    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None
    layout: str | None = None


@dataclass(frozen=True)
class CompiledVariant:
    """What one compile produced, before any analysis."""

    name: str
    donated_arguments: tuple[str, ...]
    inputs: tuple[InputLeaf, ...]
    outputs: tuple[OutputLeaf, ...]
    hlo_text: str
    memory: dict[str, int | None]
    memory_unavailable: dict[str, str]
    lowering_warnings: tuple[str, ...]
    tuple_args: bool
    lower_seconds: float
    compile_seconds: float
    # inputs of the live-range analysis (fieldmem.xla.buffers); None with a reason when absent
    buffer_assignment: bytes | None = None
    hlo_module_proto: bytes | None = None
    buffers_unavailable: str | None = None
    # the outputs as a pytree of jax.ShapeDtypeStruct with their shardings: in a
    # chain, the next step's arguments (read only by this module)
    output_structs: Any = None
    # the jax.stages.Compiled itself, kept only to run it (--run; read only by this module)
    executable: Any = None
    # why jax dropped the donation this variant asked for (None: it did not)
    donation_dropped: str | None = None
    devices: tuple[int, ...] = ()  # ids of the devices the program runs on


@dataclass(frozen=True)
class Environment:
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    devices: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class PreparedCall:
    """A function with its example arguments, ready to lower twice."""

    function: Callable[..., Any]
    user_jit: Any | None  # the user's own jax.jit object, when the target is one
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    positional_names: tuple[str, ...]  # display name of each positional argument
    static_positions: frozenset[int]
    static_names: frozenset[str]
    donated_positions: frozenset[int]
    donated_names: frozenset[str]
    donation_source: str  # "spec" or "jit"
    jit_options: dict[str, Any]


def _jax() -> Any:
    import jax

    return jax


# ----------------------------------------------------------------------------
# Environment


def backend_devices(name: str) -> list[Any]:
    """The devices of backend ``name`` (``cpu``, ``gpu``, ``cuda``, ``tpu``...).

    Raises:
        OptionError: jax has no such backend here (not installed, no device,
            or it failed to start), naming the backends it has.
    """
    jax = _jax()
    try:
        devices = list(jax.devices(name))
    except RuntimeError as exc:
        found = sorted({jax.default_backend(), "cpu"})
        why = _first_line(exc).split(": ", 1)[-1]
        raise OptionError(
            f"--backend {name} is not available here ({why}); this jax has {', '.join(found)}"
        ) from None
    if not devices:  # pragma: no cover - jax raises rather than return no devices
        raise OptionError(f"--backend {name} has no devices here")
    return devices


@contextlib.contextmanager
def backend_scope(name: str | None) -> Iterator[None]:
    """Make backend ``name``'s first device the default while a target is checked (None: jax's default).

    The args factory runs inside it too, so the arrays it creates live on
    that backend and the two variants are lowered and compiled for it.
    Arrays already committed to devices (a sharded input) keep theirs.
    """
    if name is None:
        yield
        return
    jax = _jax()
    with jax.default_device(backend_devices(name)[0]):
        yield


_CACHE_OPTIONS = (
    "jax_compilation_cache_dir",
    # every executable, however small or quick: a check compiles many small ones
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
    # file names and lines are findings here: by default jax leaves them out of the
    # key, and an executable compiled from another checkout, or before a line was
    # added above the function, would bring its stale locations along
    "jax_compilation_cache_include_metadata_in_key",
)


_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def simulate_cpu_devices(count: int) -> None:
    """Make the CPU backend have ``count`` devices (``--devices``): set before jax starts, in XLA_FLAGS,
    which worker processes inherit.

    Raises:
        OptionError: ``count`` is below 1, or jax already started with another number of CPU devices.
    """
    import os
    import re
    import sys

    if count < 1:
        raise OptionError(f"--devices {count} must be at least 1")
    if _backends_started():
        try:
            have = len(sys.modules["jax"].devices("cpu"))
        except RuntimeError:
            have = None
        if have is not None and have != count:
            raise OptionError(
                f"--devices {count}: jax already started in this process with {have} CPU device(s); "
                f"set XLA_FLAGS={_DEVICE_COUNT_FLAG}={count} before importing jax"
            )
        return
    flags = re.sub(rf"\s*{_DEVICE_COUNT_FLAG}=\S+", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


def _backends_started() -> bool:
    """Whether jax has created its backends in this process (after which XLA_FLAGS is not read again)."""
    import sys

    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # another jax layout: assume started, and compare the device count
        return True


def cache_folder(path: str | None) -> str | None:
    """Create the compilation cache folder ``path`` (None: none), so a bad one stops a run before any compile.

    Raises:
        OptionError: the folder cannot be created or written.
    """
    if path is None:
        return None
    import os

    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OptionError(f"--cache-dir {path!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OptionError(f"--cache-dir {path!r} is not writable")
    return path


CACHE_ENV = "FIELDMEM_CACHE_DIR"


def default_cache_folder() -> str | None:
    """The command line's compilation cache when none is named: ``$FIELDMEM_CACHE_DIR`` (``none``: no
    cache); else, when ``$JAX_COMPILATION_CACHE_DIR`` is set, None (jax's own setting stands); else
    ``$XDG_CACHE_HOME/fieldmem/jax`` (``~/.cache/fieldmem/jax``). None when it cannot be made: a
    default never stops a run."""
    import os

    chosen = os.environ.get(CACHE_ENV)
    if chosen is None and os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None  # jax's own cache setting stands
    if chosen is not None:
        if chosen.strip().lower() in ("", "none", "off", "0"):
            return None
        path = chosen
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "fieldmem", "jax")
    try:
        return cache_folder(path)
    except OptionError:
        return None


@contextlib.contextmanager
def compilation_cache(path: str | None) -> Iterator[None]:
    """Use JAX's persistent compilation cache in folder ``path`` while checking (None: leave jax's settings).

    An unchanged function is then loaded rather than compiled on the next
    run; the executable, its HLO, memory figures and buffer assignment are
    the same (tests/test_cli.py checks the findings are identical). The
    previous settings are restored afterwards.

    Raises:
        OptionError: the folder cannot be created or written.
    """
    if cache_folder(path) is None:
        yield
        return
    import os

    jax = _jax()
    previous = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    for name, value in zip(_CACHE_OPTIONS, (os.path.abspath(path), 0.0, 0, True)):
        jax.config.update(name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            jax.config.update(name, value)


def environment(backend: str | None = None) -> Environment:
    """Versions, backend and devices of the jax this process runs (of ``backend``, when named)."""
    jax = _jax()
    try:
        import jaxlib

        jaxlib_version = getattr(jaxlib, "__version__", None) or jax.lib.__version__
    except Exception:  # pragma: no cover - jaxlib always importable with jax
        jaxlib_version = "unknown"
    devices = backend_devices(backend) if backend is not None else jax.devices()
    try:
        platform_version: str | None = devices[0].client.platform_version
    except Exception:
        platform_version = None
    return Environment(
        jax_version=jax.__version__,
        jaxlib_version=str(jaxlib_version),
        backend=devices[0].platform if backend is not None else jax.default_backend(),
        platform_version=platform_version,
        devices=tuple(
            {"id": d.id, "platform": d.platform, "kind": getattr(d, "device_kind", None)}
            for d in devices
        ),
    )


# ----------------------------------------------------------------------------
# Preparing a call


def _is_array_like(value: Any) -> bool:
    """Arrays, array specs and Python floats/complex (traced as scalars, not static)."""
    jax = _jax()
    import numpy as np

    if isinstance(value, bool):
        return False
    return isinstance(value, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct, float, complex))


def _has_array_leaves(value: Any) -> bool:
    jax = _jax()
    return any(_is_array_like(leaf) for leaf in jax.tree_util.tree_leaves(value))


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _positional_names(signature: inspect.Signature | None, count: int) -> list[str]:
    """Display names of positional arguments 0..count-1 (``args[k]`` for ``*args``)."""
    names: list[str] = []
    params = list(signature.parameters.values()) if signature else []
    var_positional = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i in range(count):
        if i < len(positional):
            names.append(positional[i])
        elif var_positional:
            names.append(f"{var_positional}[{i - len(positional)}]")
        else:
            names.append(f"arg{i}")
    return names


def _user_jit_info(fn: Any) -> Any | None:
    """The ``PjitInfo`` of a ``jax.jit`` object, or None for a plain function."""
    info = getattr(fn, "_jit_info", None)
    if info is None or not hasattr(fn, "lower"):
        return None
    return info


def _resolve_positions(
    spec_items: Sequence[int | str],
    what: str,
    names: list[str],
    kwargs: dict[str, Any],
) -> tuple[set[int], set[str]]:
    positions: set[int] = set()
    keyword: set[str] = set()
    for item in spec_items:
        if isinstance(item, int):
            if not 0 <= item < len(names):
                raise DonationError(
                    f"{what} names argument {item}, but the call has {len(names)} positional "
                    f"argument(s) (0..{len(names) - 1})"
                )
            positions.add(item)
        elif item in names:
            positions.add(names.index(item))
        elif item in kwargs:
            keyword.add(item)
        else:
            known = names + list(kwargs)
            raise DonationError(
                f"{what} names argument {item!r}, which the call does not pass; "
                f"arguments are: {', '.join(known) or '(none)'}"
            )
    return positions, keyword


def prepare_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    donate: DonateSpec,
    static: StaticSpec,
) -> PreparedCall:
    """Decide static and donated arguments for ``fn(*args, **kwargs)``.

    Arguments that hold no array (Python ints, strings, callables, ``None``)
    are made static automatically unless the target is a user's jit object,
    whose own static arguments are kept. ``donate`` "auto" means the jit
    object's own donation, or every array argument for a plain function.
    """
    info = _user_jit_info(fn)
    underlying = getattr(fn, "_fun", fn) if info is not None else fn
    names = _positional_names(_signature(underlying), len(args))

    if info is not None:
        static_positions = set(getattr(info, "static_argnums", ()) or ())
        static_names = set(getattr(info, "static_argnames", ()) or ()) & set(kwargs)
        explicit_pos, explicit_names = _resolve_positions(static.items, "--static", names, kwargs)
        static_positions |= explicit_pos
        static_names |= explicit_names
    else:
        static_positions, static_names = _resolve_positions(static.items, "--static", names, kwargs)
        for i, value in enumerate(args):
            if not _has_array_leaves(value):
                static_positions.add(i)
        for key, value in kwargs.items():
            if not _has_array_leaves(value):
                static_names.add(key)
    explicit = set(static.items)
    for i in static_positions:
        if i < len(args):
            _check_hashable(args[i], names[i], explicit=i in explicit or names[i] in explicit)
    for key in static_names:
        _check_hashable(kwargs[key], key, explicit=key in explicit)

    donation_source = "spec"
    if donate.mode == "auto" and info is not None:
        donation_source = "jit"
        donated_positions = set(getattr(info, "donate_argnums", ()) or ())
        donated_names = set(getattr(info, "donate_argnames", ()) or ()) & set(kwargs)
    elif donate.mode in ("all", "auto"):
        donated_positions = {i for i in range(len(args)) if i not in static_positions}
        donated_names = {k for k in kwargs if k not in static_names}
    elif donate.mode == "none":
        donated_positions, donated_names = set(), set()
    else:
        donated_positions, donated_names = _resolve_positions(donate.items, "--donate", names, kwargs)
        clash = sorted(names[i] for i in donated_positions & static_positions) + sorted(donated_names & static_names)
        if clash:
            raise DonationError(
                f"--donate names {', '.join(clash)}, which is static (not an array): "
                "only array arguments can be donated"
            )
    # donation only matters for arguments with arrays in them (and passed
    # positionally: a jit's donate_argnums may name a parameter left at its default)
    donated_positions = {i for i in donated_positions if i not in static_positions and i < len(args)}
    donated_names = {k for k in donated_names if k not in static_names}

    jit_options: dict[str, Any] = {}
    if info is not None:
        jit_options = _jit_options_of(info)
    return PreparedCall(
        function=underlying,
        user_jit=fn if info is not None else None,
        args=args,
        kwargs=kwargs,
        positional_names=tuple(names),
        static_positions=frozenset(static_positions),
        static_names=frozenset(static_names),
        donated_positions=frozenset(donated_positions),
        donated_names=frozenset(donated_names),
        donation_source=donation_source,
        jit_options=jit_options,
    )


def _check_hashable(value: Any, name: str, *, explicit: bool = False) -> None:
    try:
        hash(value)
    except TypeError:
        if explicit:
            what = "an array" if _has_array_leaves(value) else f"a {type(value).__name__}"
            raise ArgumentsError(
                f"--static names {name!r}, but a static argument must be hashable and {name!r} is {what}: "
                "leave it out of --static (arrays are traced)"
            ) from None
        raise ArgumentsError(
            f"argument {name!r} holds no array, so it must be static, but a static argument must be "
            f"hashable and {type(value).__name__} is not: pass a tuple instead of a list, or arrays"
        ) from None


def _jit_options_of(info: Any) -> dict[str, Any]:
    """The options of a user's jit object other than donation, to rebuild it."""
    jax = _jax()
    options: dict[str, Any] = {}
    for key in ("keep_unused", "inline", "device", "backend"):
        value = getattr(info, key, None)
        if value not in (None, False):
            options[key] = value
    if getattr(info, "user_specified_in_shardings", False):
        try:
            options["in_shardings"] = jax.tree_util.tree_unflatten(
                info.in_shardings_treedef, info.in_shardings_leaves
            )
        except Exception:
            pass
    try:
        leaves = info.out_shardings_leaves
        if any(type(leaf).__name__ != "UnspecifiedValue" for leaf in leaves):
            options["out_shardings"] = jax.tree_util.tree_unflatten(info.out_shardings_treedef, leaves)
    except Exception:
        pass
    kvs = getattr(info, "compiler_options_kvs", ()) or ()
    if kvs:
        options["compiler_options"] = dict(kvs)
    return options


# ----------------------------------------------------------------------------
# Lowering and compiling


def _fresh(function: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object that calls ``function``: jax traces and lowers it anew.

    jax caches traces by function object and lowerings by jaxpr, and a cached
    lowering does not repeat the "donated buffers were not usable" warning:
    checking the same function twice in one process would lose it.
    """
    import functools

    @functools.wraps(function)
    def fresh(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return fresh


def _jit(call: PreparedCall, donated: bool, function: Callable[..., Any] | None = None) -> Any:
    jax = _jax()
    if call.user_jit is not None and donated and call.donation_source == "jit" and _own_statics(call):
        # exactly the user's program (a lowering jax cached from an earlier
        # lower of this jit object comes without jax's warnings)
        return call.user_jit
    # otherwise rebuilt: without donation, with a donation of fieldmem's, or
    # with static arguments added to the jit's own (then with its donation)
    positions = sorted(call.donated_positions) if donated else []
    names = sorted(call.donated_names) if donated else []
    return jax.jit(
        function if function is not None else call.function,
        static_argnums=tuple(sorted(call.static_positions)),
        static_argnames=tuple(sorted(call.static_names)),
        donate_argnums=tuple(positions),
        donate_argnames=tuple(names),
        **call.jit_options,
    )


def _own_statics(call: PreparedCall) -> bool:
    """Whether the call's static arguments are exactly those of the user's jit object."""
    info = _user_jit_info(call.user_jit)
    if info is None:
        return False
    positions = set(getattr(info, "static_argnums", ()) or ())
    names = set(getattr(info, "static_argnames", ()) or ()) & set(call.kwargs)
    return positions == set(call.static_positions) and names == set(call.static_names)


def _shape_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    import numpy as np

    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def describe_sharding(sharding: Any) -> str | None:
    """A sharding in words that compare equal exactly when the placement is the same.

    ``NamedSharding``: its partition spec (trailing unsharded dimensions
    dropped, so ``P('x')`` equals ``P('x', None)``) over the mesh's axis sizes;
    a single device: ``platform:id``; anything else: its repr.
    """
    if sharding is None:
        return None
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        parts = list(spec)
        while parts and parts[-1] is None:
            parts.pop()
        axes = ", ".join(f"{name}={size}" for name, size in dict(getattr(mesh, "shape", {})).items())
        memory = getattr(sharding, "memory_kind", None)
        where = f" in {memory}" if memory not in (None, "device") else ""
        return f"P({', '.join(repr(p) for p in parts)}) over mesh({axes}){where}"
    devices = getattr(sharding, "device_set", None)
    if devices is not None and len(devices) == 1 and type(sharding).__name__ == "SingleDeviceSharding":
        device = next(iter(devices))
        return f"{device.platform}:{device.id}"
    return repr(sharding)


def _describe_layout(layout: Any) -> str | None:
    order = getattr(layout, "major_to_minor", None)
    if order is None:
        return None
    tiling = getattr(layout, "tiling", ()) or ()
    text = "major-to-minor (" + ",".join(str(d) for d in order) + ")"
    return text + (f" tiled {tiling}" if tiling else "")


def _formats(tree: Any) -> list[tuple[str | None, str | None]] | None:
    """(sharding, layout) descriptions of a compiled program's ``input_formats``/``output_formats`` leaves.

    Read in one place and tolerated when missing (older jax has
    ``input_layouts`` or only shardings): None when unreadable.
    """
    jax = _jax()
    if tree is None:
        return None
    try:
        leaves = jax.tree_util.tree_leaves(
            tree, is_leaf=lambda x: hasattr(x, "layout") and hasattr(x, "sharding") or hasattr(x, "device_set")
        )
    except Exception:
        return None
    result: list[tuple[str | None, str | None]] = []
    for leaf in leaves:
        if hasattr(leaf, "layout") and hasattr(leaf, "sharding"):
            result.append((describe_sharding(leaf.sharding), _describe_layout(leaf.layout)))
        else:
            result.append((describe_sharding(leaf), None))
    return result


def _compiled_formats(compiled: Any, which: str) -> list[tuple[str | None, str | None]] | None:
    for attribute in (f"{which}_formats", f"{which}_shardings"):
        try:
            value = getattr(compiled, attribute)
        except Exception:
            continue
        found = _formats(value)
        if found is not None:
            return found
    return None


def _leaves(
    call: PreparedCall,
    args_info: Any,
    kept: set[int] | None,
    formats: list[tuple[str | None, str | None]] | None = None,
) -> tuple[InputLeaf, ...]:
    """Number the array leaves as the report does and map them to HLO parameters.

    Report order: positional arguments, then keyword arguments in the order
    given. jax's order: dynamic positional arguments, then dynamic keyword
    arguments sorted by name. ``args_info`` (jax's order) tells which leaf is
    donated; ``kept`` (jax's order) which ones the HLO still has.
    """
    import numpy as np

    jax = _jax()
    tree = jax.tree_util
    names = call.positional_names
    dyn_positional = [i for i in range(len(call.args)) if i not in call.static_positions]
    dyn_keywords = [k for k in call.kwargs if k not in call.static_names]

    info_leaves = tree.tree_leaves(args_info, is_leaf=lambda x: hasattr(x, "donated") and hasattr(x, "_aval"))
    jax_order: list[tuple[Any, tuple[Any, ...]]] = []
    for i in dyn_positional:
        for path, _ in tree.tree_flatten_with_path(call.args[i])[0]:
            jax_order.append((i, path))
    for key in sorted(dyn_keywords):
        for path, _ in tree.tree_flatten_with_path(call.kwargs[key])[0]:
            jax_order.append((key, path))
    if len(info_leaves) != len(jax_order):
        raise CompileError(
            f"fieldmem could not match the {len(jax_order)} argument leaves it sees to the "
            f"{len(info_leaves)} jax lowered (jax {jax.__version__}); please report this"
        )
    if formats is not None and len(formats) != len(jax_order):
        formats = None  # jax grouped them another way: leave shardings and layouts unknown
    kept_sorted = sorted(kept) if kept is not None else list(range(len(jax_order)))
    hlo_number = {jax_index: number for number, jax_index in enumerate(kept_sorted)}
    position_in_jax = {(slot, tree.keystr(path)): n for n, (slot, path) in enumerate(jax_order)}

    result: list[InputLeaf] = []
    slots: list[tuple[Any, str]] = [(i, names[i]) for i in dyn_positional] + [(k, k) for k in dyn_keywords]
    for slot, display in slots:
        value = call.args[slot] if isinstance(slot, int) else call.kwargs[slot]
        for path, leaf in tree.tree_flatten_with_path(value)[0]:
            jax_index = position_in_jax[(slot, tree.keystr(path))]
            info = info_leaves[jax_index]
            aval = getattr(info, "_aval", None)
            shape = tuple(getattr(aval, "shape", ()) or ())
            result.append(
                InputLeaf(
                    index=len(result),
                    path=display + tree.keystr(path),
                    argument=display,
                    shape=shape,
                    dtype=np.dtype(aval.dtype).name if aval is not None else "unknown",
                    bytes=_shape_bytes(shape, aval.dtype) if aval is not None else 0,
                    donated=bool(getattr(info, "donated", False)),
                    hlo_parameter=hlo_number.get(jax_index),
                    abstract=isinstance(leaf, jax.ShapeDtypeStruct),
                    sharding=formats[jax_index][0] if formats else None,
                    layout=formats[jax_index][1] if formats else None,
                )
            )
    return tuple(result)


def _outputs(lowered: Any, compiled: Any) -> tuple[tuple[OutputLeaf, ...], Any]:
    """The output leaves, and the outputs as a pytree of ``ShapeDtypeStruct`` with the compiled shardings."""
    jax = _jax()
    import numpy as np

    flat, treedef = jax.tree_util.tree_flatten_with_path(lowered.out_info)
    formats = _compiled_formats(compiled, "output")
    if formats is not None and len(formats) != len(flat):
        formats = None
    try:
        shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
    except Exception:
        shardings = []
    if len(shardings) != len(flat):
        shardings = [None] * len(flat)
    outputs = []
    structs = []
    for n, (path, leaf) in enumerate(flat):
        shape = tuple(getattr(leaf, "shape", ()) or ())
        outputs.append(
            OutputLeaf(
                index=n,
                path="out" + jax.tree_util.keystr(path),
                shape=shape,
                dtype=np.dtype(leaf.dtype).name,
                bytes=_shape_bytes(shape, leaf.dtype),
                sharding=formats[n][0] if formats else None,
                layout=formats[n][1] if formats else None,
            )
        )
        structs.append(jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=shardings[n]))
    return tuple(outputs), jax.tree_util.tree_unflatten(treedef, structs)


@dataclass(frozen=True)
class _MemoryReading:
    figures: dict[str, int | None]
    unavailable: dict[str, str]
    buffer_assignment: bytes | None
    hlo_module_proto: bytes | None
    buffers_unavailable: str | None


def _read_memory(compiled: Any, fast: bool = False) -> _MemoryReading:
    """``memory_analysis()`` read in one place, once per compile.

    A missing figure is None with a reason; so is one that a fast compile
    (``fast``) changes (:data:`FAST_COMPILE_UNAVAILABLE`). The serialized buffer assignment
    and the HLO module proto feed fieldmem.xla.buffers (recent XLA names a logical
    buffer's instruction only by id; the module proto maps ids to names).
    """
    figures: dict[str, int | None] = {}
    unavailable: dict[str, str] = {}
    try:
        analysis = compiled.memory_analysis()
    except Exception as exc:  # some backends raise instead of returning None
        analysis = None
        reason = f"memory_analysis() failed on this backend: {type(exc).__name__}: {exc}"
    else:
        reason = "memory_analysis() returned nothing on this backend"
    for name, attribute in MEMORY_FIELDS.items():
        value = getattr(analysis, attribute, None) if analysis is not None else None
        if value is None:
            figures[name] = None
            unavailable[name] = (
                reason if analysis is None else f"memory_analysis() has no {attribute} in this jaxlib"
            )
        else:
            figures[name] = int(value)
    if fast:
        for name, why in FAST_COMPILE_UNAVAILABLE.items():
            figures[name] = None
            unavailable[name] = why

    assignment = getattr(analysis, "serialized_buffer_assignment_proto", None) if analysis is not None else None
    if not assignment:
        missing = reason if analysis is None else "memory_analysis() has no serialized_buffer_assignment_proto in this jaxlib"
        return _MemoryReading(figures, unavailable, None, None, missing)
    try:
        module_proto = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:
        module_proto = None  # older XLA still names instructions in the assignment itself
    return _MemoryReading(figures, unavailable, bytes(assignment), module_proto, None)


def _kept_var_idx(lowered: Any) -> tuple[set[int] | None, bool]:
    try:
        compile_args = lowered._lowering.compile_args
    except AttributeError:
        return None, False
    kept = compile_args.get("kept_var_idx")
    return (set(kept) if kept is not None else None), bool(compile_args.get("tuple_args", False))


def _donated_argument_names(call: PreparedCall, lowered: Any) -> tuple[str, ...]:
    names = call.positional_names
    jax = _jax()
    # read what jax actually donates (the user's jit object may donate by name)
    donated: list[str] = []
    positional_info, keyword_info = lowered.args_info
    dyn_positional = [i for i in range(len(call.args)) if i not in call.static_positions]
    for i, info in zip(dyn_positional, positional_info):
        leaves = jax.tree_util.tree_leaves(info, is_leaf=lambda x: hasattr(x, "donated"))
        if leaves and any(getattr(leaf, "donated", False) for leaf in leaves):
            donated.append(names[i])
    for key in call.kwargs:
        if key in keyword_info:
            leaves = jax.tree_util.tree_leaves(keyword_info[key], is_leaf=lambda x: hasattr(x, "donated"))
            if leaves and any(getattr(leaf, "donated", False) for leaf in leaves):
                donated.append(key)
    return tuple(donated)


def _lower(
    call: PreparedCall, donated: bool, function: Callable[..., Any] | None = None
) -> tuple[Any, tuple[str, ...], float]:
    jitted = _jit(call, donated, function)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            lowered = jitted.lower(*call.args, **call.kwargs)
        except Exception as exc:
            raise CompileError(f"tracing/lowering failed: {_first_line(exc)}") from exc
    messages = tuple(str(w.message) for w in caught)
    return lowered, messages, time.perf_counter() - start


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(exc).__name__}: {head}" if head else type(exc).__name__


def _fast_options(lowered: Any) -> dict[str, Any] | None:
    """:data:`FAST_COMPILE_OPTIONS` for a program compiled for XLA:CPU, None for any other
    backend (not measured there) or when jax does not say which."""
    try:
        platform = lowered._lowering.compile_args["backend"].platform
    except (AttributeError, KeyError, TypeError):
        return None
    return dict(FAST_COMPILE_OPTIONS) if platform == "cpu" else None


def _compile(lowered: Any, fast: bool = False) -> tuple[Any, float, bool]:
    """Compile ``lowered``; with ``fast`` on XLA:CPU, with :data:`FAST_COMPILE_OPTIONS`.

    Returns the executable, the seconds and whether the fast options were used.
    """
    options = _fast_options(lowered) if fast else None
    start = time.perf_counter()
    try:
        compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    except Exception as exc:
        raise CompileError(f"XLA compilation failed: {_first_line(exc)}") from exc
    return compiled, time.perf_counter() - start, options is not None


class PendingVariants:
    """Both variants of one call, lowered here and compiling (maybe in a pool): :meth:`result` waits."""

    def __init__(
        self, call: PreparedCall, pool: Executor | None, keep_executables: bool = False, fast: bool = False
    ) -> None:
        self.call = call
        self.keep_executables = keep_executables
        self.fast = fast
        function = _fresh(call.function)  # one trace for both variants, none from an earlier check
        self._plain = _lower(call, donated=False, function=function)
        self._donated = _lower(call, donated=True, function=function)
        if pool is not None:
            self._futures: list[Any] | None = [
                pool.submit(_compile, self._plain[0], fast),
                pool.submit(_compile, self._donated[0], fast),
            ]
        else:
            self._futures = None

    def result(self) -> tuple[CompiledVariant, CompiledVariant]:
        """The two compiled variants (raises CompileError as the compile did)."""
        if self._futures is not None:
            (compiled_plain, plain_s, plain_fast), (compiled_donated, donated_s, donated_fast) = [
                f.result() for f in self._futures
            ]
        else:
            compiled_plain, plain_s, plain_fast = _compile(self._plain[0], self.fast)
            compiled_donated, donated_s, donated_fast = _compile(self._donated[0], self.fast)
        (lowered_plain, warnings_plain, lower_plain_s) = self._plain
        (lowered_donated, warnings_donated, lower_donated_s) = self._donated
        plain = _variant(
            "plain", self.call, lowered_plain, compiled_plain, warnings_plain, lower_plain_s, plain_s, fast=plain_fast
        )
        donated = _variant(
            "donated", self.call, lowered_donated, compiled_donated, warnings_donated, lower_donated_s, donated_s,
            donated=True, fast=donated_fast,
        )
        if self.keep_executables:
            plain = dataclasses.replace(plain, executable=compiled_plain)
            donated = dataclasses.replace(donated, executable=compiled_donated)
        self._plain = self._donated = (None, (), 0.0)  # let the lowerings go
        self._futures = None
        return plain, donated


def start_variants(
    call: PreparedCall, pool: Executor | None, *, keep_executables: bool = False, fast: bool = False
) -> PendingVariants:
    """Lower ``call`` both ways in this thread and start the two XLA compiles in ``pool`` (None: at :meth:`result`).

    Lowering (tracing, Python-bound) must stay in one thread: jax's warnings
    are captured with ``warnings.catch_warnings``, which is not thread-safe.
    XLA compiles release the GIL, so several targets' compiles overlap in a
    pool while the next target is lowered.
    """
    return PendingVariants(call, pool, keep_executables, fast)


def compile_variants(
    call: PreparedCall, *, jobs: int = 1, keep_executables: bool = False, fast: bool = False
) -> tuple[CompiledVariant, CompiledVariant]:
    """Lower and compile ``call`` without donation (plain) and with it (donated).

    Lowering runs in this thread, so jax's warnings are captured reliably;
    the two XLA compiles run concurrently when ``jobs`` > 1 (XLA:CPU already
    compiles on several threads, so this pays only with cores to spare).
    ``fast``: both with :data:`FAST_COMPILE_OPTIONS` (on XLA:CPU; the figures
    they change are then unavailable).
    """
    if jobs > 1:
        with ThreadPoolExecutor(max_workers=2) as pool:
            return start_variants(call, pool, keep_executables=keep_executables, fast=fast).result()
    return start_variants(call, None, keep_executables=keep_executables, fast=fast).result()


def compile_donation(
    call: PreparedCall,
    positions: Iterable[int],
    names: Iterable[str] = (),
    *,
    name: str = "suggested",
    fast: bool = False,
) -> CompiledVariant:
    """Lower and compile ``call`` donating exactly ``positions`` and ``names``.

    The advisor's verification compile: the same program as the check's two
    variants (static arguments, the user's jit options, a fresh trace so jax's
    warnings are not lost to its cache), with another donation. Positions are
    positional argument numbers, names keyword arguments of the call.
    ``fast``: compiled as :func:`compile_variants` compiles with ``fast``.
    """
    import dataclasses

    positions = frozenset(positions)
    names = frozenset(names)
    bad = sorted(p for p in positions if not 0 <= p < len(call.args) or p in call.static_positions)
    bad_names = sorted(n for n in names if n not in call.kwargs or n in call.static_names)
    if bad or bad_names:
        raise DonationError(
            f"cannot donate {', '.join([*map(str, bad), *bad_names])}: not an array argument of this call"
        )
    variant_call = dataclasses.replace(
        call, donated_positions=positions, donated_names=names, donation_source="spec"
    )
    lowered, lowering_warnings, lower_s = _lower(variant_call, donated=True, function=_fresh(call.function))
    compiled, compile_s, used_fast = _compile(lowered, fast)
    return _variant(
        name, variant_call, lowered, compiled, lowering_warnings, lower_s, compile_s, donated=True, fast=used_fast
    )


def _variant(
    name: str,
    call: PreparedCall,
    lowered: Any,
    compiled: Any,
    lowering_warnings: tuple[str, ...],
    lower_seconds: float,
    compile_seconds: float,
    donated: bool = False,
    fast: bool = False,
) -> CompiledVariant:
    kept, tuple_args = _kept_var_idx(lowered)
    memory = _read_memory(compiled, fast)
    outputs, output_structs = _outputs(lowered, compiled)
    inputs = _leaves(call, lowered.args_info, kept, _compiled_formats(compiled, "input"))
    dropped = None
    if donated and (call.donated_positions or call.donated_names) and not any(leaf.donated for leaf in inputs):
        asked = [call.positional_names[i] for i in sorted(call.donated_positions)] + sorted(call.donated_names)
        dropped = f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} to be donated, but " + _donation_dropped_reason()
    return CompiledVariant(
        name=name,
        donated_arguments=_donated_argument_names(call, lowered),
        inputs=inputs,
        outputs=outputs,
        hlo_text=compiled.as_text(),
        memory=memory.figures,
        memory_unavailable=memory.unavailable,
        lowering_warnings=lowering_warnings,
        tuple_args=tuple_args,
        lower_seconds=lower_seconds,
        compile_seconds=compile_seconds,
        buffer_assignment=memory.buffer_assignment,
        hlo_module_proto=memory.hlo_module_proto,
        buffers_unavailable=memory.buffers_unavailable,
        output_structs=output_structs,
        donation_dropped=dropped,
        devices=_device_ids(compiled),
    )


def _donation_dropped_reason() -> str:
    """Why jax lowered a program without the donation it was asked for (read from jax's config)."""
    jax = _jax()
    if getattr(jax.config, "jax_debug_nans", False):
        return (
            "jax_debug_nans is on, and under it jax drops every donate_argnums/donate_argnames "
            "(the program is compiled without donation); turn it off to check or run in place"
        )
    return "jax lowered the program without donating any of them"


def _device_ids(compiled: Any) -> tuple[int, ...]:
    """The ids of the devices the compiled program runs on, in order (empty when unknown)."""
    return tuple(d.id for d in _executable_devices(compiled))


# ----------------------------------------------------------------------------
# Running (--run): call a compiled variant and watch its buffers and device memory


@dataclass(frozen=True)
class DeviceStats:
    """``Device.memory_stats()`` of one device around a call; None figures with ``unavailable`` saying why."""

    device: int
    in_use_start: int | None = None  # before the call's arguments were made
    in_use_before: int | None = None  # arguments made, just before the call
    in_use_after: int | None = None
    peak: int | None = None  # peak_bytes_in_use after the call: a process-lifetime high-water mark
    unavailable: str | None = None


@dataclass(frozen=True)
class RunReading:
    """What one call of a compiled variant did, per input and output leaf (report order) and per device."""

    variant: str
    input_pointers: tuple[tuple[int, ...] | None, ...]  # per-shard buffer addresses before the call
    output_pointers: tuple[tuple[int, ...] | None, ...]
    deleted: tuple[bool | None, ...]  # per input leaf after the call (None: not a jax array)
    memory: tuple[DeviceStats, ...]
    seconds: float


def has_memory_stats(backend: str | None = None) -> bool:
    """Whether the devices of ``backend`` (None: jax's default) give ``memory_stats()`` (GPU, TPU; not cpu)."""
    jax = _jax()
    try:
        devices = backend_devices(backend) if backend is not None else jax.devices()
    except OptionError:
        return False
    return _memory_stats(devices[0]) is not None


def _memory_stats(device: Any) -> dict[str, int] | None:
    """``device.memory_stats()``, read in one place (None where the backend has none, e.g. cpu)."""
    try:
        stats = device.memory_stats()
    except Exception:
        return None
    return dict(stats) if stats else None


def _executable_devices(compiled: Any) -> list[Any]:
    """The devices a compiled program runs on, by id (empty when jax does not say)."""
    jax = _jax()
    found: dict[int, Any] = {}
    try:
        for sharding in jax.tree_util.tree_leaves((compiled.input_shardings, compiled.output_shardings)):
            for device in getattr(sharding, "device_set", ()):
                found[device.id] = device
    except Exception:
        return []
    return [found[i] for i in sorted(found)]


def _read_stats(devices: Sequence[Any]) -> dict[int, dict[str, int] | None]:
    return {d.id: _memory_stats(d) for d in devices}


def _fresh_argument(value: Any) -> Any:
    """A new device buffer for one argument leaf, so each run starts from buffers of its own."""
    jax = _jax()
    import numpy as np

    if isinstance(value, jax.ShapeDtypeStruct):
        sharding = getattr(value, "sharding", None)
        return jax.numpy.zeros(value.shape, value.dtype, device=sharding)
    if isinstance(value, jax.Array):
        return jax.device_put(value, value.sharding, may_alias=False)
    if isinstance(value, (np.ndarray, np.generic)):
        return jax.numpy.asarray(value)
    return value


def _pointers(value: Any) -> tuple[int, ...] | None:
    jax = _jax()
    if not isinstance(value, jax.Array):
        return None
    try:
        shards = sorted(value.addressable_shards, key=lambda s: s.device.id)
        return tuple(s.data.unsafe_buffer_pointer() for s in shards)
    except Exception:
        return None


def _deleted(value: Any) -> bool | None:
    jax = _jax()
    return bool(value.is_deleted()) if isinstance(value, jax.Array) else None


def run_variant(call: PreparedCall, variant: CompiledVariant) -> RunReading:
    """Call ``variant``'s executable once on fresh arguments and read what happened.

    The arguments are made anew (``ShapeDtypeStruct``s as zeros with their
    sharding), so a donated run never consumes the user's arrays and each run
    has buffers of its own. Memory statistics are read per device before the
    arguments are made, before the call and after it.

    Raises:
        RunError: the call raised (``out-of-memory`` when the device ran out).
    """
    jax = _jax()

    if variant.executable is None:  # pragma: no cover - the checker keeps executables when it runs
        raise RunError(f"the {variant.name} variant was not kept to run")
    devices = _executable_devices(variant.executable) or [jax.devices()[0]]
    start = _read_stats(devices)
    dyn_args, dyn_kwargs, leaves = _fresh_arguments(call)
    before_pointers = tuple(_pointers(leaf) for leaf in leaves)
    before = _read_stats(devices)
    began = time.perf_counter()
    try:
        out = variant.executable(*dyn_args, **dyn_kwargs)
        jax.block_until_ready(out)
    except Exception as exc:
        text = _first_line(exc)
        kind = "out-of-memory" if "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower() else "run"
        raise RunError(f"running the {variant.name} variant failed: {text}", kind=kind) from None
    seconds = time.perf_counter() - began
    after = _read_stats(devices)
    outputs = jax.tree_util.tree_leaves(out)
    reading = RunReading(
        variant=variant.name,
        input_pointers=before_pointers,
        output_pointers=tuple(_pointers(leaf) for leaf in outputs),
        deleted=tuple(_deleted(leaf) for leaf in leaves),
        memory=tuple(_device_stats(d.id, start[d.id], before[d.id], after[d.id], d.platform) for d in devices),
        seconds=seconds,
    )
    del out, outputs, leaves, dyn_args, dyn_kwargs
    return reading


def _device_stats(
    device: int,
    start: dict[str, int] | None,
    before: dict[str, int] | None,
    after: dict[str, int] | None,
    platform: str,
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
    )


@dataclass(frozen=True)
class ProbeReading:
    """Run times of one slice update at two buffer sizes (``--probe``): the same program, the same
    slice, the updated buffer (and every argument of its shape) grown ``factor``-fold along ``dimension``."""

    input_index: int
    output_index: int
    dimension: int
    factor: int
    small_bytes: int
    large_bytes: int
    small_seconds: tuple[float, ...]
    large_seconds: tuple[float, ...]


def _dynamic_values(call: PreparedCall) -> tuple[list[Any], Any]:
    """The dynamic argument values in report order (positional, then keywords as given) and their treedef."""
    jax = _jax()
    dynamic = [call.args[i] for i in range(len(call.args)) if i not in call.static_positions]
    keywords = [call.kwargs[k] for k in call.kwargs if k not in call.static_names]
    return jax.tree_util.tree_flatten((dynamic, keywords))


def _call_with(call: PreparedCall, leaves: list[Any], treedef: Any) -> PreparedCall:
    """``call`` with its dynamic argument leaves replaced (static arguments kept in place)."""
    jax = _jax()
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


def _fresh_arguments(call: PreparedCall) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """New buffers for every dynamic argument leaf of ``call``, made and ready: the positional and
    keyword arguments to call the executable with, and the leaves in report order."""
    jax = _jax()
    leaves, treedef = _dynamic_values(call)
    fresh = [_fresh_argument(leaf) for leaf in leaves]
    jax.block_until_ready(fresh)
    dynamic, keywords = jax.tree_util.tree_unflatten(treedef, fresh)
    names = [k for k in call.kwargs if k not in call.static_names]
    return tuple(dynamic), dict(zip(names, keywords)), fresh


def _timed_call(executable: Any, call: PreparedCall) -> float:
    """Seconds of one call of ``executable`` on fresh arguments (made before the clock starts)."""
    jax = _jax()
    args, kwargs, _ = _fresh_arguments(call)
    began = time.perf_counter()
    out = jax.block_until_ready(executable(*args, **kwargs))
    seconds = time.perf_counter() - began
    del out  # freed after the clock stops: freeing a large buffer is not the update's time
    return seconds


def probe_update(
    call: PreparedCall,
    variant: CompiledVariant,
    input_index: int,
    output_index: int,
    *,
    factor: int = 4,
    repeats: int = 21,
) -> ProbeReading | None:
    """Time ``variant``'s update of input leaf ``input_index`` (returned as ``output_index``) as it is and
    with that buffer ``factor`` times larger, alternating the two ``repeats`` times.

    The largest dimension that still traces is grown, together with every
    argument leaf of the same shape (an update that reads a same-shaped
    array keeps working). None when no dimension can be grown. Compiling
    the larger program is the one compile this adds.
    """
    jax = _jax()
    if variant.executable is None:  # pragma: no cover - the checker keeps executables when it probes
        raise RunError(f"the {variant.name} variant was not kept to run")
    leaves, treedef = _dynamic_values(call)
    if input_index >= len(leaves):
        return None
    target = leaves[input_index]
    shape = tuple(getattr(target, "shape", ()))
    dtype = getattr(target, "dtype", None)
    if not shape or dtype is None:
        return None
    dims = sorted(range(len(shape)), key=lambda d: -shape[d])
    for dim in dims:
        grown_shape = tuple(n * factor if d == dim else n for d, n in enumerate(shape))
        grown = []
        for leaf in leaves:
            if tuple(getattr(leaf, "shape", ())) == shape and hasattr(leaf, "dtype"):
                sharding = getattr(leaf, "sharding", None)
                grown.append(jax.ShapeDtypeStruct(grown_shape, leaf.dtype, sharding=sharding))
            else:
                grown.append(leaf)
        large_call = _call_with(call, grown, treedef)
        try:
            lowered, _, _ = _lower(large_call, donated=variant.name != "plain", function=_fresh(call.function))
            large, _, _ = _compile(lowered)  # timed: always the default (optimised) code
        except CompileError:
            continue
        small_times: list[float] = []
        large_times: list[float] = []
        for _ in range(repeats):  # alternate, so drift in the machine hits both alike
            small_times.append(_timed_call(variant.executable, call))
            large_times.append(_timed_call(large, large_call))
        small_bytes = _shape_bytes(shape, dtype)
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


# ----------------------------------------------------------------------------
# Chains: one step's outputs are the next step's arguments


def _takes_one_positional(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes exactly one positional argument (then a tuple is passed whole)."""
    info = _user_jit_info(fn)
    signature = _signature(getattr(fn, "_fun", fn) if info is not None else fn)
    if signature is None:
        return False
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1


def spread(outputs: Any, next_step: Callable[..., Any]) -> tuple[Any, ...]:
    """How a chain passes a step's ``outputs`` to ``next_step``: the positional arguments.

    A plain tuple is spread into positional arguments (``params, opt =
    step(params, opt)``), unless the next step takes exactly one positional
    argument; anything else (an array, a dataclass, a dict, a NamedTuple) is
    the one argument.
    """
    if type(outputs) is tuple and not (_takes_one_positional(next_step) and len(outputs) != 1):
        return outputs
    return (outputs,)


def chain_arguments(variant: CompiledVariant, next_step: Callable[..., Any]) -> tuple[Any, ...]:
    """``next_step``'s arguments in a chain: ``variant``'s outputs, abstract (nothing is allocated),
    each with the sharding the compiled step gives it."""
    if variant.output_structs is None:  # pragma: no cover - every variant built here has them
        raise CompileError(f"the outputs of {variant.name} are not known, so the chain cannot continue")
    return spread(variant.output_structs, next_step)


def compose(steps: Sequence[Callable[..., Any]], name: str = "chain") -> Callable[..., Any]:
    """The chain as one function: ``steps[-1](...steps[1](*steps[0](*args, **kwargs)))``, spread as
    :func:`spread` does. jit it to get the fused chain (a step that is a jit object is inlined)."""

    def composed(*args: Any, **kwargs: Any) -> Any:
        value = steps[0](*args, **kwargs)
        for step in steps[1:]:
            value = step(*spread(value, step))
        return value

    first = getattr(steps[0], "_fun", steps[0])
    try:
        composed.__signature__ = inspect.signature(first)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    composed.__name__ = composed.__qualname__ = name
    return composed


# ----------------------------------------------------------------------------
# Example arguments from --shapes


def shape_structs(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[Any, ...]:
    """``jax.ShapeDtypeStruct`` for each parsed ``--shapes`` entry (nothing allocated)."""
    jax = _jax()
    # jnp.dtype knows bfloat16 and the other ml_dtypes by name; numpy does not
    return tuple(jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype)) for dtype, shape in shapes)
