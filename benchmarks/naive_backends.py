"""The naive baseline for one backend: the compiles fieldmem makes, done by hand. No fieldmem import.

    python benchmarks/naive_backends.py cpu        # the bundled examples on this machine's CPU
    python benchmarks/naive_backends.py gpu:h100   # ... for an H100, compiled without the device
    python benchmarks/naive_backends.py tpu:v5e    # ... for a TPU v5e chip, compiled without the device
    python benchmarks/naive_backends.py pod        # examples/pod/train_step.py on tpu:v5e:16x16

For each case: jit without and with donation, trace, lower, compile (for a
topology's chips: the arguments as ShapeDtypeStructs on them, the mesh's
shape and partition specs carried over), memory_analysis() and as_text(),
one after the other. Prints the seconds it took, from before ``import jax``.
"""

import os
import sys
import time
from pathlib import Path

start = time.perf_counter()
BACKEND = sys.argv[1]
ROOT = Path(__file__).resolve().parent.parent
if BACKEND != "cpu":  # a deviceless compile: no accelerator plugin starts, libtpu asks no metadata server
    os.environ.update(JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
if BACKEND == "pod":  # the example makes its mesh of the devices jax has: 256, as on the pod
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=256"

import jax  # noqa: E402
from jax.experimental import mesh_utils, topologies  # noqa: E402
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "examples" / "pod"))


def chips(name):
    """The compile-only devices of a deviceless backend."""
    if name.startswith("gpu:"):
        spec = (ROOT / "fieldmem" / "model" / "specs" / "gpu" / "h100_sxm.txtpb").read_text()
        return list(topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices)
    if name == "tpu:v5e":
        return list(topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices)
    return list(topologies.get_topology_desc("v5e:16x16", "tpu").devices)


def compile_options():
    if not BACKEND.startswith("gpu:"):
        return {}
    import nvidia.cuda_nvcc  # the wheel's ptxas and libdevice, never a system CUDA

    return {"xla_gpu_cuda_data_dir": next(iter(nvidia.cuda_nvcc.__path__))}


def onto(args, devices):
    """Every array leaf of ``args`` as a ShapeDtypeStruct on ``devices`` (a mesh carried onto them)."""

    def place(leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            mesh = sharding.mesh
            grid = mesh_utils.create_device_mesh(mesh.devices.shape, devices=devices)
            new = NamedSharding(Mesh(grid, mesh.axis_names), sharding.spec)
        else:
            new = SingleDeviceSharding(devices[0])
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=new)

    return jax.tree_util.tree_map(place, args)


if BACKEND == "pod":
    import train_step

    CASES = [(train_step.train_step, train_step.train_step_args, dict(donate_argnums=(0, 1)))]
else:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from example_cases import CASES

devices = None if BACKEND == "cpu" else chips(BACKEND)
options = compile_options()
for fn, make_args, jit_options in CASES:
    args = make_args()
    static = jit_options.get("static_argnums", ())
    if devices is not None:
        args = tuple(a if n in static else onto(a, devices) for n, a in enumerate(args))
    for donate in ((), jit_options["donate_argnums"]):
        jitted = jax.jit(fn, static_argnums=static, donate_argnums=donate)
        compiled = jitted.trace(*args).lower().compile(options)
        compiled.memory_analysis()
        compiled.as_text()
print(f"{time.perf_counter() - start:.3f}")
