"""The worker's compile pool kept across the targets it serves one at a time (fieldmem.worker.readers.TargetPool):
a target's compiles, those nobody asked for the result of too, end before the next target starts."""

from __future__ import annotations

import threading

from fieldmem.worker.readers import target_pool


def test_drain_waits_for_a_compile_left_by_a_target_that_failed() -> None:
    release = threading.Event()
    drained = threading.Event()
    with target_pool(1) as pool:
        assert pool is not None
        pool.submit(lambda: 1)  # the plain variant: its result taken
        pool.submit(release.wait, 5)  # the donated one, left when the plain one's compile failed

        def drain() -> None:
            pool.drain()
            drained.set()

        thread = threading.Thread(target=drain)
        thread.start()
        assert not drained.wait(0.2)  # still compiling: the next target must not start
        release.set()
        assert drained.wait(5)
        thread.join(5)


def test_drain_takes_a_failed_compile_without_raising_and_forgets_it() -> None:
    def fails() -> None:
        raise RuntimeError("XLA compilation failed")

    with target_pool(1) as pool:
        assert pool is not None
        future = pool.submit(fails)
        pool.drain()  # the failure is the target's, read from its future: not raised here
        assert isinstance(future.exception(), RuntimeError)
        started = threading.Event()
        pool.submit(started.set)
        pool.drain()
        assert started.is_set()


def test_no_pool_where_no_thread_is_asked_for() -> None:
    with target_pool(0) as pool:
        assert pool is None
