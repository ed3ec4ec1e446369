"""What an optimized HLO module is, as fieldmem reads it: frozen records and shape arithmetic.

The records (:class:`HloModule`, :class:`HloComputation`, :class:`HloInstruction`,
the ``input_output_alias`` entries, source locations, loops and kept copies) are
built by :mod:`.parse` and read by :mod:`.queries`. Pure, no jax: nothing here
reads text beyond a shape string. Caches on the frozen records are
``functools.cached_property`` (the records keep a ``__dict__`` for them: no
``slots``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import cached_property

from .text import HloParseError, split_top_level

__all__ = [
    "AliasEntry",
    "BranchInfo",
    "ConstantSite",
    "CopySite",
    "HloComputation",
    "HloInstruction",
    "HloModule",
    "LoopInfo",
    "SourceLocation",
    "array_layout",
    "memory_space",
    "shape_bytes",
    "sub_shape",
    "tuple_elements",
]

# Bytes per element of XLA's primitive types. Sub-byte types are rounded up
# per element, which is how XLA stores them unless packed (a layout with E(4)).
_ELEMENT_BYTES: dict[str, int] = {
    "pred": 1,
    "s1": 1,
    "u1": 1,
    "s2": 1,
    "u2": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "token": 0,
}
_F8 = re.compile(r"^f8e\w+$|^f4e\w+$|^f6e\w+$")

_ELEMENT_BITS = re.compile(r"E\((\d+)\)")  # a layout's element size in bits (packed sub-byte types)
_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")


@dataclass(frozen=True)
class SourceLocation:
    """A line of Python code that an HLO instruction came from.

    ``callers``: the frames that led to it, innermost first (the function
    that called this line's function first), when XLA printed the stack
    (``stack_frame_id``); empty for the older inline ``source_file``/``source_line``
    metadata. They take no part in comparisons: two instructions from the same
    line are from the same line, whoever called it.
    """

    file: str
    line: int
    function: str | None = None
    callers: tuple[SourceLocation, ...] = field(default=(), compare=False, repr=False)

    @property
    def stack(self) -> tuple[SourceLocation, ...]:
        """This frame, then its callers, innermost first."""
        return (self, *self.callers)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class HloInstruction:
    """One instruction of a computation, as printed."""

    name: str
    opcode: str
    shape: str
    operands: tuple[str, ...]
    called: tuple[str, ...] = ()
    is_root: bool = False
    op_name: str | None = None
    source: SourceLocation | None = None
    parameter_number: int | None = None
    tuple_index: int | None = None
    backend_config: str | None = None

    @property
    def bytes(self) -> int:
        return shape_bytes(self.shape)


@dataclass(frozen=True)
class HloComputation:
    """A named computation: its instructions in schedule order."""

    name: str
    is_entry: bool
    instructions: tuple[HloInstruction, ...]

    def by_name(self) -> dict[str, HloInstruction]:
        """Instructions by name (built once per computation; do not modify it)."""
        return self._instructions_by_name

    @cached_property
    def _instructions_by_name(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self.instructions}

    def users(self) -> dict[str, list[HloInstruction]]:
        """For each value, the instructions that read it, in schedule order (built once per computation,
        when first asked for; do not modify it)."""
        return self._users

    @cached_property
    def _users(self) -> dict[str, list[HloInstruction]]:
        users: dict[str, list[HloInstruction]] = {}
        for instruction in self.instructions:
            for operand in instruction.operands:
                users.setdefault(operand, []).append(instruction)
        return users

    @property
    def root(self) -> HloInstruction | None:
        for instruction in self.instructions:
            if instruction.is_root:
                return instruction
        return self.instructions[-1] if self.instructions else None


@dataclass(frozen=True)
class AliasEntry:
    """One ``input_output_alias`` entry: output ``output_index`` reuses a parameter."""

    output_index: tuple[int, ...]
    parameter_number: int
    parameter_index: tuple[int, ...]
    kind: str


@dataclass(frozen=True)
class HloModule:
    """One HLO module: its computations and the aliasing facts of its header."""

    name: str
    computations: tuple[HloComputation, ...]
    aliases: tuple[AliasEntry, ...]
    buffer_donors: tuple[tuple[int, tuple[int, ...]], ...]
    is_scheduled: bool
    entry_parameter_shapes: tuple[str, ...] = ()
    entry_result_shape: str | None = None

    @cached_property
    def entry(self) -> HloComputation:
        """The ENTRY computation (found once per module)."""
        found = next((c for c in self.computations if c.is_entry), None)
        if found is None:
            raise HloParseError("the HLO module has no ENTRY computation")
        return found

    def computation(self, name: str) -> HloComputation | None:
        for computation in self.computations:
            if computation.name == name:
                return computation
        return None


@dataclass(frozen=True)
class LoopInfo:
    """A while loop: its instruction, the computation holding it, its trip count."""

    instruction: str
    computation: str
    trip_count: int | None
    source: SourceLocation | None
    outer: LoopInfo | None = None  # the loop this one runs inside, if any

    @property
    def depth(self) -> int:
        """1 for an outermost loop, 2 for a loop inside it, and so on."""
        return 1 + (self.outer.depth if self.outer is not None else 0)

    @property
    def total_trip_count(self) -> int | None:
        """Iterations of this loop's body per call of the module (all enclosing loops
        multiplied), or None when any of the trip counts is unknown."""
        total = 1
        loop: LoopInfo | None = self
        while loop is not None:
            if loop.trip_count is None:
                return None
            total *= loop.trip_count
            loop = loop.outer
        return total


@dataclass(frozen=True)
class BranchInfo:
    """A branch of a ``conditional``: the computation that runs only when that branch is taken.

    ``branch`` is ``"true"``/``"false"`` for a conditional on a predicate, else the
    branch's index (``"0"``, ``"1"``, ...: jax lowers ``lax.cond(pred, true_fun,
    false_fun)`` to an index conditional whose branch 1 is ``true_fun``).
    """

    conditional: str  # the conditional instruction
    computation: str  # the computation holding it
    branch: str
    branches: int  # how many branches the conditional has
    source: SourceLocation | None  # the conditional's line
    depth: int = 1  # 1 for an outermost conditional, 2 for one inside a branch, and so on


@dataclass(frozen=True)
class CopySite:
    """A ``copy`` (or ``copy-start``) that XLA kept in the optimized program."""

    instruction: str
    computation: str
    shape: str
    bytes: int
    operand: str | None
    parameter_number: int | None
    parameter_index: tuple[int, ...]
    layout_change: bool
    loop: LoopInfo | None
    source: SourceLocation | None
    source_role: str | None  # "copy", "operand", "user" or None
    feeds_output: bool = False
    output_indices: tuple[tuple[int, ...], ...] = field(default_factory=tuple)
    # the innermost conditional branch the copy runs in (only when that branch runs)
    branch: BranchInfo | None = None
    # in a while body: "old" when it copies the carry the body was given (a view of the
    # body's parameter), "new" when the copy becomes the carry the body returns (it
    # reaches the body's root tuple, directly or as the buffer an update is written
    # into); None for any other value, and outside a while body
    carry: str | None = None
    # the memory spaces it copies from and to (0 the device's default memory; on a TPU,
    # S(1) is VMEM), and whether it only stages a value through another space (below)
    source_memory_space: int = 0
    memory_space: int = 0
    staging: bool = False


@dataclass(frozen=True)
class ConstantSite:
    """A ``constant`` XLA keeps in a buffer of its own: an array compiled into the program.

    ``source`` is the constant's own metadata, else the first instruction that
    reads it (``source_role`` says which: "constant" or "user").
    """

    instruction: str
    computation: str
    shape: str
    bytes: int
    source: SourceLocation | None
    source_role: str | None


# ----------------------------------------------------------------------------
# Shapes: strings such as ``f32[64,128]{1,0}`` or ``(f32[4]{0}, s32[])``


def _element_bytes(dtype: str) -> int:
    if dtype in _ELEMENT_BYTES:
        return _ELEMENT_BYTES[dtype]
    if _F8.match(dtype):
        return 1
    raise HloParseError(f"unknown HLO element type {dtype!r}")


# a program of thousands of leaves has thousands of values of a few shapes: each shape string is sized once
@functools.lru_cache(maxsize=8192)
def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string such as ``f32[64,128]{1,0}`` or a tuple of them.

    Dynamic dimensions (``<=8``) count at their bound, as XLA allocates them.
    A tiled layout (``{1,0:T(8,128)}``, an accelerator's) counts its padding:
    the minor dimensions are rounded up to whole tiles, tile by tile, as XLA
    sizes the buffer (``f32[1022,1024]{1,0:T(8,128)}`` is 1024 x 1024 x 4
    bytes, ``s32[]{:T(128)}`` 512). A packed element size (``E(4)``) is used
    for the bits per element.
    """
    total = 0
    for dtype, dims, layout in _ARRAY_SHAPE.findall(shape):
        sizes: list[int] = []
        for dim in dims.split(","):
            dim = dim.strip()
            if dim.startswith("<="):
                dim = dim[2:].strip()
            if not dim:
                continue
            if not dim.isdigit():
                # "?" (unbounded dynamic) has no size XLA could allocate up front
                raise HloParseError(f"cannot size dimension {dim!r} of HLO shape {shape!r}")
            sizes.append(int(dim))
        count = _tiled_elements(sizes, layout, shape)
        packed = _ELEMENT_BITS.search(layout)
        if packed:  # an element size in bits (s4[64]{0:E(4)} packed; pred{...E(32)} widened)
            total += (count * int(packed.group(1)) + 7) // 8
        else:
            total += count * _element_bytes(dtype)
    return total


_TILES = re.compile(r"T((?:\([^()]*\))+)")
_TILE = re.compile(r"\(([^()]*)\)")


def _tiled_elements(sizes: list[int], layout: str, shape: str) -> int:
    """Elements an array of ``sizes`` occupies in ``layout``: with its tiling padding, if tiled."""
    count = 1
    for size in sizes:
        count *= size
    tiles = _TILES.search(layout) if layout else None
    if tiles is None:
        return count
    minor_to_major_text = layout[1:-1].partition(":")[0]
    try:
        minor_to_major = [int(x) for x in minor_to_major_text.split(",") if x.strip()]
    except ValueError:
        raise HloParseError(f"cannot read the layout of HLO shape {shape!r}") from None
    if sorted(minor_to_major) != list(range(len(sizes))):
        if minor_to_major:
            raise HloParseError(f"the layout of HLO shape {shape!r} does not fit its dimensions")
        minor_to_major = list(range(len(sizes) - 1, -1, -1))
    # the dimensions as they lie in memory, major to minor; each tile then pads and
    # splits the minor ones (a tile with more dimensions than the array pads it with 1s)
    physical = [sizes[d] for d in reversed(minor_to_major)]
    for tile_text in _TILE.findall(tiles.group(1)):
        tile: list[int | None] = []
        for part in tile_text.split(","):
            part = part.strip()
            if part == "*":  # a dimension combined with the next, not tiled
                tile.append(None)
            elif part.isdigit() and int(part) > 0:
                tile.append(int(part))
            else:
                raise HloParseError(f"cannot read tile {tile_text!r} of HLO shape {shape!r}")
        if not tile:
            continue
        if len(tile) > len(physical):
            physical = [1] * (len(tile) - len(physical)) + physical
        head, minor = physical[: -len(tile)], physical[-len(tile) :]
        outer: list[int] = []
        inner: list[int] = []
        for size, t in zip(minor, tile):
            if t is None:
                outer.append(size)
                inner.append(1)
            else:
                outer.append(-(-size // t))
                inner.append(t)
        physical = head + outer + inner
    count = 1
    for size in physical:
        count *= size
    return count


_MEMORY_SPACE = re.compile(r"S\((\d+)\)")


def memory_space(shape: str) -> int:
    """The memory space of an array shape's layout (``S(1)``: on a TPU, its VMEM); 0, the
    device's default memory, when the layout names none. A tuple shape is in 0 (its elements
    each say where they are)."""
    match = _ARRAY_SHAPE.fullmatch(shape.strip())
    if not match or not match.group(3):
        return 0
    found = _MEMORY_SPACE.search(match.group(3).partition(":")[2])
    return int(found.group(1)) if found else 0


def array_layout(shape: str) -> str | None:
    """The physical layout of an array shape (minor-to-major order and tiling).

    The memory space (``S(1)``) is left out: a copy between memory spaces
    moves the array, it does not re-lay it out.
    """
    match = _ARRAY_SHAPE.fullmatch(shape.strip())
    if not match or not match.group(3):
        return None
    layout = _MEMORY_SPACE.sub("", match.group(3)[1:-1])
    minor_to_major, _, rest = layout.partition(":")
    rest = rest.strip()
    return "{" + minor_to_major.replace(" ", "") + (":" + rest if rest else "") + "}"


def tuple_elements(shape: str) -> list[str]:
    """The element shapes of a tuple shape; a non-tuple shape is its own single element."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape]
    return [part.strip() for part in split_top_level(shape[1:-1]) if part.strip()]


def sub_shape(shape: str, index: tuple[int, ...]) -> str | None:
    """The shape at tuple index ``index`` of ``shape`` (``()`` is the shape itself)."""
    shape = shape.strip()
    for i in index:
        if not shape.startswith("("):
            return None
        elements = tuple_elements(shape)
        if i >= len(elements):
            return None
        shape = elements[i]
    return shape
