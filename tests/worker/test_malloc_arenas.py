"""A worker that compiles one program at a time keeps one glibc malloc arena per usable core, at least two; one
that compiles several at once two per core, at least 16 (fieldmem.worker.main.fewer_malloc_arenas,
fieldmem.model.machine.malloc_arenas); benchmarks/bench_arenas.py and benchmarks/study_pod_pad measure what it
saves and what fewer would cost. Every worker grows its heap 512 MiB at a time
(fieldmem.worker.main.pad_malloc_heap; benchmarks/results/heap-pad.md)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import time

import pytest

from fieldmem.model.codec import encode
from fieldmem.model.machine import HEAP_PAD, glibc
from fieldmem.request.options import CheckOptions, heap_pad_said
from fieldmem.worker import main as worker


class _Libc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


@pytest.mark.parametrize(("cores", "arenas"), [(1, 2), (2, 2), (13, 13), (64, 64)])
def test_one_arena_per_core_is_asked_for(cores: int, arenas: int) -> None:
    libc = _Libc()
    assert worker.fewer_malloc_arenas({}, libc=libc, cores=cores) == arenas
    assert libc.calls == [(worker.M_ARENA_MAX, arenas)]


@pytest.mark.parametrize(("cores", "arenas"), [(1, 16), (2, 16), (8, 16), (13, 26), (64, 128)])
def test_compiles_at_once_get_two_arenas_per_core_at_least_sixteen(cores: int, arenas: int) -> None:
    libc = _Libc()
    assert worker.fewer_malloc_arenas({}, libc=libc, cores=cores, at_once=True) == arenas
    assert libc.calls == [(worker.M_ARENA_MAX, arenas)]


def test_the_cores_are_the_usable_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    import fieldmem.model.machine as machine

    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
    libc = _Libc()
    assert worker.fewer_malloc_arenas({}, libc=libc) == 13
    assert libc.calls == [(worker.M_ARENA_MAX, 13)]


def test_a_refused_setting_says_none_was_set() -> None:
    class Refusing(_Libc):
        def mallopt(self, parameter: int, value: int) -> int:
            return 0

    assert worker.fewer_malloc_arenas({}, libc=Refusing(), cores=4) == 0


def test_the_users_malloc_arena_max_is_left_as_it_is() -> None:
    libc = _Libc()
    assert worker.fewer_malloc_arenas({"MALLOC_ARENA_MAX": "8"}, libc=libc) == 0
    assert libc.calls == []


def test_a_libc_without_mallopt_sets_nothing() -> None:
    assert worker.fewer_malloc_arenas({}, libc=object()) == 0


@pytest.mark.parametrize(("jobs", "at_once"), [(1, False), (2, True), (8, True)])
def test_the_worker_asks_for_the_arenas_of_its_jobs(monkeypatch: pytest.MonkeyPatch, jobs: int, at_once: bool) -> None:
    called: list[bool] = []
    monkeypatch.setattr(worker, "fewer_malloc_arenas", lambda at_once: called.append(at_once) or 2)
    request = {"check_options": encode(CheckOptions(jobs=jobs))}
    worker._Worker(request, sys.stdout, queue.Queue())
    assert called == [at_once]


# threads that allocate at once, each kept alive until all have: glibc gives each its own arena up to its
# limit; malloc_stats() prints one "Arena N:" block per arena on stderr
_ARENAS = textwrap.dedent(
    """
    import ctypes, sys, threading
    from fieldmem.worker.main import fewer_malloc_arenas
    if sys.argv[1] == "fewer":
        assert fewer_malloc_arenas(cores=2) == 2
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    barrier = threading.Barrier(6)
    def allocate():
        libc.malloc(64 << 10)
        barrier.wait()
    threads = [threading.Thread(target=allocate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc.malloc_stats()
    """
)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not glibc(),
    reason="glibc's malloc arenas",
)
@pytest.mark.parametrize(("mode", "most"), [("fewer", 2), ("default", None)])
def test_glibc_keeps_to_two_arenas(mode: str, most: int | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS, mode], capture_output=True, text=True, env=env, check=True, timeout=60
    )
    arenas = sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    if most is not None:
        assert 1 <= arenas <= most
    else:  # the control: without the limit, the six threads take more than two
        assert arenas > 2


# the heap padding of a worker's malloc (fieldmem.worker.main.pad_malloc_heap, fieldmem.model.machine.HEAP_PAD)


def test_the_heap_padding_is_asked_for() -> None:
    libc = _Libc()
    assert worker.pad_malloc_heap({}, libc=libc) == HEAP_PAD == 512 << 20
    assert libc.calls == [(worker.M_TOP_PAD, HEAP_PAD)]


@pytest.mark.parametrize(
    "environ", [{"MALLOC_TOP_PAD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.top_pad=0"}]
)
def test_the_users_heap_padding_is_left_as_it_is(environ: dict[str, str]) -> None:
    libc = _Libc()
    assert worker.pad_malloc_heap(environ, libc=libc) == 0
    assert libc.calls == []


def test_other_tunables_of_the_users_do_not_stop_the_padding() -> None:
    libc = _Libc()
    assert worker.pad_malloc_heap({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, libc=libc) == HEAP_PAD


def test_a_refused_or_missing_mallopt_pads_nothing() -> None:
    class Refusing(_Libc):
        def mallopt(self, parameter: int, value: int) -> int:
            return 0

    assert worker.pad_malloc_heap({}, libc=Refusing()) == 0
    assert worker.pad_malloc_heap({}, libc=object()) == 0


def test_the_verbose_line_says_what_the_worker_does() -> None:
    said = heap_pad_said(CheckOptions(), {}, on_glibc=True)
    assert said.startswith("the worker's malloc grows its heap 512 MiB past its need each time")
    assert "as your environment sets" in heap_pad_said(CheckOptions(), {"MALLOC_TOP_PAD_": "0"}, on_glibc=True)
    assert heap_pad_said(CheckOptions(), {}, on_glibc=False) == "malloc as the worker has it (not glibc's)"
    assert "--no-isolate" in heap_pad_said(CheckOptions(isolate=False), {}, on_glibc=True)


def _heap_bytes(pid: int) -> int:
    """The size of the process's brk heap (its ``[heap]`` mapping), 0 where it has none."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[heap]"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                return end - start
    return 0


def _maps_jaxlib(pid: int) -> bool:
    """Whether the process has loaded jaxlib's native library (the worker's warm-up, before its request)."""
    with open(f"/proc/{pid}/maps") as maps:
        return "jaxlib" in maps.read()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not glibc(),
    reason="glibc's heap",
)
@pytest.mark.parametrize(("environ", "padded"), [({}, True), ({"MALLOC_TOP_PAD_": "0"}, False)])
def test_a_started_worker_grows_its_heap_by_the_padding(environ: dict[str, str], padded: bool) -> None:
    # a worker started ahead of a request waits for it on stdin, its jaxlib loaded (worker.main._warm_up):
    # its heap has grown by then, in one padded step (or, with the user's MALLOC_TOP_PAD_=0, in small ones)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TOP_PAD_"} | environ
    read, write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "fieldmem.worker.main", str(write), str(os.getpid())],
        stdin=subprocess.PIPE,
        env=env,
        pass_fds=(write,),
    )
    try:
        deadline, loaded = time.monotonic() + 60, None
        while time.monotonic() < deadline and process.poll() is None and _heap_bytes(process.pid) < HEAP_PAD:
            if loaded is None and _maps_jaxlib(process.pid):
                loaded = time.monotonic()
            if loaded is not None and time.monotonic() > loaded + 1:  # the control: grown as far as it will
                break
            time.sleep(0.05)
        heap = _heap_bytes(process.pid)
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        os.close(read)
        os.close(write)
    assert (heap >= HEAP_PAD) is padded, heap
