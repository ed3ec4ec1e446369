"""What checking in a supervised worker costs: ``fieldmem check`` against ``--no-isolate``, the old in-process path.

Since issue 19, ``fieldmem check`` loads, checks and runs the targets in one
worker process (``fieldmem/parent/isolate.py``); ``--no-isolate`` is the path
every run took before: everything in the CLI's own process. This script times
both, as a user runs them (a fresh ``python -m fieldmem`` each time, the
compilation cache off, output to a file), on one example and on several,
alternating the two so that load on the machine falls on both alike, and
writes the medians to ``results/isolation.json``.

    python benchmarks/bench_isolation.py [--repeat 5]
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "isolation.json"

CASES: dict[str, list[str]] = {
    "one": ["examples/field.py"],
    "several": ["examples/field.py", "examples/optimizer.py", "examples/sparse_row.py", "examples/advisor.py"],
}
MODES: dict[str, list[str]] = {"worker": [], "in-process": ["--no-isolate"]}


def _time(targets: list[str], extra: list[str], out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *targets, *extra, "--no-cache", "-f", "json", "-o", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"fieldmem check {' '.join(targets)} {' '.join(extra)} exited {done.returncode}: {done.stderr}"
        )
    return seconds


BENCHMARK = results_file.Benchmark(
    "isolation",
    results_file.headline_markdown("Checks in a supervised worker against in-process (--no-isolate)", "note"),
    lambda result: {f"{case}: worker overhead (%)": c["overhead_percent"] for case, c in result["cases"].items()},
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {case: {mode: [] for mode in MODES} for case in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        for case, targets in CASES.items():
            _time(targets, [], out)  # warm the file system caches once, not counted
            for n in range(args.repeat):
                order = list(MODES) if n % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    times[case][mode].append(_time(targets, MODES[mode], out))
                    print(f"{case} {mode} {times[case][mode][-1]:.2f} s", file=sys.stderr, flush=True)
    cases = {}
    for case, by_mode in times.items():
        median = {mode: round(statistics.median(values), 3) for mode, values in by_mode.items()}
        cases[case] = {
            "targets": CASES[case],
            "median_seconds": median,
            "overhead_seconds": round(median["worker"] - median["in-process"], 3),
            "overhead_percent": round(100 * (median["worker"] / median["in-process"] - 1), 1),
            "seconds": {mode: [round(v, 3) for v in values] for mode, values in by_mode.items()},
        }
    result = {
        "date": datetime.date.today().isoformat(),
        "script": "benchmarks/bench_isolation.py",
        "repeat": args.repeat,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "note": "worker: fieldmem check (targets in a supervised worker); in-process: --no-isolate, the path "
        "every check took before; a fresh process per run, --no-cache, runs alternated, medians",
        "cases": cases,
    }
    results_file.write(RESULTS.parent, BENCHMARK, result)
    print(json.dumps({case: c["median_seconds"] | {"overhead": c["overhead_seconds"]} for case, c in cases.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
