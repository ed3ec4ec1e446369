"""fieldmem vs the naive baseline on synthetic modules of growing size.

For each point of each dimension (functions per module, steps per update
chain, leaves per pytree, array size) one module is generated
(``synth.write_module``) and checked, in fresh processes, alternately by
``fieldmem check MODULE -f json`` and by ``naive.py MODULE`` (the same
compiles written by hand). Each process's wall time and peak RSS (from
``wait4``) are recorded; fieldmem's JSON also says how much of its time was
XLA lowering + compiling, so its own overhead is measured, not guessed.

Ratios are taken within one run, point by point: the machines are shared and
noisy, absolute seconds are not comparable across runs.

Every process (naive, fieldmem, the ``import jax`` floor) runs with
``JAX_PLATFORMS=cpu``: fieldmem sets it for itself, and a bare ``import jax``
with the accelerator plugins installed would otherwise start them and charge
the naive script (and the floor) for it. fieldmem runs with ``--jobs 1``: the
naive script compiles one variant after the other, and the overhead is only
honest when compiles do not overlap (with ``--jobs`` > 1 their seconds add
up to more than the wall time they take, and the overhead would come out too
small). ``bench_fast.py`` measures fieldmem's defaults against the naive script.

Usage: ``python benchmarks/bench_suite.py [--quick] [--out benchmarks/results]``
(``make bench-more`` runs it). Writes ``suite.json`` and ``suite.md`` from it (``suite-quick.*`` with
``--quick``) through ``runner.py`` (the run replaces the current one, which joins the JSON's
``history``; a run of one dimension, ``--only``, joins the history alone), and ``suite.svg`` (the plot
of the current run) under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner

from synth import write_module

ROOT = Path(__file__).resolve().parent.parent
BASE = dict(functions=1, chain=5, leaves=1, size=128)
DIMENSIONS: dict[str, list[int]] = {
    "functions": [1, 5, 20, 50, 100],
    "chain": [1, 10, 50, 200],
    "leaves": [1, 100, 1000, 5000],
    "size": [64, 512, 2048],
}
QUICK: dict[str, list[int]] = {"functions": [1, 5, 20], "chain": [1, 10, 50], "leaves": [1, 100], "size": [64, 512]}
# leaves are many small arrays: the cost under test is the pytree, not the data
OVERRIDES = {"leaves": dict(size=8, chain=1)}
CHEAP_SECONDS = 6.0  # points whose naive run is cheaper than this are repeated
REPEAT = 3


@dataclass
class Run:
    wall: float
    max_rss_mib: float
    compile_seconds: float | None = None  # fieldmem only: lower + compile over all variants


@dataclass
class Point:
    dimension: str
    value: int
    params: dict[str, int]
    naive: list[Run] = field(default_factory=list)
    fieldmem: list[Run] = field(default_factory=list)

    def median(self, who: str, attr: str = "wall") -> float:
        return statistics.median(getattr(r, attr) for r in getattr(self, who))

    @property
    def ratio(self) -> float:
        return self.median("fieldmem") / self.median("naive")

    def overhead(self, import_floor: float) -> float:
        """fieldmem's share of its own wall time that is neither XLA lowering/compiling nor
        starting Python with jax imported (``import_floor``, measured in the same run)."""
        return statistics.median(
            max(0.0, r.wall - import_floor - (r.compile_seconds or 0.0)) / r.wall for r in self.fieldmem
        )


# one environment for every timed process: the CPU backend only, as fieldmem sets for itself
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def measure(command: list[str], stdout_path: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh process (in :data:`ENV`)."""
    with open(stdout_path, "wb") if stdout_path else contextlib.nullcontext(subprocess.DEVNULL) as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.DEVNULL, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # fieldmem exits 1 when a check fails: still a complete run
        raise RuntimeError(f"{' '.join(command)} exited {code}")
    return wall, usage.ru_maxrss / 1024


def compile_seconds(report_path: Path) -> float:
    report = json.loads(report_path.read_text())
    total = 0.0
    for result in report["results"]:
        for variant in result.get("variants", {}).values():
            total += (variant.get("lower_seconds") or 0.0) + (variant.get("compile_seconds") or 0.0)
    return total


def run_point(point: Point, module: Path, work: Path) -> None:
    report = work / "report.json"
    # the cold cost: no compilation cache (bench_levers.py measures the cache)
    fieldmem_cmd = [
        sys.executable,
        "-m",
        "fieldmem",
        "check",
        str(module),
        "-f",
        "json",
        "-o",
        str(report),
        "--no-cache",
        "--jobs",
        "1",  # sequential compiles, as the naive script's: their seconds are the time they take
    ]
    naive_cmd = [sys.executable, str(ROOT / "benchmarks" / "naive.py"), str(module)]
    repeat = 1
    n = 0
    while n < repeat:
        wall, rss = measure(naive_cmd)
        point.naive.append(Run(wall, rss))
        wall, rss = measure(fieldmem_cmd)
        point.fieldmem.append(Run(wall, rss, compile_seconds(report)))
        n += 1
        if n == 1 and point.naive[0].wall < CHEAP_SECONDS:
            repeat = REPEAT


def svg_plot(points: list[Point]) -> str:
    """Small multiples, one per dimension: naive and fieldmem median wall time (log x)."""
    import math

    dims = list(dict.fromkeys(p.dimension for p in points))
    w, h, pad = 300, 210, 42
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(dims)}" height="{h + 30}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for k, dim in enumerate(dims):
        pts = [p for p in points if p.dimension == dim]
        x0 = k * w
        xs = [math.log10(max(p.value, 1)) for p in pts]
        ymax = max(max(p.median("naive"), p.median("fieldmem")) for p in pts) * 1.1
        xmin, xmax = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1

        def sx(v: float) -> float:
            return x0 + pad + (v - xmin) / (xmax - xmin) * (w - pad - 12)

        def sy(v: float) -> float:
            return 12 + (1 - v / ymax) * (h - pad)

        parts.append(f'<text x="{x0 + w / 2}" y="{h + 22}" text-anchor="middle">{dim} (log scale)</text>')
        parts.append(
            f'<line x1="{x0 + pad}" y1="{sy(0)}" x2="{x0 + w - 12}" y2="{sy(0)}" stroke="#888"/>'
            f'<line x1="{x0 + pad}" y1="12" x2="{x0 + pad}" y2="{sy(0)}" stroke="#888"/>'
        )
        for t in (0, ymax / 2 / 1.1, ymax / 1.1):
            parts.append(f'<text x="{x0 + pad - 4}" y="{sy(t) + 4}" text-anchor="end">{t:.1f}s</text>')
        for p, xv in zip(pts, xs):
            parts.append(f'<text x="{sx(xv)}" y="{sy(0) + 14}" text-anchor="middle">{p.value}</text>')
        for who, colour in (("naive", "#888888"), ("fieldmem", "#1f77b4")):
            line = " ".join(f"{sx(xv):.1f},{sy(p.median(who)):.1f}" for p, xv in zip(pts, xs))
            parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for p, xv in zip(pts, xs):
                parts.append(f'<circle cx="{sx(xv):.1f}" cy="{sy(p.median(who)):.1f}" r="3" fill="{colour}"/>')
        if k == 0:
            parts.append(
                f'<text x="{x0 + pad + 6}" y="24" fill="#1f77b4">fieldmem</text>'
                f'<text x="{x0 + pad + 6}" y="38" fill="#888888">naive</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts)


def markdown(points: list[Point], meta: dict[str, str], seconds: float, floor: float) -> str:
    lines = [
        "# fieldmem vs naive baseline — synthetic modules",
        "",
        f"- date: {meta['date']}; machine: {meta['machine']}; Python {meta['python']}; jax {meta['jax']}",
        f"- every point: fresh processes, naive and fieldmem alternating; points cheaper than "
        f"{CHEAP_SECONDS:.0f} s repeated {REPEAT}x (medians); whole suite {seconds / 60:.1f} min",
        f"- base module: {BASE['functions']} function, chain {BASE['chain']}, {BASE['leaves']} leaf, "
        f"f32[{BASE['size']},{BASE['size']}]; the leaves dimension uses f32[8,8] leaves and chain 1",
        *([f"- {meta['environment']}"] if "environment" in meta else []),  # recorded since the flags were set
        f"- overhead: share of fieldmem's wall time that is neither XLA lowering + compiling nor "
        f"starting Python and importing jax ({floor:.2f} s here, `python -c 'import jax'`, median of {REPEAT})",
        "",
        "| dimension | value | naive wall (s) | fieldmem wall (s) | fieldmem / naive | "
        "fieldmem overhead | naive RSS (MiB) | fieldmem RSS (MiB) | runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {p.dimension} | {p.value} | {p.median('naive'):.2f} | {p.median('fieldmem'):.2f} | "
            f"**{p.ratio:.2f}** | {p.overhead(floor):.0%} | {p.median('naive', 'max_rss_mib'):.0f} | "
            f"{p.median('fieldmem', 'max_rss_mib'):.0f} | {len(p.naive)} |"
        )
    lines.append("")
    return "\n".join(lines)


def points_of(document: dict[str, Any]) -> list[Point]:
    """The points of a ``suite.json`` document, as the run measured them."""
    return [
        Point(
            p["dimension"],
            p["value"],
            p["params"],
            [Run(**r) for r in p["naive"]],
            [Run(**r) for r in p["fieldmem"]],
        )
        for p in document["points"]
    ]


def document_markdown(document: dict[str, Any]) -> str:
    """``suite.md`` of a run, from its JSON document alone."""
    return markdown(points_of(document), document["meta"], document["seconds"], document["import_jax_seconds"])


def headline(document: dict[str, Any]) -> dict[str, Any]:
    """A run's headline figures: fieldmem / naive at each point."""
    return {f"{p.dimension} = {p.value}: fieldmem / naive": round(p.ratio, 3) for p in points_of(document)}


def benchmark(name: str = "suite") -> runner.Benchmark:
    """The result file ``name`` (``suite``, ``suite-quick``): a run of one dimension (``--only``) is partial."""
    return runner.Benchmark(
        name,
        document_markdown,
        headline,
        complete=lambda document: "only" not in document["meta"],
        partial=lambda document: f"{document['meta']['only']} alone",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller points (a smoke run)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--only", help="run one dimension")
    ns = parser.parse_args()

    import jax

    dims = QUICK if ns.quick else DIMENSIONS
    if ns.only:
        dims = {ns.only: dims[ns.only]}
    started = time.perf_counter()
    floor = statistics.median(measure([sys.executable, "-c", "import jax"])[0] for _ in range(REPEAT))
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="fieldmem-bench-") as tmp:
        work = Path(tmp)
        for dimension, values in dims.items():
            for value in values:
                params = {**BASE, **OVERRIDES.get(dimension, {}), dimension: value}
                module = write_module(work / f"synthetic_{dimension}_{value}.py", **params)
                point = Point(dimension, value, params)
                run_point(point, module, work)
                points.append(point)
                print(
                    f"{dimension}={value}: naive {point.median('naive'):.2f}s "
                    f"fieldmem {point.median('fieldmem'):.2f}s ratio {point.ratio:.2f} "
                    f"overhead {point.overhead(floor):.0%} rss {point.median('fieldmem', 'max_rss_mib'):.0f} MiB",
                    flush=True,
                )
    seconds = time.perf_counter() - started
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "environment": "every process with JAX_PLATFORMS=cpu; fieldmem with --no-cache --jobs 1",
    }
    if ns.only:
        meta["only"] = ns.only
    suffix = "-quick" if ns.quick else ""
    document = {"meta": meta, "seconds": seconds, "import_jax_seconds": floor, "points": [asdict(p) for p in points]}
    written = runner.write(ns.out, benchmark(f"suite{suffix}"), document)
    if runner.current(written)["meta"] == meta:  # a run of one dimension beside a whole one: history alone
        (ns.out / f"suite{suffix}.svg").write_text(svg_plot(points))
    print(markdown(points, meta, seconds, floor))


if __name__ == "__main__":
    main()
