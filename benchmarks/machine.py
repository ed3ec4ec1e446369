"""Which machine a benchmark ran on, for every result file: its cores, memory, processor and accelerator.

fieldmem's machine-dependent rules (the default ``--jobs``, the malloc arenas of a ``--jobs 1`` worker, the
compiles at once by memory) are chosen from measurements on two machines: the 2-core development machine
and the 13-core host of the lent TPU v5e machine. Each result file names which one it was measured on with
:func:`describe` (the figures) and :func:`label` (one line).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


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
