"""The one diff engine: what is "the same" copy, alias and figure in two runs of a target.

The baseline gate (:mod:`fieldmem.gate.baseline`) and ``fieldmem compare``
(:mod:`fieldmem.gate.compare`) both ask this module which copies and aliases
of two runs are the same, whether a figure moved beyond its tolerance, and
how a change of bytes reads (:func:`change_text`). They decide only what a
change means to them (a regression, a significant difference) and how their
documents word it; every change they report is a :class:`~fieldmem.report.Change`.

Pure: no jax, no files, nothing printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from fieldmem.report import Copy
from fieldmem.request.tolerance import Tolerance
from fieldmem.units import format_bytes

__all__ = [
    "AliasMatch",
    "CopyPair",
    "CopyRecord",
    "array_shape",
    "change_text",
    "copy_record",
    "match_aliases",
    "match_copies",
    "moved",
    "signed_bytes",
]

_LAYOUT = re.compile(r"\{[^}]*\}")


@dataclass(frozen=True)
class CopyRecord:
    """A copy XLA kept, without its HLO instruction name (which changes between runs)."""

    kind: str
    bytes: int
    shape: str
    input: str | None  # the input leaf it copies (``of_parameter``)
    source: str | None
    bytes_per_call: int | None = None
    trip_count: int | None = None
    output: str | None = None
    cause: str | None = None

    @property
    def per_call(self) -> int:
        """Bytes copied per call: ``bytes_per_call`` for a loop copy with a known trip count, else ``bytes``."""
        return self.bytes_per_call if self.bytes_per_call is not None else self.bytes


def copy_record(copy: Copy) -> CopyRecord:
    """A report's copy as the engine (and a baseline file) records it."""
    return CopyRecord(
        kind=copy.kind,
        bytes=copy.bytes,
        shape=copy.shape,
        input=copy.of_parameter,
        source=copy.source,
        bytes_per_call=copy.bytes_per_call,
        trip_count=copy.trip_count,
        output=copy.output,
        cause=copy.cause,
    )


# ----------------------------------------------------------------------------
# Copies


@dataclass(frozen=True)
class CopyPair:
    """One copy across two runs: ``before`` None when it is new, ``after`` None when it is gone."""

    before: CopyRecord | None
    after: CopyRecord | None


def array_shape(shape: str) -> str:
    """``f32[512,512]{1,0}`` -> ``f32[512,512]``: backends lay out the same array differently."""
    return _LAYOUT.sub("", shape)


_COPY_KEYS: tuple[Callable[[CopyRecord], tuple[Any, ...]], ...] = (
    # exact: the same copy
    lambda c: (c.kind, c.input, c.output, array_shape(c.shape), c.source),
    # the same copy, grown or shrunk (its shape changed)
    lambda c: (c.kind, c.input, c.output, c.source),
    # the same copy, moved: lines above it were edited
    lambda c: (c.kind, c.input, c.output, array_shape(c.shape)),
)


def match_copies(before: Sequence[CopyRecord], after: Sequence[CopyRecord]) -> tuple[CopyPair, ...]:
    """Pair copies across runs by what they copy, never by HLO instruction name.

    Three passes, strictest first: kind + input/output + shape (without
    layout) + source line; then without the shape (a copy that grew); then
    without the source line (a copy whose line moved). Returns every copy of
    ``before`` in its order, paired or gone, then the new copies in the order
    of ``after``.
    """
    partner: dict[int, int] = {}  # index in before -> index in after
    left = list(range(len(before)))
    right = list(range(len(after)))
    for key in _COPY_KEYS:
        pool: dict[Any, list[int]] = {}
        for index in right:
            pool.setdefault(key(after[index]), []).append(index)
        still_left = []
        for index in left:
            candidates = pool.get(key(before[index]))
            if candidates:
                partner[index] = candidates.pop(0)
            else:
                still_left.append(index)
        left = still_left
        taken = set(partner.values())
        right = [index for index in right if index not in taken]
    pairs = [CopyPair(copy, after[partner[index]] if index in partner else None) for index, copy in enumerate(before)]
    return tuple(pairs + [CopyPair(None, after[index]) for index in right])


# ----------------------------------------------------------------------------
# Aliases


class _AliasLike(Protocol):
    """A report's :class:`~fieldmem.report.Alias` or a baseline's ``AliasRecord``."""

    @property
    def input(self) -> str: ...

    @property
    def output(self) -> str: ...

    @property
    def bytes(self) -> int: ...


A = TypeVar("A", bound=_AliasLike)


@dataclass(frozen=True)
class AliasMatch(Generic[A]):
    """Aliases of two runs matched by donated input leaf (an alias is a leaf whose buffer is reused).

    ``rerouted``: the leaf's buffer is reused in both runs, by another output.
    """

    lost: tuple[A, ...]
    new: tuple[A, ...]
    rerouted: tuple[tuple[A, A], ...]


def match_aliases(before: Iterable[A], after: Iterable[A]) -> AliasMatch[A]:
    """The aliases lost, new and rerouted, each in the order of its run."""
    old = {a.input: a for a in before}
    now = {a.input: a for a in after}
    return AliasMatch(
        lost=tuple(a for name, a in old.items() if name not in now),
        new=tuple(a for name, a in now.items() if name not in old),
        rerouted=tuple((a, now[name]) for name, a in old.items() if name in now and now[name].output != a.output),
    )


# ----------------------------------------------------------------------------
# Figures and sizes


def moved(tolerance: Tolerance, before: int, after: int) -> int:
    """+1: grew beyond the tolerance; -1: shrank by more than it; 0: within it.

    Both directions measure the allowance on ``before`` (the reference).
    """
    if not tolerance.allows(before, after):
        return 1
    if before - after > tolerance.allowance(before):
        return -1
    return 0


def signed_bytes(value: int) -> str:
    """``+4.0 KiB`` / ``-4.0 KiB`` / ``+0 B``."""
    return f"+{format_bytes(value)}" if value >= 0 else f"-{format_bytes(-value)}"


def change_text(before: int, after: int) -> str:
    """``4.0 KiB → 8.0 KiB (+4.0 KiB, +100.0%)``: the one way a change of bytes is written."""
    diff = after - before
    percent = f", {diff / before:+.1%}" if before else ""
    return f"{format_bytes(before)} → {format_bytes(after)} ({signed_bytes(diff)}{percent})"
