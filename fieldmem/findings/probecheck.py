"""What a probe showed (``--probe``): whether an aliased slice update's call grows with its buffer.

:func:`probe_candidates` picks the aliased slice updates worth probing from the donated program;
:func:`probe_outcome` holds the call's times at two buffer sizes against an in-place pass over the
added bytes timed beside it (``slice-only``, ``whole-buffer`` or ``inconclusive``), and
:func:`apply_probes` adds the probes and their findings (``probe-whole-buffer``) to a result. A
fact about time beside the verdict's about memory. It never imports jax and never prints.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fieldmem.findings.verdict import rank
from fieldmem.model.readings import ProbeReading
from fieldmem.model.run import InPlaceProbe
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Finding
from fieldmem.model.word_sets import ProbeCode
from fieldmem.xla import hlo

if TYPE_CHECKING:
    from fieldmem.xla.hlo import HloParser

__all__ = ["PROBE_MIN_BYTES", "apply_probes", "probe_candidates", "probe_outcome"]

# below this, a whole-buffer write is too quick to tell from the call's own overhead
PROBE_MIN_BYTES = 1 << 20
# what a call adds at the larger size, in in-place passes over the added bytes (timed beside it):
# at or above WHOLE_BUFFER_PASSES (with the two sizes' times apart beyond their spread) the call
# rewrites the buffer; at or below SLICE_ONLY_PASSES it writes only the slice; in between, inconclusive.
# A rewrite that only writes (a fill) costs less than a pass that reads and writes, hence under 1
WHOLE_BUFFER_PASSES = 0.3
SLICE_ONLY_PASSES = 0.1
# the share of (larger, smaller) call pairs in which the larger is slower, at or above which the two
# sizes' times are apart (0.5: no difference; 1: every larger call slower than every smaller one)
APART_PAIRS = 0.75
# a yardstick pass whose time grows less than this with the buffer (growth as InPlaceProbe.growth)
# is too close to the call overhead to measure against
PASS_MIN_GROWTH = 0.25


def probe_outcome(
    input: str,
    output: str,
    update: str,
    reading: ProbeReading | None,
    *,
    aliased: bool = True,
    per_device: int | None = None,
) -> InPlaceProbe:
    """Decide from the medians whether one call's time grows with the updated buffer as a rewrite would.

    What the probe times is one whole call of the compiled program, not the
    update alone: a time that grows with the buffer says that the call does
    work in proportion to it (the update rewriting the buffer, or any other
    work that grows with it), and the words say so. The yardstick is one
    in-place pass over a buffer like it, timed beside the calls at both
    sizes: what the call adds at the larger size is judged in passes over
    the added bytes (``passes``), so a time that grows by microseconds, far
    less than the memory it would have to write, is never called a rewrite.
    ``aliased``: whether the timed program aliases ``output`` to ``input``
    (the donated variant's plan). ``per_device``: the bytes of ``input``
    each device holds, where it is split over several (the sizes are then
    said per device; the probe's byte fields stay the whole array's).
    """
    if reading is None:
        return InPlaceProbe(
            input,
            output,
            update,
            "not-probed",
            f"no dimension of {input} could be grown with the program still tracing",
        )
    small = statistics.median(reading.small_seconds)
    large = statistics.median(reading.large_seconds)
    size_ratio = reading.large_bytes / reading.small_bytes
    growth = (large / small - 1) / (size_ratio - 1) if small > 0 and size_ratio > 1 else None
    pass_small = statistics.median(reading.pass_small_seconds) if reading.pass_small_seconds else None
    pass_large = statistics.median(reading.pass_large_seconds) if reading.pass_large_seconds else None
    size = _Sizes(reading.small_bytes, per_device)
    timing = (
        f"one call of the program took {_us(small)} with {input} at {size(reading.small_bytes)} and "
        f"{_us(large)} at {size(reading.large_bytes)} (medians of {len(reading.small_seconds)})"
    )
    yardstick = _Yardstick(input, reading, pass_small, pass_large, size)
    passes = yardstick.passes(large - small)
    apart = _apart(reading.small_seconds, reading.large_seconds)
    code, message = _probe_verdict(input, output, update, growth, passes, apart, timing, yardstick, aliased)
    return InPlaceProbe(
        input,
        output,
        update,
        code,
        message,
        dimension=reading.dimension,
        small_bytes=reading.small_bytes,
        large_bytes=reading.large_bytes,
        small_seconds=small,
        large_seconds=large,
        growth=growth,
        repeats=len(reading.small_seconds),
        pass_small_seconds=pass_small,
        pass_large_seconds=pass_large,
        passes=passes,
    )


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """A size of the probed buffer in words: per device where it is split over several, as the report's
    figures are; else the whole array's."""

    whole: int  # the buffer's bytes at its own size
    per_device: int | None  # what each device holds of it then (None: not split)

    def __call__(self, bytes: int) -> str:
        if self.per_device is None or not 0 < self.per_device < self.whole:
            return format_bytes(bytes)
        return f"{format_bytes(bytes * self.per_device // self.whole)} per device"


@dataclasses.dataclass(frozen=True)
class _Yardstick:
    """One in-place pass over a buffer like the updated one, timed at both sizes beside the calls."""

    input: str
    reading: ProbeReading
    small: float | None  # median seconds
    large: float | None
    size: _Sizes

    @property
    def added(self) -> float | None:
        """Seconds one pass over the added bytes takes; None: no pass was timed, or it does not grow
        with the buffer enough to measure against."""
        if self.small is None or self.large is None or self.small <= 0:
            return None
        ratio = self.reading.large_bytes / self.reading.small_bytes
        if ratio <= 1 or (self.large / self.small - 1) / (ratio - 1) < PASS_MIN_GROWTH:
            return None
        return self.large - self.small

    def passes(self, added_seconds: float) -> float | None:
        added = self.added
        return added_seconds / added if added else None

    @property
    def bytes_added(self) -> str:
        return self.size(self.reading.large_bytes - self.reading.small_bytes)

    @property
    def words(self) -> str:
        if self.small is None or self.large is None:
            return f"no in-place pass over a buffer like {self.input} could be timed beside it"
        return (
            f"one in-place pass over a buffer like {self.input} took {_us(self.small)} at "
            f"{self.size(self.reading.small_bytes)} and {_us(self.large)} at {self.size(self.reading.large_bytes)}"
        )


def _apart(small: Sequence[float], large: Sequence[float]) -> bool:
    """Whether the larger size's calls are slower beyond the timings' spread: of every pair of one call
    at each size, at least ``APART_PAIRS`` have the larger one slower. Robust to the scattered slow
    calls a loaded machine gives (a preempted call), where quartiles that must not overlap are not."""
    if not small or not large:
        return False
    slower = sum(1 for big in large for little in small if big > little)
    return slower >= APART_PAIRS * len(small) * len(large)


def _probe_verdict(
    input: str,
    output: str,
    update: str,
    growth: float | None,
    passes: float | None,
    apart: bool,
    timing: str,
    yardstick: _Yardstick,
    aliased: bool,
) -> tuple[ProbeCode, str]:
    if growth is None:
        return "inconclusive", f"{output}: no usable timing ({timing})"
    if passes is None:
        return "inconclusive", (
            f"{output}: {timing}; {yardstick.words}, too close together here to tell a rewrite of the buffer from "
            "the call's own time"
            if yardstick.small is not None
            else f"{output}: {timing}; {yardstick.words}, so a rewrite of the buffer cannot be told from the "
            "call's own time"
        )
    measure = f"{yardstick.words} (timed beside it)"
    if passes >= WHOLE_BUFFER_PASSES and apart:
        cost = f"{timing}, as long as {passes:.1f} passes over the added {yardstick.bytes_added} take: {measure}"
        if not aliased:
            return "whole-buffer", (
                f"{output} is not aliased to {input} in this program, and its run time grows with the buffer: "
                f"{cost}; the whole call was timed, so this is all the work of the call that grows with {input} "
                "(without an alias, at least a copy of the buffer)"
            )
        return "whole-buffer", (
            f"{output} is aliased to {input} and updated by a {update}, yet the call's run time grows with the "
            f"buffer: {cost}; the whole call was timed, so the {update} or other work of the program rewrites "
            "a buffer of that size at run time, although the HLO is in place"
        )
    if passes <= SLICE_ONLY_PASSES:
        added = (
            "the call's time does not grow with the buffer"
            if passes <= 0
            else f"what the call's time grows by is {_share(passes)} of one pass over the added {yardstick.bytes_added}"
        )
        return "slice-only", (
            f"{output}: {added} ({timing}; {measure}), so the {update} writes only its slice at run time"
        )
    if passes >= WHOLE_BUFFER_PASSES:
        return "inconclusive", (
            f"{output}: the call's time grows by about {passes:.1f} passes over the added {yardstick.bytes_added}, "
            f"but within the spread of the calls' times ({timing}; {measure}); the whole call was timed, not the "
            f"{update} alone"
        )
    return "inconclusive", (
        f"{output}: the call's time grows with the buffer by {_share(passes)} of one pass over the added "
        f"{yardstick.bytes_added}: more than a slice's write, less than a rewrite ({timing}; {measure}); "
        f"the whole call was timed, not the {update} alone"
    )


def _share(passes: float) -> str:
    return f"{passes:.0%}" if passes >= 0.01 else "under 1%"


def _us(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1e-2 else f"{seconds * 1e3:.1f} ms"


def apply_probes(result: TargetResult, probes: Sequence[InPlaceProbe]) -> TargetResult:
    """``result`` with its probes, and a warning finding for each update that rewrites its whole buffer."""
    if result.verdict is None:
        return result
    sizes = {leaf.path: leaf.bytes for leaf in result.inputs}
    findings = tuple(
        Finding(
            "warning",
            "probe-whole-buffer",
            # a fact about time beside the verdict's fact about memory: say which each is
            f"{probe.message}. The verdict is about memory (which buffers exist), and stands: the time says the "
            "update touches the whole buffer, not that a second one is made",
            input=probe.input,
            output=probe.output,
            bytes=sizes.get(probe.input) if probe.input else None,
        )
        for probe in probes
        if probe.code == "whole-buffer"
    )
    verdict = dataclasses.replace(result.verdict, findings=rank(result.verdict.findings + findings))
    return dataclasses.replace(result, probes=tuple(probes), verdict=verdict)


@dataclasses.dataclass(frozen=True)
class ProbeCandidate:
    """An aliased output updated by a slice update: what ``--probe`` times."""

    input_index: int
    output_index: int
    input: str
    output: str
    update: str
    bytes: int  # per device
    factor: int  # how much larger the second buffer is; 0: not probed (see ``skip``)
    skip: str | None = None


PROBE_MAX_BYTES = 1 << 30  # a buffer this large is not grown (the larger copy would need several GiB)


def probe_candidates(result: TargetResult, donated_hlo: str, parser: HloParser | None = None) -> list[ProbeCandidate]:
    """The donated variant's aliases whose output is a dynamic-update-slice or scatter of its buffer
    (``parser``: the one that parsed the check's programs; None: a fresh one)."""
    variant = result.variants.get("donated")
    if variant is None:
        return []
    module = hlo.parse_hlo_module(donated_hlo, parser)
    producers = hlo.output_values(module)
    found = []
    for alias in variant.aliases:
        producer = producers[alias.output_index] if alias.output_index < len(producers) else None
        update = hlo.slice_update_kind(module, producer)
        if update is None:
            continue
        size = alias.bytes
        skip = None
        factor = 4 if size <= 64 << 20 else 2
        if size < PROBE_MIN_BYTES:
            skip = f"{alias.input} is {format_bytes(size)}: too small to time a whole-buffer write apart from the call itself"
        elif size > PROBE_MAX_BYTES:
            skip = f"{alias.input} is {format_bytes(size)}: too large to grow for the probe"
        found.append(
            ProbeCandidate(
                alias.input_index,
                alias.output_index,
                alias.input,
                alias.output,
                update,
                size,
                0 if skip else factor,
                skip,
            )
        )
    return found
