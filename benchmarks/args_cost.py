"""What making the bundled examples' arguments costs: run (as the naive script and fieldmem do) or traced.

Each in a fresh process with ``JAX_PLATFORMS=cpu``: ``import jax``, then one
example's args factory, either called (its arrays made eagerly on the CPU:
every jax operation in it compiles a small program first) or traced with
``jax.make_jaxpr`` (its arrays as abstract values, nothing compiled or run).
Medians of ``--runs`` alternating rounds.

Usage: ``python benchmarks/args_cost.py [--runs 3] [--out benchmarks/results]``;
writes ``args-cost.{json,md}`` through ``results_file.py`` (the run replaces the current one, which
joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

FACTORIES = [
    ("optimizer", "step_args"),
    ("field", "update_args"),
    ("sparse_row", "set_row_args"),
    ("sparse_row", "write_kv_args"),
    ("stencil_scan", "diffuse_args"),
]

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import jax
imported = time.perf_counter() - start
sys.path.insert(0, sys.argv[3])
import importlib
factory = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
start = time.perf_counter()
if sys.argv[4] == "run":
    jax.block_until_ready(factory())
else:
    jax.make_jaxpr(factory, return_shape=True)()
print(json.dumps({"import_jax_s": imported, "seconds": time.perf_counter() - start}))
"""


def once(module: str, factory: str, how: str) -> dict[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, module, factory, str(ROOT / "examples"), how],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(document: dict[str, Any]) -> str:
    """``args-cost.md`` of a run, from its JSON document alone."""
    lines = [
        "# Making the bundled examples' arguments: run or traced",
        "",
        f"- date: {document['meta']['date']}; machine: {document['meta']['machine']}; jax {document['meta']['jax']}; "
        f"commit {document['meta']['commit']}",
        f"- written by `benchmarks/args_cost.py`: each a fresh process with JAX_PLATFORMS=cpu, medians of "
        f"{document['meta']['runs']} alternating rounds; `import jax` took {document['import_jax_s']:.2f} s (median of all)",
        "",
        "| args factory | run (s) | traced (s) |",
        "|---|---:|---:|",
        *(f"| `{r['factory']}` | {r['run_s']:.3f} | {r['traced_s']:.4f} |" for r in document["factories"]),
        f"| all five | {document['run_total_s']:.3f} | {document['traced_total_s']:.4f} |",
        "",
    ]
    return "\n".join(lines)


BENCHMARK = results_file.Benchmark(
    "args-cost",
    markdown,
    lambda document: {
        "import jax (s)": document["import_jax_s"],
        "factories run (s)": document["run_total_s"],
        "factories traced (s)": document["traced_total_s"],
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    import jax

    rows = []
    imports: list[float] = []
    for module, factory in FACTORIES:
        seconds: dict[str, list[float]] = {"run": [], "traced": []}
        for _ in range(args.runs):
            for how in ("run", "traced"):
                reading = once(module, factory, how)
                seconds[how].append(reading["seconds"])
                imports.append(reading["import_jax_s"])
        row = {
            "factory": f"{module}.{factory}",
            "run_s": round(statistics.median(seconds["run"]), 4),
            "traced_s": round(statistics.median(seconds["traced"]), 4),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    document = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "jax": jax.__version__,
            "commit": commit.stdout.strip(),
            "runs": args.runs,
        },
        "import_jax_s": round(statistics.median(imports), 3),
        "factories": rows,
        "run_total_s": round(sum(r["run_s"] for r in rows), 3),
        "traced_total_s": round(sum(r["traced_s"] for r in rows), 4),
    }
    results_file.write(args.out, BENCHMARK, document)
    print(f"wrote {args.out / 'args-cost.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
