"""fieldmem's speed levers against the naive baseline on one module, in one run.

- ``--jobs N``: the two variants of a target compile concurrently and, with
  N > 1, the compiles of up to N targets overlap while the next target is
  lowered (lowering stays on one thread). Whether that pays depends on the
  cores to spare: XLA:CPU already compiles on several threads.
- ``--fast-compile``: XLA:CPU code generation at -O0 (same findings).
- the persistent compilation cache: ``cache fill`` starts from an empty
  cache folder, ``cache warm`` reruns on the folder it filled (an unchanged
  module, the CI case); ``cache warm + fast`` the same with ``--fast-compile``.

A synthetic module of ``--functions`` update functions (default 20, the
issue's reference module) is checked in fresh processes, in rounds that
alternate the naive baseline and each fieldmem setting; medians and ratios to
the naive baseline's median are taken within this one run.

Usage: ``python benchmarks/bench_levers.py [--functions 20] [--repeat 3] [--out benchmarks/results]``.
Writes ``levers.json`` and ``levers.md`` from it, through ``runner.py`` (the run replaces the
current one, which joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner

from bench_suite import measure
from synth import write_module

ROOT = Path(__file__).resolve().parent.parent
JOBS = (1, 2, 4)


def markdown(document: dict[str, Any]) -> str:
    """``levers.md`` of a run, from its JSON document alone."""
    meta, walls, medians = document["meta"], document["walls"], document["medians"]
    rows = [
        f"| {name} | {medians[name]:.2f} | {medians[name] / medians['naive']:.2f} | "
        + ", ".join(f"{w:.2f}" for w in walls[name])
        + " |"
        for name in walls
    ]
    return "\n".join(
        [
            "# Speed levers against the naive baseline",
            "",
            " · ".join(f"{k}: {v}" for k, v in meta.items()),
            "",
            "| run | median wall s | / naive | all runs s |",
            "|---|---:|---:|---|",
            *rows,
            "",
        ]
    )


BENCHMARK = runner.Benchmark(
    "levers",
    markdown,
    lambda document: {
        f"{name}: / naive": round(median / document["medians"]["naive"], 3)
        for name, median in document["medians"].items()
        if name != "naive"
    },
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=20)
    parser.add_argument("--chain", type=int, default=5)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    options = parser.parse_args()
    import jax

    settings = {f"jobs {j}, no cache": ["--jobs", str(j), "--no-cache"] for j in JOBS}
    settings["--fast-compile, no cache"] = ["--jobs", "1", "--fast-compile", "--no-cache"]
    walls: dict[str, list[float]] = {
        "naive": [],
        **{name: [] for name in settings},
        "cache fill": [],
        "cache warm": [],
        "cache warm + fast": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        module = write_module(
            Path(tmp) / "bench_levers_module.py", functions=options.functions, chain=options.chain, size=options.size
        )
        naive = [sys.executable, str(ROOT / "benchmarks" / "naive.py"), str(module)]
        check = [sys.executable, "-m", "fieldmem", "check", str(module), "-f", "json"]
        report = Path(tmp) / "report.json"
        for round_ in range(options.repeat):
            walls["naive"].append(measure(naive)[0])
            for name, flags in settings.items():
                walls[name].append(measure(check + flags, report)[0])
            cache = Path(tmp) / f"cache-{round_}"
            walls["cache fill"].append(measure(check + ["--cache-dir", str(cache)], report)[0])
            walls["cache warm"].append(measure(check + ["--cache-dir", str(cache)], report)[0])
            # fast compiles are cached under their own key: fill, then measure the warm rerun
            fast_cache = Path(tmp) / f"fast-cache-{round_}"
            measure(check + ["--fast-compile", "--cache-dir", str(fast_cache)], report)
            walls["cache warm + fast"].append(
                measure(check + ["--fast-compile", "--cache-dir", str(fast_cache)], report)[0]
            )
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in walls.items()), file=sys.stderr)
    medians = {k: statistics.median(v) for k, v in walls.items()}
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "module": f"{options.functions} functions, chain {options.chain}, size {options.size}",
        "repeat": str(options.repeat),
    }
    document = {"meta": meta, "walls": walls, "medians": medians}
    runner.write(options.out, BENCHMARK, document)
    text = markdown(document)
    print(text)


if __name__ == "__main__":
    main()
