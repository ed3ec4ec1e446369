"""Deviceless compile time per backend, fieldmem against the naive script, and the 256-chip pod example.

Part 1: for each backend (``cpu``, ``gpu:h100``, ``tpu:v5e``), ``fieldmem check``
of the bundled examples (5 targets, 10 compiles) against
``naive.py --backend BACKEND`` doing the same compiles by hand; each
measurement a fresh process, the two alternating, repeated; the ratio of
medians is what to read (both include starting jax and, for a TPU, libtpu).

Part 2: ``fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16``
(a 7B-parameter train step on 256 chips, all ShapeDtypeStructs) with its
default ``--jobs`` (the two variants compile at once) and with ``--jobs 1`` (one
after the other), and ``naive.py --backend pod``, alternating, ``--pod-repeat``
times: medians of the wall time, the peak resident memory of the largest
process (``os.wait4``) and of all the run's processes together (sampled from
``/proc``), and the per-chip figures fieldmem reported.

Writes ``benchmarks/results/backends.json`` and ``backends.md`` from it, through ``runner.py``: the run
becomes the current one and the one it replaces joins the JSON's ``history`` (its date, machine and ratios).
A part measured alone (``--pod-only``, ``--no-pod``) never replaces a complete run: it joins the history.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
EXAMPLES = ["examples/field.py", "examples/sparse_row.py", "examples/stencil_scan.py", "examples/optimizer.py"]
BACKENDS = ["cpu", "gpu:h100", "tpu:v5e"]
POD = "examples/pod/train_step.py"
POD_BACKEND = "tpu:v5e:16x16"


TREE_SAMPLE_SECONDS = 0.02  # how often the resident memory of a measured process tree is summed


def _tree_resident(root: int) -> int:
    """The resident bytes of ``root`` and every process under it, now (``/proc``: 0 where unreadable)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                # the command name may hold spaces and parentheses: the fields follow the last ")"
                parents[int(entry)] = int(file.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    total = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm") as file:
                total += int(file.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def measured_tree(command: list[str], root: Path = ROOT) -> tuple[float, float, float]:
    """Run ``command`` in a fresh process: (wall seconds, peak resident MiB of the largest process,
    peak resident MiB of the process and its children together, sampled every ``TREE_SAMPLE_SECONDS``).

    The largest process (``ru_maxrss`` from ``os.wait4``: the most any one of them held) undercounts a
    tool that runs in several processes (fieldmem's parent beside its worker); the sum is what the
    machine gave the run, read from ``/proc`` (a sample can miss a peak shorter than its period). ``root``: the
    checkout whose fieldmem runs (first on ``PYTHONPATH``, the working directory).
    """
    import threading

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(TREE_SAMPLE_SECONDS):
            peak[0] = max(peak[0], _tree_resident(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    errors = child.stderr.read()  # read until it exits, so a chatty child never blocks
    done.set()
    sampler.join()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        tail = errors.decode(errors="replace").strip().splitlines()[-3:]
        raise runner.BenchError(f"{' '.join(command)} failed ({child.returncode}): {' | '.join(tail)}")
    return seconds, usage.ru_maxrss / 1024, peak[0] / 2**20  # ru_maxrss is in KiB on Linux


def measured(command: list[str]) -> tuple[float, float]:
    """Run ``command`` in a fresh process: (wall seconds, peak resident MiB of its largest process)."""
    seconds, largest, _ = measured_tree(command)
    return seconds, largest


def fieldmem_command(targets: list[str], backend: str, output: str, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "fieldmem", "check", *targets, "--backend", backend),
        *("-f", "json", "-o", output, "--no-cache", *extra),
    ]


def per_backend(repeat: int, scratch: Path, flags: tuple[str, ...] = ("-j", "1")) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for backend in BACKENDS:
        runs: dict[str, list[float]] = {"naive": [], "fieldmem": []}
        for _ in range(repeat):
            runs["naive"].append(measured([sys.executable, "benchmarks/naive.py", "--backend", backend])[0])
            command = fieldmem_command(EXAMPLES, backend, str(scratch / "examples.json"), *flags)
            runs["fieldmem"].append(measured(command)[0])
        naive, fieldmem = statistics.median(runs["naive"]), statistics.median(runs["fieldmem"])
        found[backend] = {
            "naive_s": round(naive, 2),
            "fieldmem_s": round(fieldmem, 2),
            "ratio": round(fieldmem / naive, 2),
            "runs": {k: [round(v, 2) for v in values] for k, values in runs.items()},
        }
        print(f"{backend}: fieldmem {fieldmem:.2f} s, naive {naive:.2f} s, ratio {fieldmem / naive:.2f}", flush=True)
    return found


def pod(scratch: Path, devices: int | None, repeat: int = 1) -> dict[str, Any]:
    report_path = scratch / "pod.json"
    extra = ["--devices", str(devices)] if devices else []
    commands = {
        "naive": [sys.executable, "benchmarks/naive.py", "--backend", "pod"],
        "fieldmem": fieldmem_command([POD], POD_BACKEND, str(report_path), *extra),
        "fieldmem_jobs1": fieldmem_command([POD], POD_BACKEND, str(scratch / "pod-jobs1.json"), *extra, "-j", "1"),
    }
    walls: dict[str, list[float]] = {who: [] for who in commands}
    rss: dict[str, float] = dict.fromkeys(commands, 0.0)
    tree: dict[str, float] = dict.fromkeys(commands, 0.0)
    for _ in range(repeat):
        for who, command in commands.items():
            seconds, peak, together = measured_tree(command)
            walls[who].append(round(seconds, 1))
            rss[who] = max(rss[who], peak)
            tree[who] = max(tree[who], together)
            print(f"pod: {who} {seconds:.1f} s, {peak:.0f} MiB (all its processes: {together:.0f} MiB)", flush=True)
    seconds, naive_seconds = statistics.median(walls["fieldmem"]), statistics.median(walls["naive"])
    jobs1_seconds = statistics.median(walls["fieldmem_jobs1"])
    report = json.loads(report_path.read_text())
    [result] = report["results"]
    if result["status"] != "ok":
        raise runner.BenchError(f"the pod example could not be checked: {result.get('error')}")
    figures = {}
    for variant in ("plain", "donated"):
        memory = result["variants"][variant]["memory"]
        figures[variant] = {
            k: memory[k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "footprint_bytes")
        } | {"live_peak_bytes": memory.get("live_peak_bytes")}
    deviceless = report.get("deviceless") or {}
    parameters = pod_parameters()
    return {
        "backend": POD_BACKEND,
        "chips": deviceless.get("chips"),
        "device_kind": deviceless.get("device_kind"),
        "parameters": parameters,
        "parameters_billions": round(parameters / 1e9, 2),
        "repeat": repeat,
        "runs_s": walls,
        "fieldmem_s": round(seconds, 1),
        "fieldmem_peak_rss_mib": round(rss["fieldmem"]),
        "fieldmem_jobs1_s": round(jobs1_seconds, 1),
        "fieldmem_jobs1_peak_rss_mib": round(rss["fieldmem_jobs1"]),
        "naive_s": round(naive_seconds, 1),
        "naive_peak_rss_mib": round(rss["naive"]),
        # the process and its children together (fieldmem's parent with its worker), sampled
        "tree_sample_s": TREE_SAMPLE_SECONDS,
        "fieldmem_tree_peak_rss_mib": round(tree["fieldmem"]),
        "fieldmem_jobs1_tree_peak_rss_mib": round(tree["fieldmem_jobs1"]),
        "naive_tree_peak_rss_mib": round(tree["naive"]),
        "ratio": round(seconds / naive_seconds, 2),
        "jobs1_ratio": round(jobs1_seconds / naive_seconds, 2),
        "compile_s": {v: result["variants"][v]["compile_seconds"] for v in ("plain", "donated")},
        "verdict": result["verdict"]["summary"],
        "in_place": result["verdict"]["in_place"],
        "per_chip": figures,
        "per_chip_mib": {
            v: {k: None if b is None else round(b / 2**20, 1) for k, b in f.items()} for v, f in figures.items()
        },
    }


def pod_parameters() -> int:
    """The pod example's parameter count, from its own arguments (ShapeDtypeStructs: nothing allocated)."""
    count = "import sys; sys.path.insert(0, 'examples/pod'); import train_step; print(train_step.parameter_count())"
    done = subprocess.run([sys.executable, "-c", count], cwd=ROOT, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def headline(document: dict[str, Any]) -> dict[str, Any]:
    """A run's headline figures: fieldmem / naive per backend and for the pod (default and ``--jobs 1``)."""
    figures: dict[str, Any] = {f"{b}: fieldmem / naive": row["ratio"] for b, row in document["backends"].items()}
    pod_row = document.get("pod")
    if pod_row:
        figures["pod: fieldmem / naive"] = pod_row.get("ratio")
        if "jobs1_ratio" in pod_row:
            figures["pod, --jobs 1: fieldmem / naive"] = pod_row["jobs1_ratio"]
        figures["pod: naive (s)"] = pod_row.get("naive_s")
    return figures


def _measured(document: dict[str, Any]) -> str:
    return "the pod alone" if not document["backends"] else "the bundled examples alone"


def markdown(document: dict[str, Any], title: bool = True) -> str:
    """``backends.md`` (its current run); without ``title`` (its heading, date and machine), the tables alone, for a
    report that says those itself (``bench_fast.py``)."""
    lines = (
        [
            "# Deviceless compile time per backend: fieldmem vs the naive script",
            "",
            f"- date: {document['date']}",
            f"- machine: {document['machine']}; jax {document['jax']}",
        ]
        if title
        else []
    )
    if document["backends"]:
        lines += [
            f"- bundled examples: {', '.join(EXAMPLES)} (5 targets, 10 compiles); "
            f"{document['repeat']} alternating runs, fresh process each",
            "",
            "| backend | naive median (s) | fieldmem median (s) | fieldmem / naive |",
            "|---|---:|---:|---:|",
        ]
    for backend, row in document["backends"].items():
        lines.append(f"| {backend} | {row['naive_s']:.2f} | {row['fieldmem_s']:.2f} | {row['ratio']:.2f} |")
    pod_row = document.get("pod")
    if pod_row:
        lines += [
            "",
            f"## Pod: `{POD}` on `{pod_row['backend']}` ({pod_row['chips']} chips, {pod_row['device_kind']})",
            "",
            *_pod_table(pod_row),
            "",
            f"Verdict: {pod_row['verdict']}",
            "",
            "| per chip (MiB) | argument | output | alias | temp | footprint | live peak |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for variant, f in pod_row["per_chip_mib"].items():
            lines.append(
                f"| {variant} | {f['argument_bytes']} | {f['output_bytes']} | {f['alias_bytes']} | {f['temp_bytes']} "
                f"| {f['footprint_bytes']} | {f['live_peak_bytes']} |"
            )
    return "\n".join(lines) + "\n"


def _pod_table(row: dict[str, Any]) -> list[str]:
    """The pod's runs: wall time and peak RSS (of all a run's processes together, where it was measured)."""
    together = "fieldmem_tree_peak_rss_mib" in row
    if "repeat" not in row:  # the first layout: one run of each, not alternated (2026-12-03)
        return [
            "| run | wall (s) | peak RSS (MiB) |",
            "|---|---:|---:|",
            f"| fieldmem check | {row['fieldmem_s']:.1f} | {row['fieldmem_peak_rss_mib']} |",
            f"| naive (2 compiles by hand) | {row['naive_s']:.1f} | {row['naive_peak_rss_mib']} |",
        ]
    runs = [("fieldmem check (variants compiled at once)", "fieldmem", row["ratio"])]
    if "fieldmem_jobs1_s" in row:
        runs.append(("fieldmem check -j 1 (one after the other)", "fieldmem_jobs1", row["jobs1_ratio"]))
    runs.append(("naive (2 compiles by hand, one after the other)", "naive", 1.0))
    if not together:  # results from before the process tree was sampled
        lines = [
            f"Medians of {row.get('repeat', 1)} alternating runs; peak RSS: the largest.",
            "",
            "| run | wall (s) | peak RSS (MiB) | / naive |",
            "|---|---:|---:|---:|",
        ]
        return lines + [
            f"| {words} | {row[f'{who}_s']:.1f} | {row[f'{who}_peak_rss_mib']} | {ratio:.2f} |"
            for words, who, ratio in runs
        ]
    lines = [
        f"Medians of {row.get('repeat', 1)} alternating runs; peak RSS: the most over the runs, of the largest "
        f"process (`ru_maxrss`) and of all the run's processes together (sampled every {row['tree_sample_s']:g} s).",
        "",
        "| run | wall (s) | / naive | peak RSS, all processes (MiB) | peak RSS, largest process (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    return lines + [
        f"| {words} | {row[f'{who}_s']:.1f} | {ratio:.2f} | {row[f'{who}_tree_peak_rss_mib']} | {row[f'{who}_peak_rss_mib']} |"
        for words, who, ratio in runs
    ]


BENCHMARK = runner.Benchmark(
    "backends",
    lambda document: markdown(document),
    headline,
    complete=lambda document: bool(document["backends"]) and bool(document.get("pod")),
    partial=_measured,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-pod", action="store_true", help="leave out the pod example")
    parser.add_argument("--pod-only", action="store_true", help="only the pod example")
    parser.add_argument("--pod-devices", type=int, default=None, help="pass --devices N to the pod check")
    parser.add_argument("--pod-repeat", type=int, default=3, help="alternating runs of each pod command")
    args = parser.parse_args()
    import jax

    date = datetime.date.today().isoformat()
    document: dict[str, Any] = {
        "date": date,
        "machine": f"{platform.machine()}, {runner.label()}, Python {platform.python_version()}",
        "machine_figures": runner.describe(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "jax": jax.__version__,
        "repeat": args.repeat,
        "backends": {},
    }
    try:
        with tempfile.TemporaryDirectory() as scratch:
            if not args.pod_only:
                document["backends"] = per_backend(args.repeat, Path(scratch))
            if not args.no_pod:
                document["pod"] = pod(Path(scratch), args.pod_devices, args.pod_repeat)
    except runner.BenchError as exc:  # nothing written: a run without its figures replaces none
        raise SystemExit(f"bench_backends: error: {exc}") from None
    runner.write(RESULTS, BENCHMARK, document)
    print(markdown(document))
    print(f"written: {(RESULTS / 'backends.json').relative_to(ROOT)}, {(RESULTS / 'backends.md').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
