"""The pod check with ``--jobs 1`` and at most two glibc malloc arenas in the worker, against glibc's default.

fieldmem's worker asks glibc for at most two malloc arenas when it compiles one
program at a time (``fieldmem.engine.worker.fewer_malloc_arenas``). This script
measures what that changes, on the pod example (``tpu:v5e:16x16``), in one run,
alternating, each a fresh process:

- ``naive``: ``naive_backends.py pod``, the two compiles by hand;
- ``fieldmem -j 1``: as fieldmem runs (two arenas);
- ``fieldmem -j 1, glibc's arenas``: the same with ``MALLOC_ARENA_MAX`` set to glibc's
  own default for this machine (8 per core), which fieldmem leaves as it is;
- ``naive, two arenas``: the naive script with ``MALLOC_ARENA_MAX=2``, the same
  allocator setting by hand.

Per run: the wall seconds and the peak resident memory of all the run's processes
together (``bench_backends.measured_tree``). Medians of the walls, the most of the
memories. Writes ``results/arenas.{json,md}``.

``--small``: instead, what the setting costs a small check, where fieldmem's own
work is most of the time: ``fieldmem check -j 1 --no-cache`` of a synthetic module
(``synth.py``, one function, 1 and 1,000 leaves of f32[8,8], a fresh module per run),
with two arenas and with glibc's default, alternating, ``--repeat`` runs each (default
12). Writes ``results/arenas-small.{json,md}``.

    python benchmarks/bench_arenas.py [--repeat 3] [--small]
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

import bench_backends  # noqa: E402

POD = "examples/pod/train_step.py"


def _meta(repeat: int) -> dict[str, Any]:
    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "jax": jax.__version__,
        "commit": commit.stdout.strip() or "unknown",
        "repeat": repeat,
    }


def small(repeat: int, out: Path, glibc_default: str) -> int:
    from synth import write_module

    scratch = Path(tempfile.mkdtemp(prefix="fieldmem-arenas-small-"))
    settings = {"two arenas": {}, "glibc's arenas": {"MALLOC_ARENA_MAX": glibc_default}}
    walls: dict[str, dict[str, list[float]]] = {}
    for leaves in (1, 1000):
        per = walls.setdefault(f"leaves {leaves}", {name: [] for name in settings})
        for n in range(repeat):
            for name, environ in settings.items():
                module = write_module(
                    scratch / f"m{leaves}_{n}_{len(environ)}.py", functions=1, chain=1, leaves=leaves, size=8
                )
                env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
                env.update(environ, JAX_PLATFORMS="cpu")
                command = [sys.executable, "-m", "fieldmem", "check", str(module), "-j", "1", "--no-cache"]
                start = time.perf_counter()
                subprocess.run([*command, "-f", "json", "-o", str(scratch / "r.json")], env=env, capture_output=True)
                per[name].append(round(time.perf_counter() - start, 3))
            print(f"arenas: {leaves} leaves, run {n + 1}", flush=True)
    medians = {case: {name: statistics.median(v) for name, v in per.items()} for case, per in walls.items()}
    document = {**_meta(repeat), "walls_s": walls, "median_wall_s": medians}
    lines = [
        "# A small check, `--jobs 1`: two malloc arenas against glibc's default",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; jax {document['jax']}; fieldmem"
        f" {document['commit']}",
        f"- {repeat} alternating runs each, fresh processes and a fresh module per run; wall seconds",
        "",
        "| module | two arenas, median (s) | glibc's arenas, median (s) | two / glibc's |",
        "|---|---:|---:|---:|",
    ]
    for case, m in medians.items():
        two, glibc = m["two arenas"], m["glibc's arenas"]
        lines.append(f"| {case} | {two:.3f} | {glibc:.3f} | {two / glibc:.2f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "arenas-small.json").write_text(json.dumps(document, indent=1) + "\n")
    (out / "arenas-small.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--small", action="store_true", help="a small check's wall time instead of the pod")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    glibc_default = str(8 * (os.cpu_count() or 1))
    if options.small:
        return small(options.repeat or 12, options.out, glibc_default)
    options.repeat = options.repeat or 3
    scratch = Path(tempfile.mkdtemp(prefix="fieldmem-arenas-"))
    fieldmem = bench_backends.fieldmem_command([POD], "tpu:v5e:16x16", str(scratch / "pod.json"), "-j", "1")
    naive = [sys.executable, "benchmarks/naive_backends.py", "pod"]
    runs: dict[str, tuple[list[str], dict[str, str]]] = {
        "naive": (naive, {}),
        "fieldmem -j 1": (fieldmem, {}),
        "fieldmem -j 1, glibc's arenas": (fieldmem, {"MALLOC_ARENA_MAX": glibc_default}),
        "naive, two arenas": (naive, {"MALLOC_ARENA_MAX": "2"}),
    }
    walls: dict[str, list[float]] = {name: [] for name in runs}
    memory: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(options.repeat):
        for name, (command, environ) in runs.items():
            saved = os.environ.get("MALLOC_ARENA_MAX")
            os.environ.pop("MALLOC_ARENA_MAX", None)
            os.environ.update(environ)
            try:
                seconds, _, together = bench_backends.measured_tree(command)
            finally:
                os.environ.pop("MALLOC_ARENA_MAX", None)
                if saved is not None:
                    os.environ["MALLOC_ARENA_MAX"] = saved
            walls[name].append(round(seconds, 1))
            memory[name].append(round(together))
            print(f"arenas: {name}: {seconds:.1f} s, {together:.0f} MiB", flush=True)
    rows = {
        name: {
            "wall_s": walls[name],
            "tree_peak_rss_mib": memory[name],
            "median_wall_s": statistics.median(walls[name]),
            "most_tree_peak_rss_mib": max(memory[name]),
        }
        for name in runs
    }
    document: dict[str, Any] = {
        **_meta(options.repeat),
        "glibc_default_arenas": int(glibc_default),
        "runs": rows,
    }
    base = rows["naive"]
    lines = [
        "# The pod check, `--jobs 1`: two malloc arenas against glibc's default",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; jax {document['jax']}; fieldmem"
        f" {document['commit']}",
        f"- {options.repeat} alternating runs each, fresh processes; memory: all of a run's processes together,"
        " sampled every 0.02 s, the most over the runs",
        "",
        "| run | walls (s) | median / naive | peak RSS, all processes (MiB) | most / naive's most |",
        "|---|---|---:|---|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {', '.join(f'{w:.1f}' for w in row['wall_s'])} |"
            f" {row['median_wall_s'] / base['median_wall_s']:.2f} | {', '.join(str(m) for m in row['tree_peak_rss_mib'])} |"
            f" {row['most_tree_peak_rss_mib'] / base['most_tree_peak_rss_mib']:.2f} |"
        )
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "arenas.json").write_text(json.dumps(document, indent=1) + "\n")
    (options.out / "arenas.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
