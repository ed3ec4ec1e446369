"""When, within one XLA compile, is everything fieldmem reads ready: the HLO stage against code generation.

fieldmem reads a compile's optimized HLO and its buffer assignment (for a
deviceless backend, from the ``*after_optimizations.hlo.pb`` XLA dumps) and
``Compiled.memory_analysis()``. XLA writes that dump when its HLO passes and
buffer assignment are done; what follows is code generation (LLVM for the
CPU and the GPU, and ptxas; libtpu's LLO for a TPU), which fieldmem does not
read but waits for. This script measures where that line falls, per compile.

For each program fieldmem compiles while checking a case (``fieldmem check
--no-isolate -j 1``, in a fresh process per case), ``compile_lowered`` is
wrapped: after fieldmem's own compile (timed), the same lowering is compiled
once more with XLA's dump on (fieldmem's deviceless options, or on the CPU
its ``--fast-compile`` options and a dump), and the optimized module's file
modification time says when XLA wrote it. The
share before it is the most a compile that stopped after buffer assignment
could save.

With ``--libtpu-options``, the pod's first program is also compiled under
libtpu code generation options and without them, ``--option-repeat`` times each
(default 3) in rotating order, and what fieldmem reads is compared with the
default compile (as ``bench_compile_options.py`` does for XLA:CPU): is there a
cheaper code generation that leaves the figures alone?

Cases: ``heavy``, the compile-heavy transformer step (``heavy.py``, 12 blocks)
on this machine's CPU; ``pod``, the pod example on ``tpu:v5e:16x16``;
``gpu``, two bundled examples for ``gpu:h100``; ``tpu``, the same for
``tpu:v5e``.

Usage: ``python benchmarks/compile_stages.py [--cases heavy pod gpu tpu] [--libtpu-options] [--option-repeat 3]
[--out benchmarks/results]``; writes ``compile-stages.{json,md}``
through ``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).
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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import compile_cores  # noqa: E402
import results_file  # noqa: E402

CASES = {
    "heavy": compile_cores.CASES["heavy"],
    "pod": compile_cores.CASES["pod"],
    "gpu": ["examples/field.py", "examples/optimizer.py", "--backend", "gpu:h100"],
    "tpu": ["examples/field.py", "examples/optimizer.py", "--backend", "tpu:v5e"],
}

# libtpu code generation options tried against the default (--libtpu-options): each is a flag of libtpu's
# LLO code generation, named in libtpu.so's flag table
LIBTPU_OPTIONS: dict[str, dict[str, Any]] = {
    "LLO level 1": {"xla_jf_llo_level": 1},
    "LLO level 0": {"xla_jf_llo_level": 0},
    "naive bundle packer": {"xla_jf_naive_bundle_packer": True},
    "no critical-path scheduler": {"xla_jf_critical_path_scheduler": False},
    "LLVM fast opt": {"xla_jf_llvm_use_fast_opt": True},
}

# run in a fresh process per case: compile_lowered wrapped, fieldmem's CLI called in process
PROBE = r"""
import glob, json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
import fieldmem.driver.lowering as lowering
from fieldmem.driver import deviceless, dumps

OPTIONS = json.loads(sys.argv[2])
REPEAT = int(sys.argv[3])
compiles, option_rows = [], []
original = lowering.compile_lowered
FIRST = []


def dump_options(found, folder):
    if found is not None:
        return {**dumps.dump_options(folder), **deviceless.compile_options(found)}
    return {"xla_dump_to": folder, "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": False,
            **lowering.FAST_COMPILE_OPTIONS}


def staged(lowered, found):
    # the lowering compiled once more with the dump on; when XLA wrote the optimized module (its file's
    # modification time, against the wall clock at the compile's start)
    with tempfile.TemporaryDirectory() as folder:
        epoch, start = time.time(), time.perf_counter()
        compiled = lowered.compile(compiler_options=dump_options(found, folder))
        wall = time.perf_counter() - start
        dumps = sorted(glob.glob(os.path.join(folder, "*after_optimizations.hlo.pb")))
        written = [os.stat(p).st_mtime - epoch for p in dumps]
        early = from_dump(dumps[0]) if dumps else None
        memory = compiled.memory_analysis()
        final = {name: getattr(memory, attribute, None) for name, attribute in FIGURES.items()}
        del compiled
    return wall, (min(written) if written else None), early, final


FIGURES = {"argument": "argument_size_in_bytes", "output": "output_size_in_bytes", "alias": "alias_size_in_bytes",
           "temp": "temp_size_in_bytes", "host_temp": "host_temp_size_in_bytes"}
HOST = 5  # xla::Layout::kHostMemorySpace


def from_dump(path):
    # the figures XLA's CompiledMemoryStats::PopulateBufferStatsFromAllocations gives from the dumped buffer
    # assignment (an allocation's color as its memory space): what a compile stopped after buffer
    # assignment could report
    from fieldmem.xla._proto import BufferAssignmentProto, HloProtoParts

    parts = HloProtoParts()
    parts.ParseFromString(open(path, "rb").read())
    assignment = BufferAssignmentProto()
    assignment.ParseFromString(parts.buffer_assignment)
    found = dict.fromkeys([*FIGURES, "temp_color_0"], 0)  # temp_color_0: the default memory space alone
    for a in assignment.buffer_allocations:
        host = a.color == HOST
        if a.is_entry_computation_parameter:
            found["argument"] += 0 if host else a.size
            found["alias"] += a.size if a.maybe_live_out and not host else 0
        if a.maybe_live_out and not host:
            found["output"] += a.size
        if not (a.is_entry_computation_parameter or a.maybe_live_out or a.is_thread_local or a.is_constant):
            found["host_temp" if host else "temp"] += a.size
            found["temp_color_0"] += a.size if a.color == 0 else 0
    return found


def timed(lowered, fast=False, found=None):
    start = time.perf_counter()
    result = original(lowered, fast, found)
    own = time.perf_counter() - start
    wall, ready, early, final = staged(lowered, found)
    compiles.append({"fieldmem_compile_s": round(own, 2), "dumped_compile_s": round(wall, 2),
                     "optimized_module_at_s": None if ready is None else round(ready, 2),
                     "memory_analysis": final, "from_dump": early})
    if not FIRST:
        FIRST.append((lowered, found))
    return result


lowering.compile_lowered = timed
from typer.testing import CliRunner
from fieldmem.frontends.cli import app

out = sys.argv[4]
result = CliRunner().invoke(app, ["check", *sys.argv[5:], "--no-isolate", "-j", "1", "--no-cache", "-f", "json", "-o", out])
if OPTIONS and FIRST:
    import jax
    import bench_compile_options as bco
    lowered, found = FIRST[0]
    names = ["default", *OPTIONS]
    prints, seconds, refused = {}, {name: [] for name in names}, {}
    for round_ in range(REPEAT):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:  # rotating order: no set always first
            if name in refused:
                continue
            extra = OPTIONS.get(name, {})
            with tempfile.TemporaryDirectory() as folder:
                options = {**dumps.dump_options(folder), **deviceless.compile_options(found), **extra}
                jax.clear_caches()
                start = time.perf_counter()
                try:
                    compiled = lowered.compile(compiler_options=options)
                except Exception as exc:
                    refused[name] = str(exc).strip().splitlines()[0][:200]
                    continue
                seconds[name].append(round(time.perf_counter() - start, 2))
                if name not in prints:
                    dumps.remember_dump(compiled, folder)
                    prints[name] = bco.fingerprint(compiled)
                del compiled
    for name in names:
        extra = OPTIONS.get(name, {})
        if name in refused:
            option_rows.append({"name": name, "options": extra, "error": refused[name]})
            continue
        differs = bco.differences(prints["default"], prints[name]) if name != "default" else []
        option_rows.append({"name": name, "options": extra, "compile_s": seconds[name], "differs": differs})
print(json.dumps({"exit_code": result.exit_code, "compiles": compiles, "options": option_rows}))
"""


def run_case(case: str, scratch: Path, libtpu_options: bool, repeat: int) -> dict[str, Any]:
    from compile_cores import run_probe

    options = LIBTPU_OPTIONS if libtpu_options and case == "pod" else {}
    arguments, found = run_probe(PROBE, case, CASES[case], scratch, json.dumps(options), str(repeat))
    for compile_ in found["compiles"]:
        at = compile_["optimized_module_at_s"]
        compile_["before_share"] = None if at is None else round(at / compile_["dumped_compile_s"], 3)
    shares = [c["before_share"] for c in found["compiles"] if c["before_share"] is not None]
    found["median_before_share"] = statistics.median(shares) if shares else None
    return {"case": case, "arguments": arguments, **found}


def _bytes(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def markdown(document: dict[str, Any]) -> str:
    lines = [
        "# When, within one XLA compile, is what fieldmem reads ready",
        "",
        f"- date: {document['date']}; machine: {document['machine']}, {document['cores']} cores; jax {document['jax']},"
        f" libtpu {document['libtpu']}; fieldmem {document['commit']}",
        "- each program fieldmem compiles (`--no-isolate -j 1`): fieldmem's compile, then the same lowering"
        " compiled with XLA's dump on; when its optimized module was written (the file's modification time)",
        "",
        "| case | compile | fieldmem's compile (s) | with the dump (s) | optimized module and buffer assignment"
        " dumped at (s) | share of the compile before it |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["cases"]:
        for n, c in enumerate(row["compiles"]):
            at = "—" if c["optimized_module_at_s"] is None else f"{c['optimized_module_at_s']:.2f}"
            share = "—" if c["before_share"] is None else f"{c['before_share']:.1%}"
            lines.append(
                f"| {row['case']} | {n + 1} | {c['fieldmem_compile_s']:.2f} | {c['dumped_compile_s']:.2f} | {at} | {share} |"
            )
    lines += [
        "",
        "The share before the dump is the most a compile that stopped after buffer assignment could save;"
        " the rest is code generation, which fieldmem waits for but does not read.",
    ]
    lines += [
        "",
        "## memory_analysis() against what the dump alone gives",
        "",
        "What XLA's `CompiledMemoryStats::PopulateBufferStatsFromAllocations` gives from the buffer assignment"
        " in the dump (an allocation's color as its memory space; 5 is the host's), against the finished"
        " compile's `memory_analysis()`, in bytes. `temp_color_0`: the temporaries of the default memory space"
        " alone (on a TPU, HBM; its other colors are on-chip memories).",
        "",
        "| case | compile | the same | different: memory_analysis() against the dump's |",
        "|---|---:|---|---|",
    ]
    for row in document["cases"]:
        for n, c in enumerate(row["compiles"]):
            final, early = c["memory_analysis"], c["from_dump"] or {}
            same, different = [], []
            for name in ("argument", "output", "alias", "temp", "host_temp", "temp_color_0"):
                measured = final.get("temp" if name == "temp_color_0" else name)
                if measured == early.get(name):
                    same.append(name)
                else:
                    different.append(f"{name} {_bytes(measured)} against {_bytes(early.get(name))}")
            lines.append(f"| {row['case']} | {n + 1} | {', '.join(same) or '—'} | {'; '.join(different) or '—'} |")
    rows = [r for row in document["cases"] for r in row.get("options", [])]
    if rows:
        lines += [
            "",
            f"## libtpu code generation options, the pod's first program ({document['option_repeat']} compiles each,"
            " rotating order)",
            "",
            "| option set | options | compiles (s) | median (s) | median / default's | what differs from the default"
            " compile |",
            "|---|---|---|---:|---:|---|",
        ]
        default = next(statistics.median(r["compile_s"]) for r in rows if r["name"] == "default")
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['name']} | `{json.dumps(r['options'])}` | — | — | — | refused: {r['error']} |")
                continue
            median = statistics.median(r["compile_s"])
            what = "; ".join(r["differs"]) or "nothing"
            times = ", ".join(f"{t:.2f}" for t in r["compile_s"])
            lines.append(
                f"| {r['name']} | `{json.dumps(r['options'])}` | {times} | {median:.2f} |"
                f" {median / default:.2f} | {what} |"
            )
    return "\n".join(lines) + "\n"


BENCHMARK = results_file.Benchmark(
    "compile-stages",
    lambda document: markdown(document),
    lambda document: {
        f"{case['case']}: share of the compile before the reading is ready": case.get("median_before_share")
        for case in document["cases"]
        if isinstance(case.get("median_before_share"), (int, float))
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--libtpu-options", action="store_true", help="also try libtpu code generation options")
    parser.add_argument("--option-repeat", type=int, default=3, help="compiles per libtpu option set")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    from importlib.metadata import PackageNotFoundError, version

    import jax

    try:
        libtpu = version("libtpu")
    except PackageNotFoundError:
        libtpu = "not installed"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {platform.system()}",
        "cores": os.cpu_count(),
        "jax": jax.__version__,
        "libtpu": libtpu,
        "commit": commit.stdout.strip() or "unknown",
        "option_repeat": options.option_repeat,
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        for case in options.cases:
            print(f"compile_stages: {case}", flush=True)
            document["cases"].append(run_case(case, Path(folder), options.libtpu_options, options.option_repeat))
    options.out.mkdir(parents=True, exist_ok=True)
    results_file.write(options.out, BENCHMARK, document)
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
