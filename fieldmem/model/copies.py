"""What XLA kept of the user's buffers in one compiled variant: the donated inputs an output reuses
(:class:`Alias`), those none reuses (:class:`UnusableDonation`), and the copies it kept (:class:`Copy`).
Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass

from fieldmem.model.word_sets import CopyCause, CopyKind, DonationCode, SourceRole

__all__ = [
    "Alias",
    "Copy",
    "UnusableDonation",
]


@dataclass(frozen=True)
class Alias:
    """A donated input leaf whose buffer an output reuses."""

    input: str
    input_index: int
    output: str
    output_index: int
    bytes: int


@dataclass(frozen=True)
class UnusableDonation:
    """A donated input leaf that no output reuses."""

    input: str
    input_index: int
    bytes: int
    reason: str
    code: DonationCode


@dataclass(frozen=True)
class Copy:
    """A ``copy`` XLA kept in the compiled program."""

    bytes: int
    shape: str
    kind: CopyKind
    of_parameter: str | None
    input_index: int | None
    computation: str
    instruction: str
    source: str | None
    source_role: SourceRole | None
    output: str | None = None  # the output this copy is returned as, if any
    cause: CopyCause | None = None  # why XLA kept this copy
    trip_count: int | None = None  # loop copies: iterations per call, when known
    bytes_per_call: int | None = None  # bytes x trip count, when known
    call_site: str | None = None  # source is library code: the user's line that led there
    # conditional copies: the branch that makes it ("true"/"false", or its index) and
    # the conditional's source line; the copy runs only when that branch runs
    branch: str | None = None
    branch_source: str | None = None
    # the memory spaces it copies from and to (0: the device's default memory; on a TPU,
    # 1 is VMEM); a "staging" copy is one between two of them that makes no second buffer
    source_memory_space: int = 0
    memory_space: int = 0
