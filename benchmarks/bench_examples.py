"""fieldmem vs the naive baseline on the bundled examples, measured in one run.

Each measurement is a fresh process (no warm caches), alternating the two
commands, repeated; the ratio of medians is what to read. Writes ``results/examples.json`` and
``examples.md`` from it, through ``runner.py`` (the run replaces the current one, which joins the
JSON's ``history``).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import runner  # noqa: E402

EXAMPLES = ["examples/field.py", "examples/sparse_row.py", "examples/stencil_scan.py", "examples/optimizer.py"]
REPEAT = 5


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def markdown(document: dict[str, Any]) -> str:
    """``examples.md`` of a run, from its JSON document alone."""
    meta, runs, med = document["meta"], document["runs"], document["medians"]
    lines = [
        f"# fieldmem vs naive baseline — bundled examples ({len(meta['examples'])} files, 5 targets, 10 compiles)",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- jax {meta['jax']}; {meta['repeat']} alternating runs, fresh process each",
        "",
        "| command | median wall (s) | runs (s) |",
        "|---|---:|---|",
    ]
    for name, values in runs.items():
        lines.append(f"| {name} | {med[name]:.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    lines += ["", f"**fieldmem / naive = {med['fieldmem'] / med['naive']:.2f}** (same run)", ""]
    return "\n".join(lines)


BENCHMARK = runner.Benchmark(
    "examples",
    markdown,
    lambda document: {
        "fieldmem / naive": round(document["medians"]["fieldmem"] / document["medians"]["naive"], 3),
        "fieldmem --help (s)": document["medians"]["fieldmem --help"],
    },
)


def main() -> None:
    import jax

    fieldmem = [
        sys.executable,
        "-m",
        "fieldmem",
        "check",
        *EXAMPLES,
        "-f",
        "json",
        "-o",
        "/dev/null",
        "-j",
        "1",
        "--no-cache",
    ]
    naive = [sys.executable, "benchmarks/naive.py", "--examples"]
    help_cmd = [sys.executable, "-m", "fieldmem", "--help"]
    runs: dict[str, list[float]] = {"naive": [], "fieldmem": [], "fieldmem --help": []}
    for _ in range(REPEAT):
        runs["naive"].append(timed(naive))
        runs["fieldmem"].append(timed(fieldmem))
        runs["fieldmem --help"].append(timed(help_cmd))
    document = {
        "meta": {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "jax": jax.__version__,
            "repeat": REPEAT,
            "examples": EXAMPLES,
        },
        "runs": runs,
        "medians": {k: statistics.median(v) for k, v in runs.items()},
    }
    runner.write(ROOT / "benchmarks" / "results", BENCHMARK, document)
    print(markdown(document))


if __name__ == "__main__":
    main()
