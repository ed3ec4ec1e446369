"""Issue 47 item 3: a static check whose XLA:CPU compiles stop once what fieldmem reads is dumped.

Three tools on the same modules, in fresh processes, rotating their order each round: the naive script
(``naive.py``: two compiles per function, one after the other), ``fieldmem check`` with its defaults
and ``--no-cache`` with ``FIELDMEM_EARLY_STOP=1`` (its compiles stopped early, :mod:`fieldmem.driver.early`; with the persistent cache on,
every compile runs to its end so that a rerun loads it), and the same with ``FIELDMEM_EARLY_STOP=0`` (every
compile awaited to its end, as before). Each process gets a module with fresh constants (a new salt), so no
cache would help.

Cases: ``heavy``, the compile-heavy transformer step (``heavy.py``, 12 blocks: 2 compiles); ``cold``, the
20-function ``synth.py`` module (chain 5, f32[128,128]: 40 small compiles). Wall time and the peak resident
memory of the largest process of each run (``wait4``'s ``ru_maxrss``: the worker's, for fieldmem), median
of the rounds, and the ratios to the naive script from the same rounds; the load average is recorded.

With ``--exactness`` (default on), first: for every compile a check of the bundled examples makes on
``cpu`` and on ``gpu:h100`` (compiled without the device), XLA's dump against the finished compile: whether
every ``memory_analysis()`` size but the peak is XLA's rule over the dumped allocations, whether the peak is
XLA:CPU's (every allocation but temporaries), and whether the executable's text is the dumped text with each
``backend_config`` printed with sorted keys (:mod:`fieldmem.driver.dumped`). This is why only XLA:CPU stops
early.

Usage: ``python benchmarks/bench_early.py [--rounds 3] [--cases heavy cold] [--no-exactness]
[--out benchmarks/results]``; writes ``early-stop.json`` and ``early-stop.md``.
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
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import heavy  # noqa: E402

from synth import write_module  # noqa: E402

TOOLS = ("naive", "early", "full")
EXACTNESS_ARGS = {
    "cpu": ["examples/*.py"],
    "gpu:h100": [
        "examples/field.py",
        "examples/optimizer.py",
        "examples/train_step.py",
        "examples/stencil_scan.py",
        "examples/sparse_row.py",
        "examples/forward.py",
        "examples/interior.py",
        "examples/precision_chain.py",
        "examples/advisor.py",
    ],
}

# run in a fresh process per backend: every compile goes through XLA's dump (text as well), and what the dump
# gives is held against the finished executable
PROBE = r"""
import glob, json, os, sys
sys.path.insert(0, sys.argv[1])
from fieldmem.driver import dumped, dumps

SIZES = {"argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
         "host_argument_size_in_bytes", "host_output_size_in_bytes", "host_alias_size_in_bytes",
         "host_temp_size_in_bytes"}
rows = []
dumps.IN_PROCESS_ASSIGNMENT = frozenset()
protos = dumps.dump_options
dumps.dump_options = lambda folder: {**protos(folder), "xla_dump_hlo_as_text": True}
remember = dumps.remember_dump


def compared(compiled, folder):
    remember(compiled, folder)
    data = dumps.dumped(compiled)
    texts = sorted(glob.glob(os.path.join(folder, "*after_optimizations.txt")))
    final = compiled.memory_analysis()
    early = dumped.dumped_stats(data)
    rows.append({
        "module": os.path.basename(texts[0]).split(".")[1] if texts else None,
        "sizes_equal": all(getattr(final, k) == getattr(early, k) for k in SIZES),
        "peak": final.peak_memory_in_bytes,
        "cpu_peak_rule": early.peak_memory_in_bytes,
        "text_as_dumped": bool(texts) and open(texts[0]).read() == compiled.as_text(),
        "text_by_rule": bool(texts) and dumped.executable_text(open(texts[0]).read()) == compiled.as_text(),
    })


dumps.remember_dump = compared
from typer.testing import CliRunner
from fieldmem.frontends.cli import app
result = CliRunner().invoke(app, ["check", *sys.argv[3:], "--no-isolate", "-j", "1", "--no-cache", "-f", "json",
                                  "-o", sys.argv[2]])
print(json.dumps({"exit_code": result.exit_code, "rows": rows}))
"""


def exactness(backend: str, work: Path) -> dict[str, Any]:
    """What XLA's dump gives against the finished compile, for every compile of the examples on ``backend``."""
    import glob

    args = [a for pattern in EXACTNESS_ARGS[backend] for a in sorted(glob.glob(str(ROOT / pattern)))]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    extra = ["--backend", backend] if backend != "cpu" else []
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), str(work / f"exact-{backend}.json"), *args, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"exactness {backend}: the probe failed: {done.stderr.strip().splitlines()[-3:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    rows = found["rows"]
    return {
        "backend": backend,
        "compiles": len(rows),
        "sizes_equal": sum(r["sizes_equal"] for r in rows),
        "peak_by_cpu_rule": sum(r["peak"] == r["cpu_peak_rule"] for r in rows),
        "text_as_dumped": sum(r["text_as_dumped"] for r in rows),
        "text_by_rule": sum(r["text_by_rule"] for r in rows),
        "rows": rows,
    }


COLD = dict(functions=20, chain=5, size=128)


def _run(command: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    """Wall seconds and peak resident KiB of one fresh process (its largest descendant's)."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {code}: {log.read_text(errors='replace')[-500:]}")
    return wall, usage.ru_maxrss


def _write(case: str, path: Path, salt: int) -> Path:
    if case == "heavy":
        return heavy.write_module(path, salt=salt)
    return write_module(path, salt=salt, **COLD)


def run_case(case: str, rounds: int, work: Path, cache: Path) -> dict[str, Any]:
    base = dict(os.environ, JAX_PLATFORMS="cpu", FIELDMEM_CACHE_DIR=str(cache))
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    base.pop("XLA_FLAGS", None)
    base.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs: list[dict[str, Any]] = []
    salt = 1000 + 100 * len(case)
    for n in range(rounds):
        row: dict[str, Any] = {"load_average": os.getloadavg()[0]}
        order = TOOLS[n % 3 :] + TOOLS[: n % 3]
        for tool in order:
            salt += 1
            module = _write(case, work / f"{case}_{tool}_{salt}.py", salt)
            env = dict(base)
            if tool == "naive":
                command = [sys.executable, str(BENCH / "naive.py"), str(module)]
            else:
                # without the persistent cache: with it, every compile runs to its end (its executable is kept)
                command = [sys.executable, "-m", "fieldmem", "check", str(module), "--no-cache"]
                env["FIELDMEM_EARLY_STOP"] = "1" if tool == "early" else "0"
            wall, rss = _run(command, env, work / f"{case}_{tool}.log")
            row[tool] = {"s": round(wall, 3), "max_rss_mib": round(rss / 1024, 1)}
        row["order"] = list(order)
        runs.append(row)
        print(f"  {case} round {n + 1}: " + ", ".join(f"{t} {row[t]['s']:.2f}s" for t in TOOLS), flush=True)
    medians = {t: statistics.median(r[t]["s"] for r in runs) for t in TOOLS}
    rss = {t: statistics.median(r[t]["max_rss_mib"] for r in runs) for t in TOOLS}
    ratios = {t: statistics.median(r[t]["s"] / r["naive"]["s"] for r in runs) for t in ("early", "full")}
    return {"case": case, "runs": runs, "median_s": medians, "median_max_rss_mib": rss, "ratio_to_naive": ratios}


def history(path: Path) -> list[dict[str, Any]]:
    """The runs before this one, newest first: the file's own run (its cases' figures, not the exactness
    survey) and the history it kept."""
    if not path.exists():
        return []
    before = json.loads(path.read_text())
    kept = before.pop("history", [])
    before.pop("exactness", None)
    return [before, *kept]


def markdown(document: dict[str, Any]) -> str:
    lines = [
        "# A static check's XLA:CPU compiles stopped once the buffer assignment is dumped (issue 47, item 3)",
        "",
        f"- date: {document['date']}; machine: {document['machine']}, {document['cores']} cores; jax {document['jax']};"
        f" fieldmem {document['commit']}; {document['rounds']} rounds, tools in rotating order, fresh constants"
        " per process",
        "- early: `FIELDMEM_EARLY_STOP=1 fieldmem check MODULE --no-cache`; full: the same with `FIELDMEM_EARLY_STOP=0`; naive:"
        " `benchmarks/naive.py` (two compiles per function, one after the other)",
        "",
        "| case | naive (s) | early (s) | full (s) | early / naive | full / naive | max RSS naive / early / full"
        " (MiB) | load average |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in document["cases"]:
        m, r, rss = row["median_s"], row["ratio_to_naive"], row["median_max_rss_mib"]
        load = ", ".join(f"{x['load_average']:.1f}" for x in row["runs"])
        lines.append(
            f"| {row['case']} | {m['naive']:.2f} | {m['early']:.2f} | {m['full']:.2f} | {r['early']:.2f} |"
            f" {r['full']:.2f} | {rss['naive']:.0f} / {rss['early']:.0f} / {rss['full']:.0f} | {load} |"
        )
    lines += ["", "Ratios are medians of each round's own ratio (same-round pairs); times are medians of the rounds."]
    if document.get("history"):
        lines += ["", "## Earlier runs", "", "| date | fieldmem | case | early / naive | full / naive | load average |"]
        lines.append("|---|---|---|---:|---:|---|")
        for run in document["history"]:
            for row in run["cases"]:
                load = ", ".join(f"{x['load_average']:.1f}" for x in row["runs"])
                r = row["ratio_to_naive"]
                lines.append(
                    f"| {run['date']} | {run['commit']} | {row['case']} | {r['early']:.2f} | {r['full']:.2f} | {load} |"
                )
    if document.get("exactness"):
        lines += [
            "",
            "## What XLA's dump gives against the finished compile (every compile of the bundled examples)",
            "",
            "| backend | compiles | every size but the peak | peak by XLA:CPU's rule | text as dumped |"
            " text with sorted backend configs |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in document["exactness"]:
            lines.append(
                f"| {row['backend']} | {row['compiles']} | {row['sizes_equal']} | {row['peak_by_cpu_rule']} |"
                f" {row['text_as_dumped']} | {row['text_by_rule']} |"
            )
        lines += [
            "",
            "Only where every column equals the compiles does a compile stop early: XLA:CPU. For the H100 the"
            " executable's text differs from the dump's (its source tables) and its peak follows another rule.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["heavy", "cold"], choices=["heavy", "cold"])
    parser.add_argument("--no-exactness", dest="exactness", action="store_false", help="skip the exactness survey")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {platform.system()}",
        "cores": os.cpu_count(),
        "jax": jax.__version__,
        "commit": commit.stdout.strip() or "unknown",
        "rounds": options.rounds,
        "cases": [],
        "exactness": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if options.exactness:
            for backend in EXACTNESS_ARGS:
                print(f"bench_early: exactness on {backend}", flush=True)
                document["exactness"].append(exactness(backend, work))
        for case in options.cases:
            print(f"bench_early: {case}", flush=True)
            document["cases"].append(run_case(case, options.rounds, work, work / "cache"))
    options.out.mkdir(parents=True, exist_ok=True)
    document["history"] = history(options.out / "early-stop.json")
    (options.out / "early-stop.json").write_text(json.dumps(document, indent=1) + "\n")
    (options.out / "early-stop.md").write_text(markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
