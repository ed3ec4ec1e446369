"""Issues 17 and 32 in one run: fieldmem by default against the naive script, its own overhead, heavy programs.

Sections (each in fresh processes; naive and fieldmem alternate, naive first):

- ``fairness``: before anything is timed, both tools compile a small salted
  module and the compile-heavy one with XLA's dump on; the programs they hand
  XLA (``*.before_optimizations.txt``, metadata stripped) must be the same
  multiset, two variants per function, and so must the optimized HLO. A
  mismatch stops the run: the comparison would not be fair.
- ``cold``: a 20-function ``synth.py`` module (chain 5, f32[128,128]) with
  FRESH CONSTANTS for every process (a new ``salt``), so no cache can help;
  ``fieldmem check MODULE`` with its defaults (its persistent compilation
  cache on, in a folder of this run: ``$FIELDMEM_CACHE_DIR``) against
  ``naive.py MODULE``; median of ``--pairs`` pairs. The cache files each
  fieldmem run adds are counted: a cold run adds one per compile.
- ``heavy``: the same on ``heavy.py``'s transformer training step, whose XLA
  compile at the default code generation (the naive script's, timed inside
  it) must take at least ``HEAVY_COMPILE_FLOOR`` seconds per variant.
- ``warm``: the last cold module checked again with the cache it filled
  (adds no cache file), against the naive script on that module.
- ``overhead``: fieldmem's own share of its wall time by pytree leaves and by
  functions per module. Share = (wall - floor - XLA) / wall where floor is
  ``python -c 'import jax'`` (Python start + jax import), run just before
  each fieldmem run (a point's floor: the median of its own) and XLA is the sum of each variant's ``lower_seconds`` +
  ``compile_seconds`` from fieldmem's own JSON report. These runs use
  ``--jobs 1 --no-cache``: with --jobs > 1 compiles overlap and their seconds
  add up to more than the wall time they take (the share would come out too
  small), and with the cache on jax's cache writes would count as XLA. What
  remains is fieldmem's: its own process start and imports, the worker's
  start, loading the module, reading the compiled programs, the analysis and
  the report; ``memory_analysis()`` and ``as_text()`` count as fieldmem's too.
- ``backends`` (issue 32): ``bench_backends.per_backend`` with fieldmem's default
  ``--jobs``: the bundled examples on ``gpu:h100`` and ``tpu:v5e`` compiled without
  the device (and ``cpu``) against ``naive.py --backend``, alternating.
- ``pod`` (issue 32): ``bench_backends.pod``: the 256-chip pod example, fieldmem's
  default and ``--jobs 1`` against the naive script's two compiles, alternating;
  wall time and peak resident memory.
- ``scaling`` (issue 32): ``scaling.sweep``: fieldmem's own time against the HLO
  instruction count of a transformer step, 2 to 32 layers unrolled and 2 to 128
  scanned, on ``cpu`` and ``tpu:v5e``; own time per instruction at the deepest
  point over that at 8 layers (linear growth: at most 1.5).
- ``watch``: ``bench_watch.run()`` (the watch loop's re-check time against
  the changed function's own compiles). If ``bench_watch.py`` is missing the
  run stops before measuring anything, unless ``--skip watch`` is given; the
  section is then recorded as skipped and the results as incomplete.

Every process runs with ``JAX_PLATFORMS=cpu`` (fieldmem sets it for itself;
a bare ``import jax`` with the accelerator plugins installed would otherwise
start them and the naive script would pay for it), the tree's fieldmem first
on ``PYTHONPATH``, and ``JAX_COMPILATION_CACHE_DIR`` unset. fieldmem's bytecode
is compiled first (``compileall``), as ``pip install`` does: with
``PYTHONDONTWRITEBYTECODE`` set, every process would compile its source.

Usage: ``python benchmarks/bench_fast.py [--quick] [--skip SECTION,...] [--out benchmarks/results]``
(``make bench``; ``make bench-quick`` is ``--quick``). Writes ``fast.json`` and
``fast.md`` (``fast-quick.*`` with ``--quick``) through ``runner.py``: the
run becomes the current one and the one it replaces joins the JSON's
``history`` (its date, machine, commit and summary figures). A partial run
(``--skip``, ``--overhead-points``, or one that stopped part way) never
replaces a complete one: it joins the history alone. The .md is generated
from the JSON (``--render FILE.json`` regenerates it alone). Exit 0: every measured
target met; 1: a target missed or a section skipped; 2: the run could not
measure (a tool failed, the fairness check failed, bench_watch.py missing).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))  # bench_watch.run() imports fieldmem in this process: this tree's

import heavy  # noqa: E402
import runner  # noqa: E402
from runner import BenchError, environment, median, timed  # noqa: E402

from synth import write_module  # noqa: E402

SECTIONS = ("fairness", "cold", "heavy", "warm", "overhead", "backends", "pod", "scaling", "watch")
COLD_MODULE = dict(functions=20, chain=5, size=128)
# issue 17's targets, with issue 32's: the compile-heavy step at 0.6, deviceless backends at 0.75, the pod at
# 0.65 with no more resident memory than the naive script, own time per instruction growing at most 1.5x
TARGETS = {
    "cold": 0.75,
    "heavy": 0.60,
    "overhead": 0.10,
    "watch": 1.10,
    "deviceless": 0.75,
    "pod": 0.65,
    "scaling": 1.5,
}
HEAVY_COMPILE_FLOOR = 2.0  # seconds: what makes the heavy module compile-heavy
OVERHEAD_BASE = dict(functions=1, chain=5, leaves=1, size=128)  # bench_suite.py's BASE
OVERHEAD = {
    "leaves": ([1, 100, 1000, 5000], dict(size=8, chain=1)),  # many small arrays: the cost is the pytree
    "functions": ([1, 5, 20, 50, 100], {}),
}
QUICK_OVERHEAD = {"leaves": [1, 100, 1000], "functions": [1, 5, 20]}


def naive_command(module: Path, timings: Path | None = None) -> list[str]:
    return [sys.executable, str(BENCH / "naive.py"), str(module), *([str(timings)] if timings else [])]


def fieldmem_command(module: Path, report: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "fieldmem", "check", str(module), "-f", "json", "-o", str(report), *flags]


def check_command(module: Path) -> list[str]:
    """``fieldmem check MODULE`` as a user types it: every default, the table on stdout."""
    return [sys.executable, "-m", "fieldmem", "check", str(module)]


def xla_seconds(report: Path) -> tuple[float, int]:
    """The sum of lower + compile seconds over every variant in fieldmem's JSON report, and the variants."""
    data = json.loads(report.read_text())
    total, variants = 0.0, 0
    for result in data["results"]:
        if result.get("error"):
            raise BenchError(f"{report}: {result.get('target')} failed: {result['error']}")
        for variant in result.get("variants", {}).values():
            if variant.get("lower_seconds") is None or variant.get("compile_seconds") is None:
                raise BenchError(f"{report}: a variant has no lower/compile seconds")
            total += variant["lower_seconds"] + variant["compile_seconds"]
            variants += 1
    return total, variants


def cache_entries(cache: Path) -> int:
    """The persistent cache's entries under ``cache``: jax's (``KEY-cache`` files) and the dumps fieldmem keeps
    under jax's key for a compile it stopped early (``fieldmem-readings/KEY``, fieldmem.driver.kept)."""
    if not cache.exists():
        return 0
    kept = cache / "fieldmem-readings"
    dumps = sum(1 for p in kept.iterdir() if not p.name.startswith(".")) if kept.is_dir() else 0
    return sum(1 for _ in cache.rglob("*-cache")) + dumps


class Salts:
    """Fresh salts: random (a rerun of the benchmark gets new ones too), never the same twice in a run."""

    def __init__(self) -> None:
        self.rng = random.Random()
        self.used: set[int] = set()

    def __call__(self) -> int:
        while True:
            salt = self.rng.randrange(1, 2**20)
            if salt not in self.used:
                self.used.add(salt)
                return salt


# ---------------------------------------------------------------- sections


def fairness(work: Path, env: dict[str, str], salts: Salts, quick: bool) -> dict[str, Any]:
    """The programs each tool hands XLA, from XLA's own dump: the same, two variants per function."""
    modules = [("synth (3 functions)", 3, lambda p, s: write_module(p, functions=3, chain=5, size=32, salt=s))]
    if not quick:
        modules.append(("heavy", 1, lambda p, s: heavy.write_module(p, salt=s)))
    out: dict[str, Any] = {"modules": []}
    for name, functions, write in modules:
        salt = salts()
        module = write(work / f"fair_{salt}.py", salt)
        dumps = {}
        for who in ("naive", "fieldmem"):
            folder = work / f"dump_{who}_{salt}"
            dumped = {**env, "XLA_FLAGS": f"--xla_dump_to={folder} --xla_dump_hlo_as_text"}
            command = (
                naive_command(module)
                if who == "naive"
                else fieldmem_command(module, work / "fair.json", "--jobs", "1", "--no-cache")
            )
            timed(command, dumped, work / f"fair_{who}.log")
            dumps[who] = {
                stage: sorted(_normalised(p) for p in folder.glob(f"*.{stage}.txt"))
                for stage in ("before_optimizations", "after_optimizations")
            }
        same_input = dumps["naive"]["before_optimizations"] == dumps["fieldmem"]["before_optimizations"]
        same_optimized = dumps["naive"]["after_optimizations"] == dumps["fieldmem"]["after_optimizations"]
        compiles = {who: len(d["before_optimizations"]) for who, d in dumps.items()}
        entry = {
            "module": name,
            "functions": functions,
            "programs_compiled": compiles,
            "same_programs": same_input,
            "same_optimized_hlo": same_optimized,
        }
        out["modules"].append(entry)
        if not same_input or compiles["naive"] != 2 * functions:
            raise BenchError(f"fairness: naive and fieldmem compile different programs for {name}: {entry}")
    out["pass"] = all(m["same_programs"] for m in out["modules"])
    return out


def _normalised(path: Path) -> str:
    """An HLO text dump without what differs between two processes compiling one program."""
    blocks = path.read_text().split("\n\n")
    # the stack-frame tables name the Python frames that traced each op: the caller's (naive.py or
    # fieldmem's worker) differ by design, and XLA reads them only for error messages and profiles
    frames = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
    text = "\n\n".join(b for b in blocks if not b.lstrip().startswith(frames))
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    text = re.sub(r"^HloModule \S+", "HloModule m", text, flags=re.M)
    return text


def alternate(
    work: Path,
    env: dict[str, str],
    cache: Path,
    pairs: int,
    write: Callable[[Path, int], Path],
    label: str,
    salts: Salts,
    compiles: int,
) -> dict[str, Any]:
    """``pairs`` pairs of fresh processes, naive then fieldmem, each on a module with fresh constants."""
    runs = []
    last_module = None
    for n in range(pairs):
        naive_salt, fieldmem_salt = salts(), salts()
        naive_module = write(work / f"{label}_naive_{naive_salt}.py", naive_salt)
        timings = work / f"{label}_naive_{n}.json"
        naive_wall = timed(naive_command(naive_module, timings), env, work / f"{label}_naive.log")
        fieldmem_module = write(work / f"{label}_fieldmem_{fieldmem_salt}.py", fieldmem_salt)
        before = cache_entries(cache)
        fieldmem_wall = timed(check_command(fieldmem_module), env, work / f"{label}_fieldmem.log")
        naive_timings = json.loads(timings.read_text())["variants"]
        runs.append(
            {
                "naive_salt": naive_salt,
                "fieldmem_salt": fieldmem_salt,
                "naive_s": naive_wall,
                "fieldmem_s": fieldmem_wall,
                "ratio": fieldmem_wall / naive_wall,
                "compiles": compiles,
                "naive_compile_s": [t["compile_seconds"] for t in naive_timings],
                "cache_entries_added": cache_entries(cache) - before,
            }
        )
        print(f"  {label} pair {n + 1}: naive {naive_wall:.2f}s fieldmem {fieldmem_wall:.2f}s", flush=True)
        last_module = fieldmem_module
    naive_median = median([r["naive_s"] for r in runs])
    fieldmem_median = median([r["fieldmem_s"] for r in runs])
    return {
        "runs": runs,
        "naive_median_s": naive_median,
        "fieldmem_median_s": fieldmem_median,
        "ratio": fieldmem_median / naive_median,
        # a cold run compiled every variant: each added (at least) its own cache entry
        "cold": all(r["cache_entries_added"] >= compiles for r in runs),
        "_last_module": str(last_module),
    }


def cold(work: Path, env: dict[str, str], cache: Path, pairs: int, salts: Salts) -> dict[str, Any]:
    write = lambda p, s: write_module(p, salt=s, **COLD_MODULE)  # noqa: E731
    result = alternate(work, env, cache, pairs, write, "cold", salts, 2 * COLD_MODULE["functions"])
    result["module"] = "synth.py: {functions} functions, chain {chain}, f32[{size},{size}]".format(**COLD_MODULE)
    result["target"] = TARGETS["cold"]
    result["pass"] = result["ratio"] <= TARGETS["cold"] and result["cold"]
    return result


def heavy_section(
    work: Path, env: dict[str, str], cache: Path, pairs: int, salts: Salts, layers: int
) -> dict[str, Any]:
    write = lambda p, s: heavy.write_module(p, salt=s, layers=layers)  # noqa: E731
    result = alternate(work, env, cache, pairs, write, "heavy", salts, 2)
    result["module"] = f"heavy.py: transformer training step, {layers} blocks, AdamW"
    plain = [r["naive_compile_s"][0] for r in result["runs"]]
    donated = [r["naive_compile_s"][1] for r in result["runs"]]
    result["compile_default_plain_s"] = median(plain)
    result["compile_default_donated_s"] = median(donated)
    result["compile_floor_s"] = HEAVY_COMPILE_FLOOR
    result["compile_heavy"] = min(result["compile_default_plain_s"], result["compile_default_donated_s"]) >= (
        HEAVY_COMPILE_FLOOR
    )
    result["target"] = TARGETS["heavy"]
    result["pass"] = result["ratio"] <= TARGETS["heavy"] and result["cold"] and result["compile_heavy"]
    return result


def warm(work: Path, env: dict[str, str], cache: Path, pairs: int, module: Path) -> dict[str, Any]:
    """The module a cold run checked (its cache entries in place), checked again; naive on the same file."""
    runs = []
    for n in range(pairs):
        naive_wall = timed(naive_command(module), env, work / "warm_naive.log")
        before = cache_entries(cache)
        fieldmem_wall = timed(check_command(module), env, work / "warm_fieldmem.log")
        runs.append(
            {
                "naive_s": naive_wall,
                "fieldmem_s": fieldmem_wall,
                "ratio": fieldmem_wall / naive_wall,
                "cache_entries_added": cache_entries(cache) - before,
            }
        )
        print(f"  warm pair {n + 1}: naive {naive_wall:.2f}s fieldmem {fieldmem_wall:.2f}s", flush=True)
    naive_median = median([r["naive_s"] for r in runs])
    fieldmem_median = median([r["fieldmem_s"] for r in runs])
    return {
        "module": "the last cold module (synth.py, fresh constants), its cache entries written by that run",
        "runs": runs,
        "naive_median_s": naive_median,
        "fieldmem_median_s": fieldmem_median,
        "ratio": fieldmem_median / naive_median,
        "warm": all(r["cache_entries_added"] == 0 for r in runs),
    }


def overhead(
    work: Path, env: dict[str, str], repeat: int, quick: bool, salts: Salts, only: list[tuple[str, int]] | None = None
) -> dict[str, Any]:
    """Each fieldmem run right after a floor run (``python -c 'import jax'``): a point's floor is the
    median of its own floor runs, so a load that changes during the run moves both alike. ``only``: these
    (dimension, value) points alone (``--overhead-points``), without the heavy module's diagnostic."""
    floor_command = [sys.executable, "-c", "import jax"]
    points = []
    grid: list[tuple[str, int, dict[str, int]]] = [
        (dimension, value, {**OVERHEAD_BASE, **extra, dimension: value})
        for dimension, (values, extra) in OVERHEAD.items()
        for value in (QUICK_OVERHEAD[dimension] if quick else values)
        if only is None or (dimension, value) in only
    ]
    if not quick and only is None:  # where the heavy section's time goes (a diagnostic: the issue sets no target there)
        grid.append(("heavy module, layers", heavy.LAYERS, {}))
    for dimension, value, params in grid:
        runs = []
        for _ in range(repeat):
            floor = timed(floor_command, env, work / "floor.log")
            salt = salts()
            name = work / f"over_{len(points)}_{salt}.py"
            if params:
                module = write_module(name, salt=salt, **params)
            else:
                module = heavy.write_module(name, salt=salt, layers=value)
            report = work / "over_report.json"
            command = fieldmem_command(module, report, "--jobs", "1", "--no-cache")
            wall = timed(command, env, work / "over.log")
            xla, variants = xla_seconds(report)
            runs.append({"floor_s": floor, "wall_s": wall, "xla_s": xla, "variants": variants})
        points.append({"dimension": dimension, "value": value, "params": params, "runs": runs})
        if not params:
            points[-1]["diagnostic"] = True
        print(f"  overhead {dimension}={value}: {[round(r['wall_s'], 2) for r in runs]} s", flush=True)
    for point in points:
        floor = point["floor_s"] = median([r["floor_s"] for r in point["runs"]])
        for run in point["runs"]:
            run["overhead_s"] = run["wall_s"] - floor - run["xla_s"]
            run["share"] = run["overhead_s"] / run["wall_s"]
        point["share"] = median([r["share"] for r in point["runs"]])
        point["overhead_s"] = median([r["overhead_s"] for r in point["runs"]])
        point["wall_s"] = median([r["wall_s"] for r in point["runs"]])
        point["xla_s"] = median([r["xla_s"] for r in point["runs"]])
        point["pass"] = point["share"] <= TARGETS["overhead"]
    targeted = [p for p in points if not p.get("diagnostic")]
    return {
        "floor_s": median([r["floor_s"] for p in points for r in p["runs"]]),
        "flags": "--jobs 1 --no-cache",
        "points": points,
        "max_share": max(p["share"] for p in targeted),
        "target": TARGETS["overhead"],
        "pass": all(p["pass"] for p in targeted),
    }


def watch_module() -> Any:
    """``benchmarks/bench_watch.py`` (the watch loop's benchmark), or a BenchError saying it is missing."""
    path = BENCH / "bench_watch.py"
    if not path.is_file():
        raise BenchError(
            "benchmarks/bench_watch.py is missing: the watch loop's re-check cannot be measured "
            "(give --skip watch to measure the rest; the results then say the run is incomplete)"
        )
    import bench_watch

    if not callable(getattr(bench_watch, "run", None)):
        raise BenchError("benchmarks/bench_watch.py has no run() to call")
    return bench_watch


WATCH_QUICK_REPEAT = 3  # edits timed by a quick run, as ``bench_watch.py --quick``


def watch(module: Any, quick: bool, work: Path, env: dict[str, str], out: Path | None = None) -> dict[str, Any]:
    """``bench_watch.run()`` with what it accepts of (quick, repeat, work, env); its dict is kept whole.

    Its verdict: ``within_10_percent`` or ``pass`` where it gives one, else its ``ratio`` against 1.10.
    bench_watch.py writes its own ``watch.{json,md}`` into its ``RESULTS`` folder: here into ``out``
    (this run's results folder), and for a quick run into ``work``: a smoke run replaces no result.
    """
    if hasattr(module, "RESULTS"):
        module.RESULTS = work / "watch-results" if quick or out is None else out
    offered: dict[str, Any] = {"quick": quick, "work": work, "env": env}
    if quick:
        offered["repeat"] = WATCH_QUICK_REPEAT
    accepted = inspect.signature(module.run).parameters
    try:
        result = module.run(**{k: v for k, v in offered.items() if k in accepted})
    except Exception as exc:  # its failure is a result of this run, not a reason to lose the others
        raise BenchError(f"bench_watch.run() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, dict):
        raise BenchError(f"bench_watch.run() returned {type(result).__name__}, not a dict")
    result = json.loads(json.dumps(result, default=str))
    verdicts = [result[k] for k in ("within_10_percent", "pass") if isinstance(result.get(k), bool)]
    if verdicts:
        passed = verdicts[0]
    elif isinstance(result.get("ratio"), (int, float)):
        passed = result["ratio"] <= TARGETS["watch"]
    else:
        raise BenchError("bench_watch.run()'s dict has no 'within_10_percent', 'pass' or 'ratio': nothing to judge")
    return {"result": result, "target": TARGETS["watch"], "pass": passed}


# ---------------------------------------------------------------- meta and report


def meta(quick: bool, skipped: list[str]) -> dict[str, Any]:
    from importlib.metadata import version

    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {runner.label()}, {platform.system()}",
        "machine_figures": runner.describe(),
        "cpu": cpu,
        "load_average_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "jax": version("jax"),
        "jaxlib": version("jaxlib"),
        "fieldmem_commit": runner.commit(ROOT),
        "environment": "JAX_PLATFORMS=cpu for every process (naive and fieldmem); JAX_COMPILATION_CACHE_DIR and "
        "XLA_FLAGS unset; fieldmem's default cache folder is this run's ($FIELDMEM_CACHE_DIR)",
        "quick": quick,
        "skipped": skipped,
    }


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target of issue 17, measured or not."""
    rows = []

    def row(target: str, measured: Any, limit: Any, passed: Any, note: str = "") -> None:
        rows.append({"target": target, "measured": measured, "limit": limit, "pass": passed, "note": note})

    if "cold" in results:
        c = results["cold"]
        row("cold, 20 functions, fresh constants: fieldmem / naive", c["ratio"], TARGETS["cold"], c["pass"])
    if "heavy" in results:
        h = results["heavy"]
        row("cold, compile-heavy module: fieldmem / naive", h["ratio"], TARGETS["heavy"], h["pass"])
        row(
            "compile-heavy: XLA compile of one variant, default codegen (s)",
            h["compile_default_plain_s"],
            HEAVY_COMPILE_FLOOR,
            h["compile_heavy"],
            "at least",
        )
    if "warm" in results:
        w = results["warm"]
        row("warm cache: fieldmem / naive", w["ratio"], None, w["warm"], "no target; pass = no cache entry added")
    if "overhead" in results:
        for p in results["overhead"]["points"]:
            if p.get("diagnostic"):
                row(f"overhead, {p['dimension']} = {p['value']}", p["share"], None, None, "no target: a diagnostic")
            else:
                row(f"overhead, {p['dimension']} = {p['value']}", p["share"], TARGETS["overhead"], p["pass"])
    if "backends" in results:
        for backend, b in results["backends"].items():
            limit = None if backend == "cpu" else TARGETS["deviceless"]
            passed = None if limit is None else b["ratio"] <= limit
            row(f"bundled examples on {backend}: fieldmem / naive", b["ratio"], limit, passed)
    if "pod" in results:
        p = results["pod"]
        row("pod example on tpu:v5e:16x16: fieldmem / naive", p["ratio"], TARGETS["pod"], p["ratio"] <= TARGETS["pod"])
        # all of a run's processes together where measured (fieldmem's parent beside its worker), else the
        # largest one (results before the tree was sampled)
        key = "tree_peak_rss_mib" if "fieldmem_tree_peak_rss_mib" in p else "peak_rss_mib"
        for run, words in (("fieldmem", "default"), ("fieldmem_jobs1", "--jobs 1")):
            if f"{run}_{key}" in p:
                row(
                    f"pod example, {words}: fieldmem's peak RSS / naive's"
                    + (" (all processes)" if key.startswith("tree") else ""),
                    round(p[f"{run}_{key}"] / p[f"naive_{key}"], 2),
                    1.0,
                    p[f"{run}_{key}"] <= p[f"naive_{key}"],
                    "at most",
                )
    if "scaling" in results:
        for series, f in results["scaling"]["fits"].items():
            growth = f.get("deepest_over_8")
            passed = None if growth is None else growth <= TARGETS["scaling"]
            row(f"own time per instruction, deepest / 8 layers: {series}", growth, TARGETS["scaling"], passed)
    if "watch" in results:
        row(
            "watch re-check / own compile",
            results["watch"]["result"].get("ratio"),
            TARGETS["watch"],
            results["watch"]["pass"],
        )
    for name in results["meta"]["skipped"]:
        row(f"{name}: skipped", None, None, False, "not measured in this run")
    if "error" in results:
        row(f"the run stopped: {results['error']}", None, None, False)
    return rows


def markdown(results: dict[str, Any]) -> str:
    m = results["meta"]
    lines = [
        "# Issues 17 and 32 in one run: fieldmem by default against the naive script"
        + (" (QUICK smoke run)" if m["quick"] else ""),
        "",
        f"- date: {m['date']}; machine: {m['machine']} ({m['cpu']}); Python {m['python']}; jax {m['jax']}, "
        f"jaxlib {m['jaxlib']}; fieldmem {m['fieldmem_commit']}",
        f"- load average at start {', '.join(f'{x:.2f}' for x in m['load_average_start'])}; at end "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_end'])}; whole run {m['seconds'] / 60:.1f} min",
        f"- {m['environment']}",
        "- every timed run is a fresh process; naive and fieldmem alternate, naive first; medians",
    ]
    if m["skipped"]:
        lines.append(f"- **skipped: {', '.join(m['skipped'])}: this run is incomplete**")
    lines += ["", "## Targets", "", "| target | measured | limit | pass |", "|---|---:|---:|---|"]
    for r in results["summary"]:
        measured = "—" if r["measured"] is None else f"{r['measured']:.3g}"
        limit = "—" if r["limit"] is None else (("≥ " if r["note"] == "at least" else "≤ ") + f"{r['limit']:g}")
        verdict = {True: "pass", False: "**FAIL**"}.get(r["pass"], "—")
        note = f" ({r['note']})" if r["note"] and r["note"] != "at least" else ""
        lines.append(f"| {r['target']}{note} | {measured} | {limit} | {verdict} |")
    if "fairness" in results:
        lines += ["", "## Fairness: what each tool hands XLA (XLA's dump)", ""]
        lines += ["| module | programs naive / fieldmem | same programs | same optimized HLO |", "|---|---|---|---|"]
        for f in results["fairness"]["modules"]:
            pc = f["programs_compiled"]
            lines.append(
                f"| {f['module']} | {pc['naive']} / {pc['fieldmem']} | {f['same_programs']} | {f['same_optimized_hlo']} |"
            )
        lines.append("")
        lines.append(
            "fieldmem compiles with XLA:CPU's -O0 code generation by default (a static check runs nothing); "
            "that changes neither the HLO nor the buffer assignment, only the machine code."
        )
    for key, title in (("cold", "Cold, fresh constants"), ("heavy", "Cold, compile-heavy"), ("warm", "Warm cache")):
        if key not in results:
            continue
        s = results[key]
        lines += ["", f"## {title}: {s['module']}", ""]
        lines.append(
            f"naive median {s['naive_median_s']:.2f} s, fieldmem median {s['fieldmem_median_s']:.2f} s: "
            f"**{s['ratio']:.2f}**" + (f" (target ≤ {s['target']:g})" if "target" in s else "")
        )
        if key == "heavy":
            lines.append("")
            lines.append(
                f"XLA compile at the default code generation (inside the naive script): plain "
                f"{s['compile_default_plain_s']:.2f} s, donated {s['compile_default_donated_s']:.2f} s "
                f"(medians; compile-heavy means ≥ {s['compile_floor_s']:g} s)"
            )
        lines += [
            "",
            "| pair | naive (s) | fieldmem (s) | ratio | cache entries added |",
            "|---:|---:|---:|---:|---:|",
        ]
        for n, r in enumerate(s["runs"], 1):
            lines.append(
                f"| {n} | {r['naive_s']:.2f} | {r['fieldmem_s']:.2f} | {r['ratio']:.2f} | {r['cache_entries_added']} |"
            )
    if "overhead" in results:
        o = results["overhead"]
        lines += [
            "",
            f"## fieldmem's own overhead (`{o['flags']}`)",
            "",
            "share = (wall − floor − lower − compile) / wall, median over the runs; floor: "
            "`python -c 'import jax'` run just before each fieldmem run, the median of the point's "
            f"(of all: {o['floor_s']:.2f} s)",
            "",
            "| dimension | value | wall (s) | floor (s) | lower + compile (s) | overhead (s) | share | pass | runs |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for p in o["points"]:
            lines.append(
                f"| {p['dimension']} | {p['value']} | {p['wall_s']:.2f} | {p['floor_s']:.2f} | {p['xla_s']:.2f} | "
                f"{p['overhead_s']:.2f} | "
                f"{p['share']:.1%} | {'—' if p.get('diagnostic') else 'pass' if p['pass'] else '**FAIL**'} | {len(p['runs'])} |"
            )
    if "backends" in results or "pod" in results:
        import bench_backends

        document = {"repeat": m.get("pairs"), "backends": results.get("backends", {})}
        if "pod" in results:
            document["pod"] = results["pod"]
        lines += ["", *bench_backends.markdown(document, title=False).splitlines()]
    if "scaling" in results:
        import scaling

        lines += ["", "## Scaling", "", *scaling.markdown(results["scaling"], title=False).splitlines()]
    if "watch" in results:
        lines += [
            "",
            "## The watch loop (bench_watch.py)",
            "",
            "```",
            json.dumps(results["watch"]["result"], indent=1),
            "```",
        ]
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- the result file


def complete(results: dict[str, Any]) -> bool:
    """Every section measured: no section skipped, every overhead point, no stop part way."""
    m = results["meta"]
    return not m.get("skipped") and not m.get("overhead_points") and "error" not in results


def measured_sections(results: dict[str, Any]) -> str:
    """What a partial run measured, for its history entry: ``overhead (leaves=5000)``, ``pod; stopped``."""
    parts = [s for s in SECTIONS if s in results]
    missing = [s for s in SECTIONS if s not in results]
    text = (", ".join(parts) or "nothing") if len(parts) <= len(missing) else f"all but {', '.join(missing)}"
    if results["meta"].get("overhead_points"):
        text += f" ({', '.join(results['meta']['overhead_points'])})"
    return text + ("; stopped" if "error" in results else "")


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """A run's headline figures: each summary row's measured value, by its target (none for a section skipped)."""
    return {
        row["target"]: row["measured"]
        for row in results.get("summary", [])
        if isinstance(row["measured"], (int, float)) and not isinstance(row["measured"], bool)
    }


def benchmark(name: str = "fast") -> runner.Benchmark:
    """``make bench``'s result file ``name`` (``fast``; ``fast-quick``; another machine's with ``--name``)."""
    return runner.Benchmark(name, markdown, headline, complete, measured_sections)


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: one pair each, fewer points")
    parser.add_argument("--skip", default="", help=f"sections not to run, comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument(
        "--overhead-points",
        default="",
        help="the overhead section at these points alone, e.g. leaves=5000,functions=100 (default: every point)",
    )
    parser.add_argument("--name", default=None, help="the result files' name (default fast, fast-quick)")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--render", type=Path, help="only write the .md of this results JSON")
    ns = parser.parse_args()
    if ns.render:
        runner.render(ns.render, benchmark(ns.render.stem))
        return 0
    skipped = [s.strip() for s in ns.skip.split(",") if s.strip()]
    unknown = set(skipped) - set(SECTIONS)
    if unknown:
        print(f"bench_fast: error: unknown section {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    pairs = 1 if ns.quick else 3
    only = None
    if ns.overhead_points:
        try:
            only = [(d.strip(), int(v)) for d, v in (p.split("=") for p in ns.overhead_points.split(","))]
        except ValueError:
            print(
                f"bench_fast: error: --overhead-points {ns.overhead_points!r}: name them as leaves=5000",
                file=sys.stderr,
            )
            return 2
    try:
        watcher = watch_module() if "watch" not in skipped else None
    except BenchError as exc:
        print(f"bench_fast: error: {exc}", file=sys.stderr)
        return 2
    # fieldmem's bytecode first, as `pip install` writes it: where PYTHONDONTWRITEBYTECODE is set (as on
    # the benchmark machine) every process would otherwise compile fieldmem's source, while jax's is compiled
    import compileall

    compileall.compile_dir(str(ROOT / "fieldmem"), quiet=1)
    started = time.perf_counter()
    results: dict[str, Any] = {"meta": meta(ns.quick, skipped)}
    results["meta"]["bytecode"] = "fieldmem's compiled first (compileall), as pip install does"
    results["meta"]["pairs"] = pairs
    if only is not None:
        results["meta"]["overhead_points"] = [f"{d}={v}" for d, v in only]
    salts = Salts()
    error = None
    try:
        with tempfile.TemporaryDirectory(prefix="fieldmem-bench-fast-") as tmp:
            work = Path(tmp)
            cache = work / "cache"
            env = environment(cache)
            load = results["meta"]["load_average_by_section"] = {}
            if "fairness" not in skipped:
                print("fairness: the programs each tool compiles", flush=True)
                load["fairness"] = list(os.getloadavg())
                results["fairness"] = fairness(work, env, salts, ns.quick)
            last = None
            if "cold" not in skipped:
                print("cold: 20 functions, fresh constants", flush=True)
                load["cold"] = list(os.getloadavg())
                results["cold"] = cold(work, env, cache, pairs, salts)
                last = Path(results["cold"].pop("_last_module"))
            if "heavy" not in skipped:
                print("heavy: transformer training step, fresh constants", flush=True)
                load["heavy"] = list(os.getloadavg())
                results["heavy"] = heavy_section(work, env, cache, pairs, salts, heavy.LAYERS)
                results["heavy"].pop("_last_module")
            if "warm" not in skipped:
                if last is None:
                    raise BenchError("warm needs the cold section's module: do not skip cold")
                print("warm: the last cold module again", flush=True)
                load["warm"] = list(os.getloadavg())
                results["warm"] = warm(work, env, cache, pairs, last)
            if "overhead" not in skipped:
                print("overhead: by leaves and by functions", flush=True)
                load["overhead"] = list(os.getloadavg())
                results["overhead"] = overhead(work, env, pairs, ns.quick, salts, only)
            if "backends" not in skipped:
                import bench_backends

                print("backends: the bundled examples on each backend", flush=True)
                load["backends"] = list(os.getloadavg())
                results["backends"] = bench_backends.per_backend(pairs, work, flags=())
            if "pod" not in skipped:
                import bench_backends

                print("pod: the 256-chip pod example", flush=True)
                load["pod"] = list(os.getloadavg())
                results["pod"] = bench_backends.pod(work, None, pairs)
            if "scaling" not in skipped:
                import scaling

                print("scaling: own time against HLO instructions", flush=True)
                load["scaling"] = list(os.getloadavg())
                layouts = ["unrolled", "scanned"]
                if ns.quick:
                    results["scaling"] = scaling.sweep([2, 8], [2, 8], 1, ["cpu"], layouts, work)
                else:
                    results["scaling"] = scaling.sweep(
                        [2, 8, 16, 32], [2, 8, 32, 128], pairs, ["cpu", "tpu:v5e"], layouts, work
                    )
            if watcher is not None:
                print("watch: bench_watch.run()", flush=True)
                load["watch"] = list(os.getloadavg())
                results["watch"] = watch(watcher, ns.quick, work, env, ns.out)
    except BenchError as exc:
        error = str(exc)
        results["error"] = error  # what was measured before it is written all the same
    results["meta"]["seconds"] = time.perf_counter() - started
    results["meta"]["load_average_end"] = list(os.getloadavg())
    results["summary"] = summary(results)
    # a partial run (skipped sections, some overhead points, stopped) does not replace a complete one
    name = ns.name or ("fast-quick" if ns.quick else "fast")
    written = runner.write(ns.out, benchmark(name), results)
    print(markdown(results))  # this run's figures, whether or not it became the file's current run
    if written["meta"]["date"] != results["meta"]["date"]:
        print(f"bench_fast: a partial run: it joins the history of {ns.out / name}.json", file=sys.stderr)
    if error is not None:
        print(f"bench_fast: error: {error}", file=sys.stderr)
        return 2
    return 0 if all(r["pass"] is not False for r in results["summary"]) else 1


if __name__ == "__main__":
    sys.exit(main())
