"""How much memory one XLA compile takes, against the size of the program it compiles.

For each case this script lowers a program in a fresh process, then compiles it
alone while a thread samples the process's resident memory every 5 ms, and
records the lowered module's size (``Lowered.as_text()``, bytes, and the seconds that reading took) and the peak
growth of the resident memory over the compile. The ratio of the two, per
platform, is the factor :mod:`fieldmem.driver.compile_memory` estimates a
compile's memory by, before it lets a second compile run beside one already
running.

Cases: the synthetic module of 1,000 and 5,000 leaves (``synth.py``), the compile-heavy transformer step (``heavy.py``) with 8, 12 and 32
unrolled blocks on this machine's CPU and for an H100 (compiled without the
device), and the pod example (``examples/pod/train_step.py``) for
``tpu:v5e:16x16``.

Usage: ``python benchmarks/compile_memory.py [--cases leaves:1000 leaves:5000 cpu:8 ... pod]
[--out benchmarks/results]``; writes ``compile-memory.{json,md}``
through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import results_file  # noqa: E402

CASES = ("leaves:1000", "leaves:5000", "cpu:8", "cpu:12", "cpu:32", "gpu:12", "gpu:32", "pod")

# run in a fresh process per case: lower, then compile alone while a thread samples VmRSS
CHILD = r"""
import json, os, sys, threading, time
case, root, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [f"{root}/examples/pod", f"{root}/examples", f"{root}/benchmarks", scratch]
import jax


def rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


options = None
if case == "pod":
    import train_step
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import Mesh, NamedSharding

    chips = list(topologies.get_topology_desc("v5e:16x16", "tpu").devices)

    def onto(leaf):
        mesh = leaf.sharding.mesh
        grid = mesh_utils.create_device_mesh(mesh.devices.shape, devices=chips)
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(Mesh(grid, mesh.axis_names), leaf.sharding.spec))

    function, args = train_step.train_step, jax.tree.map(onto, train_step.train_step_args())
elif case.startswith("leaves:"):
    import importlib
    from pathlib import Path

    import synth

    leaves = int(case.split(":")[1])
    synth.write_module(Path(scratch) / f"leaves_{leaves}.py", functions=1, chain=1, leaves=leaves, size=8)
    function, make_args, donate = importlib.import_module(f"leaves_{leaves}").CASES[0]
    function, args = jax.jit(function, donate_argnums=donate), make_args()
else:
    import importlib
    from pathlib import Path

    import heavy

    where, layers = case.split(":")
    heavy.write_module(Path(scratch) / f"heavy_{layers}.py", layers=int(layers))
    module = importlib.import_module(f"heavy_{layers}")
    function, args = module.train_step, module.make_args()
    if where == "gpu":
        import nvidia.cuda_nvcc
        from jax.experimental import topologies
        from jax.sharding import SingleDeviceSharding

        spec = Path(root, "fieldmem", "specs", "gpu", "h100_sxm.txtpb").read_text()
        chip = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices[0]
        args = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=SingleDeviceSharding(chip)), args)
        options = {"xla_gpu_cuda_data_dir": next(iter(nvidia.cuda_nvcc.__path__))}
lowered = jax.jit(function).trace(*args).lower()
start = time.perf_counter()
size = len(lowered.as_text())
as_text_s = time.perf_counter() - start
before = peak = rss()
done = threading.Event()


def sample():
    global peak
    while not done.is_set():
        peak = max(peak, rss())
        time.sleep(0.005)


sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start = time.perf_counter()
lowered.compile(options)
seconds = time.perf_counter() - start
done.set()
sampler.join()
print(json.dumps({
    "module_bytes": size, "as_text_s": as_text_s, "rss_before": before, "growth": max(peak, rss()) - before,
    "compile_s": seconds,
}))
"""


def environment(case: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    if case == "pod":  # the example makes its mesh of the devices jax has
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=256"
    return env


def measure(case: str, scratch: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(ROOT), str(scratch)],
        capture_output=True,
        text=True,
        env=environment(case),
        check=True,
    )
    reading = json.loads(done.stdout.strip().splitlines()[-1])
    platform_name = {"pod": "tpu", "leaves": "cpu"}.get(case.split(":")[0], case.split(":")[0])
    return {
        "case": case,
        "platform": platform_name,
        "module_bytes": reading["module_bytes"],
        "growth_mib": round(reading["growth"] / 2**20, 1),
        "rss_before_mib": round(reading["rss_before"] / 2**20, 1),
        "bytes_per_module_byte": round(reading["growth"] / reading["module_bytes"]),
        "compile_s": round(reading["compile_s"], 2),
        "as_text_s": round(reading["as_text_s"], 4),
    }


def memory_total() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


NAMES = {
    "leaves:1000": "synth.py, 1,000 leaves, cpu",
    "leaves:5000": "synth.py, 5,000 leaves, cpu",
    "cpu:8": "heavy.py, 8 blocks, cpu",
    "cpu:12": "heavy.py, 12 blocks, cpu",
    "cpu:32": "heavy.py, 32 blocks, cpu",
    "gpu:12": "heavy.py, 12 blocks, gpu:h100",
    "gpu:32": "heavy.py, 32 blocks, gpu:h100",
    "pod": "examples/pod, tpu:v5e:16x16",
}


def markdown(document: dict[str, Any]) -> str:
    meta = document["meta"]
    lines = [
        "# One XLA compile's memory against the size of its program",
        "",
        f"- date: {meta['date']}; machine: {meta['machine']}; jax {meta['jax']}; commit {meta['commit']}",
        "- written by `benchmarks/compile_memory.py`: each case lowered, then compiled alone in a fresh process "
        "while a thread sampled its resident memory every 5 ms; growth: the peak over the compile less the "
        "memory before it",
        "",
        "| case | module (KB) | as_text() (ms) | compile (s) | growth (MiB) | bytes of growth per byte of module |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["cases"]:
        lines.append(
            f"| {NAMES.get(row['case'], row['case'])} | {row['module_bytes'] / 1000:.0f} "
            f"| {row['as_text_s'] * 1000:.0f} | {row['compile_s']:.2f} "
            f"| {row['growth_mib']:.0f} | {row['bytes_per_module_byte']} |"
        )
    total = meta.get("memory_total_gib")
    largest = max(document["cases"], key=lambda row: row["growth_mib"]) if document["cases"] else None
    if total and largest:
        lines += [
            "",
            f"On this machine ({total:.0f} GiB): {int(total * 1024 // largest['growth_mib'])} compiles like the "
            f"largest above ({NAMES.get(largest['case'], largest['case'])}, {largest['growth_mib']:.0f} MiB) fit "
            "at once.",
        ]
    return "\n".join(lines) + "\n"


BENCHMARK = results_file.Benchmark(
    "compile-memory",
    lambda document: markdown(document),
    lambda document: {f"{case['case']}: growth (MiB)": case["growth_mib"] for case in document["cases"]},
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    import tempfile

    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    total = memory_total()
    document: dict[str, Any] = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "jax": jax.__version__,
            "commit": commit.stdout.strip(),
            "memory_total_gib": round(total / 2**30, 1) if total else None,
        },
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        for case in args.cases:
            row = measure(case, Path(scratch))
            print(json.dumps(row), flush=True)
            document["cases"].append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    results_file.write(args.out, BENCHMARK, document)
    print(f"wrote {args.out / 'compile-memory.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
