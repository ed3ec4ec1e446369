"""What the donation advisor found (``--suggest``): each leaf's and argument's advice, the donations
it measured, and the verified suggestion. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fieldmem.model.memory import MemoryFigures
from fieldmem.model.word_sets import ArgumentCode, LeafCode, Verification

__all__ = [
    "ArgumentAdvice",
    "LeafAdvice",
    "MeasuredDonation",
    "Suggestion",
]


@dataclass(frozen=True)
class LeafAdvice:
    """What donating one array leaf does, as the advisor found it (``--suggest``).

    ``code`` (see docs/report-schema.md): ``reused`` (an output reuses its
    buffer in the verification compile), ``unused``, ``no-output-of-size``,
    ``outputs-taken``, ``not-reused``, ``copied`` (reused, but XLA still copies
    the input: it is read after the output is written), ``via-temporary``
    (reused, but the output is computed into a temporary and copied back).
    """

    input: str
    input_index: int
    bytes: int  # per device
    code: LeafCode
    reason: str
    output: str | None = None  # the output reusing its buffer, when one does
    saved_bytes: int = 0  # buffer reused minus the copies donation adds; <= 0: it does not pay


@dataclass(frozen=True)
class ArgumentAdvice:
    """Donate one argument or not, and why: JAX donates whole arguments, so this is the unit."""

    argument: str
    position: int | None  # positional index; None for an argument passed by keyword
    donate: bool
    code: ArgumentCode  # donate | a leaf code shared by its leaves | too-small | no-saving | mixed
    reason: str
    bytes: int  # per device, every leaf
    saved_bytes: int  # what donating it saves (sum over its leaves); 0 or less: it does not pay
    leaves: tuple[LeafAdvice, ...] = ()
    # a suggested argument: the footprint the suggestion would need more without it, the other suggested
    # arguments still donated (measured: one compile without it); None: not measured
    marginal_bytes: int | None = None


@dataclass(frozen=True)
class MeasuredDonation:
    """One donation the advisor measured (compiled for ``--suggest``, or one of the check's two compiles): the
    arguments it donates, in the call's order (none: the plain compile), and the figures of that compile."""

    arguments: tuple[str, ...]
    footprint_bytes: int | None
    live_peak_bytes: int | None


@dataclass(frozen=True)
class Suggestion:
    """The donation spec that saves the most, verified by compiling it (``--suggest``).

    ``savings`` and ``memory`` are measured: plain minus the verification
    compile, and that compile's figures. ``compiles`` counts the compiles the
    advisor added to the two of the check (0 when the donated variant or the
    plain one already is the suggestion); ``tried`` lists the specs it
    compiled, in order.
    """

    summary: str
    spec: str  # for --donate: "params,opt_state", or "none"
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    code: str | None = None  # jax.jit(fn, donate_argnums=(0, 1)); None when nothing is worth donating
    alternative_code: str | None = None  # the same donation in the other form, when expressible
    arguments: tuple[ArgumentAdvice, ...] = ()
    verified_by: Verification = "none"  # none: the verification failed
    compiles: int = 0
    tried: tuple[str, ...] = ()
    memory: MemoryFigures | None = None
    savings: dict[str, int | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # the backend it was computed for, as --backend names it ("cpu", "tpu:v5e"); None: not known (older reports)
    backend: str | None = None
    # every donation measured on the way, the plain compile and the suggestion among them: across several
    # backends, the donation best on all of them is read from these (fieldmem.gate.compare)
    measured: tuple[MeasuredDonation, ...] = ()
    # every donation of the arguments that could lend a buffer was measured: the suggestion is the best there is
    searched: bool = False
