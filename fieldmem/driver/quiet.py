"""jax's start, without its known start-up noise on stderr.

With the accelerator plugins installed (``fieldmem[gpu]``, ``fieldmem[tpu]``),
importing jax and starting its backends on a machine without the device makes
the plugins' native code log to file descriptor 2 before anyone can configure
it: absl's "All log messages before absl::InitializeLog()..." banner, the CUDA
stub's "Could not find cuda drivers on your machine", and (with
``JAX_PLATFORMS`` unset) the CUDA plugin's traceback ending in "Unable to load
CUDA" and libtpu's complaints about TPU host names. None of it is about the
user's program, and it would land in fieldmem's stderr, where one line per
error is the rule.

:func:`start_jax` imports jax and starts its backends with file descriptor 2
sent to a temporary file, then writes back every line that is not one of
those known lines, in order: a real warning or error still reaches stderr.
It is idempotent, and does nothing once jax has started its backends (in the
user's process, their jax was started by them, and so was its noise).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["jax_started", "known_noise", "preload_jaxlib", "quiet_backends_start", "quiet_stderr", "start_jax"]

# one line each: absl's banners and the CUDA stub's message (timestamps, thread ids and line numbers vary)
_NOISE_LINES = (
    re.compile(r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    re.compile(r"WARNING: Logging before InitGoogle\(\) is written to STDERR"),
    re.compile(
        r"[IWE]\d{4} [\d:. ]+\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\."
    ),
    re.compile(r"Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type.*"),
)
# a libtpu error about TPU host names on a machine with no TPU, and the lines of its source trace
_TPU_HOSTS = re.compile(r"[IWE]\d{4} [\d:. ]+\d+ common_lib\.cc:\d+\] .*could not determine TPU worker hostnames.*")
_TRACE_LINE = re.compile(r"=== Source Location Trace: ===\s*|\S+\.cc:\d+")
# the CUDA plugin's traceback when no CUDA runtime loads (jax logs it and carries on without the GPU)
_CUDA_START = re.compile(
    r"Jax plugin configuration error: Exception when calling jax_plugins\.xla_cuda1[23]\.initialize\(\)"
)
_CUDA_END = "RuntimeError: Unable to load CUDA. Is it installed?"

_lock = threading.Lock()


def known_noise(lines: Iterable[str]) -> list[str]:
    """``lines`` less the known start-up noise (each line without its newline), in order."""
    kept: list[str] = []
    pending: list[str] = []  # a CUDA plugin traceback being read: dropped when it ends as the known one
    in_trace = False
    for line in lines:
        if pending:
            pending.append(line)
            if line.strip() == _CUDA_END:
                pending = []
            elif len(pending) > 60:  # not the known traceback after all
                kept += pending
                pending = []
            continue
        if _CUDA_START.fullmatch(line.strip()):
            pending = [line]
            continue
        if _TPU_HOSTS.fullmatch(line.strip()):
            in_trace = True
            continue
        if in_trace and _TRACE_LINE.fullmatch(line.strip()):
            continue
        in_trace = False
        if any(p.fullmatch(line.strip()) for p in _NOISE_LINES):
            continue
        kept.append(line)
    return kept + pending


def jax_started() -> bool:
    """Whether jax has created its backends in this process (after which XLA_FLAGS, JAX_PLATFORMS and
    the plugins' start are past). Reads ``jax._src.xla_bridge._backends``; another jax layout: assumed started."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # another jax layout: assume started
        return True


def start_jax() -> None:
    """Import jax and start its backends, keeping only the lines of fd 2 that are not known noise.

    Call it after the environment jax reads at start (``XLA_FLAGS``,
    ``JAX_PLATFORMS``) is set. A backend that fails to start is jax's to
    report later (``jax.devices(name)`` raises), as without this function.
    """
    with _lock:
        if jax_started():
            return
        with quiet_stderr():
            import jax

            try:
                jax.devices()
            except Exception:  # no default backend: the check that asks for one says so
                pass


def quiet_backends_start() -> None:
    """Have jax's backends start without the known noise whoever starts them: the user's module, imported
    before jax starts in the worker, may (a ``jax.devices()`` or an array at its top) where
    :func:`start_jax` would have. Wraps ``jax._src.xla_bridge.backends``, through which every start goes;
    tolerated when missing (then such a start is as noisy as under ``python``). Call it once jax is imported.
    """
    try:
        from jax._src import xla_bridge
    except Exception:  # another jax layout
        return
    original = getattr(xla_bridge, "backends", None)
    if original is None or getattr(original, "_fieldmem_quiet", False):
        return

    def backends() -> Any:
        if getattr(xla_bridge, "_backends", None):  # started: as it is, on every call after
            return original()
        with quiet_stderr():
            return original()

    backends._fieldmem_quiet = True  # type: ignore[attr-defined]
    xla_bridge.backends = backends


# a line absl/glog logged: severity, date, time, then the native id of the thread that logged it
_LOGGED_BY = re.compile(r"[IWEF]\d{4} [\d:.]+\s+(\d+) ")


class _Redirect:
    """fd 2's one redirection, shared by every thread inside a :class:`quiet_stderr` (compiles run in a
    pool): the first in sends fd 2 to the file, the last out puts it back and writes the lines that are not
    noise (nor taken)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = -1
        self.file: Any = None
        self.taken: set[str] = set()


_redirect = _Redirect()


class quiet_stderr:
    """File descriptor 2 into a temporary file while inside; then the lines that are not noise back to it.

    Threads inside at once share one redirection (fd 2 is the process's): the last to leave writes the lines
    back, in order. ``take``: a pattern; the lines that this thread logged (absl's prefix names the thread)
    and that match it are kept in :attr:`taken` after the block, and not written back (the caller reports
    them in its own words). ``take`` needs ``os.pread``: without it nothing is taken.
    """

    def __init__(self, take: re.Pattern[str] | None = None) -> None:
        self._take = take
        self.taken: list[str] = []
        self._threads: set[int] = set()

    def also_thread(self, native_id: int) -> None:
        """Take the matching lines that thread ``native_id`` logs as this thread's too (a compile this thread
        waits on runs there)."""
        self._threads.add(native_id)

    def take_also(self, pattern: re.Pattern[str]) -> None:
        """Take the lines this thread logged that match ``pattern`` as well (called inside the block)."""
        self._take = pattern if self._take is None else re.compile(f"(?:{self._take.pattern})|(?:{pattern.pattern})")

    def __enter__(self) -> quiet_stderr:
        self._threads.add(threading.get_native_id())
        state = _redirect
        with state.lock:
            _flush_stderr()
            if state.depth == 0:
                state.saved = os.dup(2)
                state.file = tempfile.TemporaryFile()
                os.dup2(state.file.fileno(), 2)
            state.depth += 1
            self._start = os.fstat(state.file.fileno()).st_size
        return self

    def __exit__(self, *exc: object) -> None:
        state = _redirect
        with state.lock:
            _flush_stderr()
            if self._take is not None and hasattr(os, "pread"):
                self._take_lines(state)
            state.depth -= 1
            if state.depth:
                return
            os.dup2(state.saved, 2)
            os.close(state.saved)
            state.file.seek(0)
            text = state.file.read().decode("utf-8", "replace")
            state.file.close()
            kept = [line for line in known_noise(text.splitlines()) if line not in state.taken]
            state.taken.clear()
            state.file, state.saved = None, -1
        if kept:
            os.write(2, ("\n".join(kept) + "\n").encode())

    def _take_lines(self, state: _Redirect) -> None:
        """Keep the lines this thread logged since it came in that match ``take`` (read without moving the
        file's offset, which fd 2 shares)."""
        assert self._take is not None
        fd = state.file.fileno()
        text = os.pread(fd, os.fstat(fd).st_size - self._start, self._start).decode("utf-8", "replace")
        for line in text.splitlines():
            logged = _LOGGED_BY.match(line)
            if logged and int(logged.group(1)) in self._threads and self._take.search(line):
                self.taken.append(line)
                state.taken.add(line)


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except Exception:
        pass


def preload_jaxlib() -> None:
    """Load numpy, ml_dtypes and jaxlib (most of what importing jax takes), without importing jax.

    For a worker waiting for its request: none of them reads the environment
    the request brings when it is imported (jax's configuration, XLA's flags
    and the TPU library's variables are read when jax is imported and its
    backends start, after the request). A failure is left for the real import
    to report.

    jaxlib's logging reads ``TF_CPP_MIN_LOG_LEVEL`` as it loads: it gets the
    default jax's ``__init__`` gives it before loading jaxlib (a value the
    user set stays). jaxlib's GPU kernels are loaded too, without their
    known noise (with the CUDA plugin installed and no GPU, each says it
    found no CUDA driver): the user's module, imported before jax starts,
    then imports jax without it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import jaxlib.xla_client  # noqa: F401
        import ml_dtypes  # noqa: F401
        import numpy  # noqa: F401
    except Exception:  # pragma: no cover - reported when jax is imported
        return
    import importlib

    with quiet_stderr():
        for name in _GPU_KERNELS:  # what jax's import loads of them (jax._src.lib), in its order
            try:
                importlib.import_module(name)
            except Exception:  # pragma: no cover - jax's import says why, if it minds
                pass


_GPU_KERNELS = (
    "jaxlib.gpu_solver",
    "jaxlib.gpu_sparse",
    "jaxlib.gpu_prng",
    "jaxlib.gpu_linalg",
    "jaxlib.gpu_rnn",
    "jaxlib.gpu_triton",
)
