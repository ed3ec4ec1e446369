"""How a check runs, as the user asked for it: thresholds and speed levers. No jax.

The one definition of each default that the CLI, the config, the Python API and
the pytest plugin share.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CheckOptions", "MIN_BYTES"]

#: Copies and findings smaller than this stay in the JSON report but out of the
#: verdict, the table and the baseline gate (``--min-bytes``; 1 KiB).
MIN_BYTES = 1024


@dataclass(frozen=True)
class CheckOptions:
    """How to check: thresholds and speed levers, shared by the CLI and the API."""

    min_bytes: int = MIN_BYTES
    jobs: int = 1
    suggest: bool = False  # also find (and verify by compiling) the donation that saves the most
    backend: str | None = None  # compile for this backend (cpu, gpu, tpu); None: jax's default
    cache_dir: str | None = None  # JAX's persistent compilation cache folder; None: jax's own setting
    run: bool = False  # also run both variants and check the plan by buffer identity and device memory
    probe: bool = False  # with run: time each aliased slice update at two buffer sizes
    isolate: bool = True  # with run: each target in a worker process of its own (clean peak, crash-safe)
    timeout: float | None = None  # with run and isolate: seconds a target's worker may take
    fast_compile: bool = False  # XLA:CPU codegen at -O0 (same HLO and buffer assignment; code size unavailable)

    @property
    def compile_fast(self) -> bool:
        """Whether compiles use the fast options: not when --probe times the code they generate."""
        return self.fast_compile and not self.probe
