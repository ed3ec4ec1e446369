"""HLO text -> :class:`~.model.HloModule`: the one place that knows how the text is laid out.

Reads what ``Compiled.as_text()`` returns (XLA's optimized, scheduled HLO
module) and nothing else. Pure, no jax: it is tested on golden text without
compiling anything. The layout of the text shifts between XLA
versions; everything that reads it lives here, and a field that is missing is
reported as missing rather than guessed.

Two generations of source metadata are understood: the older inline
``source_file="..." source_line=N`` and the newer ``stack_frame_id=N`` that
points into the ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames``
tables printed after the module header. A stack frame's own file location is
its source, and its ``parent_frame_id`` chain gives the frames that called it
(:attr:`~.model.SourceLocation.callers`). As printed by jax 0.10.2's XLA, a
parent id is one more than the frame it names, and a root frame prints 1
(its own id): the module proto's ``stack_frame_index`` of the same compile
holds the true ids (0 for a root), which tests/findings/test_sources.py compares. The
text says which way it is printed by its first frame, always a root: parent 1
(shifted) or 0 (as in the proto); a table that says neither gets no callers.

Only the first module is read when the text holds several. Instruction and
computation names are read with or without the ``%`` prefix, and operands
may carry their shape inline (``f32[3]{0} %x``). Text that is cut off or is
not HLO raises :class:`HloParseError`.

Each instruction line goes through a fast path (one regex match of the common
layout) or, when that does not fit, the general path; what the fast path
accepts, both read the same way (tests/xla/test_hlo.py compares them on every
golden instruction).
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from .model import AliasEntry, HloComputation, HloInstruction, HloModule, SourceLocation
from .text import HloParseError, matching_bracket, split_top_level, unquote
from .validate import check_structure

__all__ = ["HloParser", "parse_hlo_module"]


# ----------------------------------------------------------------------------
# Attributes


def _attributes(text: str) -> dict[str, str]:
    """``key=value`` pairs of the attribute tail of an instruction or header."""
    result: dict[str, str] = {}
    for part in split_top_level(text, strict=True):
        key, sep, value = part.strip().partition("=")
        if sep:
            result[key.strip()] = value.strip()
    return result


def _index_tuple(text: str) -> tuple[int, ...]:
    text = text.strip().strip("{}").strip()
    return tuple(int(x) for x in text.split(",") if x.strip())


# ----------------------------------------------------------------------------
# Header and source tables

_ALIAS_ENTRY = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*(?:,\s*([\w-]+))?\s*\)")
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
        return header[start : matching_bracket(header, start)]
    end = header.find(",", start)
    return header[start : end if end >= 0 else len(header)]


def _parse_header(header: str) -> tuple[str, dict[str, str | None]]:
    body = header[len("HloModule") :].strip()
    name = body.split(",", 1)[0].strip()
    keys = ("input_output_alias", "buffer_donor", "is_scheduled", "entry_computation_layout")
    return name, {key: _header_value(body, key) for key in keys}


_MAX_STACK = 256  # frames followed up a parent chain (jax records 100 at most by default)


@dataclass
class _SourceTables:
    file_names: dict[int, str] = field(default_factory=dict)
    function_names: dict[int, str] = field(default_factory=dict)
    file_locations: dict[int, dict[str, str]] = field(default_factory=dict)
    stack_frames: dict[int, dict[str, str]] = field(default_factory=dict)
    _locations: dict[int, SourceLocation | None] = field(default_factory=dict)

    def key(self) -> str:
        """The tables as one text: two modules with equal keys read every source location alike."""
        return repr((self.file_names, self.function_names, self.file_locations, self.stack_frames))

    def location(self, frame_id: int) -> SourceLocation | None:
        """The source of stack frame ``frame_id``, with the frames that called it (built once per frame)."""
        if frame_id in self._locations:
            return self._locations[frame_id]
        # the chain up to the first frame already built (or a root), then built from the top down
        chain: list[int] = []
        current: int | None = frame_id
        while current is not None and current not in self._locations and current not in chain:
            if len(chain) >= _MAX_STACK:
                break
            chain.append(current)
            current = self._parent(current)
        above = self._locations.get(current) if current is not None else None
        for frame in reversed(chain):
            own = self._own_location(frame)
            if own is not None and above is not None:
                own = SourceLocation(own.file, own.line, own.function, above.stack)
            self._locations[frame] = own
            # a frame without a readable location ends the known stack below it
            above = own
        return self._locations[frame_id]

    def _own_location(self, frame_id: int) -> SourceLocation | None:
        frame = self.stack_frames.get(frame_id)
        if frame is None:
            return None
        try:
            loc = self.file_locations.get(int(frame.get("file_location_id", -1)))
            if loc is None:
                return None
            file_name = self.file_names.get(int(loc.get("file_name_id", -1)))
            line = loc.get("line")
            if file_name is None or line is None:
                return None
            function = self.function_names.get(int(loc.get("function_name_id", -1)))
            return SourceLocation(file=file_name, line=int(line), function=function)
        except ValueError:
            return None

    @cached_property
    def _parent_shift(self) -> int | None:
        """How parent ids are printed: 1 (one more than the frame they name, a root prints 1),
        0 (as in the proto, a root prints 0), or None (unknown: the stacks are not followed).
        Frame 1 is the first frame of the table, so it is a root either way."""
        first = self.stack_frames.get(1)
        printed = first.get("parent_frame_id") if first is not None else None
        return {"1": 1, "0": 0}.get(printed or "")

    def _parent(self, frame_id: int) -> int | None:
        """The frame that called ``frame_id`` (None for a root, or when the table does not say)."""
        shift = self._parent_shift
        frame = self.stack_frames.get(frame_id)
        if shift is None or frame is None:
            return None
        try:
            parent = int(frame.get("parent_frame_id", "0")) - shift
        except ValueError:
            return None
        # parents are written before their children: a parent id at or past its child's is not one
        return parent if 0 < parent < frame_id else None


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
            tables.file_names[index] = unquote(rest)
        elif current == "FunctionNames":
            tables.function_names[index] = unquote(rest)
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
    "calls",
    "to_apply",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "branch_computations",
    "called_computations",
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
    op_name = unquote(fields["op_name"]) if "op_name" in fields else None
    source: SourceLocation | None = None
    if "stack_frame_id" in fields:
        try:
            source = tables.location(int(fields["stack_frame_id"]))
        except ValueError:
            source = None
    if source is None and "source_file" in fields and "source_line" in fields:
        try:
            source = SourceLocation(unquote(fields["source_file"]), int(fields["source_line"]))
        except ValueError:
            source = None
    return op_name, source


def _printable_except(excluded: str) -> str:
    """A regex class of the printable ASCII characters but the space and ``excluded``.

    The fast path matches ASCII only (``\\w`` and ``\\s`` cost several times more per
    character in ``re``); anything else goes the general way.
    """
    return "[" + "".join(re.escape(chr(c)) for c in range(0x21, 0x7F) if chr(c) not in excluded) + "]"


_STRING = r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"'  # as string_end reads it: escapes, then the quote


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
# (tests/xla/test_hlo.py compares them on every golden instruction).
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
    rf" *, *({_NAME_CHARS}+)=(" + _printable_except('"(),[]{}') + "+|" + _STRING + "|" + _group(2) + ")"
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
    for part in split_top_level(operand_text):
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
        end = matching_bracket(rest, 0)
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
    close = matching_bracket(rest, paren)
    operand_text = rest[paren + 1 : close - 1]
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


# ----------------------------------------------------------------------------
# Module


class HloParser:
    """Parses optimized HLO text, and keeps what it parsed for the next text it is given.

    fieldmem parses a target's plain and donated programs one after the other,
    and they share almost every line; ``--suggest`` reads the plain text
    again. A parser keeps the last ``keep`` modules it parsed (a text given
    again is not parsed again: a module is immutable) and, of the module it
    parsed last, each instruction line with the record it parsed to and each
    computation that passed :func:`~.validate.check_structure`, under that
    module's source tables (a line means the same under the same tables).
    A line of the next text found there is taken as it parsed; a computation
    all of whose lines are taken, in the same order, is taken whole, with what
    it built of itself (instructions by name, users), and its operands are not
    checked again.

    Whoever parses owns its parser (the checker makes one per target), so
    nothing is shared between targets. One parser may be used from several
    threads: a lock lets one parse at a time read and replace what it keeps.

    Callers building many records pause the collector around a parse
    (:mod:`fieldmem.model.collector`); this package does not reach outside itself to
    do it.
    """

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._modules: OrderedDict[str, HloModule] = OrderedDict()
        self._lines: tuple[str, dict[str, HloInstruction]] = ("", {})
        self._computations: tuple[str, dict[str, HloComputation]] = ("", {})
        #: texts parsed (not taken from the modules kept), for tests and benchmarks
        self.parsed = 0

    def parse(self, text: str) -> HloModule:
        """:func:`parse_hlo_module` of ``text``, with what this parser kept."""
        with self._lock:
            module = self._modules.get(text)
            if module is not None:
                self._modules.move_to_end(text)
                return module
            module = self._parse_module(text)
            self.parsed += 1
            if self._keep > 0:
                self._modules[text] = module
                while len(self._modules) > self._keep:
                    self._modules.popitem(last=False)
            return module

    def _parse_module(self, text: str) -> HloModule:
        header_line, body = _first_module(text)
        name, header = _parse_header(header_line)
        tables = _parse_tables(body)
        computations = self._parse_computations(body, tables)
        # unknown operands, cycles, runaway nesting: HloStructureError (a computation taken whole from the
        # module parsed before passed there: its operands are not checked again)
        check_structure(computations, checked={id(c) for c in computations if self._taken_whole(c)})
        self._computations = (tables.key(), {c.name: c for c in computations})  # only once they passed
        params, result = _entry_layout(header["entry_computation_layout"])
        return HloModule(
            name=name,
            computations=tuple(computations),
            aliases=_alias_entries(header["input_output_alias"]),
            buffer_donors=tuple(
                (int(m.group(1)), _index_tuple(m.group(2))) for m in _DONOR_ENTRY.finditer(header["buffer_donor"] or "")
            ),
            is_scheduled=(header["is_scheduled"] or "").strip() == "true",
            entry_parameter_shapes=params,
            entry_result_shape=result,
        )

    def _taken_whole(self, computation: HloComputation) -> bool:
        """Whether ``computation`` is one of the module parsed before (the same object)."""
        return self._computations[1].get(computation.name) is computation

    def _same_computation(
        self, name: str, is_entry: bool, instructions: list[HloInstruction], key: str
    ) -> HloComputation | None:
        """The computation ``name`` of the module parsed last when it is these very instructions (None otherwise)."""
        if self._computations[0] != key:
            return None
        before = self._computations[1].get(name)
        if before is None or before.is_entry != is_entry or len(before.instructions) != len(instructions):
            return None
        if all(a is b for a, b in zip(before.instructions, instructions)):
            return before
        return None

    def _parse_computations(self, body: list[str], tables: _SourceTables) -> list[HloComputation]:
        """Every computation of the module body, its instructions parsed line by line (a line the module
        parsed last also had, under the same source tables, is taken as it parsed there; so is a
        computation made of such lines only, in the same order)."""
        key = tables.key()
        previous = self._lines[1] if self._lines[0] == key else {}
        seen: dict[str, HloInstruction] = {}
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
                same = self._same_computation(current_name, current_entry, current, key) if previous else None
                computations.append(same or HloComputation(current_name, current_entry, tuple(current)))
                current_name = None
                if pending:
                    raise HloParseError(f"truncated HLO instruction: {pending[:160]!r}")
                continue
            if not stripped:
                continue
            line = pending + raw if pending else raw
            known = previous.get(line)
            if known is not None:
                seen[line] = known
                current.append(known)
                pending = ""
                continue
            try:
                instruction = _parse_instruction(line, tables, metadata_cache)
                seen[line] = instruction
                current.append(instruction)
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
        self._lines = (key, seen)
        return computations


def parse_hlo_module(text: str, parser: HloParser | None = None) -> HloModule:
    """Parse the optimized HLO text of one module.

    Arguments:
        text: what ``jax.stages.Compiled.as_text()`` returns (the first module
            when several are printed).
        parser: the :class:`HloParser` to parse with, sharing what it kept of
            the texts it parsed before; None parses from scratch and keeps nothing.

    Returns:
        An :class:`HloModule` with every computation and instruction, the
        ``input_output_alias`` and ``buffer_donor`` entries of the header, and
        a source location for each instruction whose metadata names one.

    Raises:
        HloParseError: the text has no ``HloModule`` header or cannot be read.
    """
    return (parser if parser is not None else HloParser(keep=0)).parse(text)


def _first_module(text: str) -> tuple[str, list[str]]:
    """The header line and the body lines of the first module of ``text``."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith("HloModule")), None)
    if header_at is None:
        raise HloParseError("no 'HloModule' header: this is not HLO text")
    # only the first module: another "HloModule" line starts the next one (when the
    # header holds the only "HloModule" of the text, there is none: no need to look)
    end_at = len(lines)
    if text.count("HloModule") > 1:
        end_at = next(
            (i for i in range(header_at + 1, len(lines)) if lines[i].startswith("HloModule")),
            len(lines),
        )
    return lines[header_at], lines[header_at + 1 : end_at]


def _alias_entries(text: str | None) -> tuple[AliasEntry, ...]:
    """The header's ``input_output_alias={ {0}: (0, {}, may-alias), ... }`` entries."""
    return tuple(
        AliasEntry(
            output_index=_index_tuple(m.group(1)),
            parameter_number=int(m.group(2)),
            parameter_index=_index_tuple(m.group(3)),
            kind=m.group(4) or "may-alias",
        )
        for m in _ALIAS_ENTRY.finditer(text or "")
    )


# the plain and the donated program of a check have the same layout (a shape per leaf): read once
@functools.lru_cache(maxsize=4)
def _entry_layout(layout: str | None) -> tuple[tuple[str, ...], str | None]:
    """The entry's parameter shapes and result shape, from ``entry_computation_layout``."""
    params: tuple[str, ...] = ()
    result: str | None = None
    if layout:
        inner = layout.strip()[1:-1] if layout.strip().startswith("{") else layout
        arrow = split_top_level(inner, ">")
        if len(arrow) == 2 and arrow[0].endswith("-"):
            params_text = arrow[0][:-1].strip()
            if params_text.startswith("("):
                params = tuple(p.strip() for p in split_top_level(params_text[1:-1]) if p.strip())
            result = arrow[1].strip()
    return params, result
