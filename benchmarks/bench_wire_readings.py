"""A worker's readings through fieldmem's one codec: on the pipe, as a file would read them, and carefully.

Since issue 26's second pass the worker sends each compiled variant as a reading
(``fieldmem.model.readings.CompiledVariant``: HLO text, leaves, XLA figures, buffer
assignment bytes) and the parent rebuilds it; since its third, the pipe, the
report and the baseline share one codec (``fieldmem.model.codec``). This times, for the
donated variant of a function over 1,000 and 5,000 pytree leaves, compiled here:

- **write**: ``codec.dumps`` (what the worker writes; msgspec in C);
- **read: pipe**: ``msgspec.json.decode`` + ``protocol.decode_value`` (what the parent reads: no walk
  for integers past int64, every count being XLA's or jax's);
- **read: file**: ``json.loads`` + ``codec.decode`` (what the report and the baseline take: the walk included);
- **read: careful**: ``codec._decode``, the path-keeping reading a refused or newer document falls back to.

Best of 7 in one process, the collector paused as the worker and the parent pause it.
Writes ``results/wire-readings.{json,md}`` (through ``results_file.py``: the run replaces the current one,
which joins the JSON's ``history``); ``results/wire-readings-two-paths.md`` holds the figures of the
two paths before (msgspec for the pipe, a Python typed codec for files).

Usage: ``python benchmarks/bench_wire_readings.py [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

LEAVES = (1000, 5000)


def _best(action: Any, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - began)
    return best


def _reading(leaves: int) -> Any:
    import jax.numpy as jnp

    from fieldmem.driver import prepare_call, start_variants
    from fieldmem.request.spec import DonateSpec, StaticSpec

    def update(state: dict[str, Any], w: Any) -> dict[str, Any]:
        return {k: v * w for k, v in state.items()}

    args = ({f"leaf{i}": jnp.ones((4,)) for i in range(leaves)}, jnp.ones((4,)))
    call = prepare_call(update, args, {}, donate=DonateSpec(), static=StaticSpec())
    _, donated = start_variants(call, None).result()
    return donated.variant


def markdown(document: dict[str, Any]) -> str:
    """``wire-readings.md`` of a run, from its JSON document alone."""
    lines = [
        f"# A compiled variant's reading through the one codec ({document['date']}, best of 7)",
        "",
        "| leaves | JSON bytes | write | read: pipe | read: file | read: careful |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in document["rows"]:
        r = row["read_s"]
        lines.append(
            f"| {row['leaves']} | {row['bytes']} | {row['write_s'] * 1000:.1f} ms | {r['pipe'] * 1000:.1f} ms "
            f"| {r['file'] * 1000:.1f} ms | {r['careful'] * 1000:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


BENCHMARK = results_file.Benchmark(
    "wire-readings",
    markdown,
    lambda document: {
        f"{row['leaves']} leaves: {what} (s)": value
        for row in document["rows"]
        for what, value in [("write", row["write_s"]), *(("read, " + k, v) for k, v in row["read_s"].items())]
    },
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import msgspec

    from fieldmem.model import codec
    from fieldmem.model.collector import collector_paused
    from fieldmem.model.readings import CompiledVariant
    from fieldmem.worker.protocol import decode_value

    rows = []
    for leaves in LEAVES:
        variant = _reading(leaves)
        text = codec.dumps(variant)
        data = json.loads(text)
        assert codec.decode(CompiledVariant, data) == variant
        with collector_paused():
            row = {
                "leaves": leaves,
                "bytes": len(text),
                "hlo_text_bytes": len(variant.hlo_text),
                "write_s": round(_best(lambda v=variant: codec.dumps(v)), 5),
                "read_s": {
                    "pipe": round(_best(lambda t=text: decode_value(CompiledVariant, msgspec.json.decode(t))), 5),
                    "file": round(_best(lambda t=text: codec.decode(CompiledVariant, json.loads(t))), 5),
                    "careful": round(_best(lambda d=data: codec._decode(CompiledVariant, d)), 5),
                },
            }
        rows.append(row)
        print(row, flush=True)
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "rows": rows,
    }
    results_file.write(args.out, BENCHMARK, document)
    print(markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
