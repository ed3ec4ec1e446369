"""Issue 47 study: fieldmem's own time per check, two commits alternating in one run (this 2-core machine).

Each point (a synth.py module: leaves or functions, as bench_fast's overhead section writes them) is checked
with ``fieldmem check MODULE -f json -o REPORT --jobs 1 --no-cache`` by each commit's tree (a git worktree,
first on PYTHONPATH), alternating, the before commit first, each a fresh process after a floor run
(``python -c 'import jax'``); own time = wall - floor - the report's lower and compile seconds, as
bench_fast's share. Usage: ``ab.py BEFORE_TREE AFTER_TREE OUT.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synth import write_module

POINTS = [("leaves", 5000, 3), ("functions", 100, 3), ("functions", 1, 5)]
PARAMS = {"leaves": dict(functions=1, chain=1, size=8), "functions": dict(leaves=1, chain=5, size=128)}


def xla_seconds(report: Path) -> float:
    data = json.loads(report.read_text())
    return sum(v["lower_seconds"] + v["compile_seconds"] for r in data["results"] for v in r["variants"].values())


def main() -> None:
    before, after, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    work = out.parent / "own-time-work"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"before": before, "after": after}
    points = []
    for dimension, value, pairs in POINTS:
        module = work / f"{dimension}_{value}.py"
        write_module(module, salt=value, **{**PARAMS[dimension], dimension: value})
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(pairs):
            for name, tree in trees.items():
                run_env = dict(env, PYTHONPATH=str(tree))
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import jax"], env=run_env, check=True, capture_output=True)
                floor = time.perf_counter() - start
                report = work / f"report-{name}.json"
                command = [sys.executable, "-m", "fieldmem", "check", str(module), "-f", "json", "-o", str(report)]
                start = time.perf_counter()
                subprocess.run([*command, "--jobs", "1", "--no-cache"], cwd=tree, env=run_env, capture_output=True)
                wall = time.perf_counter() - start
                xla = xla_seconds(report)
                runs[name].append({"wall_s": wall, "floor_s": floor, "xla_s": xla, "own_s": wall - floor - xla})
                print(f"{dimension}={value} {name}: wall {wall:.2f} floor {floor:.2f} xla {xla:.2f}", flush=True)
        medians = {
            name: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("wall_s", "floor_s", "xla_s", "own_s")}
            for name, rs in runs.items()
        }
        for name in medians:
            medians[name]["share"] = round(medians[name]["own_s"] / medians[name]["wall_s"], 4)
        points.append({"dimension": dimension, "value": value, "pairs": pairs, "runs": runs, "medians": medians})
    document = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"x86_64, {os.cpu_count()} cores",
            "load_average_end": list(os.getloadavg()),
            "before": sys.argv[4] if len(sys.argv) > 4 else str(before),
            "after": sys.argv[5] if len(sys.argv) > 5 else str(after),
        },
        "points": points,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
