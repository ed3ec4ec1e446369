"""A target's result as JSON: msgspec against Python's JSON and fieldmem's codec.

Until issue 26's second pass a worker sent each target's result to its parent as
one line of JSON; it now sends readings (``fieldmem.engine.protocol``), and results
are made in the parent. This still times both ways of writing and reading a result
(what the JSON report and the baseline read back), kept for its recorded figures,
on real results: ``fieldmem check`` of a ``synth.py`` module of 1,000 and 5,000
leaves (one function, ``--jobs 1``), read back from its JSON report.

- **write** (the worker): ``encode_json(codec.encode(result))`` against
  ``msgspec.json.encode(result)``;
- **read** (the parent): ``json.loads`` + ``codec.decode`` against
  ``msgspec.json.decode`` + ``msgspec.convert``, what ``read_event`` and
  ``decode_result`` do.

Each is timed in a fresh process, with the collector paused as the worker and
the parent pause it: its first call (what one check pays: the codec's and
msgspec's decoders are built then) and the best of 7 after.

Usage: ``python benchmarks/bench_wire.py [--out benchmarks/results]``.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import write_module

ROOT = Path(__file__).resolve().parent.parent
LEAVES = (1000, 5000)

TIMER = r"""
import json, sys, time
import dataclasses
from fieldmem.report import Chain, Report, TargetResult
from fieldmem.codec import decode, encode

@dataclasses.dataclass(frozen=True)
class WorkerResult:  # what a worker sent for one target until issue 26's second pass
    results: tuple[TargetResult, ...]
    chains: tuple[Chain, ...] = ()

encode_json = json.JSONEncoder(separators=(",", ":")).encode

report = Report.from_dict(json.load(open(sys.argv[1])))
written = WorkerResult(tuple(report.results))
line = encode_json(encode(written))
import msgspec, msgspec.json

ways = {
    "write: codec + json": lambda: encode_json(encode(written)),
    "write: msgspec": lambda: msgspec.json.encode(written),
    "read: json + codec": lambda: decode(WorkerResult, json.loads(line)),
    "read: msgspec": lambda: msgspec.convert(msgspec.json.decode(line), WorkerResult),
}
out = {"bytes": len(line)}
from fieldmem.collector import collector_paused

for way in sys.argv[2:]:
    with collector_paused():  # as the worker writes and the parent reads: records only, no collector pass
        start = time.perf_counter()
        ways[way]()
        first = time.perf_counter() - start
        best = float("inf")
        for _ in range(7):
            start = time.perf_counter()
            ways[way]()
            best = min(best, time.perf_counter() - start)
    out[way] = {"first_s": round(first, 5), "best_s": round(best, 5)}
assert ways["read: msgspec"]() == ways["read: json + codec"]() == written  # after the timing: first calls stay first
print(json.dumps(out))
"""

WAYS = ("write: codec + json", "write: msgspec", "read: json + codec", "read: msgspec")


def report_of(leaves: int, folder: Path) -> Path:
    module = write_module(folder / f"wire_{leaves}.py", functions=1, chain=1, leaves=leaves, size=8, salt=leaves)
    out = folder / f"wire_{leaves}.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "fieldmem", "check", str(module), "-f", "json", "-o", str(out), "--jobs", "1"]
    subprocess.run(cmd, env=env, check=False, capture_output=True, cwd=folder)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ns = parser.parse_args()
    import msgspec

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for leaves in LEAVES:
            path = report_of(leaves, Path(tmp))
            row: dict[str, object] = {"leaves": leaves}
            for way in WAYS:  # each in a process of its own: its first call is a check's
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                done = subprocess.run(
                    [sys.executable, "-c", TIMER, str(path), way], env=env, capture_output=True, text=True, check=True
                )
                figures = json.loads(done.stdout)
                row["bytes"] = figures["bytes"]
                row[way] = figures[way]
            # written once and read once, as one check does: the first calls
            row["first_s"] = {
                "json + codec": round(sum(row[w]["first_s"] for w in WAYS[::2]), 5),  # type: ignore[index]
                "msgspec": round(sum(row[w]["first_s"] for w in WAYS[1::2]), 5),  # type: ignore[index]
            }
            rows.append(row)
    import jax

    data = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()},
        "python": platform.python_version(),
        "jax": jax.__version__,
        "msgspec": msgspec.__version__,
        "rows": rows,
    }
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "wire.json").write_text(json.dumps(data, indent=1) + "\n")
    lines = [
        "# A worker's answer on the pipe: msgspec against Python's JSON and fieldmem's codec",
        "",
        f"- date: {data['date']}; machine: {data['machine']['processor']}, {data['machine']['cpus']} cores; "
        f"Python {data['python']}; jax {data['jax']}; msgspec {data['msgspec']}",
        "- a result of `fieldmem check` (one function, `--jobs 1`) of a `synth.py` module; each way timed in a "
        "fresh process: its first call, then the best of 7",
        "",
        "| leaves | JSON bytes | way | first call (ms) | best (ms) |",
        "|---:|---:|---|---:|---:|",
    ]
    for row in rows:
        for way in WAYS:
            figures = row[way]
            assert isinstance(figures, dict)
            lines.append(
                f"| {row['leaves']} | {row['bytes']} | {way} | {figures['first_s'] * 1000:.1f} | "
                f"{figures['best_s'] * 1000:.1f} |"
            )
    for row in rows:
        old, new = row["first_s"]["json + codec"], row["first_s"]["msgspec"]  # type: ignore[index]
        lines.append("")
        lines.append(
            f"{row['leaves']} leaves, written and read once (first calls): {old * 1000:.1f} ms by JSON and the "
            f"codec, {new * 1000:.1f} ms by msgspec ({new / old:.2f})"
        )
    (ns.out / "wire.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
