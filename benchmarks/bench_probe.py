"""What the in-place probe (``--probe``) measures on real updates, plain and donated, in one run.

For each update below, both variants are compiled and the slice update is
timed at its size and 4x larger (21 alternating runs by default, medians; one whole
call of the compiled program is what is timed), as
``fieldmem check --probe`` does for the donated variant. The plain variant
must copy its input first, so its time grows with the buffer: it is the
"whole buffer" reference the probe has to tell apart from a true slice
update. Writes ``probe.md`` and ``probe.json`` under ``--out``.

Usage: ``python benchmarks/bench_probe.py [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def updates():
    import jax.numpy as jnp
    from jax import lax

    def set_row(u, idx, row):
        return u.at[idx].set(row)

    def loop_rows(u, rows):
        return lax.fori_loop(0, 8, lambda i, c: lax.dynamic_update_slice(c, rows[i][None], (i, 0)), u)

    def scatter_add(u, idx, vals):
        return u.at[idx].add(vals)

    return {
        "set_row (u 16 MiB)": (set_row, (jnp.zeros((4096, 1024)), jnp.int32(3), jnp.ones(1024))),
        "fori_loop of row writes (u 16 MiB)": (loop_rows, (jnp.zeros((4096, 1024)), jnp.ones((8, 1024)))),
        "scatter-add of 64 rows (u 16 MiB)": (
            scatter_add,
            (jnp.zeros((4096, 1024)), jnp.arange(64) * 7, jnp.ones((64, 1024))),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--repeats", type=int, default=21, help="alternating runs per size (medians)")
    options = parser.parse_args()
    import jax

    from fieldmem.driver import prepare_call, probe_update, start_variants
    from fieldmem.findings.runcheck import probe_outcome
    from fieldmem.request.spec import DonateSpec, StaticSpec

    rows = []
    for name, (fn, args) in updates().items():
        call = prepare_call(fn, args, {}, donate=DonateSpec.parse("u"), static=StaticSpec())
        plain, donated = start_variants(call, None).result()
        for compiled in (donated, plain):
            reading = probe_update(call, compiled, 0, 0, repeats=options.repeats)
            # only the donated variant's plan aliases out to u: the plain one is worded without an alias
            header = compiled.variant.hlo_text.split("\n", 1)[0]
            aliased = compiled.variant.name == "donated" and "input_output_alias=" in header
            probe = probe_outcome("u", "out", "update", reading, aliased=aliased)
            rows.append({**asdict(probe), "case": name, "variant": compiled.variant.name, "aliased": aliased})
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "jax": jax.__version__,
        "repeats": options.repeats,
        "script": "benchmarks/bench_probe.py",
    }
    lines = [
        "# The in-place probe on real updates",
        "",
        " · ".join(f"{k}: {v}" for k, v in meta.items()),
        "",
        "What is timed is one whole call of the compiled program (fresh arguments made before the clock).",
        "",
        "| update | variant | out aliased to u | median at 1x | median at 4x | growth | probe says |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['case']} | {row['variant']} | {'yes' if row['aliased'] else 'no'} | "
            f"{row['small_seconds'] * 1e6:.0f} µs | "
            f"{row['large_seconds'] * 1e6:.0f} µs | {row['growth']:.2f} | {row['code']} |"
        )
    text = "\n".join(lines) + "\n"
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "probe.md").write_text(text)
    (options.out / "probe.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(text)


if __name__ == "__main__":
    main()
