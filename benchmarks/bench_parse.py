"""HLO parsing speed: is ``fieldmem.xla.hlo`` linear in the size of the text?

A real optimized HLO module (a 200-step update chain from ``synth.py``,
compiled once here) is scaled up by repeating its computations under fresh
names — every ``%name`` of copy *k* gets the suffix ``_k`` and only the first
copy keeps ``ENTRY`` — into texts of about 1, 10 and 50 MB. Each is parsed
(``parse_hlo_module``) and searched for copies (``find_copies``), best of 3.
The time per 10 MB should stay flat as the text grows.

Usage: ``python benchmarks/bench_parse.py [--out benchmarks/results]``. Writes ``parse.json`` and
``parse.md`` from it, through ``runner.py`` (the run replaces the current one, which joins the
JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner

from synth import write_module

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB = (1, 10, 50)
_NAME = re.compile(r"%([A-Za-z_][\w.\-]*)")
_TABLES = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)$")


def compiled_text() -> str:
    import importlib.util

    import jax

    with tempfile.TemporaryDirectory() as tmp:
        path = write_module(Path(tmp) / "chain_module.py", functions=1, chain=200, leaves=1, size=128)
        spec = importlib.util.spec_from_file_location("chain_module", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn, make_args, donate = module.CASES[0]
        return jax.jit(fn, donate_argnums=donate).lower(*make_args()).compile().as_text()


def split(text: str) -> tuple[str, str, str]:
    """(header line, the metadata tables, the computations)."""
    header, _, rest = text.partition("\n")
    lines = rest.split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or _TABLES.match(lines[i]) or lines[i][:1].isdigit()):
        i += 1
    return header, "\n".join(lines[:i]), "\n".join(lines[i:])


def scaled(text: str, copies: int) -> str:
    header, tables, body = split(text)
    parts = [header, tables]
    for k in range(copies):
        copy = body if k == 0 else _NAME.sub(lambda m: f"%{m.group(1)}_{k}", body.replace("ENTRY ", ""))
        parts.append(copy)
    return "\n".join(parts)


def markdown(document: dict[str, Any]) -> str:
    """``parse.md`` of a run, from its JSON document alone."""
    meta = document["meta"]
    lines = [
        "# HLO parsing speed",
        "",
        f"- date: {meta['date']}; machine: {meta['machine']}; Python {meta['python']}; jax {meta['jax']}",
        f"- text: a 200-step chain's optimized HLO ({meta['base_kb']:.0f} kB) repeated under fresh names; best of 3",
        "",
        "| text (MB) | instructions | parse (s) | find_copies (s) | seconds per 10 MB |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in document["rows"]:
        lines.append(
            f"| {r['mb']:.1f} | {r['instructions']:,} | {r['parse_s']:.2f} | {r['find_copies_s']:.2f} | "
            f"{r['s_per_10mb']:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


BENCHMARK = runner.Benchmark(
    "parse",
    markdown,
    lambda document: {f"{r['mb']:.1f} MB: seconds per 10 MB": round(r["s_per_10mb"], 3) for r in document["rows"]},
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ns = parser.parse_args()

    import jax

    from fieldmem.model.collector import collector_paused
    from fieldmem.xla import hlo

    base = compiled_text()
    rows = []
    for mb in TARGET_MB:
        copies = max(1, round(mb * 1e6 / len(base)))
        text = scaled(base, copies)
        best_parse = best_copies = float("inf")
        for _ in range(3):
            # without a parser nothing is kept: each round parses from scratch; with the collector
            # paused, as the product's analysis parses (the parser itself does not pause it)
            start = time.perf_counter()
            with collector_paused():
                module = hlo.parse_hlo_module(text)
            parsed = time.perf_counter()
            hlo.find_copies(module)
            done = time.perf_counter()
            best_parse = min(best_parse, parsed - start)
            best_copies = min(best_copies, done - parsed)
        instructions = sum(len(c.instructions) for c in module.computations)
        size = len(text) / 1e6
        rows.append(
            dict(
                mb=round(size, 2),
                instructions=instructions,
                parse_s=best_parse,
                find_copies_s=best_copies,
                s_per_10mb=(best_parse + best_copies) / size * 10,
            )
        )
        print(rows[-1], flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "base_kb": round(len(base) / 1e3),
    }
    document = {"meta": meta, "rows": rows}
    runner.write(ns.out, BENCHMARK, document)
    print(markdown(document))


if __name__ == "__main__":
    main()
