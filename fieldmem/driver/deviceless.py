"""Compiling for a GPU or TPU this machine does not have (``--backend tpu:v5e``, ``gpu:h100:8``).

jax compiles for a *topology* (``jax.experimental.topologies.get_topology_desc``):
TPU chips come from libtpu (``fieldmem[tpu]``), GPUs from the CUDA plugin and
one of XLA's per-GPU target configs (``fieldmem[gpu]``; the specs ship in
``fieldmem/model/specs/gpu/``). Nothing runs there: the example arguments are made
on the CPU and every array leaf becomes a ``jax.ShapeDtypeStruct`` on the
target's chips (:func:`place_call`), with a mesh's shape, axis names and
partition specs carried onto them. The program is compiled with XLA's dump
on, as every accelerator compile is (:mod:`fieldmem.driver.dumps`: the buffer
assignment comes from the dump, and a program that does not fit a TPU chip is
compiled again without that check), with :func:`compile_options` beside it.

A process compiles for these only where jax started with ``JAX_PLATFORMS=cpu``
(or on a machine whose accelerator plugins start) and ``TPU_SKIP_MDS_QUERY=1``
(``fieldmem.request.backends.deviceless_environment``; the command line sets
them for its own process before jax starts). The compile uses the ptxas and
libdevice of the ``nvidia-cuda-nvcc-cu12`` wheel (``xla_gpu_cuda_data_dir``),
or, for jax's CUDA 13 plugin, of ``nvidia-cuda-nvcc`` 13 (``nvidia/cu13``),
never a CUDA toolkit installed on the machine.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldmem.driver.jaxerrors import first_line
from fieldmem.model.errors import CompileError, OptionError
from fieldmem.request.backends import (
    DEVICELESS_ENV,
    GPU_KINDS,
    GPU_SPECS,
    BackendName,
    cuda_compilers,
    gpu_spec_text,
    parse_backend,
    require_extra,
)

__all__ = [
    "DEVICELESS_NOTE",
    "Target",
    "active_target",
    "callback_refused",
    "check_platform",
    "compile_options",
    "deviceless_scope",
    "gpu_spec",
    "gpu_spec_names",
    "nvcc_folder",
    "place_call",
    "target",
]

SPECS = GPU_SPECS

# what compiling without the device changes, said on every deviceless report
DEVICELESS_NOTE = {
    "gpu": "XLA's GPU autotuning did not run, so gemm and convolution choices "
    "(and the workspace they take) may differ from a compile on the GPU; nothing was run",
    "tpu": "the TPU compiler (libtpu) compiled for this topology; nothing was run",
}


@dataclass(frozen=True)
class Target:
    """A deviceless backend with its chips (topology devices: compile for them, never run)."""

    backend: BackendName
    devices: tuple[Any, ...]

    @property
    def platform(self) -> str:
        return self.backend.platform

    @property
    def device_kind(self) -> str | None:
        return getattr(self.devices[0], "device_kind", None)


def gpu_spec_names() -> dict[str, str]:
    """GPU kind -> the file of its target config shipped with fieldmem."""
    return {kind: f"{stem}.txtpb" for kind, stem in GPU_KINDS.items()}


def gpu_spec(kind: str) -> str:
    """The GpuTargetConfigProto text of GPU ``kind`` (``h100``), from fieldmem/model/specs/gpu/."""
    return gpu_spec_text(kind)


_lock = threading.Lock()


@functools.cache
def _devices(name: str) -> tuple[Any, ...]:
    backend = parse_backend(name)
    _check_environment(backend)
    from jax.experimental import topologies

    from fieldmem.driver.quiet import quiet_stderr

    try:
        with quiet_stderr():
            if backend.platform == "tpu":
                axes = list(backend.axes) + [1] * (3 - len(backend.axes))
                options: dict[str, Any] = {"chips_per_host_bounds": [min(n, 2) for n in axes[:2]] + [1]}
                if backend.kind == "v4":
                    options["chip_config_name"] = "megacore"
                topology = topologies.get_topology_desc(
                    f"{backend.kind}:{'x'.join(map(str, backend.axes))}", "tpu", **options
                )
            else:
                assert backend.kind is not None
                topology = topologies.get_topology_desc(
                    platform="cuda", topology=f"1x1x{backend.chips}", target_config=gpu_spec(backend.kind)
                )
    except Exception as exc:
        raise OptionError(_topology_error(backend, exc)) from None
    devices = tuple(topology.devices)
    if len(devices) != backend.chips:
        raise OptionError(
            f"--backend {backend.name}: jax made {len(devices)} devices for a topology of {backend.chips} chips"
        )
    return devices


def _topology_error(backend: BackendName, exc: BaseException) -> str:
    """Why jax made no topology for ``backend``, in one line: the environment to set when that is why."""
    text = first_line(exc)
    settings = " ".join(f"{k}={v}" for k, v in DEVICELESS_ENV.items())
    if "lockfile" in text:
        return (
            f"--backend {backend.name}: libtpu is locked by another process ({text}); compiling without the TPU "
            f"needs {settings} in the environment before jax starts (the fieldmem command sets them itself)"
        )
    if backend.platform == "gpu" and isinstance(exc, NotImplementedError):
        return (
            f"--backend {backend.name}: the CUDA plugin did not start in this process (no GPU here, and jax started "
            f"without JAX_PLATFORMS=cpu); set {settings} before importing jax (the fieldmem command sets them itself)"
        )
    return f"--backend {backend.name}: jax cannot make this topology: {text}"


def _check_environment(backend: BackendName) -> None:
    """Refuse, in one line, a process whose libtpu would query a cloud metadata server for its TPU."""
    if backend.platform == "tpu" and os.environ.get("TPU_SKIP_MDS_QUERY") != "1":
        raise OptionError(
            f"--backend {backend.name} compiles without the TPU only where TPU_SKIP_MDS_QUERY=1 was set before "
            "jax started (the fieldmem command sets it itself); in Python, set "
            + " ".join(f"{k}={v}" for k, v in DEVICELESS_ENV.items())
            + " in the environment before importing jax"
        )


def target(name: str) -> Target:
    """The deviceless backend ``name`` (``tpu:v5e:2x2``) and its chips, made once per process.

    Raises:
        OptionError: an unknown name, its extra not installed (naming the ``pip install``), a process
            whose environment cannot compile without the device, or a topology jax refuses.
    """
    backend = parse_backend(name)
    require_extra(backend)
    with _lock:
        return Target(backend, _devices(backend.name))


_active: contextvars.ContextVar[Target | None] = contextvars.ContextVar("fieldmem_deviceless", default=None)


def active_target() -> Target | None:
    """The deviceless backend the current check compiles for (None: a backend this machine has)."""
    return _active.get()


@contextlib.contextmanager
def deviceless_scope(found: Target) -> Iterator[None]:
    """Compile for ``found`` while inside: arguments are made on the CPU, lowered on its chips."""
    import jax

    token = _active.set(found)
    try:
        with jax.default_device(jax.devices("cpu")[0]):
            yield
    finally:
        _active.reset(token)


# ---- arguments onto the target's chips -------------------------------------------------


def place_call(call: Any, found: Target) -> Any:
    """``call`` (a PreparedCall) with every array leaf of its traced arguments a ShapeDtypeStruct on
    ``found``'s chips: a mesh of N devices onto a mesh of the same shape over the N chips (same axis names
    and partition specs); an unsharded leaf onto the first chip, or replicated over the mesh when another
    leaf is sharded. A leaf in a host memory kind (``pinned_host``: an offloaded state) stays in it there,
    and so does each of the jit's ``in_shardings``/``out_shardings``: the target compiles the offload the
    user's program makes, and XLA gives its ``host_*`` figures.

    Raises:
        OptionError: a mesh of another size than the target's chips, or a sharding that is not a mesh.
    """
    import dataclasses

    import jax

    leaves = [
        leaf
        for n, arg in enumerate(call.args)
        if n not in call.static_positions
        for leaf in jax.tree_util.tree_leaves(arg)
    ] + [leaf for k, v in call.kwargs.items() if k not in call.static_names for leaf in jax.tree_util.tree_leaves(v)]
    meshes: dict[Any, Any] = {}
    for leaf in leaves:
        mesh = _mesh_of(getattr(leaf, "sharding", None), found)
        if mesh is not None:
            meshes[(mesh.devices.shape, mesh.axis_names)] = mesh
    if len(meshes) > 1:
        raise OptionError(
            f"--backend {found.backend.name}: the arguments are sharded over {len(meshes)} different meshes; "
            "fieldmem carries one mesh onto the target's chips"
        )
    target_mesh = _target_mesh(next(iter(meshes.values())), found) if meshes else None

    def place(leaf: Any) -> Any:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype") or isinstance(leaf, (int, float, complex, bool)):
            return leaf
        sharding: Any = getattr(leaf, "sharding", None)
        kind = _host_kind(sharding)
        new: Any
        if target_mesh is None:
            new = jax.sharding.SingleDeviceSharding(found.devices[0], memory_kind=kind)
        elif _mesh_of(sharding, found) is not None:
            new = jax.sharding.NamedSharding(target_mesh, sharding.spec, memory_kind=kind)
        else:
            new = jax.sharding.NamedSharding(target_mesh, jax.sharding.PartitionSpec(), memory_kind=kind)
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=new, weak_type=getattr(leaf, "weak_type", False))

    def place_tree(value: Any) -> Any:
        return jax.tree_util.tree_map(place, value)

    args = tuple(a if n in call.static_positions else place_tree(a) for n, a in enumerate(call.args))
    kwargs = {k: v if k in call.static_names else place_tree(v) for k, v in call.kwargs.items()}
    jit_options = dict(call.jit_options)
    for key in ("in_shardings", "out_shardings"):
        if key in jit_options and jit_options[key] is not None:
            jit_options[key] = _remap_shardings(jit_options[key], target_mesh, found)
    return dataclasses.replace(call, args=args, kwargs=kwargs, jit_options=jit_options)


def _host_kind(sharding: Any) -> str | None:
    """The host memory kind ``sharding`` names (``pinned_host``, ``unpinned_host``), carried onto the
    target's chips; None for the device's own memory (the target's default there)."""
    kind = getattr(sharding, "memory_kind", None)
    return kind if kind in ("pinned_host", "unpinned_host") else None


def _mesh_of(sharding: Any, found: Target) -> Any | None:
    """The mesh of a sharding over more than one device (None: one device or none)."""
    import jax

    if sharding is None:
        return None
    devices: Any = getattr(sharding, "device_set", set())
    if len(devices) <= 1:
        return None
    if not isinstance(sharding, jax.sharding.NamedSharding):
        raise OptionError(
            f"--backend {found.backend.name}: an argument is sharded with {type(sharding).__name__}; "
            "fieldmem carries a NamedSharding over a Mesh onto the target's chips"
        )
    return sharding.mesh


def _target_mesh(mesh: Any, found: Target) -> Any:
    """``mesh``'s shape and axis names over ``found``'s chips (as ``jax.make_mesh`` orders them there)."""
    import jax
    import numpy as np

    shape = tuple(mesh.devices.shape)
    size = int(np.prod(shape))
    if size != len(found.devices):
        raise OptionError(
            f"--backend {found.backend.name} has {len(found.devices)} chips, but the arguments are sharded over a "
            f"mesh of {size} devices: give a topology of {size} chips, or make the arguments for "
            f"--devices {len(found.devices)}"
        )
    try:
        from jax.experimental import mesh_utils

        devices = mesh_utils.create_device_mesh(shape, devices=list(found.devices))
    except Exception:
        devices = np.array(found.devices, dtype=object).reshape(shape)
    return jax.sharding.Mesh(devices, mesh.axis_names)


def _remap_shardings(tree: Any, target_mesh: Any, found: Target) -> Any:
    import jax

    def remap(s: Any) -> Any:
        if isinstance(s, jax.sharding.NamedSharding) and target_mesh is not None:
            return jax.sharding.NamedSharding(target_mesh, s.spec, memory_kind=_host_kind(s))
        if isinstance(s, jax.sharding.SingleDeviceSharding):
            return jax.sharding.SingleDeviceSharding(found.devices[0], memory_kind=_host_kind(s))
        return s

    return jax.tree_util.tree_map(remap, tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))


# ---- compiling and the dumped buffer assignment ---------------------------------------


def compile_options(found: Target) -> dict[str, Any]:
    """XLA options for a deviceless compile beside the dump's (:func:`fieldmem.driver.dumps.dump_options`): for a
    GPU, the ptxas and libdevice of the nvidia-cuda-nvcc wheel; none for a TPU."""
    return {"xla_gpu_cuda_data_dir": nvcc_folder()} if found.platform == "gpu" else {}


def nvcc_folder() -> str:
    """The folder of the nvidia-cuda-nvcc wheel of an installed CUDA plugin (bin/ptxas, nvvm/libdevice):
    CUDA 12's (fieldmem[gpu]) first, else CUDA 13's."""
    for _, module in cuda_compilers():
        spec = importlib.util.find_spec(module)
        for location in list(spec.submodule_search_locations or []) if spec is not None else []:
            if (Path(location) / "bin" / "ptxas").exists():
                return str(location)
    raise OptionError('compiling for a GPU needs the ptxas of nvidia-cuda-nvcc-cu12: pip install "fieldmem[gpu]"')


def check_platform(compiled: Any, found: Target, devices: list[Any]) -> None:
    """Refuse a program that jax compiled for another platform than ``found``'s (no argument placed it there).

    Raises:
        CompileError: the executable's devices are not the target's.
    """
    platforms = {d.platform for d in devices}
    if platforms and platforms != {found.platform}:
        raise CompileError(
            f"jax compiled this program for {', '.join(sorted(platforms))}, not for {found.backend.name}: "
            "no argument of the call is an array (nothing places it on the target's chips)"
        )
    del compiled


# the lowering rules of jax's host callbacks, by the name a user writes them with
_CALLBACKS = {
    "debug_print_lowering_rule": "jax.debug.print",
    "debug_callback_lowering": "jax.debug.callback",
    "pure_callback_lowering": "jax.pure_callback",
    "io_callback_lowering": "jax.experimental.io_callback",
}


def callback_refused(exc: BaseException, found: Target) -> str | None:
    """Why lowering for ``found`` failed, in words, when it failed on a host callback (None: it did not).

    jax lowers ``jax.pure_callback``, ``io_callback``, ``jax.debug.print`` and ``jax.debug.callback`` for a
    GPU through the GPU's runtime client (``emit_python_callback`` asks for the backend), which a machine
    without the GPU does not start: jax says "Unknown backend: 'gpu' requested". libtpu lowers them for a
    TPU without one. Read from the traceback's frames (jax's function names; tolerated when they change).
    """
    frames = _frames(exc)
    names = [f.f_code.co_name for f in frames]
    if "emit_python_callback" not in names:
        return None
    which = next((_CALLBACKS[n] for n in names if n in _CALLBACKS), "a host callback")
    where = _equation_line(exc)
    device = found.platform.upper()
    return (
        f"{which}{f' at {where}' if where else ''} cannot be compiled for {found.backend.name} without the {device}: "
        f"jax builds a host callback for a {device} through the {device}'s runtime, which only a machine with one "
        "starts; check this function on cpu or a tpu: backend, or without the callback"
    )


def _frames(exc: BaseException) -> list[Any]:
    """The frames of ``exc``'s traceback, outermost first, and of the exceptions it was raised from: jax's
    traceback filtering leaves its own frames out of the one it raises and keeps them in its cause."""
    return [frame for _, tb in _chain(exc) for frame, _ in _entries(tb)]


def _chain(exc: BaseException) -> list[tuple[BaseException, Any]]:
    """``exc`` and the exceptions it was raised from or during, each with its traceback."""
    found: list[tuple[BaseException, Any]] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e, _ in found):
        found.append((current, current.__traceback__))
        current = current.__cause__ or current.__context__
    return found


def _entries(tb: Any) -> list[tuple[Any, int]]:
    """(frame, line) of each entry of traceback ``tb``, outermost first."""
    entries = []
    while tb is not None:
        entries.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return entries


def _equation_line(exc: BaseException) -> str | None:
    """``file.py:LINE`` of the user's line that called the callback: the innermost frame outside jax and
    fieldmem of the stack jax kept from tracing (``JaxStackTraceBeforeTransformation``, which it chains to
    a lowering error); None when jax kept none."""
    import jax

    skip = tuple(
        os.path.join(d, "") for d in (os.path.dirname(jax.__file__), os.path.dirname(os.path.dirname(__file__)))
    )
    for error, tb in _chain(exc):
        if type(error).__name__ != "JaxStackTraceBeforeTransformation":
            continue
        for frame, line in reversed(_entries(tb)):
            file = os.path.abspath(frame.f_code.co_filename)
            if not file.startswith(skip):
                path = os.path.relpath(file)
                return f"{file if path.startswith('..') else path}:{line}"
    return None
