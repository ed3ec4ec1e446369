"""Making and reusing a jax environment (``fieldmem/parent/envs.py``): pip against uv, first call against reuse.

For each installer found (pip always; uv where it is on ``PATH``, or given by ``--uv``) an environment with
``jax==V jaxlib==V`` is made by :func:`~fieldmem.parent.envs.ensure_env` in a fresh ``FIELDMEM_ENVS``:

- **cold**: the installer's cache empty (pip ``PIP_NO_CACHE_DIR=1``, uv a new ``UV_CACHE_DIR``): every
  wheel downloaded;
- **warm**: its cache filled by the cold run (what a second environment, or one made again after
  ``fieldmem envs remove``, costs);
- **reuse**: ``ensure_env`` again for the environment just made (what ``--jax`` pays on every run after
  the first): the median of 20 calls, each in this process (no installer starts: the marker is read).

Usage: ``python benchmarks/bench_envs.py [--version 0.9.2] [--uv PATH] [--out benchmarks/results]``. Writes
``envs.json`` and ``envs.md`` from it through ``results_file.py`` (the run replaces the current one, which
joins the JSON's ``history``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
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

from fieldmem.parent import envs  # noqa: E402


def _made(version: str, environ: dict[str, str]) -> tuple[float, float, str]:
    """(seconds to make, median seconds to reuse, the installer's label) under ``environ`` added to ours."""
    saved = dict(os.environ)
    os.environ.update(environ)
    try:
        started = time.perf_counter()
        env = envs.ensure_env(version)
        made = time.perf_counter() - started
        again = []
        for _ in range(20):
            started = time.perf_counter()
            assert envs.ensure_env(version) == env
            again.append(time.perf_counter() - started)
        return made, statistics.median(again), env.installer
    finally:
        os.environ.clear()
        os.environ.update(saved)


def markdown(document: dict[str, Any]) -> str:
    """``envs.md`` of a run, from its JSON document alone."""
    meta = document["meta"]
    lines = [
        "# Making and reusing a jax environment: pip against uv",
        "",
        f"- date: {meta['date']}; machine: {meta['machine']}; Python {meta['python']}; "
        f"`ensure_env('{meta['jax']}')` (jax and jaxlib {meta['jax']}, no plugins)",
        "- cold: the installer's cache empty (every wheel downloaded); warm: filled by the cold run; "
        "reuse: `ensure_env` again for the environment made (median of 20; no installer starts)",
        "",
        "| installer | cache | make (s) | reuse (ms) |",
        "|---|---|---:|---:|",
        *(
            f"| {r['installer']} {r['version']} | {r['cache']} | {r['make_s']:.1f} | {r['reuse_ms']:.2f} |"
            for r in document["rows"]
        ),
        "",
    ]
    by = {(r["installer"], r["cache"]): r for r in document["rows"]}
    for cache in ("cold", "warm"):
        if ("uv", cache) in by:
            ratio = by[("pip", cache)]["make_s"] / by[("uv", cache)]["make_s"]
            lines.append(f"- {cache}: uv makes it {ratio:.1f}x faster than pip")
    slowest = max(r["reuse_ms"] for r in document["rows"])
    fastest = min(r["make_s"] for r in document["rows"])
    lines += [
        f"- reuse: at most {slowest:.2f} ms (the marker read), {fastest * 1000 / slowest:.0f}x less than the "
        "fastest creation",
        "",
    ]
    return "\n".join(lines)


BENCHMARK = results_file.Benchmark(
    "envs",
    markdown,
    lambda document: {
        **{f"{r['installer']} {r['cache']}: make (s)": r["make_s"] for r in document["rows"]},
        **{f"{r['installer']} {r['cache']}: reuse (ms)": r["reuse_ms"] for r in document["rows"]},
    },
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--version", default="0.9.2")
    parser.add_argument("--uv", default=shutil.which("uv"), help="the uv executable (default: uv on PATH)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        kinds = [("pip", {"FIELDMEM_INSTALLER": "pip"})]
        if args.uv:
            path = f"{Path(args.uv).parent}{os.pathsep}{os.environ.get('PATH', '')}"
            kinds.append(("uv", {"FIELDMEM_INSTALLER": "uv", "PATH": path, "UV_CACHE_DIR": f"{scratch}/uv-cache"}))
        for kind, environ in kinds:
            for cache in ("cold", "warm"):
                extra = {**environ, "FIELDMEM_ENVS": f"{scratch}/{kind}-{cache}"}
                if cache == "cold" and kind == "pip":
                    extra["PIP_NO_CACHE_DIR"] = "1"
                made, reused, label = _made(args.version, extra)
                name, _, version = label.partition(" ")
                row = {"installer": name, "version": version, "cache": cache, "make_s": made, "reuse_ms": reused * 1000}
                rows.append(row)
                print(f"{label:12} {cache}: made in {made:.1f} s, reused in {reused * 1000:.2f} ms", flush=True)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "jax": args.version,
    }
    document = {"meta": meta, "rows": rows}
    results_file.write(args.out, BENCHMARK, document)
    print(markdown(document))


if __name__ == "__main__":
    main()
