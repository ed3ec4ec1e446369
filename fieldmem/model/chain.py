"""An update chain (``pkg.mod:a,b,c``): its steps, the leaves handed from one to the next, where it
stops being in place, and what it costs run step by step or fused. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fieldmem.model.verdict import Check
from fieldmem.model.word_sets import ChainStepStatus, CostLayout, Expectation, HandOffCode

__all__ = [
    "Chain",
    "ChainBreak",
    "ChainCost",
    "ChainStep",
    "HandOff",
]


@dataclass(frozen=True)
class HandOff:
    """A leaf whose dtype, shape, sharding or layout changes on its way through a chain.

    ``code``: ``dtype-change``, ``shape-change``, ``sharding-change`` or
    ``layout-change`` (step ``step`` returns the leaf changed), or
    ``reshard`` / ``relayout`` (step ``step`` expects its input otherwise
    than step ``step - 1`` returns it, so jax moves it between the calls).
    ``breaks``: the change stops the leaf's buffer from being reused.
    """

    step: int  # 0-based
    code: HandOffCode
    leaf: str  # the step's input leaf
    output: str | None  # the step's output leaf, for changes within a step
    before: str
    after: str
    message: str
    breaks: bool = True
    source: str | None = None


@dataclass(frozen=True)
class ChainStep:
    """One step of a chain, checked like a target (its result is in ``Report.results``).

    ``status``: ``in-place`` (donated, every output reuses an input or is
    small), ``grows`` (the only new buffers are what the state grows by),
    ``breaks`` (an output that could reuse an input does not), ``error``
    (it could not be checked) or ``not-checked`` (an earlier step failed, so
    its arguments are unknown).
    """

    index: int  # 0-based
    function: str
    result: str  # the name of its TargetResult
    status: ChainStepStatus
    summary: str
    definition: str | None = None
    argument_bytes: int | None = None  # per device, what the step is given
    output_bytes: int | None = None  # per device, what it returns
    footprint: dict[str, int | None] = field(default_factory=dict)  # plain, donated
    live_peak: dict[str, int | None] = field(default_factory=dict)  # plain, donated
    kept_alive: tuple[str, ...] = ()  # input leaves still held after the donated step
    handoffs: tuple[HandOff, ...] = ()
    grows_by: int | None = None  # donated footprint minus the previous step's (None for the first)
    extras: tuple[str, ...] = ()  # the arguments it takes besides the state (step_args): not state
    transfer_bytes: int | None = None  # what jax copies onto the devices before each call of it (None: not known)


@dataclass(frozen=True)
class ChainBreak:
    """The first step at which the chain stops being in place, and why."""

    step: int
    function: str
    reason: str
    leaf: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class ChainCost:
    """What the chain needs at once, run one way: ``steps`` (each step its own jit, the
    worst step counts) or ``fused`` (one jit of the whole chain)."""

    layout: CostLayout
    plain_footprint: int | None = None
    donated_footprint: int | None = None
    plain_live_peak: int | None = None
    donated_live_peak: int | None = None
    worst_step: int | None = None  # steps: the step with the largest donated footprint


@dataclass(frozen=True)
class Chain:
    """An update chain: each step's outputs are the next step's arguments (``pkg.mod:a,b,c``)."""

    target: str
    name: str
    in_place: bool
    summary: str
    steps: tuple[ChainStep, ...] = ()
    fused: str | None = None  # the name of the fused chain's TargetResult
    first_break: ChainBreak | None = None
    costs: tuple[ChainCost, ...] = ()
    cost_summary: str | None = None  # separate steps against the fused chain, in words
    expect: Expectation = "any"
    checks: tuple[Check, ...] = ()
    # what jax copies onto the devices for one pass through the steps, each its own jit (None: a step not known)
    transfer_bytes: int | None = None

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)
