"""fieldmem's own time, this checkout against another, alternating: ``fieldmem check --jobs 1 --no-cache`` of
the overhead section's two largest points (100 functions; 5,000 leaves), each run on a fresh module.

Own time: a run's wall seconds less the lower and compile seconds its JSON report gives (``import jax`` is in
both sides alike). Medians over ``--pairs`` alternating pairs; the paired differences say whether a change
moved it on a machine too loaded for absolute shares. Writes ``results/NAME.{json,md}``, naming the machine,
through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).

    python benchmarks/own_time_ab.py --against CHECKOUT [--pairs 3] [--name own-time-ab]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import machine  # noqa: E402
import results_file  # noqa: E402

from synth import write_module  # noqa: E402

POINTS = {
    "functions 100": dict(functions=100, chain=5, leaves=1, size=128),
    "leaves 5000": dict(functions=1, chain=1, leaves=5000, size=8),
}


def one(root: Path, module: Path, report: Path) -> dict[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
    command = [sys.executable, "-m", "fieldmem", "check", str(module), "--jobs", "1", "--no-cache"]
    start = time.perf_counter()
    subprocess.run([*command, "-f", "json", "-o", str(report)], env=env, cwd=root, capture_output=True, check=False)
    wall = time.perf_counter() - start
    variants = [v for r in json.loads(report.read_text())["results"] for v in r["variants"].values()]
    xla = sum(v["lower_seconds"] + v["compile_seconds"] for v in variants)
    return {"wall": round(wall, 2), "xla": round(xla, 2), "own": round(wall - xla, 2)}


def benchmark(name: str) -> results_file.Benchmark:
    """The result file ``name``: each point's median own time per checkout."""
    return results_file.Benchmark(
        name,
        lambda document: markdown(document),
        lambda document: {
            f"{point}, {checkout}: own time (s)": one["median_own_s"]
            for point, checkouts in document["points"].items()
            for checkout, one in checkouts.items()
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (before)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--name", default="own-time-ab")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    ns = parser.parse_args()
    trees = {f"before ({machine.commit(ns.against)})": ns.against.resolve(), f"after ({machine.commit(ROOT)})": ROOT}
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    points: dict[str, Any] = {}
    for name, params in POINTS.items():
        rows: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
        for n in range(ns.pairs):
            for label, root in trees.items():
                module = scratch / f"own_ab_{n}_{len(label)}_{name[0]}.py"
                write_module(module, salt=5000 + n * 13 + len(label), **params)
                rows[label].append(one(root, module, scratch / "own_ab_report.json"))
                print(name, label, rows[label][-1], flush=True)
        points[name] = {
            label: {"runs": runs, "median_own_s": statistics.median(r["own"] for r in runs)}
            for label, runs in rows.items()
        }
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.label(),
        "machine_figures": machine.describe(),
        "load_average": list(os.getloadavg()),
        "pairs": ns.pairs,
        "points": points,
    }
    results_file.write(ns.out, benchmark(ns.name), document)
    print(markdown(document))
    return 0


def markdown(document: dict[str, Any]) -> str:
    lines = [
        "# fieldmem's own time, two checkouts alternating (`--jobs 1 --no-cache`)",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; load average {document['load_average']}",
        f"- {document['pairs']} alternating pairs, a fresh module per run; own time: wall less the report's lower +"
        " compile seconds",
        "",
        "| point | checkout | own time per run (s) | median (s) |",
        "|---|---|---|---:|",
    ]
    for name, per in document["points"].items():
        for label, row in per.items():
            runs = ", ".join(f"{r['own']:.2f}" for r in row["runs"])
            lines.append(f"| {name} | {label} | {runs} | {row['median_own_s']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
