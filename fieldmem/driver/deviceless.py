"""Compiling for a GPU or TPU this machine does not have (``--backend tpu:v5e``, ``gpu:h100:8``).

jax compiles for a *topology* (``jax.experimental.topologies.get_topology_desc``):
TPU chips come from libtpu (``fieldmem[tpu]``), GPUs from the CUDA plugin and
one of XLA's per-GPU target configs (``fieldmem[gpu]``; the specs ship in
``fieldmem/specs/gpu/``). Nothing runs there: the example arguments are made
on the CPU and every array leaf becomes a ``jax.ShapeDtypeStruct`` on the
target's chips (:func:`place_call`), with a mesh's shape, axis names and
partition specs carried onto them. The program is compiled with XLA's dump
on (:func:`compile_options`), because ``memory_analysis()`` gives no
serialized buffer assignment for these backends: the dumped
``*after_optimizations.hlo.pb`` (an ``HloProto``) holds it and the module
(:func:`read_dump` reads the file; ``fieldmem.xla.buffers.split_hlo_proto``
takes the two out of it, where the other protos are read).

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
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldmem.driver.jaxerrors import first_line
from fieldmem.errors import CompileError, OptionError
from fieldmem.request.backends import (
    DEVICELESS_ENV,
    GPU_KINDS,
    BackendName,
    cuda_compilers,
    parse_backend,
    require_extra,
)

__all__ = [
    "DEVICELESS_NOTE",
    "Target",
    "active_target",
    "compile_options",
    "deviceless_scope",
    "dumped",
    "gpu_spec",
    "gpu_spec_names",
    "is_dumped",
    "place_call",
    "read_dump",
    "remember_dump",
    "target",
]

SPECS = Path(__file__).resolve().parent.parent / "specs" / "gpu"

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
    """The GpuTargetConfigProto text of GPU ``kind`` (``h100``), from fieldmem/specs/gpu/."""
    return (SPECS / gpu_spec_names()[kind]).read_text()


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
    leaf is sharded.

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
        new: Any
        if target_mesh is None:
            new = jax.sharding.SingleDeviceSharding(found.devices[0])
        elif _mesh_of(sharding, found) is not None:
            new = jax.sharding.NamedSharding(target_mesh, sharding.spec)
        else:
            new = jax.sharding.NamedSharding(target_mesh, jax.sharding.PartitionSpec())
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
            return jax.sharding.NamedSharding(target_mesh, s.spec)
        if isinstance(s, jax.sharding.SingleDeviceSharding):
            return jax.sharding.SingleDeviceSharding(found.devices[0])
        return s

    return jax.tree_util.tree_map(remap, tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))


# ---- compiling and the dumped buffer assignment ---------------------------------------


def compile_options(found: Target, folder: str) -> dict[str, Any]:
    """XLA options for a deviceless compile: dump the optimized module with its buffer assignment to
    ``folder``; for a GPU, the ptxas and libdevice of the nvidia-cuda-nvcc wheel."""
    options: dict[str, Any] = {
        "xla_dump_to": folder,
        "xla_dump_hlo_as_proto": True,
        "xla_dump_hlo_as_text": False,
    }
    if found.platform == "gpu":
        options["xla_gpu_cuda_data_dir"] = _nvcc_folder()
    return options


def _nvcc_folder() -> str:
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


def read_dump(folder: str) -> bytes | None:
    """The serialized ``HloProto`` (the optimized module and its buffer assignment) that a compile dumped
    to ``folder``; None when there is none."""
    found = sorted(Path(folder).glob("*after_optimizations.hlo.pb"))
    return found[0].read_bytes() if found else None


_dumps: weakref.WeakKeyDictionary[Any, bytes | None] = weakref.WeakKeyDictionary()


def remember_dump(compiled: Any, folder: str) -> None:
    """Keep what ``compiled``'s compile dumped, for :func:`dumped` (read_memory asks)."""
    try:
        _dumps[compiled] = read_dump(folder)
    except OSError:
        _dumps[compiled] = None


def is_dumped(compiled: Any) -> bool:
    """Whether ``compiled`` is a deviceless compile, whose dump :func:`dumped` gives."""
    try:
        return compiled in _dumps
    except TypeError:
        return False


def dumped(compiled: Any) -> bytes | None:
    """The ``HloProto`` dumped when ``compiled`` was compiled (None: none was, or not a deviceless compile)."""
    try:
        return _dumps.get(compiled)
    except TypeError:
        return None
