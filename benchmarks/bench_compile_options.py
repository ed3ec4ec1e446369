"""Cheaper XLA compiler options for analysis: are they faster, and do they change anything fieldmem reads?

Every program fieldmem compiles while checking the bundled examples (plain,
donated, chain steps, fused chains, the advisor's verification compiles) and
the synthetic modules of ``synth.py`` is captured as a ``jax.stages.Lowered``.
Each one is then compiled under every option set below, in rotating order,
``REPEAT`` times, with jax's in-memory caches cleared before each compile (the
persistent cache is off). Per program and option set it records the compile
time and compares with the default compile:

- the optimized HLO text (``Compiled.as_text()``),
- every ``memory_analysis()`` figure fieldmem reports (``MEMORY_FIELDS``),
- the serialized buffer assignment proto, byte for byte,
- the instruction ids -> names that fieldmem.xla.buffers reads from the HLO module
  proto, and the whole proto byte for byte less its ``id`` (a per-process
  counter: it differs between two default compiles too).

A "default again" set is the control: what differs between two default
compiles is noise, not the option. Writes ``results/compile-options.{json,md}`` through
``results_file.py`` (the run replaces the current one, which joins the JSON's ``history``).

    python benchmarks/bench_compile_options.py [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

OPTION_SETS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "default again": None,
    "O0": {"xla_backend_optimization_level": 0},
    "O1": {"xla_backend_optimization_level": 1},
    "no expensive passes": {"xla_llvm_disable_expensive_passes": True},
    "O0 + no expensive passes": {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True},
}

EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.py")) + [str(ROOT / "examples" / "ci" / "model.py")]
SYNTH = [  # (functions, chain, leaves, size)
    (3, 10, 4, 128),
    (1, 50, 2, 256),
    (10, 20, 1, 64),
]


def capture(specs: list[str]) -> list[tuple[str, Any]]:
    """Every lowering fieldmem compiles while checking ``specs`` (suggest on), with a label."""
    from fieldmem.driver import lowering
    from fieldmem.parent.checker import check
    from fieldmem.request.options import CheckOptions

    captured: list[tuple[str, Any]] = []
    original = lowering.compile_lowered

    def recording(lowered: Any, *args: Any, **kwargs: Any) -> Any:
        captured.append((f"#{len(captured)}", lowered))
        return original(lowered, *args, **kwargs)

    lowering.compile_lowered = recording  # every compile of a check goes through it
    try:
        for spec in specs:
            start = len(captured)
            report = check([spec], options=CheckOptions(min_bytes=0, suggest=True))
            errors = [r.name for r in report.results if r.status == "error"]
            if errors:
                print(f"  {Path(spec).name}: errors in {errors}", file=sys.stderr)
            for i in range(start, len(captured)):
                captured[i] = (f"{Path(spec).name} #{i - start}", captured[i][1])
    finally:
        lowering.compile_lowered = original
    return captured


def fingerprint(compiled: Any) -> dict[str, Any]:
    from fieldmem.driver import read_memory
    from fieldmem.xla.buffers import decode_instruction_ids

    reading = read_memory(compiled)
    return {
        "hlo_text": compiled.as_text(),
        "figures": reading.figures,
        "buffer_assignment": reading.buffer_assignment,
        # what fieldmem reads from the module proto: instruction id -> (computation, name)
        "instruction_ids": decode_instruction_ids(reading.hlo_module_proto) if reading.hlo_module_proto else None,
        "hlo_module_proto": _without_id(reading.hlo_module_proto),
    }


def _without_id(proto: bytes | None) -> bytes | None:
    from fieldmem.xla._proto import HloModuleProto

    if proto is None:
        return None
    module = HloModuleProto()
    module.ParseFromString(proto)  # fields fieldmem does not declare are kept as unknown fields
    module.ClearField("id")
    return module.SerializeToString(deterministic=True)


def differences(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    found = []
    if base["hlo_text"] != other["hlo_text"]:
        found.append("hlo_text")
    for name, value in base["figures"].items():
        if other["figures"].get(name) != value:
            found.append(f"{name} ({value} -> {other['figures'].get(name)})")
    for key in ("buffer_assignment", "instruction_ids", "hlo_module_proto"):
        if base[key] != other[key]:
            found.append(key)
    return found


def markdown(document: dict[str, Any]) -> str:
    """``compile-options.md`` of a run, from its JSON document alone."""
    times, diffs = document["seconds"], document["differences"]
    names = list(document["option_sets"])
    medians = {label: {n: statistics.median(v) for n, v in per.items()} for label, per in times.items()}
    total = {n: sum(m[n] for m in medians.values()) for n in names}
    per_program_ratio = {n: statistics.median(m[n] / m["default"] for m in medians.values()) for n in names}
    big = [label for label, m in medians.items() if m["default"] >= 0.2]
    big_total = {n: sum(medians[label][n] for label in big) for n in names}

    lines = [
        f"# XLA compiler options for analysis — {len(times)} programs ({document['files']} files)",
        "",
        f"- date: {document['date']}; machine: {document['machine']}",
        f"- jax {document['jax']}; backend {document['backend']}; {document['repeat']} compiles per program and option set,"
        " rotating order, jax caches cleared before each",
        "",
        "| option set | total of medians (s) | vs default | median per-program ratio |"
        f" compiles ≥ 0.2 s ({len(big)}): total (s) | vs default | programs that differ | what differs |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n in names:
        what = sorted({d.split(" (")[0] for found in diffs[n].values() for d in found})
        lines.append(
            f"| {n} | {total[n]:.2f} | {total[n] / total['default']:.2f} | {per_program_ratio[n]:.2f} | "
            f"{big_total[n]:.2f} | {big_total[n] / big_total['default'] if big else float('nan'):.2f} | "
            f"{len(diffs[n])} / {len(times)} | {', '.join(what) or 'nothing'} |"
        )
    lines.append("")
    for n in names:
        for label, found in list(diffs[n].items())[:5]:
            lines.append(f"- {n}: {label}: {'; '.join(found)}")
    return "\n".join(lines) + "\n"


def _headline(document: dict[str, Any]) -> dict[str, Any]:
    """Each option set's total of medians over the default's."""
    medians = [{n: statistics.median(v) for n, v in per.items()} for per in document["seconds"].values()]
    total = {n: sum(m[n] for m in medians) for n in document["option_sets"]}
    return {f"{n}: total / default": round(total[n] / total["default"], 3) for n in total if n != "default"}


BENCHMARK = results_file.Benchmark("compile-options", markdown, _headline)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="examples only, 2 repeats")
    args = parser.parse_args()
    repeat = 2 if args.quick else args.repeat

    from fieldmem.driver import simulate_cpu_devices

    simulate_cpu_devices(4)  # examples/sharded.py as documented (4 simulated CPU devices)
    import jax

    from synth import write_module

    specs = list(EXAMPLES)
    tmp = Path(tempfile.mkdtemp(prefix="fieldmem-optbench-"))
    if not args.quick:
        for n, (functions, chain, leaves, size) in enumerate(SYNTH):
            specs.append(
                str(write_module(tmp / f"synth{n}.py", functions=functions, chain=chain, leaves=leaves, size=size))
            )

    print(f"capturing the lowerings of {len(specs)} files ...", file=sys.stderr)
    programs = capture(specs)
    print(f"{len(programs)} programs; compiling each {repeat}x under {len(OPTION_SETS)} option sets", file=sys.stderr)

    names = list(OPTION_SETS)
    times: dict[str, dict[str, list[float]]] = {label: {n: [] for n in names} for label, _ in programs}
    diffs: dict[str, dict[str, list[str]]] = {n: {} for n in names}
    for p, (label, lowered) in enumerate(programs):
        prints: dict[str, dict[str, Any]] = {}
        for r in range(repeat):
            shift = (p + r) % len(names)
            for name in names[shift:] + names[:shift]:
                options = OPTION_SETS[name]
                jax.clear_caches()
                start = time.perf_counter()
                # an explicit (empty) dict: a plain compile() returns the executable the lowering keeps
                compiled = lowered.compile(compiler_options=dict(options or {}))
                times[label][name].append(time.perf_counter() - start)
                if r == 0:
                    prints[name] = fingerprint(compiled)
                del compiled
        for name in names:
            found = differences(prints["default"], prints[name])
            if found:
                diffs[name][label] = found

    document = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "files": len(specs),
        "repeat": repeat,
        "option_sets": OPTION_SETS,
        "seconds": times,
        "differences": diffs,
    }
    results_file.write(ROOT / "benchmarks" / "results", BENCHMARK, document)
    print(markdown(document))


if __name__ == "__main__":
    main()
