"""Python's cyclic garbage collector, paused while fieldmem builds its own records (shared ground, no jax).

A check reads each compiled program into hundreds of thousands of small
records (an instruction, a logical buffer, a live range, a leaf) that all live
until the report is written and make no cycles of garbage. While they are
built, the collector walks them again and again (each generation-2 pass
walks every object in the process, jax's included) and frees nothing. So the
phases that run only fieldmem's code (reading a compiled variant, parsing and
analysing it, encoding or decoding a result) run with it paused; the user's
code (importing a module, tracing) runs with it as the user left it.

One pause is shared by every thread inside one (the API and ``--jobs`` read
variants on several threads); the last to leave restores the collector as
it was before the first came in, so a collector the user turned off stays
off. Memory is still freed by reference counting while paused: only cycles
wait, and the pause ends with the phase.

A pause is best kept whole: when it ends, the collector's first pass walks
every record made during it. So the checker pauses from a target's first
read to its answer, and resumes the collector (:func:`collector_resumed`)
around the user's code it runs in between.

It is ground every layer may stand on: the driver, the engine and the
findings pause here. The pure readers of ``fieldmem.xla`` import nothing
outside their package and do not pause themselves; their callers do.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused", "collector_resumed", "collector_stays_paused"]

_LOCK = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off inside (as a ``with`` block or a decorator); as it was before, once the last of
    the threads inside has left."""
    global _pauses, _was_enabled
    with _LOCK:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _LOCK:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


@contextlib.contextmanager
def collector_resumed() -> Iterator[None]:
    """Inside a pause, the collector as it was before the pause, for the user's code run from inside one
    (the advisor's compiles, ``--run``); paused again after. Outside any pause, nothing changes.

    While one thread is resumed, the others inside the pause run with the
    collector on too: a pause saves time, it is not needed for correctness.
    """
    with _LOCK:
        resumed = _pauses > 0 and _was_enabled
        if resumed:
            gc.enable()
    try:
        yield
    finally:
        with _LOCK:
            if resumed and _pauses > 0:
                gc.disable()


def collector_stays_paused() -> None:
    """The pause this thread is in does not end: the collector stays off when it is left.

    For a process about to end by ``os._exit`` once it has answered (a
    one-shot worker): nothing of the user's runs after, and a pass on the way
    out would walk every record of the check for nothing, before the parent
    sees the process end. Outside any pause, nothing changes.
    """
    global _was_enabled
    with _LOCK:
        if _pauses > 0:
            _was_enabled = False
