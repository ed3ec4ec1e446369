"""Python's cyclic garbage collector, paused while fieldmem builds its own records (no jax).

A check reads each compiled program into hundreds of thousands of small
records (an instruction, a logical buffer, a live range, a leaf) that all live
until the report is written and make no cycles of garbage. While they are
built, the collector walks them again and again (each generation-2 pass
walks every object in the process, jax's included) and frees nothing. On
5,000 leaves it ran for 1.25 s of a check, 0.85 s of it while fieldmem read
and analysed the two programs; on a transformer training step, 0.2 s in all
(timed with ``gc.callbacks`` in the worker, 2026-12-03). So the phases that run only fieldmem's code (parsing, reading a
compiled variant, analysing it, encoding the result) run with it paused; the
user's code (importing a module, tracing) runs with it as the user left it.

One pause is shared by every thread inside one (the API and ``--jobs`` read
variants on several threads); the last to leave restores the collector as
it was before the first came in, so a collector the user turned off stays
off. Memory is still freed by reference counting while paused: only cycles
wait, and the pause ends with the phase.

It lives here, where the most records are built (a parse), since this
package imports nothing outside itself; the driver, the findings and the
worker use it as ``fieldmem.xla.hlo.collector_paused``.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

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
