"""What the driver reads from jax, as plain data: compiled variants, their leaves, runs, probes, the environment.

:mod:`fieldmem.driver` fills these in; :mod:`fieldmem.findings` and the
engine read them. They hold text, numbers and bytes only: no jax object (an
executable, a ``ShapeDtypeStruct``, a device) and no import of jax, so
everything past the driver works without jax and a reading can be written
to a report or sent between processes as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fieldmem.model.units import format_bytes

__all__ = [
    "NOTHING_DUMPED",
    "CallPlan",
    "CallShape",
    "CompiledVariant",
    "DeviceMemory",
    "DeviceStats",
    "Environment",
    "InputLeaf",
    "MadeStatic",
    "MemoryReading",
    "OutputLeaf",
    "Placement",
    "ProbeReading",
    "RunReading",
    "device_bytes",
    "plan_call",
    "shared_buffers",
]


@dataclass(frozen=True)
class CallShape:
    """The call both variants were compiled from, as the advisor reasons about it (``--suggest``): its
    arguments, what is static, and how the user jits it. Read off the driver's prepared call
    (:func:`fieldmem.driver.call_shape`); the function and its arguments stay with the driver."""

    function_name: str  # the name a suggested ``jax.jit(NAME, ...)`` line writes
    parameters: tuple[str, ...]  # the function's parameter names (empty when its signature cannot be read)
    positional_names: tuple[str, ...]  # display name of each positional argument, in order
    keyword_names: tuple[str, ...]  # the call's keyword arguments, in the order given
    static_positions: frozenset[int]
    static_names: frozenset[str]
    donation_source: str  # "spec" (fieldmem's --donate) or "jit" (the user's own jit)
    wrapper: str | None = None  # a library wrapper's kind ("flax.nnx.jit", "equinox.filter_jit", ...)
    user_jit: bool = False  # the target is the user's own jit object


#: how an argument leaf reaches the program when it is not already where the program takes it
MOVES = ("host-to-device", "across-devices", "memory-kind")


@dataclass(frozen=True)
class Placement:
    """Where one argument leaf is when the call is made, against where the compiled program takes it, and
    what jax copies before every call to give it to the program (:mod:`fieldmem.driver.placement`).

    ``given``: ``array`` (a committed jax array), ``uncommitted`` (a jax array made without a device, which
    jax moves wherever a program wants it), ``numpy`` (a NumPy array or scalar, on the host), ``scalar``
    (a Python number the program takes as an array) or ``abstract`` (a ``ShapeDtypeStruct``: nothing to move).
    ``moves``: None where the program takes the leaf where it is; else ``host-to-device``,
    ``across-devices`` (another device or sharding) or ``memory-kind`` (the same devices, another memory).
    """

    given: str
    where: str | None = None  # a moved array's sharding in words ("cpu:0"); None: the host, or where it is taken
    memory_kind: str | None = None  # an array's memory kind ("device", "pinned_host")
    moves: str | None = None
    bytes: int = 0  # what jax writes onto the devices before each call, every shard counted (0: no move)
    device_bytes: int = 0  # the most of it on one device: the copy that device holds beside the rest
    devices: int = 0  # the devices it is written to
    held_bytes: int = 0  # the most of the given array on one device: its own buffer, left alive when it is moved


@dataclass(frozen=True)
class InputLeaf:
    """One array leaf of the arguments, numbered as the report numbers it."""

    index: int
    path: str
    argument: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    donated: bool
    hlo_parameter: int | None  # None: jit dropped it as unused
    abstract: bool  # a ShapeDtypeStruct the user gave (not one standing for an array): nothing allocated
    sharding: str | None = None  # how the compiled program expects it laid out over devices
    layout: str | None = None  # its on-device layout, major to minor
    memory_kind: str | None = None  # a memory the program takes it in other than the device's ("pinned_host")
    placement: Placement | None = None  # where the example argument is (None: not read, as without a device)
    device_shape: tuple[int, ...] | None = None  # the piece each device holds, where the program splits it
    # the report index of the first leaf that is the same buffer (one array given twice: ``f(x, x)``); None: its own
    same_buffer_as: int | None = None


@dataclass(frozen=True)
class CallPlan:
    """What the device's allocator is planned to hold at the peak of one call, per device (``bytes``; None
    where XLA's figures are missing), and the part of it that is the executable's code (``code``).

    What a call holds depends on the backend, and it is measured, per backend (docs/peaks.md):

    - a TPU: the arguments (those jit drops too: the call holds them on the device), the outputs that reuse no
      donated input, and the executable's code, which libtpu loads into HBM when the program first runs.
      ``peak_bytes_in_use`` does not count XLA's temporaries and constants there: a call's measured peak
      equals arguments + new outputs + code exactly, with 157.5 KiB of temporaries left out (TPU v5e,
      libtpu 0.0.42.1, hardware/results/tpu-check.md);
    - any other backend: the footprint (arguments + outputs + temporaries − aliases + constants): an H200's
      measured peaks were within 908 B of it, the code not among them (hardware/results/gpu-check-h200/).
    """

    bytes: int | None
    code: int | None = None


def plan_call(
    platform: str | None,
    memory: Mapping[str, int | None],
    constant_bytes: int | None = None,
    dropped_bytes: int = 0,
) -> CallPlan:
    """The :class:`CallPlan` of one call on ``platform`` from XLA's figures (``memory``, by the report's names:
    ``argument_bytes``, ``output_bytes``, ``alias_bytes``, ``temp_bytes``, ``generated_code_bytes``), the
    constants fieldmem counts in the footprint and the bytes of the argument leaves jit dropped (per device)."""
    parts = [memory.get(name) for name in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")]
    if any(p is None for p in parts):
        return CallPlan(None)
    argument, output, alias, temp = (int(p) for p in parts)  # type: ignore[arg-type]
    if platform == "tpu":
        code = memory.get("generated_code_bytes")
        return CallPlan(argument + dropped_bytes + output - alias + int(code or 0), code)
    return CallPlan(argument + output + temp - alias + int(constant_bytes or 0))


def device_bytes(size: int, shape: Sequence[int], device_shape: Sequence[int] | None) -> int:
    """The bytes of one device's piece of a leaf of ``size`` bytes and ``shape`` (``device_shape``: its piece
    where the program splits it over devices; None: whole on each)."""
    if device_shape is None:
        return size
    whole = 1
    for d in shape:
        whole *= int(d)
    piece = 1
    for d in device_shape:
        piece *= int(d)
    return size * piece // whole if whole else size


def shared_buffers(inputs: Sequence[InputLeaf]) -> dict[int, tuple[InputLeaf, ...]]:
    """The arrays the call gives more than once: for each leaf (by report index) that is one buffer with
    another the program takes (``inputs``: a variant's leaves), every leaf of that buffer the program takes,
    in report order. Leaves of a buffer of their own are not in it. One pass over ``inputs``."""
    groups: dict[int, list[InputLeaf]] = {}
    for leaf in inputs:
        if leaf.hlo_parameter is not None:  # a leaf jit dropped is not given to the program
            first = leaf.same_buffer_as if leaf.same_buffer_as is not None else leaf.index
            groups.setdefault(first, []).append(leaf)
    return {leaf.index: tuple(group) for group in groups.values() if len(group) > 1 for leaf in group}


@dataclass(frozen=True)
class MadeStatic:
    """An argument, or a leaf of one, that the compiled program holds static where ``jax.jit`` would trace it.

    ``code``: ``concrete`` (a Python scalar that tracing needs concrete: a shape,
    a loop bound, a Python ``if``; ``reason`` is jax's error when it is traced)
    or ``not-traceable`` (a leaf of a pytree argument that is no JAX type, a
    function or a string: held static as ``equinox.filter_jit`` holds it).
    """

    argument: str  # the argument's name, or the leaf's path (``config['n']``, ``model.activation``)
    code: str
    reason: str


@dataclass(frozen=True)
class OutputLeaf:
    """One array leaf of the outputs, numbered as the report numbers it."""

    index: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None
    layout: str | None = None
    memory_kind: str | None = None  # a memory the program returns it in other than the device's ("pinned_host")
    device_shape: tuple[int, ...] | None = None  # the piece each device holds, where the program splits it


#: why a compile read through XLA's dump (a TPU or GPU, with or without the device) has no buffer assignment
NOTHING_DUMPED = "XLA dumped no buffer assignment for this compile"
#: why one whose executable jax loaded from its persistent cache has none: XLA dumps none of a program it loads,
#: and no run that compiled it kept its dump there (fieldmem.driver.kept)
CACHE_LOADED = (
    "jax loaded this executable from its persistent cache, and XLA dumps no buffer assignment of a program it"
    " loads (no earlier check kept one in the cache folder): check once with --no-cache"
)


@dataclass(frozen=True)
class MemoryReading:
    """``Compiled.memory_analysis()`` of one compile: the figures (None with a reason when absent) and the
    inputs of the live-range analysis (fieldmem.xla.buffers; None with a reason when absent)."""

    figures: dict[str, int | None]
    unavailable: dict[str, str]
    buffer_assignment: bytes | None
    hlo_module_proto: bytes | None
    buffers_unavailable: str | None
    # a deviceless compile's dumped HloProto, which holds its assignment and module (read by fieldmem.xla)
    hlo_proto: bytes | None = None


@dataclass(frozen=True)
class DeviceMemory:
    """The memory one program has on one device: ``bytes``, who has it in words (``holder``: "an H100"),
    what follows the size in words (``after``) and where the figure comes from (``source``). A deviceless
    kind's from :func:`fieldmem.request.backends.device_memory`, a local device's from jax's allocator."""

    bytes: int
    holder: str
    source: str
    after: str = ""

    def words(self) -> str:
        """``an H100 has 79.1 GiB``."""
        return f"{self.holder} has {format_bytes(self.bytes)}{self.after}"


@dataclass(frozen=True)
class CompiledVariant:
    """What one compile produced, before any analysis."""

    name: str
    donated_arguments: tuple[str, ...]
    inputs: tuple[InputLeaf, ...]
    outputs: tuple[OutputLeaf, ...]
    hlo_text: str
    memory: dict[str, int | None]
    memory_unavailable: dict[str, str]
    lowering_warnings: tuple[str, ...]
    tuple_args: bool
    lower_seconds: float
    compile_seconds: float
    # inputs of the live-range analysis (fieldmem.xla.buffers); None with a reason when absent
    buffer_assignment: bytes | None = None
    hlo_module_proto: bytes | None = None
    hlo_proto: bytes | None = None  # instead of the two above: a deviceless compile's dumped HloProto
    buffers_unavailable: str | None = None
    # why jax dropped the donation this variant asked for (None: it did not)
    donation_dropped: str | None = None
    devices: tuple[int, ...] = ()  # ids of the devices the program runs on
    made_static: tuple[MadeStatic, ...] = ()  # held static where jax.jit would trace (or refuse) them
    fast_compile: bool = False  # compiled with XLA:CPU codegen at -O0 (fieldmem.driver.lowering)
    # the memory the program has on each device it runs on (None: not known, as on XLA:CPU)
    device_memory: DeviceMemory | None = None
    # the compiler's own word that the program does not fit the device (libtpu's RESOURCE_EXHAUSTED); the
    # variant was compiled again without that check, so its figures are there
    out_of_memory: str | None = None
    # the platform the program is compiled for ("cpu", "gpu", "tpu"; None: not known): which memory spaces are
    # the device's memory (fieldmem.xla.spaces), and what the device holds for a program beside its buffers
    platform: str | None = None
    # the backend it was compiled for, as --backend names it: "cpu", "gpu", "tpu" (a device here), or "tpu:v5e",
    # "gpu:h100" (compiled without the device); None: not known (a reading of an older fieldmem)
    backend: str | None = None


@dataclass(frozen=True)
class Environment:
    """The jax this process runs: versions, backend and devices (``id``, ``platform``, ``kind`` each)."""

    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    devices: tuple[dict[str, Any], ...]
    # compiled without the device: backend, platform, kind, device_kind, topology, chips, note (None: a real device)
    deviceless: dict[str, Any] | None = None
    plugin_versions: dict[str, str] = field(default_factory=dict)  # the backend's compiler plugins, installed
    # the libraries built on jax (flax, optax…) this process imported, by distribution
    library_versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceStats:
    """``Device.memory_stats()`` of one device around a call; None figures with ``unavailable`` saying why."""

    device: int
    in_use_start: int | None = None  # before the call's arguments were made
    in_use_before: int | None = None  # arguments made, just before the call
    in_use_after: int | None = None
    peak: int | None = None  # peak_bytes_in_use after the call: a process-lifetime high-water mark
    unavailable: str | None = None
    # peak_bytes_in_use before the arguments were made: a peak that did not rise past it was set earlier
    peak_start: int | None = None
    # peak_bytes_in_use just before the call (arguments made, the lift allocated): what the call's own peak
    # must pass to be read (None: not read, as in readings made before it was)
    peak_before: int | None = None
    # bytes fieldmem held on the device through the call to lift it above the high-water mark (freed after;
    # counted in in_use_before, never in the call's measured peak): fieldmem.driver.execute._lift
    lifted: int = 0
    # the allocator's reserved memory (bytes_reserved, peak_bytes_reserved) before the arguments were made and
    # after the call, where the device gives it (a TPU does): memory held for programs beside bytes_in_use
    reserved_start: int | None = None
    reserved_peak: int | None = None


@dataclass(frozen=True)
class RunReading:
    """What one call of a compiled variant did, per input and output leaf (report order) and per device."""

    variant: str
    input_pointers: tuple[tuple[int, ...] | None, ...]  # per-shard buffer addresses before the call
    output_pointers: tuple[tuple[int, ...] | None, ...]
    deleted: tuple[bool | None, ...]  # per input leaf after the call (None: not a jax array)
    memory: tuple[DeviceStats, ...]
    seconds: float
    # per input and output leaf, why its pointers are None (e.g. a Python scalar at call time); None where read
    input_unreadable: tuple[str | None, ...] = ()
    output_unreadable: tuple[str | None, ...] = ()
    # per input leaf (report order): the bytes jax's transfer guard logged it copying onto the devices for the
    # call (empty: not measured, and ``transfers_unavailable`` says why)
    transferred: tuple[int, ...] = ()
    transfers_unmatched: int = 0  # transfers it logged that match no argument leaf
    transfers_unavailable: str | None = None
    platform: str | None = None  # the devices' platform: what the plan a peak is held against counts


@dataclass(frozen=True)
class ProbeReading:
    """Run times of one slice update at two buffer sizes (``--probe``): the same program, the same
    slice, the updated buffer (and every argument of its shape) grown ``factor``-fold along ``dimension``;
    and, after each call, one in-place pass over its output of that buffer (empty: none could be timed)."""

    input_index: int
    output_index: int
    dimension: int
    factor: int
    small_bytes: int
    large_bytes: int
    small_seconds: tuple[float, ...]
    large_seconds: tuple[float, ...]
    pass_small_seconds: tuple[float, ...] = ()
    pass_large_seconds: tuple[float, ...] = ()
