"""The machine as fieldmem's speed rules read it: the cores this process may use and the memory it may still
take. No jax; nothing here prints.

Every rule that depends on the machine reads it here: the default ``--jobs``
(:func:`fieldmem.request.options.choose_jobs`), the malloc arenas of a worker (:func:`malloc_arenas`), the heap
padding of a worker's malloc (:data:`HEAP_PAD`), and the compiles at once by memory
(:mod:`fieldmem.driver.compile_memory`).
Each was chosen from measurements on a 2-core machine and on a 13-core one (benchmarks/README.md, "Rules
that depend on the machine").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

__all__ = [
    "AT_ONCE_ARENAS",
    "HEAP_PAD",
    "RESERVE",
    "UNMEASURED",
    "available_memory",
    "glibc",
    "heap_pad_set",
    "malloc_arenas",
    "read_text",
    "usable_cores",
]

#: memory left to everything beside the compiles (the parent, the analysis, the system)
RESERVE = 1 << 30

#: what a compile is taken to need before any has ended: the largest measured in
#: benchmarks/results/compile-memory.md (2572 MiB, the 32-block step on the CPU), rounded up
UNMEASURED = 2600 << 20


#: how far a worker's glibc malloc grows a heap past what it needs each time it grows it (glibc's ``M_TOP_PAD``,
#: 128 KiB by default). Measured on the compile-heavy step (benchmarks/results/heap-pad.md): on the 13-core host
#: the default made its first XLA:CPU compile 11 s, of which 5 s of system CPU (glibc grows the heap 128 KiB
#: past each need, a system call each time, and system calls are dear there), and with 512 MiB 2.9 s; on
#: 2 cores the same within the noise. Pages the padding reserves are not resident until written.
HEAP_PAD = 512 << 20


def glibc() -> bool:
    """Whether this process runs on glibc (whose ``mallopt`` fieldmem's workers call): False off Linux, on musl."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name (not Linux)
        return False


def heap_pad_set(environ: Mapping[str, str]) -> bool:
    """Whether the environment sets glibc's heap padding itself (``MALLOC_TOP_PAD_``, or ``glibc.malloc.top_pad``
    in ``GLIBC_TUNABLES``): the user's choice, which a worker keeps."""
    return "MALLOC_TOP_PAD_" in environ or "glibc.malloc.top_pad" in environ.get("GLIBC_TUNABLES", "")


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity mask (which containers and ``taskset`` narrow), else
    the machine's count, at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


#: the fewest malloc arenas a worker compiling programs at once keeps: glibc's own default on 2 cores
#: (8 per core), where four arenas made the pod's two compiles at once far slower (benchmarks/README.md)
AT_ONCE_ARENAS = 16


def malloc_arenas(cores: int, at_once: bool = False) -> int:
    """The glibc malloc arenas a worker keeps: compiling one program at a time, one per usable core, at least
    two; compiling several at once (``at_once``), two per core, at least :data:`AT_ONCE_ARENAS`.

    Measured on the pod example against the naive script's two compiles (benchmarks/bench_arenas.py,
    benchmarks/study_pod_pad, results in ``arenas-*.md`` and ``pod-arenas.md``). One at a time: on 2 cores two
    arenas took 1.02 of its time and 0.93 of its memory (glibc's 16: 1.05 and 1.05); on 13 cores two arenas took
    3.1 times its time, while 13 took 0.94 of it and 0.97 of its memory (glibc's 104: 1.09 and 1.06). Its two
    variants at once, on 13 cores with the heap padded (:data:`HEAP_PAD`): glibc's 104 arenas took 0.54 of its
    time and 1.27 of its memory, 26 took 0.58 and 1.19, 16 took 0.69 and 1.07, 8 took 0.93 and 1.03
    (``pod-arenas.md``: the round with 26; 8 from the round before). A compile's
    threads (libtpu's code generation, LLVM's) are about as many as the cores: fewer arenas than the threads
    that allocate at once make them wait on each other's locks, more keep memory one compile freed where the
    next does not reuse it.
    """
    if at_once:
        return max(AT_ONCE_ARENAS, 2 * cores)
    return max(2, cores)


def _meminfo_available(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def read_text(path: str) -> str | None:
    """The text of ``path``; None where it cannot be read."""
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


_CGROUP_FILES = (  # (limit, use): cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)
_NO_LIMIT = 1 << 60  # v1 writes "no limit" as a number near 2**63


def available_memory(read: Callable[[str], str | None] = read_text) -> int | None:
    """The bytes of memory this process may still take: the host's ``MemAvailable``, or its cgroup's limit
    less what the cgroup uses where that is less; None where neither can be read."""
    found = []
    meminfo = read("/proc/meminfo")
    host = _meminfo_available(meminfo) if meminfo else None
    if host is not None:
        found.append(host)
    for limit_file, use_file in _CGROUP_FILES:
        limit, use = read(limit_file), read(use_file)
        if limit is None or use is None:
            continue
        limit, use = limit.strip(), use.strip()
        if limit.isdigit() and use.isdigit() and int(limit) < _NO_LIMIT:
            found.append(max(0, int(limit) - int(use)))
        break
    return min(found) if found else None
