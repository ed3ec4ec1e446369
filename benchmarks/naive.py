"""The naive baseline: what a user would write by hand to get the facts fieldmem reads, without fieldmem.

    python benchmarks/naive.py MODULE.py [TIMINGS.json]   # a synthetic module's CASES (synth.py, heavy.py)
    python benchmarks/naive.py --examples                  # the bundled examples' five targets, this CPU
    python benchmarks/naive.py --backend cpu               # the same five, compiled as the backend test does
    python benchmarks/naive.py --backend gpu:h100          # ... for an H100, compiled without the device
    python benchmarks/naive.py --backend tpu:v5e           # ... for a TPU v5e chip, compiled without the device
    python benchmarks/naive.py --backend pod               # examples/pod/train_step.py on tpu:v5e:16x16

Each mode compiles every case without and with donation, one after the other: jit, lower, compile, then
``memory_analysis()`` and ``as_text()``, and prints the seconds it took from the start of the script.
It is the denominator of every speed ratio the benchmarks report, so each mode does exactly the work
of the script it was before issue 51 folded them into this one (``naive.py``, ``naive_examples.py``,
``naive_backends.py`` with ``example_cases.py``; ``git show 0a08d1f:benchmarks/naive_backends.py``):

- ``MODULE.py`` (``bench_fast.py``, ``bench_suite.py``, ``bench_levers.py``): fieldmem is hidden from the
  import (``import fieldmem`` raises ImportError), so the module's registrations are skipped and fieldmem
  costs nothing; for every ``(fn, make_args, donate_argnums)`` of its ``CASES``:
  ``jax.jit(fn, donate_argnums=...).lower(*args).compile()``. With ``TIMINGS.json`` it also writes the
  seconds of each lowering and each compile (XLA's default code generation: what a user's ``jit`` gets),
  read with two clock reads around each call: ``bench_fast.py`` reports the compile-heavy module's compile
  time from them.
- ``--examples`` (``bench_examples.py``): the bundled examples' targets (``example_cases()``: the five
  ``fieldmem check`` finds in the same four files), ``jax.jit(fn, static_argnums=, donate_argnums=)``.
- ``--backend`` (``bench_backends.py``, ``bench_fast.py``): the same five (or the pod example), traced,
  lowered and compiled for the backend's chips (``jitted.trace(*args).lower().compile(options)``): the
  arguments as ShapeDtypeStructs on them, the mesh's shape and partition specs carried over.
"""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

start = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
USAGE = "usage: naive.py MODULE.py [TIMINGS.json] | --examples | --backend cpu|gpu:h100|tpu:v5e|pod"


def example_cases():
    """The bundled examples' targets as a user would jit them: ``(function, make_args, jit options)``.
    Importing them imports the examples (and jax); ``examples/`` must be on ``sys.path``."""
    import field
    import optimizer
    import sparse_row
    import stencil_scan

    return [
        (field.update, field.update_args, dict(donate_argnums=(0, 1))),
        (sparse_row.set_row, sparse_row.set_row_args, dict(donate_argnums=(0,))),
        (sparse_row.write_kv, sparse_row.write_kv_args, dict(donate_argnums=(0,))),
        (stencil_scan.diffuse, stencil_scan.diffuse_args, dict(static_argnums=(1,), donate_argnums=(0,))),
        (optimizer.sgd_step._fun, optimizer.step_args, dict(donate_argnums=(0, 1))),
    ]


def module_cases(path, timings_path):
    """A synthetic module's ``CASES``, fieldmem hidden; the lowering and compile seconds to ``timings_path``."""
    sys.modules["fieldmem"] = None  # type: ignore[assignment]  # `import fieldmem` raises ImportError

    import jax

    spec = importlib.util.spec_from_file_location("synthetic_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    timings = []
    for fn, make_args, donate in module.CASES:
        args = make_args()
        for donate_argnums in ((), donate):
            t0 = time.perf_counter()
            lowered = jax.jit(fn, donate_argnums=donate_argnums).lower(*args)
            t1 = time.perf_counter()
            compiled = lowered.compile()
            t2 = time.perf_counter()
            compiled.memory_analysis()
            compiled.as_text()
            timings.append(
                {
                    "function": fn.__name__,
                    "donated": bool(donate_argnums),
                    "lower_seconds": t1 - t0,
                    "compile_seconds": t2 - t1,
                }
            )
    if timings_path is not None:
        with open(timings_path, "w") as out:
            json.dump({"wall_in_process": time.perf_counter() - start, "variants": timings}, out)


def examples():
    """The bundled examples on this machine's CPU."""
    import jax

    sys.path.insert(0, str(ROOT / "examples"))
    for fn, make_args, options in example_cases():
        args = make_args()
        static = options.get("static_argnums", ())
        for donate in ((), options["donate_argnums"]):
            compiled = jax.jit(fn, static_argnums=static, donate_argnums=donate).lower(*args).compile()
            compiled.memory_analysis()
            compiled.as_text()


def backend_cases(backend):
    """The bundled examples (or the pod example) compiled for ``backend``'s chips, without the device."""
    if backend != "cpu":  # a deviceless compile: no accelerator plugin starts, libtpu asks no metadata server
        os.environ.update(JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    if backend == "pod":  # the example makes its mesh of the devices jax has: 256, as on the pod
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=256"

    import jax
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding

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
        if not backend.startswith("gpu:"):
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

    if backend == "pod":
        import train_step

        cases = [(train_step.train_step, train_step.train_step_args, dict(donate_argnums=(0, 1)))]
    else:
        cases = example_cases()

    devices = None if backend == "cpu" else chips(backend)
    options = compile_options()
    for fn, make_args, jit_options in cases:
        args = make_args()
        static = jit_options.get("static_argnums", ())
        if devices is not None:
            args = tuple(a if n in static else onto(a, devices) for n, a in enumerate(args))
        for donate in ((), jit_options["donate_argnums"]):
            jitted = jax.jit(fn, static_argnums=static, donate_argnums=donate)
            compiled = jitted.trace(*args).lower().compile(options)
            compiled.memory_analysis()
            compiled.as_text()


def main(argv):
    if argv == ["--examples"]:
        examples()
    elif len(argv) == 2 and argv[0] == "--backend" and argv[1] in ("cpu", "gpu:h100", "tpu:v5e", "pod"):
        backend_cases(argv[1])
    elif len(argv) in (1, 2) and not argv[0].startswith("-"):
        module_cases(argv[0], argv[1] if len(argv) == 2 else None)
    else:
        print(USAGE, file=sys.stderr)
        return 2
    print(f"{time.perf_counter() - start:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
