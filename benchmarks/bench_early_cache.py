"""Study (issue 47): the early stop with the persistent cache on, against every compile to its end.

``run ROUNDS CASES OUT.json``: for each case, ROUNDS rounds of three fresh processes in this order: the naive
script, ``fieldmem check`` with ``FIELDMEM_EARLY_STOP=1`` and with ``=0``, each on a module with fresh
constants and with a fresh cache folder of its own (fieldmem's default, the cache on). Cases: ``cold`` (make
bench's 20-function module), ``heavy`` (the compile-heavy transformer step), ``chainN`` (20 functions of N steps).

``record OUT_DIR RUN.json...``: the runs (each annotated with ``machine``, ``commit``, ``date`` and ``note``)
into ``OUT_DIR/early-stop-cache.{json,md}``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fast as bf
import heavy
import runner


def _writer(case: str) -> Any:
    if case == "cold":
        return lambda p, s: bf.write_module(p, salt=s, **bf.COLD_MODULE)
    if case == "heavy":
        return lambda p, s: heavy.write_module(p, salt=s, layers=heavy.LAYERS)
    chain = int(case.removeprefix("chain"))
    return lambda p, s: bf.write_module(p, salt=s, functions=20, chain=chain, size=128)


def run(rounds: int, cases: list[str], out: Path) -> None:
    salts = bf.Salts()
    result: dict[str, Any] = {"cores": os.cpu_count(), "rounds": rounds, "cases": {}}
    work = Path(tempfile.mkdtemp(prefix="early-cache-"))
    for case in cases:
        rows = []
        for n in range(rounds):
            row: dict[str, float] = {}
            for who in ("naive", "early", "full"):
                salt = salts()
                module = _writer(case)(work / f"{case}_{who}_{salt}.py", salt)
                cache = work / f"cache_{case}_{who}_{n}"
                env = runner.environment(cache)
                if who == "naive":
                    row[who] = runner.timed(bf.naive_command(module), env, work / "naive.log")
                else:
                    env["FIELDMEM_EARLY_STOP"] = "1" if who == "early" else "0"
                    row[who] = runner.timed(bf.check_command(module), env, work / f"{who}.log")
                    row[who + "_entries"] = bf.cache_entries(cache)
            print(case, n, {k: round(v, 2) for k, v in row.items()}, flush=True)
            rows.append(row)
        result["cases"][case] = summary(rows)
    out.write_text(json.dumps(result, indent=1))


def summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    med = {k: statistics.median(r[k] for r in rows) for k in ("naive", "early", "full")}
    return {
        "rows": rows,
        "median_s": med,
        "ratio_early": med["early"] / med["naive"],
        "ratio_full": med["full"] / med["naive"],
    }


def _markdown(document: dict[str, Any]) -> str:
    lines = [
        "# The early stop with the persistent cache on (issue 47)",
        "",
        f"- {document['what']}",
        "",
        "| machine | commit | case | rounds | naive (s) | early (s) | full (s) | early / naive | full / naive | note |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in document["runs"]:
        for case, c in r["cases"].items():
            m = c["median_s"]
            lines.append(
                f"| {r['machine']} | {r['commit']} | {case} | {len(c['rows'])} | {m['naive']:.2f} | {m['early']:.2f} "
                f"| {m['full']:.2f} | {c['ratio_early']:.2f} | {c['ratio_full']:.2f} | {r['note']} |"
            )
    return "\n".join(lines) + "\n"


def _headline(document: dict[str, Any]) -> dict[str, float]:
    return {
        f"{r['machine']} {r['commit']} {case} early/full": round(c["ratio_early"] / c["ratio_full"], 3)
        for r in document["runs"]
        for case, c in r["cases"].items()
    }


BENCHMARK = runner.Benchmark("early-stop-cache", _markdown, _headline)


def record(out: Path, files: list[Path]) -> None:
    runs = [json.loads(f.read_text()) for f in files]
    document = {
        "date": max(r["date"] for r in runs),
        "machine": "2 cores and 13 cores (the TPU host)",
        "commit": runs[-1]["commit"],
        "what": "a cold check with the cache on: early stop with kept dumps (FIELDMEM_EARLY_STOP=1) against every "
        "compile to its end (=0), rounds of naive / early / full in fresh processes, medians",
        "runs": runs,
    }
    runner.write(out, BENCHMARK, document)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]), sys.argv[3].split(","), Path(sys.argv[4]))
    else:
        record(Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]])
