"""The pod check with ``--jobs 1`` by glibc malloc arenas, against the naive script.

fieldmem's worker asks glibc for one malloc arena per usable core (at least two) when
it compiles one program at a time (``fieldmem.worker.main.fewer_malloc_arenas``,
``fieldmem.model.machine.malloc_arenas``). This script measures what that changes, on the pod
example (``tpu:v5e:16x16``), in one run, alternating, each a fresh process:

- ``naive``: ``naive_backends.py pod``, the two compiles by hand;
- ``fieldmem -j 1``: as fieldmem runs (its own rule);
- ``fieldmem -j 1, MALLOC_ARENA_MAX=N``: the same with each setting of ``--arenas`` (a
  number, ``cores`` or ``glibc``: 8 per core, glibc's own default), which fieldmem leaves as
  it is;
- ``fieldmem, default --jobs`` (``--default-jobs``): the two variants at once;
- ``fieldmem -j 1 at COMMIT`` (``--against CHECKOUT``): another checkout's fieldmem;
- ``naive, MALLOC_ARENA_MAX=N`` (``--naive-arenas``): the allocator setting by hand.

Per run: the wall seconds, the seconds fieldmem's report gives its two compiles, and the
peak resident memory of all the run's processes together (``bench_backends.measured_tree``).
Medians of the walls, the most of the memories, each over the naive script's. Writes
``results/NAME.{json,md}`` (``--name``; default ``arenas-<cores>cores``: one file per machine), naming the
machine, through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).

``--small``: instead, what the setting costs a small check, where fieldmem's own
work is most of the time: ``fieldmem check -j 1 --no-cache`` of a synthetic module
(``synth.py``, one function, 1 and 1,000 leaves of f32[8,8], a fresh module per run),
with fieldmem's arenas and with glibc's default, alternating, ``--repeat`` runs each (default
12). Writes ``results/arenas-small.{json,md}``.

    python benchmarks/bench_arenas.py [--repeat 3] [--arenas 2 cores glibc] [--default-jobs]
        [--against CHECKOUT] [--name NAME] [--small]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
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
import machine  # noqa: E402
import results_file  # noqa: E402

POD = "examples/pod/train_step.py"


def _meta(repeat: int) -> dict[str, Any]:
    import jax

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.label(),
        "machine_figures": machine.describe(),
        "jax": jax.__version__,
        "commit": machine.commit(ROOT),
        "repeat": repeat,
    }


def small_markdown(document: dict[str, Any]) -> str:
    """``arenas-small.md`` of a run, from its JSON document alone."""
    lines = [
        "# A small check, `--jobs 1`: two malloc arenas against glibc's default",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; jax {document['jax']}; fieldmem"
        f" {document['commit']}",
        f"- {document['repeat']} alternating runs each, fresh processes and a fresh module per run; wall seconds",
        "",
        "| module | two arenas, median (s) | glibc's arenas, median (s) | two / glibc's |",
        "|---|---:|---:|---:|",
    ]
    for case, m in document["median_wall_s"].items():
        two, glibc = m["two arenas"], m["glibc's arenas"]
        lines.append(f"| {case} | {two:.3f} | {glibc:.3f} | {two / glibc:.2f} |")
    return "\n".join(lines) + "\n"


SMALL = results_file.Benchmark(
    "arenas-small",
    small_markdown,
    lambda document: {
        f"{case}: two / glibc's arenas": round(m["two arenas"] / m["glibc's arenas"], 3)
        for case, m in document["median_wall_s"].items()
    },
)


def pod_markdown(document: dict[str, Any]) -> str:
    """``arenas-<N>cores.md`` (or ``--name``'s) of a run, from its JSON document alone."""
    if "wall_over_naive" not in document["runs"]["naive"]:
        return _first_pod_markdown(document)
    lines = [
        "# The pod check, `--jobs 1`, by malloc arenas, against the naive script",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; jax {document['jax']}; fieldmem"
        f" {document['commit']}" + (f" ({document['commit_note']})" if document.get("commit_note") else ""),
        f"- {document['repeat']} alternating runs each, fresh processes; memory: all of a run's processes together,"
        " sampled every 0.02 s, the most over the runs; compiles: the seconds fieldmem's report gives its two"
        f" compiles, added; glibc's default here: {document['glibc_default_arenas']} arenas (8 per core)",
        "",
        "| run | walls (s) | median / naive | compiles (s) | peak RSS, all processes (MiB) | most / naive's most |",
        "|---|---|---:|---|---|---:|",
    ]
    for name, row in document["runs"].items():
        spent = ", ".join(f"{c:.1f}" for c in row.get("compile_s", [])) or "—"
        lines.append(
            f"| {name} | {', '.join(f'{w:.1f}' for w in row['wall_s'])} | {row['wall_over_naive']:.2f} | {spent} |"
            f" {', '.join(str(m) for m in row['tree_peak_rss_mib'])} | {row['rss_over_naive']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _first_pod_markdown(document: dict[str, Any]) -> str:
    """The first layout (2026-12-05, two arenas against glibc's): no compile seconds, ratios not stored."""
    naive = document["runs"]["naive"]
    lines = [
        "# The pod check, `--jobs 1`: two malloc arenas against glibc's default",
        "",
        f"- date: {document['date']}; machine: {document['machine']}; jax {document['jax']}; fieldmem"
        f" {document['commit']}",
        f"- {document['repeat']} alternating runs each, fresh processes; memory: all of a run's processes together,"
        " sampled every 0.02 s, the most over the runs",
        "",
        "| run | walls (s) | median / naive | peak RSS, all processes (MiB) | most / naive's most |",
        "|---|---|---:|---|---:|",
    ]
    for name, row in document["runs"].items():
        lines.append(
            f"| {name} | {', '.join(f'{w:.1f}' for w in row['wall_s'])} | "
            f"{row['median_wall_s'] / naive['median_wall_s']:.2f} | {', '.join(str(m) for m in row['tree_peak_rss_mib'])}"
            f" | {row['most_tree_peak_rss_mib'] / naive['most_tree_peak_rss_mib']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _pod_headline(document: dict[str, Any]) -> dict[str, Any]:
    """Each run's median wall and most memory over the naive script's (from the raw figures: every layout)."""
    runs, naive = document["runs"], document["runs"]["naive"]
    figures: dict[str, Any] = {}
    for run, row in runs.items():
        if run != "naive":
            figures[f"{run}: wall / naive"] = round(row["median_wall_s"] / naive["median_wall_s"], 3)
            figures[f"{run}: peak RSS / naive"] = round(
                row["most_tree_peak_rss_mib"] / naive["most_tree_peak_rss_mib"], 3
            )
    return figures


def benchmark(name: str) -> results_file.Benchmark:
    """The pod's result file ``name`` (one per machine: ``arenas-2cores``, ``pod-13cores``, ...)."""
    return results_file.Benchmark(
        name,
        pod_markdown,
        _pod_headline,
    )


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
    results_file.write(out, SMALL, document)
    print(small_markdown(document))
    return 0


def _setting(value: str, cores: int) -> str:
    """A ``MALLOC_ARENA_MAX`` setting as given (``2``, ``13``), ``cores`` or ``glibc`` (8 per core)."""
    return str(cores) if value == "cores" else str(8 * cores) if value == "glibc" else str(int(value))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--small", action="store_true", help="a small check's wall time instead of the pod")
    parser.add_argument(
        "--arenas",
        nargs="*",
        default=["2", "glibc"],
        help="MALLOC_ARENA_MAX settings for more `fieldmem -j 1` runs: a number, `cores` or `glibc` (8 per core)",
    )
    parser.add_argument("--default-jobs", action="store_true", help="also fieldmem with its default --jobs")
    parser.add_argument("--against", type=Path, default=None, help="also `fieldmem -j 1` of this checkout")
    parser.add_argument("--naive-arenas", nargs="*", default=[], help="MALLOC_ARENA_MAX settings for naive runs")
    parser.add_argument("--name", default=None, help="the result files' name (default arenas-<cores>cores)")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    cores = machine.describe()["cores"]
    glibc_default = str(8 * cores)
    if options.small:
        return small(options.repeat or 12, options.out, glibc_default)
    options.repeat = options.repeat or 3
    scratch = Path(tempfile.mkdtemp(prefix="fieldmem-arenas-"))

    def fieldmem(name: str, *extra: str) -> list[str]:
        return bench_backends.fieldmem_command([POD], "tpu:v5e:16x16", str(scratch / f"{name}.json"), *extra)

    naive = [sys.executable, "benchmarks/naive_backends.py", "pod"]
    # name: (command, environment, checkout, report file)
    runs: dict[str, tuple[list[str], dict[str, str], Path, str | None]] = {"naive": (naive, {}, ROOT, None)}
    runs["fieldmem -j 1"] = (fieldmem("j1", "-j", "1"), {}, ROOT, "j1")
    for value in options.arenas:
        setting = _setting(value, cores)
        key = f"a{setting}"
        runs[f"fieldmem -j 1, MALLOC_ARENA_MAX={setting}"] = (
            fieldmem(key, "-j", "1"),
            {"MALLOC_ARENA_MAX": setting},
            ROOT,
            key,
        )
    if options.default_jobs:
        runs["fieldmem, default --jobs"] = (fieldmem("default"), {}, ROOT, "default")
    if options.against is not None:
        against = options.against.resolve()
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=against, capture_output=True, text=True)
        label = commit.stdout.strip() or against.name
        runs[f"fieldmem -j 1 at {label}"] = (fieldmem("against", "-j", "1"), {}, against, "against")
    for value in options.naive_arenas:
        setting = _setting(value, cores)
        runs[f"naive, MALLOC_ARENA_MAX={setting}"] = (naive, {"MALLOC_ARENA_MAX": setting}, ROOT, None)
    walls: dict[str, list[float]] = {name: [] for name in runs}
    memory: dict[str, list[float]] = {name: [] for name in runs}
    compiles: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(options.repeat):
        for name, (command, environ, root, report) in runs.items():
            saved = os.environ.get("MALLOC_ARENA_MAX")
            os.environ.pop("MALLOC_ARENA_MAX", None)
            os.environ.update(environ)
            try:
                seconds, _, together = bench_backends.measured_tree(command, root=root)
            finally:
                os.environ.pop("MALLOC_ARENA_MAX", None)
                if saved is not None:
                    os.environ["MALLOC_ARENA_MAX"] = saved
            walls[name].append(round(seconds, 1))
            memory[name].append(round(together))
            if report is not None:  # the seconds fieldmem's report gives its two compiles, together
                [result] = json.loads((scratch / f"{report}.json").read_text())["results"]
                compiles[name].append(round(sum(v["compile_seconds"] for v in result["variants"].values()), 1))
            print(f"arenas: {name}: {seconds:.1f} s, {together:.0f} MiB", flush=True)
    rows = {
        name: {
            "wall_s": walls[name],
            "tree_peak_rss_mib": memory[name],
            "median_wall_s": statistics.median(walls[name]),
            "most_tree_peak_rss_mib": max(memory[name]),
            **({"compile_s": compiles[name]} if compiles[name] else {}),
        }
        for name in runs
    }
    base = rows["naive"]
    for row in rows.values():
        row["wall_over_naive"] = round(row["median_wall_s"] / base["median_wall_s"], 3)
        row["rss_over_naive"] = round(row["most_tree_peak_rss_mib"] / base["most_tree_peak_rss_mib"], 3)
    document: dict[str, Any] = {
        **_meta(options.repeat),
        "glibc_default_arenas": int(glibc_default),
        "runs": rows,
    }
    name = options.name or f"arenas-{cores}cores"
    results_file.write(options.out, benchmark(name), document)
    print(pod_markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
