"""What ``--devices N`` costs: seconds and memory for jax to start N simulated CPU devices.

Each count starts a fresh Python that sets ``--xla_force_host_platform_device_count``
and lists ``jax.devices()`` (what ``fieldmem check --devices N`` pays before its first
compile). The largest count ``--devices`` accepts, ``MAX_DEVICES`` in
``fieldmem/request/options.py``, is chosen from these figures. Writes
``devices.json`` under ``--out``.

Usage: ``python benchmarks/bench_devices.py [--out benchmarks/results] [--counts 1,256,1024,4096]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file  # noqa: E402

_PROGRAM = (
    "import jax, resource; n = len(jax.devices('cpu')); print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def start(count: int) -> dict[str, float | int]:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={count}", JAX_PLATFORMS="cpu")
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - began
    devices, rss_kib = (int(x) for x in done.stdout.split())
    assert devices == count, (devices, count)
    return {"devices": count, "seconds": round(seconds, 2), "max_rss_mib": round(rss_kib / 1024, 1)}


BENCHMARK = results_file.Benchmark(
    "devices",
    results_file.headline_markdown("jax started with N simulated CPU devices", "what"),
    lambda result: {
        **{f"{n} devices: start (s)": r["seconds"] for n, r in result["runs"].items()},
        **{f"{n} devices: peak RSS (MiB)": r["max_rss_mib"] for n, r in result["runs"].items()},
    },
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--counts", default="1,256,1024,2048,4096")
    options = parser.parse_args()
    runs = [start(int(n)) for n in options.counts.split(",")]
    by_count = {str(r["devices"]): r for r in runs}
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "what": "a fresh Python starting jax with N simulated CPU devices (--devices N)",
        "runs": by_count,
    }
    results_file.write(Path(options.out), BENCHMARK, result)
    for r in runs:
        print(f"{r['devices']:>6} devices: {r['seconds']:6.2f} s, {r['max_rss_mib']:7.1f} MiB")
    print(f"wrote {Path(options.out) / 'devices.json'} and devices.md")


if __name__ == "__main__":
    main()
