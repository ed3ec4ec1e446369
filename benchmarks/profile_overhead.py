"""Where fieldmem's own time goes: ``fieldmem check`` under cProfile, on synthetic modules.

For each module (``synth.write_module``: 1, 1,000 and 5,000 leaves of f32[8,8]
with chain 1, as the suite's leaves dimension, and the suite's one-function
base module) this script

1. times fresh ``fieldmem check MODULE -f json -o REPORT --no-cache`` runs
   without a profiler and computes the suite's overhead column from them
   (wall time less XLA lowering + compiling as the report gives them, less
   ``python -c 'import jax'`` measured in the same run), together with the
   naive script (``naive.py``) in the same environment;
2. profiles the real isolated path: the parent process (which imports no jax:
   it supervises the worker, decodes its results and writes the report) and
   the worker (which imports the module, lowers, compiles, analyses and
   encodes), each with its own cProfile. The worker is started by the parent,
   so a ``sitecustomize`` module on ``PYTHONPATH`` starts the profiler in it
   and writes the stats when it leaves through ``os._exit``;
3. profiles ``--no-isolate`` (everything in one process).

Every process runs with ``JAX_PLATFORMS=cpu`` (the naive script too), so the
accelerator plugins' start is no one's cost. cProfile slows Python code down
(function calls most), so the profiles rank where the time goes; the
seconds of step 1 are the ones to compare.

Usage: ``python benchmarks/profile_overhead.py [--leaves 1000 5000] [--functions 100] [--no-functions-module]
[--top 30] [--runs 3] [--out benchmarks/results] [--name profile-overhead]``.
Writes ``NAME.md`` (the timings, then per profile the top functions by
cumulative and by own time) and ``NAME.json`` (the timings).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import write_module

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# started in the worker only (the parent is run under ``python -m cProfile``): dumps when it leaves by os._exit
SITECUSTOMIZE = """
import os, sys
if "fieldmem.worker.main" in getattr(sys, "orig_argv", ()) and os.environ.get("FIELDMEM_PROFILE_WORKER"):
    import cProfile
    _profile = cProfile.Profile()
    _exit = os._exit

    def _dump_and_exit(code):
        _profile.disable()
        _profile.dump_stats(os.environ["FIELDMEM_PROFILE_WORKER"])
        _exit(code)

    os._exit = _dump_and_exit
    _profile.enable()
"""


def env(tree: Path = ROOT, site: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of every process here: JAX_PLATFORMS=cpu, fieldmem from ``tree`` (the processes run
    outside any checkout, so ``python -m fieldmem`` does not find one in its working directory first)."""
    result = dict(os.environ)
    result["JAX_PLATFORMS"] = "cpu"
    # what PYTHONPATH already held comes after the tree (a machine with no package index: carried wheels)
    held = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    result["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []), str(tree), *held])
    result.update(extra)
    return result


def wall(command: list[str], environment: dict[str, str]) -> float:
    start = time.perf_counter()
    # not from ROOT: `python -m` puts the working directory first on sys.path, and fieldmem must come from the tree
    subprocess.run(
        command, cwd=tempfile.gettempdir(), env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def lower_compile_seconds(report: Path) -> float:
    """XLA lowering + compiling, as the report says (the suite's own reading)."""
    data = json.loads(report.read_text())
    return sum(
        (v.get("lower_seconds") or 0.0) + (v.get("compile_seconds") or 0.0)
        for r in data["results"]
        for v in (r.get("variants") or {}).values()
    )


CHECK_ARGS: list[str] = []  # --check-args: e.g. --jobs 1, so that the compiles' seconds add up to their wall time


def check_command(module: Path, report: Path, *extra: str) -> list[str]:
    return [
        PYTHON, "-m", "fieldmem", "check", str(module), "-f", "json", "-o", str(report), "--no-cache",
        *CHECK_ARGS, *extra,
    ]  # fmt: skip


def timings(module: Path, work: Path, runs: int, against: Path | None) -> dict[str, Any]:
    """Fresh runs of ``python -c 'import jax'``, naive.py and fieldmem (and fieldmem from the ``against``
    checkout), alternating; the overhead of each run against the median ``import jax`` of this module's rounds."""
    report = work / "timed.json"
    trees = {"fieldmem": ROOT, **({"against": against} if against else {})}
    walls: dict[str, list[float]] = {"import_jax": [], "naive": [], **{who: [] for who in trees}}
    compiled: dict[str, list[float]] = {who: [] for who in trees}
    sizes: dict[str, int] = {}
    for _ in range(runs):
        walls["import_jax"].append(wall([PYTHON, "-c", "import jax"], env()))
        walls["naive"].append(wall([PYTHON, str(ROOT / "benchmarks" / "naive.py"), str(module)], env()))
        for who, tree in trees.items():
            walls[who].append(wall(check_command(module, report), env(tree)))
            compiled[who].append(lower_compile_seconds(report))
            sizes[who] = report.stat().st_size
    floor = statistics.median(walls["import_jax"])
    result: dict[str, Any] = {
        "runs": runs,
        "import_jax": round(floor, 3),
        "naive_wall": round(statistics.median(walls["naive"]), 3),
    }
    for who in trees:
        prefix = "" if who == "fieldmem" else "against_"
        result[f"{prefix}fieldmem_wall"] = round(statistics.median(walls[who]), 3)
        result[f"{prefix}lower_compile"] = round(statistics.median(compiled[who]), 3)
        result[f"{prefix}overhead"] = round(
            statistics.median(max(0.0, w - floor - c) / w for w, c in zip(walls[who], compiled[who])), 3
        )
        result[f"{prefix}report_bytes"] = sizes[who]
    return result


IMPORTS = {
    "fieldmem": "import fieldmem",
    "fieldmem.frontends.cli": "import fieldmem.frontends.cli",
    "jax": "import jax",
}


def import_costs(runs: int, against: Path | None) -> dict[str, Any]:
    """Median wall time of a fresh ``python -c 'import X'`` (less ``python -c pass``), alternating, and the
    fieldmem modules ``import fieldmem`` loads."""
    trees = {"fieldmem": ROOT, **({"against": against} if against else {})}
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        samples.setdefault("python", []).append(wall([PYTHON, "-c", "pass"], env()))
        for who, tree in trees.items():
            for name, code in IMPORTS.items():
                if name == "jax" and who != "fieldmem":
                    continue
                samples.setdefault(f"{who}:{name}", []).append(wall([PYTHON, "-c", code], env(tree)))
    start = statistics.median(samples.pop("python"))
    result: dict[str, Any] = {"python_start": round(start, 4)}
    result.update({key: round(statistics.median(v) - start, 4) for key, v in samples.items()})
    for who, tree in trees.items():
        listing = subprocess.run(
            [PYTHON, "-c", "import fieldmem, sys; print(sorted(m for m in sys.modules if m.startswith('fieldmem')))"],
            cwd=tempfile.gettempdir(),
            env=env(tree),
            capture_output=True,
            text=True,
        )
        result[f"{who}:modules"] = listing.stdout.strip()
    return result


def top(stats_file: Path, sort: str, limit: int, only: str | None = None) -> str:
    out = io.StringIO()
    stats = pstats.Stats(str(stats_file), stream=out)
    stats.sort_stats(sort)
    if only is not None:
        stats.print_stats(only, limit)
    else:
        stats.print_stats(limit)
    text = out.getvalue()
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    body = [line.replace(str(ROOT) + "/", "").replace(sys.prefix + "/", "") for line in lines[start:] if line.strip()]
    return total + "\n\n" + "\n".join(line[:170] for line in body)


def profiles(module: Path, work: Path, label: str, limit: int) -> list[tuple[str, Path]]:
    """Profile the isolated run (parent and worker) and the --no-isolate run; the stats files."""
    site = work / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    report = work / "profiled.json"
    parent, worker, alone = work / f"{label}-parent.prof", work / f"{label}-worker.prof", work / f"{label}-alone.prof"
    profiled = [PYTHON, "-m", "cProfile", "-o"]
    command = check_command(module, report)[1:]
    subprocess.run(
        [*profiled, str(parent), *command],
        cwd=work,
        env=env(site=site, FIELDMEM_PROFILE_WORKER=str(worker)),
        stdout=subprocess.DEVNULL,
        check=False,
    )
    subprocess.run(
        [*profiled, str(alone), *check_command(module, report, "--no-isolate")[1:]],
        cwd=work,
        env=env(),
        stdout=subprocess.DEVNULL,
        check=False,
    )
    return [
        ("isolated run: the parent (no jax)", parent),
        ("isolated run: the worker", worker),
        ("--no-isolate: one process", alone),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, nargs="*", default=[1, 1000, 5000])
    parser.add_argument("--no-functions-module", action="store_true", help="skip the one-function base module")
    parser.add_argument(
        "--functions",
        type=int,
        nargs="*",
        default=[],
        help="also modules of this many functions (the suite's functions dimension: chain 5, f32[128,128])",
    )
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per module (5,000 leaves: 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default="profile-overhead")
    parser.add_argument("--against", type=Path, help="another checkout of fieldmem, timed alternately (before/after)")
    parser.add_argument("--against-label", help="how the tables name the --against checkout (default: its path)")
    parser.add_argument("--no-profiles", action="store_true", help="the timings only")
    parser.add_argument(
        "--module",
        type=Path,
        action="append",
        default=[],
        help="profile this module instead of the synthetic ones (repeatable; no timings: naive.py compiles for "
        "this machine only), e.g. examples/pod/train_step.py with --check-args '--backend tpu:v5e:16x16 -j 1'",
    )
    parser.add_argument(
        "--check-args",
        default="",
        help="more options for every fieldmem check, e.g. '--jobs 1': with the compiles run one after the "
        "other, the report's lower + compile seconds are their share of the wall time (with --jobs > 1 "
        "the two variants compile at once, their seconds overlap and the overhead column reads too low)",
    )
    parser.add_argument(
        "--source",
        action="store_true",
        help="leave fieldmem without bytecode (default: compile it first, as pip does when it installs; "
        "with PYTHONDONTWRITEBYTECODE set, every process would compile fieldmem's source again)",
    )
    ns = parser.parse_args()
    CHECK_ARGS[:] = ns.check_args.split()

    version = subprocess.run(
        [PYTHON, "-c", "import jax; print(jax.__version__)"], capture_output=True, text=True, env=env()
    ).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "jax": version,
        "commit": commit.stdout.strip(),
        "check_args": ns.check_args,
    }
    if not ns.source:
        for tree in [ROOT, *([ns.against] if ns.against else [])]:
            subprocess.run(
                [PYTHON, "-m", "compileall", "-q", str(tree / "fieldmem")], check=True, stdout=subprocess.DEVNULL
            )
    meta["bytecode"] = "none (source compiled by every process)" if ns.source else "compiled first (compileall)"
    modules: list[tuple[str, dict[str, int]]] = [
        (f"leaves-{n}", dict(functions=1, chain=1, leaves=n, size=8)) for n in ns.leaves if not ns.module
    ]
    if not ns.no_functions_module and not ns.module:
        modules.append(("functions-1", dict(functions=1, chain=5, leaves=1, size=128)))
    modules += [
        (f"functions-{n}", dict(functions=n, chain=5, leaves=1, size=128)) for n in ns.functions if not ns.module
    ]
    imports = import_costs(9, ns.against)
    print("imports", imports, flush=True)
    results: dict[str, dict[str, float]] = {}
    sections: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fieldmem-profile-") as tmp:
        work = Path(tmp)
        given = [(path.stem, path.resolve()) for path in ns.module]
        made = [(label, write_module(work / f"synthetic_{label.replace('-', '_')}.py", **p)) for label, p in modules]
        for label, module in [*made, *given]:
            if not ns.module:
                runs = 1 if dict(modules)[label]["leaves"] >= 5000 else ns.runs
                results[label] = timings(module, work, runs, ns.against)
                print(label, results[label], flush=True)
            for title, stats_file in [] if ns.no_profiles else profiles(module, work, label, ns.top):
                if not stats_file.exists():
                    sections.append(f"### {label}: {title}\n\n(no profile written)\n")
                    continue
                sections.append(
                    f"### {label}: {title}\n\nfieldmem's functions by cumulative time:\n\n```\n"
                    f"{top(stats_file, 'cumulative', ns.top, 'fieldmem/')}\n```\n\n"
                    f"all functions by own time:\n\n```\n{top(stats_file, 'tottime', ns.top)}\n```\n"
                )
    head = [
        "# fieldmem's own overhead: profiles",
        "",
        f"- date: {meta['date']}; machine: {meta['machine']}; Python {meta['python']}; jax {meta['jax']}; "
        f"commit {meta['commit']}",
        "- written by `benchmarks/profile_overhead.py`; every process with JAX_PLATFORMS=cpu; "
        f"fieldmem's bytecode: {meta['bytecode']}",
        "- overhead as in `bench_suite.py`: (wall - lowering and compiling as the report says - "
        "`python -c 'import jax'`, timed in the same rounds) / wall, median of the runs",
        "- cProfile slows Python down: the profiles rank where time goes, the timings are without it",
        f"- fieldmem check options: `-f json -o REPORT --no-cache {ns.check_args}`"
        if ns.check_args
        else "- fieldmem check options: `-f json -o REPORT --no-cache` (its default --jobs)",
        "",
        *(
            [
                "| module | runs | import jax (s) | naive wall (s) | fieldmem wall (s) | lower + compile (s) | overhead "
                "| JSON report (bytes) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            if results
            else ["No timings: `--module` profiles only (naive.py compiles for this machine alone)."]
        ),
    ]
    for label, r in results.items():
        rows = [("", f"{label}, {meta['commit']}")] + (
            [("against_", f"{label}, {ns.against_label or ns.against}")] if ns.against else []
        )
        for prefix, name in rows:
            head.append(
                f"| {name} | {r['runs']} | {r['import_jax']:.2f} | {r['naive_wall']:.2f} | "
                f"{r[prefix + 'fieldmem_wall']:.2f} | "
                f"{r[prefix + 'lower_compile']:.2f} | {r[prefix + 'overhead']:.0%} | {r[prefix + 'report_bytes']} |"
            )
    head += [
        "",
        "Import cost: median wall time of a fresh `python -c 'import X'` less `python -c 'pass'` "
        f"({imports['python_start']:.3f} s), 9 alternating rounds:",
        "",
        "| import | seconds |",
        "|---|---:|",
        *(
            f"| {key} | {value:.3f} |"
            for key, value in imports.items()
            if isinstance(value, float) and key != "python_start"
        ),
        "",
        *(f"- {key}: {value}" for key, value in imports.items() if key.endswith(":modules")),
    ]
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / f"{ns.name}.md").write_text("\n".join(head) + "\n\n" + "\n".join(sections))
    (ns.out / f"{ns.name}.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "against": (ns.against_label or str(ns.against)) if ns.against else None,
                "imports": imports,
                "modules": results,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {ns.out / ns.name}.md and .json")


if __name__ == "__main__":
    main()
