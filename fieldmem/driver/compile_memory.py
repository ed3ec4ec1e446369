"""How many XLA compiles run at once: ``--jobs`` by cores, and this gate by the memory left.

A compile takes memory beside its process: 0.2 to 2.6 GiB for the compile-heavy step on this
machine's CPU, 1 GiB for the 256-chip pod example (``benchmarks/results/compile-memory.md``), and
more than the program's size predicts (XLA:CPU's fusions grow faster than the layers, an SPMD
partition over many chips more). Two at once on a machine that holds one is killed, and the
check with it. So a compile that would start beside others still running waits until the memory
available now covers a reserve and, for it and each running one, the most any compile of this
process has taken so far: it starts when one of them ends. A compile with none running always
starts (one at a time is how the naive script compiles; no fewer can run), and so do compiles
wherever the memory available cannot be read (not Linux). Before any compile has ended each is
taken to need the most one took in fieldmem's own measurements (:data:`UNMEASURED`, 2600 MiB): on a
machine with less than about 6 GiB left, a target's two variants then compile one after the other until
one compile has been measured.

The memory a compile takes is measured, not estimated from the program: its process's resident memory is sampled
while compiles run, and a compile's peak less the memory when it started is what it took (with
compiles overlapping, each is charged their joint growth: more than its own, never less).
Available memory is the kernel's ``MemAvailable``, or a cgroup's limit less its use where that is
less (a container, a CI runner).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from fieldmem.model.machine import RESERVE, UNMEASURED, available_memory

__all__ = [
    "GATE",
    "RESERVE",
    "UNMEASURED",
    "CompileGate",
    "admits",
    "available_memory",
    "needed",
    "resident_memory",
]

SAMPLE_SECONDS = 0.02  # how often the resident memory is read while compiles run
#: how old a reading of the memory left may be and still admit a compile (where it showed twice the need)
FRESH_SECONDS = 1.0


def admits(available: int | None, per_compile: int | None, running: int, reserve: int = RESERVE) -> bool:
    """Whether a compile may start beside ``running`` others, with ``available`` bytes of memory left
    and ``per_compile`` the most one compile of this process took so far (None: none has ended, and each
    is taken to need :data:`UNMEASURED`)."""
    if running == 0 or available is None:
        return True
    return available >= needed(per_compile, running, reserve)


def needed(per_compile: int | None, running: int, reserve: int = RESERVE) -> int:
    """The memory a compile starting beside ``running`` others needs left: the reserve, and for it and each
    of them the most one compile took so far (:data:`UNMEASURED` where none has ended)."""
    return reserve + (UNMEASURED if per_compile is None else per_compile) * (running + 1)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_memory(read: Callable[[str], str | None] | None = None) -> int | None:
    """This process's resident memory in bytes (``/proc/self/statm``'s second field, in pages: cheaper to
    read than ``status``, while a compile runs); None where it cannot be read. ``read``: the text of a path
    (None: ``statm`` read again through a descriptor kept open, :class:`_Statm`)."""
    statm = _STATM() if read is None else read("/proc/self/statm")
    if statm is None:
        return None
    fields = statm.split()
    return int(fields[1]) * _PAGE if len(fields) > 1 and fields[1].isdigit() else None


class _Statm:
    """``/proc/self/statm``'s text, read at offset 0 of a descriptor kept open (the kernel writes it afresh at
    each such read): one system call a reading, where opening the file is six (open, fstat, ioctl, lseek,
    read, close), each letting go of the GIL, which the sampler then waits to take back while the worker's
    main thread runs Python, and each dear under a sandbox's kernel (gVisor, the lent 13-core host: 0.8 ms a
    reading by the sampler there, where a reading opened afresh had taken 5 ms in an earlier session;
    ``benchmarks/results/worker-syscalls.md``). Opened again in a child process (a fork keeps the parent's
    descriptor, whose file is the parent's)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        try:
            fd = self._fd
            if fd is None or self._pid != os.getpid():
                with self._lock:
                    if self._fd is None or self._pid != os.getpid():
                        self._fd, self._pid = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC), os.getpid()
                    fd = self._fd
            return os.pread(fd, 256, 0).decode("ascii", "replace")
        except (OSError, AttributeError):  # not Linux (no /proc, or no os.pread): cannot be read
            return None


_STATM = _Statm()


class CompileGate:
    """Compiles admitted by :func:`admits`, each one's memory measured as it runs (see the module).

    The memory is read outside the gate's lock, and the memory left only where it could decide: a
    reading of it less than ``fresh_seconds`` old that showed twice what the new compile and those
    running need admits without another. Reading ``/proc`` while compiles allocate can be slow (4.7 ms
    a reading of the memory left on the 13-core host, under gVisor: ``benchmarks/results/gate-reads.md``):
    read at every compile, under the lock the sampler also held while it read, it had been 5.3 ms of
    every compile that started beside an abandoned one (:mod:`fieldmem.driver.early`).
    """

    def __init__(
        self,
        available: Callable[[], int | None] = available_memory,
        resident: Callable[[], int | None] = resident_memory,
        sample_seconds: float = SAMPLE_SECONDS,
        reserve: int = RESERVE,
        fresh_seconds: float = FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._available = available
        self._resident = resident
        self._sample_seconds = sample_seconds
        self._reserve = reserve
        self._fresh_seconds = fresh_seconds
        self._clock = clock
        self._changed = threading.Condition()
        self._running: dict[object, list[int]] = {}  # each running compile: [resident memory at start, peak]
        self._sampler: threading.Thread | None = None
        self._left: tuple[float, int] | None = None  # the last reading of the memory left: (when, bytes)
        self.per_compile: int | None = None  # the most one compile took so far (bytes)
        self.waited = 0  # compiles that waited for memory
        self.reads = 0  # readings of the memory left

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Hold a compile's place: wait until memory admits it, measure it while it runs."""
        token = object()
        with self._changed:
            waited = False
            while not self._admits():
                waited = True
                self._changed.wait()
            self.waited += waited
            self._running[token] = []  # running from now on; measured once its first reading is in
        now: int | None = None
        try:
            start = self._resident()
            with self._changed:
                if start is not None:
                    self._running[token] = [start, start]
                    if self._sampler is None:
                        self._sampler = threading.Thread(
                            target=self._sample, name="fieldmem-compile-memory", daemon=True
                        )
                        self._sampler.start()
            yield
        finally:
            try:
                now = self._resident()
            finally:  # its place is given back whatever was raised (by the compile, or by a reading)
                with self._changed:
                    reading = self._running.pop(token)
                    if reading and now is not None:
                        took = max(reading[1], now) - reading[0]
                        self.per_compile = max(self.per_compile or 0, took)
                    self._changed.notify_all()

    def _admits(self) -> bool:
        """Whether a compile may start now (under the lock): :func:`admits`, with the memory left read only
        where a compile runs and no fresh reading already shows twice what is needed."""
        running = len(self._running)
        if not running:  # the memory left is read only where it could decide (a compile running)
            return True
        left = self._left  # (when, bytes): fresh, and twice the need, admits without another reading
        twice = 2 * needed(self.per_compile, running, self._reserve)
        if left is not None and self._clock() - left[0] <= self._fresh_seconds and left[1] >= twice:
            return True
        available = self._available()
        self.reads += 1
        self._left = (self._clock(), available) if available is not None else None
        return admits(available, self.per_compile, running, self._reserve)

    def _sample(self) -> None:
        """Keep each running compile's peak, until none runs (the memory read outside the lock: a compile
        that starts or ends meanwhile does not wait for the read)."""
        while True:
            now = self._resident()
            with self._changed:
                if not self._running:
                    self._sampler = None
                    return
                if now is not None:
                    for reading in self._running.values():
                        if reading:
                            reading[1] = max(reading[1], now)
                self._changed.wait(self._sample_seconds)


#: the one gate of this process: every compile a check makes goes through it
GATE = CompileGate()
