"""Which figure holds a TPU's VMEM: one update compiled for CPU, TPU v5e and H100 (issue 16, item 2).

``u.at[1:-1].add(g[1:-1])`` on f32[1024,1024], without and with donating ``u``, compiled on
this machine for XLA:CPU and, without the device, for a TPU v5e and an H100 (the accelerator
extras must be installed). For each compile it records XLA's ``memory_analysis()`` figures
verbatim and what fieldmem reads from the program: the copies by kind (``staging`` ones
move a value through another memory space), and per memory space (the buffer
assignment's allocation colors) the allocated bytes and the live peak.

Writes ``benchmarks/results/memory-spaces.json``; docs/peaks.md quotes it. A few seconds.
Run: ``.venv/bin/python benchmarks/memory_spaces.py``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"  # before jax: the deviceless TPU and GPU compiles need it
os.environ["TPU_SKIP_MDS_QUERY"] = "1"
os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402

sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402

from fieldmem.xla import buffers, hlo  # noqa: E402

N = 1024
RESULTS = ROOT / "benchmarks" / "results" / "memory-spaces.json"
H100_SPEC = ROOT / "tests" / "golden_buffers" / "h100_sxm.txtpb"


def update(u, g):
    return u.at[1:-1].add(g[1:-1])


def _device(backend: str):
    if backend == "cpu":
        return jax.devices("cpu")[0]
    if backend == "tpu:v5e":
        return topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0]
    spec = H100_SPEC.read_text()
    return topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices[0]


def _fields(data: bytes) -> dict[int, bytes]:
    from google.protobuf.internal.decoder import _DecodeVarint

    fields, i = {}, 0
    while i < len(data):
        key, i = _DecodeVarint(data, i)
        length, i = _DecodeVarint(data, i)
        fields[key >> 3] = data[i : i + length]
        i += length
    return fields


def measure(backend: str, donate: bool) -> dict:
    sharding = jax.sharding.SingleDeviceSharding(_device(backend))
    arg = jax.ShapeDtypeStruct((N, N), jnp.float32, sharding=sharding)
    jitted = jax.jit(update, donate_argnums=(0,) if donate else ())
    with tempfile.TemporaryDirectory() as dump:
        options = {"xla_dump_to": dump, "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": False}
        compiled = jitted.trace(arg, arg).lower().compile(compiler_options=options)
        (found,) = [p for p in Path(dump).iterdir() if p.name.endswith("after_optimizations.hlo.pb")]
        fields = _fields(found.read_bytes())
    m = compiled.memory_analysis()
    module = hlo.parse_hlo_module(compiled.as_text())
    live = buffers.analyze_liveness(buffers.decode_buffer_assignment(fields[3], fields[1]), module)
    copies = hlo.find_copies(module)
    return {
        "xla": {
            "argument_bytes": int(m.argument_size_in_bytes),
            "output_bytes": int(m.output_size_in_bytes),
            "alias_bytes": int(m.alias_size_in_bytes),
            "temp_bytes": int(m.temp_size_in_bytes),
            "peak_bytes": int(getattr(m, "peak_memory_in_bytes", 0) or 0),
        },
        "copies": len(copies),
        "staging_copies": sum(c.staging for c in copies),
        "constant_bytes": live.constant_bytes,
        "live_peak_bytes": live.live_peak_bytes,
        # what memory space 0's live peak holds beyond XLA's figures and the constants
        "live_peak_beyond_footprint": live.live_peak_bytes
        - (
            int(m.argument_size_in_bytes)
            + int(m.output_size_in_bytes)
            + int(m.temp_size_in_bytes)
            - int(m.alias_size_in_bytes)
            + live.constant_bytes
        ),
        "memory_spaces": {
            str(s.memory_space): {"allocated_bytes": s.allocated_bytes, "live_peak_bytes": s.live_peak_bytes}
            for s in live.memory_spaces
        },
    }


BENCHMARK = results_file.Benchmark(
    "memory-spaces",
    results_file.headline_markdown("One update's memory by memory space, per backend", "function"),
    lambda document: {
        f"{backend} {variant}: live peak (bytes)": one["live_peak_bytes"]
        for backend, variants in document["results"].items()
        for variant, one in variants.items()
    },
)


def main() -> int:
    results = {
        backend.replace(":", "_"): {variant: measure(backend, variant == "donated") for variant in ("plain", "donated")}
        for backend in ("cpu", "tpu:v5e", "gpu:h100")
    }
    document = {
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__,
        "function": "u.at[1:-1].add(g[1:-1]), u and g f32[1024,1024]; donated: u",
        "results": results,
    }
    results_file.write(RESULTS.parent, BENCHMARK, document)
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
