"""The default ``--jobs`` against ``--jobs 1`` on the cold 20-function module (issue 17's).

``python benchmarks/bench_jobs.py [--pairs 3]``: pairs of fresh processes,
``fieldmem check MODULE --jobs 1`` then ``fieldmem check MODULE`` (the
default: the usable cores, at most 8), each on a module with fresh constants
and without the compilation cache, in the environment of ``bench_fast.py``.
Records the wall time and the CPU time (user + system, the worker included)
of each run: CPU time over wall time says how many cores a run kept busy.
Writes ``results/jobs.{json,md}`` through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file
from bench_fast import BENCH, COLD_MODULE, ROOT, Salts, environment, median, meta, timed

from synth import write_module


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(pairs: int) -> dict[str, Any]:
    salts = Salts()
    runs: dict[str, list[dict[str, float]]] = {"jobs 1": [], "default": []}
    with tempfile.TemporaryDirectory(prefix="fieldmem-bench-jobs-") as tmp:
        work = Path(tmp)
        env = environment(work / "cache")
        for _ in range(pairs):
            for label, flags in (("jobs 1", ["--jobs", "1"]), ("default", [])):
                module = write_module(work / f"m_{salts()}.py", salt=salts(), **COLD_MODULE)
                command = [sys.executable, "-m", "fieldmem", "check", str(module), "--no-cache", *flags]
                cpu = _children_cpu()
                wall = timed(command, env, work / "run.log")
                cpu = _children_cpu() - cpu
                runs[label].append({"wall_s": wall, "cpu_s": cpu, "cores_busy": cpu / wall})
                print(f"  {label}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    medians = {
        label: {key: median([r[key] for r in rs]) for key in ("wall_s", "cpu_s", "cores_busy")}
        for label, rs in runs.items()
    }
    return {
        "meta": {**meta(False, []), "cores_usable": len(os.sched_getaffinity(0))},
        "module": "synth.py: {functions} functions, chain {chain}, f32[{size},{size}], fresh constants".format(
            **COLD_MODULE
        ),
        "runs": runs,
        "medians": medians,
        "default_over_jobs_1": medians["default"]["wall_s"] / medians["jobs 1"]["wall_s"],
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["meta"]
    lines = [
        "# The default --jobs against --jobs 1",
        "",
        f"- date: {m['date']}; machine: {m['machine']}; {result['meta']['cores_usable']} usable cores; jax {m['jax']}; fieldmem {m['fieldmem_commit']}",
        f"- module: {result['module']}; `--no-cache`; fresh processes, alternating; medians of {len(result['runs']['default'])}",
        "",
        "| run | wall (s) | CPU (s) | cores busy |",
        "|---|---:|---:|---:|",
    ]
    for label, med in result["medians"].items():
        lines.append(f"| {label} | {med['wall_s']:.2f} | {med['cpu_s']:.2f} | {med['cores_busy']:.2f} |")
    lines += ["", f"default / jobs 1: {result['default_over_jobs_1']:.3f}", ""]
    return "\n".join(lines)


BENCHMARK = results_file.Benchmark(
    "jobs",
    lambda result: markdown(result),
    lambda result: {
        "default / --jobs 1 (wall)": result["default_over_jobs_1"],
        **{f"{k}: wall (s)": v["wall_s"] for k, v in result["medians"].items()},
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    ns = parser.parse_args()
    import compileall

    compileall.compile_dir(str(ROOT / "fieldmem"), quiet=1)  # as bench_fast.py: fieldmem's bytecode first
    result = run(ns.pairs)
    results_file.write(ns.out, BENCHMARK, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
