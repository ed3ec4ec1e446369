"""fieldmem vs the naive baseline on the bundled examples, measured in one run.

Each measurement is a fresh process (no warm caches), alternating the two
commands, repeated; the ratio of medians is what to read.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["examples/field.py", "examples/sparse_row.py", "examples/stencil_scan.py", "examples/optimizer.py"]
REPEAT = 5


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


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
    naive = [sys.executable, "benchmarks/naive_examples.py"]
    help_cmd = [sys.executable, "-m", "fieldmem", "--help"]
    runs: dict[str, list[float]] = {"naive": [], "fieldmem": [], "fieldmem --help": []}
    for _ in range(REPEAT):
        runs["naive"].append(timed(naive))
        runs["fieldmem"].append(timed(fieldmem))
        runs["fieldmem --help"].append(timed(help_cmd))
    med = {k: statistics.median(v) for k, v in runs.items()}
    lines = [
        f"# fieldmem vs naive baseline — bundled examples ({len(EXAMPLES)} files, 5 targets, 10 compiles)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}",
        f"- jax {jax.__version__}; {REPEAT} alternating runs, fresh process each",
        "",
        "| command | median wall (s) | runs (s) |",
        "|---|---:|---|",
    ]
    for name, values in runs.items():
        lines.append(f"| {name} | {med[name]:.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    lines += ["", f"**fieldmem / naive = {med['fieldmem'] / med['naive']:.2f}** (same run)", ""]
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
