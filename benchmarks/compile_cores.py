"""How many cores one XLA compile keeps busy, over its course: why a target's two variants compile at once.

fieldmem compiles a target's two variants at once (``--jobs`` > 1): where one
compile leaves a core idle, the other fills it. Where one compile alone keeps
every core busy, compiling two at once saves no time and holds both compiles'
memory at the same moment (the pod example's peak RSS, ``bench_fast.py``'s
``pod`` section). This script measures which case a program is, per compile:
``fieldmem check --no-isolate -j 1`` in this process (one compile at a time,
nothing else running beside it), with ``compile_lowered`` wrapped so that a
thread samples the process's CPU time every ``--every`` seconds while it runs.

Per compile it records the wall seconds, the mean cores busy (process CPU
seconds over wall seconds), the cores busy in each sample, and the seconds
until a sample first shows every core busy (the compile's one-threaded lead:
its HLO passes, before the parallel code generation). A rule that decides at
the second compile's start (a fraction of a second after the first's) sees
only that lead.

Cases: ``heavy``, the compile-heavy transformer step (``heavy.py``, 12
blocks) on this machine's CPU; ``pod``, the pod example on ``tpu:v5e:16x16``;
``examples``, the bundled examples for ``gpu:h100``.

Usage: ``python benchmarks/compile_cores.py [--cases heavy pod examples] [--every 0.5]
[--out benchmarks/results]``; writes ``compile-cores.{json,md}``
through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import results_file  # noqa: E402

CASES = {
    "heavy": ["{heavy}"],
    "pod": ["examples/pod/train_step.py", "--backend", "tpu:v5e:16x16"],
    "examples": ["examples/field.py", "examples/optimizer.py", "--backend", "gpu:h100"],
}

# run in a fresh process per case: compile_lowered wrapped, fieldmem's CLI called in process
PROBE = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import fieldmem.driver.lowering as lowering

EVERY = float(sys.argv[2])
compiles = []
original = lowering.compile_lowered

def timed(lowered, fast=False, found=None):
    wall0, cpu0 = time.perf_counter(), time.process_time()
    samples, stop = [], threading.Event()

    def sample():
        last_wall, last_cpu = wall0, cpu0
        while not stop.wait(EVERY):
            wall, cpu = time.perf_counter(), time.process_time()
            samples.append([round(wall - wall0, 2), round((cpu - last_cpu) / (wall - last_wall), 2)])
            last_wall, last_cpu = wall, cpu

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        return original(lowered, fast, found)
    finally:
        stop.set()
        thread.join()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        compiles.append({"wall_s": round(wall, 2), "mean_cores": round(cpu / wall, 2), "samples": samples})

lowering.compile_lowered = timed
from typer.testing import CliRunner
from fieldmem.frontends.cli import app

out = sys.argv[3]
result = CliRunner().invoke(app, ["check", *sys.argv[4:], "--no-isolate", "-j", "1", "--no-cache", "-f", "json", "-o", out])
report = json.loads(open(out).read())
variants = [v for r in report["results"] if r["status"] == "ok" for v in (r["variants"]["plain"], r["variants"]["donated"])]
print(json.dumps({"exit_code": result.exit_code, "compiles": compiles, "reported_compile_s": [v["compile_seconds"] for v in variants]}))
"""


def lead_seconds(samples: list[list[float]], cores: int) -> float | None:
    """Seconds until a sample first shows every core busy (within half a core); None: never."""
    for at, busy in samples:
        if busy >= cores - 0.5:
            return at
    return None


def run_probe(
    probe: str, case: str, template: list[str], scratch: Path, *head: str
) -> tuple[list[str], dict[str, Any]]:
    """Run ``probe`` (a script that checks through fieldmem's CLI in its own process and prints one JSON line
    last) on a case's ``template`` arguments (``{heavy}``: a fresh compile-heavy module): ``python -c probe
    ROOT *head OUT *arguments``, with ``JAX_PLATFORMS=cpu`` and no ``XLA_FLAGS``. Returns the arguments and the
    JSON; compile_stages.py shares it."""
    import heavy

    arguments = [a.format(heavy=heavy.write_module(scratch / "heavy_module.py", salt=11)) for a in template]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT), *head, str(scratch / f"{case}.json"), *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{case}: the probe failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}")
    return arguments, json.loads(done.stdout.strip().splitlines()[-1])


def run_case(case: str, every: float, scratch: Path) -> dict[str, Any]:
    arguments, found = run_probe(PROBE, case, CASES[case], scratch, str(every))
    cores = os.cpu_count() or 1
    for compile_ in found["compiles"]:
        compile_["lead_s"] = lead_seconds(compile_["samples"], cores)
        busy = [s for s in compile_["samples"] if s[1] >= cores - 0.5]
        compile_["all_cores_share"] = round(len(busy) / len(compile_["samples"]), 2) if compile_["samples"] else None
    return {"case": case, "arguments": arguments, **found}


def markdown(document: dict[str, Any]) -> str:
    lines = [
        "# How many cores one XLA compile keeps busy",
        "",
        f"- date: {document['date']}; machine: {document['machine']}, {document['cores']} cores; jax {document['jax']}",
        f"- each compile alone (`--no-isolate -j 1`), process CPU sampled every {document['every']} s",
        "",
        "| case | compile | wall (s) | mean cores busy | one-threaded lead (s) | samples with every core busy |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["cases"]:
        for n, c in enumerate(row["compiles"]):
            lead = "never" if c["lead_s"] is None else f"{c['lead_s']:.1f}"
            share = "—" if c["all_cores_share"] is None else f"{c['all_cores_share']:.0%}"
            lines.append(f"| {row['case']} | {n + 1} | {c['wall_s']:.2f} | {c['mean_cores']:.2f} | {lead} | {share} |")
    lines += [
        "",
        "Mean cores busy: process CPU seconds over wall seconds. One-threaded lead: the seconds until a sample",
        "first shows every core busy (within half a core); a compile shorter than one sample has none.",
    ]
    return "\n".join(lines) + "\n"


BENCHMARK = results_file.Benchmark(
    "compile-cores",
    lambda document: markdown(document),
    lambda document: {
        f"{case['case']}, compile {n + 1}: mean cores busy": one["mean_cores"]
        for case in document["cases"]
        for n, one in enumerate(case["compiles"])
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    import jax

    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {platform.system()}",
        "cores": os.cpu_count(),
        "jax": jax.__version__,
        "every": options.every,
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        for case in options.cases:
            print(f"compile_cores: {case}", flush=True)
            document["cases"].append(run_case(case, options.every, Path(folder)))
    options.out.mkdir(parents=True, exist_ok=True)
    results_file.write(options.out, BENCHMARK, document)
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
