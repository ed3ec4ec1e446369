"""A worker that compiles one program at a time keeps one glibc malloc arena per usable core, at least two
(fieldmem.worker.main.fewer_malloc_arenas, fieldmem.model.machine.malloc_arenas); benchmarks/bench_arenas.py
measures what it saves and what fewer would cost."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap

import pytest

from fieldmem.model.codec import encode
from fieldmem.request.options import CheckOptions
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


@pytest.mark.parametrize(("jobs", "asked"), [(1, True), (2, False)])
def test_the_worker_asks_only_when_it_compiles_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch, jobs: int, asked: bool
) -> None:
    called: list[bool] = []
    monkeypatch.setattr(worker, "fewer_malloc_arenas", lambda: called.append(True) or 2)
    request = {"check_options": encode(CheckOptions(jobs=jobs))}
    worker._Worker(request, sys.stdout, queue.Queue())
    assert called == ([True] if asked else [])


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
    not sys.platform.startswith("linux") or not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"),
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
