"""Several workers against one: the wall time of ``fieldmem check`` where the parent can share the work.

The parent gives each (backend, spec) with work to one of up to ``--jobs``
workers (fieldmem/parent/isolate.py). This times, in alternating pairs on fresh
processes (one worker first, then as many as fieldmem chooses):

- ``examples``: every bundled example in one command (9 specs);
- ``backends``: ``examples/interior.py`` on ``cpu,gpu:h100,tpu:v5e`` (3 backends; needs the deviceless
  extras, else skipped).

Every run is given ``--jobs`` (``--jobs 2`` by default; the most workers too); the "several" runs set
``FIELDMEM_WORKERS`` to ``--workers`` (8 by default, so ``--jobs`` bounds them).

A single module on one backend (the cold and compile-heavy figures of ``make bench``) is one
(backend, spec): it always gets one worker, so those figures do not move.

Each run uses ``--no-cache``. Writes ``results/workers-jobsN.{json,md}`` (N: ``--jobs``) through
``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).

Usage: ``python benchmarks/bench_workers.py [--pairs 3] [--jobs 2] [--workers N] [--out benchmarks/results]``.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))
CASES = {
    "examples": ["check", *EXAMPLES],
    "backends": ["check", "examples/interior.py", "--backend", "cpu,gpu:h100,tpu:v5e"],
}


def _has_extras() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("libtpu", "jax_plugins.xla_cuda12"))


def _run(args: list[str], workers: str | None) -> float:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("FIELDMEM_WORKERS", None)
    if workers is not None:
        env["FIELDMEM_WORKERS"] = workers
    with tempfile.TemporaryDirectory() as folder:  # several backends write one JSON file each
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "fieldmem", *args, "--no-cache", "-f", "json", "-o", f"{folder}/report.json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        seconds = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench_workers: fieldmem {' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    return seconds


def markdown(document: dict[str, Any]) -> str:
    """``workers-jobsN.md`` of a run, from its JSON document alone."""
    lines = [
        f"# Several workers against one ({document['date']}, {document['machine']['cpus']} CPUs, "
        f"--jobs {document['jobs']}, {document['pairs']} alternating pairs)",
        "",
        "| case | one worker (median s) | several (median s) | several / one |",
        "|---|---:|---:|---:|",
    ]
    for name, row in document["cases"].items():
        lines.append(f"| {name} | {row['one_worker_median_s']} | {row['several_median_s']} | {row['ratio']} |")
    return "\n".join(lines) + "\n"


def benchmark(name: str) -> results_file.Benchmark:
    """The result file ``name`` (``workers-jobsN``): several workers over one, per case."""
    return results_file.Benchmark(
        name, markdown, lambda document: {f"{c}: several / one": row["ratio"] for c, row in document["cases"].items()}
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="--jobs of every run (the most workers, too)")
    parser.add_argument("--workers", default="8", help="FIELDMEM_WORKERS of the 'several' runs (default 8)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    cases = {k: v for k, v in CASES.items() if k != "backends" or _has_extras()}
    rows = {}
    for name, command in cases.items():
        one, several = [], []
        command = [*command, "--jobs", str(args.jobs)]
        for pair in range(args.pairs):
            one.append(_run(command, "1"))
            several.append(_run(command, args.workers))
            print(f"{name} pair {pair + 1}: one worker {one[-1]:.2f}s, several {several[-1]:.2f}s", flush=True)
        rows[name] = {
            "command": command,
            "one_worker_s": [round(x, 3) for x in one],
            "several_s": [round(x, 3) for x in several],
            "one_worker_median_s": round(statistics.median(one), 3),
            "several_median_s": round(statistics.median(several), 3),
            "ratio": round(statistics.median(several) / statistics.median(one), 3),
        }
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "pairs": args.pairs,
        "jobs": args.jobs,
        "workers": args.workers,
        "cases": rows,
    }
    results_file.write(args.out, benchmark(f"workers-jobs{args.jobs}"), document)
    print(markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
