"""Optimized HLO text -> aliases, copies, source locations, loops.

This module reads the text that ``Compiled.as_text()`` returns (XLA's optimized,
scheduled HLO module) and nothing else. It never imports jax, so every function
here is tested on golden text without compiling anything. The layout of the
text shifts between XLA versions; everything that reads it lives here, and a
field that is missing is reported as missing rather than guessed.

Two generations of source metadata are understood: the older inline
``source_file="..." source_line=N`` and the newer ``stack_frame_id=N`` that
points into the ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames``
tables printed after the module header. A stack frame's own file location is
its source; the ``parent_frame_id`` chain is not followed (as printed with
jax 0.10.2 those ids look shifted by one: a root frame prints 1, and many
frames print their own id).

Only the first module is read when the text holds several. Instruction and
computation names are read with or without the ``%`` prefix, and operands
may carry their shape inline (``f32[3]{0} %x``). Text that is cut off or is
not HLO raises :class:`HloParseError`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Iterator

__all__ = [
    "AliasEntry",
    "CopySite",
    "HloInstruction",
    "HloComputation",
    "HloModule",
    "HloParseError",
    "LoopInfo",
    "SourceLocation",
    "find_copies",
    "output_parameters",
    "output_values",
    "parse_hlo_module",
    "shape_bytes",
    "reader_source",
    "sub_shape",
    "tuple_elements",
    "value_source",
    "view_source",
]

# Bytes per element of XLA's primitive types. Sub-byte types are rounded up
# per element, which is how XLA:CPU stores them unless packed.
_ELEMENT_BYTES: dict[str, int] = {
    "pred": 1,
    "s1": 1, "u1": 1,
    "s2": 1, "u2": 1, "s4": 1, "u4": 1,
    "s8": 1, "u8": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16,
    "token": 0,
}
_F8 = re.compile(r"^f8e\w+$|^f4e\w+$|^f6e\w+$")

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")


class HloParseError(ValueError):
    """The text is not an HLO module this parser understands."""


@dataclass(frozen=True)
class SourceLocation:
    """A line of user code that an HLO instruction came from."""

    file: str
    line: int
    function: str | None = None

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
    name: str
    is_entry: bool
    instructions: tuple[HloInstruction, ...]

    def by_name(self) -> dict[str, HloInstruction]:
        """Instructions by name (built once per computation; do not modify it)."""
        found = self.__dict__.get("_by_name")
        if found is None:
            found = {i.name: i for i in self.instructions}
            object.__setattr__(self, "_by_name", found)  # a cache on a frozen record
        return found

    def users(self) -> dict[str, list[HloInstruction]]:
        """For each value, the instructions that read it, in schedule order."""
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
    name: str
    computations: tuple[HloComputation, ...]
    aliases: tuple[AliasEntry, ...]
    buffer_donors: tuple[tuple[int, tuple[int, ...]], ...]
    is_scheduled: bool
    entry_parameter_shapes: tuple[str, ...] = ()
    entry_result_shape: str | None = None

    @property
    def entry(self) -> HloComputation:
        found = self.__dict__.get("_entry")
        if found is None:
            found = next((c for c in self.computations if c.is_entry), None)
            if found is None:
                raise HloParseError("the HLO module has no ENTRY computation")
            object.__setattr__(self, "_entry", found)  # a cache on a frozen record
        return found

    def computation(self, name: str) -> HloComputation | None:
        for computation in self.computations:
            if computation.name == name:
                return computation
        return None

    def loop_bodies(self) -> dict[str, LoopInfo]:
        """Computations run once per iteration of a while loop, with that loop's facts.

        A computation called (directly or through fusions, calls and nested
        loops) from a while body or condition is counted as in the loop; the
        innermost loop wins. A nested loop's :class:`LoopInfo` names the loop
        around it in ``outer``, and ``total_trip_count`` multiplies them out.
        """
        by_name = {c.name: c for c in self.computations}
        result: dict[str, LoopInfo] = {}
        visited: set[tuple[str, int]] = set()
        loops: dict[tuple[str, str, int], LoopInfo] = {}

        def visit(name: str, loop: LoopInfo | None) -> None:
            key = (name, id(loop))
            if key in visited or name not in by_name:
                return
            visited.add(key)
            if loop is not None and (name not in result or loop.depth > result[name].depth):
                result[name] = loop
            for instruction in by_name[name].instructions:
                inner = loop
                if instruction.opcode == "while":
                    # one LoopInfo per (while, enclosing loop), so repeated visits are cut off
                    loop_key = (name, instruction.name, id(loop))
                    if loop_key not in loops:
                        loops[loop_key] = _loop_info(instruction, name, loop)
                    inner = loops[loop_key]
                for callee in instruction.called:
                    visit(callee, inner)

        # from the entry first (so nested loops see their outer loop), then anything
        # the entry does not reach
        computations = sorted(self.computations, key=lambda c: not c.is_entry)
        for computation in computations:
            visit(computation.name, None)
        return result


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


# ----------------------------------------------------------------------------
# Shapes


def _element_bytes(dtype: str) -> int:
    if dtype in _ELEMENT_BYTES:
        return _ELEMENT_BYTES[dtype]
    if _F8.match(dtype):
        return 1
    raise HloParseError(f"unknown HLO element type {dtype!r}")


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string such as ``f32[64,128]{1,0}`` or a tuple of them.

    Dynamic dimensions (``<=8``) count at their bound, as XLA allocates them.
    """
    total = 0
    for dtype, dims, _layout in _ARRAY_SHAPE.findall(shape):
        count = 1
        for dim in dims.split(","):
            dim = dim.strip()
            if dim.startswith("<="):
                dim = dim[2:].strip()
            if not dim:
                continue
            if not dim.isdigit():
                # "?" (unbounded dynamic) has no size XLA could allocate up front
                raise HloParseError(f"cannot size dimension {dim!r} of HLO shape {shape!r}")
            count *= int(dim)
        total += count * _element_bytes(dtype)
    return total


_MEMORY_SPACE = re.compile(r"S\(\d+\)")


def _layout(shape: str) -> str | None:
    """The physical layout of an array shape (minor-to-major order and tiling).

    The memory space (``S(1)``) is left out: a copy between memory spaces
    moves the array, it does not re-lay it out.
    """
    match = _ARRAY_SHAPE.fullmatch(shape.strip())
    if not match or not match.group(3):
        return None
    layout = _MEMORY_SPACE.sub("", match.group(3)[1:-1])
    minor_to_major, colon, rest = layout.partition(":")
    rest = rest.strip()
    return "{" + minor_to_major.replace(" ", "") + (":" + rest if rest else "") + "}"


def tuple_elements(shape: str) -> list[str]:
    """The element shapes of a tuple shape; a non-tuple shape is its own single element."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape]
    return [part.strip() for part in _split_top_level(shape[1:-1]) if part.strip()]


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


# ----------------------------------------------------------------------------
# Low-level scanning


_CLOSE = {"(": ")", "{": "}", "[": "]"}
# the only characters that change the scanners' state; everything between them is skipped
# in one regex step, which makes scanning megabytes of HLO text fast
_BRACKETS_OR_QUOTE = re.compile(r'[(){}\[\]"]')
_STRING_END = re.compile(r'\\.|"', re.DOTALL)  # an escape pair, or the closing quote


def _string_end(text: str, start: int) -> int:
    """Index just past the quote closing the string that opens at ``text[start]``, or -1."""
    i = start + 1
    while True:
        match = _STRING_END.search(text, i)
        if match is None:
            return -1
        if match.group() == '"':
            return match.end()
        i = match.end()


def _matching(text: str, start: int) -> int:
    """Index just past the bracket that closes ``text[start]``, honouring quotes."""
    stack = [_CLOSE[text[start]]]
    i = start + 1
    while True:
        match = _BRACKETS_OR_QUOTE.search(text, i)
        if match is None:
            raise HloParseError(f"unclosed bracket in {text[:120]!r}")
        char, i = match.group(), match.end()
        if char == '"':
            i = _string_end(text, match.start())
            if i < 0:
                raise HloParseError(f"unclosed bracket in {text[:120]!r}")
        elif char in _CLOSE:
            stack.append(_CLOSE[char])
        else:
            if char != stack[-1]:
                raise HloParseError(f"unbalanced {char!r} in {text[:120]!r}")
            stack.pop()
            if not stack:
                return i


_SEPARATOR_SCANNERS: dict[str, re.Pattern[str]] = {}


def _split_top_level(text: str, sep: str = ",", strict: bool = False) -> list[str]:
    """``text`` split at ``sep`` outside brackets and strings.

    With ``strict``, unbalanced brackets or an unterminated string raise
    :class:`HloParseError` (the text was cut off).
    """
    scanner = _SEPARATOR_SCANNERS.get(sep)
    if scanner is None:
        scanner = _SEPARATOR_SCANNERS[sep] = re.compile(r'[(){}\[\]"]|' + re.escape(sep))
    parts: list[str] = []
    depth = 0
    begin = i = 0
    while True:
        match = scanner.search(text, i)
        if match is None:
            break
        char, i = match.group(), match.end()
        if char == '"':
            end = _string_end(text, match.start())
            if end < 0:
                if strict:
                    raise HloParseError(f"unclosed bracket or string in {text[:120]!r}")
                break
            i = end
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
            if depth < 0 and strict:
                raise HloParseError(f"unbalanced {char!r} in {text[:120]!r}")
        elif depth == 0:  # the separator, outside brackets
            parts.append(text[begin : match.start()])
            begin = i
    if strict and depth != 0:
        raise HloParseError(f"unclosed bracket or string in {text[:120]!r}")
    parts.append(text[begin:])
    return parts


def _attributes(text: str) -> dict[str, str]:
    """``key=value`` pairs of the attribute tail of an instruction or header."""
    result: dict[str, str] = {}
    for part in _split_top_level(text, strict=True):
        key, sep, value = part.strip().partition("=")
        if sep:
            result[key.strip()] = value.strip()
    return result


def _index_tuple(text: str) -> tuple[int, ...]:
    text = text.strip().strip("{}").strip()
    return tuple(int(x) for x in text.split(",") if x.strip())


# ----------------------------------------------------------------------------
# Header and source tables

_ALIAS_ENTRY = re.compile(
    r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*(?:,\s*([\w-]+))?\s*\)"
)
_DONOR_ENTRY = re.compile(r"\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*\)")
_TABLE_HEADERS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(.*)$")


def _header_value(header: str, key: str) -> str | None:
    marker = f"{key}="
    at = header.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    if start < len(header) and header[start] in "{(":
        return header[start:_matching(header, start)]
    end = header.find(",", start)
    return header[start:end if end >= 0 else len(header)]


def _parse_header(header: str) -> tuple[str, dict[str, str | None]]:
    body = header[len("HloModule"):].strip()
    name = body.split(",", 1)[0].strip()
    keys = ("input_output_alias", "buffer_donor", "is_scheduled", "entry_computation_layout")
    return name, {key: _header_value(body, key) for key in keys}


@dataclass
class _SourceTables:
    file_names: dict[int, str] = field(default_factory=dict)
    function_names: dict[int, str] = field(default_factory=dict)
    file_locations: dict[int, dict[str, str]] = field(default_factory=dict)
    stack_frames: dict[int, dict[str, str]] = field(default_factory=dict)

    def location(self, frame_id: int) -> SourceLocation | None:
        frame = self.stack_frames.get(frame_id)
        if frame is None:
            return None
        loc = self.file_locations.get(int(frame.get("file_location_id", -1)))
        if loc is None:
            return None
        file_name = self.file_names.get(int(loc.get("file_name_id", -1)))
        line = loc.get("line")
        if file_name is None or line is None:
            return None
        function = self.function_names.get(int(loc.get("function_name_id", -1)))
        return SourceLocation(file=file_name, line=int(line), function=function)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        if "\\" not in text:
            # without an escape, JSON gives the characters between the quotes or fails
            # (and then they are taken as they are): the same either way
            return text[1:-1]
        try:
            return json.loads(text)
        except ValueError:
            return text[1:-1]
    return text


def _parse_tables(lines: list[str]) -> _SourceTables:
    tables = _SourceTables()
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in _TABLE_HEADERS:
            current = stripped
            continue
        if not stripped:
            current = None
            continue
        if current is None:
            continue
        row = _TABLE_ROW.match(stripped)
        if not row:
            continue
        index, rest = int(row.group(1)), row.group(2).strip()
        if current == "FileNames":
            tables.file_names[index] = _unquote(rest)
        elif current == "FunctionNames":
            tables.function_names[index] = _unquote(rest)
        else:
            fields = dict(_METADATA_FIELD.findall(rest))
            target = tables.file_locations if current == "FileLocations" else tables.stack_frames
            target[index] = fields
    return tables


# ----------------------------------------------------------------------------
# Instructions

_COMPUTATION_START = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*)?\{\s*$")
_INSTRUCTION_START = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPERAND_NAME = re.compile(r"%?([\w.\-]+)\s*$")
_CALL_KEYS = (
    "calls", "to_apply", "condition", "body", "true_computation",
    "false_computation", "branch_computations", "called_computations",
    "async_execution_thread",
)
_COMPUTATION_REF = re.compile(r"%?([\w.\-]+)")


# a quoted value as an unrolled loop (runs of plain characters, then one escape):
# several times faster than an alternation per character on long op_names
_METADATA_FIELD = re.compile(r'(\w+)=("[^"\\]*(?:\\.[^"\\]*)*"|[^\s}]+)')


def _parse_metadata(text: str, tables: _SourceTables) -> tuple[str | None, SourceLocation | None]:
    # metadata fields are separated by spaces, not commas: {op_name="a b" stack_frame_id=2};
    # dict() of the (key, value) pairs keeps the last of a repeated key
    fields = dict(_METADATA_FIELD.findall(text))
    op_name = _unquote(fields["op_name"]) if "op_name" in fields else None
    source: SourceLocation | None = None
    if "stack_frame_id" in fields:
        try:
            source = tables.location(int(fields["stack_frame_id"]))
        except ValueError:
            source = None
    if source is None and "source_file" in fields and "source_line" in fields:
        try:
            source = SourceLocation(_unquote(fields["source_file"]), int(fields["source_line"]))
        except ValueError:
            source = None
    return op_name, source


def _printable_except(excluded: str) -> str:
    """A regex class of the printable ASCII characters but the space and ``excluded``.

    The fast path matches ASCII only (``\\w`` and ``\\s`` cost several times more per
    character in ``re``); anything else goes the general way.
    """
    return "[" + "".join(re.escape(chr(c)) for c in range(0x21, 0x7F) if chr(c) not in excluded) + "]"


_STRING = r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"'  # as _string_end reads it: escapes, then the quote


def _balanced(depth: int) -> str:
    """A regex for what may stand between a pair of brackets: text, quoted strings and
    properly nested ``()``/``[]``/``{}`` groups, ``depth`` levels deep at most.

    Written as unrolled loops (a run of plain characters, then one string or
    group, then a run...) so a text that does not match fails in linear time.
    """
    plain = r'[^()\[\]{}"]*'
    inner = _STRING if depth == 0 else f"{_STRING}|{_group(depth - 1)}"
    return f"{plain}(?:(?:{inner}){plain})*"


def _group(depth: int) -> str:
    content = _balanced(depth)
    return rf"\({content}\)|\[{content}\]|\{{{content}\}}"


_NAME_CHARS = "[A-Za-z0-9_.\\-]"  # what [\w.\-] is, in ASCII
# The common layout of an instruction line, in one match: name, shape (an array
# token ended by a space, its braces balanced, or a tuple), opcode, operands
# (plain names, or anything balanced) and the attribute tail. A line this does
# not fit, or whose tail _ATTRIBUTE does not cover, goes through
# _parse_instruction_general; what the fast path accepts, both read the same way
# (tests/test_hlo.py compares them on every golden instruction).
_FAST_INSTRUCTION = re.compile(
    rf" *(ROOT )?%?({_NAME_CHARS}+) *= *"
    r"(?:("
    + _printable_except('"(){}')
    + r"+(?:\{"
    + _printable_except('"{}')
    + r"*\}"
    + _printable_except('"(){}')
    + r"*)*) |(\("
    + _balanced(2)
    + r"\)) *)"
    r"([A-Za-z0-9_\-]+)\("
    r"(?:([A-Za-z0-9_.%, \-]*)|(" + _balanced(2) + r"))\)"
    r"(.*)"
)
# one ", key=value" attribute, the value a plain token, a quoted string or a balanced
# group: an attribute tail made of nothing else splits at the same commas as _attributes
_ATTRIBUTE = re.compile(
    rf" *, *({_NAME_CHARS}+)=("
    + _printable_except('"(),[]{}')
    + "+|"
    + _STRING
    + "|"
    + _group(2)
    + ")"
)
# the last name of each comma-separated operand, as _OPERAND_NAME finds it per part
# (the operands are [A-Za-z0-9_.%, -] only when this is used)
_OPERAND_NAMES = re.compile(rf"({_NAME_CHARS}+) *(?=,|$)")
_CALL_KEY_SET = frozenset(_CALL_KEYS) - {"async_execution_thread"}


def _tuple_index(opcode: str, attrs: dict[str, str]) -> int | None:
    """The ``index=`` of a get-tuple-element (None for other opcodes, or an index that is not a number)."""
    if opcode != "get-tuple-element" or "index" not in attrs:
        return None
    try:
        return int(attrs["index"])
    except ValueError:
        return None


def _operand_names(operand_text: str) -> list[str]:
    """The ``%name`` of each top-level operand (operands may be typed: ``f32[4] %x``)."""
    names = []
    for part in _split_top_level(operand_text):
        found = _OPERAND_NAME.search(part.strip()) if part.strip() else None
        if found:
            names.append(found.group(1))
    return names


def _parse_instruction(
    line: str,
    tables: _SourceTables,
    metadata_cache: dict[str, tuple[str | None, SourceLocation | None]] | None = None,
) -> HloInstruction:
    """One instruction line: the common layout by one regex match, anything else by
    :func:`_parse_instruction_general`. ``metadata_cache`` (one per module, since the
    stack frames are) keeps the parse of each distinct ``metadata={...}`` text."""
    match = _FAST_INSTRUCTION.fullmatch(line)
    if match is None:
        return _parse_instruction_general(line, tables)
    root, name, array_shape, tuple_shape, opcode, simple_operands, operand_text, tail = match.groups()
    attrs: dict[str, str]
    if tail:
        parts = _ATTRIBUTE.split(tail)
        between = parts[::3]
        if any(between) and (any(between[:-1]) or not between[-1].isspace()):
            return _parse_instruction_general(line, tables)
        attrs = dict(zip(parts[1::3], parts[2::3]))
    else:
        attrs = {}
    parameter_number: int | None = None
    operands: list[str] = []
    if opcode == "parameter":
        try:
            parameter_number = int((operand_text if simple_operands is None else simple_operands).strip())
        except ValueError:
            parameter_number = None
    elif opcode != "constant":
        if simple_operands is not None:
            operands = _OPERAND_NAMES.findall(simple_operands)
        else:
            operands = _operand_names(operand_text)
    called: list[str] = []
    if not _CALL_KEY_SET.isdisjoint(attrs):
        for key in _CALL_KEYS:
            if key in attrs and key != "async_execution_thread":
                for ref in _COMPUTATION_REF.findall(attrs[key].strip("{}")):
                    called.append(ref)
    op_name, source = (None, None)
    metadata = attrs.get("metadata")
    if metadata is not None:
        if metadata_cache is None:
            op_name, source = _parse_metadata(metadata, tables)
        else:
            parsed = metadata_cache.get(metadata)
            if parsed is None:
                parsed = metadata_cache[metadata] = _parse_metadata(metadata, tables)
            op_name, source = parsed
    tuple_index = _tuple_index(opcode, attrs)
    return HloInstruction(
        name,
        opcode,
        array_shape if tuple_shape is None else tuple_shape,
        tuple(operands),
        tuple(called),
        root is not None,
        op_name,
        source,
        parameter_number,
        tuple_index,
        attrs.get("backend_config"),
    )


def _parse_instruction_general(line: str, tables: _SourceTables) -> HloInstruction:
    match = _INSTRUCTION_START.match(line)
    if not match:
        raise HloParseError(f"cannot read HLO instruction: {line.strip()[:160]!r}")
    is_root, name, rest = bool(match.group(1)), match.group(2), match.group(3)
    # shape: a tuple "( ... )" or one token
    if rest.startswith("("):
        end = _matching(rest, 0)
        shape, rest = rest[:end], rest[end:].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        # a layout may be printed with spaces inside braces in rare cases
        while shape.count("{") > shape.count("}") and rest:
            more, _, rest = rest.partition(" ")
            shape += " " + more
    paren = rest.find("(")
    if paren < 0:
        raise HloParseError(f"HLO instruction without operands: {line.strip()[:160]!r}")
    opcode = rest[:paren].strip()
    close = _matching(rest, paren)
    operand_text = rest[paren + 1:close - 1]
    tail = rest[close:]
    operands: list[str] = []
    parameter_number: int | None = None
    if opcode == "parameter":
        try:
            parameter_number = int(operand_text.strip())
        except ValueError:
            parameter_number = None
    elif opcode != "constant":
        operands = _operand_names(operand_text)
    attrs = _attributes(tail.lstrip(", "))
    called: list[str] = []
    for key in _CALL_KEYS:
        if key in attrs and key != "async_execution_thread":
            for ref in _COMPUTATION_REF.findall(attrs[key].strip("{}")):
                called.append(ref)
    op_name, source = (None, None)
    if "metadata" in attrs:
        op_name, source = _parse_metadata(attrs["metadata"], tables)
    tuple_index = _tuple_index(opcode, attrs)
    return HloInstruction(
        name=name,
        opcode=opcode,
        shape=shape.strip(),
        operands=tuple(operands),
        called=tuple(called),
        is_root=is_root,
        op_name=op_name,
        source=source,
        parameter_number=parameter_number,
        tuple_index=tuple_index,
        backend_config=attrs.get("backend_config"),
    )


def _loop_info(
    instruction: HloInstruction, computation: str, outer: LoopInfo | None = None
) -> LoopInfo:
    trip_count: int | None = None
    config = instruction.backend_config
    if config:
        text = config
        if text.startswith('"'):
            text = _unquote(text)
        try:
            data = json.loads(text)
            trip_count = int(data["known_trip_count"]["n"])
        except (ValueError, KeyError, TypeError):
            found = re.search(r'known_trip_count[^0-9]*?"?n"?\s*[:=]\s*"?(\d+)', text)
            trip_count = int(found.group(1)) if found else None
    return LoopInfo(
        instruction=instruction.name,
        computation=computation,
        trip_count=trip_count,
        source=instruction.source,
        outer=outer,
    )


# ----------------------------------------------------------------------------
# Module


# The check analyses the plain variant's text and --suggest reads it again: the
# last few parses are kept (a module is immutable), so a text is parsed once.
@functools.lru_cache(maxsize=4)
def parse_hlo_module(text: str) -> HloModule:
    """Parse the optimized HLO text of one module.

    Arguments:
        text: what ``jax.stages.Compiled.as_text()`` returns (the first module
            when several are printed).

    Returns:
        An :class:`HloModule` with every computation and instruction, the
        ``input_output_alias`` and ``buffer_donor`` entries of the header, and
        a source location for each instruction whose metadata names one.

    Raises:
        HloParseError: the text has no ``HloModule`` header or cannot be read.
    """
    # a module is a few hundred thousand small objects, all kept: the collector would
    # walk them again and again while they are built (a third of the time) and free
    # nothing, so it waits until the module is complete
    with _collector_paused():
        return _parse_module(text)


_PAUSE_LOCK = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the garbage collector while any parse runs (parses on several threads share one pause);
    the last one to finish restores it as it was before the first began."""
    global _pauses, _was_enabled
    with _PAUSE_LOCK:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def _parse_module(text: str) -> HloModule:
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith("HloModule")), None)
    if header_at is None:
        raise HloParseError("no 'HloModule' header: this is not HLO text")
    name, header = _parse_header(lines[header_at])
    # only the first module: another "HloModule" line starts the next one (when the
    # header holds the only "HloModule" of the text, there is none: no need to look)
    end_at = len(lines)
    if text.count("HloModule") > 1:
        end_at = next(
            (i for i in range(header_at + 1, len(lines)) if lines[i].startswith("HloModule")),
            len(lines),
        )
    body = lines[header_at + 1:end_at]
    tables = _parse_tables(body)
    metadata_cache: dict[str, tuple[str | None, SourceLocation | None]] = {}

    computations: list[HloComputation] = []
    current_name: str | None = None
    current_entry = False
    current: list[HloInstruction] = []
    pending = ""
    for raw in body:
        if current_name is None:
            start = _COMPUTATION_START.match(raw)
            if start and not raw.startswith(" "):
                current_name = start.group(2)
                current_entry = bool(start.group(1))
                current = []
            continue
        # "}" ends a computation; one run on another thread prints
        # '}, execution_thread="host"'
        stripped = raw.strip()
        if stripped == "}" or (raw.startswith("}") and raw[1:].lstrip().startswith(",")):
            computations.append(HloComputation(current_name, current_entry, tuple(current)))
            current_name = None
            if pending:
                raise HloParseError(f"truncated HLO instruction: {pending[:160]!r}")
            continue
        if not stripped:
            continue
        line = pending + raw if pending else raw
        try:
            current.append(_parse_instruction(line, tables, metadata_cache))
            pending = ""
        except HloParseError:
            # an instruction printed over several lines: keep reading
            if line.count("(") + line.count("{") > line.count(")") + line.count("}"):
                pending = line + " "
                continue
            raise
    if current_name is not None:
        raise HloParseError(f"computation {current_name!r} is not closed")
    if not computations:
        raise HloParseError("the HLO module has no computations")
    if not any(c.is_entry for c in computations):
        raise HloParseError("the HLO module has no ENTRY computation")

    aliases = tuple(
        AliasEntry(
            output_index=_index_tuple(m.group(1)),
            parameter_number=int(m.group(2)),
            parameter_index=_index_tuple(m.group(3)),
            kind=m.group(4) or "may-alias",
        )
        for m in _ALIAS_ENTRY.finditer(header["input_output_alias"] or "")
    )
    donors = tuple(
        (int(m.group(1)), _index_tuple(m.group(2)))
        for m in _DONOR_ENTRY.finditer(header["buffer_donor"] or "")
    )
    params: tuple[str, ...] = ()
    result: str | None = None
    layout = header["entry_computation_layout"]
    if layout:
        inner = layout.strip()[1:-1] if layout.strip().startswith("{") else layout
        arrow = _split_top_level(inner, ">")
        if len(arrow) == 2 and arrow[0].endswith("-"):
            params_text = arrow[0][:-1].strip()
            if params_text.startswith("("):
                params = tuple(p.strip() for p in _split_top_level(params_text[1:-1]) if p.strip())
            result = arrow[1].strip()
    return HloModule(
        name=name,
        computations=tuple(computations),
        aliases=aliases,
        buffer_donors=donors,
        is_scheduled=(header["is_scheduled"] or "").strip() == "true",
        entry_parameter_shapes=params,
        entry_result_shape=result,
    )


# ----------------------------------------------------------------------------
# Copies

# views and copies of a value: what they hold comes from their first operand
_TRANSPARENT = ("bitcast", "get-tuple-element", "copy", "copy-start", "copy-done")


def _trace_parameter(
    name: str, by_name: dict[str, HloInstruction]
) -> tuple[int | None, tuple[int, ...]]:
    """The entry parameter (number, tuple index) a value is a view of, if any."""
    index: list[int] = []
    seen = 0
    while name in by_name and seen < 64:
        seen += 1
        instruction = by_name[name]
        if instruction.opcode == "parameter":
            return instruction.parameter_number, tuple(reversed(index))
        if instruction.opcode not in _TRANSPARENT or not instruction.operands:
            return None, ()
        if instruction.opcode == "get-tuple-element" and instruction.tuple_index is not None:
            index.append(instruction.tuple_index)
        name = instruction.operands[0]
    return None, ()


def _output_positions(
    name: str, computation: HloComputation, by_name: dict[str, HloInstruction]
) -> tuple[tuple[int, ...], ...]:
    """Output tuple indices at which the value ``name`` is returned directly."""
    root = computation.root
    if root is None:
        return ()
    if root.name == name:
        return ((),)
    positions: list[tuple[int, ...]] = []

    def walk(instr: HloInstruction, prefix: tuple[int, ...]) -> None:
        if instr.opcode != "tuple":
            return
        for i, operand in enumerate(instr.operands):
            if operand == name:
                positions.append(prefix + (i,))
            elif operand in by_name:
                walk(by_name[operand], prefix + (i,))

    walk(root, ())
    return tuple(positions)


def find_copies(module: HloModule) -> list[CopySite]:
    """Every ``copy``/``copy-start`` XLA kept, with what it copies and where.

    The source line is the copy's own metadata when it has one; XLA usually
    inserts copies without metadata, so it falls back to the instruction that
    produced the copied value, then to the first instruction that reads the
    copy (for a copied input that is the update which needed it);
    ``source_role`` says which ("copy", "operand", "user"). A copy that is
    returned as an output is marked ``feeds_output``. An async copy is
    reported once, at its ``copy-start``; what reads or returns it is its
    ``copy-done``. Copies inside fusion bodies are register moves, not
    buffers, and are left out. A copy in a while body or condition (or in
    anything they call) has ``loop`` set, for the innermost loop.
    """
    loops = module.loop_bodies()
    entry_name = module.entry.name
    # inside a fusion a copy is a register move, not a buffer of its own
    fusion_bodies = _fusion_bodies(module)
    copies: list[CopySite] = []
    for computation in module.computations:
        if computation.name in fusion_bodies:
            continue
        by_name = computation.by_name()
        users = computation.users()
        for instruction in computation.instructions:
            if instruction.opcode not in ("copy", "copy-start"):
                continue
            operand = instruction.operands[0] if instruction.operands else None
            parameter_number: int | None = None
            parameter_index: tuple[int, ...] = ()
            if operand is not None and computation.name == entry_name:
                parameter_number, parameter_index = _trace_parameter(operand, by_name)
            shape = instruction.shape
            if instruction.opcode == "copy-start":
                # copy-start returns (destination, source, context): the copied array is element 0
                elements = tuple_elements(shape)
                shape = elements[0] if elements else shape
            operand_shape = by_name[operand].shape if operand in by_name else None
            layout_change = bool(
                operand_shape is not None
                and _layout(operand_shape) is not None
                and _layout(shape) is not None
                and _layout(operand_shape) != _layout(shape)
            )
            source, role = instruction.source, "copy" if instruction.source else None
            if source is None and operand in by_name and by_name[operand].opcode != "parameter":
                source, role = by_name[operand].source, "operand" if by_name[operand].source else None
            if source is None:
                source = reader_source(instruction.name, users)
                role = "user" if source is not None else None
            # an async copy's value is its copy-done: that is what is read and returned
            copied = instruction.name
            if instruction.opcode == "copy-start":
                done = [u for u in users.get(instruction.name, []) if u.opcode == "copy-done"]
                copied = done[0].name if done else copied
            if source is None and copied != instruction.name:
                source = reader_source(copied, users)
                role = "user" if source is not None else None
            outputs = (
                _output_positions(copied, computation, by_name)
                if computation.name == entry_name
                else ()
            )
            copies.append(
                CopySite(
                    instruction=instruction.name,
                    computation=computation.name,
                    shape=shape,
                    bytes=shape_bytes(shape),
                    operand=operand,
                    parameter_number=parameter_number,
                    parameter_index=parameter_index,
                    layout_change=layout_change,
                    loop=loops.get(computation.name),
                    source=source,
                    source_role=role,
                    feeds_output=bool(outputs),
                    output_indices=outputs,
                )
            )
    return copies


def reader_source(
    name: str, users: dict[str, list[HloInstruction]]
) -> SourceLocation | None:
    """Source of the nearest reader of ``name``, looking through tuples and views.

    ``users`` is :meth:`HloComputation.users` of the computation holding ``name``.
    XLA inserts copies without metadata; the line of the update that reads one
    is what the user can act on.
    """
    frontier = [name]
    seen = {name}
    for _depth in range(4):
        following: list[str] = []
        for value in frontier:
            for user in users.get(value, []):
                if user.source is not None:
                    return user.source
                if user.opcode in ("tuple", "bitcast", "get-tuple-element") and user.name not in seen:
                    seen.add(user.name)
                    following.append(user.name)
        frontier = following
    return None


def _fusion_bodies(module: HloModule) -> set[str]:
    """Computations that are the inside of a fusion (no buffers of their own)."""
    by_name = {c.name: c for c in module.computations}
    frontier: list[str] = []
    for computation in module.computations:
        for instruction in computation.instructions:
            if instruction.opcode == "fusion":
                frontier.extend(instruction.called)
    bodies: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name in bodies or name not in by_name:
            continue
        bodies.add(name)
        for instruction in by_name[name].instructions:
            frontier.extend(instruction.called)
    return bodies


def output_values(module: HloModule) -> list[HloInstruction | None]:
    """The entry instruction that produces each output leaf, in output order.

    jax returns a flat tuple of leaves; a non-tuple root is a single output.
    """
    entry = module.entry
    by_name = entry.by_name()
    root = entry.root
    if root is None:
        return []
    if root.opcode != "tuple":
        return [root]
    return [by_name.get(operand) for operand in root.operands]


SLICE_UPDATES = ("dynamic-update-slice", "scatter")


def slice_update_kind(module: HloModule, instruction: HloInstruction | None) -> str | None:
    """``dynamic-update-slice`` or ``scatter`` when ``instruction``'s value is such an update of a
    buffer (directly, as a fusion's root, or as a loop's carry updated so in the body), else None.

    These are the outputs whose HLO looks in place while writing only a slice: the in-place probe
    (``--probe``) times them.
    """
    by_computation = {c.name: c for c in module.computations}
    seen: set[tuple[str, int | None]] = set()
    current, index = instruction, None  # index: the tuple element followed into a tuple-valued root
    computation_of: dict[str, HloComputation] = {}
    while current is not None and (current.name, index) not in seen:
        seen.add((current.name, index))
        if current.opcode in SLICE_UPDATES and index is None:
            return current.opcode
        if current.opcode == "get-tuple-element" and current.operands and index is None:
            index = current.tuple_index
            current = _find(module, current.operands[0], computation_of)
            continue
        if current.opcode == "tuple" and index is not None and index < len(current.operands):
            current, index = _find(module, current.operands[index], computation_of), None
            continue
        if current.opcode in ("fusion", "while"):
            bodies = [by_computation[c] for c in current.called if c in by_computation]
            if current.opcode == "while":
                bodies = [b for b in bodies if b.root is not None and b.root.shape == current.shape]
            if not bodies or bodies[0].root is None:
                return None
            body = bodies[0]
            for member in body.instructions:
                computation_of[member.name] = body
            current = body.root
            continue
        return None
    return None


def _find(module: HloModule, name: str, hint: dict[str, "HloComputation"]) -> HloInstruction | None:
    if name in hint:
        return hint[name].by_name().get(name)
    return module.entry.by_name().get(name)


def output_parameters(module: HloModule) -> list[frozenset[tuple[int, tuple[int, ...]]]]:
    """For each output leaf, the entry parameters its value is computed from.

    Each is ``(parameter_number, index)``: ``index`` is ``()`` for an array
    parameter and ``(k,)`` for element ``k`` of a tuple parameter read through
    ``get-tuple-element``. The walk follows operands inside the entry
    computation only, so a fusion, call or loop counts as reading everything
    passed to it (a superset, never a miss). The donation advisor prefers to
    pair an output with an input it is computed from.
    """
    entry = module.entry
    by_name = entry.by_name()
    memo: dict[str, frozenset[tuple[int, tuple[int, ...]]]] = {}

    def reads(start: HloInstruction) -> frozenset[tuple[int, tuple[int, ...]]]:
        found: set[tuple[int, tuple[int, ...]]] = set()
        stack, seen = [start], set()
        while stack:
            instruction = stack.pop()
            if instruction.name in seen:
                continue
            seen.add(instruction.name)
            if instruction.name in memo:
                found |= memo[instruction.name]
                continue
            if instruction.opcode == "parameter" and instruction.parameter_number is not None:
                found.add((instruction.parameter_number, ()))
                continue
            if instruction.opcode == "get-tuple-element" and instruction.tuple_index is not None:
                operand = by_name.get(instruction.operands[0]) if instruction.operands else None
                if operand is not None and operand.opcode == "parameter" and operand.parameter_number is not None:
                    found.add((operand.parameter_number, (instruction.tuple_index,)))
                    continue
            stack.extend(by_name[o] for o in instruction.operands if o in by_name)
        result = frozenset(found)
        memo[start.name] = result
        return result

    return [reads(value) if value is not None else frozenset() for value in output_values(module)]


def value_source(module: HloModule, instruction: HloInstruction | None) -> SourceLocation | None:
    """Source line of an entry value: its own metadata, else that of what it views or copies."""
    return view_source(instruction, module.entry.by_name())


def view_source(
    instruction: HloInstruction | None,
    by_name: dict[str, HloInstruction],
    views: tuple[str, ...] = _TRANSPARENT,
) -> SourceLocation | None:
    """Source line of a value in one computation, looking through the ``views`` opcodes."""
    seen = 0
    while instruction is not None and seen < 16:
        seen += 1
        if instruction.source is not None:
            return instruction.source
        if instruction.opcode not in views or not instruction.operands:
            return None
        instruction = by_name.get(instruction.operands[0])
    return None
