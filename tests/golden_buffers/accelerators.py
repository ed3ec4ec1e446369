"""Write the accelerator goldens: TPU v5e and H100 compiles made on this machine without the device.

Run by ``make golden`` through tests/golden/regenerate.py and tests/golden_buffers/regenerate.py
(each runs this file in a fresh process: the environment a deviceless compile needs,
``JAX_PLATFORMS=cpu`` and ``TPU_SKIP_MDS_QUERY=1``, must hold before jax is imported),
or by hand: ``.venv/bin/python tests/golden_buffers/accelerators.py {hlo,buffers}``.
Needs the accelerator extras (libtpu, jax-cuda12-plugin, jax-cuda12-pjrt, nvidia-cuda-nvcc-cu12).

- ``hlo``: ``tests/golden/acc_<case>.<backend>.<plain|donated>.hlo``, ``Compiled.as_text()``
  with source paths made relative to the repository root (as tests/golden does);
- ``buffers``: ``tests/golden_buffers/<backend>_<case>_<variant>.{buffer_assignment.pb,
  hlo_module.pb,hlo.txt,memory.json}``. These backends give no
  ``serialized_buffer_assignment_proto``: the buffer assignment is field 3 of the
  ``HloProto`` XLA dumps as ``*after_optimizations.hlo.pb`` (``xla_dump_hlo_as_proto``),
  and the module proto is its field 1.

``backend`` is ``tpu_v5e`` (``get_topology_desc("v5e:1x1", "tpu")``) or ``gpu_h100``
(``get_topology_desc(platform="cuda", target_config=h100_sxm.txtpb)``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from fieldmem.xla.buffers import split_hlo_proto

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HLO_FOLDER = ROOT / "tests" / "golden"
BACKENDS = ("tpu_v5e", "gpu_h100")
VARIANTS = ("plain", "donated")
N = 256  # the arrays stay small; the TPU stages the f32[1024,1024] case the same way


def _environment() -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["TPU_SKIP_MDS_QUERY"] = "1"
    # another process holding libtpu (any jax process on a machine with libtpu installed
    # takes /tmp/libtpu_lockfile) would make the TPU topology fail to start
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"


def sparse_add(u, g):
    return u.at[1:-1].add(g[1:-1])  # the update: 3 copies on a TPU, 1 on a GPU


def stepper(u, v):
    import jax
    import jax.numpy as jnp

    def body(i, c):
        return c + 0.5 * jnp.roll(c, 1, axis=0) * v  # a loop carry, updated each step

    return jax.lax.fori_loop(0, 4, body, u)


def kv_write(cache, kv, pos):
    import jax

    return jax.lax.dynamic_update_slice(cache, kv[:, None, :], (0, pos, 0))  # bf16: tiled (16,128)(2,1)


def sgd(params, velocity, grads):
    import jax

    # examples/optimizer.py's step: the TPU reads the large gradients through asynchronous
    # slices into VMEM (slice-start / slice-done, whose wrapped computations the text leaves out)
    velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
    return jax.tree.map(lambda p, v: p - 0.01 * v, params, velocity), velocity


SGD_SIZES = (512, 1024, 1024, 256)


def _layers(dtype):
    sizes = SGD_SIZES
    return {
        f"layer{i}": {"w": ((fan_in, fan_out), dtype), "b": ((fan_out,), dtype)}
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes))
    }


def cases():
    import jax.numpy as jnp

    return {
        "sgd": (sgd, [_layers(jnp.float32)] * 3, (0, 1)),
        "sparse_add": (sparse_add, [((N, N), jnp.float32), ((N, N), jnp.float32)], (0,)),
        "stepper": (stepper, [((N, N), jnp.float32), ((N, N), jnp.float32)], (0,)),
        "kv_write": (kv_write, [((4, 64, 128), jnp.bfloat16), ((4, 128), jnp.bfloat16), ((), jnp.int32)], (0,)),
    }


def device(backend: str):
    from jax.experimental import topologies

    if backend == "tpu_v5e":
        return topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0]
    spec = (HERE / "h100_sxm.txtpb").read_text()
    return topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices[0]


def compile_case(backend: str, name: str, donated: bool, dump: str | None = None):
    import jax

    fn, shapes, donate = cases()[name]
    sharding = jax.sharding.SingleDeviceSharding(device(backend))
    args = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf[0], leaf[1], sharding=sharding),
        shapes,
        is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple),
    )
    options = None
    if dump is not None:
        options = {
            "xla_dump_to": dump,
            "xla_dump_hlo_as_proto": True,
            "xla_dump_hlo_as_text": False,
            "xla_dump_hlo_module_re": f"jit_{fn.__name__}",
        }
    jitted = jax.jit(fn, donate_argnums=donate if donated else ())
    return jitted.trace(*args).lower().compile(compiler_options=options)


def memory_figures(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "alias_bytes": int(m.alias_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "peak_bytes": int(getattr(m, "peak_memory_in_bytes", 0) or 0),
    }


def _stable_text(text: str) -> str:
    text = text.replace(str(ROOT) + os.sep, "")
    return text if text.endswith("\n") else text + "\n"


def write_hlo() -> list[str]:
    written = []
    for backend in BACKENDS:
        for name in cases():
            for variant in VARIANTS:
                compiled = compile_case(backend, name, variant == "donated")
                path = HLO_FOLDER / f"acc_{name}.{backend}.{variant}.hlo"
                path.write_text(_stable_text(compiled.as_text()))
                written.append(path.name)
    return written


def write_buffers() -> list[str]:
    written = []
    for backend in BACKENDS:
        for name in cases():
            for variant in VARIANTS:
                with tempfile.TemporaryDirectory() as dump:
                    compiled = compile_case(backend, name, variant == "donated", dump)
                    (found,) = [p for p in Path(dump).iterdir() if p.name.endswith("after_optimizations.hlo.pb")]
                    assignment, module = split_hlo_proto(found.read_bytes())
                assert assignment is not None and module is not None, found
                stem = f"{backend}_{name}_{variant}"
                (HERE / f"{stem}.buffer_assignment.pb").write_bytes(assignment)
                (HERE / f"{stem}.hlo_module.pb").write_bytes(module)
                (HERE / f"{stem}.hlo.txt").write_text(_stable_text(compiled.as_text()))
                (HERE / f"{stem}.memory.json").write_text(json.dumps(memory_figures(compiled), indent=2) + "\n")
                written.append(stem)
    return written


def main(what: str) -> int:
    _environment()
    import jax

    # "/path/to/checkout/tests/..." is recorded as "tests/...", in the text and the module proto
    jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(str(ROOT) + os.sep))
    written = write_hlo() if what == "hlo" else write_buffers()
    print(f"jax {jax.__version__}: wrote {len(written)} accelerator goldens ({what})")
    return 0


def run(what: str) -> None:
    """Run this file for ``what`` in a fresh process with the deviceless environment."""
    import subprocess

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), what], check=True, env=env)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "hlo"))
