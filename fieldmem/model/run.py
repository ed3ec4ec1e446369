"""What running and timing a compiled variant measured: the aliases checked by buffer identity and
each device's memory around the call (``--run``), and the slice updates timed at two sizes (``--probe``).
Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass

from fieldmem.model.word_sets import ProbeCode

__all__ = [
    "AliasCheck",
    "DeviceMemory",
    "InPlaceProbe",
    "RunCheck",
]


@dataclass(frozen=True)
class AliasCheck:
    """One alias (planned, or found) checked at run time by buffer identity (``--run``)."""

    input: str
    input_index: int
    output: str
    output_index: int
    confirmed: bool  # the output's buffer is the input's on every shard
    detail: str
    # False: one side has no device buffer the run can read (a Python scalar at call time), so the alias
    # can be neither confirmed nor refuted; ``detail`` says why. Such a check never fails the run.
    comparable: bool = True


@dataclass(frozen=True)
class DeviceMemory:
    """``Device.memory_stats()`` of one device around the call (``--run``); None figures and
    ``unavailable`` where the backend has none (cpu), never 0.

    ``measured_peak`` = ``peak_bytes_in_use`` after the call minus ``bytes_in_use``
    before the arguments were made (and minus what fieldmem held beside the call to
    lift it above the device's high-water mark: docs/runtime.md); ``predicted`` what
    the device's allocator is planned to hold at the call's peak, per device, by the
    rule of its backend (docs/peaks.md): on a TPU the arguments, the outputs that
    reuse no donated input and the executable's code (``code_bytes``, libtpu loads
    it into HBM), elsewhere the variant's ``footprint_bytes``; ``code_resident``: the
    code was on the device before the call (an identical program loaded it), and the
    plan leaves it out; ``reserved_peak``: the allocator's reserved memory at its
    peak less before the arguments were made, where the device gives it;
    ``difference`` measured minus predicted.
    """

    device: int
    in_use_before: int | None = None
    in_use_after: int | None = None
    peak: int | None = None
    measured_peak: int | None = None
    predicted: int | None = None
    difference: int | None = None
    unavailable: str | None = None
    code_bytes: int | None = None  # the part of ``predicted`` that is the executable's code (None: none counted)
    code_resident: bool = False
    reserved_peak: int | None = None


@dataclass(frozen=True)
class RunCheck:
    """What one call of the variant did (``--run``): the plan's aliases confirmed or not, per device memory."""

    aliases: tuple[AliasCheck, ...] = ()  # every alias of the plan
    unplanned: tuple[AliasCheck, ...] = ()  # an output found in an input's buffer the plan does not alias
    deleted: tuple[str, ...] = ()  # donated input leaves jax deleted (consumed)
    kept: tuple[str, ...] = ()  # donated input leaves still alive after the call
    devices: tuple[DeviceMemory, ...] = ()
    seconds: float | None = None
    worst_device: int | None = None  # the device with the largest measured peak (None: none measured)

    @property
    def confirmed(self) -> bool:
        """Every alias that could be compared was confirmed."""
        return all(a.confirmed for a in self.aliases if a.comparable)


@dataclass(frozen=True)
class InPlaceProbe:
    """A slice update timed at two buffer sizes (``--probe``): does its run time grow with the buffer as
    a rewrite of it would?

    ``code``: ``slice-only`` (what the call adds at the larger size is a
    tenth or less of one pass over the added bytes: only the slice is
    written), ``whole-buffer`` (it adds 0.3 passes or more, beyond the
    calls' spread: the update rewrites the buffer although the HLO is in
    place), ``inconclusive``, or ``not-probed`` (with ``message`` saying
    why). ``passes`` = (large − small) / (pass_large − pass_small): the
    call's added time in in-place passes over the added bytes, timed beside
    it (None: no pass was timed, or its time did not grow enough with the
    buffer to measure against). ``growth`` = (time ratio − 1) / (size ratio
    − 1): 0 for a constant time, 1 for a time proportional to the buffer.
    """

    input: str
    output: str
    update: str  # dynamic-update-slice | scatter
    code: ProbeCode
    message: str
    dimension: int | None = None
    small_bytes: int | None = None
    large_bytes: int | None = None
    small_seconds: float | None = None  # median
    large_seconds: float | None = None  # median
    growth: float | None = None
    repeats: int | None = None
    pass_small_seconds: float | None = None  # median of one in-place pass over a buffer like input
    pass_large_seconds: float | None = None
    passes: float | None = None
