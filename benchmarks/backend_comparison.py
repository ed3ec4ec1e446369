"""The backend comparison of docs/backends.md: ``examples/interior.py`` on cpu, gpu:h100 and tpu:v5e.

Runs ``fieldmem check examples/interior.py --backend cpu,gpu:h100,tpu:v5e``
(the table, then the side-by-side view, kept verbatim for the doc) with each
backend's JSON report, then ``fieldmem compare`` of the three reports, and
writes the figures the doc quotes and the two outputs to ``benchmarks/results/backend-comparison.json``,
and ``backend-comparison.md`` (dated) made from it, through ``results_file.py`` (the run replaces the
current one, which joins the JSON's ``history``).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

EXAMPLE = "examples/interior.py"
BACKENDS = ("cpu", "gpu:h100", "tpu:v5e")
MIB = 2**20


def fieldmem(*arguments: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "150"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", *arguments], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"fieldmem {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return done.stdout


def figures(report: dict[str, Any]) -> dict[str, Any]:
    [result] = report["results"]
    row: dict[str, Any] = {"verdict": result["verdict"]["summary"], "in_place": result["verdict"]["in_place"]}
    for variant in ("plain", "donated"):
        data = result["variants"][variant]
        memory = data["memory"]
        copies = [c for c in data["copies"] if c["bytes"] >= report.get("min_bytes", 0)]
        row[variant] = {
            "copies": len(copies),
            "copy_mib": round(sum(c["bytes"] for c in copies) / MIB, 1),
            "copy_kinds": sorted({c["kind"] for c in copies}),
            "xla_peak_mib": round(memory["peak_bytes"] / MIB, 1),
            "live_peak_mib": round(memory["live_peak_bytes"] / MIB, 1),
            "footprint_mib": round(memory["footprint_bytes"] / MIB, 1),
            "temp_bytes": memory["temp_bytes"],
        }
    return row


def markdown(document: dict[str, Any]) -> str:
    """``backend-comparison.md`` of a run, from its JSON document alone: the two outputs it kept."""
    text = [
        f"# `{document['command']}` ({document['date']}, jax {document['jax']})",
        "",
        "```",
        document["check_output"],
        "```",
        "",
        "`fieldmem compare interior.cpu.json interior.gpu-h100.json interior.tpu-v5e.json`:",
        "",
        "```",
        document["compare_output"],
        "```",
        "",
    ]
    return "\n".join(text)


BENCHMARK = results_file.Benchmark(
    "backend-comparison",
    markdown,
    lambda document: {
        f"{backend}: plain XLA peak (MiB)": row["plain"]["xla_peak_mib"]
        for backend, row in document["backends"].items()
    },
)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "interior.json"
        check = fieldmem("check", EXAMPLE, "--backend", ",".join(BACKENDS), "-f", "json", "-o", str(output))
        files = [output.with_name(f"interior.{backend.replace(':', '-')}.json") for backend in BACKENDS]
        reports = {backend: json.loads(f.read_text()) for backend, f in zip(BACKENDS, files)}
        compare = fieldmem("compare", *map(str, files))
    compare = compare.replace(scratch + "/", "")
    date = datetime.date.today().isoformat()
    document = {
        "date": date,
        "command": f"fieldmem check {EXAMPLE} --backend {','.join(BACKENDS)}",
        "jax": reports["cpu"]["jax_version"],
        "backends": {backend: figures(report) for backend, report in reports.items()},
        "device_kinds": {b: (r.get("deviceless") or {}).get("device_kind") for b, r in reports.items()},
    }
    document["check_output"] = check.rstrip()
    document["compare_output"] = compare.rstrip()
    results_file.write(RESULTS, BENCHMARK, document)
    for backend, row in document["backends"].items():
        plain = row["plain"]
        print(
            f"{backend}: plain {plain['copies']} copies {plain['copy_mib']} MiB, XLA peak {plain['xla_peak_mib']} MiB"
        )


if __name__ == "__main__":
    main()
