"""Where a compiled variant's memory goes: XLA's figures, the memory spaces, the bytes live at the
peak by source and by line, and the timeline of live bytes. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fieldmem.model.word_sets import LiveBufferKind, PeakSourceKind

__all__ = [
    "HostFromShardings",
    "LiveBuffer",
    "MemoryFigures",
    "MemorySpace",
    "PeakBreakdown",
    "PeakBuffer",
    "PeakLine",
    "PeakSource",
    "StackFrame",
    "Timeline",
]


MEMORY_FIGURES = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "generated_code_bytes",
    "peak_bytes",
    "footprint_bytes",
    "live_peak_bytes",
    "constant_bytes",
)


@dataclass(frozen=True)
class MemorySpace:
    """The figures of one memory space of the buffer assignment (an allocation's color).

    ``memory_space`` 0 is the device's default memory (HBM on a GPU or TPU), which
    XLA's argument, output and temp figures and fieldmem's footprint and live peak
    count; on a TPU, 1 is VMEM (``S(1)`` in a shape's layout); docs/peaks.md
    lists the others seen.
    ``allocated_bytes``: the space's allocations (constants included, thread-local
    ones not); ``live_peak_bytes``: the peak of the bytes live in them; ``name``: what
    the space is on the program's platform (``HBM``, ``VMEM``: fieldmem.xla.spaces;
    None where not known); ``device``: whether it is the device's own memory, which
    the footprint and the live peak count (a TPU's VMEM is not; a GPU's collective
    memory is).
    """

    memory_space: int
    allocated_bytes: int
    live_peak_bytes: int
    name: str | None = None
    device: bool = True


@dataclass(frozen=True)
class HostFromShardings:
    """A ``host_*`` figure that is fieldmem's reading, not XLA's: ``memory_analysis()`` gives 0 for it
    although the compiled program takes or returns leaves in a host memory kind (``pinned_host``), because
    the backend counts host memory in its device figures (XLA:CPU does).

    ``figure``: the figure (``host_argument_bytes``, ``host_output_bytes``, ``host_alias_bytes``);
    ``bytes``: its value in :class:`MemoryFigures`, the bytes per device of ``leaves``, the input or output
    leaves the program's own input or output shardings put in host memory (for ``host_alias_bytes``, the
    aliased inputs among them); ``xla_bytes``: what ``memory_analysis()`` gave (0), kept so nothing is
    hidden; ``counted_in``: the device figure that holds these bytes instead (``argument_bytes``);
    ``note``: all of it in words, for the renderers.
    """

    figure: str
    bytes: int
    xla_bytes: int
    counted_in: str
    leaves: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class MemoryFigures:
    """XLA's figures verbatim (``memory_analysis()``), plus ``footprint_bytes``.

    ``footprint_bytes`` = argument + output + temp - alias + constant: what the
    executable holds at once. ``live_peak_bytes``: the maximum over the schedule of the
    bytes the allocation slices live at one point cover (per allocation, the
    union of their byte ranges; fieldmem.xla.buffers).
    ``constant_bytes``: the arrays compiled into the program as constants (a
    closed-over array), which XLA holds for the executable's lifetime, outside
    the argument, output and temp figures (docs/peaks.md). A figure the backend
    does not give is None, and ``unavailable`` says why. The ``host_*`` figures are XLA's too, except each
    one ``host_from_shardings`` lists: XLA gave 0 for it although the program holds leaves in host memory,
    and the figure is fieldmem's reading of the compiled program's own shardings, XLA's 0 kept beside it.
    """

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    peak_bytes: int | None = None
    footprint_bytes: int | None = None
    live_peak_bytes: int | None = None
    constant_bytes: int | None = None
    host_argument_bytes: int | None = None
    host_output_bytes: int | None = None
    host_alias_bytes: int | None = None
    host_temp_bytes: int | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    # every memory space of the buffer assignment, ascending (empty without one):
    # live_peak_bytes above is memory space 0's
    memory_spaces: tuple[MemorySpace, ...] = ()
    # the host_* figures read from the program's shardings, where XLA gives 0 (XLA:CPU); empty: all XLA's
    host_from_shardings: tuple[HostFromShardings, ...] = ()
    # a figure's meaning where it is not what its name says on every backend, in words, by figure name: on a
    # TPU, XLA's peak_bytes counts the on-chip memory (VMEM) beside HBM, and the HBM peak is live_peak_bytes
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveBuffer:
    """An allocation slice live at the live peak, with the value that took it."""

    bytes: int
    kind: LiveBufferKind
    instruction: str | None
    shape: str | None
    source: str | None
    input: str | None = None  # the input leaf the value is (the parameter, or a copy of it)
    call_site: str | None = None  # source is library code: the user's line that led there
    # the value occupies a donated input's buffer without being that input (an update written into it, after the
    # input's last read): the input whose buffer it is; the value is named by ``instruction`` and ``output``
    buffer_of: str | None = None
    output: str | None = None  # the output the value is returned as, by path


@dataclass(frozen=True)
class StackFrame:
    """One frame of the Python stack jax recorded with an operation: a file (as fieldmem shows paths),
    a line, the function; ``library``: code the user does not edit (flax, optax, jax, the interpreter)."""

    file: str
    line: int
    function: str | None = None
    library: bool = False


@dataclass(frozen=True)
class PeakBuffer:
    """One allocation slice live at the live peak, as counted in its :class:`PeakSource`."""

    bytes: int  # what it adds to the peak: its size less bytes a slice counted before it shares
    kind: LiveBufferKind
    instruction: str | None
    shape: str | None
    padding_bytes: int = 0  # its size beyond its elements' (tiled layouts of a TPU or GPU)


@dataclass(frozen=True)
class PeakSource:
    """The bytes live at the peak that come from one place of the user's program.

    An argument's buffer (``kind`` "argument": ``input`` names the leaf; a donated input's
    buffer holding what was written into it stays its input's), a value the program computes
    (``stack``: the Python stack of the operation that made it, outermost first, from the user's
    outermost frame; ``output``: the result leaf it is, when it is returned), or the executable's
    constants. ``line`` is the user's own line it comes from: the innermost frame of the user's code.
    """

    kind: PeakSourceKind
    bytes: int
    line: str | None = None
    stack: tuple[StackFrame, ...] = ()
    input: str | None = None
    output: str | None = None
    padding_bytes: int = 0
    buffers: tuple[PeakBuffer, ...] = ()  # largest first


@dataclass(frozen=True)
class PeakLine:
    """The bytes at the peak by the user's line (an argument by its path): what ``--top`` lists and a
    change of peak is worded by. ``label``: ``model.py:61``, or the argument's path."""

    label: str
    kind: PeakSourceKind
    bytes: int
    buffers: int
    share: float  # of the live peak


@dataclass(frozen=True)
class PeakBreakdown:
    """Where the live peak comes from: every byte live at it, grouped by source (docs/peaks.md).

    ``sources`` and ``lines`` each add up to ``bytes`` exactly: for memory space 0 (the device's
    default memory) the variant's ``live_peak_bytes``; for another space (a TPU's VMEM, host memory) that
    space's own live peak (:class:`MemorySpace`).
    """

    bytes: int
    memory_space: int = 0  # 0: the device's default memory (the live peak); else that space at its own peak
    sources: tuple[PeakSource, ...] = ()  # largest first
    lines: tuple[PeakLine, ...] = ()  # largest first
    padding_bytes: int = 0
    peak_instruction: str | None = None  # the operation at which the peak is reached


@dataclass(frozen=True)
class Timeline:
    """Bytes the live allocation slices cover over the schedule, decimated for display.

    ``positions`` are indices into the flattened schedule (0 .. ``length`` - 1,
    a loop body's instructions inline at their ``while``), ascending;
    ``live_bytes`` the bytes live at each. At most a few hundred buckets are
    kept, each by its lowest and highest point, so the envelope of the curve
    and its peak survive decimation exactly.
    """

    length: int
    positions: tuple[int, ...]
    live_bytes: tuple[int, ...]
    peak_position: int | None = None
    peak_instruction: str | None = None
    peak_source: str | None = None
