"""How fieldmem's own time grows with the program: a transformer train step of 2 to 128 layers.

For each backend (``cpu``, and ``tpu:v5e`` compiled without the device), each
layout (the layers unrolled by a Python loop, or one ``lax.scan`` over stacked
weights) and each depth (``heavy.write_module``: 2, 8, 16 and 32 layers unrolled,
2, 8, 32 and 128 scanned), this

1. counts the HLO instructions of the compiled plain variant (every
   instruction of every computation of ``as_text()``, fusions' insides included:
   what fieldmem parses), compiled here in a subprocess as fieldmem compiles it;
2. times ``fieldmem check MODULE -j 1 --no-cache -f json`` in a fresh process
   (``--jobs 1``: the two compiles one after the other, so that XLA's time is the
   sum the report gives), ``RUNS`` times alternating with the other points;
3. takes **fieldmem's own time**: the wall time less each variant's lowering
   and compile seconds (from the report) less ``python -c "import jax"`` (the
   floor every jax program pays, measured in the same run, alternating too).

It fits own time against instructions (least squares) and reports, per point,
own time per instruction and the marginal cost between two depths: linear growth
is a flat marginal cost. Medians over the runs. Writes ``results/scaling.{json,md}``
through ``runner.py`` (the run replaces the current one, which joins the JSON's ``history``).

Unrolled, XLA's own program grows faster than the layers (``results/scaling.md``
gives the instruction counts), and XLA:CPU could not compile 128 unrolled layers
in the memory a benchmark should take (``benchmarks/README.md``): the unrolled
sweep ends at 32 layers, the scanned one at 128.

Usage: ``python benchmarks/scaling.py [--layers 2 8 16 32] [--scanned-layers 2 8 32 128] [--runs 3]
[--backends cpu tpu:v5e] [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner
from heavy import write_module

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# compiles the plain variant of MODULE as fieldmem does (XLA:CPU at backend optimisation level 0; a TPU's
# chip from its topology, the arguments placed on it) and prints its instruction count
COUNT = r"""
import importlib.util, re, sys
backend = sys.argv[2]
import jax
spec = importlib.util.spec_from_file_location("counted", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
function, make_args, _ = module.CASES[0]
args = make_args()
options = {"xla_backend_optimization_level": 0}
if backend != "cpu":
    from jax.experimental import topologies
    chip = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0]
    place = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=jax.sharding.SingleDeviceSharding(chip))
    args = jax.tree_util.tree_map(place, args)
    options = {}
text = jax.jit(function).trace(*args).lower().compile(options).as_text()
print(sum(1 for line in text.splitlines() if re.match(r"\s+(ROOT )?%?[\w.\-]+ = ", line)))
"""


def environment(backend: str) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # no accelerator plugin starts, as in a deviceless check
    if backend != "cpu":
        env.update(TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    return env


def count_instructions(module: Path, backend: str) -> int:
    done = subprocess.run(
        [PYTHON, "-c", COUNT, str(module), backend],
        env=environment(backend),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a verdict the gate fails (none here), 2: an error
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def xla_seconds(report: Path) -> float:
    document = json.loads(report.read_text())
    total = 0.0
    for result in document["results"]:
        if result["status"] != "ok":
            raise SystemExit(f"{report}: {result['name']} did not check: {result.get('error')}")
        for variant in result["variants"].values():
            total += float(variant["lower_seconds"]) + float(variant["compile_seconds"])
    return total


def sweep(
    layers: list[int], scanned_layers: list[int], runs: int, backends: list[str], layouts: list[str], work: Path
) -> dict[str, Any]:
    """Measure every point (its modules written under ``work``) and return the results document."""
    points: list[dict[str, Any]] = []
    salt = int(time.time()) % 100000 * 10  # fresh programs: no compilation cache serves one run from another
    for backend in backends:
        for layout in layouts:
            for depth in scanned_layers if layout == "scanned" else layers:
                point: dict[str, Any] = {"backend": backend, "layout": layout, "layers": depth, "modules": []}
                for run in range(runs):
                    salt += 1
                    name = f"step_{layout}_{depth}_{re.sub(r'[^a-z0-9]', '_', backend)}_{run}"
                    point["modules"].append(
                        write_module(work / f"{name}.py", salt=salt, layers=depth, scan=layout == "scanned")
                    )
                point["instructions"] = count_instructions(point["modules"][0], backend)
                print(f"{backend} {layout} {depth}: {point['instructions']} instructions", flush=True)
                points.append(point)
    floors: list[float] = []
    for point in points:
        point["wall_s"], point["xla_s"], point["own_s"] = [], [], []
    for run in range(runs):  # alternating: every point once, then again, with the floor between
        for point in points:
            backend = point["backend"]
            floors.append(timed([PYTHON, "-c", "import jax"], environment("cpu")))
            module, report = point["modules"][run], work / f"report-{run}.json"
            command = [PYTHON, "-m", "fieldmem", "check", str(module), "-j", "1", "--no-cache", "-f", "json"]
            command += ["-o", str(report), *(["--backend", backend] if backend != "cpu" else [])]
            wall = timed(command, environment(backend))
            xla = xla_seconds(report)
            point["wall_s"].append(wall)
            point["xla_s"].append(xla)
            print(
                f"run {run}: {backend} {point['layout']} {point['layers']}: wall {wall:.2f} s, XLA {xla:.2f} s",
                flush=True,
            )
    floor = statistics.median(floors)
    rows = []
    for point in points:
        own = [w - x - floor for w, x in zip(point["wall_s"], point["xla_s"])]
        rows.append(
            {
                "backend": point["backend"],
                "layout": point["layout"],
                "layers": point["layers"],
                "instructions": point["instructions"],
                "wall_s": round(statistics.median(point["wall_s"]), 3),
                "xla_s": round(statistics.median(point["xla_s"]), 3),
                "own_s": round(statistics.median(own), 3),
                "own_us_per_instruction": round(statistics.median(own) / point["instructions"] * 1e6, 2),
            }
        )
    fits = fit(rows)
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cores": os.cpu_count()},
        "runs": runs,
        "import_jax_s": round(floor, 3),
        "rows": rows,
        "fits": fits,
    }
    return document


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per series (backend, layout): the marginal cost between two depths (set on each row), a least-squares
    line of own time against instructions, and own time per instruction at the deepest point over 8 layers'."""
    fits = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        for layout in dict.fromkeys(r["layout"] for r in rows):
            series = [r for r in rows if r["backend"] == backend and r["layout"] == layout]
            for before, after in itertools.pairwise(series):
                grown = after["instructions"] - before["instructions"]
                after["marginal_us_per_instruction"] = (
                    round((after["own_s"] - before["own_s"]) / grown * 1e6, 2) if grown > 0 else None
                )
            xs, ys = [r["instructions"] for r in series], [r["own_s"] for r in series]
            if len(set(xs)) > 1:
                slope, intercept = statistics.linear_regression(xs, ys)
                at_8 = next((r for r in series if r["layers"] == 8), None)
                fits[f"{backend} {layout}"] = {
                    "us_per_instruction": round(slope * 1e6, 2),
                    "intercept_s": round(intercept, 3),
                    # issue 32's test of linear growth: own time per instruction at the deepest point over 8 layers'
                    "deepest_over_8": round(series[-1]["own_us_per_instruction"] / at_8["own_us_per_instruction"], 2)
                    if at_8 and at_8["own_us_per_instruction"] > 0
                    else None,
                }
    return fits


def markdown(document: dict[str, Any], title: bool = True) -> str:
    """``results/scaling.md``, from the document :func:`sweep` returns (without ``title``: its heading)."""
    lines = [
        *(
            [f"# fieldmem's own time against the program's size ({document['date']}, median of {document['runs']})", ""]
            if title
            else []
        ),
        f"`import jax` floor: {document['import_jax_s']:.2f} s, subtracted. Own = wall − XLA (lowering + compiles) − floor.",
        "",
        "| backend | layout | layers | instructions | wall (s) | XLA (s) | own (s) | own µs/instr | marginal µs/instr |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in document["rows"]:
        marginal = r.get("marginal_us_per_instruction")
        lines.append(
            f"| {r['backend']} | {r['layout']} | {r['layers']} | {r['instructions']} | {r['wall_s']:.2f} "
            f"| {r['xla_s']:.2f} | {r['own_s']:.2f} | {r['own_us_per_instruction']:.1f} "
            f"| {'' if marginal is None else f'{marginal:.1f}'} |"
        )
    lines += [
        "",
        "| series | fitted µs per instruction | intercept (s) | own µs/instr, deepest / 8 layers |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {k} | {v['us_per_instruction']:.1f} | {v['intercept_s']:.2f} | {v.get('deepest_over_8')} |"
        for k, v in document["fits"].items()
    ]
    return "\n".join(lines) + "\n"


def write(document: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    runner.write(out, BENCHMARK, document)


BENCHMARK = runner.Benchmark(
    "scaling",
    lambda document: markdown(document),
    lambda document: {f"{name}: deepest / 8 layers": fit["deepest_over_8"] for name, fit in document["fits"].items()},
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 16, 32], help="unrolled depths")
    parser.add_argument("--scanned-layers", type=int, nargs="+", default=[2, 8, 32, 128], help="scanned depths")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["cpu", "tpu:v5e"])
    parser.add_argument("--layouts", nargs="+", default=["unrolled", "scanned"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, help="fit the rows of this results JSON again and write its .md")
    ns = parser.parse_args()
    if ns.render:
        document = json.loads(ns.render.read_text())
        document["fits"] = fit(document["rows"])  # the same run fitted again: not a new run, its history kept
        runner.write_atomically(ns.render, json.dumps(document, indent=1) + "\n")
        runner.render(ns.render, BENCHMARK)
        return 0
    with tempfile.TemporaryDirectory(prefix="fieldmem-scaling-") as tmp:
        document = sweep(ns.layers, ns.scanned_layers, ns.runs, ns.backends, ns.layouts, Path(tmp))
    write(document, ns.out)
    print(markdown(document), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
