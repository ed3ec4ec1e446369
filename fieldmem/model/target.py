"""One target's result: its inputs and outputs, its two compiled variants (``plain`` and ``donated``)
and what fieldmem found for it, or the error that kept it from looking. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fieldmem.model.advice import Suggestion
from fieldmem.model.copies import Alias, Copy, UnusableDonation
from fieldmem.model.memory import LiveBuffer, MemoryFigures, PeakBreakdown, Timeline
from fieldmem.model.run import InPlaceProbe, RunCheck
from fieldmem.model.transfers import Transfers
from fieldmem.model.verdict import Check, Verdict
from fieldmem.model.word_sets import Expectation, StaticCode, TargetStatus

__all__ = [
    "ErrorInfo",
    "InputInfo",
    "MadeStatic",
    "OutputInfo",
    "TargetResult",
    "Variant",
]


@dataclass(frozen=True)
class InputInfo:
    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    donated: bool
    used: bool  # False: jit dropped it as unused
    sharding: str | None = None  # where the compiled program expects it (see docs/report-schema.md)
    layout: str | None = None
    device_shape: tuple[int, ...] | None = None  # the piece each device holds, where the program splits it
    memory_kind: str | None = None  # a memory kind other than the device's ("pinned_host": offloaded); None: device


@dataclass(frozen=True)
class OutputInfo:
    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None
    layout: str | None = None
    device_shape: tuple[int, ...] | None = None
    memory_kind: str | None = None  # a memory kind other than the device's ("pinned_host": offloaded); None: device


@dataclass(frozen=True)
class ErrorInfo:
    kind: str
    message: str


@dataclass(frozen=True)
class MadeStatic:
    """An argument, or a leaf of one, the analysed program holds static where ``jax.jit`` would trace it.

    ``code``: ``concrete`` (a Python scalar that tracing needs concrete, a
    shape, a loop bound, a Python ``if``: ``reason`` is jax's error when it is
    traced) or ``not-traceable`` (a pytree leaf that is no JAX type, a function
    or a string: held static as ``equinox.filter_jit`` holds it).
    """

    argument: str  # the argument's name, or the leaf's path (``config['n']``, ``model.activation``)
    code: StaticCode
    reason: str


@dataclass(frozen=True)
class Variant:
    """One compile of the target: ``plain`` (no donation) or ``donated``."""

    name: str
    donated_arguments: tuple[str, ...]
    memory: MemoryFigures
    aliases: tuple[Alias, ...] = ()
    unusable_donations: tuple[UnusableDonation, ...] = ()
    copies: tuple[Copy, ...] = ()
    jax_warnings: tuple[str, ...] = ()
    # the copies that move a value between memory spaces without a second buffer of it in device memory
    # (kind "staging": a TPU's HBM -> VMEM prefetches, an offload to the host): never copies of state, apart
    # from ``copies``; largest first
    moves: tuple[Copy, ...] = ()
    live_at_peak: tuple[LiveBuffer, ...] = ()  # largest first
    timeline: Timeline | None = None
    peak: PeakBreakdown | None = None  # every byte at the live peak by source (None: no buffer assignment)
    # the same for each other memory space with bytes live in it (a TPU's VMEM, host memory), at its own peak
    space_peaks: tuple[PeakBreakdown, ...] = ()
    lower_seconds: float | None = None
    compile_seconds: float | None = None
    run: RunCheck | None = None  # only with --run
    # compiled with XLA:CPU's code generation at -O0 (--fast-compile, on for static checks); None: not recorded
    fast_compile: bool | None = None


@dataclass(frozen=True)
class TargetResult:
    """Everything fieldmem found for one target, or why it could not look."""

    target: str
    name: str
    status: TargetStatus
    definition: str | None = None
    error: ErrorInfo | None = None
    donate: str | None = None
    expect: Expectation | None = None
    inputs: tuple[InputInfo, ...] = ()
    outputs: tuple[OutputInfo, ...] = ()
    variants: dict[str, Variant] = field(default_factory=dict)
    verdict: Verdict | None = None
    savings: dict[str, int | None] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    suggestion: Suggestion | None = None  # only with --suggest
    devices: tuple[int, ...] = ()  # ids of the devices the program runs on (one program per device)
    probes: tuple[InPlaceProbe, ...] = ()  # only with --probe
    made_static: tuple[MadeStatic, ...] = ()  # held static where jax.jit would trace (or refuse) them
    # what jax copies onto the devices before each call, and what the program holds in host memory (None: nothing)
    transfers: Transfers | None = None
    # file.py:LINE where the target's own jax.jit sets its donation (its donate_argnums): where a donation is
    # changed, and where an annotation of a missing or lost donation goes; None for a plain function
    jit_definition: str | None = None

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)
