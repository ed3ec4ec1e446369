"""What the in-place probe (``--probe``) measures on real updates, plain and donated, idle or loaded.

For each update below, both variants are compiled and probed as
``fieldmem check --probe`` probes the donated one: the call is timed at its
size and 4x larger, each call followed by one in-place pass over its output
of ``u``, the yardstick (21 alternating runs by default, medians; one whole
call of the compiled program is what is timed). The plain variants must copy
``u`` first, and the scaled row rewrites it: their time grows as a rewrite's,
the "whole buffer" the probe has to tell apart from a true slice update.
Each probe is made ``--rounds`` times; ``--load N`` keeps N busy processes
copying memory meanwhile (the load a test suite or a CI neighbour puts on the
cores, under which a probe once misjudged a row write: growth 0.61 for 143
µs). Writes ``<name>.json`` and ``<name>.md`` from it under ``--out`` (name:
``probe``, or ``probe-load<N>``), through ``runner.py``: the run replaces the current one, which
joins the JSON's ``history``.

Usage: ``python benchmarks/bench_probe.py [--rounds 3] [--load N] [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import runner  # noqa: E402


def updates():
    import jax.numpy as jnp
    from jax import lax

    def set_row(u, idx, row):
        return u.at[idx].set(row)

    def loop_rows(u, rows):
        return lax.fori_loop(0, 8, lambda i, c: lax.dynamic_update_slice(c, rows[i][None], (i, 0)), u)

    def scatter_add(u, idx, vals):
        return u.at[idx].add(vals)

    def scaled_row(u, idx, row):
        return (u * 1.1).at[idx].set(row)

    return {
        "set_row (u 16 MiB)": (set_row, (jnp.zeros((4096, 1024)), jnp.int32(3), jnp.ones(1024))),
        "fori_loop of row writes (u 16 MiB)": (loop_rows, (jnp.zeros((4096, 1024)), jnp.ones((8, 1024)))),
        "scatter-add of 64 rows (u 16 MiB)": (
            scatter_add,
            (jnp.zeros((4096, 1024)), jnp.arange(64) * 7, jnp.ones((64, 1024))),
        ),
        "scaled then set_row (u 16 MiB)": (scaled_row, (jnp.zeros((4096, 1024)), jnp.int32(3), jnp.ones(1024))),
    }


# each busy process copies 256 MiB back and forth: it takes a core and memory bandwidth, as a test
# suite's compiles and runs do (a process that only spins takes the core alone)
_BUSY = "import numpy as np\na = np.ones(1 << 25); b = np.empty_like(a)\nwhile True: np.copyto(b, a); np.copyto(a, b)"


def _spinners(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(count)]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _by_growth(growth: float | None) -> str:
    if growth is None:
        return "inconclusive"
    return "whole-buffer" if growth >= 0.5 else "slice-only" if growth <= 0.2 else "inconclusive"


def _span(values: list[float | None]) -> str:
    if None in values:
        return "–"
    low, high = min(v for v in values if v is not None), max(v for v in values if v is not None)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"


# what a run timed, as its .md says it (kept in its JSON: the words of the run, not of a later script)
METHOD = (
    "What is timed is one whole call of the compiled program (fresh arguments made before the clock), and\n"
    "after it one in-place pass over its output of u. `passes`: what the call adds at 4x, in passes over\n"
    "the added bytes (whole-buffer at 0.3 or more, beyond the calls' spread; slice-only at 0.1 or less).\n"
    "Ranges over {rounds} probes of each; the medians are of the middle probe. The last column is\n"
    "what the growth alone said before the yardstick (whole-buffer at 0.5 or more, slice-only at 0.2 or less)."
)


def markdown(document: dict[str, Any]) -> str:
    """``probe.md`` of a run, from its JSON document alone."""
    meta, summary = document["meta"], document["summary"]
    lines = [
        "# The in-place probe on real updates"
        + (f", with {meta['load']} processes copying memory" if meta["load"] else ""),
        "",
        " · ".join(f"{k}: {v}" for k, v in meta.items()),
        "",
        *document.get("method", METHOD).format(rounds=meta["rounds"]).splitlines(),
        "",
        "| update | variant | out aliased to u | median at 1x | median at 4x | growth | passes | probe says | "
        "growth alone said |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for row in summary:
        lines.append(
            f"| {row['case']} | {row['variant']} | {'yes' if row['aliased'] else 'no'} | "
            f"{row['small_seconds_median'] * 1e6:.0f} µs | {row['large_seconds_median'] * 1e6:.0f} µs | "
            f"{_span([row['growth_min'], row['growth_max']])} | {_span([row['passes_min'], row['passes_max']])} | "
            f"{', '.join(row['codes'])} | {', '.join(row['codes_by_growth_alone'])} |"
        )
    return "\n".join(lines) + "\n"


def headline(document: dict[str, Any]) -> dict[str, Any]:
    """A run's headline figures: per case and variant, the middle probe's growth and what the probe said."""
    figures: dict[str, Any] = {}
    for row in document["summary"]:
        key = f"{row['case']}, {row['variant']}"
        figures[f"{key}: growth (most)"] = row["growth_max"]
        figures[f"{key}: says"] = ", ".join(row["codes"])
    return figures


def benchmark(name: str = "probe") -> runner.Benchmark:
    """The result file ``name``: ``probe``, or ``probe-loadN`` for a run beside N processes copying memory."""
    return runner.Benchmark(name, markdown, headline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--repeats", type=int, default=21, help="alternating runs per size (medians)")
    parser.add_argument("--rounds", type=int, default=3, help="probes of each update and variant")
    parser.add_argument("--load", type=int, default=0, help="busy processes copying memory while it measures")
    options = parser.parse_args()
    import jax

    from fieldmem.driver import prepare_call, probe_update, start_variants
    from fieldmem.findings.probecheck import probe_outcome
    from fieldmem.request.spec import DonateSpec, StaticSpec

    rows = []
    spinners = _spinners(options.load)
    try:
        for name, (fn, args) in updates().items():
            call = prepare_call(fn, args, {}, donate=DonateSpec.parse("u"), static=StaticSpec())
            plain, donated = start_variants(call, None).result()
            for compiled in (donated, plain):
                # only the donated variant's plan aliases out to u: the plain one is worded without an alias
                header = compiled.variant.hlo_text.split("\n", 1)[0]
                aliased = compiled.variant.name == "donated" and "input_output_alias=" in header
                for round in range(options.rounds):
                    reading = probe_update(call, compiled, 0, 0, repeats=options.repeats)
                    probe = probe_outcome("u", "out", "update", reading, aliased=aliased)
                    rows.append(
                        {
                            **asdict(probe),
                            "case": name,
                            "variant": compiled.variant.name,
                            "aliased": aliased,
                            "round": round,
                        }
                    )
    finally:
        for spinner in spinners:
            spinner.kill()
    summary = []
    for name in updates():
        for variant in ("donated", "plain"):
            mine = [r for r in rows if r["case"] == name and r["variant"] == variant]
            passes = [r["passes"] for r in mine if r["passes"] is not None]  # None: no yardstick to judge by
            summary.append(
                {
                    "case": name,
                    "variant": variant,
                    "aliased": mine[0]["aliased"],
                    "codes": sorted({r["code"] for r in mine}),
                    # what the growth alone said before the yardstick (whole-buffer at 0.5, slice-only at 0.2)
                    "codes_by_growth_alone": sorted({_by_growth(r["growth"]) for r in mine}),
                    "growth_min": min(r["growth"] for r in mine),
                    "growth_max": max(r["growth"] for r in mine),
                    "passes_min": min(passes, default=None),
                    "passes_max": max(passes, default=None),
                    "probes_without_passes": len(mine) - len(passes),
                    # one in-place pass over the added bytes (the yardstick), median over the probes
                    "pass_added_seconds_median": _median(
                        [r["pass_large_seconds"] - r["pass_small_seconds"] for r in mine if r["pass_small_seconds"]]
                    ),
                    "small_seconds_median": sorted(r["small_seconds"] for r in mine)[len(mine) // 2],
                    "large_seconds_median": sorted(r["large_seconds"] for r in mine)[len(mine) // 2],
                }
            )
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "jax": jax.__version__,
        "repeats": options.repeats,
        "rounds": options.rounds,
        "load": options.load,
        "load_average_at_end": os.getloadavg()[0],
        "script": "benchmarks/bench_probe.py",
    }
    document = {"meta": meta, "method": METHOD, "summary": summary, "rows": rows}
    runner.write(options.out, benchmark(f"probe-load{options.load}" if options.load else "probe"), document)
    text = markdown(document)
    print(text)


if __name__ == "__main__":
    main()
