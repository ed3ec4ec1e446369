"""What a module that sets jax its own way costs: the fresh worker it is checked in (issue 28, part 4).

A module that sets ``XLA_FLAGS``, ``JAX_*`` or ``jax.config`` otherwise than the first module of a run
is checked by a worker of its own (docs/isolation.md). This times, in alternating rounds on fresh
processes, ``fieldmem check`` of the same specs where the last module sets nothing (``same``: one worker)
and where it sets ``XLA_FLAGS`` (``own``: a second worker, started as soon as the first finds it):

- ``two``: two one-target modules;
- ``examples``: four bundled examples, then the module (the first worker has work to overlap with).

Each run uses ``--no-cache`` and ``JAX_PLATFORMS=cpu``. Writes ``results/module-settings.json``.

Usage: ``python benchmarks/bench_module_settings.py [--rounds 5] [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402

EXAMPLES = [str(ROOT / "examples" / name) for name in ("field.py", "optimizer.py", "stencil_scan.py", "advisor.py")]

MODULE = """\
{top}import jax.numpy as jnp

import fieldmem


def {name}(u):
    return u + 1.0


fieldmem.case({name}, args=lambda: (jnp.zeros((256,)),), name="{name}", donate="u")
"""
OWN_FLAGS = 'import os\n\nos.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"\n\n'


def _run(folder: Path, specs: list[str]) -> float:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *specs, "--no-cache", "-f", "json"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench_module_settings: fieldmem check {' '.join(specs)} failed: {done.stderr[-400:]}")
    return seconds


BENCHMARK = results_file.Benchmark(
    "module-settings",
    results_file.headline_markdown("A module with its own XLA_FLAGS after one without, against two without"),
    lambda result: {
        f"{case}, last {last}: median (s)": seconds
        for case, row in result["cases"].items()
        for last, seconds in row["median_seconds"].items()
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    cases = {"two": ["first.py"], "examples": EXAMPLES}
    seconds: dict[str, dict[str, list[float]]] = {case: {"same": [], "own": []} for case in cases}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "first.py").write_text(MODULE.format(top="", name="first"))
        (folder / "same.py").write_text(MODULE.format(top="", name="same"))
        (folder / "own.py").write_text(MODULE.format(top=OWN_FLAGS, name="own"))
        for _ in range(args.rounds):
            for case, specs in cases.items():
                for last in ("same", "own"):
                    seconds[case][last].append(round(_run(folder, [*specs, f"{last}.py"]), 3))
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "rounds": args.rounds,
        "cases": {
            case: {
                "specs": [Path(s).name for s in specs] + ["same.py | own.py"],
                "seconds": runs,
                "median_seconds": {last: round(statistics.median(values), 3) for last, values in runs.items()},
            }
            for case, specs in cases.items()
            for runs in [seconds[case]]
        },
    }
    results_file.write(args.out, BENCHMARK, result)
    for case, row in result["cases"].items():
        print(
            f"{case}: one worker {row['median_seconds']['same']} s, a worker of its own {row['median_seconds']['own']} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
