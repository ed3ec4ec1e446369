"""What the benchmarks share: the machine a run is made on, and how a timed process is run.

- The machine, for every result file: its cores, memory, processor and accelerator. fieldmem's
  machine-dependent rules (the default ``--jobs``, the malloc arenas of a ``--jobs 1`` worker, the compiles at
  once by memory) are chosen from measurements on two machines: the 2-core development machine and the
  13-core host of the lent TPU v5e machine. Each result file names which one it was measured on with
  :func:`describe` (the figures) and :func:`label` (one line).
- The processes ``bench_fast.py`` times: the one environment each runs in (:func:`environment`), its wall
  seconds (:func:`timed`), a crash as :class:`BenchError`, and :func:`median`.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _accelerator() -> str | None:
    """A TPU's device files (``/dev/accel*``, ``/dev/vfio/N``) or an NVIDIA GPU's; None: none found."""
    dev = Path("/dev")
    if any(dev.glob("accel*")) or any(p.name.isdigit() for p in (dev / "vfio").glob("*")):
        return "TPU"
    if any(dev.glob("nvidia[0-9]*")):
        return "NVIDIA GPU"
    return None


def describe() -> dict[str, Any]:
    """The machine's figures: usable cores (the affinity mask), all cores, memory, processor, accelerator."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return {
        "arch": platform.machine(),
        "system": platform.system(),
        "cores": usable,
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu": _cpu_model(),
        "accelerator": _accelerator(),
        "label": label_of(usable, _memory_gib(), _accelerator()),
    }


def label_of(cores: int, memory_gib: float | None, accelerator: str | None) -> str:
    host = "the TPU host" if accelerator == "TPU" else ("a GPU host" if accelerator else "no accelerator")
    memory = f", {memory_gib:.0f} GiB" if memory_gib is not None else ""
    return f"{cores} cores{memory} ({host})"


def label() -> str:
    """One line: ``13 cores, 40 GiB (the TPU host)``, ``2 cores, 24 GiB (no accelerator)``."""
    return str(describe()["label"])


def commit(root: Path) -> str:
    """The short commit of the checkout at ``root``, with ``+changes`` where its fieldmem/ differs from it; in a
    copy without a git checkout of its own (the lent machine's, which may sit inside another checkout: its
    HEAD is not this copy's), ``$BENCH_COMMIT``, else ``unknown``."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return os.environ.get("BENCH_COMMIT", "unknown")
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "fieldmem") else "")


# ---------------------------------------------------------------- timed processes (bench_fast.py)


class BenchError(Exception):
    """The run cannot measure what it must: one line, exit 2."""


def environment(cache: Path) -> dict[str, str]:
    """The one environment every timed process runs in (naive and fieldmem alike)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["FIELDMEM_CACHE_DIR"] = str(cache)  # fieldmem's default cache, in this run's folder
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop("XLA_FLAGS", None)
    return env


def timed(command: list[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of one fresh process (its output to ``log``); a crash is a BenchError."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, _ = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # fieldmem exits 1 when a check fails: still a complete run
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise BenchError(f"{' '.join(command)} exited {code}: {' | '.join(tail)}")
    return wall


def median(values: list[float]) -> float:
    return statistics.median(values)
