"""Issue 32, item 1: compiles run at once as memory allows (fieldmem.driver.compile_memory)."""

from __future__ import annotations

import threading
import time

import pytest

from fieldmem.driver.compile_memory import (
    UNMEASURED,
    CompileGate,
    admits,
    available_memory,
    resident_memory,
)

GIB = 1 << 30


@pytest.mark.parametrize(
    ("available", "per_compile", "running", "admitted"),
    [
        (0, 10 * GIB, 0, True),  # none running: always (one at a time cannot be fewer)
        (None, 10 * GIB, 3, True),  # memory unknown: --jobs alone
        # none ended yet: each taken to need UNMEASURED, with the reserve; below it, one after the other
        (GIB + 2 * UNMEASURED, None, 1, True),
        (GIB + 2 * UNMEASURED - 1, None, 1, False),
        (4 * GIB, GIB, 1, True),  # reserve 1 + 2 compiles of 1
        (3 * GIB - 1, GIB, 1, False),
        (3 * GIB, GIB, 1, True),
        (23 * GIB, int(2.5 * GIB), 1, True),  # this machine and the largest compile measured here
        (6 * GIB, int(2.5 * GIB), 2, False),
    ],
)
def test_a_compile_starts_beside_others_only_where_memory_holds_it(
    available: int | None, per_compile: int | None, running: int, admitted: bool
) -> None:
    assert admits(available, per_compile, running) is admitted


def test_before_any_compile_is_measured_each_needs_the_largest_measured_here() -> None:
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parents[2] / "benchmarks/results/compile-memory.json").read_text())
    largest = max(case["growth_mib"] for case in record["cases"]) * (1 << 20)
    assert largest <= UNMEASURED < largest * 1.05


def _reader(files: dict[str, str]):
    return lambda path: files.get(path)


def test_available_memory_is_the_hosts_or_the_cgroups_whichever_is_less() -> None:
    meminfo = "MemTotal:  24000000 kB\nMemAvailable:  20000000 kB\n"
    assert available_memory(_reader({"/proc/meminfo": meminfo})) == 20000000 * 1024
    v2 = {"/sys/fs/cgroup/memory.max": "8589934592\n", "/sys/fs/cgroup/memory.current": "2147483648\n"}
    assert available_memory(_reader({"/proc/meminfo": meminfo, **v2})) == 6 * GIB
    unlimited_v2 = {"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory.current": "2147483648\n"}
    assert available_memory(_reader({"/proc/meminfo": meminfo, **unlimited_v2})) == 20000000 * 1024
    unlimited_v1 = {
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes": "2630897664\n",
    }
    assert available_memory(_reader({"/proc/meminfo": meminfo, **unlimited_v1})) == 20000000 * 1024
    over = {"/sys/fs/cgroup/memory.max": "1073741824", "/sys/fs/cgroup/memory.current": "2147483648"}
    assert available_memory(_reader(over)) == 0  # over its limit already
    assert available_memory(_reader({})) is None


def test_resident_memory_reads_statm() -> None:
    import os

    page = os.sysconf("SC_PAGE_SIZE")
    assert resident_memory(_reader({"/proc/self/statm": "90000 128 40 1 0 500 0\n"})) == 128 * page
    assert resident_memory(_reader({"/proc/self/statm": ""})) is None
    assert resident_memory(_reader({})) is None
    here = resident_memory()
    assert here is None or here > 0
    status = _read_status_rss()
    if here is not None and status is not None:  # the same figure as status's VmRSS, give or take a page
        assert abs(here - status) < 64 * page


def test_resident_memory_is_read_afresh_through_the_kept_descriptor() -> None:
    """statm read again at offset 0 of one descriptor gives the memory now, not the first reading's."""
    before = resident_memory()
    if before is None:
        pytest.skip("no /proc/self/statm here")
    held = bytearray(64 << 20)  # zeroed: its pages touched
    try:
        after = resident_memory()
        assert after is not None and after - before >= 48 << 20
    finally:
        del held


def _read_status_rss() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class _Machine:
    """A fake machine: what compiles hold now, and the memory left."""

    def __init__(self, total: int) -> None:
        self.total, self.held = total, 0
        self.sampled = threading.Event()  # the gate read the memory while a compile held some

    def available(self) -> int:
        return self.total - self.held

    def resident(self) -> int:
        if self.held:
            self.sampled.set()
        return self.held

    def take(self, size: int) -> None:
        """Hold ``size`` more until the gate has read it (its sampler runs on its own thread)."""
        self.sampled.clear()
        self.held += size
        assert self.sampled.wait(5)


def test_a_second_compile_waits_for_the_first_where_memory_holds_one() -> None:
    machine = _Machine(total=4 * GIB)
    gate = CompileGate(machine.available, machine.resident, sample_seconds=0.001)
    order: list[str] = []

    def compile_(name: str, takes: int, hold: threading.Event | None = None) -> None:
        with gate.compiling():
            order.append(f"{name} starts")
            machine.take(takes)
            if hold is not None:
                hold.wait(5)
            machine.held -= takes
            order.append(f"{name} ends")

    compile_("first", 2 * GIB)  # alone: measured, 2 GiB
    assert gate.per_compile == 2 * GIB and gate.waited == 0
    release = threading.Event()
    second = threading.Thread(target=compile_, args=("second", 2 * GIB, release))
    second.start()
    while "second starts" not in order:
        time.sleep(0.001)
    third = threading.Thread(target=compile_, args=("third", GIB))
    third.start()  # 1 reserve + 2 x 2 GiB > 4 GiB: it waits for the second
    time.sleep(0.05)
    assert order == ["first starts", "first ends", "second starts"]
    release.set()
    second.join(5)
    third.join(5)
    assert order[3:] == ["second ends", "third starts", "third ends"] and gate.waited == 1


def test_compiles_run_at_once_where_memory_holds_them() -> None:
    machine = _Machine(total=64 * GIB)
    gate = CompileGate(machine.available, machine.resident, sample_seconds=0.001)
    inside = threading.Barrier(3, timeout=5)

    def compile_() -> None:
        with gate.compiling():
            machine.held += GIB
            inside.wait()  # all three at once, or the barrier breaks
            machine.held -= GIB

    with gate.compiling():  # one ended first: its measure known
        machine.take(GIB)
        machine.held -= GIB
    threads = [threading.Thread(target=compile_) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not inside.broken and gate.waited == 0


def test_a_fresh_reading_with_twice_the_need_admits_without_another() -> None:
    """The memory left is read again only where the last reading is stale or does not show twice the need
    (reading /proc while compiles allocate took 5 ms a read on the 13-core host)."""
    now = [100.0]
    left = [64 * GIB]
    reads: list[int] = []

    def available() -> int:
        reads.append(left[0])
        return left[0]

    gate = CompileGate(available, lambda: 1, sample_seconds=0.001, fresh_seconds=1.0, clock=lambda: now[0])
    with gate.compiling():  # none running: nothing read
        pass
    assert reads == [] and gate.per_compile == 0
    with gate.compiling():
        with gate.compiling():  # beside one: read
            pass
        assert len(reads) == 1
        now[0] += 0.5
        with gate.compiling():  # half a second later, 64 GiB >= twice (1 reserve + 2 x 0): not read again
            pass
        assert len(reads) == 1
        now[0] += 0.6  # 1.1 s after the reading: stale, read again
        with gate.compiling():
            pass
        assert len(reads) == 2 and gate.reads == 2
        gate.per_compile = 20 * GIB  # 1 + 2 x 20 = 41 GiB needed: 64 is less than twice, read again
        with gate.compiling():
            pass
        assert len(reads) == 3


def test_a_reading_that_raises_gives_the_place_back() -> None:
    """A compile whose memory reading raises (at its start, or at its end) leaves the gate as it found it."""
    here = threading.current_thread()
    fail = {"start": False, "end": False}
    reads = [0]

    def resident() -> int:
        if threading.current_thread() is here:  # the compile's own readings, not the sampler's
            reads[0] += 1
            if fail["start" if reads[0] % 2 else "end"]:
                raise RuntimeError("no reading")
        return 1

    gate = CompileGate(lambda: 64 * GIB, resident, sample_seconds=0.001)
    for where in ("start", "end"):
        fail[where] = True
        with pytest.raises(RuntimeError, match="no reading"), gate.compiling():
            pass
        fail[where] = False
        assert not gate._running
    with gate.compiling():  # alone again: the memory left is not read
        pass
    assert gate.reads == 0 and not gate._running


def test_the_sampler_reads_outside_the_lock() -> None:
    """A compile starts and ends while the sampler's reading of the resident memory is held up."""
    held = threading.Event()
    reading = threading.Event()

    def resident() -> int:
        if threading.current_thread().name == "fieldmem-compile-memory":
            reading.set()
            held.wait(5)
        return 1

    gate = CompileGate(lambda: 64 * GIB, resident, sample_seconds=0.001)
    entered = threading.Event()

    def second() -> None:
        with gate.compiling():
            entered.set()

    try:
        with gate.compiling():
            assert reading.wait(5)  # the sampler is inside its read
            thread = threading.Thread(target=second)
            thread.start()
            assert entered.wait(2)  # not held up by the sampler's read
            thread.join(5)
    finally:
        held.set()


@pytest.mark.compile
def test_every_compile_of_a_check_goes_through_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax
    import jax.numpy as jnp

    import fieldmem.driver.compile_memory as compile_memory
    from fieldmem.driver.lowering import compile_lowered

    # a fresh gate in the one place compile_lowered takes it from: measured only if the compile went through it
    gate = CompileGate(available=lambda: None, resident=lambda: 1 << 30)
    monkeypatch.setattr(compile_memory, "GATE", gate)
    lowered = jax.jit(lambda x: jnp.sin(x) * 3).lower(jnp.ones((64, 64)))
    compiled, seconds, _ = compile_lowered(lowered)
    assert seconds > 0 and compiled is not None
    assert gate.per_compile == 0  # measured: the fake memory did not grow


# ---- the default --jobs: cores, memory, what one compile takes (fieldmem.request.options.choose_jobs)


@pytest.mark.parametrize(
    ("cores", "available", "jobs", "by_memory"),
    [
        (2, 24 * GIB, 2, 9),  # the 2-core machine: its cores
        (13, 40 * GIB, 8, 15),  # the 13-core TPU host: at most MAX_JOBS
        (6, 40 * GIB, 6, 15),
        (32, 12 * GIB, 4, 4),  # many cores, little memory: what the memory holds
        (8, 3 * GIB, 2, 0),  # too little for one at the largest size: two, the gate decides the second
        (1, 40 * GIB, 1, 15),  # one core: one compile
        (4, None, 4, None),  # memory unreadable: the cores
    ],
)
def test_the_default_jobs_is_chosen_from_cores_and_memory(
    cores: int, available: int | None, jobs: int, by_memory: int | None
) -> None:
    from fieldmem.request.options import MAX_JOBS, choose_jobs

    assert MAX_JOBS == 8
    choice = choose_jobs(cores, available)
    assert (choice.jobs, choice.cores, choice.available, choice.by_memory) == (jobs, cores, available, by_memory)
    assert choice.per_compile == UNMEASURED


def test_the_choice_is_said_with_its_facts() -> None:
    from fieldmem.request.options import choose_jobs, jobs_said

    said = jobs_said(8, choose_jobs(13, 40 * GIB), {})
    assert said.startswith("--jobs 8 (the default): 13 cores, 40.0 GiB available holds 15 compiles of 2.5 GiB")
    assert "at most 8" in said
    assert jobs_said(1, None, {}).startswith("--jobs 1 (given); one compile at a time, in at most ")
    one = jobs_said(1, choose_jobs(1, None), {})
    assert one == (
        "--jobs 1 (the default): 1 core, the memory available unread, at most 8; a compile beside others starts"
        " while the memory left holds it; one compile at a time, in at most 2 malloc arenas (one per core)"
    )
    assert jobs_said(1, None, {"MALLOC_ARENA_MAX": "4"}).endswith("one compile at a time, MALLOC_ARENA_MAX=4 as set")
    assert said.endswith("; compiles at once, in at most 26 malloc arenas (two per core, at least 16)")
    assert jobs_said(2, choose_jobs(2, None), {}).endswith("in at most 16 malloc arenas (two per core, at least 16)")
    assert jobs_said(8, None, {"MALLOC_ARENA_MAX": "4"}).endswith("compiles at once, MALLOC_ARENA_MAX=4 as set")
