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

__all__ = ["jax_started", "known_noise", "preload_jaxlib", "quiet_stderr", "start_jax"]

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


class quiet_stderr:
    """File descriptor 2 into a temporary file while inside; then the lines that are not noise back to it."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)

    def __exit__(self, *exc: object) -> None:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        kept = known_noise(text.splitlines())
        if kept:
            os.write(2, ("\n".join(kept) + "\n").encode())


def preload_jaxlib() -> None:
    """Load numpy, ml_dtypes and jaxlib (most of what importing jax takes), without importing jax.

    For a worker waiting for its request: none of them reads the environment
    the request brings when it is imported (jax's configuration, XLA's flags
    and the TPU library's variables are read when jax is imported and its
    backends start, after the request). A failure is left for the real import
    to report.

    jaxlib's logging reads ``TF_CPP_MIN_LOG_LEVEL`` as it loads: it gets the
    default jax's ``__init__`` gives it before loading jaxlib (a value the
    user set stays).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import jaxlib.xla_client  # noqa: F401
        import ml_dtypes  # noqa: F401
        import numpy  # noqa: F401
    except Exception:  # pragma: no cover - reported when jax is imported
        pass
